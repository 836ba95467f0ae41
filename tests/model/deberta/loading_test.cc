// Loading real-world checkpoint layouts: tensors without the "deberta."
// scope, extra heads a Hub file carries (ignored), missing or misshapen
// tensors (errors naming them), share_layers, and bf16-stored weights.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/checkpoint/safetensors.h"
#include "model/deberta/model.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(DSERVE_SHARED_DIR) + "/goldens/model/cls_factorized";

// A scratch checkpoint: the golden's config.json and a rewritten weights file.
class LoadingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(DSERVE_BINARY_DIR) / "loading_test" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(kGolden + "/config.json", dir_ / "config.json");
    auto golden = SafetensorsFile::Open(kGolden + "/model.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *std::move(golden);
  }

  // Writes model.safetensors from the golden tensors, renamed / dropped /
  // extended by `edit` (which returns false to drop a tensor).
  void WriteWeights(const std::function<bool(TensorToWrite&)>& edit,
                    const std::vector<TensorToWrite>& extra = {}) {
    std::vector<TensorToWrite> tensors;
    for (const TensorView& v : golden_->tensors()) {
      TensorToWrite t{v.name, v.dtype, v.shape, v.data};
      if (edit(t)) tensors.push_back(t);
    }
    tensors.insert(tensors.end(), extra.begin(), extra.end());
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), tensors).ok());
  }

  std::vector<float> Logits(const std::string& dir) {
    auto model = DebertaModel::Load(dir, ModelOptions{});
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return {};
    auto out = (*model)->Run(TokenBatch::Pad({{1, 17, 250, 31, 2}}, {}, 0));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->logits : std::vector<float>();
  }

  fs::path dir_;
  std::unique_ptr<SafetensorsFile> golden_;
};

TEST_F(LoadingTest, BareNamesAndExtraHubTensorsLoadTheSameModel) {
  std::vector<float> bias(1200, 0.5f), dense(96 * 96, 0.25f);
  WriteWeights(
      [](TensorToWrite& t) {
        if (t.name.rfind("deberta.", 0) == 0) t.name = t.name.substr(8);
        return true;
      },
      {{"lm_predictions.lm_head.bias", DType::kF32, {1200}, bias.data()},
       {"mask_predictions.dense.weight", DType::kF32, {96, 96}, dense.data()}});
  const auto want = Logits(kGolden);
  const auto got = Logits(dir_.string());
  ASSERT_EQ(want.size(), 5u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]);
}

TEST_F(LoadingTest, MissingTensorIsNamed) {
  WriteWeights([](TensorToWrite& t) { return t.name != "deberta.encoder.layer.1.attention.self.key_proj.bias"; });
  auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("encoder.layer.1.attention.self.key_proj.bias"), std::string::npos)
      << model.status();
  EXPECT_NE(model.status().message().find(dir_.string()), std::string::npos) << model.status();
}

TEST_F(LoadingTest, WrongShapeIsNamed) {
  std::vector<float> small(10, 0.0f);
  WriteWeights(
      [](TensorToWrite& t) { return t.name != "classifier.bias"; },
      {{"classifier.bias", DType::kF32, {10}, small.data()}});
  auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("classifier.bias"), std::string::npos) << model.status();
  EXPECT_NE(model.status().message().find("[10]"), std::string::npos) << model.status();
}

TEST_F(LoadingTest, SharedLayersUseLayerZeroForEveryLayer) {
  // ALBERT-style sharing: only layer 0 is stored; the config says 3 layers.
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir_ / "config.json"));
  config["dserve"] = {{"share_layers", true}};
  std::ofstream(dir_ / "config.json") << config.dump(2);
  WriteWeights([](TensorToWrite& t) {
    return t.name.find("encoder.layer.1.") == std::string::npos && t.name.find("encoder.layer.2.") == std::string::npos;
  });
  auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = (*model)->Run(TokenBatch::Pad({{1, 17, 250, 31, 2}}, {}, 0));
  ASSERT_TRUE(out.ok()) << out.status();
  // Running layer 0 three times differs from the golden's three layers.
  const auto golden = Logits(kGolden);
  double diff = 0;
  for (size_t i = 0; i < golden.size(); ++i) diff += std::fabs(golden[i] - out->logits[i]);
  EXPECT_GT(diff, 1e-3);
}

TEST_F(LoadingTest, Bf16StoredWeightsLoadAsFp32) {
  // Round every weight to bf16 on disk; loading as fp32 must stay close.
  std::vector<std::vector<uint16_t>> storage;
  storage.reserve(golden_->tensors().size());
  WriteWeights([&](TensorToWrite& t) {
    const auto* src = static_cast<const float*>(t.data);
    int64_t n = 1;
    for (auto d : t.shape) n *= d;
    std::vector<uint16_t> bf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &src[i], 4);
      bf[static_cast<size_t>(i)] = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    }
    storage.push_back(std::move(bf));
    t.dtype = DType::kBF16;
    t.data = storage.back().data();
    return true;
  });
  const auto want = Logits(kGolden);
  const auto got = Logits(dir_.string());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.15) << i;
}

}  // namespace
}  // namespace dserve
