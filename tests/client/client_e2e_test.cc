// dserve-client (CLI and load generator) against two real `dserve serve`
// processes on loopback, with the test checkpoints of make_test_models.py.
// Server A serves classify, answer and rerank; server B serves classify.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/client/test_process.h"

namespace dserve {
namespace {

using testing::CommandResult;
using testing::HttpGet;
using testing::MetricSum;
using testing::RunCommand;
using testing::ServerProcess;
using Json = nlohmann::json;

const std::string kClient = DSERVE_BINARY_DIR "/bin/dserve-client";
const std::string kServer = DSERVE_BINARY_DIR "/bin/dserve";

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

class ClientE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::MakeTempDir("dserve_client_e2e_");
    const std::string models = dir_ + "/models";
    CommandResult made = RunCommand({"/usr/bin/python3", DSERVE_SOURCE_DIR "/tests/data/make_test_models.py",
                                     DSERVE_SHARED_DIR, models});
    if (made.exit_code != 0) {
      error_ = "make_test_models.py failed: " + made.err;
      return;
    }
    const std::vector<std::string> common = {"--listen", "127.0.0.1:0", "--metrics-listen",
                                             "127.0.0.1:0", "--threads-per-worker", "1"};
    std::vector<std::string> a_args = {kServer, "serve", "--model", "classify=" + models + "/classify",
                                       "--model", "answer=" + models + "/answer", "--model",
                                       "rerank=" + models + "/rerank"};
    std::vector<std::string> b_args = {kServer, "serve", "--model", "classify=" + models + "/classify"};
    a_args.insert(a_args.end(), common.begin(), common.end());
    b_args.insert(b_args.end(), common.begin(), common.end());
    auto a = ServerProcess::Start(a_args, dir_ + "/a.log", absl::Seconds(60));
    auto b = ServerProcess::Start(b_args, dir_ + "/b.log", absl::Seconds(60));
    if (!a.ok() || !b.ok()) {
      error_ = absl::StrCat("server start: ", a.status().ToString(), " / ", b.status().ToString());
      return;
    }
    a_ = std::move(*a).release();
    b_ = std::move(*b).release();
    WriteFile(dir_ + "/classify.jsonl",
              "{\"text\": \"the quick brown fox jumps over the lazy dog\"}\n"
              "{\"text\": \"hello world\", \"label\": \"x\"}\n"
              "{\"texts\": [\"a short one\", \"and another text that is a little longer than that\"]}\n");
    WriteFile(dir_ + "/answer.jsonl",
              "{\"question\": \"who jumps?\", \"context\": \"the quick brown fox jumps over the dog\"}\n");
    WriteFile(dir_ + "/rerank.jsonl",
              "{\"query\": \"fox\", \"documents\": [\"the quick brown fox\", \"a lazy dog\"]}\n");
  }

  static void TearDownTestSuite() {
    delete a_;  // stops the server
    delete b_;
    a_ = b_ = nullptr;
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void SetUp() override { ASSERT_TRUE(error_.empty()) << error_; }

  static std::string TargetA() { return absl::StrCat("127.0.0.1:", a_->grpc_port()); }
  static std::string TargetBoth() {
    return absl::StrCat("ipv4:127.0.0.1:", a_->grpc_port(), ",127.0.0.1:", b_->grpc_port());
  }

  static CommandResult Client(std::vector<std::string> args) {
    args.insert(args.begin(), kClient);
    return RunCommand(args);
  }

  // Parses the single JSON object the CLI printed.
  static Json ParseJson(const CommandResult& r) {
    Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "stdout: " << r.out << "\nstderr: " << r.err;
    return j;
  }

  static double OkClassifyRequests(ServerProcess* server) {
    auto text = HttpGet(server->metrics_port(), "/metrics");
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok()) return -1;
    return MetricSum(*text, "dserve_requests_total", {{"model", "classify"}, {"code", "OK"}});
  }

  static std::string dir_;
  static std::string error_;
  static ServerProcess* a_;
  static ServerProcess* b_;
};

std::string ClientE2eTest::dir_;
std::string ClientE2eTest::error_;
ServerProcess* ClientE2eTest::a_ = nullptr;
ServerProcess* ClientE2eTest::b_ = nullptr;

TEST_F(ClientE2eTest, LoadRoundRobinGivesBothServersAFairShare) {
  const double a_before = OkClassifyRequests(a_);
  const double b_before = OkClassifyRequests(b_);
  CommandResult r = Client({"--target", TargetBoth(), "--lb", "round_robin", "--json", "load",
                            "--model", "classify", "--task", "classify", "--input",
                            dir_ + "/classify.jsonl", "--requests", "400", "--concurrency", "8",
                            "--warmup-s", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = ParseJson(r);
  EXPECT_EQ(report["requests"], 400);
  EXPECT_EQ(report["ok"], 400);
  EXPECT_EQ(report["codes"], Json({{"OK", 400}}));
  EXPECT_GT(report["throughput_rps"].get<double>(), 0);
  // The inputs carry 1, 1, 2 texts, cycled: 400 calls carry 533 items.
  EXPECT_NEAR(report["items_per_s"].get<double>() / report["throughput_rps"].get<double>(),
              533.0 / 400.0, 1e-6);
  const Json latency = report["latency_ms"];
  EXPECT_GT(latency["p50"].get<double>(), 0);
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>());
  EXPECT_LE(latency["p90"].get<double>(), latency["p99"].get<double>());
  EXPECT_LE(latency["p99"].get<double>(), latency["max"].get<double>());
  EXPECT_EQ(report["config"]["loop"], "closed");

  const double a = OkClassifyRequests(a_) - a_before;
  const double b = OkClassifyRequests(b_) - b_before;
  EXPECT_EQ(a + b, 400) << "a=" << a << " b=" << b;
  // The generator waits until both backends answer before its first call, so
  // round-robin alternates from the start: the split is even (200/200 when
  // neither connection drops), not skewed by one backend connecting late.
  EXPECT_GE(a / 400, 0.45) << "a=" << a << " b=" << b;
  EXPECT_LE(a / 400, 0.55) << "a=" << a << " b=" << b;
}

TEST_F(ClientE2eTest, LoadOpenLoopKeepsItsSchedule) {
  CommandResult r = Client({"--target", TargetA(), "load", "--model", "classify", "--task",
                            "classify", "--input", dir_ + "/classify.jsonl", "--rps", "100",
                            "--requests", "50", "--warmup-s", "0.2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = ParseJson(r);
  EXPECT_EQ(report["ok"], 50);
  EXPECT_EQ(report["config"]["loop"], "open");
  // Call k of the counted 50 is due at k / 100 s: the last one 0.49 s in.
  EXPECT_GE(report["elapsed_s"].get<double>(), 0.49);
  EXPECT_LT(report["elapsed_s"].get<double>(), 5.0);
}

TEST_F(ClientE2eTest, LoadDurationRatesAreOverTheWindow) {
  CommandResult r = Client({"--target", TargetA(), "--json", "load", "--model", "classify", "--task",
                            "classify", "--input", dir_ + "/classify.jsonl", "--rps", "100",
                            "--duration-s", "1.5", "--warmup-s", "0.3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = ParseJson(r);
  EXPECT_EQ(report["elapsed_s"], 1.5);
  // 150 calls are due in the window; replies lag their calls by a few ms.
  EXPECT_NEAR(report["requests"].get<double>(), 150, 2);
  EXPECT_NEAR(report["throughput_rps"].get<double>(), 100, 8);
  EXPECT_EQ(report["codes"]["OK"], report["requests"]);
}

TEST_F(ClientE2eTest, LoadAnswerAndRerank) {
  for (const std::string task : {"answer", "rerank"}) {
    CommandResult r = Client({"--target", TargetA(), "--json", "load", "--model", task, "--task",
                              task, "--input", dir_ + "/" + task + ".jsonl", "--requests", "20",
                              "--concurrency", "4", "--warmup-s", "0"});
    ASSERT_EQ(r.exit_code, 0) << task << ": " << r.err;
    const Json report = ParseJson(r);
    EXPECT_EQ(report["codes"], Json({{"OK", 20}})) << task;
    const double items_per_call = task == "rerank" ? 2.0 : 1.0;
    EXPECT_NEAR(report["items_per_s"].get<double>() / report["throughput_rps"].get<double>(),
                items_per_call, 1e-6)
        << task;
  }
}

TEST_F(ClientE2eTest, LoadCountsErrorCodes) {
  CommandResult r = Client({"--target", TargetA(), "--json", "load", "--model", "nope", "--task",
                            "classify", "--input", dir_ + "/classify.jsonl", "--requests", "12",
                            "--concurrency", "3", "--warmup-s", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json report = ParseJson(r);
  EXPECT_EQ(report["codes"], Json({{"NOT_FOUND", 12}}));
  EXPECT_EQ(report["ok"], 0);
}

TEST_F(ClientE2eTest, ClassifyJson) {
  CommandResult models = Client({"--target", TargetA(), "--json", "models"});
  ASSERT_EQ(models.exit_code, 0) << models.err;
  size_t num_labels = 0;
  const Json listed = ParseJson(models);
  for (const Json& m : listed["models"]) {
    if (m["name"] == "classify") num_labels = m["labels"].size();
  }
  ASSERT_GT(num_labels, 1u);

  // --json after the command works too.
  CommandResult r = Client({"--target", TargetA(), "classify", "--model", "classify",
                            "hello world", "the quick brown fox", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = ParseJson(r);
  EXPECT_EQ(j["model"], "classify");
  ASSERT_EQ(j["results"].size(), 2u);
  for (const Json& result : j["results"]) {
    ASSERT_EQ(result["labels"].size(), num_labels);
    double sum = 0;
    double previous = 2;
    for (const Json& l : result["labels"]) {
      EXPECT_LE(l["score"].get<double>(), previous);
      previous = l["score"].get<double>();
      sum += previous;
    }
    EXPECT_NEAR(sum, 1.0, 1e-4);
    EXPECT_GT(result["tokens"].get<int>(), 2);  // [CLS] text [SEP]
  }
  EXPECT_EQ(j["usage"]["items"], 2);
  EXPECT_GT(j["usage"]["tokens"].get<int>(), 4);
}

TEST_F(ClientE2eTest, ModelsJson) {
  CommandResult r = Client({"--json", "--target", TargetA(), "models"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::pair<std::string, std::string>> seen;
  const Json listed = ParseJson(r);
  for (const Json& m : listed["models"]) {
    seen.insert({m["name"].get<std::string>(), m["task"].get<std::string>()});
  }
  EXPECT_EQ(seen, (std::set<std::pair<std::string, std::string>>{
                      {"answer", "answer"}, {"classify", "classify"}, {"rerank", "rerank"}}));
}

TEST_F(ClientE2eTest, HealthJson) {
  CommandResult r = Client({"--target", TargetA(), "--json", "health"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r), Json({{"service", ""}, {"status", "SERVING"}}));
  CommandResult model = Client({"--target", TargetA(), "--json", "health", "--service", "answer"});
  ASSERT_EQ(model.exit_code, 0) << model.err;
  EXPECT_EQ(ParseJson(model)["status"], "SERVING");
  CommandResult unknown = Client({"--target", TargetA(), "health", "--service", "nope"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;
}

TEST_F(ClientE2eTest, AnswerAndRerankJson) {
  const std::string context = "the quick brown fox jumps over the lazy dog";
  CommandResult r = Client({"--target", TargetA(), "--json", "answer", "--model", "answer",
                            "--question", "who jumps?", "--context", context, "--top-k", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json answer = ParseJson(r);
  ASSERT_FALSE(answer["answers"].empty());
  for (const Json& a : answer["answers"]) {
    const int start = a["start_char"], end = a["end_char"];
    EXPECT_EQ(a["text"], context.substr(start, end - start));  // ASCII: chars == bytes
  }
  EXPECT_TRUE(answer["no_answer"].is_boolean());

  CommandResult rr = Client({"--target", TargetA(), "--json", "rerank", "--model", "rerank",
                             "--query", "fox", "a lazy dog", "the quick brown fox", "a cat"});
  ASSERT_EQ(rr.exit_code, 0) << rr.err;
  const Json rerank = ParseJson(rr);
  ASSERT_EQ(rerank["results"].size(), 3u);
  std::set<int> indices;
  for (size_t i = 0; i < 3; ++i) {
    indices.insert(rerank["results"][i]["index"].get<int>());
    if (i > 0) EXPECT_LE(rerank["results"][i]["score"], rerank["results"][i - 1]["score"]);
  }
  EXPECT_EQ(indices, (std::set<int>{0, 1, 2}));
}

TEST_F(ClientE2eTest, HumanReadableOutput) {
  CommandResult r = Client({"--target", TargetA(), "classify", "--model", "classify", "hi there"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("[0] ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("hi there"), std::string::npos) << r.out;
  CommandResult h = Client({"--target", TargetA(), "health"});
  EXPECT_EQ(h.out, "SERVING\n");
}

TEST_F(ClientE2eTest, ErrorsExitNonZeroWithTheCodeName) {
  CommandResult r = Client({"--target", TargetA(), "classify", "--model", "nope", "x"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err.rfind("dserve-client: NOT_FOUND: ", 0), 0u) << r.err;
  CommandResult j = Client({"--target", TargetA(), "--json", "rerank", "--model", "classify",
                            "--query", "q", "doc"});
  EXPECT_EQ(j.exit_code, 1);
  EXPECT_EQ(ParseJson(j)["error"]["code"], "FAILED_PRECONDITION") << j.err;
  CommandResult empty = Client({"--target", TargetA(), "classify", "--model", "classify", ""});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("INVALID_ARGUMENT"), std::string::npos) << empty.err;
  // Nothing listens on port 1.
  CommandResult down = Client({"--target", "127.0.0.1:1", "--timeout-ms", "1000", "models"});
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("UNAVAILABLE"), std::string::npos) << down.err;
  CommandResult usage = Client({"classify"});
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace dserve
