// Parity with Hugging Face's own DebertaV2 outputs (shared/goldens/model):
// each case alone, then all cases padded into one batch (valid positions
// only), in fp32 (|diff| <= 1e-4) and bf16 (argmax kept).
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model/deberta/model.h"
#include "tests/model/deberta/golden_files.h"
#include "model/util/cpu_info.h"

namespace dserve {
namespace {

using nlohmann::json;
constexpr double kTol = 1e-4;

// DSERVE_TEST_DEVICE=cuda runs the parity suite on a GPU (deploy/gpu-check.sh).
std::string TestDevice() {
  const char* device = std::getenv("DSERVE_TEST_DEVICE");
  return device != nullptr && *device != '\0' ? device : "cpu";
}

using golden::Flatten;
using golden::GoldenDir;
using golden::ReadGolden;

// max |a - b| with the combined atol/rtol rule; fails the test when beyond.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(got[i] - want[i]);
    worst = std::max(worst, diff);
    ASSERT_LE(diff, kTol + kTol * std::fabs(want[i])) << what << " at " << i << ": got " << got[i]
                                                       << " want " << want[i];
  }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

TokenBatch Single(const json& c) {
  std::vector<std::vector<int64_t>> types;
  if (c.contains("token_type_ids")) types.push_back(c["token_type_ids"].get<std::vector<int64_t>>());
  return TokenBatch::Pad({c["input_ids"].get<std::vector<int64_t>>()}, types, 0);
}

std::vector<float> Row(const std::vector<float>& flat, int64_t row, int64_t width, int64_t take) {
  return std::vector<float>(flat.begin() + row * width, flat.begin() + row * width + take);
}

// bf16 keeps ~3 significant digits: logits of magnitude ~5 move by up to
// ~0.02-0.04 depending on the CPU's bf16 path (AMX, avx512_bf16 or fp32
// emulation round at different steps). An argmax may only change where the
// fp32 top-2 margin is below this (the DeBERTa goldens' margins are all
// >= 0.085 and albert_cls's >= 0.0998, so their argmaxes must hold; albert_qa's
// start-logit margins are 0.006-0.048, near-ties a flip is allowed on).
constexpr double kBf16ArgmaxMargin = 0.05;

// Top-1 minus top-2 of v[begin, begin + n).
double TopMargin(const std::vector<float>& v, size_t begin, size_t n) {
  std::vector<float> row(v.begin() + begin, v.begin() + begin + n);
  std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
  return static_cast<double>(row[0]) - row[1];
}

size_t Argmax(const std::vector<float>& v, size_t begin, size_t n) {
  size_t best = begin;
  for (size_t i = begin; i < begin + n; ++i)
    if (v[i] > v[best]) best = i;
  return best - begin;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::shared_ptr<const DebertaModel> Load(const std::string& dtype) {
    auto model = DebertaModel::Load(GoldenDir(GetParam()), ModelOptions{dtype, TestDevice()});
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *model : nullptr;
  }
};

TEST_P(GoldenTest, EachCaseAloneMatchesFp32) {
  auto model = Load("fp32");
  ASSERT_TRUE(model);
  json golden = ReadGolden(GetParam());
  int compared_hidden = 0;
  for (const auto& c : golden["cases"]) {
    const std::string what = GetParam() + " case " + c["desc"].get<std::string>();
    auto out = model->Run(Single(c), /*want_hidden=*/true);
    ASSERT_TRUE(out.ok()) << what << ": " << out.status();
    if (c.contains("logits")) ExpectClose(out->logits, Flatten(c["logits"]), what + " logits");
    if (c.contains("start_logits")) {
      ExpectClose(out->start_logits, Flatten(c["start_logits"]), what + " start");
      ExpectClose(out->end_logits, Flatten(c["end_logits"]), what + " end");
    }
    if (c.contains("last_hidden_state")) {
      ExpectClose(out->hidden, Flatten(c["last_hidden_state"]), what + " hidden");
      ++compared_hidden;
    }
  }
  EXPECT_GE(compared_hidden, 1);
}

TEST_P(GoldenTest, PaddedBatchMatchesOnValidPositions) {
  auto model = Load("fp32");
  ASSERT_TRUE(model);
  json golden = ReadGolden(GetParam());
  const json& b = golden["batch"];
  TokenBatch batch;
  batch.batch_size = static_cast<int64_t>(b["input_ids"].size());
  batch.length = b["padded_length"].get<int64_t>();
  for (const auto& row : b["input_ids"]) for (int64_t v : row) batch.input_ids.push_back(v);
  for (const auto& row : b["attention_mask"]) for (int64_t v : row) batch.attention_mask.push_back(v);
  if (b.contains("token_type_ids"))
    for (const auto& row : b["token_type_ids"]) for (int64_t v : row) batch.token_type_ids.push_back(v);
  auto out = model->Run(batch, /*want_hidden=*/true);
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t L = batch.length;
  for (int64_t r = 0; r < batch.batch_size; ++r) {
    const std::string what = GetParam() + " batch row " + std::to_string(r);
    if (b.contains("logits")) {
      const auto want = Flatten(b["logits"][r]);
      ExpectClose(Row(out->logits, r, out->num_labels, out->num_labels), want, what + " logits");
    }
    if (b.contains("start_logits_valid")) {
      const auto want_start = Flatten(b["start_logits_valid"][r]);
      const auto n = static_cast<int64_t>(want_start.size());
      ExpectClose(Row(out->start_logits, r, L, n), want_start, what + " start");
      ExpectClose(Row(out->end_logits, r, L, n), Flatten(b["end_logits_valid"][r]), what + " end");
    }
  }
  // Hidden states of the first two rows, valid positions only.
  const auto& hidden = b["last_hidden_state_valid_first_two"];
  for (size_t r = 0; r < hidden.size(); ++r) {
    const auto want = Flatten(hidden[r]);
    const int64_t H = out->hidden_size;
    ExpectClose(Row(out->hidden, static_cast<int64_t>(r), L * H, static_cast<int64_t>(want.size())), want,
                GetParam() + " batch hidden row " + std::to_string(r));
  }
}

TEST_P(GoldenTest, Bf16KeepsArgmax) {
  // Which bf16 path this CPU takes (the result must hold on every one).
  std::cout << "[ cpu      ] " << CpuPathNote() << std::endl;
  RecordProperty("cpu", CpuPathNote());
  auto model = Load("bf16");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->dtype(), "bf16");
  json golden = ReadGolden(GetParam());
  int checked = 0;
  auto expect_argmax = [](const std::vector<float>& got, const std::vector<float>& want, const json& desc) {
    const size_t g = Argmax(got, 0, want.size()), w = Argmax(want, 0, want.size());
    if (g != w) {
      EXPECT_LT(TopMargin(want, 0, want.size()), kBf16ArgmaxMargin)
          << desc << ": bf16 argmax " << g << ", fp32 argmax " << w << " (" << Bf16MatmulPath() << ")";
    }
  };
  for (const auto& c : golden["cases"]) {
    auto out = model->Run(Single(c));
    ASSERT_TRUE(out.ok()) << out.status();
    if (c.contains("logits") && c["logits"].size() > 1) {
      expect_argmax(out->logits, Flatten(c["logits"]), c["desc"]);
      ++checked;
    } else if (c.contains("logits")) {
      // Reranker: one score; bf16 must stay close enough to keep the order.
      EXPECT_NEAR(out->logits[0], Flatten(c["logits"])[0], 0.1) << c["desc"];
      ++checked;
    } else {
      expect_argmax(out->start_logits, Flatten(c["start_logits"]), c["desc"]);
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(golden["cases"].size()));
}

INSTANTIATE_TEST_SUITE_P(Goldens, GoldenTest,
                         ::testing::Values("cls_factorized", "qa_c2p_only", "rerank_p2c_nonorm"));
// The second family (model_type "albert"), through the same facade and checks.
INSTANTIATE_TEST_SUITE_P(AlbertGoldens, GoldenTest, ::testing::Values("albert/albert_cls", "albert/albert_qa"));

// extra_cases: a sequence past the DeBERTa bucket range, and ALBERT pairs of
// max_position_embeddings tokens.
class GoldenExtraCases : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenExtraCases, MatchFp32) {
  auto model = DebertaModel::Load(GoldenDir(GetParam()), ModelOptions{"fp32", TestDevice()});
  ASSERT_TRUE(model.ok()) << model.status();
  json golden = ReadGolden(GetParam());
  ASSERT_FALSE(golden["extra_cases"].empty());
  for (const auto& c : golden["extra_cases"]) {
    auto out = (*model)->Run(Single(c), /*want_hidden=*/true);
    ASSERT_TRUE(out.ok()) << out.status();
    if (c.contains("logits")) ExpectClose(out->logits, Flatten(c["logits"]), GetParam() + " extra logits");
    if (c.contains("start_logits")) {
      ExpectClose(out->start_logits, Flatten(c["start_logits"]), GetParam() + " extra start");
      ExpectClose(out->end_logits, Flatten(c["end_logits"]), GetParam() + " extra end");
    }
    const auto row0 = Flatten(c["last_hidden_state_row0"]);
    ExpectClose(Row(out->hidden, 0, 0, static_cast<int64_t>(row0.size())), row0, GetParam() + " extra hidden row 0");
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, GoldenExtraCases,
                         ::testing::Values("cls_factorized", "albert/albert_cls", "albert/albert_qa"));

TEST(GoldenExtra, RejectsIdsOutsideVocabulary) {
  auto model = DebertaModel::Load(GoldenDir("qa_c2p_only"), ModelOptions{"fp32", TestDevice()});
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = (*model)->Run(TokenBatch::Pad({{1, 5000, 2}}, {}, 0));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("5000"), std::string::npos) << out.status();
  // Absolute positions: 129 tokens > max_position_embeddings 128.
  auto too_long = (*model)->Run(TokenBatch::Pad({std::vector<int64_t>(129, 5)}, {}, 0));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_position_embeddings"), std::string::npos);
}

TEST(GoldenExtra, AlbertRejectsTooLongAndBadTokenTypes) {
  auto model = DebertaModel::Load(GoldenDir("albert/albert_cls"), ModelOptions{"fp32", TestDevice()});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->task(), Task::kClassify);
  EXPECT_EQ((*model)->max_length(), 128);
  auto too_long = (*model)->Run(TokenBatch::Pad({std::vector<int64_t>(129, 5)}, {}, 0));
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("max_position_embeddings"), std::string::npos) << too_long.status();
  auto bad_type = (*model)->Run(TokenBatch::Pad({{2, 7, 3}}, {{0, 2, 0}}, 0));
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("token_type_id 2"), std::string::npos) << bad_type.status();
}

}  // namespace
}  // namespace dserve
