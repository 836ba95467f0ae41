// DeBERTa-v2/v3's config.json rules (model_type "deberta-v2", transformers'
// DebertaV2Config): ModelConfig's own defaults and fields, and the keys its
// config.json is written with; the family's entry in the config registry
// (model/family/config_registry.cc) that ModelConfig's parser
// (model/checkpoint/model_config.cc) dispatches to. Torch-free (built into
// dserve_checkpoint).
#pragma once

#include "model/checkpoint/config_rules.h"
#include "model/checkpoint/model_config.h"

namespace dserve {

inline constexpr char kDebertaV2ModelType[] = "deberta-v2";

// The family's config rules (registered first in
// model/family/config_registry.cc: it also reads a file of unknown
// model_type, before Validate() refuses it).
const FamilyConfigRules& DebertaV2ConfigRules();

}  // namespace dserve
