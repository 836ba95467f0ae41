#include "model/deberta/deberta_config.h"

namespace dserve {
namespace {

// DebertaV2Config's defaults are ModelConfig's own.
ModelConfig DebertaV2Defaults() { return ModelConfig(); }

// DebertaV2Config's keys beside the shared ones.
void DebertaV2ToJson(const ModelConfig& c, nlohmann::json* j) {
  nlohmann::json& o = *j;
  o["relative_attention"] = c.relative_attention;
  o["max_relative_positions"] = c.max_relative_positions;
  o["pad_token_id"] = c.pad_token_id;
  o["position_biased_input"] = c.position_biased_input;
  o["pos_att_type"] = c.pos_att_type;
  o["pooler_dropout"] = c.pooler_dropout;
  o["pooler_hidden_act"] = c.pooler_hidden_act;
  o["pooler_hidden_size"] = c.pooler_hidden_size > 0 ? c.pooler_hidden_size : c.hidden_size;
  o["embedding_size"] = c.embedding_dim();
  o["position_buckets"] = c.position_buckets;
  o["share_att_key"] = c.share_att_key;
  o["norm_rel_ebd"] = c.norm_rel_ebd;
  if (c.attention_head_size > 0) o["attention_head_size"] = c.attention_head_size;
  if (c.conv_kernel_size > 0) {
    o["conv_kernel_size"] = c.conv_kernel_size;
    o["conv_groups"] = c.conv_groups;
    o["conv_act"] = c.conv_act;
  }
  o["legacy"] = c.legacy;
}

}  // namespace

const FamilyConfigRules& DebertaV2ConfigRules() {
  static const FamilyConfigRules rules = {
      kDebertaV2ModelType,
      &DebertaV2Defaults,
      /*inert_keys=*/nullptr,
      /*parse=*/nullptr,           // no fields beyond ModelConfig's shared ones
      /*has_own_fields=*/nullptr,  // ModelConfig's own fields are DebertaV2Config's
      /*validate=*/nullptr,        // the shared checks are DebertaV2Config's
      &DebertaV2ToJson,
  };
  return rules;
}

}  // namespace dserve
