// DeBERTa v1's config.json rules (model_type "deberta", transformers'
// DebertaConfig): its defaults, its own fields and its checks, the family's
// entry in the config registry (model/family/config_registry.cc) that
// ModelConfig's parser (model/checkpoint/model_config.cc) dispatches to. v1
// loads into the DeBERTa-v2 encoder's fields with v1's meaning
// (deberta_v1_network.h); what v1 lacks stays at the value that switches it
// off. Torch-free (built into dserve_checkpoint).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "model/checkpoint/config_rules.h"
#include "model/checkpoint/model_config.h"

namespace dserve {

inline constexpr char kDebertaV1ModelType[] = "deberta";

// The family's config rules (registered in model/family/config_registry.cc).
const FamilyConfigRules& DebertaV1ConfigRules();

// DebertaConfig's defaults (transformers): vocab 50265, hidden 768, 12
// layers, 12 heads, intermediate 3072, gelu, dropouts 0.1, 512 positions,
// type_vocab_size 0, layer_norm_eps 1e-7, relative_attention false,
// max_relative_positions -1, position_biased_input true, no pos_att_type,
// pooler gelu with dropout 0, legacy MLM head; embedding_size and
// pooler_hidden_size default to hidden_size.
ModelConfig DebertaV1Defaults();

// DebertaV2Config keys that DebertaConfig has not: a v1 file that carries
// them computes without them in Hugging Face (they become inert attributes),
// so the parser leaves them in ModelConfig::extra, unread, and writes them
// back unchanged.
const std::vector<std::string>& DebertaV1InertKeys();

// Reads v1's own fields from `reader` (the whole config.json) into
// c->deberta_v1 (marking them used: not kept in c->extra). Errors
// (InvalidArgument) are prefixed with the reader's scope and name the
// field: talking_head not a boolean; pos_att_type naming an entry twice
// (v1 divides the scores by sqrt(d * (1 + len(pos_att_type))), counting the
// duplicate, which we do not reproduce).
absl::Status ParseDebertaV1Fields(ConfigFieldReader& reader, ModelConfig* c);

// v1's own checks, after the shared ones: the DebertaV2-only settings must
// be off (position_buckets, share_att_key, norm_rel_ebd, attention_head_size,
// conv_kernel_size). Errors start with "config: <field>".
absl::Status ValidateDebertaV1(const ModelConfig& c);

// Writes the DebertaConfig fields of `c` into `j` (a config.json that
// transformers' DebertaConfig loads): no DebertaV2-only key beyond those read
// from the file and kept.
void DebertaV1ToJson(const ModelConfig& c, nlohmann::json* j);

}  // namespace dserve
