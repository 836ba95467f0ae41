// Readers of DESIGN §4 data: good files and every error kind.
#include "model/train/data.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace dserve {
namespace {

class DataTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = ::testing::TempDir() + "/data_test_" + name;
    std::ofstream(path, std::ios::trunc | std::ios::binary) << content;
    return path;
  }
};

void ExpectError(const absl::Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.ok());
  for (const char* p : parts) EXPECT_TRUE(absl::StrContains(s.message(), p)) << s.message() << " lacks " << p;
}

TEST_F(DataTest, ClassifyGood) {
  auto path = Write("c.jsonl",
                    "{\"text\": \"refund please\", \"label\": \"refund\", \"tags\": [\"negation\"]}\n"
                    "\n"
                    "{\"text\": \"hi\", \"label\": 3}\r\n");
  auto data = ReadClassifyJsonl(path);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->examples.size(), 2u);
  EXPECT_FALSE(data->multi_label);
  EXPECT_EQ(data->examples[0].labels, std::vector<std::string>{"refund"});
  EXPECT_EQ(data->examples[0].tags, std::vector<std::string>{"negation"});
  EXPECT_EQ(data->examples[1].labels, std::vector<std::string>{"3"});
  EXPECT_EQ(data->examples[1].line, 3);
  EXPECT_EQ(CollectLabels(*data), (std::vector<std::string>{"3", "refund"}));
}

TEST_F(DataTest, ClassifyMultiLabel) {
  auto path = Write("m.jsonl", "{\"text\": \"a\", \"labels\": [\"x\", \"y\", \"x\"]}\n{\"text\": \"b\", \"labels\": []}\n");
  auto data = ReadClassifyJsonl(path);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_TRUE(data->multi_label);
  EXPECT_EQ(data->examples[0].labels, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(data->examples[1].labels.empty());
}

TEST_F(DataTest, ClassifyErrors) {
  ExpectError(ReadClassifyJsonl("/nonexistent/x.jsonl").status(), {"/nonexistent/x.jsonl", "cannot open"});
  auto p = Write("e1.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{not json\n");
  ExpectError(ReadClassifyJsonl(p).status(), {p.c_str(), ":2:", "invalid JSON"});
  p = Write("e2.jsonl", "{\"label\": \"x\"}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":1:", "\"text\"", "missing"});
  p = Write("e3.jsonl", "{\"text\": 5, \"label\": \"x\"}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":1:", "\"text\"", "must be a string"});
  p = Write("e4.jsonl", "{\"text\": \"a\"}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":1:", "\"label\"", "missing"});
  p = Write("e5.jsonl", "{\"text\": \"a\", \"label\": [1]}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":1:", "\"label\"", "string or an integer"});
  p = Write("e6.jsonl", "{\"text\": \"a\", \"label\": \"x\"}\n{\"text\": \"b\", \"labels\": [\"x\"]}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":2:", "\"labels\"", "line 1"});
  p = Write("e7.jsonl", "{\"text\": \"a\", \"label\": \"x\", \"tags\": \"neg\"}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":1:", "\"tags\"", "array"});
  p = Write("e8.jsonl", "[1, 2]\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":1:", "expected a JSON object"});
  p = Write("e9.jsonl", "\n\n");
  ExpectError(ReadClassifyJsonl(p).status(), {"no examples"});
  p = Write("e10.jsonl", "{\"text\": \"a\\u00e9\", \"label\": \"x\"}\n{\"text\": \"\xff\", \"label\": \"x\"}\n");
  ExpectError(ReadClassifyJsonl(p).status(), {":2:"});
}

const char* kSquad = R"({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
  {"context": "Café au lait costs 3 euros.",
   "qas": [{"id": "q1", "question": "What costs 3 euros?", "answers": [{"text": "Café au lait", "answer_start": 0}], "is_impossible": false},
           {"id": "q2", "question": "How much?", "answers": [{"text": "3 euros", "answer_start": 19}, {"text": "3", "answer_start": 19}]},
           {"id": "q3", "question": "Who?", "answers": [], "is_impossible": true}]}]}]})";

TEST_F(DataTest, SquadGood) {
  auto data = ReadSquadJson(Write("s.json", kSquad));
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->questions.size(), 3u);
  EXPECT_EQ(data->contexts.size(), 1u);
  EXPECT_EQ(data->questions[1].answers.size(), 2u);
  EXPECT_EQ(data->questions[1].answers[0].answer_start, 19);  // code points ("é" is 2 bytes)
  EXPECT_TRUE(data->questions[2].Unanswerable());
  EXPECT_FALSE(data->questions[0].Unanswerable());
  EXPECT_EQ(data->misaligned_answers, 0);
  auto offsets = CodepointByteOffsets(data->contexts[0]);
  EXPECT_EQ(offsets[19], 20u);
}

TEST_F(DataTest, SquadErrors) {
  auto p = Write("se1.json", "{\"data\": [");
  ExpectError(ReadSquadJson(p).status(), {p.c_str(), "invalid JSON", "line 1"});
  p = Write("se2.json", R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "a", "answers": []}]}]}]})");
  ExpectError(ReadSquadJson(p).status(), {"data[0].paragraphs[0].qas[0].question", "missing"});
  p = Write("se3.json",
            R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "a", "question": "q?", "answers": [{"text": "bc", "answer_start": 2}]}]}]}]})");
  ExpectError(ReadSquadJson(p).status(), {"qas[0].answers[0].answer_start", "outside the context"});
  p = Write("se4.json",
            R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "a", "question": "q?", "answers": [{"text": "bc", "answer_start": "1"}]}]}]}]})");
  ExpectError(ReadSquadJson(p).status(), {"answer_start", "must be an integer"});
  p = Write("se5.json",
            R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "a", "question": "q?", "is_impossible": true}, {"id": "a", "question": "r?", "is_impossible": true}]}]}]})");
  ExpectError(ReadSquadJson(p).status(), {"qas[1].id", "duplicate"});
  p = Write("se6.json", R"({"data": {}})");
  ExpectError(ReadSquadJson(p).status(), {"data", "must be an array"});
  p = Write("se7.json", R"({"data": [{"paragraphs": [{"qas": []}]}]})");
  ExpectError(ReadSquadJson(p).status(), {"data[0].paragraphs[0].context", "missing"});
  // Issue 18, defect 7: unanswerable yet answered is contradictory.
  p = Write("se8.json",
            R"({"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "a", "question": "q?", "is_impossible": true, "answers": [{"text": "bc", "answer_start": 1}]}]}]}]})");
  ExpectError(ReadSquadJson(p).status(),
              {"data[0].paragraphs[0].qas[0]", "is_impossible is true but it has 1 answer(s)", "plausible_answers"});
}

TEST_F(DataTest, SquadMisalignedAnswerIsCounted) {
  auto p = Write("sm.json",
                 R"({"data": [{"paragraphs": [{"context": "abcdef", "qas": [{"id": "a", "question": "q?", "answers": [{"text": "xy", "answer_start": 1}]}]}]}]})");
  auto data = ReadSquadJson(p);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->misaligned_answers, 1);
}

TEST_F(DataTest, RerankGoodAndGroups) {
  auto p = Write("r.jsonl",
                 "{\"query\": \"q1\", \"passage\": \"p1\", \"label\": 1}\n"
                 "{\"query\": \"q2\", \"passage\": \"p2\", \"label\": false}\n"
                 "{\"query\": \"q1\", \"passage\": \"p3\", \"label\": 0}\n");
  auto data = ReadRerankJsonl(p);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_groups, 2);
  EXPECT_EQ(data->examples[2].group, 0);
  EXPECT_EQ(data->examples[1].group, 1);
  EXPECT_EQ(data->examples[1].label, 0);
}

TEST_F(DataTest, RerankErrors) {
  auto p = Write("re1.jsonl", "{\"query\": \"q\", \"passage\": \"p\", \"label\": -1}\n");
  ExpectError(ReadRerankJsonl(p).status(), {":1:", "\"label\""});
  p = Write("re2.jsonl", "{\"query\": \"q\", \"label\": 1}\n");
  ExpectError(ReadRerankJsonl(p).status(), {":1:", "\"passage\"", "missing"});
  p = Write("re3.jsonl", "{\"query\": \"q\", \"passage\": \"p\", \"label\": \"yes\"}\n");
  ExpectError(ReadRerankJsonl(p).status(), {":1:", "\"label\""});
}

TEST_F(DataTest, TextDocuments) {
  auto p = Write("t.txt", "first line\nsecond line\n\n  \nthird\r\n");
  auto docs = ReadTextDocuments(p);
  ASSERT_TRUE(docs.ok()) << docs.status();
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].lines, (std::vector<std::string>{"first line", "second line"}));
  EXPECT_EQ((*docs)[1].lines, std::vector<std::string>{"third"});
  EXPECT_EQ((*docs)[1].first_line, 5);
  ExpectError(ReadTextDocuments(Write("t2.txt", "\n\n")).status(), {"no text"});
  ExpectError(ReadTextDocuments(Write("t3.txt", "ok\n\xc3\x28\n")).status(), {":2:"});
}

}  // namespace
}  // namespace dserve
