// The ALBERT family's Network: AlbertEncoder with AlbertForSequenceClassification's
// pooler + classifier (classify; rerank with one label) or
// AlbertForQuestionAnswering's qa_outputs (answer).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/family/network.h"
#include "model/heads/heads.h"

namespace dserve {

class WeightStore;

// AlbertForSequenceClassification's head: tanh(albert.pooler(h[:, 0])),
// then the classifier (its dropout is the identity at inference).
inline constexpr char kAlbertPooler[] = "albert.pooler";
absl::StatusOr<ClassificationHead> LoadAlbertClassificationHead(const ModelConfig& config, WeightStore& store);
// Fresh, as HF's _init_weights draws it (training from an encoder-only or
// differently labelled checkpoint).
absl::StatusOr<ClassificationHead> InitAlbertClassificationHead(const ModelConfig& config, torch::ScalarType dtype,
                                                                const torch::Device& device);

// Registered in model/family/network.cc for model_type "albert". Tensors are
// read with the "albert." scope (bare AlbertModel files have none).
absl::StatusOr<std::unique_ptr<Network>> LoadAlbertNetwork(const ModelConfig& config, WeightStore& store);

}  // namespace dserve
