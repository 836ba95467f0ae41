// The DeBERTa-v2/v3 family's Network: DebertaEncoder with
// DebertaV2ForSequenceClassification's ContextPooler + classifier, or
// DebertaV2ForQuestionAnswering's qa_outputs.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/family/network.h"

namespace dserve {

class WeightStore;

// Registered in model/family/network.cc for model_type "deberta-v2".
absl::StatusOr<std::unique_ptr<Network>> LoadDebertaNetwork(const ModelConfig& config, WeightStore& store);

}  // namespace dserve
