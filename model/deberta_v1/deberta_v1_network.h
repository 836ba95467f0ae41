// The DeBERTa v1 family's Network (model_type "deberta"): DebertaEncoder
// with v1's weights mapped onto it (deberta_v1_weights.h) and the heads of
// DebertaForSequenceClassification (ContextPooler "pooler.dense" +
// "classifier"; classify, or rerank with one label) or
// DebertaForQuestionAnswering ("qa_outputs"), which have v2's names and maths.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/family/network.h"

namespace dserve {

class WeightStore;

// Registered in model/family/network.cc for model_type "deberta". Tensors
// Hugging Face drops on load (IgnoredByHuggingFace) are skipped and named in
// one info line of the "model" logger; any other unused tensor in one
// warning.
absl::StatusOr<std::unique_ptr<Network>> LoadDebertaV1Network(const ModelConfig& config, WeightStore& store);

}  // namespace dserve
