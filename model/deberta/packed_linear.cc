#include "model/deberta/packed_linear.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

namespace dserve {
namespace {

DenseType TypeOf(torch::ScalarType t) { return t == torch::kBFloat16 ? DenseType::kBF16 : DenseType::kF32; }

// The OpenMP threads oneDNN runs on this thread: one inside a parallel
// region (oneDNN does not nest).
int Threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

}  // namespace

bool PackedLinearEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("DSERVE_PACKED_LINEAR");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

DenseActivation DenseActivationByName(absl::string_view name) {
  if (name == "gelu" || name == "gelu_python") return DenseActivation::kGeluErf;
  if (name == "gelu_new" || name == "gelu_fast" || name == "gelu_pytorch_tanh") return DenseActivation::kGeluTanh;
  if (name == "relu") return DenseActivation::kRelu;
  return DenseActivation::kNone;
}

bool PackedLinear::Supports(const torch::Tensor& weight) {
  return weight.defined() && weight.device().is_cpu() &&
         (weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16) &&
         PackedDense::Available(TypeOf(weight.scalar_type()));
}

PackedLinear PackedLinear::Pack(const torch::Tensor& weight, const torch::Tensor& bias, DenseActivation activation,
                                bool residual) {
  TORCH_CHECK(Supports(weight) && weight.dim() == 2,
              "packed linear: needs a float32 or bfloat16 [out, in] CPU weight that oneDNN's matmul takes here");
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
              "packed linear: bias must be [out]");
  torch::NoGradGuard no_grad;
  const torch::Tensor w = weight.detach().contiguous();
  torch::Tensor b;
  if (bias.defined()) b = bias.detach().to(torch::kFloat).contiguous();
  PackedDense::Spec spec;
  spec.in = w.size(1);
  spec.out = w.size(0);
  spec.type = TypeOf(w.scalar_type());
  spec.activation = activation;
  spec.residual = residual;
  PackedLinear linear;
  try {
    linear.dense_ = PackedDense::Create(spec, w.data_ptr(), b.defined() ? b.data_ptr<float>() : nullptr);
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
  linear.dtype_ = w.scalar_type();
  return linear;
}

DenseActivation PackedLinear::activation() const {
  return dense_ ? dense_->spec().activation : DenseActivation::kNone;
}

bool PackedLinear::Applies(const torch::Tensor& x) const {
  return dense_ != nullptr && x.defined() && x.device().is_cpu() && x.scalar_type() == dtype_ && x.dim() >= 1 &&
         x.size(-1) == dense_->spec().in && !at::GradMode::is_enabled() &&
         (dtype_ != torch::kFloat || x.numel() / dense_->spec().in <= kMaxFp32Rows);
}

torch::Tensor PackedLinear::Forward(const torch::Tensor& x) const {
  RECORD_FUNCTION("dserve::packed_linear", std::vector<c10::IValue>());
  TORCH_CHECK(Applies(x), "packed linear: input must be [..., ", dense_ ? dense_->spec().in : 0,
              "] on CPU in the weight's dtype, autograd off");
  TORCH_CHECK(!dense_->spec().residual, "packed linear: packed with a residual, Forward needs one");
  const torch::Tensor in = x.contiguous();
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape.back() = dense_->spec().out;
  torch::Tensor out = torch::empty(shape, in.options());
  try {
    dense_->Forward(in.data_ptr(), in.numel() / dense_->spec().in, out.data_ptr(), Threads());
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
  return out;
}

torch::Tensor PackedLinear::Forward(const torch::Tensor& x, torch::Tensor residual) const {
  RECORD_FUNCTION("dserve::packed_linear_residual", std::vector<c10::IValue>());
  TORCH_CHECK(Applies(x), "packed linear: input must be [..., ", dense_ ? dense_->spec().in : 0,
              "] on CPU in the weight's dtype, autograd off");
  TORCH_CHECK(dense_->spec().residual, "packed linear: packed without a residual");
  const torch::Tensor in = x.contiguous();
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape.back() = dense_->spec().out;
  TORCH_CHECK(residual.defined() && residual.sizes() == torch::IntArrayRef(shape) && residual.is_contiguous() &&
                  residual.scalar_type() == dtype_ && residual.device().is_cpu(),
              "packed linear: the residual must be contiguous, shaped like the result, in the weight's dtype");
  try {
    dense_->Forward(in.data_ptr(), in.numel() / dense_->spec().in, residual.data_ptr(), Threads());
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
  return residual;
}

std::string PackedLinear::Implementation(int64_t m) const {
  TORCH_CHECK(defined(), "packed linear: not packed");
  return dense_->Implementation(m, Threads());
}

}  // namespace dserve
