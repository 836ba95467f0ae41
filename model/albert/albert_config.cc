#include "model/albert/albert_config.h"

#include "absl/strings/str_cat.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

absl::Status ParseAlbertFields(ConfigFieldReader& r, ModelConfig* c) {
  if (!c->albert) c->albert = AlbertFields();
  AlbertFields& a = *c->albert;
  RETURN_IF_ERROR(r.Int("num_hidden_groups", &a.num_hidden_groups));
  RETURN_IF_ERROR(r.Int("inner_group_num", &a.inner_group_num));
  RETURN_IF_ERROR(r.Double("classifier_dropout_prob", &a.classifier_dropout_prob));
  RETURN_IF_ERROR(r.String("position_embedding_type", &a.position_embedding_type));
  return absl::OkStatus();
}

absl::Status ValidateAlbert(const ModelConfig& c) {
  if (!c.albert) return InvalidConfigField("model_type", "\"albert\" without its AlbertConfig fields");
  const AlbertFields& a = *c.albert;
  RETURN_IF_ERROR(CheckPositiveField("num_hidden_groups", a.num_hidden_groups));
  RETURN_IF_ERROR(CheckPositiveField("inner_group_num", a.inner_group_num));
  RETURN_IF_ERROR(CheckProbabilityField("classifier_dropout_prob", a.classifier_dropout_prob));
  if (a.position_embedding_type != "absolute") {
    return InvalidConfigField("position_embedding_type",
                              absl::StrCat("\"", a.position_embedding_type,
                                           "\" is not supported (only \"absolute\"; relative_key and "
                                           "relative_key_query ALBERT checkpoints cannot be served)"));
  }
  if (c.relative_attention || !c.position_biased_input) {
    return InvalidConfigField("relative_attention", "is a DeBERTa setting; ALBERT uses absolute positions");
  }
  if (c.type_vocab_size < 1) {
    return InvalidConfigField("type_vocab_size",
                              absl::StrCat("must be >= 1 for ALBERT, got ", c.type_vocab_size));
  }
  return absl::OkStatus();
}

// AlbertConfig's own fields; none of DebertaV2Config's relative-position keys.
void AlbertToJson(const ModelConfig& c, nlohmann::json* j) {
  (*j)["embedding_size"] = c.embedding_dim();
  (*j)["num_hidden_groups"] = c.albert->num_hidden_groups;
  (*j)["inner_group_num"] = c.albert->inner_group_num;
  (*j)["classifier_dropout_prob"] = c.albert->classifier_dropout_prob;
  (*j)["position_embedding_type"] = c.albert->position_embedding_type;
  (*j)["pad_token_id"] = c.pad_token_id;
}

}  // namespace

ModelConfig AlbertDefaults() {
  ModelConfig c;  // DebertaV2Config's defaults; AlbertConfig's where they differ
  c.model_type = kAlbertModelType;
  c.vocab_size = 30000;
  c.embedding_size = 128;
  c.hidden_size = 4096;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 64;
  c.intermediate_size = 16384;
  c.hidden_act = "gelu_new";
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  c.max_position_embeddings = 512;
  c.type_vocab_size = 2;
  c.layer_norm_eps = 1e-12;
  c.pad_token_id = 0;
  c.position_biased_input = true;  // absolute position embeddings, always
  c.relative_attention = false;
  c.pooler_hidden_act = "tanh";    // albert.pooler: tanh(Linear(h[:, 0]))
  c.albert = AlbertFields();
  return c;
}

const FamilyConfigRules& AlbertConfigRules() {
  static const FamilyConfigRules rules = {
      kAlbertModelType,
      &AlbertDefaults,
      /*inert_keys=*/nullptr,  // AlbertConfig files are read with every shared key, as before
      &ParseAlbertFields,
      [](const ModelConfig& c) { return c.albert.has_value(); },
      &ValidateAlbert,
      &AlbertToJson,  // no "legacy": ALBERT has no DeBERTa MLM-head layout
  };
  return rules;
}

}  // namespace dserve
