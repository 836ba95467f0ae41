// ALBERT checkpoints as users have them: bare AlbertModel names and the
// extra tensors of hub files (ignored), missing or misshapen tensors and
// unservable architectures (errors naming them), and the parameter-group
// fields (num_hidden_groups, inner_group_num), checked against Hugging
// Face's own outputs for the golden checkpoint: a checkpoint whose groups
// all hold the golden's one parameter set must give the golden's logits.
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/albert/albert_encoder.h"
#include "model/checkpoint/safetensors.h"
#include "model/deberta/model.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kGolden = std::string(DSERVE_SHARED_DIR) + "/goldens/albert/albert_cls";
const std::string kLayer = "albert.encoder.albert_layer_groups.0.albert_layers.0.";

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

class AlbertLoadingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(DSERVE_BINARY_DIR) / "albert_loading_test" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_ = ReadJson(kGolden + "/config.json");
    auto golden = SafetensorsFile::Open(kGolden + "/model.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *std::move(golden);
  }

  void WriteConfig() {
    std::ofstream out(dir_ / "config.json");
    out << config_.dump(2);
  }

  // model.safetensors from the golden tensors, renamed / dropped by `edit`
  // (false drops), copied by `copies` (name -> extra names), plus `extra`.
  void WriteWeights(const std::function<bool(TensorToWrite&)>& edit,
                    const std::function<std::vector<std::string>(const std::string&)>& copies = nullptr,
                    const std::vector<TensorToWrite>& extra = {}) {
    std::vector<TensorToWrite> tensors;
    for (const TensorView& v : golden_->tensors()) {
      TensorToWrite t{v.name, v.dtype, v.shape, v.data};
      if (copies) {
        for (const std::string& name : copies(v.name)) tensors.push_back({name, v.dtype, v.shape, v.data});
      }
      if (edit(t)) tensors.push_back(t);
    }
    tensors.insert(tensors.end(), extra.begin(), extra.end());
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), tensors).ok());
  }

  static absl::StatusOr<std::vector<float>> Logits(const std::string& dir) {
    auto model = DebertaModel::Load(dir, ModelOptions{});
    if (!model.ok()) return model.status();
    auto out = (*model)->Run(TokenBatch::Pad({{2, 17, 250, 31, 3, 40, 41, 3}}, {{0, 0, 0, 0, 0, 1, 1, 1}}, 0));
    if (!out.ok()) return out.status();
    return out->logits;
  }

  void ExpectGoldenLogits() {
    auto want = Logits(kGolden);
    auto got = Logits(dir_.string());
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 4u);
    for (size_t i = 0; i < want->size(); ++i) EXPECT_NEAR((*got)[i], (*want)[i], 1e-5) << i;
  }

  std::string LoadError() {
    auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
    EXPECT_FALSE(model.ok());
    return model.ok() ? "" : std::string(model.status().message());
  }

  fs::path dir_;
  json config_;
  std::unique_ptr<SafetensorsFile> golden_;
};

TEST_F(AlbertLoadingTest, BareNamesAndHubExtrasLoadTheSameModel) {
  std::vector<int64_t> position_ids(128);
  for (size_t i = 0; i < position_ids.size(); ++i) position_ids[i] = static_cast<int64_t>(i);
  std::vector<float> predictions(900, 0.5f), sop(2 * 96, 0.25f);
  WriteConfig();
  WriteWeights(
      [](TensorToWrite& t) {
        if (t.name.rfind("albert.", 0) == 0) t.name = t.name.substr(7);  // a bare AlbertModel file
        return true;
      },
      nullptr,
      {{"albert.embeddings.position_ids", DType::kI64, {1, 128}, position_ids.data()},
       {"predictions.bias", DType::kF32, {900}, predictions.data()},
       {"sop_classifier.classifier.weight", DType::kF32, {2, 96}, sop.data()}});
  ExpectGoldenLogits();
}

TEST_F(AlbertLoadingTest, MissingTensorIsNamedWithTheFile) {
  WriteConfig();
  WriteWeights([](TensorToWrite& t) { return t.name != kLayer + "ffn.weight"; });
  const std::string error = LoadError();
  EXPECT_NE(error.find(kLayer + "ffn.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("model.safetensors"), std::string::npos) << error;
}

TEST_F(AlbertLoadingTest, MisshapenTensorNamesBothShapes) {
  config_["intermediate_size"] = 100;
  WriteConfig();
  WriteWeights([](TensorToWrite&) { return true; });
  const std::string error = LoadError();
  EXPECT_NE(error.find(kLayer + "ffn.weight"), std::string::npos) << error;
  EXPECT_NE(error.find("[192, 96]"), std::string::npos) << error;
  EXPECT_NE(error.find("[100, 96]"), std::string::npos) << error;
}

TEST_F(AlbertLoadingTest, UnservableArchitectureAndRelativePositionsAreRefused) {
  config_["architectures"] = {"AlbertForTokenClassification"};
  WriteConfig();
  WriteWeights([](TensorToWrite&) { return true; });
  std::string error = LoadError();
  EXPECT_NE(error.find("cannot be served"), std::string::npos) << error;
  EXPECT_NE(error.find("AlbertForTokenClassification"), std::string::npos) << error;
  EXPECT_NE(error.find("config.json"), std::string::npos) << error;

  config_["architectures"] = {"AlbertForSequenceClassification"};
  config_["position_embedding_type"] = "relative_key_query";
  WriteConfig();
  error = LoadError();
  EXPECT_NE(error.find("position_embedding_type"), std::string::npos) << error;
  EXPECT_NE(error.find("relative_key_query"), std::string::npos) << error;
}

// num_hidden_layers 2 over two groups of one layer each, both groups holding
// the golden's parameters: the same function as the golden (2 layers, 1 group).
TEST_F(AlbertLoadingTest, TwoGroupsOfTheSameParametersGiveTheGolden) {
  config_["num_hidden_groups"] = 2;
  WriteConfig();
  WriteWeights([](TensorToWrite&) { return true; },
               [](const std::string& name) -> std::vector<std::string> {
                 const std::string group0 = "albert.encoder.albert_layer_groups.0.";
                 if (name.rfind(group0, 0) != 0) return {};
                 return {"albert.encoder.albert_layer_groups.1." + name.substr(group0.size())};
               });
  ExpectGoldenLogits();
}

// num_hidden_layers 1 with one group of two inner layers, both the golden's:
// again two applications of the same parameters.
TEST_F(AlbertLoadingTest, TwoInnerLayersOfTheSameParametersGiveTheGolden) {
  config_["num_hidden_layers"] = 1;
  config_["inner_group_num"] = 2;
  WriteConfig();
  WriteWeights([](TensorToWrite&) { return true; },
               [](const std::string& name) -> std::vector<std::string> {
                 if (name.rfind(kLayer, 0) != 0) return {};
                 return {"albert.encoder.albert_layer_groups.0.albert_layers.1." + name.substr(kLayer.size())};
               });
  ExpectGoldenLogits();
}

// The second group really runs: with its FFN output zeroed the logits move.
TEST_F(AlbertLoadingTest, TheSecondGroupIsUsed) {
  config_["num_hidden_groups"] = 2;
  WriteConfig();
  std::vector<float> zeros(96 * 192, 0.0f);
  WriteWeights([](TensorToWrite&) { return true; },
               [](const std::string& name) -> std::vector<std::string> {
                 const std::string group0 = "albert.encoder.albert_layer_groups.0.";
                 if (name.rfind(group0, 0) != 0 || name == kLayer + "ffn_output.weight") return {};
                 return {"albert.encoder.albert_layer_groups.1." + name.substr(group0.size())};
               },
               {{"albert.encoder.albert_layer_groups.1.albert_layers.0.ffn_output.weight", DType::kF32, {96, 192},
                 zeros.data()}});
  auto want = Logits(kGolden);
  auto got = Logits(dir_.string());
  ASSERT_TRUE(want.ok() && got.ok()) << got.status();
  double diff = 0;
  for (size_t i = 0; i < want->size(); ++i) diff = std::max(diff, static_cast<double>(std::abs((*got)[i] - (*want)[i])));
  EXPECT_GT(diff, 1e-3);
}

TEST(AlbertGroups, LayerToGroupAsTransformersComputesIt) {
  // int(i / (num_hidden_layers / num_hidden_groups)) in floating point.
  std::vector<int64_t> got;
  for (int64_t i = 0; i < 12; ++i) got.push_back(AlbertEncoder::GroupOfLayer(i, 12, 5));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4}));
  got.clear();
  for (int64_t i = 0; i < 12; ++i) got.push_back(AlbertEncoder::GroupOfLayer(i, 12, 3));
  EXPECT_EQ(got, (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(AlbertEncoder::GroupOfLayer(i, 24, 1), 0);
}

}  // namespace
}  // namespace dserve
