// `dserve tokenize` against the libsentencepiece oracle: in-process through
// RunTokenizeCommand, and end to end by running ${DSERVE_BINARY_DIR}/bin/dserve
// as a subprocess on the generated strings (single texts and pairs).
#include "model/tools/tokenize_command.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/model/tokenizer/test_util.h"

namespace dserve {
namespace {

using ::dserve::testing::EnsureOracle;
using ::dserve::testing::OracleDir;
using ::testing::HasSubstr;

struct Case {
  std::string input_line;
  nlohmann::json expected;
};

// [CLS] a [SEP] (b [SEP]) built from the raw oracle rows; ids 1/2 are
// [CLS]/[SEP] in the trained models (DeBERTa layout).
nlohmann::json Expected(const nlohmann::json& a, const nlohmann::json* b) {
  nlohmann::json ids = {1}, pieces = {"[CLS]"}, offsets = nlohmann::json::array();
  offsets.push_back({0, 0});
  auto add = [&](const nlohmann::json& row) {
    for (const auto& v : row.at("ids")) ids.push_back(v);
    for (const auto& v : row.at("pieces")) pieces.push_back(v);
    for (const auto& v : row.at("offsets")) offsets.push_back(v);
    ids.push_back(2);
    pieces.push_back("[SEP]");
    offsets.push_back({0, 0});
  };
  add(a);
  if (b) add(*b);
  return {{"ids", ids}, {"pieces", pieces}, {"byte_offsets", offsets}};
}

std::vector<Case> BuildCases(const std::string& model) {
  const auto strings = ::dserve::testing::OracleStrings();
  const auto oracle = ::dserve::testing::ReadJsonl(OracleDir() + "/" + model + "/oracle.jsonl");
  std::vector<Case> cases;
  for (size_t i = 0; i < strings.size(); ++i) {
    cases.push_back({nlohmann::json{{"text", strings[i]}}.dump(), Expected(oracle[i], nullptr)});
  }
  for (size_t i = 0; i + 1 < strings.size(); i += 7) {
    cases.push_back({nlohmann::json{{"text", strings[i]}, {"text_pair", strings[i + 1]}}.dump(),
                     Expected(oracle[i], &oracle[i + 1])});
  }
  return cases;
}

// Compares output lines with the expected objects; returns mismatch count.
int Compare(const std::vector<Case>& cases, const std::string& output) {
  std::istringstream in(output);
  std::string line;
  size_t i = 0;
  int mismatches = 0;
  while (std::getline(in, line)) {
    if (i >= cases.size()) {
      ADD_FAILURE() << "extra output line " << line;
      return mismatches + 1;
    }
    const nlohmann::json got = nlohmann::json::parse(line);
    if (got != cases[i].expected && ++mismatches <= 3) {
      ADD_FAILURE() << "line " << i + 1 << " input " << cases[i].input_line << "\n got  " << line
                    << "\n want " << cases[i].expected.dump();
    }
    ++i;
  }
  EXPECT_EQ(i, cases.size()) << "output has too few lines";
  return mismatches + static_cast<int>(cases.size() - std::min(i, cases.size()));
}

class TokenizeCommandTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { EnsureOracle(); }
};

TEST_P(TokenizeCommandTest, InProcessMatchesOracle) {
  const auto cases = BuildCases(GetParam());
  std::string input;
  for (const Case& c : cases) input += c.input_line + "\n";
  std::istringstream in(input);
  std::ostringstream out, err;
  ASSERT_EQ(RunTokenizeCommand(OracleDir() + "/" + GetParam(), in, out, err), 0) << err.str();
  EXPECT_EQ(Compare(cases, out.str()), 0);
  EXPECT_GE(cases.size(), 5000u);
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizeCommandTest,
                         ::testing::Values("nmt_nfkc", "bytefb_cf_digits", "user_symbols"));

TEST(TokenizeCommandErrorsTest, BadLinesNameTheLineNumber) {
  EnsureOracle();
  const std::string dir = OracleDir() + "/nmt_nfkc";
  struct Bad {
    std::string third_line;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {"{not json", "line 3: not valid JSON"},
      {"[1, 2]", "line 3: expected a JSON object"},
      {"{\"txt\": \"a\"}", "line 3: \"text\" must be a string"},
      {"{\"text\": 5}", "line 3: \"text\" must be a string"},
      {"{\"text\": \"a\", \"text_pair\": 7}", "line 3: \"text_pair\" must be a string"},
  };
  for (const Bad& b : bad) {
    std::istringstream in("{\"text\": \"a\"}\n\n" + b.third_line + "\n{\"text\": \"b\"}\n");
    std::ostringstream out, err;
    EXPECT_EQ(RunTokenizeCommand(dir, in, out, err), 1) << b.third_line;
    EXPECT_THAT(err.str(), HasSubstr(b.message));
    // The good first line was written, nothing after the bad one.
    const std::string written = out.str();
    EXPECT_EQ(std::count(written.begin(), written.end(), '\n'), 1);
  }
  std::istringstream in("{}\n");
  std::ostringstream out, err;
  EXPECT_EQ(RunTokenizeCommand("/nonexistent", in, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("spm.model"));
}

// End to end: the real `dserve` binary as a subprocess.
TEST(DserveTokenizeBinaryTest, MatchesOracle) {
  EnsureOracle();
  const std::string bin = std::string(DSERVE_BINARY_DIR) + "/bin/dserve";
  ASSERT_TRUE(std::filesystem::exists(bin))
      << bin << " is not built; build target `dserve` (server/cli) first";
  const std::string model = "nmt_nfkc";
  const auto cases = BuildCases(model);
  const std::string work = OracleDir() + "/e2e";
  std::filesystem::create_directories(work);
  {
    std::ofstream in(work + "/input.jsonl");
    for (const Case& c : cases) in << c.input_line << "\n";
  }
  const std::string cmd = bin + " tokenize --model " + OracleDir() + "/" + model + " < " + work +
                          "/input.jsonl > " + work + "/output.jsonl 2> " + work + "/stderr.txt";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream out(work + "/output.jsonl");
  std::stringstream buf;
  buf << out.rdbuf();
  EXPECT_EQ(Compare(cases, buf.str()), 0);

  // A bad line: nonzero exit and the line number on stderr.
  {
    std::ofstream in(work + "/bad.jsonl");
    in << "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\nnot json\n";
  }
  const std::string bad_cmd = bin + " tokenize --model " + OracleDir() + "/" + model + " < " +
                              work + "/bad.jsonl > /dev/null 2> " + work + "/bad_stderr.txt";
  EXPECT_NE(std::system(bad_cmd.c_str()), 0);
  std::ifstream err(work + "/bad_stderr.txt");
  std::stringstream ebuf;
  ebuf << err.rdbuf();
  EXPECT_THAT(ebuf.str(), HasSubstr("line 3"));
}

}  // namespace
}  // namespace dserve
