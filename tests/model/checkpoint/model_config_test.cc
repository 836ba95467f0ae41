#include "model/checkpoint/model_config.h"

#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

std::string GoldenConfig(const std::string& name) {
  return std::string(DSERVE_SHARED_DIR) + "/goldens/model/" + name + "/config.json";
}

// The smallest config the tests start from: a valid v3-like model.
json Minimal() {
  return json{{"model_type", "deberta-v2"},
              {"hidden_size", 96},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 6},
              {"intermediate_size", 192},
              {"vocab_size", 1000}};
}

// Parses `config` and expects an InvalidArgument error whose message contains
// every one of `parts`.
void ExpectError(const json& config, const std::vector<std::string>& parts) {
  absl::StatusOr<ModelConfig> parsed = ModelConfig::FromJson(config);
  ASSERT_FALSE(parsed.ok()) << config.dump();
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  for (const std::string& part : parts) {
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(part)) << config.dump();
  }
}

json With(json config, const std::string& key, json value) {
  config[key] = std::move(value);
  return config;
}

TEST(ModelConfigGolden, ClsFactorized) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromFile(GoldenConfig("cls_factorized"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "deberta-v2");
  EXPECT_THAT(c->architectures, ElementsAre("DebertaV2ForSequenceClassification"));
  EXPECT_EQ(c->vocab_size, 1200);
  EXPECT_EQ(c->hidden_size, 96);
  EXPECT_EQ(c->embedding_size, 48);
  EXPECT_EQ(c->embedding_dim(), 48);
  EXPECT_EQ(c->num_hidden_layers, 3);
  EXPECT_EQ(c->num_attention_heads, 6);
  EXPECT_EQ(c->intermediate_size, 192);
  EXPECT_EQ(c->hidden_act, "gelu_new");
  EXPECT_EQ(c->pooler_hidden_act, "tanh");
  EXPECT_EQ(c->pooler_hidden_size, 96);
  EXPECT_EQ(c->max_position_embeddings, 256);
  EXPECT_EQ(c->max_relative_positions, -1);
  EXPECT_EQ(c->position_buckets, 32);
  EXPECT_TRUE(c->relative_attention);
  EXPECT_TRUE(c->share_att_key);
  EXPECT_FALSE(c->position_biased_input);
  EXPECT_EQ(c->type_vocab_size, 0);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-7);
  EXPECT_THAT(c->pos_att_type, ElementsAre("p2c", "c2p"));
  // Derived values (REFERENCE §1).
  EXPECT_EQ(c->head_size(), 16);
  EXPECT_EQ(c->max_relative(), 256);
  EXPECT_EQ(c->att_span(), 32);
  EXPECT_TRUE(c->has_c2p());
  EXPECT_TRUE(c->has_p2c());
  EXPECT_TRUE(c->norm_rel_embeddings());
  EXPECT_EQ(c->num_labels(), 5);
  EXPECT_THAT(c->labels(), ElementsAre("billing", "refund", "password_reset", "shipping", "other"));
  EXPECT_EQ(c->task(), Task::kClassify);
  EXPECT_EQ(c->max_sequence_length(), 256);
  // Keys we do not model are kept.
  EXPECT_EQ(c->extra.value("torch_dtype", ""), "float32");
}

TEST(ModelConfigGolden, QaC2pOnly) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromFile(GoldenConfig("qa_c2p_only"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->embedding_size, 64);  // absent: hidden_size
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->head_size(), 16);
  EXPECT_EQ(c->max_relative_positions, 48);
  EXPECT_EQ(c->position_buckets, -1);
  EXPECT_EQ(c->max_relative(), 48);
  EXPECT_EQ(c->att_span(), 48);
  EXPECT_TRUE(c->has_c2p());
  EXPECT_FALSE(c->has_p2c());
  EXPECT_FALSE(c->share_att_key);
  EXPECT_TRUE(c->position_biased_input);
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_TRUE(c->norm_rel_embeddings());
  EXPECT_EQ(c->task(), Task::kAnswer);
  EXPECT_EQ(c->num_labels(), 2);
  EXPECT_EQ(c->max_sequence_length(), 128);
}

TEST(ModelConfigGolden, RerankP2cNoNorm) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromFile(GoldenConfig("rerank_p2c_nonorm"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->position_buckets, 64);
  EXPECT_EQ(c->max_relative_positions, 128);
  EXPECT_EQ(c->att_span(), 64);
  EXPECT_FALSE(c->has_c2p());
  EXPECT_TRUE(c->has_p2c());
  EXPECT_EQ(c->norm_rel_ebd, "none");
  EXPECT_FALSE(c->norm_rel_embeddings());
  EXPECT_EQ(c->num_labels(), 1);
  EXPECT_THAT(c->labels(), ElementsAre("LABEL_0"));
  EXPECT_EQ(c->task(), Task::kRerank);
}

TEST(ModelConfigGolden, EveryGoldenRoundTrips) {
  for (const char* name : {"cls_factorized", "qa_c2p_only", "rerank_p2c_nonorm"}) {
    std::ifstream in(GoldenConfig(name));
    json original = json::parse(in);
    absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(original);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    json written = c->ToJson();
    // Every key of the Hugging Face file comes back with the same value.
    for (auto it = original.begin(); it != original.end(); ++it) {
      ASSERT_TRUE(written.contains(it.key())) << name << ": " << it.key();
      EXPECT_EQ(written[it.key()], it.value()) << name << ": " << it.key();
    }
  }
}

TEST(ModelConfigDefaults, MinimalConfigGetsHuggingFaceDefaults) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(json::object());
  ASSERT_TRUE(c.ok()) << c.status();
  // transformers.DebertaV2Config() defaults.
  EXPECT_EQ(c->model_type, "deberta-v2");
  EXPECT_EQ(c->vocab_size, 128100);
  EXPECT_EQ(c->hidden_size, 1536);
  EXPECT_EQ(c->num_hidden_layers, 24);
  EXPECT_EQ(c->num_attention_heads, 24);
  EXPECT_EQ(c->intermediate_size, 6144);
  EXPECT_EQ(c->hidden_act, "gelu");
  EXPECT_DOUBLE_EQ(c->hidden_dropout_prob, 0.1);
  EXPECT_DOUBLE_EQ(c->attention_probs_dropout_prob, 0.1);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_EQ(c->type_vocab_size, 0);
  EXPECT_DOUBLE_EQ(c->initializer_range, 0.02);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-7);
  EXPECT_FALSE(c->relative_attention);
  EXPECT_EQ(c->max_relative_positions, -1);
  EXPECT_EQ(c->pad_token_id, 0);
  EXPECT_TRUE(c->position_biased_input);
  EXPECT_TRUE(c->pos_att_type.empty());
  EXPECT_DOUBLE_EQ(c->pooler_dropout, 0.0);
  EXPECT_EQ(c->pooler_hidden_act, "gelu");
  EXPECT_EQ(c->pooler_hidden_size, 1536);
  EXPECT_EQ(c->embedding_size, 1536);
  EXPECT_EQ(c->position_buckets, -1);
  EXPECT_FALSE(c->share_att_key);
  EXPECT_EQ(c->norm_rel_ebd, "none");
  EXPECT_FALSE(c->norm_rel_embeddings());
  EXPECT_EQ(c->conv_kernel_size, 0);
  EXPECT_FALSE(c->cls_dropout.has_value());
  EXPECT_TRUE(c->legacy);
  EXPECT_EQ(c->head_size(), 64);
  EXPECT_EQ(c->max_relative(), 512);
  EXPECT_EQ(c->att_span(), 512);
  // PretrainedConfig: two labels by default.
  EXPECT_EQ(c->num_labels(), 2);
  EXPECT_THAT(c->labels(), ElementsAre("LABEL_0", "LABEL_1"));
  EXPECT_EQ(c->task(), Task::kNone);
  EXPECT_FALSE(c->dserve.task.has_value());
  EXPECT_EQ(c->dserve.qa.doc_stride, 128);
  EXPECT_EQ(c->max_sequence_length(), 512);
}

TEST(ModelConfigDefaults, V3BaseConfig) {
  // REFERENCE §8: the released deberta-v3-base config.
  json v3 = {{"model_type", "deberta-v2"}, {"hidden_size", 768}, {"num_hidden_layers", 12},
             {"num_attention_heads", 12}, {"intermediate_size", 3072}, {"vocab_size", 128100},
             {"relative_attention", true}, {"position_buckets", 256},
             {"norm_rel_ebd", "layer_norm"}, {"share_att_key", true},
             {"pos_att_type", "p2c|c2p"}, {"position_biased_input", false},
             {"max_relative_positions", -1}, {"type_vocab_size", 0}};
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(v3);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->pos_att_type, ElementsAre("p2c", "c2p"));
  EXPECT_EQ(c->max_relative(), 512);
  EXPECT_EQ(c->att_span(), 256);
  EXPECT_EQ(c->head_size(), 64);
  EXPECT_TRUE(c->norm_rel_embeddings());
}

TEST(ModelConfigDefaults, LegacyPosAttTypeStringIsLowercasedAndSplit) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(With(Minimal(), "pos_att_type", " P2C | c2p "));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->pos_att_type, ElementsAre("p2c", "c2p"));
  c = ModelConfig::FromJson(With(Minimal(), "pos_att_type", "c2p"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->pos_att_type, ElementsAre("c2p"));
  EXPECT_FALSE(c->has_p2c());
  c = ModelConfig::FromJson(With(Minimal(), "pos_att_type", nullptr));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->pos_att_type.empty());
}

TEST(ModelConfigDefaults, NormRelEbdBarList) {
  absl::StatusOr<ModelConfig> c =
      ModelConfig::FromJson(With(Minimal(), "norm_rel_ebd", "none|layer_norm"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->norm_rel_embeddings());
}

TEST(ModelConfigLabels, NumLabelsWithoutId2Label) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(With(Minimal(), "num_labels", 3));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_labels(), 3);
  EXPECT_THAT(c->labels(), ElementsAre("LABEL_0", "LABEL_1", "LABEL_2"));
  json written = c->ToJson();
  EXPECT_EQ(written["id2label"], (json{{"0", "LABEL_0"}, {"1", "LABEL_1"}, {"2", "LABEL_2"}}));
  EXPECT_EQ(written["label2id"], (json{{"LABEL_0", 0}, {"LABEL_1", 1}, {"LABEL_2", 2}}));
  EXPECT_FALSE(written.contains("num_labels"));
}

// Found by fuzz_config: `"num_labels": 99991948` made the loader build 100M
// default label names (out of memory at 1.5 GB). Labels are capped at 100000.
TEST(ModelConfigLabels, LabelCountsOverTheLimitAreErrors) {
  ExpectError(With(Minimal(), "num_labels", 99991948), {"num_labels", "99991948", "limit of 100000 labels"});
  ASSERT_TRUE(ModelConfig::FromJson(With(Minimal(), "num_labels", 100000)).ok());
  ExpectError(With(Minimal(), "num_labels", 100001), {"num_labels", "limit of 100000"});
  json config = Minimal();
  config["id2label"] = {{"0", "a"}, {"100000", "b"}};
  ExpectError(config, {"id2label", "id 100000", "limit of 100000"});
  config = Minimal();
  config["label2id"] = {{"a", 0}, {"b", 123456789}};
  ExpectError(config, {"label2id", "id 123456789", "limit of 100000"});
}

TEST(ModelConfigLabels, Id2LabelWinsOverNumLabels) {
  json config = Minimal();
  config["id2label"] = {{"1", "pos"}, {"0", "neg"}};
  config["num_labels"] = 7;
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->labels(), ElementsAre("neg", "pos"));
}

TEST(ModelConfigLabels, Label2IdAloneIsInverted) {
  absl::StatusOr<ModelConfig> c =
      ModelConfig::FromJson(With(Minimal(), "label2id", {{"b", 1}, {"a", 0}, {"c", 2}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->labels(), ElementsAre("a", "b", "c"));
}

TEST(ModelConfigLabels, Label2IdIsRewrittenFromId2Label) {
  json config = Minimal();
  config["id2label"] = {{"0", "x"}, {"1", "y"}};
  config["label2id"] = {{"LABEL_0", 0}, {"LABEL_1", 1}};  // stale, as some hub files have
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->ToJson()["label2id"], (json{{"x", 0}, {"y", 1}}));
}

TEST(ModelConfigTask, DerivedFromArchitecturesAndOverride) {
  json config = Minimal();
  config["architectures"] = {"DebertaV2ForMaskedLM"};
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task(), Task::kMlm);

  config["architectures"] = {"DebertaV2ForSequenceClassification"};
  config["num_labels"] = 2;
  c = ModelConfig::FromJson(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task(), Task::kClassify);
  // A two-label classifier used as a reranker: dserve.task overrides.
  config["dserve"] = {{"task", "rerank"}};
  c = ModelConfig::FromJson(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->task(), Task::kRerank);
  EXPECT_STREQ(TaskName(c->task()), "rerank");
}

TEST(ModelConfigTask, MaxLengthOverride) {
  absl::StatusOr<ModelConfig> c =
      ModelConfig::FromJson(With(Minimal(), "dserve", {{"max_length", 384}}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_sequence_length(), 384);
}

TEST(ModelConfigRoundTrip, UnknownKeysAndDserveBlockSurvive) {
  json config = Minimal();
  config["architectures"] = {"DebertaV2ForQuestionAnswering"};
  config["transformers_version"] = "4.44.0";
  config["torch_dtype"] = "bfloat16";
  config["my_custom"] = {{"nested", {1, 2, 3}}};
  config["attention_head_size"] = 32;
  config["conv_kernel_size"] = 3;
  config["conv_groups"] = 2;
  config["conv_act"] = "gelu";
  config["cls_dropout"] = 0.25;
  config["problem_type"] = "single_label_classification";
  config["id2label"] = {{"0", "no"}, {"1", "yes"}};
  config["dserve"] = {{"task", "answer"},
                      {"max_length", 256},
                      {"qa", {{"doc_stride", 64}, {"max_answer_tokens", 20}, {"n_best", 5},
                              {"null_score_diff_threshold", -1.5}}},
                      {"share_layers", true},
                      {"temperature", 1.7},
                      {"eval_metrics", {{"f1", 71.5}, {"exact", 68.0}}},
                      {"training", {{"lr", 3e-5}, {"epochs", 2}}},
                      {"future_setting", "kept"}};
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(config);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention_head_size, 32);
  EXPECT_EQ(c->head_size(), 32);
  EXPECT_EQ(c->conv_kernel_size, 3);
  ASSERT_TRUE(c->cls_dropout.has_value());
  EXPECT_DOUBLE_EQ(*c->cls_dropout, 0.25);
  EXPECT_EQ(c->dserve.task, Task::kAnswer);
  EXPECT_EQ(c->dserve.max_length, 256);
  EXPECT_EQ(c->dserve.qa.doc_stride, 64);
  EXPECT_EQ(c->dserve.qa.max_answer_tokens, 20);
  EXPECT_EQ(c->dserve.qa.n_best, 5);
  EXPECT_DOUBLE_EQ(c->dserve.qa.null_score_diff_threshold, -1.5);
  EXPECT_TRUE(c->dserve.share_layers);
  EXPECT_DOUBLE_EQ(c->dserve.temperature, 1.7);
  EXPECT_EQ(c->dserve.eval_metrics["f1"], 71.5);
  EXPECT_EQ(c->dserve.extra["future_setting"], "kept");
  EXPECT_EQ(c->extra["my_custom"], config["my_custom"]);

  json written = c->ToJson();
  // HF names written explicitly.
  EXPECT_EQ(written["embedding_size"], 96);
  EXPECT_EQ(written["pooler_hidden_size"], 96);
  EXPECT_EQ(written["id2label"], (json{{"0", "no"}, {"1", "yes"}}));
  EXPECT_EQ(written["label2id"], (json{{"no", 0}, {"yes", 1}}));
  EXPECT_EQ(written["transformers_version"], "4.44.0");
  EXPECT_EQ(written["my_custom"], config["my_custom"]);
  EXPECT_EQ(written["dserve"]["task"], "answer");
  EXPECT_EQ(written["dserve"]["future_setting"], "kept");

  // Through text and back: the same config, and the same JSON again.
  absl::StatusOr<ModelConfig> again = ModelConfig::FromJsonText(written.dump(2));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), written);
  EXPECT_EQ(again->dserve.qa.doc_stride, 64);
  EXPECT_EQ(again->dserve.training, config["dserve"]["training"]);
  EXPECT_EQ(again->labels(), c->labels());
  EXPECT_EQ(again->extra, c->extra);
}

TEST(ModelConfigRoundTrip, FromFileErrorsNameThePath) {
  std::string dir = ::testing::TempDir() + "/model_config_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/config.json";
  {
    std::ofstream out(path);
    out << R"({"hidden_size": 96, "num_attention_heads": 5})";
  }
  absl::StatusOr<ModelConfig> c = ModelConfig::FromFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path + ": num_attention_heads (5)"));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("hidden_size (96)"));
  {
    std::ofstream out(path);
    out << "{not json";
  }
  c = ModelConfig::FromFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path + ": not valid JSON"));
  c = ModelConfig::FromFile(dir + "/missing.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(dir + "/missing.json"));
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

TEST(ModelConfigValidation, MinimalIsValid) {
  absl::StatusOr<ModelConfig> c = ModelConfig::FromJson(Minimal());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->Validate().ok());
}

TEST(ModelConfigValidation, HeadsMustDivideHidden) {
  ExpectError(With(Minimal(), "num_attention_heads", 5),
              {"num_attention_heads (5) does not divide hidden_size (96)"});
  // An explicit attention_head_size lifts the constraint, as in transformers.
  json config = With(Minimal(), "num_attention_heads", 5);
  config["attention_head_size"] = 16;
  EXPECT_TRUE(ModelConfig::FromJson(config).ok());
}

TEST(ModelConfigValidation, UnknownActivations) {
  ExpectError(With(Minimal(), "hidden_act", "gelu2"), {"hidden_act", "gelu2", "gelu_new"});
  ExpectError(With(Minimal(), "pooler_hidden_act", "GELU"), {"pooler_hidden_act", "\"GELU\""});
  ExpectError(With(Minimal(), "conv_act", "softplus"), {"conv_act", "softplus"});
  for (const std::string& act : SupportedActivations()) {
    EXPECT_TRUE(ModelConfig::FromJson(With(Minimal(), "hidden_act", act)).ok()) << act;
  }
  EXPECT_EQ(SupportedActivations().size(), 11u);
}

TEST(ModelConfigValidation, NonPositiveSizes) {
  for (const char* field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "max_position_embeddings"}) {
    ExpectError(With(Minimal(), field, 0), {field, "must be positive, got 0"});
    ExpectError(With(Minimal(), field, -3), {field, "must be positive, got -3"});
  }
  ExpectError(With(Minimal(), "type_vocab_size", -1), {"type_vocab_size", "-1"});
  ExpectError(With(Minimal(), "embedding_size", -48), {"embedding_size", "-48"});
  ExpectError(With(Minimal(), "attention_head_size", 0), {"attention_head_size", "positive"});
  ExpectError(With(Minimal(), "conv_kernel_size", -1), {"conv_kernel_size", "-1"});
  ExpectError(With(Minimal(), "conv_kernel_size", 4), {"conv_kernel_size", "odd"});
  ExpectError(With(With(Minimal(), "conv_kernel_size", 3), "conv_groups", 5),
              {"conv_groups", "divide hidden_size"});
  ExpectError(With(Minimal(), "num_labels", 0), {"num_labels", "positive"});
  ExpectError(With(Minimal(), "pad_token_id", 1000), {"pad_token_id", "vocab_size"});
}

TEST(ModelConfigValidation, UnknownPosAttType) {
  ExpectError(With(Minimal(), "pos_att_type", {"c2p", "p2p"}),
              {"pos_att_type", "\"p2p\"", "c2p, p2c"});
  ExpectError(With(Minimal(), "pos_att_type", "c2p|x2y"), {"pos_att_type", "x2y"});
  ExpectError(With(Minimal(), "pos_att_type", {"C2P"}), {"pos_att_type", "C2P"});
  ExpectError(With(Minimal(), "pos_att_type", 3), {"pos_att_type", "must be a list"});
  ExpectError(With(Minimal(), "pos_att_type", {1}), {"pos_att_type", "strings"});
}

TEST(ModelConfigValidation, TypeMismatch) {
  ExpectError(With(Minimal(), "hidden_size", "abc"),
              {"config.json: hidden_size must be an integer, got string \"abc\""});
  ExpectError(With(Minimal(), "hidden_size", 96.5), {"hidden_size", "integer"});
  ExpectError(With(Minimal(), "relative_attention", "yes"),
              {"relative_attention", "true or false"});
  ExpectError(With(Minimal(), "layer_norm_eps", "1e-7"), {"layer_norm_eps", "number"});
  ExpectError(With(Minimal(), "hidden_act", 1), {"hidden_act", "string"});
  ExpectError(With(Minimal(), "architectures", "DebertaV2Model"), {"architectures", "list"});
  ExpectError(With(Minimal(), "id2label", {{"zero", "a"}}), {"id2label", "\"zero\""});
  ExpectError(With(Minimal(), "id2label", {{"0", 1}}), {"id2label", "string"});
  ExpectError(With(Minimal(), "id2label", {{"0", "a"}, {"2", "c"}}), {"id2label", "without gaps"});
  ExpectError(With(Minimal(), "label2id", {{"a", "0"}}), {"label2id", "integer"});
  ExpectError(With(Minimal(), "dserve", 5), {"dserve", "object"});
  ExpectError(json::array(), {"config.json", "object"});
  absl::StatusOr<ModelConfig> text = ModelConfig::FromJsonText("{\"hidden_size\": ");
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("config.json: not valid JSON"));
}

TEST(ModelConfigValidation, OtherFields) {
  ExpectError(With(Minimal(), "pooler_hidden_size", 64),
              {"pooler_hidden_size (64) must equal hidden_size (96)"});
  ExpectError(With(Minimal(), "hidden_dropout_prob", 1.5), {"hidden_dropout_prob", "[0, 1]"});
  ExpectError(With(Minimal(), "cls_dropout", -0.1), {"cls_dropout", "[0, 1]"});
  ExpectError(With(Minimal(), "layer_norm_eps", 0), {"layer_norm_eps", "positive"});
  ExpectError(With(Minimal(), "norm_rel_ebd", "layernorm"), {"norm_rel_ebd", "layernorm"});
  ExpectError(With(Minimal(), "problem_type", "ranking"), {"problem_type", "ranking"});
  ExpectError(With(Minimal(), "model_type", "bert"), {"model_type", "\"bert\"", "deberta-v2, albert, deberta"});
}

TEST(ModelConfigValidation, DserveBlock) {
  ExpectError(With(Minimal(), "dserve", {{"task", "summarize"}}),
              {"dserve.task", "classify, answer, rerank, mlm", "summarize"});
  ExpectError(With(Minimal(), "dserve", {{"task", 1}}), {"dserve.task", "string"});
  ExpectError(With(Minimal(), "dserve", {{"qa", {{"doc_stride", -1}}}}),
              {"dserve.qa.doc_stride", "-1"});
  ExpectError(With(Minimal(), "dserve", {{"qa", {{"max_answer_tokens", 0}}}}),
              {"dserve.qa.max_answer_tokens", "positive"});
  ExpectError(With(Minimal(), "dserve", {{"qa", {{"n_best", 0}}}}), {"dserve.qa.n_best"});
  ExpectError(With(Minimal(), "dserve", {{"qa", {{"doc_strid", 64}}}}),
              {"dserve.qa.doc_strid", "not a known setting"});
  ExpectError(With(Minimal(), "dserve", {{"qa", {{"doc_stride", "64"}}}}),
              {"dserve.qa.doc_stride", "integer"});
  ExpectError(With(Minimal(), "dserve", {{"qa", 3}}), {"dserve.qa", "object"});
  ExpectError(With(Minimal(), "dserve", {{"max_length", -1}}), {"dserve.max_length"});
  ExpectError(With(Minimal(), "dserve", {{"max_length", 1024}}),
              {"dserve.max_length", "max_position_embeddings"});
  ExpectError(With(Minimal(), "dserve", {{"temperature", 0}}), {"dserve.temperature"});
  ExpectError(With(Minimal(), "dserve", {{"share_layers", 1}}), {"dserve.share_layers"});
  ExpectError(With(Minimal(), "dserve", {{"eval_metrics", {1, 2}}}), {"dserve.eval_metrics"});
  json mismatch = With(Minimal(), "architectures", {"DebertaV2ForQuestionAnswering"});
  ExpectError(With(mismatch, "dserve", {{"task", "classify"}}),
              {"dserve.task", "DebertaV2ForQuestionAnswering"});
}

TEST(ModelConfigValidation, ValidateOnAStructBuiltInCode) {
  ModelConfig c;
  EXPECT_TRUE(c.Validate().ok());
  c.num_attention_heads = 7;
  absl::Status status = c.Validate();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("num_attention_heads (7)"));
  c = ModelConfig();
  c.pos_att_type = {"c2p", "bogus"};
  EXPECT_THAT(std::string(c.Validate().message()), HasSubstr("bogus"));
}

}  // namespace
}  // namespace dserve

namespace dserve {
namespace {

std::string AlbertGoldenConfig(const std::string& name) {
  return std::string(DSERVE_SHARED_DIR) + "/goldens/albert/" + name + "/config.json";
}

TEST(ModelConfigAlbert, GoldenClsFields) {
  auto c = ModelConfig::FromFile(AlbertGoldenConfig("albert_cls"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "albert");
  ASSERT_TRUE(c->albert.has_value());
  EXPECT_EQ(c->albert->num_hidden_groups, 1);
  EXPECT_EQ(c->albert->inner_group_num, 1);
  EXPECT_EQ(c->embedding_dim(), 48);
  EXPECT_EQ(c->hidden_size, 96);
  EXPECT_EQ(c->hidden_act, "gelu_new");
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-12);
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_TRUE(c->position_biased_input);
  EXPECT_EQ(c->task(), Task::kClassify);
  EXPECT_THAT(c->labels(), ElementsAre("billing", "refund", "shipping", "other"));
}

TEST(ModelConfigAlbert, AlbertConfigDefaultsWhenAbsent) {
  // transformers AlbertConfig's defaults, not DebertaV2Config's.
  auto c = ModelConfig::FromJson(json{{"model_type", "albert"}, {"architectures", {"AlbertForQuestionAnswering"}}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->vocab_size, 30000);
  EXPECT_EQ(c->embedding_dim(), 128);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->intermediate_size, 16384);
  EXPECT_EQ(c->hidden_act, "gelu_new");
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-12);
  EXPECT_EQ(c->type_vocab_size, 2);
  EXPECT_EQ(c->max_position_embeddings, 512);
  EXPECT_DOUBLE_EQ(c->albert->classifier_dropout_prob, 0.1);
  EXPECT_EQ(c->task(), Task::kAnswer);
}

TEST(ModelConfigAlbert, RoundTripKeepsAlbertFieldsOnly) {
  auto c = ModelConfig::FromFile(AlbertGoldenConfig("albert_qa"));
  ASSERT_TRUE(c.ok()) << c.status();
  const json j = c->ToJson();
  EXPECT_EQ(j["model_type"], "albert");
  EXPECT_EQ(j["num_hidden_groups"], 1);
  EXPECT_EQ(j["inner_group_num"], 1);
  EXPECT_EQ(j["position_embedding_type"], "absolute");
  EXPECT_EQ(j["embedding_size"], 32);
  EXPECT_FALSE(j.contains("pos_att_type"));
  EXPECT_FALSE(j.contains("relative_attention"));
  auto again = ModelConfig::FromJson(j);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->ToJson(), j);
}

TEST(ModelConfigAlbert, ErrorsNameTheField) {
  json base = {{"model_type", "albert"}, {"hidden_size", 64}, {"num_attention_heads", 4}};
  json relative = base;
  relative["position_embedding_type"] = "relative_key";
  ExpectError(relative, {"position_embedding_type", "relative_key", "absolute"});
  json groups = base;
  groups["num_hidden_groups"] = 0;
  ExpectError(groups, {"num_hidden_groups", "positive"});
  json inner = base;
  inner["inner_group_num"] = "two";
  ExpectError(inner, {"inner_group_num", "integer"});
  ExpectError(json{{"model_type", "bert"}}, {"model_type", "bert", "deberta-v2, albert"});
}

}  // namespace
}  // namespace dserve
