// Parity with Hugging Face's own DebertaForSequenceClassification /
// DebertaForQuestionAnswering outputs (../shared/goldens/deberta_v1): every
// case alone, the padded batch (valid positions), the cls extra case longer
// than max_position_embeddings, the layer-by-layer trace (with the fused CPU
// attention and with torch ops), bf16 (argmax kept) and int8 (argmax kept,
// logits near fp32); and the float64 test reference (v1_reference.h) against
// the same goldens, so that it can judge the configurations without one.
//
// Tolerance: |got - want| <= 1e-4 + 1e-4 |want| (the goldens'
// recommended_tolerance and issue 26's contract). The goldens' float64
// re-derivation agrees within 2.7e-6 and HF's own batch-vs-single within
// 2.6e-6, so a correct float32 implementation lands near 1e-5; the table
// of deliberate mistakes in the README moves outputs by >= 0.07 (the eps
// choice alone, 1e-5, is the one mistake below this bar). Each test also
// prints its max |diff| and checks it against kExpectedFp32 = 1e-5 (measured
// 1.7e-6 to 3.7e-6 on AVX-512 with oneDNN; 2.7x room for other CPUs), so a
// drift an order of magnitude above float32 rounding shows as well.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/deberta/encoder.h"
#include "model/deberta/model.h"
#include "model/deberta/relative_position.h"
#include "model/deberta/weights.h"
#include "model/deberta_v1/deberta_v1_weights.h"
#include "model/heads/heads.h"
#include "model/util/cpu_info.h"
#include "tests/model/deberta/golden_files.h"
#include "tests/model/deberta_v1/v1_reference.h"

namespace dserve {
namespace {

using golden::Flatten;
using golden::GoldenDir;
using golden::ReadGolden;
using nlohmann::json;

constexpr double kTol = 1e-4;
constexpr double kExpectedFp32 = 1e-5;

// DSERVE_TEST_DEVICE=cuda runs the served-model parity (fp32, bf16) on a GPU
// (deploy/gpu-check.sh); the float32-rounding bar kExpectedFp32 is the CPU's
// (other GEMMs round differently), the 1e-4 contract holds everywhere.
std::string TestDevice() {
  const char* device = std::getenv("DSERVE_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}
double ExpectedFp32() { return TestDevice() == "cpu" ? kExpectedFp32 : kTol; }

// Tracks the worst |diff| of a test; fails on a value beyond the tolerance.
class Compare {
 public:
  explicit Compare(std::string name) : name_(std::move(name)) {}
  ~Compare() {
    std::cout << "[ max |d|  ] " << name_ << ": " << worst_ << " over " << values_ << " values" << std::endl;
    ::testing::Test::RecordProperty("max_abs_diff", std::to_string(worst_));
  }
  void Close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
             double tol = kTol) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
      worst_ = std::max(worst_, diff);
      ASSERT_LE(diff, tol + tol * std::fabs(want[i])) << what << " at " << i << ": got " << got[i] << " want "
                                                       << want[i];
    }
    values_ += got.size();
  }
  double worst() const { return worst_; }

 private:
  std::string name_;
  double worst_ = 0;
  size_t values_ = 0;
};

std::vector<float> ToVector(const torch::Tensor& t) {
  auto c = t.to(torch::kCPU, torch::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

TokenBatch Single(const json& c) {
  return TokenBatch::Pad({c["input_ids"].get<std::vector<int64_t>>()},
                         {c["token_type_ids"].get<std::vector<int64_t>>()}, 0);
}

TokenBatch Batch(const json& b) {
  TokenBatch batch;
  batch.batch_size = static_cast<int64_t>(b["input_ids"].size());
  batch.length = b["padded_length"].get<int64_t>();
  for (const auto& row : b["input_ids"]) for (int64_t v : row) batch.input_ids.push_back(v);
  for (const auto& row : b["attention_mask"]) for (int64_t v : row) batch.attention_mask.push_back(v);
  for (const auto& row : b["token_type_ids"]) for (int64_t v : row) batch.token_type_ids.push_back(v);
  return batch;
}

std::vector<float> Row(const std::vector<float>& flat, int64_t row, int64_t width, int64_t take) {
  return std::vector<float>(flat.begin() + row * width, flat.begin() + row * width + take);
}

size_t Argmax(const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); }
double TopMargin(std::vector<float> v) {
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return static_cast<double>(v[0]) - v[1];
}
double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

std::string Name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param.substr(info.param.find('/') + 1);
}

class V1Golden : public ::testing::TestWithParam<std::string> {
 protected:
  // int8 runs on the CPU only.
  std::shared_ptr<const DebertaModel> Load(const std::string& dtype) {
    auto model = DebertaModel::Load(GoldenDir(GetParam()), ModelOptions{dtype, dtype == "int8" ? "cpu" : TestDevice()});
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *model : nullptr;
  }
};

TEST_P(V1Golden, EachCaseAloneMatchesFp32) {
  auto model = Load("fp32");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->config().model_type, "deberta");
  const json golden = ReadGolden(GetParam());
  Compare cmp(GetParam() + " cases alone");
  int hidden = 0;
  ASSERT_EQ(golden["cases"].size(), 7u);
  for (const auto& c : golden["cases"]) {
    const std::string what = GetParam() + " case " + c["desc"].get<std::string>();
    auto out = model->Run(Single(c), /*want_hidden=*/true);
    ASSERT_TRUE(out.ok()) << what << ": " << out.status();
    if (c.contains("logits")) cmp.Close(out->logits, Flatten(c["logits"]), what + " logits");
    if (c.contains("start_logits")) {
      cmp.Close(out->start_logits, Flatten(c["start_logits"]), what + " start");
      cmp.Close(out->end_logits, Flatten(c["end_logits"]), what + " end");
    }
    if (c.contains("last_hidden_state")) {
      cmp.Close(out->hidden, Flatten(c["last_hidden_state"]), what + " hidden");
      ++hidden;
    }
  }
  EXPECT_GE(hidden, 2);
  EXPECT_LE(cmp.worst(), ExpectedFp32());
}

TEST_P(V1Golden, PaddedBatchMatchesOnValidPositions) {
  auto model = Load("fp32");
  ASSERT_TRUE(model);
  const json golden = ReadGolden(GetParam());
  const json& b = golden["batch"];
  const TokenBatch batch = Batch(b);
  auto out = model->Run(batch, /*want_hidden=*/true);
  ASSERT_TRUE(out.ok()) << out.status();
  Compare cmp(GetParam() + " padded batch");
  const int64_t L = batch.length;
  for (int64_t r = 0; r < batch.batch_size; ++r) {
    const std::string what = GetParam() + " batch row " + std::to_string(r);
    if (b.contains("logits")) {
      cmp.Close(Row(out->logits, r, out->num_labels, out->num_labels), Flatten(b["logits"][r]), what + " logits");
    }
    if (b.contains("start_logits_valid")) {
      const auto start = Flatten(b["start_logits_valid"][r]);
      const auto n = static_cast<int64_t>(start.size());
      cmp.Close(Row(out->start_logits, r, L, n), start, what + " start");
      cmp.Close(Row(out->end_logits, r, L, n), Flatten(b["end_logits_valid"][r]), what + " end");
    }
  }
  const auto& hidden = b["last_hidden_state_valid_first_two"];
  ASSERT_EQ(hidden.size(), 2u);
  for (size_t r = 0; r < hidden.size(); ++r) {
    const auto want = Flatten(hidden[r]);
    cmp.Close(Row(out->hidden, static_cast<int64_t>(r), L * out->hidden_size, static_cast<int64_t>(want.size())),
              want, GetParam() + " batch hidden row " + std::to_string(r));
  }
  EXPECT_LE(cmp.worst(), ExpectedFp32());
}

// debug_trace: the relative rows, the embedding output and every layer's
// output of one case, through the encoder itself; once with our CPU kernels
// (fused attention, fused add+LayerNorm, oneDNN linear) and once as plain
// torch ops.
TEST_P(V1Golden, TraceMatchesLayerByLayer) {
  const json golden = ReadGolden(GetParam());
  const json& trace = golden["debug_trace"];
  auto config = ModelConfig::FromFile(GoldenDir(GetParam()) + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(trace["max_relative_positions_effective"].get<int64_t>(), config->max_relative());
  const int64_t L = trace["length"].get<int64_t>();
  const RelativePositionMap map(*config);
  const json& rows = trace["rel_table_row"];
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < L; ++j) ASSERT_EQ(map.Index(i - j), rows[i][j].get<int64_t>()) << i << ", " << j;
  }
  const json& c = golden["cases"][trace["sequence_index"].get<size_t>()];
  EncoderInput input;
  input.input_ids = torch::tensor(c["input_ids"].get<std::vector<int64_t>>()).unsqueeze(0);
  input.attention_mask = torch::ones_like(input.input_ids);
  input.token_type_ids = torch::tensor(c["token_type_ids"].get<std::vector<int64_t>>()).unsqueeze(0);
  if (config->type_vocab_size == 0) input.token_type_ids = torch::Tensor();
  for (bool kernels : {true, false}) {
    auto store = WeightStore::Open({GoldenDir(GetParam()) + "/model.safetensors"}, torch::kFloat, torch::kCPU);
    ASSERT_TRUE(store.ok()) << store.status();
    auto weights = LoadDebertaV1EncoderWeights(*config, **store);
    ASSERT_TRUE(weights.ok()) << weights.status();
    DebertaEncoder::Options options;
    if (!kernels) options.kernels = DebertaEncoder::Options::Kernels::None();
    auto encoder = DebertaEncoder::Create(*config, *std::move(weights), options);
    ASSERT_TRUE(encoder.ok()) << encoder.status();
    Compare cmp(GetParam() + (kernels ? " trace, CPU kernels" : " trace, torch ops"));
    torch::InferenceMode guard;
    std::vector<torch::Tensor> states;
    const torch::Tensor last = (*encoder)->Forward(input, &states);
    ASSERT_EQ(static_cast<int64_t>(states.size()), config->num_hidden_layers + 1);
    cmp.Close(ToVector(states[0]), Flatten(trace["embedding_output"]), "embedding_output");
    for (int64_t n = 0; n < config->num_hidden_layers; ++n) {
      const std::string key = "layer" + std::to_string(n) + "_output";
      cmp.Close(ToVector(states[n + 1]), Flatten(trace[key]), key);
    }
    if (trace.contains("pooled_output")) {
      auto head = ClassificationHead::Load(*config, **store);
      ASSERT_TRUE(head.ok()) << head.status();
      const torch::Tensor pooled =
          head->pooler_act(torch::linear(last.select(1, 0), head->pooler.weight, head->pooler.bias));
      cmp.Close(ToVector(pooled), Flatten(trace["pooled_output"]), "pooled_output");
    }
    EXPECT_LE(cmp.worst(), kExpectedFp32);
  }
}

// The float64 reference of the other tests, against Hugging Face: every
// case's outputs and the trace's layer-0 attention probabilities.
TEST_P(V1Golden, TestReferenceMatchesHuggingFace) {
  const json golden = ReadGolden(GetParam());
  auto config = ModelConfig::FromFile(GoldenDir(GetParam()) + "/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto w = v1test::ReadTensors(GoldenDir(GetParam()) + "/model.safetensors");
  Compare cmp(GetParam() + " float64 reference");
  torch::NoGradGuard no_grad;
  for (const auto& c : golden["cases"]) {
    auto ids = torch::tensor(c["input_ids"].get<std::vector<int64_t>>()).unsqueeze(0);
    auto types = torch::tensor(c["token_type_ids"].get<std::vector<int64_t>>()).unsqueeze(0);
    const auto ref = v1test::Forward(*config, w, ids, torch::ones_like(ids), types);
    if (c.contains("logits")) cmp.Close(ToVector(ref.logits), Flatten(c["logits"]), "logits", 1e-5);
    if (c.contains("start_logits")) {
      cmp.Close(ToVector(ref.start), Flatten(c["start_logits"]), "start", 1e-5);
      cmp.Close(ToVector(ref.end), Flatten(c["end_logits"]), "end", 1e-5);
    }
    if (c.contains("last_hidden_state")) {
      cmp.Close(ToVector(ref.layers.back()), Flatten(c["last_hidden_state"]), "hidden", 1e-5);
    }
    if (c["index"] == golden["debug_trace"]["sequence_index"]) {
      cmp.Close(ToVector(ref.layer0_probs), Flatten(golden["debug_trace"]["layer0_attention_probs"]),
                "layer0_attention_probs", 1e-5);
    }
  }
}

// bf16 keeps ~3 significant digits; an argmax may only move where the fp32
// top-2 margin is below 0.05 (as the v2 goldens' test; cls_mnli's margins
// are all >= 0.169, so every one of its argmaxes must hold).
TEST_P(V1Golden, Bf16KeepsArgmax) {
  std::cout << "[ cpu      ] " << CpuPathNote() << std::endl;
  auto model = Load("bf16");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->dtype(), "bf16");
  const json golden = ReadGolden(GetParam());
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    auto out = model->Run(Single(c));
    ASSERT_TRUE(out.ok()) << out.status();
    auto argmax = [&](const std::vector<float>& got, const std::vector<float>& want) {
      if (Argmax(got) != Argmax(want)) {
        EXPECT_LT(TopMargin(want), 0.05) << c["desc"] << ": bf16 argmax " << Argmax(got) << ", HF " << Argmax(want);
      }
      ++checked;
    };
    if (c.contains("logits") && c["logits"].size() > 1) {
      argmax(out->logits, Flatten(c["logits"]));
    } else if (c.contains("logits")) {
      EXPECT_NEAR(out->logits[0], Flatten(c["logits"])[0], 0.1) << c["desc"];  // a reranker's score
      ++checked;
    } else {
      argmax(out->start_logits, Flatten(c["start_logits"]));
      argmax(out->end_logits, Flatten(c["end_logits"]));
    }
  }
  EXPECT_GE(checked, 7);
}

// --dtype int8, with the v2 goldens' bound (tests/model/deberta/int8_test.cc:
// |int8 - fp32| <= 0.2 max(1, max |logit|); classification argmax outright,
// QA argmax unless fp32's top two are within twice that).
TEST_P(V1Golden, Int8KeepsArgmaxAndLogitsNearFp32) {
  auto fp32 = Load("fp32");
  auto int8 = Load("int8");
  ASSERT_TRUE(fp32 && int8);
  EXPECT_EQ(int8->dtype(), "int8");
  const json golden = ReadGolden(GetParam());
  json cases = golden["cases"];
  for (const auto& c : golden["extra_cases"]) cases.push_back(c);
  double worst = 0;
  for (const auto& c : cases) {
    const TokenBatch batch = Single(c);
    auto want = fp32->Run(batch);
    auto got = int8->Run(batch);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status() << " " << got.status();
    auto compare = [&](const std::vector<float>& g, const std::vector<float>& f, const std::vector<float>& hf,
                       bool outright) {
      const double scale = std::max(1.0, MaxAbs(f));
      double diff = 0;
      for (size_t i = 0; i < g.size(); ++i) diff = std::max(diff, std::fabs(static_cast<double>(g[i]) - f[i]));
      worst = std::max(worst, diff / scale);
      EXPECT_LE(diff, 0.2 * scale) << c.value("desc", "extra");
      if (g.size() < 2) return;
      EXPECT_EQ(Argmax(f), Argmax(hf));
      if (outright) {
        EXPECT_EQ(Argmax(g), Argmax(hf)) << c.value("desc", "extra");
      } else if (Argmax(g) != Argmax(f)) {
        EXPECT_LT(TopMargin(f), 0.4 * scale) << c.value("desc", "extra");
      }
    };
    if (c.contains("logits")) compare(got->logits, want->logits, Flatten(c["logits"]), true);
    if (c.contains("start_logits")) {
      compare(got->start_logits, want->start_logits, Flatten(c["start_logits"]), false);
      compare(got->end_logits, want->end_logits, Flatten(c["end_logits"]), false);
    }
  }
  std::cout << "[ int8     ] " << GetParam() << ": worst |int8 - fp32| / max(1, max|logit|) = " << worst << std::endl;
  EXPECT_GT(worst, 0.0) << "int8 gave fp32's logits exactly: the int8 dense layers did not run";
}

INSTANTIATE_TEST_SUITE_P(Goldens, V1Golden,
                         ::testing::Values("deberta_v1/cls_mnli", "deberta_v1/qa_clamped",
                                           "deberta_v1/rerank_c2p_factorized"),
                         Name);

// A 151-token pair: longer than max_position_embeddings (128), legal without
// absolute positions; distances of +-128 and beyond share the table's ends.
TEST(V1GoldenExtra, LongerThanMaxPositionsMatches) {
  auto model = DebertaModel::Load(GoldenDir("deberta_v1/cls_mnli"), ModelOptions{"fp32", TestDevice()});
  ASSERT_TRUE(model.ok()) << model.status();
  const json golden = ReadGolden("deberta_v1/cls_mnli");
  ASSERT_EQ(golden["extra_cases"].size(), 1u);
  Compare cmp("cls_mnli extra case");
  for (const auto& c : golden["extra_cases"]) {
    ASSERT_GT(c["input_ids"].size(), 128u);
    auto out = (*model)->Run(Single(c), /*want_hidden=*/true);
    ASSERT_TRUE(out.ok()) << out.status();
    cmp.Close(out->logits, Flatten(c["logits"]), "extra logits");
    const auto row0 = Flatten(c["last_hidden_state_row0"]);
    cmp.Close(Row(out->hidden, 0, 0, static_cast<int64_t>(row0.size())), row0, "extra hidden row 0");
  }
  EXPECT_LE(cmp.worst(), ExpectedFp32());
  // With absolute positions (qa_clamped) 129 tokens are refused.
  auto qa = DebertaModel::Load(GoldenDir("deberta_v1/qa_clamped"), ModelOptions{"fp32", "cpu"});
  ASSERT_TRUE(qa.ok()) << qa.status();
  auto too_long = (*qa)->Run(TokenBatch::Pad({std::vector<int64_t>(129, 5)}, {}, 0));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_position_embeddings"), std::string::npos) << too_long.status();
}

// type_vocab_size 0: the pair's token types (0/1) are neither refused nor used.
TEST(V1GoldenExtra, TokenTypesIgnoredWithoutTypeEmbeddings) {
  auto model = DebertaModel::Load(GoldenDir("deberta_v1/cls_mnli"), ModelOptions{"fp32", "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  const json golden = ReadGolden("deberta_v1/cls_mnli");
  const json& pair = golden["cases"][4];
  const auto types = pair["token_type_ids"].get<std::vector<int64_t>>();
  ASSERT_NE(std::count(types.begin(), types.end(), 1), 0);
  auto with = (*model)->Run(Single(pair));
  auto without = (*model)->Run(TokenBatch::Pad({pair["input_ids"].get<std::vector<int64_t>>()}, {}, 0));
  ASSERT_TRUE(with.ok() && without.ok()) << with.status() << " " << without.status();
  EXPECT_EQ(with->logits, without->logits);
}

}  // namespace
}  // namespace dserve
