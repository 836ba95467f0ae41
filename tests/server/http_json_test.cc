// The HTTP/JSON wire formats (server/doors/http/http_json.h): JSON -> v1 request,
// v1 response -> JSON, status -> HTTP. Pure functions, no server.
#include "server/doors/http/http_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace dserve {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(HttpStatus, EachCodeHasTheDocumentedStatus) {
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kOk), 200);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInvalidArgument), 422);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kFailedPrecondition), 400);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kDeadlineExceeded), 504);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusFor(absl::StatusCode::kInternal), 500);
  EXPECT_STREQ(HttpErrorType(422), "validation");
  EXPECT_STREQ(HttpErrorType(429), "overloaded");
  EXPECT_STREQ(HttpErrorType(503), "unhealthy");
  EXPECT_STREQ(HttpErrorType(504), "timeout");
}

TEST(RequestTimeout, MillisecondsOrAUnit) {
  EXPECT_EQ(*ParseRequestTimeout("250"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseRequestTimeout("1.5"), absl::Microseconds(1500));
  EXPECT_EQ(*ParseRequestTimeout("2s"), absl::Seconds(2));
  EXPECT_EQ(*ParseRequestTimeout("250ms"), absl::Milliseconds(250));
  EXPECT_FALSE(ParseRequestTimeout("0").ok());
  EXPECT_FALSE(ParseRequestTimeout("-5").ok());
  EXPECT_THAT(ParseRequestTimeout("soon").status().message(), HasSubstr("request-timeout"));
}

TEST(ChooseModel, RequestedThenDefaultThenTheOnlyOne) {
  const std::vector<std::pair<std::string, std::string>> served = {
      {"tickets", "classify"}, {"manual", "answer"}, {"rank-a", "rerank"}, {"rank-b", "rerank"}};
  EXPECT_EQ(*ChooseModel(served, "x", "", "classify"), "x");  // the path says NOT_FOUND later
  EXPECT_EQ(*ChooseModel(served, "", "", "classify"), "tickets");
  EXPECT_EQ(*ChooseModel(served, "", "rank-b", "rerank"), "rank-b");
  auto several = ChooseModel(served, "", "", "rerank");
  EXPECT_EQ(several.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(several.status().message(), HasSubstr("rank-a, rank-b"));
  // The default serves another task: not used for this one.
  EXPECT_EQ(*ChooseModel(served, "", "rank-b", "classify"), "tickets");
  EXPECT_EQ(ChooseModel({{"tickets", "classify"}}, "", "", "rerank").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*ChooseModel({{"tickets", "classify"}}, "", "", ""), "tickets");
}

TEST(TeiPredict, OneTextOrAList) {
  auto one = ParseTeiPredict(R"({"inputs": "refund please", "raw_scores": true, "truncate": true})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE(one->batched);
  ASSERT_EQ(one->request->texts_size(), 1);
  EXPECT_EQ(one->request->texts(0), "refund please");
  EXPECT_TRUE(one->request->raw_scores());
  EXPECT_EQ(one->request->truncation(), v1::TRUNCATION_LONGEST_FIRST);
  auto many = ParseTeiPredict(R"({"inputs": ["a", "b"], "truncate": false, "timeout_ms": 1500, "priority": 3})");
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_TRUE(many->batched);
  EXPECT_EQ(many->request->texts_size(), 2);
  EXPECT_EQ(many->request->truncation(), v1::TRUNCATION_NONE);
  EXPECT_EQ(*many->call.timeout, absl::Milliseconds(1500));
  EXPECT_EQ(*many->call.priority, 3);
  EXPECT_EQ(many->request->priority(), 3);
  // Unset truncate: the server's default.
  EXPECT_EQ(ParseTeiPredict(R"({"inputs": "a"})")->request->truncation(), v1::TRUNCATION_UNSPECIFIED);
}

TEST(TeiPredict, BadBodiesNameTheField) {
  EXPECT_THAT(ParseTeiPredict("not json").status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(ParseTeiPredict("[1]").status().message(), HasSubstr("JSON object"));
  EXPECT_THAT(ParseTeiPredict("{}").status().message(), HasSubstr("'inputs' is required"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": 3})").status().message(), HasSubstr("'inputs' must be"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": ["a", 2]})").status().message(), HasSubstr("'inputs[1]'"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": [["q", "p"], ["r"]]})").status().message(), HasSubstr("'inputs[1]'"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": [["q", "p", "x"]]})").status().message(), HasSubstr("'inputs[0]'"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": [["q", "p"], "r"]})").status().message(), HasSubstr("'inputs[1]'"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": "a", "truncation_direction": "up"})").status().message(),
              HasSubstr("truncation_direction"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": "a", "raw_scores": "yes"})").status().message(),
              HasSubstr("'raw_scores' must be true or false"));
  EXPECT_THAT(ParseTeiPredict(R"({"inputs": "a", "timeout_ms": 0})").status().message(), HasSubstr("timeout_ms"));
  // Invalid UTF-8 inside a string is a parse error, not a crash.
  EXPECT_THAT(ParseTeiPredict("{\"inputs\": \"\xff\xfe\"}").status().message(), HasSubstr("UTF-8"));
}

TEST(TeiPredict, BatchesOfPairsAndTruncationDirection) {
  auto pairs = ParseTeiPredict(R"({"inputs": [["q1", "p1"], ["q2", "p2"]], "truncation_direction": "Left"})");
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_TRUE(pairs->batched);
  ASSERT_EQ(pairs->request->texts_size(), 2);
  ASSERT_EQ(pairs->request->text_pairs_size(), 2);
  EXPECT_EQ(pairs->request->texts(1), "q2");
  EXPECT_EQ(pairs->request->text_pairs(1), "p2");
  EXPECT_EQ(pairs->request->truncation_direction(), v1::TRUNCATION_DIRECTION_LEFT);
  auto singles = ParseTeiPredict(R"({"inputs": [["a"], ["b"]], "truncation_direction": "right"})");
  ASSERT_TRUE(singles.ok()) << singles.status();
  EXPECT_EQ(singles->request->texts_size(), 2);
  EXPECT_EQ(singles->request->text_pairs_size(), 0);
  EXPECT_EQ(singles->request->truncation_direction(), v1::TRUNCATION_DIRECTION_RIGHT);
  EXPECT_EQ(ParseTeiPredict(R"({"inputs": "a", "truncation_direction": "left"})")->request->truncation_direction(),
            v1::TRUNCATION_DIRECTION_LEFT);
}

TEST(TeiRerankFields, TruncationDirection) {
  auto r = ParseTeiRerank(R"({"query": "q", "texts": ["a"], "truncate": true, "truncation_direction": "Left"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request->truncation(), v1::TRUNCATION_LONGEST_FIRST);
  EXPECT_EQ(r->request->truncation_direction(), v1::TRUNCATION_DIRECTION_LEFT);
  EXPECT_THAT(ParseTeiRerank(R"({"query": "q", "texts": ["a"], "truncation_direction": 1})").status().message(),
              HasSubstr("truncation_direction"));
}

TEST(CohereRerankFields, MaxChunksPerDoc) {
  auto r = ParseCohereRerank(R"({"query": "q", "documents": ["a"], "max_chunks_per_doc": 3, "top_n": 1})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request->max_chunks_per_document(), 3u);
  EXPECT_EQ(r->request->top_n(), 1u);
  EXPECT_EQ(ParseCohereRerank(R"({"query": "q", "documents": ["a"]})")->request->max_chunks_per_document(), 0u);
  EXPECT_THAT(ParseCohereRerank(R"({"query": "q", "documents": ["a"], "max_chunks_per_doc": 0})").status().message(),
              HasSubstr("max_chunks_per_doc"));
  EXPECT_THAT(ParseCohereRerank(R"({"query": "q", "documents": ["a"], "max_chunks_per_doc": -1})").status().message(),
              HasSubstr("max_chunks_per_doc"));
}

TEST(TeiPredict, ResponseIsLabelScoreListsBestFirst) {
  v1::ClassifyResponse r;
  auto* c = r.add_results();
  auto* l = c->add_labels();
  l->set_label("refund");
  l->set_score(0.75f);
  l = c->add_labels();
  l->set_label("billing");
  l->set_score(0.25f);
  json one = json::parse(TeiPredictResponse(r, false));
  ASSERT_TRUE(one.is_array());
  EXPECT_EQ(one[0]["label"], "refund");
  EXPECT_EQ(one[0]["score"].get<double>(), 0.75);
  EXPECT_EQ(one[1]["label"], "billing");
  json many = json::parse(TeiPredictResponse(r, true));
  ASSERT_EQ(many.size(), 1u);
  EXPECT_EQ(many[0][1]["score"].get<double>(), 0.25);
}

TEST(TeiPredict, ScoresRoundTripTheFloatExactly) {
  v1::ClassifyResponse r;
  auto* l = r.add_results()->add_labels();
  l->set_label("x");
  l->set_score(0.1f);  // not a short decimal as a double
  json one = json::parse(TeiPredictResponse(r, false));
  EXPECT_EQ(static_cast<float>(one[0]["score"].get<double>()), 0.1f);
  EXPECT_EQ(one[0]["score"].get<double>(), static_cast<double>(0.1f));
}

TEST(TeiRerank, RequestAndResponse) {
  auto p = ParseTeiRerank(R"({"query": "q", "texts": ["a", "b"], "return_text": true, "raw_scores": true})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request->query(), "q");
  EXPECT_EQ(p->request->documents_size(), 2);
  EXPECT_TRUE(p->request->return_documents());
  EXPECT_TRUE(p->request->raw_scores());
  EXPECT_TRUE(p->return_text);
  EXPECT_THAT(ParseTeiRerank(R"({"texts": []})").status().message(), HasSubstr("'query' is required"));
  EXPECT_THAT(ParseTeiRerank(R"({"query": "q"})").status().message(), HasSubstr("'texts' is required"));
  v1::RerankResponse r;
  auto* d = r.add_results();
  d->set_index(1);
  d->set_score(0.5f);
  d->set_document("b");
  json with = json::parse(TeiRerankResponse(r, true));
  EXPECT_EQ(with, json::parse(R"([{"index": 1, "score": 0.5, "text": "b"}])"));
  json without = json::parse(TeiRerankResponse(r, false));
  EXPECT_FALSE(without[0].contains("text"));
}

TEST(CohereRerank, StringsOrTextObjects) {
  auto p = ParseCohereRerank(
      R"({"model": "m", "query": "q", "documents": ["a", {"text": "b", "title": "ignored"}], "top_n": 1,
          "return_documents": true, "max_chunks_per_doc": 10})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request->model(), "m");
  ASSERT_EQ(p->request->documents_size(), 2);
  EXPECT_EQ(p->request->documents(1), "b");
  EXPECT_EQ(p->request->top_n(), 1u);
  EXPECT_TRUE(p->request->return_documents());
  EXPECT_THAT(ParseCohereRerank(R"({"query": "q", "documents": [{"title": "x"}]})").status().message(),
              HasSubstr("'documents[0]'"));
  EXPECT_THAT(ParseCohereRerank(R"({"query": "q", "documents": ["a"], "top_n": -1})").status().message(),
              HasSubstr("'top_n'"));
  v1::RerankResponse r;
  r.set_model("m");
  r.mutable_usage()->set_tokens(12);
  auto* d = r.add_results();
  d->set_index(1);
  d->set_score(0.5f);
  d->set_document("b");
  json out = json::parse(CohereRerankResponse(r, "req-1", true));
  EXPECT_EQ(out["id"], "req-1");
  EXPECT_EQ(out["results"][0], json::parse(R"({"index": 1, "relevance_score": 0.5, "document": {"text": "b"}})"));
  EXPECT_EQ(out["usage"]["total_tokens"], 12);
  EXPECT_FALSE(json::parse(CohereRerankResponse(r, "req-1", false))["results"][0].contains("document"));
}

v1::AnswerResponse TwoSpans(bool no_answer, float no_answer_score) {
  v1::AnswerResponse r;
  r.set_no_answer(no_answer);
  r.set_no_answer_score(no_answer_score);
  for (auto [text, score, start] : {std::tuple{"three days", 0.6f, 10u}, std::tuple{"days", 0.2f, 16u}}) {
    auto* a = r.add_answers();
    a->set_text(text);
    a->set_score(score);
    a->set_start_char(start);
    a->set_end_char(start + static_cast<uint32_t>(std::string(text).size()));
  }
  return r;
}

TEST(HfAnswer, RequestMapsParameters) {
  auto p = ParseHfAnswer(R"({"model": "qa", "inputs": {"question": "q?", "context": "c"},
      "parameters": {"top_k": 3, "max_answer_len": 15, "handle_impossible_answer": true, "doc_stride": 64}})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->request->model(), "qa");
  EXPECT_EQ(p->request->question(), "q?");
  ASSERT_EQ(p->request->contexts_size(), 1);
  EXPECT_EQ(p->request->top_k(), 3u);
  EXPECT_EQ(p->request->max_answer_tokens(), 15u);
  EXPECT_TRUE(p->handle_impossible_answer);
  EXPECT_THAT(ParseHfAnswer(R"({"inputs": {"question": "q"}})").status().message(), HasSubstr("'context'"));
}

TEST(HfAnswer, ResponseLikeHuggingFace) {
  HfAnswer call;
  // Best span, HF's single object.
  json one = json::parse(HfAnswerResponse(TwoSpans(false, 0.1f), call));
  EXPECT_EQ(one["answer"], "three days");
  EXPECT_EQ(one["start"], 10);
  EXPECT_EQ(one["end"], 20);
  EXPECT_EQ(static_cast<float>(one["no_answer_score"].get<double>()), 0.1f);
  // The model says no answer, but the caller did not allow it: the span (as HF).
  EXPECT_EQ(json::parse(HfAnswerResponse(TwoSpans(true, 0.9f), call))["answer"], "three days");
  call.handle_impossible_answer = true;
  json none = json::parse(HfAnswerResponse(TwoSpans(true, 0.9f), call));
  EXPECT_EQ(none["answer"], "");
  EXPECT_EQ(none["start"], 0);
  EXPECT_EQ(none["end"], 0);
  EXPECT_EQ(static_cast<float>(none["score"].get<double>()), 0.9f);
  // top_k > 1: a list; the empty answer placed by its score (after 0.6, before 0.2... here 0.3).
  call.top_k = 3;
  json list = json::parse(HfAnswerResponse(TwoSpans(false, 0.3f), call));
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["answer"], "three days");
  EXPECT_EQ(list[1]["answer"], "");
  EXPECT_EQ(list[2]["answer"], "days");
}

TEST(ProtoJson, ClassifyRequestBothNamingsAndUnknownFieldsRefused) {
  v1::ClassifyRequest request;
  CallOptions call;
  ASSERT_TRUE(ParseProtoJson(R"({"model": "m", "texts": ["a"], "topK": 2, "raw_scores": true,
                                 "truncation": "TRUNCATION_NONE", "timeout_ms": 50})",
                             &request, &call)
                  .ok());
  EXPECT_EQ(request.model(), "m");
  EXPECT_EQ(request.top_k(), 2u);
  EXPECT_TRUE(request.raw_scores());
  EXPECT_EQ(request.truncation(), v1::TRUNCATION_NONE);
  EXPECT_EQ(*call.timeout, absl::Milliseconds(50));
  v1::ClassifyRequest other;
  absl::Status unknown = ParseProtoJson(R"({"model": "m", "textz": ["a"]})", &other, &call);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.message(), HasSubstr("dserve.v1.ClassifyRequest"));
}

TEST(ProtoJson, PriorityTakenAndBadBytesRefused) {
  v1::RerankRequest request;
  CallOptions call;
  ASSERT_TRUE(ParseProtoJson(R"({"model": "m", "query": "q", "documents": ["a"], "priority": 7})", &request, &call)
                  .ok());
  EXPECT_EQ(request.priority(), 7);
  EXPECT_EQ(*call.priority, 7);
  EXPECT_FALSE(call.timeout.has_value());
  v1::RerankRequest bad;
  absl::Status s = ParseProtoJson("{\"model\": \"m\", \"query\": \"\xff\"}", &bad, &call);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  v1::RerankRequest not_json;
  EXPECT_FALSE(ParseProtoJson("{\"model\": ", &not_json, &call).ok());
}

TEST(ProtoJson, ResponsePrintsEveryFieldSnakeCase) {
  v1::ClassifyResponse r;
  r.set_model("m");
  auto* l = r.add_results()->add_labels();
  l->set_label("a");
  l->set_score(0.0f);
  json out = json::parse(ProtoJson(r));
  EXPECT_EQ(out["model"], "m");
  EXPECT_EQ(out["model_version"], "");
  EXPECT_EQ(out["results"][0]["labels"][0]["score"], 0);
  EXPECT_EQ(out["results"][0]["truncated"], false);
}

TEST(TeiTokenize, ResponseShape) {
  auto p = ParseTeiTokenize(R"({"inputs": "hi", "add_special_tokens": false})");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->batched);
  EXPECT_FALSE(p->add_special_tokens);
  TokenJson t;
  t.id = 7;
  t.text = "hi";
  t.stop = 2;
  json out = json::parse(TeiTokenizeResponse({{t}}));
  EXPECT_EQ(out, json::parse(R"([[{"id": 7, "text": "hi", "special": false, "start": 0, "stop": 2}]])"));
}

}  // namespace
}  // namespace dserve
