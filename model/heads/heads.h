// Task heads over the encoder's last hidden state (REFERENCE §6), as plain
// functions over weight tensors (shared by inference and training).
#pragma once

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"

namespace dserve {

class WeightStore;

// ContextPooler + classifier: DebertaV2ForSequenceClassification (classify,
// and rerank with one label).
struct ClassificationHead {
  LinearWeights pooler;      // pooler.dense [H, H]
  LinearWeights classifier;  // classifier [num_labels, H]
  Activation pooler_act = nullptr;

  static absl::StatusOr<ClassificationHead> Load(const ModelConfig& config, WeightStore& store);
  static absl::StatusOr<ClassificationHead> Init(const ModelConfig& config, torch::ScalarType dtype,
                                                 const torch::Device& device);
  // hidden [B, L, H] -> logits [B, num_labels]
  torch::Tensor Forward(const torch::Tensor& hidden) const;
  void AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const;
};

// qa_outputs: DebertaV2ForQuestionAnswering.
struct QaHead {
  LinearWeights qa_outputs;  // [2, H]

  static absl::StatusOr<QaHead> Load(const ModelConfig& config, WeightStore& store);
  static QaHead Init(const ModelConfig& config, torch::ScalarType dtype, const torch::Device& device);
  // hidden [B, L, H] -> (start [B, L], end [B, L])
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& hidden) const;
  void AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const;
};

}  // namespace dserve
