// The ALBERT family's Network: AlbertEncoder with AlbertForSequenceClassification's
// pooler + classifier (classify; rerank with one label) or
// AlbertForQuestionAnswering's qa_outputs (answer).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/family/network.h"

namespace dserve {

class WeightStore;

// Registered in model/family/network.cc for model_type "albert". Tensors are
// read with the "albert." scope (bare AlbertModel files have none).
absl::StatusOr<std::unique_ptr<Network>> LoadAlbertNetwork(const ModelConfig& config, WeightStore& store);

}  // namespace dserve
