// The piece of a model family that runs on tensors: a loaded encoder with its
// task head (DESIGN §7). DebertaModel (the served-model facade, model.h)
// holds one Network and never asks which family it is; each family lives in
// its own folder (model/deberta/, model/albert/) and is one line in the
// registry of network.cc, keyed by config.json's model_type.
//
// Thread safety: a Network is immutable after loading; Forward is const and
// may run on several threads at once.
#pragma once

#include <memory>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"

namespace dserve {

class WeightStore;

struct LinearWeights {
  torch::Tensor weight;  // [out, in]
  torch::Tensor bias;    // [out] or undefined
};
struct NormWeights {
  torch::Tensor weight;
  torch::Tensor bias;
};

// Input of one forward. All [B, L]; int64; on the model's device; padding
// on the right.
struct EncoderInput {
  torch::Tensor input_ids;
  torch::Tensor attention_mask;  // 1 for real tokens, 0 for padding
  torch::Tensor token_type_ids;  // may be undefined (all zero)
};

// What a forward returns; the head's outputs are defined for its task only.
struct NetworkOutputs {
  torch::Tensor hidden;        // last_hidden_state [B, L, H]
  torch::Tensor logits;        // [B, num_labels]: classify, rerank
  torch::Tensor start_logits;  // [B, L]: answer
  torch::Tensor end_logits;    // [B, L]: answer
};

class Network {
 public:
  virtual ~Network() = default;
  // Encoder and head, inference only (the caller holds InferenceMode).
  virtual NetworkOutputs Forward(const EncoderInput& input) const = 0;
};

// Loads `config`'s family's encoder and the head of config.task() from
// `store` (classify and rerank: sequence classification; answer: QA).
// Errors name the missing or mis-shaped tensor, or the task that cannot be
// served with the architectures the family knows.
absl::StatusOr<std::unique_ptr<Network>> LoadNetwork(const ModelConfig& config, WeightStore& store);

}  // namespace dserve
