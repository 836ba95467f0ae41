// Hand-computed cases for model/decode/decode.h. Expected values are
// derived in the comments (logits chosen as logarithms so that the softmax
// has small rational values), not taken from the implementation.
#include "model/decode/decode.h"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kTol = 1e-6;
const float kLn2 = std::log(2.0f);
const float kLn3 = std::log(3.0f);

// ---------------------------------------------------------------------------
// Numerics.

TEST(NumericsTest, SoftmaxOfOneTwoThree) {
  // e^k / (e + e^2 + e^3) for k = 1, 2, 3.
  const std::vector<double> p = Softmax(std::vector<double>{1, 2, 3});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_NEAR(p[0], 0.09003057317038046, 1e-12);
  EXPECT_NEAR(p[1], 0.24472847105479767, 1e-12);
  EXPECT_NEAR(p[2], 0.6652409557748219, 1e-12);
}

TEST(NumericsTest, SoftmaxIsStableForHugeLogits) {
  const std::vector<double> p = Softmax(std::vector<double>{1000, 1000, -1000});
  EXPECT_DOUBLE_EQ(p[0], 0.5);
  EXPECT_DOUBLE_EQ(p[1], 0.5);
  EXPECT_DOUBLE_EQ(p[2], 0.0);
  EXPECT_TRUE(Softmax(std::vector<double>{}).empty());
}

TEST(NumericsTest, Sigmoid) {
  EXPECT_DOUBLE_EQ(Sigmoid(0.0), 0.5);
  EXPECT_NEAR(Sigmoid(std::log(3.0)), 0.75, 1e-15);   // 1 / (1 + 1/3)
  EXPECT_NEAR(Sigmoid(-std::log(3.0)), 0.25, 1e-15);  // 1 / (1 + 3)
  EXPECT_NEAR(Sigmoid(2.0), 0.8807970779778823, 1e-15);
  EXPECT_EQ(Sigmoid(1000.0), 1.0);
  EXPECT_EQ(Sigmoid(-1000.0), 0.0);
  EXPECT_FALSE(std::isnan(Sigmoid(-1e308)));
}

// ---------------------------------------------------------------------------
// CodepointTable.

TEST(CodepointTableTest, MapsByteOffsetsOfMultiByteText) {
  // "aé東😀b": a[0,1) é[1,3) 東[3,6) 😀[6,10) b[10,11); code points 0..4.
  const std::string text = "a\xC3\xA9\xE6\x9D\xB1\xF0\x9F\x98\x80" "b";
  const CodepointTable table(text);
  EXPECT_EQ(table.num_codepoints(), 5u);
  EXPECT_EQ(table.num_bytes(), 11u);
  const std::vector<uint32_t> boundary_bytes = {0, 1, 3, 6, 10, 11};
  for (uint32_t cp = 0; cp < boundary_bytes.size(); ++cp) {
    EXPECT_EQ(table.FloorCodepoint(boundary_bytes[cp]), cp);
    EXPECT_EQ(table.CeilCodepoint(boundary_bytes[cp]), cp);
  }
  // Inside 東 (bytes 4, 5) and 😀 (7, 8, 9).
  EXPECT_EQ(table.FloorCodepoint(4), 2u);
  EXPECT_EQ(table.CeilCodepoint(4), 3u);
  EXPECT_EQ(table.FloorCodepoint(9), 3u);
  EXPECT_EQ(table.CeilCodepoint(9), 4u);
  EXPECT_EQ(table.ToCodepoints(ByteSpan{3, 10}), (CodepointSpan{2, 4}));
  EXPECT_EQ(table.Slice(ByteSpan{3, 10}), "\xE6\x9D\xB1\xF0\x9F\x98\x80");
  // A misaligned span widens to whole characters, text and offsets alike.
  EXPECT_EQ(table.ToCodepoints(ByteSpan{4, 7}), (CodepointSpan{2, 4}));
  EXPECT_EQ(table.Slice(ByteSpan{4, 7}), "\xE6\x9D\xB1\xF0\x9F\x98\x80");
}

TEST(CodepointTableTest, EmptyText) {
  const CodepointTable table("");
  EXPECT_EQ(table.num_codepoints(), 0u);
  EXPECT_EQ(table.ToCodepoints(ByteSpan{0, 0}), (CodepointSpan{0, 0}));
}

// ---------------------------------------------------------------------------
// Classification.

std::vector<std::string> Labels(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(std::string(1, static_cast<char>('a' + i)));
  return out;
}

TEST(ClassifyDecodeTest, SoftmaxSortedDescending) {
  const std::vector<float> logits = {1, 2, 3};
  auto r = DecodeClassification(logits, Labels(3), {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].label, "c");
  EXPECT_EQ((*r)[0].label_id, 2);
  EXPECT_NEAR((*r)[0].score, 0.66524096, kTol);
  EXPECT_EQ((*r)[1].label, "b");
  EXPECT_NEAR((*r)[1].score, 0.24472847, kTol);
  EXPECT_EQ((*r)[2].label, "a");
  EXPECT_NEAR((*r)[2].score, 0.09003057, kTol);
}

TEST(ClassifyDecodeTest, TemperatureDividesLogits) {
  // [0, 2 ln 3] / 2 = [0, ln 3] -> softmax [1/4, 3/4].
  const std::vector<float> logits = {0, 2 * kLn3};
  ClassifyDecodeOptions options;
  options.temperature = 2.0;
  auto r = DecodeClassification(logits, Labels(2), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].label, "b");
  EXPECT_NEAR((*r)[0].score, 0.75, kTol);
  EXPECT_NEAR((*r)[1].score, 0.25, kTol);
}

TEST(ClassifyDecodeTest, RawScoresAreTemperatureDividedLogits) {
  const std::vector<float> logits = {4, -2, 1};
  ClassifyDecodeOptions options;
  options.temperature = 2.0;
  options.raw_scores = true;
  auto r = DecodeClassification(logits, Labels(3), options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].label, "a");
  EXPECT_FLOAT_EQ((*r)[0].score, 2.0f);
  EXPECT_EQ((*r)[1].label, "c");
  EXPECT_FLOAT_EQ((*r)[1].score, 0.5f);
  EXPECT_EQ((*r)[2].label, "b");
  EXPECT_FLOAT_EQ((*r)[2].score, -1.0f);
}

TEST(ClassifyDecodeTest, TopK) {
  const std::vector<float> logits = {0.1f, 0.4f, 0.3f, 0.2f};
  ClassifyDecodeOptions options;
  options.top_k = 2;
  auto r = DecodeClassification(logits, Labels(4), options);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].label, "b");
  EXPECT_EQ((*r)[1].label, "c");
  options.top_k = 10;  // more than there are labels: all
  r = DecodeClassification(logits, Labels(4), options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 4u);
}

TEST(ClassifyDecodeTest, TiesBrokenByLabelId) {
  // [1, 3, 3, 1]: e^3 / (2e^3 + 2e) for b and c, e / (2e^3 + 2e) for a and d.
  const std::vector<float> logits = {1, 3, 3, 1};
  auto r = DecodeClassification(logits, Labels(4), {});
  ASSERT_TRUE(r.ok());
  std::vector<int> ids;
  for (const ScoredLabel& l : *r) ids.push_back(l.label_id);
  EXPECT_THAT(ids, ElementsAre(1, 2, 0, 3));
  const double e = std::exp(1.0), e3 = std::exp(3.0);
  EXPECT_NEAR((*r)[0].score, e3 / (2 * e3 + 2 * e), kTol);
  EXPECT_NEAR((*r)[3].score, e / (2 * e3 + 2 * e), kTol);
}

TEST(ClassifyDecodeTest, MultiLabelUsesIndependentSigmoids) {
  // sigmoid(0) = 1/2, sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4 (sum != 1).
  const std::vector<float> logits = {0, kLn3, -kLn3};
  ClassifyDecodeOptions options;
  options.problem_type = ProblemType::kMultiLabel;
  auto r = DecodeClassification(logits, Labels(3), options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].label_id, 1);
  EXPECT_NEAR((*r)[0].score, 0.75, kTol);
  EXPECT_EQ((*r)[1].label_id, 0);
  EXPECT_NEAR((*r)[1].score, 0.5, kTol);
  EXPECT_EQ((*r)[2].label_id, 2);
  EXPECT_NEAR((*r)[2].score, 0.25, kTol);
}

TEST(ClassifyDecodeTest, SingleLabelModelUsesSigmoid) {
  const std::vector<float> logits = {kLn3};
  auto r = DecodeClassification(logits, Labels(1), {});
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_NEAR((*r)[0].score, 0.75, kTol);
}

TEST(ClassifyDecodeTest, HugeLogitsStayFinite) {
  const std::vector<float> logits = {1000, 1000, -1000};
  auto r = DecodeClassification(logits, Labels(3), {});
  ASSERT_TRUE(r.ok());
  EXPECT_FLOAT_EQ((*r)[0].score, 0.5f);
  EXPECT_FLOAT_EQ((*r)[1].score, 0.5f);
  EXPECT_FLOAT_EQ((*r)[2].score, 0.0f);
}

TEST(ClassifyDecodeTest, RejectsBadInputs) {
  const std::vector<float> two = {1, 2};
  EXPECT_FALSE(DecodeClassification(two, Labels(3), {}).ok());
  EXPECT_FALSE(DecodeClassification({}, {}, {}).ok());
  const std::vector<float> nan = {1, std::numeric_limits<float>::quiet_NaN()};
  auto r = DecodeClassification(nan, Labels(2), {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("non-finite"));
  ClassifyDecodeOptions options;
  options.temperature = 0.0;
  EXPECT_FALSE(DecodeClassification(two, Labels(2), options).ok());
  options.temperature = -1.0;
  EXPECT_FALSE(DecodeClassification(two, Labels(2), options).ok());
}

TEST(ClassifyDecodeTest, ParseProblemType) {
  EXPECT_EQ(*ParseProblemType(""), ProblemType::kSingleLabel);
  EXPECT_EQ(*ParseProblemType("single_label_classification"), ProblemType::kSingleLabel);
  EXPECT_EQ(*ParseProblemType("multi_label_classification"), ProblemType::kMultiLabel);
  auto r = ParseProblemType("regression");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("regression"));
}

// ---------------------------------------------------------------------------
// Question answering.

// One window [CLS] q [SEP] <context tokens> [SEP] with its data owned here.
struct TestWindow {
  std::vector<float> start, end;
  std::vector<std::optional<ByteSpan>> offsets;
  uint32_t context_index = 0;
};

// Builds a window: token 0 [CLS], token 1 the question, token 2 [SEP], then
// one token per entry of `spans`, then [SEP]. `start`/`end` give the logits
// of ALL tokens (size spans.size() + 4).
TestWindow MakeWindow(std::vector<std::optional<ByteSpan>> spans, std::vector<float> start,
                      std::vector<float> end, uint32_t context_index = 0) {
  TestWindow w;
  w.offsets = {std::nullopt, std::nullopt, std::nullopt};
  w.offsets.insert(w.offsets.end(), spans.begin(), spans.end());
  w.offsets.push_back(std::nullopt);
  w.start = std::move(start);
  w.end = std::move(end);
  w.context_index = context_index;
  return w;
}

absl::StatusOr<QaDecodeResult> Decode(const std::vector<TestWindow>& tw,
                                      const std::vector<std::string>& contexts,
                                      const QaDecodeOptions& options = {}) {
  std::vector<QaWindow> windows;
  for (const TestWindow& t : tw) {
    windows.push_back(QaWindow{t.start, t.end, t.offsets, t.context_index});
  }
  std::vector<absl::string_view> views(contexts.begin(), contexts.end());
  return DecodeAnswer(windows, views, options);
}

std::vector<std::string> NBestTexts(const QaDecodeResult& r, const std::string& context) {
  std::vector<std::string> out;
  for (const QaCandidate& c : r.n_best) {
    out.push_back(c.is_null ? "<null>"
                            : context.substr(c.bytes.begin, c.bytes.end - c.bytes.begin));
  }
  return out;
}

// Context "ab cdef": A = "ab" bytes [0,2), B = "cdef" bytes [3,7).
// start: A 0, B ln(4/3); end: A ln 2, B ln 3. Valid spans and scores:
//   AA = ln 2, AB = ln 3, BB = ln 4; BA is end < start.
// Null = start[0] + end[0]. Question and [SEP] logits are -9.
const std::string kAbContext = "ab cdef";
TestWindow AbWindow(float null_start, float null_end) {
  const float ln43 = std::log(4.0f / 3.0f);
  return MakeWindow({ByteSpan{0, 2}, ByteSpan{3, 7}}, {null_start, -9, -9, 0, ln43, -9},
                    {null_end, -9, -9, kLn2, kLn3, -9});
}

TEST(AnswerDecodeTest, ProbabilitiesOverNBestAndNull) {
  // Scores: BB ln4, AB ln3, AA ln2, null 0 -> probabilities 4/10, 3/10, 2/10, 1/10.
  auto r = Decode({AbWindow(0, 0)}, {kAbContext});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("cdef", "ab cdef", "ab", "<null>"));
  EXPECT_NEAR(r->n_best[0].probability, 0.4, kTol);
  EXPECT_NEAR(r->n_best[1].probability, 0.3, kTol);
  EXPECT_NEAR(r->n_best[2].probability, 0.2, kTol);
  EXPECT_NEAR(r->n_best[3].probability, 0.1, kTol);
  EXPECT_FALSE(r->no_answer);
  EXPECT_NEAR(r->no_answer_score, 0.1, kTol);
  EXPECT_NEAR(r->null_score_diff, -std::log(4.0), kTol);  // 0 - ln 4
  ASSERT_EQ(r->answers.size(), 1u);  // top_k default 1
  const QaAnswer& a = r->answers[0];
  EXPECT_EQ(a.text, "cdef");
  EXPECT_EQ(a.context_index, 0u);
  EXPECT_EQ(a.start_char, 3u);
  EXPECT_EQ(a.end_char, 7u);
  EXPECT_NEAR(a.score, 0.4, kTol);
  EXPECT_NEAR(a.logit_score, std::log(4.0), kTol);
}

TEST(AnswerDecodeTest, NullWinsAndThresholdFlipsTheDecision) {
  // Null = ln 10 (ln 5 + ln 2): exp scores 4, 3, 2, 10 -> null 10/19;
  // diff = ln 10 - ln 4 = ln 2.5 = 0.9163.
  const TestWindow w = AbWindow(std::log(5.0f), kLn2);
  auto r = Decode({w}, {kAbContext});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->no_answer);
  EXPECT_NEAR(r->null_score_diff, std::log(2.5), kTol);
  EXPECT_NEAR(r->no_answer_score, 10.0 / 19.0, kTol);
  EXPECT_EQ(r->n_best[0].is_null, true);
  // The runner-up span is still reported.
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_EQ(r->answers[0].text, "cdef");
  EXPECT_NEAR(r->answers[0].score, 4.0 / 19.0, kTol);

  QaDecodeOptions options;
  options.null_score_diff_threshold = 1.0f;  // 0.916 <= 1: answer
  r = Decode({w}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->no_answer);
  options.null_score_diff_threshold = 0.9f;  // 0.916 > 0.9: no answer
  r = Decode({w}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->no_answer);
  options.null_score_diff_threshold = -1.0f;  // negative: stricter than HF's 0
  r = Decode({AbWindow(0, 0)}, {kAbContext}, options);  // diff -ln 4 = -1.386
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->no_answer);
  options.null_score_diff_threshold = -1.5f;
  r = Decode({AbWindow(0, 0)}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->no_answer);
}

TEST(AnswerDecodeTest, MaxAnswerTokensDropsLongSpans) {
  // AB (2 tokens) dropped: exp scores BB 4, AA 2, null 1 -> 4/7, 2/7, 1/7.
  QaDecodeOptions options;
  options.max_answer_tokens = 1;
  auto r = Decode({AbWindow(0, 0)}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("cdef", "ab", "<null>"));
  EXPECT_NEAR(r->n_best[0].probability, 4.0 / 7.0, kTol);
  EXPECT_NEAR(r->n_best[2].probability, 1.0 / 7.0, kTol);
}

TEST(AnswerDecodeTest, MaxAnswerCharsDropsLongSpans) {
  QaDecodeOptions options;
  options.max_answer_chars = 4;  // drops "ab cdef" (7), keeps "cdef" (4)
  auto r = Decode({AbWindow(0, 0)}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("cdef", "ab", "<null>"));
  options.max_answer_chars = 3;  // also drops "cdef": exp scores AA 2, null 1
  r = Decode({AbWindow(0, 0)}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("ab", "<null>"));
  EXPECT_NEAR(r->n_best[0].probability, 2.0 / 3.0, kTol);
  EXPECT_EQ(r->answers[0].text, "ab");
}

TEST(AnswerDecodeTest, MaxAnswerCharsCountsCodePointsNotBytes) {
  // "日本語" is 3 code points, 9 bytes.
  const std::string context = "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E";
  QaDecodeOptions options;
  options.max_answer_chars = 3;
  auto r = Decode({MakeWindow({ByteSpan{0, 9}}, {0, -9, -9, 1, -9}, {0, -9, -9, 1, -9})},
                  {context}, options);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_EQ(r->answers[0].text, context);
  EXPECT_EQ(r->answers[0].end_char, 3u);
  options.max_answer_chars = 2;
  r = Decode({MakeWindow({ByteSpan{0, 9}}, {0, -9, -9, 1, -9}, {0, -9, -9, 1, -9})}, {context},
             options);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->answers.empty());
  EXPECT_TRUE(r->no_answer);
}

TEST(AnswerDecodeTest, EndBeforeStartIsDropped) {
  // The highest pair is start=B (10), end=A (10), which has end < start.
  // Valid: AA = 0 + 10 = 10, BB = 10 + 0 = 10, AB = 0 + 0 = 0; null -20.
  // AA and BB tie; the stable sort keeps generation order: starts by logit
  // (B first), so BB comes before AA.
  const TestWindow w = MakeWindow({ByteSpan{0, 2}, ByteSpan{3, 7}}, {-10, -9, -9, 0, 10, -9},
                                  {-10, -9, -9, 10, 0, -9});
  auto r = Decode({w}, {kAbContext});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("cdef", "ab", "ab cdef", "<null>"));
  EXPECT_FLOAT_EQ(r->n_best[0].logit_score, 10.0f);
  EXPECT_EQ(r->answers[0].text, "cdef");
}

TEST(AnswerDecodeTest, NulloptOffsetsAreDropped) {
  // The question token (1) and a context token without offsets (4) have the
  // top logits; only pairs of tokens 3 and 5 ("ab", "cdef") are valid.
  const TestWindow w = MakeWindow({ByteSpan{0, 2}, std::nullopt, ByteSpan{3, 7}},
                                  {0, 20, -9, 1, 20, 2, -9}, {0, 20, -9, 1, 20, 2, -9});
  auto r = Decode({w}, {kAbContext});
  ASSERT_TRUE(r.ok());
  // cdef = 4, ab cdef = 3, ab = 2, null = 0.
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("cdef", "ab cdef", "ab", "<null>"));
  EXPECT_FLOAT_EQ(r->n_best[1].logit_score, 3.0f);
}

TEST(AnswerDecodeTest, TwoWindowsBestSpanInSecondWindow) {
  // "The cat sat on the mat": The[0,3) cat[4,7) sat[8,11) on[12,14)
  // the[15,18) mat[19,22). Window 0 holds The..on, window 1 on..mat.
  const std::string context = "The cat sat on the mat";
  const TestWindow w0 = MakeWindow(
      {ByteSpan{0, 3}, ByteSpan{4, 7}, ByteSpan{8, 11}, ByteSpan{12, 14}},
      {0, -9, -9, 1, 2, 0, 0, -9}, {0, -9, -9, 0, 2.5f, 0.5f, 0, -9});
  const TestWindow w1 = MakeWindow({ByteSpan{12, 14}, ByteSpan{15, 18}, ByteSpan{19, 22}},
                                   {-1, -9, -9, 0, 1, 3, -9}, {-1, -9, -9, 0, 0, 4, -9});
  QaDecodeOptions options;
  options.top_k = 2;
  auto r = Decode({w0, w1}, {context}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  // Null: min(0 + 0, -1 + -1) = -2. Best: mat (3 + 4 = 7) from window 1,
  // then "the mat" (1 + 4 = 5) from window 1, then "cat" (4.5) from window 0.
  EXPECT_FLOAT_EQ(r->null_score, -2.0f);
  EXPECT_FLOAT_EQ(r->null_score_diff, -9.0f);
  EXPECT_FALSE(r->no_answer);
  ASSERT_EQ(r->answers.size(), 2u);
  EXPECT_EQ(r->answers[0].text, "mat");
  EXPECT_EQ(r->answers[0].start_char, 19u);
  EXPECT_EQ(r->answers[0].end_char, 22u);
  EXPECT_FLOAT_EQ(r->answers[0].logit_score, 7.0f);
  EXPECT_EQ(r->n_best[0].window_index, 1u);
  EXPECT_EQ(r->answers[1].text, "the mat");
  EXPECT_EQ(r->answers[1].start_char, 15u);
  EXPECT_FLOAT_EQ(r->answers[1].logit_score, 5.0f);
  // The null candidate carries the logits of the min-null window.
  const QaCandidate& null = r->n_best.back().is_null ? r->n_best.back() : r->n_best[0];
  ASSERT_TRUE(null.is_null);
  EXPECT_FLOAT_EQ(null.start_logit, -1.0f);
}

TEST(AnswerDecodeTest, MultiByteContextGivesCodePointOffsets) {
  // "Café 東京 😀! naïve": bytes Café[0,5) 東京[6,12) 😀![13,18) naïve[19,25);
  // code points Café[0,4) 東京[5,7) 😀![8,10) naïve[11,16).
  const std::string context =
      "Caf\xC3\xA9 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80! na\xC3\xAFve";
  ASSERT_EQ(context.size(), 25u);
  // Logits favour start 東京, end 😀! (3 + 3); then naïve alone (2 + 2);
  // then Café alone (1 + 1).
  const TestWindow w = MakeWindow(
      {ByteSpan{0, 5}, ByteSpan{6, 12}, ByteSpan{13, 18}, ByteSpan{19, 25}},
      {0, -9, -9, 1, 3, -5, 2, -9}, {0, -9, -9, 1, -5, 3, 2, -9});
  QaDecodeOptions options;
  options.top_k = 3;
  options.max_answer_tokens = 2;
  auto r = Decode({w}, {context}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->answers.size(), 3u);
  EXPECT_EQ(r->answers[0].text, "\xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80!");
  EXPECT_EQ(r->answers[0].start_char, 5u);
  EXPECT_EQ(r->answers[0].end_char, 10u);
  EXPECT_EQ(r->answers[1].text, "na\xC3\xAFve");
  EXPECT_EQ(r->answers[1].start_char, 11u);
  EXPECT_EQ(r->answers[1].end_char, 16u);
  EXPECT_EQ(r->answers[2].text, "Caf\xC3\xA9");
  EXPECT_EQ(r->answers[2].start_char, 0u);
  EXPECT_EQ(r->answers[2].end_char, 4u);
}

TEST(AnswerDecodeTest, SeveralContextsReportTheirIndex) {
  // Context 1 "xy zz": the best span "zz" is at code points [3,5).
  const std::vector<std::string> contexts = {"ab", "xy zz"};
  const TestWindow w0 = MakeWindow({ByteSpan{0, 2}}, {0, -9, -9, 1, -9}, {0, -9, -9, 1, -9}, 0);
  const TestWindow w1 = MakeWindow({ByteSpan{0, 2}, ByteSpan{3, 5}}, {5, -9, -9, 0, 4, -9},
                                   {5, -9, -9, 0, 4, -9}, 1);
  QaDecodeOptions options;
  options.top_k = 2;
  auto r = Decode({w0, w1}, contexts, options);
  ASSERT_TRUE(r.ok());
  // Null = min(0, 10) = 0; zz = 8 beats it.
  EXPECT_FALSE(r->no_answer);
  EXPECT_FLOAT_EQ(r->null_score, 0.0f);
  ASSERT_EQ(r->answers.size(), 2u);
  EXPECT_EQ(r->answers[0].text, "zz");
  EXPECT_EQ(r->answers[0].context_index, 1u);
  EXPECT_EQ(r->answers[0].start_char, 3u);
  EXPECT_EQ(r->answers[1].text, "xy zz");  // 0 + 4
  EXPECT_EQ(r->answers[1].context_index, 1u);
}

TEST(AnswerDecodeTest, DuplicateSpansFromOverlappingWindowsAreMerged) {
  // Both windows hold "cdef"; it is the best span in each (4 and 3.5).
  const TestWindow w0 = AbWindow(0, 0);
  const TestWindow w1 = MakeWindow({ByteSpan{3, 7}}, {0, -9, -9, 1.5f, -9}, {0, -9, -9, 2, -9});
  QaDecodeOptions options;
  options.top_k = 3;
  auto r = Decode({w0, w1}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  // The n-best list keeps both (as HF): cdef 3.5 (window 1), cdef ln 4,
  // ab cdef ln 3, ab ln 2, null 0.
  EXPECT_THAT(NBestTexts(*r, kAbContext),
              ElementsAre("cdef", "cdef", "ab cdef", "ab", "<null>"));
  EXPECT_FLOAT_EQ(r->n_best[0].logit_score, 3.5f);
  EXPECT_EQ(r->n_best[0].window_index, 1u);
  std::vector<std::string> answers;
  for (const QaAnswer& a : r->answers) answers.push_back(a.text);
  EXPECT_THAT(answers, ElementsAre("cdef", "ab cdef", "ab"));
}

TEST(AnswerDecodeTest, NullReaddedWhenCutFromNBest) {
  // n_best = 1: top start B, top end B -> only BB; the null (score 0) falls
  // out and is re-added: softmax(ln 4, 0) = 4/5, 1/5.
  QaDecodeOptions options;
  options.n_best = 1;
  auto r = Decode({AbWindow(0, 0)}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("cdef", "<null>"));
  EXPECT_NEAR(r->n_best[0].probability, 0.8, kTol);
  EXPECT_NEAR(r->no_answer_score, 0.2, kTol);
}

TEST(AnswerDecodeTest, NoCandidateMeansNoAnswer) {
  // All context tokens lack offsets: only the null remains.
  const TestWindow w = MakeWindow({std::nullopt, std::nullopt}, {0, 1, 2, 3, 4, 5},
                                  {0, 1, 2, 3, 4, 5});
  QaDecodeOptions options;
  options.null_score_diff_threshold = 100.0f;
  auto r = Decode({w}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->no_answer);
  EXPECT_TRUE(r->answers.empty());
  EXPECT_EQ(r->n_best.size(), 1u);
  EXPECT_FLOAT_EQ(r->no_answer_score, 1.0f);
  EXPECT_TRUE(std::isinf(r->null_score_diff));
}

TEST(AnswerDecodeTest, EmptyTextSpansAreSkippedForTheAnswer) {
  // Token 3 is an empty piece [3,3) with the top logits; "cdef" is next.
  const TestWindow w = MakeWindow({ByteSpan{3, 3}, ByteSpan{3, 7}}, {0, -9, -9, 5, 1, -9},
                                  {0, -9, -9, 5, 1, -9});
  auto r = Decode({w}, {kAbContext});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(NBestTexts(*r, kAbContext), ElementsAre("", "cdef", "cdef", "<null>"));
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_EQ(r->answers[0].text, "cdef");
  // diff against the first span with text: the (empty, cdef) pair = 5 + 1.
  EXPECT_FLOAT_EQ(r->null_score_diff, -6.0f);
}

TEST(AnswerDecodeTest, TopKZeroMeansOne) {
  QaDecodeOptions options;
  options.top_k = 0;
  auto r = Decode({AbWindow(0, 0)}, {kAbContext}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->answers.size(), 1u);
}

TEST(AnswerDecodeTest, RejectsMalformedInputs) {
  EXPECT_FALSE(Decode({}, {kAbContext}).ok());
  TestWindow w = AbWindow(0, 0);
  w.end.pop_back();
  EXPECT_FALSE(Decode({w}, {kAbContext}).ok());
  w = AbWindow(0, 0);
  w.context_index = 1;
  EXPECT_FALSE(Decode({w}, {kAbContext}).ok());
  w = AbWindow(0, 0);
  w.offsets[3] = ByteSpan{0, 8};  // past the 7-byte context
  EXPECT_FALSE(Decode({w}, {kAbContext}).ok());
  w = AbWindow(0, 0);
  w.start[2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(Decode({w}, {kAbContext}).ok());
  QaDecodeOptions options;
  options.n_best = 0;
  EXPECT_FALSE(Decode({AbWindow(0, 0)}, {kAbContext}, options).ok());
}

// ---------------------------------------------------------------------------
// Reranking.

TEST(RerankDecodeTest, MaxPoolsChunksAndSortsBySigmoid) {
  // d0 chunks [0, 2] -> 2 (chunk 1), sigmoid 0.880797; d1 [ln 3] -> 0.75;
  // d2 [-1, -3, -1] -> -1 (first max, chunk 0), sigmoid 0.268941.
  const std::vector<std::vector<float>> chunks = {{0, 2}, {kLn3}, {-1, -3, -1}};
  auto r = DecodeRerank(chunks, {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].index, 0u);
  EXPECT_EQ((*r)[0].best_chunk, 1u);
  EXPECT_NEAR((*r)[0].score, 0.8807970779778823, kTol);
  EXPECT_EQ((*r)[1].index, 1u);
  EXPECT_NEAR((*r)[1].score, 0.75, kTol);
  EXPECT_EQ((*r)[2].index, 2u);
  EXPECT_EQ((*r)[2].best_chunk, 0u);
  EXPECT_FLOAT_EQ((*r)[2].logit, -1.0f);
  EXPECT_NEAR((*r)[2].score, 0.2689414213699951, kTol);
}

TEST(RerankDecodeTest, RawScoresTopNAndTies) {
  const std::vector<std::vector<float>> chunks = {{-1}, {3, 0.5f}, {-1}, {2}};
  RerankDecodeOptions options;
  options.raw_scores = true;
  auto r = DecodeRerank(chunks, options);
  ASSERT_TRUE(r.ok());
  std::vector<uint32_t> order;
  for (const RankedResult& d : *r) order.push_back(d.index);
  EXPECT_THAT(order, ElementsAre(1, 3, 0, 2));  // 3, 2, then the tie -1/-1 by index
  EXPECT_FLOAT_EQ((*r)[0].score, 3.0f);
  EXPECT_FLOAT_EQ((*r)[3].score, -1.0f);
  options.top_n = 2;
  r = DecodeRerank(chunks, options);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].index, 3u);
}

TEST(RerankDecodeTest, TemperatureAndExtremes) {
  // 2 ln 3 / 2 = ln 3 -> 0.75.
  RerankDecodeOptions options;
  options.temperature = 2.0;
  auto r = DecodeRerank(std::vector<std::vector<float>>{{2 * kLn3}}, options);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR((*r)[0].score, 0.75, kTol);
  r = DecodeRerank(std::vector<std::vector<float>>{{-1000}, {1000}}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].score, 1.0f);
  EXPECT_EQ((*r)[1].score, 0.0f);
}

TEST(RerankDecodeTest, RejectsBadInputs) {
  EXPECT_FALSE(DecodeRerank(std::vector<std::vector<float>>{{1}, {}}, {}).ok());
  EXPECT_FALSE(DecodeRerank(std::vector<std::vector<float>>{{std::nanf("")}}, {}).ok());
  RerankDecodeOptions options;
  options.temperature = 0;
  EXPECT_FALSE(DecodeRerank(std::vector<std::vector<float>>{{1}}, options).ok());
  auto r = DecodeRerank(std::vector<std::vector<float>>{}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

}  // namespace
}  // namespace dserve
