// DeBERTa v1 checkpoints as users have them and as HF's DebertaConfig allows
// them: Hub files with tensors Hugging Face ignores (skipped, named in one
// log line), bare DebertaModel names, missing and misshapen tensors and bad
// config fields (errors naming them), and the settings no golden covers,
// talking_head and relative_attention off, against the float64 test
// reference (v1_reference.h, itself checked against the goldens).
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <torch/torch.h>

#include "model/checkpoint/safetensors.h"
#include "model/deberta/model.h"
#include "model/util/logging.h"
#include "tests/model/deberta/golden_files.h"
#include "tests/model/deberta_v1/v1_reference.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kCls = golden::GoldenDir("deberta_v1/cls_mnli");
const std::string kQa = golden::GoldenDir("deberta_v1/qa_clamped");

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

// A float32 tensor to write, owning its bytes.
struct Owned {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

class V1Loading : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(DSERVE_BINARY_DIR) / "deberta_v1_loading_test" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  void Use(const std::string& golden) {
    source_ = golden;
    config_ = ReadJson(golden + "/config.json");
    auto file = SafetensorsFile::Open(golden + "/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
  }

  // config.json = config_; model.safetensors = the golden's tensors, renamed
  // or dropped by `edit` (false drops), plus `extra`.
  void Write(const std::function<bool(TensorToWrite&)>& edit, const std::vector<Owned>& extra = {}) {
    {
      std::ofstream out(dir_ / "config.json");
      out << config_.dump(2);
    }
    std::vector<TensorToWrite> tensors;
    for (const TensorView& v : file_->tensors()) {
      TensorToWrite t{v.name, v.dtype, v.shape, v.data};
      if (edit(t)) tensors.push_back(t);
    }
    for (const Owned& o : extra) tensors.push_back({o.name, DType::kF32, o.shape, o.values.data()});
    ASSERT_TRUE(WriteSafetensors((dir_ / "model.safetensors").string(), tensors).ok());
  }

  static Owned Random(const std::string& name, std::vector<int64_t> shape, double scale, uint64_t seed,
                      const torch::Tensor& add = {}) {
    torch::manual_seed(seed);
    torch::Tensor t = torch::randn(shape) * scale;
    if (add.defined()) t = t + add;
    t = t.contiguous();
    return Owned{name, shape, std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel())};
  }

  // A pair of 30 tokens and a padded batch of it with a shorter row.
  static TokenBatch Inputs() {
    std::vector<int64_t> a = {1}, types = {0};
    for (int i = 0; i < 12; ++i) a.push_back(4 + (37 * i + 11) % 990), types.push_back(0);
    a.push_back(2), types.push_back(0);
    for (int i = 0; i < 15; ++i) a.push_back(4 + (53 * i + 7) % 990), types.push_back(1);
    a.push_back(2), types.push_back(1);
    std::vector<int64_t> b(a.begin(), a.begin() + 9), btypes(9, 0);
    b.push_back(2), btypes.push_back(0);
    return TokenBatch::Pad({a, b}, {types, btypes}, 0);
  }

  // Our fp32 outputs of `dir` against the float64 reference on the written
  // checkpoint (hidden states of valid rows, head outputs); returns max |d|.
  double CheckAgainstReference(double tol = 1e-4) {
    auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return 1e9;
    const TokenBatch batch = Inputs();
    auto out = (*model)->Run(batch, /*want_hidden=*/true);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return 1e9;
    auto w = v1test::ReadTensors((dir_ / "model.safetensors").string());
    const int64_t B = batch.batch_size, L = batch.length;
    auto ids = torch::tensor(batch.input_ids).view({B, L});
    auto mask = torch::tensor(batch.attention_mask).view({B, L});
    auto types = torch::tensor(batch.token_type_ids).view({B, L});
    torch::NoGradGuard no_grad;
    const auto ref = v1test::Forward((*model)->config(), w, ids, mask, types);
    double worst = 0;
    auto close = [&](float got, double want, const std::string& what) {
      const double diff = std::fabs(got - want);
      worst = std::max(worst, diff);
      EXPECT_LE(diff, tol + tol * std::fabs(want)) << what << ": got " << got << " want " << want;
    };
    const auto hidden = ref.layers.back();
    for (int64_t r = 0; r < B; ++r) {
      for (int64_t j = 0; j < L; ++j) {
        if (batch.attention_mask[r * L + j] == 0) continue;
        for (int64_t k = 0; k < out->hidden_size; ++k) {
          close(out->hidden[(r * L + j) * out->hidden_size + k], hidden[r][j][k].item<double>(), "hidden");
        }
        if (ref.start.defined()) {
          close(out->start_logits[r * L + j], ref.start[r][j].item<double>(), "start");
          close(out->end_logits[r * L + j], ref.end[r][j].item<double>(), "end");
        }
      }
      if (ref.logits.defined()) {
        for (int64_t k = 0; k < out->num_labels; ++k) {
          close(out->logits[r * out->num_labels + k], ref.logits[r][k].item<double>(), "logits");
        }
      }
    }
    std::cout << "[ max |d|  ] " << ::testing::UnitTest::GetInstance()->current_test_info()->name()
              << ": fp32 vs float64 reference " << worst << std::endl;
    return worst;
  }

  fs::path dir_;
  std::string source_;
  json config_;
  std::unique_ptr<SafetensorsFile> file_;
};

// Talking heads (no golden has them): random head mixes, far from the
// identity, before and after the softmax; the fused CPU attention stands
// aside and the torch path matches the reference.
TEST_F(V1Loading, TalkingHeadMatchesTheReference) {
  Use(kCls);
  config_["talking_head"] = true;
  std::vector<Owned> extra;
  const int64_t h = config_["num_attention_heads"];
  for (int n = 0; n < config_["num_hidden_layers"].get<int>(); ++n) {
    const std::string p = "deberta.encoder.layer." + std::to_string(n) + ".attention.self.";
    extra.push_back(Random(p + "head_logits_proj.weight", {h, h}, 0.5, 100 + n, torch::eye(h)));
    extra.push_back(Random(p + "head_weights_proj.weight", {h, h}, 0.5, 200 + n, torch::eye(h)));
  }
  Write([](TensorToWrite&) { return true; }, extra);
  EXPECT_LE(CheckAgainstReference(), 1e-5);
  // And the mixes matter: the golden's own outputs differ from these.
  auto plain = DebertaModel::Load(kCls, ModelOptions{});
  auto talking = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_TRUE(plain.ok() && talking.ok());
  auto a = (*plain)->Run(Inputs());
  auto b = (*talking)->Run(Inputs());
  ASSERT_TRUE(a.ok() && b.ok());
  double diff = 0;
  for (size_t i = 0; i < a->logits.size(); ++i) diff = std::max(diff, std::fabs(double(a->logits[i]) - b->logits[i]));
  EXPECT_GT(diff, 1e-2);
}

TEST_F(V1Loading, TalkingHeadWithoutItsTensorsNamesThem) {
  Use(kCls);
  config_["talking_head"] = true;
  Write([](TensorToWrite&) { return true; });
  auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("deberta.encoder.layer.0.attention.self.head_logits_proj.weight"),
            std::string::npos)
      << model.status();
}

// relative_attention false with pos_att_type still set: no relative terms,
// but v1 still divides the scores by sqrt(d * (1 + len(pos_att_type))).
TEST_F(V1Loading, NoRelativeAttentionKeepsTheScale) {
  Use(kQa);
  config_["relative_attention"] = false;
  Write([](TensorToWrite& t) {
    return t.name.find("rel_embeddings") == std::string::npos && t.name.find("pos_proj") == std::string::npos &&
           t.name.find("pos_q_proj") == std::string::npos;
  });
  EXPECT_LE(CheckAgainstReference(), 1e-5);
}

// The goldens' own checkpoints through the padded-batch reference check
// (batch of two, one row padded): the harness itself is sound.
TEST_F(V1Loading, GoldenCheckpointsMatchTheReference) {
  for (const std::string& golden : {kCls, kQa, golden::GoldenDir("deberta_v1/rerank_c2p_factorized")}) {
    Use(golden);
    Write([](TensorToWrite&) { return true; });
    EXPECT_LE(CheckAgainstReference(), 1e-5) << golden;
  }
}

// Hub files: a position table without position_biased_input, the old
// position_ids buffer, legacy and new MLM-head tensors in a classifier. They
// load with the golden's outputs, and one log line names what was skipped.
TEST_F(V1Loading, TensorsHuggingFaceIgnoresAreSkippedAndLogged) {
  Use(kCls);
  ASSERT_FALSE(config_["position_biased_input"].get<bool>());
  const std::vector<std::string> ignored = {
      "deberta.embeddings.position_embeddings.weight", "deberta.embeddings.position_ids",
      "cls.predictions.transform.dense.weight",         "cls.predictions.bias",
      "lm_predictions.lm_head.dense.weight",            "lm_predictions.lm_head.bias"};
  Write([](TensorToWrite&) { return true; },
        {Random(ignored[0], {128, 64}, 0.2, 1), Random(ignored[1], {1, 128}, 1.0, 2),
         Random(ignored[2], {64, 64}, 0.2, 3), Random(ignored[3], {1000}, 0.2, 4),
         Random(ignored[4], {64, 64}, 0.2, 5), Random(ignored[5], {1000}, 0.2, 6)});

  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto logger = Logger("model");
  const auto level = logger->level();
  logger->set_level(spdlog::level::info);
  logger->sinks().push_back(sink);
  auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
  logger->sinks().pop_back();
  logger->set_level(level);
  ASSERT_TRUE(model.ok()) << model.status();

  const std::string log = captured.str();
  size_t lines = 0;
  for (size_t at = log.find("skipped"); at != std::string::npos; at = log.find("skipped", at + 1)) ++lines;
  EXPECT_EQ(lines, 1u) << log;
  for (const std::string& name : ignored) EXPECT_NE(log.find(name), std::string::npos) << name << "\n" << log;
  EXPECT_EQ(log.find("unused"), std::string::npos) << log;  // nothing unexpected

  const json golden = golden::ReadGolden("deberta_v1/cls_mnli");
  for (const auto& c : golden["cases"]) {
    auto out = (*model)->Run(TokenBatch::Pad({c["input_ids"].get<std::vector<int64_t>>()}, {}, 0));
    ASSERT_TRUE(out.ok()) << out.status();
    const auto want = golden::Flatten(c["logits"]);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out->logits[i], want[i], 1e-4) << c["desc"];
  }
}

// A tensor nobody knows is not skipped silently: a warning names it.
TEST_F(V1Loading, UnknownTensorsAreWarnedAbout) {
  Use(kCls);
  Write([](TensorToWrite&) { return true; }, {Random("deberta.encoder.mystery.weight", {4}, 1.0, 7)});
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  auto logger = Logger("model");
  logger->sinks().push_back(sink);
  auto model = DebertaModel::Load(dir_.string(), ModelOptions{});
  logger->sinks().pop_back();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_NE(captured.str().find("deberta.encoder.mystery.weight"), std::string::npos) << captured.str();
  EXPECT_NE(captured.str().find("warn"), std::string::npos) << captured.str();
}

// A bare DebertaModel file (no "deberta." prefix) with a QA head loads the same.
TEST_F(V1Loading, BareDebertaModelNames) {
  Use(kQa);
  Write([](TensorToWrite& t) {
    if (t.name.rfind("deberta.", 0) == 0) t.name = t.name.substr(8);
    return true;
  });
  auto bare = DebertaModel::Load(dir_.string(), ModelOptions{});
  auto golden = DebertaModel::Load(kQa, ModelOptions{});
  ASSERT_TRUE(bare.ok()) << bare.status();
  ASSERT_TRUE(golden.ok()) << golden.status();
  auto a = (*bare)->Run(Inputs());
  auto b = (*golden)->Run(Inputs());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->start_logits, b->start_logits);
  EXPECT_EQ(a->end_logits, b->end_logits);
}

TEST_F(V1Loading, MissingOrMisshapenTensorsAreNamed) {
  Use(kQa);
  Write([](TensorToWrite& t) { return t.name != "deberta.encoder.layer.1.attention.self.q_bias"; });
  auto missing = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("deberta.encoder.layer.1.attention.self.q_bias"), std::string::npos)
      << missing.status();
  // max_relative_positions 16 -> a [32, H] table; a config saying 24 wants 48 rows.
  config_["max_relative_positions"] = 24;
  Write([](TensorToWrite&) { return true; });
  auto shape = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("rel_embeddings"), std::string::npos) << shape.status();
  EXPECT_NE(shape.status().message().find("[48, 64]"), std::string::npos) << shape.status();
  // The p2c projection of a "c2p|p2c" layer.
  Use(kQa);
  Write([](TensorToWrite& t) { return t.name != "deberta.encoder.layer.0.attention.self.pos_q_proj.bias"; });
  auto p2c = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(p2c.ok());
  EXPECT_NE(p2c.status().message().find("pos_q_proj.bias"), std::string::npos) << p2c.status();
}

TEST_F(V1Loading, UnsupportedConfigValuesNameTheField) {
  Use(kCls);
  config_["pos_att_type"] = "c2p|p2c|p2p";
  Write([](TensorToWrite&) { return true; });
  auto p2p = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(p2p.ok());
  EXPECT_NE(p2p.status().message().find("config.json: pos_att_type"), std::string::npos) << p2p.status();
  EXPECT_NE(p2p.status().message().find("p2p"), std::string::npos) << p2p.status();
  config_["pos_att_type"] = "c2p|p2c";
  config_["talking_head"] = 1;
  Write([](TensorToWrite&) { return true; });
  auto talking = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(talking.ok());
  EXPECT_NE(talking.status().message().find("talking_head"), std::string::npos) << talking.status();
  config_.erase("talking_head");
  config_["hidden_act"] = "swiglu";
  Write([](TensorToWrite&) { return true; });
  auto act = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(act.ok());
  EXPECT_NE(act.status().message().find("hidden_act"), std::string::npos) << act.status();
  config_["hidden_act"] = "gelu";
  config_["architectures"] = json::array({"DebertaForMaskedLM"});
  Write([](TensorToWrite&) { return true; });
  auto mlm = DebertaModel::Load(dir_.string(), ModelOptions{});
  ASSERT_FALSE(mlm.ok());
  EXPECT_NE(mlm.status().message().find("DebertaForMaskedLM"), std::string::npos) << mlm.status();
}

}  // namespace
}  // namespace dserve
