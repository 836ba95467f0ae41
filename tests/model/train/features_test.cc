// Training features: answer spans mapped to tokens, windows, labels.
#include "model/train/features.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "tests/model/train/train_test_util.h"

namespace dserve::testing {
namespace {

std::unique_ptr<Tokenizer> Toy() {
  auto tok = Tokenizer::FromSpmFile(GoldenSpm());
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *std::move(tok);
}

SquadData Squad(const std::string& text) {
  const std::string path = ScratchDir("features") + "/squad.json";
  WriteText(path, text);
  auto data = ReadSquadJson(path);
  EXPECT_TRUE(data.ok()) << data.status();
  return *std::move(data);
}

TEST(AnswerFeatures, SpansCoverTheAnswerText) {
  auto tok = Toy();
  SquadData data = Squad(ToySquad(0));
  auto set = BuildAnswerFeatures(data, *tok, 64, 16);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->features.size(), data.questions.size());  // short contexts: one window each
  for (size_t i = 0; i < data.questions.size(); ++i) {
    const auto& q = data.questions[i];
    const Feature& f = set->features[i];
    if (q.Unanswerable()) {
      EXPECT_EQ(f.start, 0);
      EXPECT_EQ(f.end, 0);
      continue;
    }
    ASSERT_GT(f.start, 0) << q.id;
    ASSERT_GE(f.end, f.start);
    auto windows = tok->EncodeQuestionContextWindows(q.question, data.contexts[q.context_index], 64, 16);
    ASSERT_TRUE(windows.ok());
    const auto& w = (*windows)[0];
    const std::string& ctx = data.contexts[q.context_index];
    std::string span = ctx.substr(w.second_offsets[f.start]->begin,
                                  w.second_offsets[f.end]->end - w.second_offsets[f.start]->begin);
    EXPECT_EQ(std::string(absl::StripAsciiWhitespace(span)), q.answers[0].text) << q.id;
  }
}

TEST(AnswerFeatures, AnswerOutsideAWindowPointsAtCls) {
  auto tok = Toy();
  std::string context;
  for (int i = 0; i < 30; ++i) context += "the river runs past the mill. ";
  context += "The answer is golden.";
  const int start = static_cast<int>(context.find("golden"));
  json root = {{"data", {{{"paragraphs", {{{"context", context},
                                          {"qas", {{{"id", "x"}, {"question", "What colour?"},
                                                    {"answers", {{{"text", "golden"}, {"answer_start", start}}}}}}}}}}}}}};
  SquadData data = Squad(root.dump());
  auto set = BuildAnswerFeatures(data, *tok, 48, 8);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_GT(set->features.size(), 3u);
  int with_answer = 0;
  for (size_t i = 0; i + 1 < set->features.size(); ++i) {
    if (set->features[i].start > 0) ++with_answer;
  }
  EXPECT_EQ(with_answer, 0);                    // early windows do not contain it
  EXPECT_GT(set->features.back().start, 0);     // the last one does
  EXPECT_EQ(set->units.size(), set->features.size());
}

TEST(ClassifyFeatures, LabelsAndTruncation) {
  auto tok = Toy();
  const std::string path = ScratchDir("features_c") + "/c.jsonl";
  WriteText(path, "{\"text\": \"the river runs past the old mill every morning\", \"label\": \"b\"}\n"
                  "{\"text\": \"hi\", \"label\": \"a\"}\n");
  auto data = ReadClassifyJsonl(path);
  ASSERT_TRUE(data.ok());
  auto set = BuildClassifyFeatures(*data, *tok, {"a", "b"}, 8);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->features[0].labels, std::vector<int>{1});
  EXPECT_EQ(set->features[1].labels, std::vector<int>{0});
  EXPECT_EQ(set->features[0].ids.size(), 8u);
  EXPECT_EQ(set->truncated, 1);
  auto bad = BuildClassifyFeatures(*data, *tok, {"a"}, 8);
  EXPECT_FALSE(bad.ok());
}

TEST(RerankFeatures, ListwiseUnitsAreQueries) {
  auto tok = Toy();
  const std::string path = ScratchDir("features_r") + "/r.jsonl";
  WriteText(path, ToyRerank(0));
  auto data = ReadRerankJsonl(path);
  ASSERT_TRUE(data.ok());
  auto point = BuildRerankFeatures(*data, *tok, 48, 16, false);
  auto list = BuildRerankFeatures(*data, *tok, 48, 16, true);
  ASSERT_TRUE(point.ok() && list.ok());
  EXPECT_EQ(point->units.size(), 24u);
  ASSERT_EQ(list->units.size(), 6u);
  EXPECT_EQ(list->units[0].size(), 4u);
  float positives = 0;
  for (int i : list->units[2]) positives += list->features[i].target;
  EXPECT_EQ(positives, 1.0f);
  TokenBatch b = CollateFeatures(point->features, {0, 1}, tok->pad_id(), false);
  EXPECT_EQ(b.batch_size, 2);
}

// Issue 18, defect 6: a passage longer than max_length is trained on the
// chunks the server scores (not cut longest-first): every chunk carries its
// pair, and the passage's last words are in one of them.
TEST(RerankFeatures, LongPassagesAreChunkedLikeServing) {
  auto tok = Toy();
  const std::string path = ScratchDir("features_chunks") + "/r.jsonl";
  std::string passage;
  for (int i = 0; i < 12; ++i) passage += "the package was sent to the wrong address again ";
  passage += "refund";
  WriteText(path, "{\"query\": \"where is my refund\", \"passage\": \"" + passage +
                      "\", \"label\": 1}\n{\"query\": \"where is my refund\", \"passage\": \"short\", "
                      "\"label\": 0}\n");
  auto data = ReadRerankJsonl(path);
  ASSERT_TRUE(data.ok()) << data.status();
  auto set = BuildRerankFeatures(*data, *tok, 32, 8, false);
  ASSERT_TRUE(set.ok()) << set.status();
  ASSERT_EQ(set->units.size(), 2u);
  EXPECT_GT(set->units[0].size(), 2u);  // the long passage: several chunks
  EXPECT_EQ(set->units[1].size(), 1u);
  EXPECT_EQ(set->truncated, 1);
  // The serving path's chunks, one for one.
  auto chunks = tok->EncodeQueryDocumentChunks("where is my refund", passage, 32, 8, /*clamp_stride=*/true);
  ASSERT_TRUE(chunks.ok());
  ASSERT_EQ(chunks->size(), set->units[0].size());
  for (size_t c = 0; c < chunks->size(); ++c) {
    const Feature& f = set->features[static_cast<size_t>(set->units[0][c])];
    EXPECT_EQ(f.pair, 0);
    EXPECT_EQ(f.target, 1.0f);
    EXPECT_LE(f.ids.size(), 32u);
    EXPECT_EQ(f.ids, (*chunks)[c].ids);
  }
  // The last word survives (longest-first truncation dropped it).
  auto last = tok->EncodePair("where is my refund", "refund", EncodeOptions());
  ASSERT_TRUE(last.ok());
  const int32_t refund_id = last->ids[last->ids.size() - 2];
  const Feature& final_chunk = set->features[static_cast<size_t>(set->units[0].back())];
  EXPECT_NE(std::find(final_chunk.ids.begin(), final_chunk.ids.end(), refund_id), final_chunk.ids.end());
  EXPECT_EQ(set->features[static_cast<size_t>(set->units[1][0])].pair, 1);
}

}  // namespace
}  // namespace dserve::testing
