// Hand-checked tests of the DeBERTa-level API on the shared toy model
// (goldens/tokenizer/spm.model, whose encodings are listed in
// spm_golden.json): specials, pairs, truncation strategies, QA windows,
// rerank chunks, UTF-8 errors, a 10 MB input and concurrent use.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/tokenizer/sentencepiece_model.pb.h"
#include "model/tokenizer/utf8.h"
#include "tests/model/tokenizer/test_util.h"

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// From spm_golden.json.
const char kHello[] = "Hello world.";  // ▁ H e ll o ▁wor l d .
const std::vector<int32_t> kHelloIds = {4, 3, 15, 141, 17, 213, 21, 16, 9};
const char kSuper[] = "supercalifragilisticexpialidocious";  // one word, 27 pieces
const std::vector<int32_t> kSuperIds = {22, 25, 35, 45, 242, 31, 29, 11, 271, 99, 31, 21, 31, 40,
                                        235, 109, 35, 31, 147, 31, 16, 17, 274, 31, 17, 25, 5};

std::vector<int32_t> Cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t b, size_t e) {
  return std::vector<int32_t>(v.begin() + b, v.begin() + e);
}

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = Tokenizer::FromDirectory(::dserve::testing::GoldenDir());
    ASSERT_TRUE(t.ok()) << t.status();
    tok_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static EncodeOptions Opts(int max_length, Truncation t) {
    EncodeOptions o;
    o.max_length = max_length;
    o.truncation = t;
    return o;
  }
  static const Tokenizer* tok_;
};
const Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, SpecialIds) {
  EXPECT_EQ(tok_->pad_id(), 0);
  EXPECT_EQ(tok_->cls_id(), 1);
  EXPECT_EQ(tok_->sep_id(), 2);
  EXPECT_EQ(tok_->unk_id(), 3);
  EXPECT_EQ(tok_->mask_id(), 300);  // added after the 300 spm pieces
  EXPECT_EQ(tok_->vocab_size(), 301);
  EXPECT_EQ(tok_->IdToPiece(1), "[CLS]");
  EXPECT_EQ(tok_->IdToPiece(300), "[MASK]");
  EXPECT_EQ(tok_->IdToPiece(301), "");
  EXPECT_EQ(tok_->PieceToId("▁the"), 6);
  EXPECT_EQ(tok_->PieceToId("no such piece"), -1);
}

TEST_F(TokenizerTest, SingleText) {
  EncodeOptions o = Opts(0, Truncation::kNone);
  o.return_pieces = true;
  auto enc = tok_->Encode(kHello, o);
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(enc->ids, Cat({{1}, kHelloIds, {2}}));
  EXPECT_EQ(enc->type_ids, std::vector<int32_t>(11, 0));
  EXPECT_THAT(enc->sequence_ids, ElementsAre(-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1));
  EXPECT_THAT(enc->pieces, ElementsAre("[CLS]", "▁", "H", "e", "ll", "o", "▁wor", "l", "d", ".",
                                       "[SEP]"));
  const std::vector<ByteSpan> want = {{0, 0}, {0, 0}, {0, 1},  {1, 2},   {2, 4}, {4, 5},
                                      {5, 9}, {9, 10}, {10, 11}, {11, 12}, {0, 0}};
  EXPECT_EQ(enc->offsets, want);
}

TEST_F(TokenizerTest, EmptyText) {
  auto enc = tok_->Encode("", Opts(512, Truncation::kNone));
  ASSERT_TRUE(enc.ok());
  EXPECT_THAT(enc->ids, ElementsAre(1, 2));
}

TEST_F(TokenizerTest, PairLayoutTypeIdsAndOffsets) {
  auto enc = tok_->EncodePair(kHello, kSuper, Opts(0, Truncation::kNone));
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(enc->ids, Cat({{1}, kHelloIds, {2}, kSuperIds, {2}}));
  ASSERT_EQ(enc->size(), 39u);
  for (size_t i = 0; i < enc->size(); ++i) {
    EXPECT_EQ(enc->type_ids[i], i < 11 ? 0 : 1) << i;
  }
  EXPECT_EQ(enc->sequence_ids[0], -1);
  EXPECT_EQ(enc->sequence_ids[1], 0);
  EXPECT_EQ(enc->sequence_ids[10], -1);
  EXPECT_EQ(enc->sequence_ids[11], 1);
  EXPECT_EQ(enc->sequence_ids[38], -1);
  // Second-segment offsets address the second text: "cal" is bytes 5..8.
  EXPECT_EQ(enc->offsets[11 + 4], (ByteSpan{5, 8}));
  EXPECT_EQ(enc->offsets[11 + 26], (ByteSpan{33, 34}));
  EXPECT_EQ(enc->offsets[38], (ByteSpan{0, 0}));
}

TEST_F(TokenizerTest, TruncationNoneNamesLengthAndLimit) {
  auto enc = tok_->EncodePair(kHello, kSuper, Opts(20, Truncation::kNone));
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(enc.status().message(), HasSubstr("39 tokens"));
  EXPECT_THAT(enc.status().message(), HasSubstr("max_length 20"));
  auto single = tok_->Encode(kSuper, Opts(10, Truncation::kNone));
  ASSERT_FALSE(single.ok());
  EXPECT_THAT(single.status().message(), HasSubstr("29 tokens"));
  EXPECT_THAT(single.status().message(), HasSubstr("max_length 10"));
  // Exactly at the limit is fine.
  EXPECT_TRUE(tok_->EncodePair(kHello, kSuper, Opts(39, Truncation::kNone)).ok());
}

TEST_F(TokenizerTest, TruncationOnlySecond) {
  auto enc = tok_->EncodePair(kHello, kSuper, Opts(20, Truncation::kOnlySecond));
  ASSERT_TRUE(enc.ok()) << enc.status();
  // 20 - 3 specials - 9 = 8 tokens of the second text remain.
  EXPECT_EQ(enc->ids, Cat({{1}, kHelloIds, {2}, Slice(kSuperIds, 0, 8), {2}}));
  EXPECT_EQ(enc->type_ids.back(), 1);
  // The second text cannot give up 37 of its 27 tokens.
  auto err = tok_->EncodePair(kHello, kSuper, Opts(2 + 3, Truncation::kOnlySecond));
  EXPECT_FALSE(err.ok());
}

TEST_F(TokenizerTest, TruncationOnlyFirst) {
  auto enc = tok_->EncodePair(kSuper, kHello, Opts(20, Truncation::kOnlyFirst));
  ASSERT_TRUE(enc.ok()) << enc.status();
  EXPECT_EQ(enc->ids, Cat({{1}, Slice(kSuperIds, 0, 8), {2}, kHelloIds, {2}}));
  // First text (9 tokens) would have to lose 19: error naming the limit.
  auto err = tok_->EncodePair(kHello, kSuper, Opts(20, Truncation::kOnlyFirst));
  ASSERT_FALSE(err.ok());
  EXPECT_THAT(err.status().message(), HasSubstr("max_length 20"));
  EXPECT_THAT(err.status().message(), HasSubstr("only_first"));
}

TEST_F(TokenizerTest, TruncationLongestFirst) {
  // Budget 27: the shorter text (9) fits whole, the longer keeps 18.
  auto enc = tok_->EncodePair(kHello, kSuper, Opts(30, Truncation::kLongestFirst));
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->ids, Cat({{1}, kHelloIds, {2}, Slice(kSuperIds, 0, 18), {2}}));
  // Same with the long text first.
  enc = tok_->EncodePair(kSuper, kHello, Opts(30, Truncation::kLongestFirst));
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->ids, Cat({{1}, Slice(kSuperIds, 0, 18), {2}, kHelloIds, {2}}));
  // Budget 17 < 2 * 9: both are cut, 17 / 2 = 8 for the shorter text and 9
  // for the longer (HF tokenizers' rule).
  enc = tok_->EncodePair(kHello, kSuper, Opts(20, Truncation::kLongestFirst));
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->ids, Cat({{1}, Slice(kHelloIds, 0, 8), {2}, Slice(kSuperIds, 0, 9), {2}}));
  EXPECT_EQ(enc->size(), 20u);
  // Single text.
  auto single = tok_->Encode(kSuper, Opts(5, Truncation::kLongestFirst));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->ids, Cat({{1}, Slice(kSuperIds, 0, 3), {2}}));
  single = tok_->Encode(kSuper, Opts(5, Truncation::kOnlyFirst));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->ids.size(), 5u);
  EXPECT_FALSE(tok_->Encode(kSuper, Opts(5, Truncation::kOnlySecond)).ok());
}

TEST_F(TokenizerTest, ParseTruncationNames) {
  EXPECT_EQ(*ParseTruncation("longest_first"), Truncation::kLongestFirst);
  EXPECT_EQ(*ParseTruncation("only_first"), Truncation::kOnlyFirst);
  EXPECT_EQ(*ParseTruncation("only_second"), Truncation::kOnlySecond);
  EXPECT_EQ(*ParseTruncation("none"), Truncation::kNone);
  EXPECT_FALSE(ParseTruncation("middle").ok());
}

TEST_F(TokenizerTest, QaWindowsCutMidWordWithStrideOverlap) {
  // Question 9 tokens; max_length 22 leaves 22 - 3 - 9 = 10 context tokens
  // per window; stride 4 means consecutive windows share 4 tokens (step 6).
  auto windows = tok_->EncodeQuestionContextWindows(kHello, kSuper, 22, 4);
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_EQ(windows->size(), 4u);
  const int want_ranges[4][2] = {{0, 10}, {6, 16}, {12, 22}, {18, 27}};
  for (int w = 0; w < 4; ++w) {
    const Window& win = (*windows)[w];
    EXPECT_EQ(win.second_token_begin, want_ranges[w][0]);
    EXPECT_EQ(win.second_token_end, want_ranges[w][1]);
    EXPECT_EQ(win.ids, Cat({{1}, kHelloIds, {2},
                            Slice(kSuperIds, want_ranges[w][0], want_ranges[w][1]), {2}}));
    EXPECT_LE(win.ids.size(), 22u);
    for (size_t i = 0; i < win.ids.size(); ++i) {
      EXPECT_EQ(win.type_ids[i], i < 11 ? 0 : 1);
      EXPECT_EQ(win.second_offsets[i].has_value(), i >= 11 && i + 1 < win.ids.size()) << w << " " << i;
    }
  }
  // Window 1 starts at token 6 ("f", bytes 9..10) and ends with "x" (21..22):
  // both boundaries are inside the single word.
  const Window& w1 = (*windows)[1];
  EXPECT_EQ(*w1.second_offsets[11], (ByteSpan{9, 10}));
  EXPECT_EQ(*w1.second_offsets[20], (ByteSpan{21, 22}));
  EXPECT_EQ(w1.sequence_ids[11], 1);
  EXPECT_EQ(w1.sequence_ids[1], 0);
  EXPECT_EQ(w1.sequence_ids[0], -1);
}

TEST_F(TokenizerTest, QaContextShorterThanOneWindow) {
  auto windows = tok_->EncodeQuestionContextWindows(kSuper, kHello, 384, 128);
  ASSERT_TRUE(windows.ok()) << windows.status();
  ASSERT_EQ(windows->size(), 1u);
  EXPECT_EQ((*windows)[0].ids, Cat({{1}, kSuperIds, {2}, kHelloIds, {2}}));
  EXPECT_EQ((*windows)[0].second_token_begin, 0);
  EXPECT_EQ((*windows)[0].second_token_end, 9);
  EXPECT_EQ(*(*windows)[0].second_offsets[29], (ByteSpan{0, 0}));  // "▁" dummy prefix
  EXPECT_EQ(*(*windows)[0].second_offsets[30], (ByteSpan{0, 1}));  // "H"
  // Exactly one window's worth: still one window.
  windows = tok_->EncodeQuestionContextWindows(kHello, kSuper, 3 + 9 + 27, 5);
  ASSERT_TRUE(windows.ok());
  EXPECT_EQ(windows->size(), 1u);
  // Empty context: one window without context tokens.
  windows = tok_->EncodeQuestionContextWindows(kHello, "", 64, 16);
  ASSERT_TRUE(windows.ok());
  ASSERT_EQ(windows->size(), 1u);
  EXPECT_EQ((*windows)[0].ids, Cat({{1}, kHelloIds, {2, 2}}));
}

TEST_F(TokenizerTest, QaWindowErrors) {
  // The question alone fills max_length.
  auto w = tok_->EncodeQuestionContextWindows(kSuper, kHello, 30, 0);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("27 tokens"));
  EXPECT_THAT(w.status().message(), HasSubstr("max_length 30"));
  // Stride not smaller than the room for the context.
  w = tok_->EncodeQuestionContextWindows(kHello, kSuper, 22, 10);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr("stride 10"));
  EXPECT_FALSE(tok_->EncodeQuestionContextWindows(kHello, kSuper, 22, -1).ok());
  // The question is named when it leaves no room.
  EXPECT_THAT(tok_->EncodeQuestionContextWindows(kSuper, kHello, 30, 0).status().message(), HasSubstr("question"));
}

TEST_F(TokenizerTest, ClampedStrideIsHalfTheRoom) {
  // Without clamping stride 10 >= the room is an error (above); clamped, the
  // windows overlap by half the room and still cover the whole context.
  auto strict = tok_->EncodeQuestionContextWindows(kHello, kSuper, 22, 10);
  ASSERT_FALSE(strict.ok());
  auto w = tok_->EncodeQuestionContextWindows(kHello, kSuper, 22, 10, /*clamp_stride=*/true);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_GT(w->size(), 1u);
  const int room = (*w)[0].second_token_end - (*w)[0].second_token_begin;
  for (size_t i = 1; i < w->size(); ++i) {
    EXPECT_EQ((*w)[i - 1].second_token_end - (*w)[i].second_token_begin, room / 2) << i;
  }
  std::vector<SpmPiece> all;
  ASSERT_TRUE(tok_->EncodeRaw(kSuper, &all).ok());
  EXPECT_EQ(w->back().second_token_end, static_cast<int>(all.size()));
  // A stride below half the room is kept as given.
  auto small = tok_->EncodeQuestionContextWindows(kHello, kSuper, 22, 1, /*clamp_stride=*/true);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)[0].second_token_end - (*small)[1].second_token_begin, 1);
}

TEST_F(TokenizerTest, RerankChunksCoverTheDocumentWithOverlap) {
  std::string doc;
  for (int i = 0; i < 30; ++i) doc += "The baker next door sells bread, rolls, and small cakes. ";
  std::vector<SpmPiece> all;
  ASSERT_TRUE(tok_->EncodeRaw(doc, &all).ok());
  auto chunks = tok_->EncodeQueryDocumentChunks(kHello, doc, 64, 16);
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_GT(chunks->size(), 1u);
  int expected_begin = 0;
  for (size_t c = 0; c < chunks->size(); ++c) {
    const Window& w = (*chunks)[c];
    EXPECT_EQ(w.second_token_begin, expected_begin);
    EXPECT_LE(w.ids.size(), 64u);
    for (int t = w.second_token_begin; t < w.second_token_end; ++t) {
      const size_t pos = 11 + (t - w.second_token_begin);
      EXPECT_EQ(w.ids[pos], all[t].id);
      EXPECT_EQ(*w.second_offsets[pos], (ByteSpan{all[t].begin, all[t].end}));
    }
    if (c + 1 < chunks->size()) {
      EXPECT_EQ(w.second_token_end - w.second_token_begin, 64 - 3 - 9);
    }
    expected_begin += (64 - 3 - 9) - 16;
  }
  EXPECT_EQ(chunks->back().second_token_end, static_cast<int>(all.size()));
}

// The window loop as it was written before counting existed (start += step
// until a window reaches the end): the oracle for CountWindows.
int64_t SimulatedWindowCount(int64_t n, int64_t room, int64_t stride) {
  int64_t count = 0;
  for (int64_t start = 0;; start += room - stride) {
    ++count;
    if (std::min(start + room, n) >= n) break;
  }
  return count;
}

TEST(CountWindowsTest, MatchesTheWindowLoop) {
  // Hand-checked: 27 tokens, room 10, stride 4 -> windows at 0, 6, 12, 18.
  EXPECT_EQ(CountWindows(27, 10, 4), 4);
  EXPECT_EQ(CountWindows(0, 10, 4), 1);   // empty second text: one window
  EXPECT_EQ(CountWindows(10, 10, 9), 1);  // exactly one window's worth
  EXPECT_EQ(CountWindows(11, 10, 9), 2);
  // The fuzzing case: a 1 MiB "a a a ..." context (524287 tokens) beside a
  // question leaving 2 tokens, stride clamped to 1: one window per token.
  EXPECT_EQ(CountWindows(524287, 2, 1), 524286);
  for (int64_t room = 1; room <= 12; ++room) {
    for (int64_t stride = 0; stride < room; ++stride) {
      for (int64_t n = 0; n <= 60; ++n) {
        EXPECT_EQ(CountWindows(n, room, stride), SimulatedWindowCount(n, room, stride))
            << "n=" << n << " room=" << room << " stride=" << stride;
      }
    }
  }
  // Arithmetic the windowing refuses.
  EXPECT_EQ(CountWindows(5, 0, 0), -1);
  EXPECT_EQ(CountWindows(11, 10, 10), -1);
  EXPECT_EQ(CountWindows(11, 10, -1), -1);
}

TEST_F(TokenizerTest, PlanCountsTheWindowsItBuilds) {
  std::string context;
  for (int i = 0; i < 12; ++i) context += "The baker next door sells bread, rolls, and small cakes. ";
  std::vector<SpmPiece> all;
  ASSERT_TRUE(tok_->EncodeRaw(context, &all).ok());
  const int64_t n = static_cast<int64_t>(all.size());
  ASSERT_GT(n, 100);
  int checked_multi = 0;
  for (int max_length : {13, 14, 16, 22, 40, 64, 128, 512}) {
    for (int stride : {0, 1, 3, 7, 128}) {
      for (bool clamp : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "max_length=" << max_length << " stride=" << stride << " clamp=" << clamp);
        auto plan = tok_->PlanQuestionContextWindows(kHello, context, max_length, stride, clamp);
        auto built = tok_->EncodeQuestionContextWindows(kHello, context, max_length, stride, clamp);
        ASSERT_EQ(plan.ok(), built.ok()) << plan.status() << " vs " << built.status();
        if (!plan.ok()) {
          EXPECT_EQ(plan.status(), built.status());
          continue;
        }
        EXPECT_EQ(plan->max_length(), max_length);
        EXPECT_EQ(plan->first_tokens(), 9);
        EXPECT_EQ(plan->second_tokens(), n);
        EXPECT_EQ(plan->room(), max_length - 3 - 9);
        EXPECT_EQ(plan->count(), static_cast<int64_t>(built->size()));
        EXPECT_EQ(plan->count(), SimulatedWindowCount(n, plan->room(), plan->stride()));
        if (built->size() > 1) ++checked_multi;
        // The built windows: the last reaches the end, each overlaps the
        // previous one by the plan's stride, none is longer than max_length.
        EXPECT_EQ(built->back().second_token_end, n);
        for (size_t i = 0; i < built->size(); ++i) {
          EXPECT_LE((*built)[i].ids.size(), static_cast<size_t>(max_length));
          if (i > 0) EXPECT_EQ((*built)[i - 1].second_token_end - (*built)[i].second_token_begin, plan->stride());
        }
        // BuildWindows(plan) is what EncodeQuestionContextWindows returns.
        const std::vector<Window> rebuilt = tok_->BuildWindows(*plan);
        ASSERT_EQ(rebuilt.size(), built->size());
        for (size_t i = 0; i < rebuilt.size(); ++i) EXPECT_EQ(rebuilt[i].ids, (*built)[i].ids);
      }
    }
  }
  EXPECT_GE(checked_multi, 20);
  // Rerank chunks plan the same way.
  auto plan = tok_->PlanQueryDocumentChunks(kHello, context, 64, 16);
  auto chunks = tok_->EncodeQueryDocumentChunks(kHello, context, 64, 16);
  ASSERT_TRUE(plan.ok() && chunks.ok());
  EXPECT_EQ(plan->count(), static_cast<int64_t>(chunks->size()));
  auto no_room = tok_->PlanQueryDocumentChunks(kSuper, context, 30, 0);
  ASSERT_FALSE(no_room.ok());
  EXPECT_THAT(no_room.status().message(), HasSubstr("query has 27 tokens"));
}

TEST(TokenizerLstripTest, QuestionIsLeftStrippedLikeRunQa) {
  // identity_ws keeps whitespace (remove_extra_whitespaces=false), so the
  // left strip is visible in the ids.
  ::dserve::testing::EnsureOracle();
  auto tok = Tokenizer::FromDirectory(::dserve::testing::OracleDir() + "/identity_ws");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto stripped = (*tok)->EncodeQuestionContextWindows("Who baked it?", "The baker.", 64, 8);
  auto padded = (*tok)->EncodeQuestionContextWindows(" \t\u3000Who baked it?", "The baker.", 64, 8);
  ASSERT_TRUE(stripped.ok() && padded.ok());
  EXPECT_EQ((*stripped)[0].ids, (*padded)[0].ids);
  auto raw = (*tok)->EncodePair(" \t\u3000Who baked it?", "The baker.", EncodeOptions());
  ASSERT_TRUE(raw.ok());
  EXPECT_NE(raw->ids, (*padded)[0].ids);  // the pair encoder does not strip
}

TEST_F(TokenizerTest, InvalidUtf8NamesBytePosition) {
  auto enc = tok_->Encode(std::string("ab\xff" "cd"), EncodeOptions());
  ASSERT_FALSE(enc.ok());
  EXPECT_EQ(enc.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(enc.status().message(), HasSubstr("byte 2"));
  // Truncated sequence at the end, surrogate, overlong.
  EXPECT_THAT(tok_->Encode("abc\xe2\x82", EncodeOptions()).status().message(), HasSubstr("byte 3"));
  EXPECT_THAT(tok_->Encode("\xed\xa0\x80", EncodeOptions()).status().message(), HasSubstr("byte 0"));
  EXPECT_THAT(tok_->Encode("x\xc0\xaf", EncodeOptions()).status().message(), HasSubstr("byte 1"));
  auto pair = tok_->EncodePair("ok", "fine\x80", EncodeOptions());
  ASSERT_FALSE(pair.ok());
  EXPECT_THAT(pair.status().message(), HasSubstr("text_pair"));
  EXPECT_THAT(pair.status().message(), HasSubstr("byte 4"));
  auto qa = tok_->EncodeQuestionContextWindows("q", "c\xf5", 64, 8);
  ASSERT_FALSE(qa.ok());
  EXPECT_THAT(qa.status().message(), HasSubstr("context"));
  std::vector<SpmPiece> raw;
  EXPECT_FALSE(tok_->EncodeRaw("\xf4\x90\x80\x80", &raw).ok());  // > U+10FFFF
  EXPECT_TRUE(tok_->EncodeRaw("\xf4\x8f\xbf\xbf", &raw).ok());   // U+10FFFF
}

TEST_F(TokenizerTest, TenMegabyteInputEncodesWithSaneOffsets) {
  const std::string unit = "The baker next door sells bread, rolls, and small cakes. 東京 café ";
  std::string big;
  big.reserve(10u << 20);
  while (big.size() < (10u << 20)) big += unit;
  std::vector<SpmPiece> out;
  ASSERT_TRUE(tok_->EncodeRaw(big, &out).ok());
  // Every piece covers at most a few bytes of this text and at least one piece
  // is produced per ~10 bytes.
  EXPECT_GT(out.size(), big.size() / 10);
  EXPECT_LT(out.size(), big.size());
  uint32_t prev_end = 0;
  for (const SpmPiece& p : out) {
    ASSERT_LE(prev_end, p.begin);
    ASSERT_LE(p.begin, p.end);
    prev_end = p.end;
  }
  EXPECT_LE(prev_end, big.size());
  EXPECT_GE(prev_end, big.size() - unit.size());
  // The encoding is periodic: the first unit's pieces reappear unchanged.
  std::vector<SpmPiece> one;
  ASSERT_TRUE(tok_->EncodeRaw(unit + unit, &one).ok());
  for (size_t i = 0; i < one.size() / 2; ++i) EXPECT_EQ(out[i].id, one[i].id);
}

TEST_F(TokenizerTest, ConcurrentEncodesMatchSerial) {
  ::dserve::testing::EnsureOracle();
  const auto strings = ::dserve::testing::OracleStrings();
  std::vector<std::vector<int32_t>> serial(strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    auto enc = tok_->Encode(strings[i], EncodeOptions{0, Truncation::kNone, false});
    ASSERT_TRUE(enc.ok());
    serial[i] = enc->ids;
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < strings.size(); i += 1) {
        auto enc = tok_->Encode(strings[(i * 7 + t) % strings.size()],
                                EncodeOptions{0, Truncation::kNone, false});
        if (!enc.ok() || enc->ids != serial[(i * 7 + t) % strings.size()]) ++mismatches[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(mismatches, ElementsAre(0, 0, 0, 0));
}

TEST(Utf8Test, CodepointIndex) {
  const std::string s = "aé日🇯🇵";  // 1 + 2 + 3 + 4 + 4 bytes
  CodepointIndex idx(s);
  EXPECT_EQ(idx.ToCodepoint(0), 0u);
  EXPECT_EQ(idx.ToCodepoint(1), 1u);
  EXPECT_EQ(idx.ToCodepoint(3), 2u);
  EXPECT_EQ(idx.ToCodepoint(6), 3u);
  EXPECT_EQ(idx.ToCodepoint(10), 4u);
  EXPECT_EQ(idx.ToCodepoint(14), 5u);
  EXPECT_EQ(idx.num_codepoints(), 5u);
  EXPECT_EQ(CountCodepoints(s), 5u);
}

TEST(TokenizerLoadTest, Errors) {
  auto missing = Tokenizer::FromDirectory("/nonexistent/dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("spm.model"));

  spm::ModelProto bpe;
  bpe.mutable_trainer_spec()->set_model_type(spm::TrainerSpec::BPE);
  auto* p = bpe.add_pieces();
  p->set_piece("<unk>");
  p->set_type(spm::ModelProto::SentencePiece::UNKNOWN);
  auto loaded = SpmProcessor::FromSerialized(bpe.SerializeAsString());
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(), HasSubstr("BPE"));

  auto garbage = SpmProcessor::FromSerialized("\xff\xff\xff not a proto");
  EXPECT_FALSE(garbage.ok());

  auto json = Tokenizer::FromTokenizerJsonFile("/nonexistent/tokenizer.json");
  EXPECT_FALSE(json.ok());
}


// Issue 16, defect 2: truncation stops tokenizing once max_length tokens are
// certain, and keeps exactly what encoding the whole text keeps.
std::string LongText(size_t bytes, unsigned seed) {
  const char* words[] = {"Hello", "world.", "supercalifragilistic", "refund", "a", "parcel,", "ok", "42"};
  std::string text;
  while (text.size() < bytes) {
    seed = seed * 1103515245u + 12345u;
    text += words[(seed >> 16) % 8];
    text += (seed >> 8) % 5 == 0 ? "\n" : " ";
  }
  return text;
}

// `enc` equals the first tokens of the full, untruncated encoding of each
// text (ids and byte offsets), `keep_a` and `keep_b` of them.
void ExpectPrefixOfFull(const Tokenizer& tok, const Encoding& enc, const std::string& a, size_t keep_a,
                        const std::string* b = nullptr, size_t keep_b = 0) {
  auto full_a = tok.Encode(a, EncodeOptions{0, Truncation::kNone});
  ASSERT_TRUE(full_a.ok());
  ASSERT_EQ(enc.size(), keep_a + 2 + (b ? keep_b + 1 : 0));
  for (size_t i = 0; i < keep_a; ++i) {
    ASSERT_EQ(enc.ids[1 + i], full_a->ids[1 + i]) << "token " << i;
    ASSERT_EQ(enc.offsets[1 + i].begin, full_a->offsets[1 + i].begin) << "token " << i;
    ASSERT_EQ(enc.offsets[1 + i].end, full_a->offsets[1 + i].end) << "token " << i;
  }
  if (b == nullptr) return;
  auto full_b = tok.Encode(*b, EncodeOptions{0, Truncation::kNone});
  ASSERT_TRUE(full_b.ok());
  for (size_t i = 0; i < keep_b; ++i) {
    ASSERT_EQ(enc.ids[keep_a + 2 + i], full_b->ids[1 + i]) << "second text, token " << i;
    ASSERT_EQ(enc.offsets[keep_a + 2 + i].begin, full_b->offsets[1 + i].begin) << "second text, token " << i;
  }
}

TEST_F(TokenizerTest, TruncationStopsTokenizingALongTextEarly) {
  const std::string text = LongText(1 << 20, 7);  // 1 MiB
  const uint64_t before = tok_->encoded_bytes();
  auto enc = tok_->Encode(text, Opts(128, Truncation::kLongestFirst));
  ASSERT_TRUE(enc.ok()) << enc.status();
  const uint64_t work = tok_->encoded_bytes() - before;
  EXPECT_LT(work, 64u << 10) << "a 1 MiB text was tokenized whole for 128 tokens";
  ExpectPrefixOfFull(*tok_, *enc, text, 126);
}

TEST_F(TokenizerTest, TruncatedPairsEqualTheFullEncodingsPrefixes) {
  const std::string longer = LongText(300000, 3), shorter = "Hello world. refund a parcel";
  auto short_full = tok_->Encode(shorter, EncodeOptions{0, Truncation::kNone});
  ASSERT_TRUE(short_full.ok());
  const size_t ns = short_full->size() - 2;
  for (Truncation t : {Truncation::kLongestFirst, Truncation::kOnlySecond}) {
    const uint64_t before = tok_->encoded_bytes();
    auto enc = tok_->EncodePair(shorter, longer, Opts(64, t));
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_LT(tok_->encoded_bytes() - before, 64u << 10);
    ExpectPrefixOfFull(*tok_, *enc, shorter, ns, &longer, 61 - ns);
  }
  // Both long (longest_first): the odd token of the budget goes to the
  // longer text, which needs the full counts.
  const std::string other = LongText(200000, 11);
  auto enc = tok_->EncodePair(other, longer, Opts(64, Truncation::kLongestFirst));
  ASSERT_TRUE(enc.ok());
  ExpectPrefixOfFull(*tok_, *enc, other, 30, &longer, 31);
}

}  // namespace
}  // namespace dserve
