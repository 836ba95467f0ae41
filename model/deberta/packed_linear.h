// PackedLinear: a Linear layer (y = act(x W^T + b [+ residual])) for CPU
// inference through the pre-packed oneDNN matmul of dense_onednn.h, on
// torch tensors. Packed once from constant weights; Forward is const and
// thread safe. Used by the DeBERTa and ALBERT encoders for their dense
// layers (fused QKV, attention output, intermediate + GELU, output +
// residual) when Options::Kernels::linear is on and DSERVE_PACKED_LINEAR is
// not "0"; under autograd (training) they keep torch ops.
#pragma once

#include <memory>
#include <string>

#include <torch/types.h>

#include "absl/strings/string_view.h"
#include "model/deberta/dense_onednn.h"

namespace dserve {

// False when the environment sets DSERVE_PACKED_LINEAR=0 (read once): the
// encoders then run their dense layers as before (oneDNN sgemm in fp32,
// torch ops in bf16, LibTorch's linear_dynamic in int8: cpu_kernels.h,
// Int8Linear), for A/B benchmarks (`dserve bench encoder`).
bool PackedLinearEnabled();

// The oneDNN post-op for an activation named as Hugging Face's ACT2FN names
// it: gelu / gelu_python -> GELU (erf); gelu_new / gelu_fast /
// gelu_pytorch_tanh -> GELU (tanh); relu; anything else kNone (the caller
// applies it itself).
DenseActivation DenseActivationByName(absl::string_view hidden_act);

class PackedLinear {
 public:
  PackedLinear() = default;
  // weight [N, K] float32 or bfloat16 on CPU, bias [N] (any float dtype,
  // kept in float32) or undefined. The activations x and y take weight's
  // dtype. `residual`: Forward takes a residual and adds it in the GEMM
  // (before `activation`). Throws c10::Error when the tensors are not like
  // that or oneDNN refuses.
  static PackedLinear Pack(const torch::Tensor& weight, const torch::Tensor& bias,
                           DenseActivation activation = DenseActivation::kNone, bool residual = false);
  // Whether Pack can take a weight of this dtype on this device here
  // (oneDNN built in with a brgemm matmul for it: a CPU with AVX-512;
  // PackedDense::Available).
  static bool Supports(const torch::Tensor& weight);

  bool defined() const { return dense_ != nullptr; }
  DenseActivation activation() const;
  // x on CPU in the weight's dtype, [..., K], autograd off; in fp32 only up
  // to kMaxFp32Rows rows: above that oneDNN's sgemm was as fast or faster
  // (1 thread, v3-base: 8x128 1.01x, 8x512 0.80x; docs/performance.md).
  bool Applies(const torch::Tensor& x) const;
  static constexpr int64_t kMaxFp32Rows = 512;
  // x [..., K] -> [..., N]. Without `residual` only when packed without one.
  torch::Tensor Forward(const torch::Tensor& x) const;
  // With `residual` ([..., N] like the result, contiguous, in the weight's
  // dtype): y = act(x W^T + b + residual), written INTO residual's storage
  // and returned (the residual is consumed: only for a temporary nobody
  // else reads afterwards).
  torch::Tensor Forward(const torch::Tensor& x, torch::Tensor residual) const;
  // The oneDNN implementation for m rows on this thread (ONEDNN_VERBOSE's
  // name, e.g. "brg:avx512_core").
  std::string Implementation(int64_t m) const;

 private:
  std::shared_ptr<const PackedDense> dense_;
  torch::ScalarType dtype_ = torch::kFloat;
};

}  // namespace dserve
