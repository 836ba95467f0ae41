// ALBERT's config.json rules (model_type "albert", transformers'
// AlbertConfig): its defaults where they differ from DebertaV2Config's, its
// own fields (ModelConfig::albert) and its checks; the family's entry in the
// config registry (model/family/config_registry.cc) that ModelConfig's
// parser (model/checkpoint/model_config.cc) dispatches to. Torch-free (built
// into dserve_checkpoint).
#pragma once

#include "model/checkpoint/config_rules.h"
#include "model/checkpoint/model_config.h"

namespace dserve {

inline constexpr char kAlbertModelType[] = "albert";

// The family's config rules (registered in model/family/config_registry.cc).
const FamilyConfigRules& AlbertConfigRules();

// AlbertConfig's defaults: vocab 30000, embedding_size 128, hidden 4096, 12
// layers, 64 heads, intermediate 16384, gelu_new, no dropout, 512 absolute
// positions, type_vocab_size 2, layer_norm_eps 1e-12, pooler tanh; one
// hidden group of one layer, classifier_dropout_prob 0.1.
ModelConfig AlbertDefaults();

}  // namespace dserve
