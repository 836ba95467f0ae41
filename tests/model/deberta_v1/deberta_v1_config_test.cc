// DeBERTa v1's config.json rules (model/deberta_v1/deberta_v1_config.h):
// DebertaConfig's defaults, pos_att_type in every form HF reads, talking_head,
// the DebertaV2-only keys a v1 file may carry (inert in HF: kept, not
// applied), errors naming the field, and a config.json that round-trips.
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/checkpoint/model_config.h"

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

std::string GoldenConfig(const std::string& name) {
  return std::string(DSERVE_SHARED_DIR) + "/goldens/deberta_v1/" + name + "/config.json";
}

json Small() {
  return json{{"model_type", "deberta"},  {"hidden_size", 64},        {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"intermediate_size", 128}, {"vocab_size", 1000}};
}

void ExpectError(const json& config, const std::vector<std::string>& parts) {
  absl::StatusOr<ModelConfig> parsed = ModelConfig::FromJson(config);
  ASSERT_FALSE(parsed.ok()) << config.dump();
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(part)) << config.dump();
  }
}

TEST(DebertaV1Config, DefaultsAreDebertaConfigs) {
  auto c = ModelConfig::FromJson(json{{"model_type", "deberta"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->deberta_v1.has_value());
  EXPECT_FALSE(c->albert.has_value());
  EXPECT_EQ(c->vocab_size, 50265);
  EXPECT_EQ(c->hidden_size, 768);
  EXPECT_EQ(c->num_hidden_layers, 12);
  EXPECT_EQ(c->num_attention_heads, 12);
  EXPECT_EQ(c->intermediate_size, 3072);
  EXPECT_EQ(c->hidden_act, "gelu");
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_EQ(c->type_vocab_size, 0);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-7);
  EXPECT_FALSE(c->relative_attention);
  EXPECT_EQ(c->max_relative_positions, -1);
  EXPECT_EQ(c->max_relative(), 512);
  EXPECT_TRUE(c->position_biased_input);
  EXPECT_TRUE(c->pos_att_type.empty());
  EXPECT_EQ(c->pooler_hidden_act, "gelu");
  EXPECT_DOUBLE_EQ(c->pooler_dropout, 0.0);
  EXPECT_EQ(c->pooler_hidden_size, 768);
  EXPECT_EQ(c->embedding_dim(), 768);
  EXPECT_EQ(c->head_size(), 64);
  EXPECT_FALSE(c->deberta_v1->talking_head);
  // What v1 has not is off.
  EXPECT_EQ(c->position_buckets, -1);
  EXPECT_EQ(c->att_span(), 512);
  EXPECT_FALSE(c->share_att_key);
  EXPECT_FALSE(c->norm_rel_embeddings());
  EXPECT_EQ(c->conv_kernel_size, 0);
}

TEST(DebertaV1Config, ReadsTheGoldenConfigs) {
  auto cls = ModelConfig::FromFile(GoldenConfig("cls_mnli"));
  ASSERT_TRUE(cls.ok()) << cls.status();
  EXPECT_EQ(cls->model_type, "deberta");
  EXPECT_THAT(cls->pos_att_type, ElementsAre("c2p", "p2c"));  // from the string "c2p|p2c"
  EXPECT_EQ(cls->max_relative(), 128);
  EXPECT_FALSE(cls->position_biased_input);
  EXPECT_EQ(cls->task(), Task::kClassify);
  EXPECT_THAT(cls->labels(), ElementsAre("CONTRADICTION", "NEUTRAL", "ENTAILMENT"));
  auto qa = ModelConfig::FromFile(GoldenConfig("qa_clamped"));
  ASSERT_TRUE(qa.ok()) << qa.status();
  EXPECT_EQ(qa->task(), Task::kAnswer);
  EXPECT_EQ(qa->max_relative(), 16);
  EXPECT_EQ(qa->att_span(), 16);
  auto rerank = ModelConfig::FromFile(GoldenConfig("rerank_c2p_factorized"));
  ASSERT_TRUE(rerank.ok()) << rerank.status();
  EXPECT_EQ(rerank->task(), Task::kRerank);
  EXPECT_THAT(rerank->pos_att_type, ElementsAre("c2p"));
  EXPECT_EQ(rerank->embedding_dim(), 32);
}

TEST(DebertaV1Config, PosAttTypeAsStringOrListInEitherOrder) {
  json j = Small();
  j["pos_att_type"] = " P2C | c2p ";
  auto a = ModelConfig::FromJson(j);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->pos_att_type, ElementsAre("p2c", "c2p"));
  EXPECT_TRUE(a->has_c2p() && a->has_p2c());
  j["pos_att_type"] = json::array({"p2c"});
  auto b = ModelConfig::FromJson(j);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(b->pos_att_type, ElementsAre("p2c"));
  EXPECT_FALSE(b->has_c2p());
}

TEST(DebertaV1Config, UnsupportedPosAttTypeNamesTheField) {
  json j = Small();
  j["pos_att_type"] = "c2p|p2p";
  ExpectError(j, {"config.json", "pos_att_type", "p2p"});
  j["pos_att_type"] = "c2p|C2P";  // v1 would count it twice in the scale
  ExpectError(j, {"config.json", "pos_att_type", "twice"});
  j["pos_att_type"] = json::array({"p2c", "p2c"});
  ExpectError(j, {"pos_att_type", "twice"});
  j["pos_att_type"] = 3;
  ExpectError(j, {"pos_att_type"});
}

TEST(DebertaV1Config, TalkingHead) {
  json j = Small();
  j["talking_head"] = "yes";
  ExpectError(j, {"config.json", "talking_head", "true or false"});
  j["talking_head"] = true;
  auto c = ModelConfig::FromJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->deberta_v1->talking_head);
  EXPECT_FALSE(c->extra.contains("talking_head"));
  EXPECT_EQ(c->ToJson()["talking_head"], true);
  auto again = ModelConfig::FromJson(c->ToJson());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->deberta_v1->talking_head);
  // Another family has no talking heads: the key stays an unknown one.
  json v2 = Small();
  v2["model_type"] = "deberta-v2";
  v2["talking_head"] = true;
  auto other = ModelConfig::FromJson(v2);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->deberta_v1.has_value());
  EXPECT_EQ(other->extra["talking_head"], true);
}

// DebertaV2Config keys in a v1 file: Hugging Face's DebertaConfig keeps them
// as attributes its model never reads, so they must not change the maths.
TEST(DebertaV1Config, V2OnlyKeysAreInertAndKept) {
  json j = Small();
  j["relative_attention"] = true;
  j["position_buckets"] = 256;
  j["share_att_key"] = true;
  j["norm_rel_ebd"] = "layer_norm";
  j["conv_kernel_size"] = 3;
  j["attention_head_size"] = 32;
  auto c = ModelConfig::FromJson(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->position_buckets, -1);
  EXPECT_EQ(c->att_span(), 512);
  EXPECT_FALSE(c->share_att_key);
  EXPECT_FALSE(c->norm_rel_embeddings());
  EXPECT_EQ(c->conv_kernel_size, 0);
  EXPECT_EQ(c->head_size(), 16);
  const json out = c->ToJson();
  EXPECT_EQ(out["position_buckets"], 256);
  EXPECT_EQ(out["share_att_key"], true);
  EXPECT_EQ(out["norm_rel_ebd"], "layer_norm");
  EXPECT_EQ(out["conv_kernel_size"], 3);
  EXPECT_EQ(out["attention_head_size"], 32);
  // Set by code, they are refused with the field's name.
  ModelConfig bad = *c;
  bad.position_buckets = 256;
  EXPECT_THAT(std::string(bad.Validate().message()), HasSubstr("position_buckets"));
  bad = *c;
  bad.conv_kernel_size = 3;
  EXPECT_THAT(std::string(bad.Validate().message()), HasSubstr("conv_kernel_size"));
  bad = *c;
  bad.norm_rel_ebd = "layer_norm";
  EXPECT_THAT(std::string(bad.Validate().message()), HasSubstr("norm_rel_ebd"));
  bad = *c;
  bad.deberta_v1.reset();
  EXPECT_THAT(std::string(bad.Validate().message()), HasSubstr("model_type"));
}

TEST(DebertaV1Config, SharedFieldErrorsNameTheField) {
  json j = Small();
  j["num_attention_heads"] = 5;
  ExpectError(j, {"num_attention_heads", "hidden_size"});
  j = Small();
  j["pooler_hidden_size"] = 32;
  ExpectError(j, {"pooler_hidden_size"});
  j = Small();
  j["hidden_act"] = "gelu_foo";
  ExpectError(j, {"hidden_act", "gelu_foo"});
  j = Small();
  j["layer_norm_eps"] = 0;
  ExpectError(j, {"layer_norm_eps"});
  j = Small();
  j["relative_attention"] = "yes";
  ExpectError(j, {"relative_attention"});
}

TEST(DebertaV1Config, WritesADebertaConfigThatRoundTrips) {
  auto c = ModelConfig::FromFile(GoldenConfig("rerank_c2p_factorized"));
  ASSERT_TRUE(c.ok()) << c.status();
  const json out = c->ToJson();
  EXPECT_EQ(out["model_type"], "deberta");
  EXPECT_EQ(out["architectures"], json::array({"DebertaForSequenceClassification"}));
  EXPECT_EQ(out["embedding_size"], 32);
  EXPECT_EQ(out["pos_att_type"], json::array({"c2p"}));
  EXPECT_EQ(out["layer_norm_eps"], 1e-7);
  for (const char* v2_only : {"position_buckets", "share_att_key", "norm_rel_ebd", "conv_kernel_size",
                              "talking_head"}) {
    EXPECT_FALSE(out.contains(v2_only)) << v2_only;
  }
  auto again = ModelConfig::FromJson(out);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), out);
  EXPECT_EQ(again->embedding_dim(), 32);
  EXPECT_EQ(again->task(), Task::kRerank);
}

}  // namespace
}  // namespace dserve
