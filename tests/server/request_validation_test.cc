// Tests of server/request_validation: parsing raw request bytes, the request
// limits and the tokenization into items, with the goldens' real tokenizer.
// Oracle for the token ids: Hugging Face's DebertaV2Tokenizer outputs in
// shared/goldens/tokenizer/spm_golden.json (deberta_input_ids).
#include "server/request_validation.h"

#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace dserve {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string GoldenDir() { return std::string(DSERVE_SHARED_DIR) + "/goldens/tokenizer"; }

const Tokenizer& GoldenTokenizer() {
  static const Tokenizer* tokenizer = [] {
    auto t = Tokenizer::FromSpmFile(GoldenDir() + "/spm.model");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? t->release() : nullptr;
  }();
  return *tokenizer;
}

struct GoldenSample {
  std::string text;
  std::vector<int64_t> ids;  // [CLS] ... [SEP]
};

std::vector<GoldenSample> GoldenSamples() {
  std::ifstream in(GoldenDir() + "/spm_golden.json");
  EXPECT_TRUE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  std::vector<GoldenSample> samples;
  for (const auto& s : golden.at("samples")) {
    if (s.at("text").get<std::string>().empty()) continue;
    samples.push_back({s.at("text").get<std::string>(), s.at("deberta_input_ids").get<std::vector<int64_t>>()});
  }
  return samples;
}

// One length-delimited protobuf field: tag, length, bytes.
std::string Field(int number, const std::string& value) {
  std::string out(1, static_cast<char>(number << 3 | 2));
  size_t n = value.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>(n | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + value;
}

ModelInputSpec Spec(int max_length, bool type_ids = false, int doc_stride = 128) {
  ModelInputSpec spec;
  spec.tokenizer = &GoldenTokenizer();
  spec.max_length = max_length;
  spec.doc_stride = doc_stride;
  spec.type_ids = type_ids;
  return spec;
}

std::vector<int64_t> Widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// ---------------------------------------------------------------- parse --

TEST(ParseRequestTest, ParsesValidBytes) {
  v1::ClassifyRequest sent;
  sent.set_model("classify");
  sent.add_texts("please refund me");
  sent.set_top_k(3);
  auto parsed = ParseRequest<v1::ClassifyRequest>(sent.SerializeAsString());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->model(), "classify");
  ASSERT_EQ((*parsed)->texts_size(), 1);
  EXPECT_EQ((*parsed)->texts(0), "please refund me");
  EXPECT_EQ((*parsed)->top_k(), 3u);
}

TEST(ParseRequestTest, NamesTheFieldWithInvalidUtf8) {
  // texts[1] = "ok" 0xC3 "(": a lead byte followed by a non-continuation byte.
  const std::string bytes = Field(1, "classify") + Field(2, "fine") + Field(2, "ok\xc3(");
  auto parsed = ParseRequest<v1::ClassifyRequest>(bytes);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(), "texts[1]: invalid UTF-8 at byte 2 (0xC3)");

  auto answer = ParseRequest<v1::AnswerRequest>(Field(1, "answer") + Field(2, "\xff?") + Field(3, "c"));
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().message(), "question: invalid UTF-8 at byte 0 (0xFF)");

  auto rerank = ParseRequest<v1::RerankRequest>(Field(2, "q") + Field(3, "d") + Field(3, "d") + Field(3, "\x80"));
  ASSERT_FALSE(rerank.ok());
  EXPECT_EQ(rerank.status().message(), "documents[2]: invalid UTF-8 at byte 0 (0x80)");
}

TEST(ParseRequestTest, GarbageIsNotAValidRequest) {
  for (const std::string& bytes : {std::string("\xff\xff\xff"), std::string("\x12\x05" "ab", 4)}) {
    auto parsed = ParseRequest<v1::RerankRequest>(bytes);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), "request: not a valid dserve.v1.RerankRequest");
  }
  // No bytes at all is a valid (empty) proto3 message; validation rejects it.
  auto empty = ParseRequest<v1::ClassifyRequest>("");
  ASSERT_TRUE(empty.ok());
  auto prepared = PrepareClassify(**empty, ServeOptions(), Spec(64));
  ASSERT_FALSE(prepared.ok());
  EXPECT_EQ(prepared.status().message(), "texts: at least one is required");
}

TEST(ToTruncationTest, MapsEveryValue) {
  EXPECT_EQ(*ToTruncation(v1::TRUNCATION_UNSPECIFIED, Truncation::kOnlyFirst), Truncation::kOnlyFirst);
  EXPECT_EQ(*ToTruncation(v1::TRUNCATION_NONE, Truncation::kLongestFirst), Truncation::kNone);
  EXPECT_EQ(*ToTruncation(v1::TRUNCATION_LONGEST_FIRST, Truncation::kNone), Truncation::kLongestFirst);
  EXPECT_EQ(*ToTruncation(v1::TRUNCATION_ONLY_FIRST, Truncation::kNone), Truncation::kOnlyFirst);
  EXPECT_EQ(*ToTruncation(v1::TRUNCATION_ONLY_SECOND, Truncation::kNone), Truncation::kOnlySecond);
  auto bad = ToTruncation(static_cast<v1::Truncation>(99), Truncation::kNone);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "truncation: unknown value 99");
}

// ------------------------------------------------------------- classify --

TEST(PrepareClassifyTest, IdsMatchHuggingFace) {
  const std::vector<GoldenSample> samples = GoldenSamples();
  ASSERT_GE(samples.size(), 20u);
  v1::ClassifyRequest request;
  for (const auto& s : samples) request.add_texts(s.text);
  auto prepared = PrepareClassify(request, ServeOptions(), Spec(256));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->inputs.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    SCOPED_TRACE(samples[i].text);
    EXPECT_THAT(prepared->inputs[i].ids, ElementsAreArray(samples[i].ids));
    EXPECT_TRUE(prepared->inputs[i].type_ids.empty());
    EXPECT_EQ(prepared->tokens[i], samples[i].ids.size());
    EXPECT_FALSE(prepared->truncated[i]);
  }
}

TEST(PrepareClassifyTest, TruncatesLongestFirstByDefault) {
  const GoldenSample long_sample = GoldenSamples()[1];  // the baker sentence
  ASSERT_GT(long_sample.ids.size(), 10u);
  v1::ClassifyRequest request;
  request.add_texts(long_sample.text);
  request.add_texts("x   ");  // trailing whitespace is not truncation
  auto prepared = PrepareClassify(request, ServeOptions(), Spec(8));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  const std::vector<int64_t>& ids = prepared->inputs[0].ids;
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_TRUE(std::equal(ids.begin(), ids.end() - 1, long_sample.ids.begin()));
  EXPECT_EQ(ids.back(), GoldenTokenizer().sep_id());
  EXPECT_TRUE(prepared->truncated[0]);
  EXPECT_EQ(prepared->tokens[0], 8u);
  EXPECT_FALSE(prepared->truncated[1]);

  request.set_truncation(v1::TRUNCATION_NONE);
  auto refused = PrepareClassify(request, ServeOptions(), Spec(8));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("texts[0]: text has " + std::to_string(long_sample.ids.size()) +
                        " tokens (with [CLS] and [SEP]), more than max_length 8"));
}

TEST(PrepareClassifyTest, EnforcesTheLimits) {
  ServeOptions limits;
  limits.max_texts_per_request = 2;
  limits.max_text_bytes = 10;
  v1::ClassifyRequest request;
  request.add_texts("a");
  request.add_texts("b");
  request.add_texts("c");
  auto too_many = PrepareClassify(request, limits, Spec(64));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "texts: 3 items exceed the limit of 2 (--max-texts-per-request)");

  request.clear_texts();
  request.add_texts("fine");
  request.add_texts("eleven byte");
  auto too_long = PrepareClassify(request, limits, Spec(64));
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().message(), "texts[1]: 11 bytes exceed the limit of 10 (--max-text-bytes)");

  request.set_texts(1, "");
  auto empty = PrepareClassify(request, limits, Spec(64));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "texts[1]: empty text");

  request.set_texts(1, "ok");
  request.set_truncation(static_cast<v1::Truncation>(42));
  auto unknown = PrepareClassify(request, limits, Spec(64));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "truncation: unknown value 42");
}

// --------------------------------------------------------------- answer --

TEST(PrepareAnswerTest, WindowsOfEachContextInOrder) {
  const std::string question = "  What does the baker sell?";
  const std::vector<std::string> contexts = {
      GoldenSamples()[1].text + " " + GoldenSamples()[3].text + " " + GoldenSamples()[20].text, "Bread."};
  v1::AnswerRequest request;
  request.set_question(question);
  for (const auto& c : contexts) request.add_contexts(c);
  const ModelInputSpec spec = Spec(24, /*type_ids=*/true, /*doc_stride=*/128);
  auto prepared = PrepareAnswer(request, ServeOptions(), spec);
  ASSERT_TRUE(prepared.ok()) << prepared.status();

  size_t item = 0;
  for (size_t c = 0; c < contexts.size(); ++c) {
    // The oracle: the tokenizer's own windows (stride clamped as the server does).
    auto expected = GoldenTokenizer().EncodeQuestionContextWindows(question, contexts[c], 24, 128, true);
    ASSERT_TRUE(expected.ok()) << expected.status();
    if (c == 0) ASSERT_GT(expected->size(), 2u) << "the first context should need several windows";
    for (const Window& w : *expected) {
      ASSERT_LT(item, prepared->inputs.size());
      EXPECT_EQ(prepared->window_context[item], c);
      EXPECT_EQ(prepared->inputs[item].ids, Widen(w.ids));
      EXPECT_EQ(prepared->inputs[item].type_ids, Widen(w.type_ids));
      EXPECT_EQ(prepared->windows[item].second_token_begin, w.second_token_begin);
      ++item;
    }
  }
  EXPECT_EQ(item, prepared->inputs.size());

  // A model without token types gets none.
  auto untyped = PrepareAnswer(request, ServeOptions(), Spec(24, /*type_ids=*/false));
  ASSERT_TRUE(untyped.ok());
  for (const ItemInput& in : untyped->inputs) EXPECT_TRUE(in.type_ids.empty());
}

TEST(PrepareAnswerTest, EnforcesTheLimits) {
  ServeOptions limits;
  limits.max_contexts_per_request = 1;
  v1::AnswerRequest request;
  request.set_question("q");
  request.add_contexts("one");
  request.add_contexts("two");
  auto too_many = PrepareAnswer(request, limits, Spec(64));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "contexts: 2 items exceed the limit of 1 (--max-contexts-per-request)");

  request.set_question("");
  auto no_question = PrepareAnswer(request, limits, Spec(64));
  ASSERT_FALSE(no_question.ok());
  EXPECT_EQ(no_question.status().message(), "question: empty text");  // checked before the contexts

  v1::AnswerRequest long_question;
  long_question.set_question(GoldenSamples()[1].text);
  long_question.add_contexts("c");
  auto no_room = PrepareAnswer(long_question, ServeOptions(), Spec(8));
  ASSERT_FALSE(no_room.ok());
  EXPECT_THAT(std::string(no_room.status().message()), HasSubstr("contexts[0]: question has"));
  EXPECT_THAT(std::string(no_room.status().message()), HasSubstr("no room in max_length 8"));
}

// Raw SentencePiece tokens of `text` (no specials).
int64_t RawTokens(const std::string& text) {
  std::vector<SpmPiece> pieces;
  EXPECT_TRUE(GoldenTokenizer().EncodeRaw(text, &pieces).ok());
  return static_cast<int64_t>(pieces.size());
}

TEST(PrepareAnswerTest, RefusesTooManyWindowsBeforeBuildingThem) {
  // The fuzzing case: a 1 MiB "a a a ..." context beside a question that
  // leaves 2 tokens per window. The stride clamps to 1, so each window
  // advances one token: n - 1 windows for n context tokens.
  std::string context;
  while (context.size() + 2 <= (1u << 20)) context += "a ";
  const std::string question = "What does the baker sell?";
  const int max_length = static_cast<int>(3 + RawTokens(question) + 2);
  const int64_t n = RawTokens(context);
  ASSERT_GT(n, 400000);
  v1::AnswerRequest request;
  request.set_question(question);
  request.add_contexts(context);
  const uint64_t before = GoldenTokenizer().encoded_bytes();
  auto refused = PrepareAnswer(request, ServeOptions(), Spec(max_length, /*type_ids=*/true, /*doc_stride=*/128));
  const uint64_t work = GoldenTokenizer().encoded_bytes() - before;
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  // Issue 16, defect 2: tokenizing stopped once more than 256 windows were
  // certain (it tokenized the whole MiB before, to say n - 1).
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("contexts[0]: needs more than 256 windows of ", max_length,
                         " tokens (question leaves 2); the limit is 256 per request (--max-windows-per-request)"));
  EXPECT_LT(work, 64u << 10) << "the 1 MiB context was tokenized whole";
}

TEST(PrepareAnswerTest, WindowLimitCountsAllContexts) {
  // Small texts, so the oracle (the windows themselves) is cheap to build.
  const std::string question = "What does the baker sell?";
  const std::string a = GoldenSamples()[1].text + " " + GoldenSamples()[3].text;
  const std::string b = GoldenSamples()[20].text;
  const int max_length = 24;
  const int64_t room = max_length - 3 - RawTokens(question);
  auto wa = GoldenTokenizer().EncodeQuestionContextWindows(question, a, max_length, 128, true);
  auto wb = GoldenTokenizer().EncodeQuestionContextWindows(question, b, max_length, 128, true);
  ASSERT_TRUE(wa.ok() && wb.ok());
  const int64_t na = static_cast<int64_t>(wa->size()), nb = static_cast<int64_t>(wb->size());
  ASSERT_GT(na, 2);
  ASSERT_GT(nb, 1);
  v1::AnswerRequest request;
  request.set_question(question);
  request.add_contexts(a);
  request.add_contexts(b);
  ServeOptions limits;
  limits.max_windows_per_request = na + nb;  // at the limit: served
  auto served = PrepareAnswer(request, limits, Spec(max_length, false, 128));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(static_cast<int64_t>(served->inputs.size()), na + nb);

  limits.max_windows_per_request = na + nb - 1;
  auto second = PrepareAnswer(request, limits, Spec(max_length, false, 128));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(),
            absl::StrCat("contexts[1]: needs ", nb, " windows of 24 tokens (question leaves ", room, "), ", na + nb,
                         " with the contexts before it; the limit is ", na + nb - 1,
                         " per request (--max-windows-per-request)"));
  limits.max_windows_per_request = na - 1;
  auto first = PrepareAnswer(request, limits, Spec(max_length, false, 128));
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(first.status().message(),
            absl::StrCat("contexts[0]: needs ", na, " windows of 24 tokens (question leaves ", room,
                         "); the limit is ", na - 1, " per request (--max-windows-per-request)"));
}

// --------------------------------------------------------------- rerank --

TEST(PrepareRerankTest, RefusesTooManyChunksBeforeBuildingThem) {
  const std::string doc = GoldenSamples()[1].text + " " + GoldenSamples()[20].text;
  auto chunks = GoldenTokenizer().EncodeQueryDocumentChunks("bread", doc, 16, 4, true);
  ASSERT_TRUE(chunks.ok());
  const int64_t per_doc = static_cast<int64_t>(chunks->size());
  ASSERT_GT(per_doc, 1);
  const int64_t room = 16 - 3 - RawTokens("bread");
  v1::RerankRequest request;
  request.set_query("bread");
  request.add_documents(doc);
  request.add_documents(doc);
  ServeOptions limits;
  limits.max_windows_per_request = 2 * per_doc;
  auto served = PrepareRerank(request, limits, Spec(16, false, 4));
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(static_cast<int64_t>(served->inputs.size()), 2 * per_doc);
  limits.max_windows_per_request = 2 * per_doc - 1;
  auto refused = PrepareRerank(request, limits, Spec(16, false, 4));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("documents[1]: needs ", per_doc, " chunks of 16 tokens (query leaves ", room, "), ",
                         2 * per_doc, " with the documents before it; the limit is ", 2 * per_doc - 1,
                         " per request (--max-windows-per-request)"));
  // With a truncation there is one item per document, whatever its length.
  limits.max_windows_per_request = 1;
  request.set_truncation(v1::TRUNCATION_ONLY_SECOND);
  auto truncated = PrepareRerank(request, limits, Spec(16, false, 4));
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(truncated->inputs.size(), 2u);
}

TEST(PrepareRerankTest, ChunksLongDocumentsWhenUnspecified) {
  const std::string doc = GoldenSamples()[1].text + " " + GoldenSamples()[20].text;
  v1::RerankRequest request;
  request.set_query("bread");
  request.add_documents("short one");
  request.add_documents(doc);
  auto prepared = PrepareRerank(request, ServeOptions(), Spec(16, false, 4));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  auto chunks = GoldenTokenizer().EncodeQueryDocumentChunks("bread", doc, 16, 4, true);
  ASSERT_TRUE(chunks.ok());
  ASSERT_GT(chunks->size(), 1u);
  ASSERT_EQ(prepared->inputs.size(), 1 + chunks->size());
  EXPECT_EQ(prepared->chunk_document[0], 0u);
  EXPECT_EQ(prepared->chunk_bytes[0].begin, 0u);
  EXPECT_EQ(prepared->chunk_bytes[0].end, 9u);  // "short one"
  for (size_t i = 0; i < chunks->size(); ++i) {
    const Window& w = (*chunks)[i];
    EXPECT_EQ(prepared->chunk_document[1 + i], 1u);
    EXPECT_EQ(prepared->inputs[1 + i].ids, Widen(w.ids));
    EXPECT_TRUE(prepared->inputs[1 + i].type_ids.empty());
    // The chunk's bytes: from its first document token to its last.
    std::optional<ByteSpan> first, last;
    for (const auto& off : w.second_offsets) {
      if (!off) continue;
      if (!first) first = off;
      last = off;
    }
    ASSERT_TRUE(first && last);
    EXPECT_EQ(prepared->chunk_bytes[1 + i].begin, first->begin);
    EXPECT_EQ(prepared->chunk_bytes[1 + i].end, last->end);
  }
  EXPECT_EQ(prepared->chunk_bytes.back().end, doc.size()) << "the last chunk ends the document";
}

TEST(PrepareRerankTest, OneItemPerDocumentWithATruncation) {
  const std::string doc = GoldenSamples()[1].text;
  v1::RerankRequest request;
  request.set_query("bread");
  request.add_documents(doc);
  request.set_truncation(v1::TRUNCATION_ONLY_SECOND);
  auto prepared = PrepareRerank(request, ServeOptions(), Spec(12, /*type_ids=*/true));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->inputs.size(), 1u);
  EncodeOptions options;
  options.max_length = 12;
  options.truncation = Truncation::kOnlySecond;
  auto expected = GoldenTokenizer().EncodePair("bread", doc, options);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(prepared->inputs[0].ids, Widen(expected->ids));
  EXPECT_EQ(prepared->inputs[0].type_ids, Widen(expected->type_ids));
  EXPECT_EQ(prepared->chunk_bytes[0].begin, 0u);
  EXPECT_EQ(prepared->chunk_bytes[0].end, expected->offsets[expected->size() - 2].end);
  EXPECT_LT(prepared->chunk_bytes[0].end, doc.size());

  request.set_truncation(v1::TRUNCATION_NONE);
  auto refused = PrepareRerank(request, ServeOptions(), Spec(12));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("documents[0]: text pair has"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("more than max_length 12"));
}

TEST(PrepareClassifyTest, PairsAreClsASepBSep) {
  v1::ClassifyRequest request;
  request.add_texts("where is my order");
  request.add_text_pairs("the baker sells bread");
  auto prepared = PrepareClassify(request, ServeOptions(), Spec(64, /*type_ids=*/true));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EncodeOptions options;
  options.max_length = 64;
  auto expected = GoldenTokenizer().EncodePair("where is my order", "the baker sells bread", options);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(prepared->inputs[0].ids, Widen(expected->ids));
  EXPECT_EQ(prepared->inputs[0].type_ids, Widen(expected->type_ids));
  EXPECT_FALSE(prepared->truncated[0]);
  // Without type ids in the model: none sent.
  EXPECT_TRUE(PrepareClassify(request, ServeOptions(), Spec(64))->inputs[0].type_ids.empty());
  // One pair per text, each a real text.
  request.add_texts("second text");
  EXPECT_THAT(std::string(PrepareClassify(request, ServeOptions(), Spec(64)).status().message()),
              HasSubstr("text_pairs: 1 for 2 texts"));
  request.add_text_pairs("");
  EXPECT_THAT(std::string(PrepareClassify(request, ServeOptions(), Spec(64)).status().message()),
              HasSubstr("text_pairs[1]: empty text"));
}

TEST(PrepareClassifyTest, LeftTruncationKeepsTheEnd) {
  const GoldenSample sample = GoldenSamples()[1];
  ASSERT_GT(sample.ids.size(), 10u);
  v1::ClassifyRequest request;
  request.add_texts(sample.text);
  request.set_truncation_direction(v1::TRUNCATION_DIRECTION_LEFT);
  auto prepared = PrepareClassify(request, ServeOptions(), Spec(8));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  // [CLS] + the last 6 text tokens + [SEP].
  std::vector<int64_t> want = {sample.ids.front()};
  want.insert(want.end(), sample.ids.end() - 7, sample.ids.end() - 1);
  want.push_back(sample.ids.back());
  EXPECT_EQ(prepared->inputs[0].ids, want);
  EXPECT_TRUE(prepared->truncated[0]);
  // Nothing to cut: the same as RIGHT.
  request.set_texts(0, "bread");
  auto fits = PrepareClassify(request, ServeOptions(), Spec(8));
  ASSERT_TRUE(fits.ok());
  EXPECT_FALSE(fits->truncated[0]);
  request.set_truncation_direction(static_cast<v1::TruncationDirection>(7));
  EXPECT_THAT(std::string(PrepareClassify(request, ServeOptions(), Spec(8)).status().message()),
              HasSubstr("truncation_direction: unknown value 7"));
}

TEST(PrepareRerankTest, LeftTruncationKeepsTheDocumentsEnd) {
  const std::string doc = GoldenSamples()[1].text;
  v1::RerankRequest request;
  request.set_query("bread");
  request.add_documents(doc);
  request.set_truncation(v1::TRUNCATION_ONLY_SECOND);
  request.set_truncation_direction(v1::TRUNCATION_DIRECTION_LEFT);
  auto prepared = PrepareRerank(request, ServeOptions(), Spec(12));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EncodeOptions whole;
  whole.max_length = 0;
  auto full = GoldenTokenizer().EncodePair("bread", doc, whole);
  ASSERT_TRUE(full.ok());
  // [CLS] bread [SEP] + the document's last tokens + [SEP], 12 in all.
  const std::vector<int64_t> ids = prepared->inputs[0].ids;
  ASSERT_EQ(ids.size(), 12u);
  const size_t query_end = 3;  // [CLS] bread [SEP]
  ASSERT_EQ(full->ids[2], GoldenTokenizer().sep_id()) << "'bread' is one token";
  EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + query_end, full->ids.begin()));
  EXPECT_TRUE(std::equal(ids.begin() + query_end, ids.end(), full->ids.end() - (12 - query_end)));
  EXPECT_EQ(prepared->chunk_bytes[0].end, doc.size());
  EXPECT_GT(prepared->chunk_bytes[0].begin, 0u);
}

TEST(PrepareRerankTest, MaxChunksPerDocumentKeepsTheFirstChunks) {
  const std::string doc = GoldenSamples()[1].text + " " + GoldenSamples()[20].text;
  auto chunks = GoldenTokenizer().EncodeQueryDocumentChunks("bread", doc, 16, 4, true);
  ASSERT_TRUE(chunks.ok());
  ASSERT_GT(chunks->size(), 2u);
  v1::RerankRequest request;
  request.set_query("bread");
  request.add_documents(doc);
  request.set_max_chunks_per_document(2);
  ServeOptions limits;
  auto prepared = PrepareRerank(request, limits, Spec(16, false, 4));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->inputs.size(), 2u);
  EXPECT_EQ(prepared->inputs[0].ids, Widen((*chunks)[0].ids));
  EXPECT_EQ(prepared->inputs[1].ids, Widen((*chunks)[1].ids));
  // The cap counts against --max-windows-per-request, not the whole document.
  limits.max_windows_per_request = 2;
  EXPECT_TRUE(PrepareRerank(request, limits, Spec(16, false, 4)).ok());
  request.set_max_chunks_per_document(0);
  EXPECT_THAT(std::string(PrepareRerank(request, limits, Spec(16, false, 4)).status().message()),
              HasSubstr("--max-windows-per-request"));
}

TEST(PrepareRerankTest, EnforcesTheLimits) {
  ServeOptions limits;
  limits.max_documents_per_request = 2;
  limits.max_text_bytes = 4;
  v1::RerankRequest request;
  request.set_query("q");
  auto none = PrepareRerank(request, limits, Spec(64));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "documents: at least one is required");
  for (const char* d : {"a", "b", "c"}) request.add_documents(d);
  auto too_many = PrepareRerank(request, limits, Spec(64));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "documents: 3 items exceed the limit of 2 (--max-documents-per-request)");
  request.set_query("query");
  auto long_query = PrepareRerank(request, limits, Spec(64));
  ASSERT_FALSE(long_query.ok());
  EXPECT_EQ(long_query.status().message(), "query: 5 bytes exceed the limit of 4 (--max-text-bytes)");
}

}  // namespace
}  // namespace dserve
