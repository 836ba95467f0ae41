// DeBERTa v1's tensors (Hugging Face DebertaModel names) mapped onto the
// DeBERTa-v2 encoder's weights (model/deberta/encoder.h): v1 computes the
// same disentangled attention with another parameterisation, so a v1
// checkpoint runs in DebertaEncoder once its tensors are laid out as v2's.
//
//   v1 (per layer, attention.self.)        encoder slot
//   in_proj.weight [3H, H], rows per head  query/key/value.weight: head n's
//     n: q (d rows), k (d), v (d)            q, k, v rows taken out in head order
//   q_bias [H], v_bias [H]                 query.bias, value.bias
//   (no key bias)                          key.bias = 0
//   pos_proj.weight (c2p, no bias)         pos_key (bias undefined)
//   pos_q_proj.{weight,bias} (p2c)         pos_query
//   head_logits_proj/head_weights_proj     head_logits/head_weights (talking_head)
//   encoder.rel_embeddings [2*max_rel, H]  rel_embeddings (no LayerNorm in v1)
//
// The rest (embeddings with embed_proj, attention.output, intermediate,
// output, their LayerNorms) has v2's names. The relative row of query i and
// key j is clamp(i - j + max_rel, 0, 2*max_rel - 1), the v2 map without
// buckets (span = max_relative()), and v1's scale sqrt(d * (1 +
// len(pos_att_type))) is the encoder's.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"

namespace dserve {

class WeightStore;

// Reads the v1 encoder from `store` ("deberta." scope; a bare DebertaModel
// file has none), checking every shape against `config` (model_type
// "deberta"). Errors name the missing or mis-shaped tensor and the file.
// deberta.embeddings.position_embeddings is read only with
// position_biased_input (HF ignores it otherwise).
absl::StatusOr<EncoderWeights> LoadDebertaV1EncoderWeights(const ModelConfig& config, WeightStore& store);

// Whether Hugging Face's Deberta* classes drop `name` on load without
// complaint, for a checkpoint of `config`: the absolute position table
// without position_biased_input (_keys_to_ignore_on_load_unexpected), the
// position_ids buffer of old saves, and MaskedLM-head tensors (legacy
// cls.predictions.*, lm_predictions.lm_head.*) in a model that is not
// served as MaskedLM, and a ContextPooler ("pooler.*") in a QA model.
bool IgnoredByHuggingFace(const ModelConfig& config, const std::string& name);

}  // namespace dserve
