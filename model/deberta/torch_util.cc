#include "model/deberta/torch_util.h"

#include <cstring>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dserve {

absl::Status TorchCall(absl::string_view what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(what, ": torch error: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::ScalarType> ParseDType(absl::string_view name) {
  if (name == "fp32" || name == "float32" || name == "float") return torch::kFloat;
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  if (name == "fp16" || name == "float16" || name == "half") return torch::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("dtype: unknown value '", name, "' (expected fp32, bf16 or fp16)"));
}

std::string DTypeString(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat: return "fp32";
    case torch::kBFloat16: return "bf16";
    case torch::kHalf: return "fp16";
    default: return c10::toString(dtype);
  }
}

absl::StatusOr<torch::Device> ParseDevice(absl::string_view name) {
  if (name == "auto") {
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  }
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name == "cuda" || name.substr(0, 5) == "cuda:") {
    int index = 0;
    if (name.size() > 5 && !absl::SimpleAtoi(name.substr(5), &index)) {
      return absl::InvalidArgumentError(absl::StrCat("device: bad CUDA index in '", name, "'"));
    }
    if (!torch::cuda::is_available()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device: '", name, "' requested but this LibTorch has no usable CUDA"));
    }
    if (index < 0 || index >= static_cast<int>(torch::cuda::device_count())) {
      return absl::InvalidArgumentError(absl::StrCat("device: '", name, "' out of range (",
                                                     torch::cuda::device_count(), " GPUs)"));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device: unknown value '", name, "' (expected auto, cpu, cuda or cuda:N)"));
}

absl::StatusOr<torch::Tensor> ToTensor(const TensorView& view, torch::ScalarType dtype,
                                       const torch::Device& device) {
  torch::ScalarType src;
  switch (view.dtype) {
    case DType::kF32: src = torch::kFloat; break;
    case DType::kF16: src = torch::kHalf; break;
    case DType::kBF16: src = torch::kBFloat16; break;
    case DType::kF64: src = torch::kDouble; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("tensor ", view.name, ": dtype ",
                                                     DTypeName(view.dtype), " is not a float type"));
  }
  torch::Tensor out;
  absl::Status status = TorchCall(absl::StrCat("tensor ", view.name), [&] {
    // from_blob over the read-only mapping; the copy below owns its memory.
    auto blob = torch::from_blob(const_cast<void*>(view.data), view.shape,
                                 torch::TensorOptions().dtype(src));
    out = blob.to(device, dtype, /*non_blocking=*/false, /*copy=*/true).contiguous();
  });
  if (!status.ok()) return status;
  return out;
}

namespace {
torch::Tensor GeluErf(const torch::Tensor& x) { return torch::gelu(x); }
torch::Tensor GeluTanh(const torch::Tensor& x) { return torch::gelu(x, "tanh"); }
torch::Tensor Relu(const torch::Tensor& x) { return torch::relu(x); }
torch::Tensor Tanh(const torch::Tensor& x) { return torch::tanh(x); }
torch::Tensor Silu(const torch::Tensor& x) { return torch::silu(x); }
torch::Tensor Sigmoid(const torch::Tensor& x) { return torch::sigmoid(x); }
torch::Tensor Identity(const torch::Tensor& x) { return x; }
// In place: the caller hands over a temporary (see the header).
torch::Tensor& Mut(const torch::Tensor& x) { return const_cast<torch::Tensor&>(x); }
torch::Tensor GeluErfInPlace(const torch::Tensor& x) { return at::gelu_(Mut(x)); }
torch::Tensor GeluTanhInPlace(const torch::Tensor& x) { return at::gelu_(Mut(x), "tanh"); }
torch::Tensor ReluInPlace(const torch::Tensor& x) { return at::relu_(Mut(x)); }
torch::Tensor TanhInPlace(const torch::Tensor& x) { return at::tanh_(Mut(x)); }
torch::Tensor SiluInPlace(const torch::Tensor& x) { return at::silu_(Mut(x)); }
torch::Tensor SigmoidInPlace(const torch::Tensor& x) { return at::sigmoid_(Mut(x)); }
}  // namespace

namespace {
struct ActivationPair {
  Activation out_of_place, in_place;
};
// HF's ACT2FN names -> the two forms of each activation.
absl::StatusOr<ActivationPair> ActivationPairByName(absl::string_view name) {
  if (name == "gelu" || name == "gelu_python") return ActivationPair{&GeluErf, &GeluErfInPlace};
  if (name == "gelu_new" || name == "gelu_fast" || name == "gelu_pytorch_tanh") {
    return ActivationPair{&GeluTanh, &GeluTanhInPlace};
  }
  if (name == "relu") return ActivationPair{&Relu, &ReluInPlace};
  if (name == "tanh") return ActivationPair{&Tanh, &TanhInPlace};
  if (name == "silu" || name == "swish") return ActivationPair{&Silu, &SiluInPlace};
  if (name == "sigmoid") return ActivationPair{&Sigmoid, &SigmoidInPlace};
  if (name == "linear") return ActivationPair{&Identity, &Identity};
  return absl::InvalidArgumentError(absl::StrCat("unknown activation '", name, "'"));
}
}  // namespace

absl::StatusOr<Activation> ActivationByName(absl::string_view name) {
  auto pair = ActivationPairByName(name);
  if (!pair.ok()) return pair.status();
  return pair->out_of_place;
}

absl::StatusOr<Activation> InPlaceActivationByName(absl::string_view name) {
  auto pair = ActivationPairByName(name);
  if (!pair.ok()) return pair.status();
  return pair->in_place;
}

}  // namespace dserve
