// A model's tensor schema, declared once and walked three ways: each tensor
// with its Hugging Face name, shape and initialisation, bound to its slot
// in the weights struct. Load reads every tensor from a WeightStore, Init
// draws it as HF's _init_weights does, Named lists (name, tensor) in HF's
// state_dict order, all from the same walk (EncoderWeights, AlbertWeights).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {

// How HF's _init_weights starts a tensor when training from scratch.
enum class InitKind {
  kNormal,     // normal(0, initializer_range)
  kWordTable,  // normal, with the pad_token_id row zeroed (nn.Embedding's padding_idx)
  kZeros,      // biases, LayerNorm beta
  kOnes,       // LayerNorm gamma
};

struct TensorSpec {
  std::string name;  // HF name, with the family's scope ("deberta.", "albert.")
  std::vector<int64_t> shape;
  InitKind init = InitKind::kNormal;
  // Load takes it when present with `shape` and leaves it undefined
  // otherwise; Init draws it all the same.
  bool optional = false;
};

// Load's step: `spec`'s tensor from `store` into `t` (NotFound /
// InvalidArgument from WeightStore::Get unless `spec.optional`).
inline absl::Status LoadTensor(WeightStore& store, const TensorSpec& spec, torch::Tensor& t) {
  if (!spec.optional) {
    ASSIGN_OR_RETURN(t, store.Get(spec.name, spec.shape));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(t, store.GetOptional(spec.name));
  if (t.defined() && t.sizes() != torch::IntArrayRef(spec.shape)) t = torch::Tensor();
  return absl::OkStatus();
}

// Init's step: a fresh tensor as HF's _init_weights draws it (normal ones
// draw from torch's default generator; `pad_row` < 0 or out of range: no
// padding row).
inline torch::Tensor InitTensor(const TensorSpec& spec, const torch::TensorOptions& options, double std,
                                int64_t pad_row) {
  switch (spec.init) {
    case InitKind::kNormal: return torch::randn(spec.shape, options) * std;
    case InitKind::kWordTable: {
      torch::Tensor t = torch::randn(spec.shape, options) * std;
      if (pad_row >= 0 && pad_row < spec.shape.front()) t[pad_row].zero_();
      return t;
    }
    case InitKind::kZeros: return torch::zeros(spec.shape, options);
    case InitKind::kOnes: return torch::ones(spec.shape, options);
  }
  return torch::Tensor();
}

// The walk's building blocks for a schema function
//   template <typename Weights, typename Visit>
//   absl::Status VisitSchema(const ModelConfig&, Weights& w, Visit&& visit)
// where Weights is the weights struct or its const, and visit(const
// TensorSpec&, torch::Tensor& or const torch::Tensor&) returns a Status;
// the first error stops the walk.
template <typename Visit>
class SchemaWalk {
 public:
  explicit SchemaWalk(Visit& visit) : visit_(visit) {}

  template <typename T>
  absl::Status Tensor(std::string name, std::vector<int64_t> shape, InitKind init, T& tensor, bool optional = false) {
    return visit_(TensorSpec{std::move(name), std::move(shape), init, optional}, tensor);
  }
  // `prefix`.weight [out, in] (normal) and `prefix`.bias [out] (zeros).
  template <typename L>
  absl::Status Linear(const std::string& prefix, int64_t out, int64_t in, L& linear) {
    RETURN_IF_ERROR(Tensor(prefix + ".weight", {out, in}, InitKind::kNormal, linear.weight));
    return Tensor(prefix + ".bias", {out}, InitKind::kZeros, linear.bias);
  }
  // `prefix`.weight (ones) and `prefix`.bias (zeros), both [size].
  template <typename N>
  absl::Status Norm(const std::string& prefix, int64_t size, N& norm) {
    RETURN_IF_ERROR(Tensor(prefix + ".weight", {size}, InitKind::kOnes, norm.weight));
    return Tensor(prefix + ".bias", {size}, InitKind::kZeros, norm.bias);
  }

 private:
  Visit& visit_;
};

}  // namespace dserve
