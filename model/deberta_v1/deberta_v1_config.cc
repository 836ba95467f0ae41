#include "model/deberta_v1/deberta_v1_config.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace dserve {
namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return InvalidConfigField(field, problem);
}

// pos_att_type's entries as written (HF: a string is lower-cased and split on
// '|', each piece stripped; a list is taken as it is).
std::vector<std::string> RawPosAttType(const nlohmann::json& v) {
  std::vector<std::string> items;
  if (v.is_string()) {
    for (absl::string_view part : absl::StrSplit(v.get<std::string>(), '|')) {
      std::string item = absl::AsciiStrToLower(absl::StripAsciiWhitespace(part));
      if (!item.empty()) items.push_back(item);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      if (item.is_string()) items.push_back(item.get<std::string>());
    }
  }
  return items;
}

}  // namespace

ModelConfig DebertaV1Defaults() {
  ModelConfig c;  // DebertaV2Config's defaults; DebertaConfig's where they differ
  c.model_type = kDebertaV1ModelType;
  c.vocab_size = 50265;
  c.hidden_size = 768;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.intermediate_size = 3072;
  c.hidden_act = "gelu";
  c.hidden_dropout_prob = 0.1;
  c.attention_probs_dropout_prob = 0.1;
  c.max_position_embeddings = 512;
  c.type_vocab_size = 0;
  c.initializer_range = 0.02;
  c.layer_norm_eps = 1e-7;
  c.relative_attention = false;
  c.max_relative_positions = -1;
  c.pad_token_id = 0;
  c.position_biased_input = true;
  c.pos_att_type.clear();
  c.pooler_dropout = 0.0;
  c.pooler_hidden_act = "gelu";
  c.legacy = true;
  // What v1 has not, switched off: no log buckets, no key sharing, no
  // LayerNorm on the relative table, no ConvLayer, head size hidden / heads.
  c.position_buckets = -1;
  c.share_att_key = false;
  c.norm_rel_ebd = "none";
  c.attention_head_size = 0;
  c.conv_kernel_size = 0;
  c.deberta_v1 = DebertaV1Fields();
  return c;
}

const std::vector<std::string>& DebertaV1InertKeys() {
  static const std::vector<std::string>* keys = new std::vector<std::string>{
      "position_buckets", "share_att_key", "norm_rel_ebd", "attention_head_size",
      "conv_kernel_size", "conv_groups",   "conv_act"};
  return *keys;
}

absl::Status ParseDebertaV1Fields(ConfigFieldReader& reader, ModelConfig* c) {
  if (!c->deberta_v1) c->deberta_v1 = DebertaV1Fields();
  if (const nlohmann::json* v = reader.Get("talking_head")) {
    if (!v->is_boolean()) {
      return reader.Error("talking_head", absl::StrCat("must be true or false, got ", v->type_name(), " ", v->dump()));
    }
    c->deberta_v1->talking_head = v->get<bool>();
  }
  if (const nlohmann::json* pos = reader.Get("pos_att_type")) {
    std::set<std::string> seen;
    for (const std::string& item : RawPosAttType(*pos)) {
      if (!seen.insert(item).second) {
        return reader.Error("pos_att_type",
                            absl::StrCat("names \"", item,
                                         "\" twice; DeBERTa v1 would count it twice in the score scale "
                                         "sqrt(d * (1 + len(pos_att_type))): not supported, list each of c2p, p2c once"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDebertaV1(const ModelConfig& c) {
  if (!c.deberta_v1) return Invalid("model_type", "\"deberta\" without its DebertaConfig fields");
  // Never read from a v1 file (DebertaV1InertKeys); set only by code.
  if (c.position_buckets > 0) {
    return Invalid("position_buckets", "is a DeBERTa-v2 setting; DeBERTa v1 has no log-bucketed positions");
  }
  if (c.share_att_key) return Invalid("share_att_key", "is a DeBERTa-v2 setting; DeBERTa v1 has pos_proj/pos_q_proj");
  if (c.norm_rel_embeddings()) {
    return Invalid("norm_rel_ebd", "is a DeBERTa-v2 setting; DeBERTa v1 has no LayerNorm on the relative table");
  }
  if (c.conv_kernel_size > 0) {
    return Invalid("conv_kernel_size", "is a DeBERTa-v2 setting; DeBERTa v1 has no ConvLayer");
  }
  if (c.attention_head_size > 0) {
    return Invalid("attention_head_size", "is a DeBERTa-v2 setting; DeBERTa v1's head size is hidden_size / heads");
  }
  return absl::OkStatus();
}

void DebertaV1ToJson(const ModelConfig& c, nlohmann::json* j) {
  (*j)["relative_attention"] = c.relative_attention;
  (*j)["max_relative_positions"] = c.max_relative_positions;
  (*j)["pad_token_id"] = c.pad_token_id;
  (*j)["position_biased_input"] = c.position_biased_input;
  (*j)["pos_att_type"] = c.pos_att_type;
  (*j)["pooler_dropout"] = c.pooler_dropout;
  (*j)["pooler_hidden_act"] = c.pooler_hidden_act;
  (*j)["pooler_hidden_size"] = c.pooler_hidden_size > 0 ? c.pooler_hidden_size : c.hidden_size;
  (*j)["embedding_size"] = c.embedding_dim();
  if (c.deberta_v1 && c.deberta_v1->talking_head) (*j)["talking_head"] = true;
}

const FamilyConfigRules& DebertaV1ConfigRules() {
  static const FamilyConfigRules rules = {
      kDebertaV1ModelType,
      &DebertaV1Defaults,
      &DebertaV1InertKeys,
      &ParseDebertaV1Fields,
      [](const ModelConfig& c) { return c.deberta_v1.has_value(); },
      &ValidateDebertaV1,
      [](const ModelConfig& c, nlohmann::json* j) {
        DebertaV1ToJson(c, j);
        (*j)["legacy"] = c.legacy;
      },
  };
  return rules;
}

}  // namespace dserve
