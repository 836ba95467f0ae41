// End-to-end test from C++: starts the real `dserve serve` on loopback (port
// 0, ports parsed from stdout), calls it through the generated stub, and
// compares Classify / Rerank scores with an in-process computation on the
// same checkpoint (DebertaModel + Tokenizer, softmax / sigmoid here).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "dserve/v1/inference.grpc.pb.h"
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"

namespace dserve {
namespace {

// The server batches the texts differently from the in-process model here,
// which moves fp32 results at ~1e-6; 1e-4 is 100x that.
constexpr double kTolerance = 1e-4;

// Position k of a ranked response may hold candidate `got` where the oracle
// put `want` only when their oracle scores tie within kTolerance (batch
// composition may swap such a pair); elsewhere the order is exact.
void ExpectSameRank(const std::vector<double>& oracle, int got, int want, int k) {
  if (got != want) {
    EXPECT_NEAR(oracle[got], oracle[want], kTolerance)
        << "position " << k << ": candidate " << got << ", want " << want << " (not a tie)";
  }
}
const std::vector<std::string> kLabels = {"billing", "refund", "password_reset", "shipping", "other"};

std::string Shell(const std::string& s) { return "'" + s + "'"; }

// Servable checkpoints from tests/data/make_test_models.py, in a fresh
// folder under the build tree's scratch dir.
std::string MakeModels() {
  std::string scratch = DSERVE_E2E_SCRATCH;
  std::system(("mkdir -p " + Shell(scratch)).c_str());
  std::string pattern = scratch + "/cpp-models-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) return "";
  const std::string dir(buffer.data());
  const std::string cmd = std::string(DSERVE_E2E_PYTHON) + " " + Shell(std::string(DSERVE_SOURCE_DIR) +
                                                                       "/tests/data/make_test_models.py") +
                          " " + Shell(DSERVE_SHARED_DIR) + " " + Shell(dir) + " > /dev/null";
  if (std::system(cmd.c_str()) != 0) return "";
  return dir;
}

// `dserve serve` as a child process; killed by Stop() (and the destructor).
class ServerProcess {
 public:
  ~ServerProcess() { Stop(); }

  bool Start(const std::vector<std::string>& args, const std::string& log_path, std::string* error) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      *error = "pipe2 failed";
      return false;
    }
    std::vector<std::string> argv_storage = {DSERVE_E2E_BIN, "serve"};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) {
      *error = "fork failed";
      return false;
    }
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (log >= 0) dup2(log, STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    stdout_fd_ = out[0];
    std::string seen;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    const std::regex listening("dserve: listening on port (\\d+)");
    std::smatch m;
    while (!std::regex_search(seen, m, listening)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{stdout_fd_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) {
        *error = "timed out waiting for the port; stdout: " + seen;
        return false;
      }
      char chunk[512];
      const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
      if (n <= 0) {
        *error = "dserve serve exited before listening; stdout: " + seen + " (log: " + log_path + ")";
        return false;
      }
      seen.append(chunk, static_cast<size_t>(n));
    }
    port_ = std::stoi(m[1]);
    // Keep draining stdout so the child never blocks on a full pipe.
    drain_ = std::thread([fd = stdout_fd_] {
      char chunk[512];
      while (read(fd, chunk, sizeof(chunk)) > 0) {
      }
    });
    return true;
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (drain_.joinable()) drain_.join();
    if (stdout_fd_ >= 0) close(stdout_fd_);
    stdout_fd_ = -1;
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int port_ = 0;
  std::thread drain_;
};

std::vector<double> Softmax(const float* x, size_t n) {
  std::vector<double> out(n);
  const double max = *std::max_element(x, x + n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += out[i] = std::exp(static_cast<double>(x[i]) - max);
  for (double& v : out) v /= sum;
  return out;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<int64_t> Widen(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

// Code points [begin, end) of UTF-8 `text`.
std::string CodepointSlice(const std::string& text, uint32_t begin, uint32_t end) {
  std::vector<size_t> starts;  // byte offset of each code point, then text.size()
  for (size_t b = 0; b < text.size(); ++b) {
    if ((static_cast<unsigned char>(text[b]) & 0xC0) != 0x80) starts.push_back(b);
  }
  starts.push_back(text.size());
  if (end >= starts.size() || begin > end) return "<out of range>";
  return text.substr(starts[begin], starts[end] - starts[begin]);
}

class GrpcE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    models_ = new std::string(MakeModels());
    ASSERT_FALSE(models_->empty()) << "make_test_models.py failed";
    server_ = new ServerProcess();
    std::string error;
    log_ = new std::string(*models_ + ".log");
    const bool started = server_->Start({"--model", "classify=" + *models_ + "/classify", "--model",
                                         "answer=" + *models_ + "/answer", "--model", "rerank=" + *models_ + "/rerank",
                                         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                                         // The oracle is fp32 (serve's default, auto, may pick bf16).
                                         "--dtype", "fp32"},
                                        *log_, &error);
    ASSERT_TRUE(started) << error;
    auto channel = grpc::CreateChannel(server_->target(), grpc::InsecureChannelCredentials());
    stub_ = v1::Inference::NewStub(channel).release();
  }

  static void TearDownTestSuite() {
    delete stub_;
    stub_ = nullptr;
    delete server_;  // kills the child
    server_ = nullptr;
    if (models_ != nullptr && !models_->empty()) std::system(("rm -rf " + Shell(*models_)).c_str());
    delete log_;
    log_ = nullptr;
    delete models_;
    models_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(stub_, nullptr) << "server did not start";
  }

  static std::unique_ptr<grpc::ClientContext> Context(int seconds = 30) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
    return ctx;
  }

  static std::string Dir(const std::string& task) { return *models_ + "/" + task; }

  static std::string* models_;
  static std::string* log_;  // the server's stderr
  static ServerProcess* server_;
  static v1::Inference::Stub* stub_;
};

std::string* GrpcE2eTest::models_ = nullptr;
std::string* GrpcE2eTest::log_ = nullptr;
ServerProcess* GrpcE2eTest::server_ = nullptr;
v1::Inference::Stub* GrpcE2eTest::stub_ = nullptr;

TEST_F(GrpcE2eTest, ClassifyMatchesInProcessModel) {
  const std::vector<std::string> texts = {
      "I was charged twice for my order, please refund me.", "How do I reset my password?",
      "Where is my package?", "Caf\xc3\xa9 na\xc3\xafve \xe6\x9d\xb1\xe4\xba\xac", "a"};
  v1::ClassifyRequest request;
  request.set_model("classify");
  for (const auto& t : texts) request.add_texts(t);
  v1::ClassifyResponse response;
  auto ctx = Context();
  const grpc::Status status = stub_->Classify(ctx.get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), static_cast<int>(texts.size()));

  auto tokenizer = Tokenizer::FromDirectory(Dir("classify"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto model = DebertaModel::Load(Dir("classify"), {"fp32", "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  EncodeOptions options;
  options.max_length = 256;
  options.truncation = Truncation::kLongestFirst;
  std::vector<std::vector<int64_t>> rows;
  for (const auto& t : texts) {
    auto enc = (*tokenizer)->Encode(t, options);
    ASSERT_TRUE(enc.ok()) << enc.status();
    rows.push_back(Widen(enc->ids));
  }
  auto out = (*model)->Run(TokenBatch::Pad(rows, {}, (*model)->config().pad_token_id));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->num_labels, 5);
  for (size_t i = 0; i < texts.size(); ++i) {
    SCOPED_TRACE(texts[i]);
    const std::vector<double> p = Softmax(out->logits.data() + i * 5, 5);
    std::vector<int> order(5);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return static_cast<float>(p[a]) > static_cast<float>(p[b]);
    });
    const v1::Classification& got = response.results(static_cast<int>(i));
    ASSERT_EQ(got.labels_size(), 5);
    std::set<std::string> seen;
    for (int k = 0; k < 5; ++k) {
      const auto at = std::find(kLabels.begin(), kLabels.end(), got.labels(k).label());
      ASSERT_NE(at, kLabels.end()) << got.labels(k).label();
      EXPECT_TRUE(seen.insert(*at).second) << "label repeated: " << *at;
      const int label = static_cast<int>(at - kLabels.begin());
      ExpectSameRank(p, label, order[k], k);
      EXPECT_NEAR(got.labels(k).score(), p[label], kTolerance);
    }
  }
}

TEST_F(GrpcE2eTest, RerankMatchesInProcessModel) {
  const std::string query = "where can I buy fresh bread";
  const std::vector<std::string> documents = {
      "The baker next door sells bread, rolls, and small cakes with honey on top.",
      "Engineers measure things carefully before they build anything.", "Gulls circle the boats."};
  v1::RerankRequest request;
  request.set_model("rerank");
  request.set_query(query);
  for (const auto& d : documents) request.add_documents(d);
  v1::RerankResponse response;
  auto ctx = Context();
  const grpc::Status status = stub_->Rerank(ctx.get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();

  auto tokenizer = Tokenizer::FromDirectory(Dir("rerank"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto model = DebertaModel::Load(Dir("rerank"), {"fp32", "cpu"});
  ASSERT_TRUE(model.ok()) << model.status();
  EncodeOptions options;
  options.max_length = 128;
  options.truncation = Truncation::kNone;
  std::vector<std::vector<int64_t>> rows;
  for (const auto& d : documents) {
    auto enc = (*tokenizer)->EncodePair(query, d, options);
    ASSERT_TRUE(enc.ok()) << enc.status();
    rows.push_back(Widen(enc->ids));
  }
  auto out = (*model)->Run(TokenBatch::Pad(rows, {}, (*model)->config().pad_token_id));
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> scores;
  for (size_t i = 0; i < documents.size(); ++i) scores.push_back(Sigmoid(out->logits[i]));
  std::vector<int> order(documents.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return static_cast<float>(scores[a]) > static_cast<float>(scores[b]);
  });
  ASSERT_EQ(response.results_size(), static_cast<int>(documents.size()));
  std::set<uint32_t> seen;
  for (int k = 0; k < response.results_size(); ++k) {
    const uint32_t index = response.results(k).index();
    ASSERT_LT(index, documents.size());
    EXPECT_TRUE(seen.insert(index).second) << "document repeated: " << index;
    ExpectSameRank(scores, static_cast<int>(index), order[k], k);
    EXPECT_NEAR(response.results(k).score(), scores[index], kTolerance);
  }
}

TEST_F(GrpcE2eTest, AnswerSpansAreSlicesOfTheirContext) {
  v1::AnswerRequest request;
  request.set_model("answer");
  request.set_question("When does the miller open the doors?");
  request.add_contexts("A river runs past the old mill, and the miller opens the doors every morning at six.");
  request.add_contexts("Caf\xc3\xa9s open at nine; the library opens at ten \xe2\x80\x94 except on Sundays.");
  request.set_top_k(5);
  v1::AnswerResponse response;
  auto ctx = Context();
  const grpc::Status status = stub_->Answer(ctx.get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GT(response.answers_size(), 0);
  EXPECT_EQ(response.model(), "answer");
  EXPECT_GE(response.no_answer_score(), 0.0f);
  EXPECT_LE(response.no_answer_score(), 1.0f);
  double total = response.no_answer_score();
  for (const auto& a : response.answers()) {
    ASSERT_LT(a.context_index(), 2u);
    EXPECT_LT(a.start_char(), a.end_char());
    EXPECT_EQ(a.text(), CodepointSlice(request.contexts(static_cast<int>(a.context_index())), a.start_char(),
                                       a.end_char()));
    EXPECT_GT(a.score(), 0.0f);
    total += a.score();
  }
  EXPECT_LE(total, 1.0 + 1e-5);
  for (int k = 1; k < response.answers_size(); ++k) {
    EXPECT_GE(response.answers(k - 1).score(), response.answers(k).score());
  }
  EXPECT_EQ(response.usage().items(), 2u);
}

TEST_F(GrpcE2eTest, ListModels) {
  v1::ListModelsResponse response;
  auto ctx = Context();
  const grpc::Status status = stub_->ListModels(ctx.get(), v1::ListModelsRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::map<std::string, v1::ModelInfo> by_name;
  for (const auto& m : response.models()) by_name[m.name()] = m;
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name["classify"].task(), "classify");
  EXPECT_EQ(by_name["answer"].task(), "answer");
  EXPECT_EQ(by_name["rerank"].task(), "rerank");
  EXPECT_EQ(std::vector<std::string>(by_name["classify"].labels().begin(), by_name["classify"].labels().end()),
            kLabels);
  EXPECT_EQ(by_name["answer"].max_length(), 128u);
}

TEST_F(GrpcE2eTest, RequestIdTrailer) {
  v1::ClassifyRequest request;
  request.set_model("classify");
  request.add_texts("hello");
  {
    v1::ClassifyResponse response;
    auto ctx = Context();
    ASSERT_TRUE(stub_->Classify(ctx.get(), request, &response).ok());
    const auto& trailers = ctx->GetServerTrailingMetadata();
    auto it = trailers.find("x-request-id");
    ASSERT_NE(it, trailers.end()) << "no x-request-id trailer";
    EXPECT_FALSE(it->second.empty());
  }
  {
    v1::ClassifyResponse response;
    auto ctx = Context();
    ctx->AddMetadata("x-request-id", "e2e-cpp-42");
    ASSERT_TRUE(stub_->Classify(ctx.get(), request, &response).ok());
    auto it = ctx->GetServerTrailingMetadata().find("x-request-id");
    ASSERT_NE(it, ctx->GetServerTrailingMetadata().end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), "e2e-cpp-42");
  }
  {
    // Errors carry it too.
    v1::ClassifyRequest bad = request;
    bad.set_model("nope");
    v1::ClassifyResponse response;
    auto ctx = Context();
    ctx->AddMetadata("x-request-id", "e2e-cpp-err");
    const grpc::Status status = stub_->Classify(ctx.get(), bad, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    auto it = ctx->GetServerTrailingMetadata().find("x-request-id");
    ASSERT_NE(it, ctx->GetServerTrailingMetadata().end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), "e2e-cpp-err");
  }
}

}  // namespace
}  // namespace dserve
