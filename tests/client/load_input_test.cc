#include "client/load_input.h"

#include <sstream>

#include <gtest/gtest.h>

namespace dserve {
namespace {

absl::StatusOr<std::vector<LoadRequest>> Parse(LoadTask task, const std::string& text) {
  std::istringstream in(text);
  return ParseLoadInput(task, "m", in);
}

TEST(LoadInputTest, ParsesTaskNames) {
  EXPECT_EQ(*ParseLoadTask("classify"), LoadTask::kClassify);
  EXPECT_EQ(*ParseLoadTask("answer"), LoadTask::kAnswer);
  EXPECT_EQ(*ParseLoadTask("rerank"), LoadTask::kRerank);
  EXPECT_FALSE(ParseLoadTask("mlm").ok());
}

TEST(LoadInputTest, ClassifyTextAndTextsSkippingBlankLinesAndExtraKeys) {
  auto r = Parse(LoadTask::kClassify,
                 "{\"text\": \"hello\", \"label\": \"greet\"}\n\n   \n{\"texts\": [\"a\", \"b\"]}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].classify.model(), "m");
  EXPECT_EQ((*r)[0].classify.texts_size(), 1);
  EXPECT_EQ((*r)[0].classify.texts(0), "hello");
  EXPECT_EQ((*r)[0].items, 1);
  EXPECT_EQ((*r)[1].classify.texts(1), "b");
  EXPECT_EQ((*r)[1].items, 2);
}

TEST(LoadInputTest, AnswerContextOrContexts) {
  auto r = Parse(LoadTask::kAnswer,
                 "{\"question\": \"q?\", \"context\": \"c\"}\n"
                 "{\"question\": \"q2\", \"contexts\": [\"x\", \"y\", \"z\"]}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].answer.question(), "q?");
  EXPECT_EQ((*r)[0].answer.contexts(0), "c");
  EXPECT_EQ((*r)[0].items, 1);
  EXPECT_EQ((*r)[1].answer.contexts_size(), 3);
  EXPECT_EQ((*r)[1].items, 3);
  EXPECT_EQ((*r)[1].answer.model(), "m");
}

TEST(LoadInputTest, RerankDocumentsOrPassage) {
  auto r = Parse(LoadTask::kRerank,
                 "{\"query\": \"q\", \"documents\": [\"d1\", \"d2\"]}\n"
                 "{\"query\": \"q\", \"passage\": \"p\", \"label\": 1}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].rerank.documents_size(), 2);
  EXPECT_EQ((*r)[0].items, 2);
  EXPECT_EQ((*r)[1].rerank.documents(0), "p");
  EXPECT_EQ((*r)[1].rerank.query(), "q");
}

// --protocol oip sends the same inputs as the tensors of docs/api.md's
// contract (the server's side is checked by e2e.oip_grpc).
TEST(LoadInputTest, ModelInferCarriesTheSameInputsAsTensors) {
  auto c = Parse(LoadTask::kClassify, "{\"texts\": [\"a\", \"b\u00e9\"]}\n");
  auto a = Parse(LoadTask::kAnswer, "{\"question\": \"q?\", \"contexts\": [\"x\", \"y\"]}\n");
  auto r = Parse(LoadTask::kRerank, "{\"query\": \"q\", \"documents\": [\"d1\", \"d2\", \"d3\"]}\n");
  ASSERT_TRUE(c.ok() && a.ok() && r.ok());
  auto names = [](const inference::ModelInferRequest& m) -> std::vector<std::string> {
    std::vector<std::string> out;
    for (const auto& t : m.inputs()) {
      EXPECT_EQ(t.datatype(), "BYTES") << t.name();
      EXPECT_EQ(t.shape_size(), 1) << t.name();
      if (t.shape_size() == 1) EXPECT_EQ(t.shape(0), t.contents().bytes_contents_size()) << t.name();
      out.push_back(t.name());
    }
    return out;
  };
  const inference::ModelInferRequest mc = ToModelInfer((*c)[0]);
  EXPECT_EQ(mc.model_name(), "m");
  EXPECT_EQ(names(mc), (std::vector<std::string>{"TEXT"}));
  EXPECT_EQ(mc.inputs(0).contents().bytes_contents(1), "b\u00e9");
  const inference::ModelInferRequest ma = ToModelInfer((*a)[0]);
  EXPECT_EQ(names(ma), (std::vector<std::string>{"QUESTION", "CONTEXT"}));
  EXPECT_EQ(ma.inputs(0).contents().bytes_contents(0), "q?");
  EXPECT_EQ(ma.inputs(1).contents().bytes_contents(1), "y");
  const inference::ModelInferRequest mr = ToModelInfer((*r)[0]);
  EXPECT_EQ(names(mr), (std::vector<std::string>{"QUERY", "DOCUMENTS"}));
  EXPECT_EQ(mr.inputs(1).shape(0), 3);
  EXPECT_EQ(mr.inputs(1).contents().bytes_contents(2), "d3");
}

TEST(LoadInputTest, ErrorsNameTheLineAndTheKey) {
  struct Case {
    LoadTask task;
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {LoadTask::kClassify, "{\"text\": \"ok\"}\n{not json\n", "line 2: not valid JSON"},
      {LoadTask::kClassify, "[1]\n", "line 1: not a JSON object"},
      {LoadTask::kClassify, "{\"txt\": \"a\"}\n", "missing \"texts\" (or \"text\")"},
      {LoadTask::kClassify, "{\"text\": 3}\n", "\"text\" must be a non-empty string"},
      {LoadTask::kClassify, "{\"texts\": []}\n", "\"texts\" must be a non-empty array"},
      {LoadTask::kClassify, "{\"texts\": [1]}\n", "\"texts\" must hold strings"},
      {LoadTask::kAnswer, "{\"context\": \"c\"}\n", "missing \"question\""},
      {LoadTask::kAnswer, "{\"question\": \"q\"}\n", "missing \"contexts\" (or \"context\")"},
      {LoadTask::kRerank, "\n\n{\"query\": \"q\"}\n", "line 3: missing \"documents\" (or \"passage\")"},
      {LoadTask::kRerank, "", "no requests"},
  };
  for (const Case& c : cases) {
    auto r = Parse(c.task, c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.expected), std::string::npos)
        << r.status() << " vs " << c.expected;
  }
}

TEST(LoadInputTest, MissingFileIsNotFound) {
  auto r = ReadLoadInputFile(LoadTask::kClassify, "m", "/nonexistent/inputs.jsonl");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace dserve
