// Pre-packed dense layers for CPU inference (issue 27): y = act(x W^T + b
// [+ y]) through oneDNN's matmul primitive, with the constant weight
// reordered ONCE, at Create, into the blocked layout the primitive asks for
// (weights memory::format_tag::any: BA16a64b in fp32, BA16a64b2a in bf16 on
// AVX-512, where the brgemm implementation runs). The bias, the activation
// (GELU erf / tanh, ReLU: eltwise post-ops) and a residual (a sum post-op:
// y holds the residual on entry and is overwritten in place) are applied
// in the GEMM's epilogue, not as separate passes over the activations.
//
// Without this, dnnl_sgemm's no-copy path repacks W on every call (266
// GFLOP/s at M = 128 against 383 at M = 4096 on the 2-core EPYC).
//
// Primitives are built per (rows M, OpenMP threads) on first use and cached
// (a primitive for a runtime M is oneDNN's plain gemm, not brgemm, in the
// oneDNN 2.6 this builds against); Forward is const and thread safe (the
// cache is behind a shared mutex, the scratchpad is the calling thread's).
//
// No LibTorch in this header (raw row-major buffers); model/deberta/
// packed_linear.h is the torch-facing wrapper the encoders use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dserve {

enum class DenseType { kF32, kBF16 };  // x, W and y; bf16 as raw 16-bit values
enum class DenseActivation { kNone, kGeluErf, kGeluTanh, kRelu };

class PackedDense {
 public:
  struct Spec {
    int64_t in = 0;   // K
    int64_t out = 0;  // N
    DenseType type = DenseType::kF32;
    DenseActivation activation = DenseActivation::kNone;
    // y = act(x W^T + b + y_in): y holds the residual on entry.
    bool residual = false;
  };

  // Whether oneDNN (built in) has a matmul for `type` on this CPU that is
  // neither a reference kernel nor its plain gemm (probed once per type):
  // brgemm, which needs AVX-512 (avx512_core; bf16 natively avx512_bf16 or
  // AMX). On an AVX2-only CPU fp32 is then not packed: oneDNN 2.6 offers only
  // its gemm there, slower through the matmul primitive than LibTorch's path
  // (dense_onednn.cc, PacksWeights).
  static bool Available(DenseType type);

  // weight row-major [out, in] in spec.type, bias [out] float32 or null
  // (copied: neither is referenced afterwards). Throws std::runtime_error
  // when oneDNN is missing or refuses the problem.
  static std::unique_ptr<PackedDense> Create(const Spec& spec, const void* weight, const float* bias);

  ~PackedDense();
  PackedDense(const PackedDense&) = delete;
  PackedDense& operator=(const PackedDense&) = delete;

  // x [m, in] and y [m, out] row-major, contiguous, in spec().type; m >= 0
  // (0: nothing to do). `threads`: the OpenMP threads oneDNN will run on
  // this thread (1 inside a parallel region), part of the primitive cache's
  // key. Throws std::runtime_error on a oneDNN error.
  void Forward(const void* x, int64_t m, void* y, int threads) const;

  const Spec& spec() const;
  // The implementation oneDNN picked for m rows (e.g. "brg:avx512_core"),
  // building the primitive if needed; for tests and reports.
  std::string Implementation(int64_t m, int threads) const;
  // Distinct primitives cached so far (tests).
  size_t CachedPrimitives() const;
  // Bytes of the packed weight.
  size_t PackedBytes() const;

 private:
  struct Impl;
  explicit PackedDense(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};


// The int8 counterpart for `--dtype int8` (cpu_kernels.h, Int8Linear): y =
// a * scale[j] * sum_k (x_q[i, k] - z) * W_q[j, k] + bias[j], x_q uint8 with
// one (a, z) per call, W_q int8 per output channel, y float32. The weight is
// reordered once into the layout oneDNN's brgemm int8 matmul wants (VNNI
// blocked); the per-channel scales are fixed at Create, so oneDNN keeps
// brgemm (in oneDNN 2.6 runtime output scales send it to its plain gemm).
// The per-call activation scale a is a scalar binary_mul post-op, the bias
// a per-channel binary_add, z a runtime source zero point. Primitives are
// cached per (rows, threads) and per layer (they hold its scales); callers
// pad the rows to a multiple of kRowQuantum so that a server's varying
// lengths share a few.
class PackedDenseInt8 {
 public:
  static constexpr int64_t kRowQuantum = 16;

  // Whether oneDNN (built in) runs this problem with a non-reference
  // implementation that is not its plain gemm (brgemm with VNNI or AMX),
  // probed once.
  static bool Available();

  // weight row-major [out, in] int8 (values in [-127, 127]), scales [out]
  // > 0, bias [out] float32 or null (all copied). Throws std::runtime_error
  // when oneDNN is missing or refuses.
  static std::unique_ptr<PackedDenseInt8> Create(int64_t in, int64_t out, const int8_t* weight, const float* scales,
                                                 const float* bias);
  ~PackedDenseInt8();
  PackedDenseInt8(const PackedDenseInt8&) = delete;
  PackedDenseInt8& operator=(const PackedDenseInt8&) = delete;

  // x [m, in] uint8 row-major, y [m, out] float32; `zero_point` z in [0,
  // 255], `scale` a > 0; threads as PackedDense::Forward.
  void Forward(const uint8_t* x, int64_t m, int32_t zero_point, float scale, float* y, int threads) const;
  int64_t in() const;
  int64_t out() const;
  std::string Implementation(int64_t m, int threads) const;

 private:
  struct Impl;
  explicit PackedDenseInt8(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dserve
