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
