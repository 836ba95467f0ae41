// CheckpointVersion / CheckpointFingerprint (server/checkpoint_version.h):
// every file that changes what a model computes changes the version, the
// byte-level BPE files of DeBERTa v1 included; nothing else does.
#include "server/checkpoint_version.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace dserve {
namespace {

class CheckpointVersionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/checkpoint_version_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Write("config.json", R"({"model_type": "deberta"})");
    Write("model.safetensors", "weights");
    Write("vocab.json", R"({"[PAD]": 0, "[CLS]": 1, "a": 2})");
    Write("merges.txt", "#version: 0.2\na b\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::binary | std::ios::trunc) << text;
  }
  std::string Version() {
    auto v = CheckpointVersion(dir_);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : "";
  }

  std::string dir_;
};

TEST_F(CheckpointVersionTest, SameFilesSameVersion) {
  const std::string v = Version();
  EXPECT_EQ(v.size(), 16u);
  EXPECT_EQ(Version(), v);
  EXPECT_EQ(CheckpointFingerprint(dir_), CheckpointFingerprint(dir_));
}

TEST_F(CheckpointVersionTest, BpeMergesAndVocabChangeTheVersion) {
  const std::string v0 = Version();
  const std::string f0 = CheckpointFingerprint(dir_);
  Write("merges.txt", "#version: 0.2\nb a\n");  // same size, other merge
  const std::string v1 = Version();
  EXPECT_NE(v1, v0);
  EXPECT_NE(CheckpointFingerprint(dir_), f0);
  Write("vocab.json", R"({"[PAD]": 0, "[CLS]": 1, "b": 2})");
  const std::string v2 = Version();
  EXPECT_NE(v2, v1);
  Write("special_tokens_map.json", R"({"cls_token": "[CLS]"})");
  EXPECT_NE(Version(), v2);
}

TEST_F(CheckpointVersionTest, ConfigAndWeightsChangeTheVersion) {
  const std::string v0 = Version();
  Write("config.json", R"({"model_type": "deberta", "num_labels": 3})");
  const std::string v1 = Version();
  EXPECT_NE(v1, v0);
  Write("model.safetensors", "weightz");
  EXPECT_NE(Version(), v1);
}

TEST_F(CheckpointVersionTest, UnrelatedFilesDoNot) {
  const std::string v0 = Version();
  Write("README.md", "notes");
  EXPECT_EQ(Version(), v0);
}

}  // namespace
}  // namespace dserve
