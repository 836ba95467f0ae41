#include "model/checkpoint/checkpoint_dir.h"
#include "tests/model/checkpoint/temp_dir.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

std::string GoldenDir(const std::string& name) {
  return std::string(DSERVE_SHARED_DIR) + "/goldens/model/" + name;
}


std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

ModelConfig SmallConfig(int64_t labels) {
  json j = {{"model_type", "deberta-v2"}, {"architectures", {"DebertaV2ForSequenceClassification"}},
            {"hidden_size", 8}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
            {"intermediate_size", 16}, {"vocab_size", 10}, {"num_labels", labels},
            {"transformers_version", "4.44.0"}};
  return *ModelConfig::FromJson(j);
}

TEST(ResolveCheckpoint, GoldenDirectory) {
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(GoldenDir("cls_factorized"));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->config, GoldenDir("cls_factorized") + "/config.json");
  EXPECT_THAT(files->weights, ElementsAre(GoldenDir("cls_factorized") + "/model.safetensors"));
  EXPECT_TRUE(files->weight_index.empty());
  EXPECT_EQ(files->tokenizer_kind, TokenizerKind::kNone);  // goldens ship no tokenizer
  EXPECT_TRUE(files->tokenizer.empty());
}

TEST(ResolveCheckpoint, MissingPieces) {
  TempDir dir;
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(dir.File("absent"));
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(files.status().message()), HasSubstr(dir.File("absent")));

  files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()),
              HasSubstr("checkpoint " + dir.path() + ": config.json is missing"));

  WriteText(dir.File("config.json"), "{}");
  files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());
  EXPECT_EQ(files.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("model.safetensors"));
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("pytorch_model.bin"));

  WriteText(dir.File("plain_file"), "x");
  files = ResolveCheckpoint(dir.File("plain_file"));
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("not a directory"));
}

TEST(ResolveCheckpoint, TrainingOutputFolderResolvesToBest) {
  // dserve train --out OUT writes OUT/best and OUT/last; OUT itself has no config.json.
  TempDir out;
  for (const char* sub : {"best", "last"}) {
    std::filesystem::create_directories(out.File(sub));
    WriteText(out.File(std::string(sub) + "/config.json"), "{}");
    WriteText(out.File(std::string(sub) + "/model.safetensors"), "x");
  }
  WriteText(out.File("best/spm.model"), "x");
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(out.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->dir, out.File("best"));
  EXPECT_EQ(files->config, out.File("best/config.json"));
  EXPECT_THAT(files->weights, ElementsAre(out.File("best/model.safetensors")));
  EXPECT_EQ(files->tokenizer, out.File("best/spm.model"));
  // A folder with a config.json of its own is that checkpoint, best/ or not.
  WriteText(out.File("config.json"), "{}");
  WriteText(out.File("model.safetensors"), "x");
  files = ResolveCheckpoint(out.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->dir, out.path());
}

TEST(ResolveCheckpoint, ShardedIndexAndTokenizerChoice) {
  TempDir dir;
  WriteText(dir.File("config.json"), "{}");
  WriteText(dir.File("model.safetensors.index.json"),
            R"({"metadata": {"total_size": 12}, "weight_map": {
                 "a.weight": "model-00002-of-00002.safetensors",
                 "b.weight": "model-00001-of-00002.safetensors",
                 "c.weight": "model-00001-of-00002.safetensors"}})");
  WriteText(dir.File("model-00001-of-00002.safetensors"), "x");
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());  // shard 2 missing
  EXPECT_THAT(std::string(files.status().message()),
              HasSubstr("model-00002-of-00002.safetensors"));

  WriteText(dir.File("model-00002-of-00002.safetensors"), "x");
  WriteText(dir.File("tokenizer.json"), "{}");
  files = ResolveCheckpoint(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->weight_index, dir.File("model.safetensors.index.json"));
  EXPECT_THAT(files->weights, ElementsAre(dir.File("model-00001-of-00002.safetensors"),
                                          dir.File("model-00002-of-00002.safetensors")));
  EXPECT_EQ(files->weight_map.at("a.weight"), dir.File("model-00002-of-00002.safetensors"));
  EXPECT_EQ(files->weight_map.size(), 3u);
  EXPECT_EQ(files->tokenizer_kind, TokenizerKind::kTokenizerJson);
  EXPECT_EQ(files->tokenizer, dir.File("tokenizer.json"));

  // spm.model wins over tokenizer.json.
  WriteText(dir.File("spm.model"), "spm");
  WriteText(dir.File("added_tokens.json"), R"({"[MASK]": 128000})");
  files = ResolveCheckpoint(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->tokenizer_kind, TokenizerKind::kSentencePiece);
  EXPECT_EQ(files->tokenizer, dir.File("spm.model"));
  EXPECT_EQ(files->added_tokens, dir.File("added_tokens.json"));

  // A shard name escaping the directory is refused.
  WriteText(dir.File("model.safetensors.index.json"),
            R"({"weight_map": {"a": "../elsewhere.safetensors"}})");
  files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("\"a\""));
  WriteText(dir.File("model.safetensors.index.json"), R"({"weights": {}})");
  files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("weight_map"));
  WriteText(dir.File("model.safetensors.index.json"), "{oops");
  files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()), HasSubstr("not valid JSON"));
}

TEST(ResolveCheckpoint, PytorchBinWhenThereIsNoSafetensors) {
  TempDir dir;
  WriteText(dir.File("config.json"), "{}");
  WriteText(dir.File("pytorch_model.bin"), "x");
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(files->weights, ElementsAre(dir.File("pytorch_model.bin")));
  EXPECT_EQ(files->weight_index, "");

  // safetensors wins, single or sharded.
  WriteText(dir.File("model.safetensors.index.json"), R"({"weight_map": {"a": "model-1.safetensors"}})");
  WriteText(dir.File("model-1.safetensors"), "x");
  files = ResolveCheckpoint(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(files->weights, ElementsAre(dir.File("model-1.safetensors")));
  WriteText(dir.File("model.safetensors"), "x");
  files = ResolveCheckpoint(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(files->weights, ElementsAre(dir.File("model.safetensors")));
}

TEST(ResolveCheckpoint, ShardedPytorchBin) {
  TempDir dir;
  WriteText(dir.File("config.json"), "{}");
  WriteText(dir.File("pytorch_model.bin.index.json"),
            R"({"metadata": {"total_size": 8}, "weight_map": {
                 "a.weight": "pytorch_model-00001-of-00002.bin",
                 "b.weight": "pytorch_model-00002-of-00002.bin"}})");
  WriteText(dir.File("pytorch_model-00001-of-00002.bin"), "x");
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(dir.path());
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(std::string(files.status().message()),
              HasSubstr("pytorch_model-00002-of-00002.bin listed in pytorch_model.bin.index.json is missing"));
  WriteText(dir.File("pytorch_model-00002-of-00002.bin"), "x");
  files = ResolveCheckpoint(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->weight_index, dir.File("pytorch_model.bin.index.json"));
  EXPECT_THAT(files->weights, ElementsAre(dir.File("pytorch_model-00001-of-00002.bin"),
                                          dir.File("pytorch_model-00002-of-00002.bin")));
  EXPECT_EQ(files->weight_map.at("b.weight"), dir.File("pytorch_model-00002-of-00002.bin"));
}

// Writes a checkpoint, resolves it and reads every file back.
void ExpectCheckpoint(const std::string& dir, const ModelConfig& config,
                      const std::vector<float>& weight, const std::string& spm_content) {
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  absl::StatusOr<ModelConfig> read = ModelConfig::FromFile(files->config);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->ToJson(), config.ToJson());
  ASSERT_EQ(files->weights.size(), 1u);
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> st = SafetensorsFile::Open(files->weights[0]);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ((*st)->metadata().at("format"), "pt");  // transformers requires it
  const TensorView* w = (*st)->Find("classifier.weight");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->num_bytes, weight.size() * 4);
  EXPECT_EQ(std::memcmp(w->data, weight.data(), w->num_bytes), 0);
  if (spm_content.empty()) {
    EXPECT_EQ(files->tokenizer_kind, TokenizerKind::kNone);
  } else {
    EXPECT_EQ(files->tokenizer_kind, TokenizerKind::kSentencePiece);
    EXPECT_EQ(ReadText(files->tokenizer), spm_content);
  }
}

TEST(WriteCheckpointDir, WriteThenResolveRoundTrip) {
  TempDir root;
  WriteText(root.File("source.model"), "sentencepiece bytes");
  ModelConfig config = SmallConfig(3);
  config.dserve.task = Task::kClassify;
  config.dserve.eval_metrics = {{"accuracy", 0.9}};
  std::vector<float> weight(3 * 8);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = 0.25f * static_cast<float>(i);
  const std::string dir = root.File("ckpt");
  absl::Status status = WriteCheckpointDir(
      dir, config, {{"classifier.weight", DType::kF32, {3, 8}, weight.data()}},
      root.File("source.model"), json{{"trainer_state.json", {{"global_step", 42}}}});
  ASSERT_TRUE(status.ok()) << status;
  ExpectCheckpoint(dir, config, weight, "sentencepiece bytes");
  EXPECT_EQ(json::parse(ReadText(dir + "/trainer_state.json"))["global_step"], 42);
  EXPECT_EQ(json::parse(ReadText(dir + "/config.json"))["transformers_version"], "4.44.0");
  // Nothing but the checkpoint and the source is left in the parent.
  EXPECT_THAT(root.Entries(), ElementsAre("ckpt", "source.model"));
}

TEST(WriteCheckpointDir, TokenizerJsonKeepsItsName) {
  TempDir root;
  WriteText(root.File("tokenizer.json"), R"({"model": {"type": "Unigram"}})");
  std::vector<float> weight(2 * 8, 1.0f);
  const std::string dir = root.File("ckpt");
  ASSERT_TRUE(WriteCheckpointDir(dir, SmallConfig(2),
                                 {{"classifier.weight", DType::kF32, {2, 8}, weight.data()}},
                                 root.File("tokenizer.json"))
                  .ok());
  absl::StatusOr<CheckpointFiles> files = ResolveCheckpoint(dir);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->tokenizer_kind, TokenizerKind::kTokenizerJson);
}

class OverwriteTest : public ::testing::TestWithParam<bool> {};

TEST_P(OverwriteTest, ReplacesExistingDirectory) {
  internal::SetUseRenameExchangeForTesting(GetParam());
  TempDir root;
  const std::string dir = root.File("ckpt");
  std::vector<float> old_weight(2 * 8, 1.0f), new_weight(2 * 8, -3.0f);
  ASSERT_TRUE(WriteCheckpointDir(dir, SmallConfig(2),
                                 {{"classifier.weight", DType::kF32, {2, 8}, old_weight.data()}},
                                 "")
                  .ok());
  WriteText(dir + "/stale.txt", "from the old checkpoint");
  ModelConfig config = SmallConfig(2);
  config.dserve.temperature = 2.0;
  absl::Status status = WriteCheckpointDir(
      dir + "/", config, {{"classifier.weight", DType::kF32, {2, 8}, new_weight.data()}}, "");
  ASSERT_TRUE(status.ok()) << status;
  ExpectCheckpoint(dir, config, new_weight, "");
  EXPECT_FALSE(std::filesystem::exists(dir + "/stale.txt"));  // a whole new directory
  EXPECT_THAT(root.Entries(), ElementsAre("ckpt"));            // no .old / .tmp left
  internal::SetUseRenameExchangeForTesting(true);
}

INSTANTIATE_TEST_SUITE_P(RenameExchangeOnOff, OverwriteTest, ::testing::Bool());

TEST(WriteCheckpointDir, FailedWriteLeavesOldDirectoryIntact) {
  TempDir root;
  const std::string dir = root.File("ckpt");
  std::vector<float> old_weight(2 * 8, 1.0f), new_weight(2 * 8, 5.0f);
  ModelConfig old_config = SmallConfig(2);
  WriteText(root.File("spm.model"), "old spm");
  ASSERT_TRUE(WriteCheckpointDir(dir, old_config,
                                 {{"classifier.weight", DType::kF32, {2, 8}, old_weight.data()}},
                                 root.File("spm.model"))
                  .ok());
  ModelConfig new_config = SmallConfig(2);
  new_config.dserve.temperature = 3.0;

  // Fails while writing the weights (duplicate tensor name).
  absl::Status status = WriteCheckpointDir(
      dir, new_config,
      {{"classifier.weight", DType::kF32, {2, 8}, new_weight.data()},
       {"classifier.weight", DType::kF32, {2, 8}, new_weight.data()}},
      "");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(dir));
  EXPECT_THAT(std::string(status.message()), HasSubstr("given twice"));
  ExpectCheckpoint(dir, old_config, old_weight, "old spm");
  EXPECT_THAT(root.Entries(), ElementsAre("ckpt", "spm.model"));

  // Fails after config and weights are written (tokenizer source missing).
  status = WriteCheckpointDir(dir, new_config,
                              {{"classifier.weight", DType::kF32, {2, 8}, new_weight.data()}},
                              root.File("missing.model"));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("missing.model"));
  ExpectCheckpoint(dir, old_config, old_weight, "old spm");
  EXPECT_THAT(root.Entries(), ElementsAre("ckpt", "spm.model"));

  // Refused before anything is written.
  ModelConfig invalid = SmallConfig(2);
  invalid.num_attention_heads = 3;
  status = WriteCheckpointDir(dir, invalid, {}, "");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("num_attention_heads"));
  status = WriteCheckpointDir(dir, new_config, {}, "", json{{"config.json", {}}});
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr("config.json"));
  status = WriteCheckpointDir(dir, new_config, {}, "", json{{"../escape.json", {}}});
  ASSERT_FALSE(status.ok());
  ExpectCheckpoint(dir, old_config, old_weight, "old spm");
  EXPECT_THAT(root.Entries(), ElementsAre("ckpt", "spm.model"));
}

TEST(WriteCheckpointDir, MissingParentIsAnError) {
  TempDir root;
  absl::Status status = WriteCheckpointDir(root.File("no/such/dir"), SmallConfig(2), {}, "");
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()), HasSubstr(root.File("no/such")));
}

}  // namespace
}  // namespace dserve
