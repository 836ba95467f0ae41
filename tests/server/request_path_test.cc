// RequestPath, the one request path under the gRPC and HTTP front doors
// (issue 16 "rooms"; DESIGN §8), driven directly with a real registry over
// a tiny golden checkpoint: refusals and their codes and metrics, the
// completion thread, per-model settings (queue time limit, priorities,
// queue size), model versions. No sleeps: waits are on notifications,
// with a generous limit so a hang fails instead of blocking.
#include "server/request_path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "server/metrics.h"
#include "tests/server/metric_value.h"
#include "server/model_registry.h"

namespace dserve {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

constexpr absl::Duration kPatience = absl::Seconds(60);

// A classify checkpoint: the golden cls_factorized weights and config with
// the golden tokenizer beside them.
std::string MakeCheckpoint() {
  const std::string shared = DSERVE_SHARED_DIR;
  const fs::path dir = fs::path(::testing::TempDir()) / absl::StrCat("request_path_model_", getpid());
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(fs::path(shared) / "goldens/model/cls_factorized" / f, dir / f, fs::copy_options::overwrite_existing);
  }
  fs::copy_file(fs::path(shared) / "goldens/tokenizer/spm.model", dir / "spm.model",
                fs::copy_options::overwrite_existing);
  return dir.string();
}


std::string ThreadName() {
  char name[32] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

// One call's outcome.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  std::unique_ptr<v1::ClassifyResponse> response;
  std::string thread;
  int order = -1;
};

class RequestPathTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("DSERVE_TEST_HOLD_WORKERS_FILE");  // even when a test failed before releasing
    if (!hold_.empty()) std::remove(hold_.c_str());
    path_.reset();
    if (registry_ != nullptr) registry_->Shutdown(/*drain=*/false, absl::ZeroDuration());
  }

  // Serves the checkpoint as "intents" with `options` (models filled in).
  void Start(ServeOptions options, std::optional<TokenAuth> auth = std::nullopt) {
    options.models = {"intents=" + MakeCheckpoint()};
    if (options.workers == 0) options.workers = 1;
    if (options.threads_per_worker == 0) options.threads_per_worker = 1;
    // Not serve's default, auto (issue 27): no dtype probe at every start.
    if (options.dtype == "auto") options.dtype = "fp32";
    ASSERT_TRUE(ValidateServeOptions(options).ok()) << ValidateServeOptions(options);
    metrics_ = Metrics::Create();
    auto registry = ModelRegistry::Load(options, metrics_.get());
    ASSERT_TRUE(registry.ok()) << registry.status();
    registry_ = *std::move(registry);
    path_ = std::make_unique<RequestPath>(registry_.get(), metrics_.get(), options, std::move(auth));
  }

  // While the returned file exists, a worker that took a batch holds it
  // (WorkerPoolOptions::test_hold_file); call before Start.
  void HoldWorkers() {
    hold_ = absl::StrCat(::testing::TempDir(), "/request_path_hold_", getpid());
    std::ofstream(hold_).close();
    setenv("DSERVE_TEST_HOLD_WORKERS_FILE", hold_.c_str(), 1);
  }
  void ReleaseWorkers() {
    std::remove(hold_.c_str());
    unsetenv("DSERVE_TEST_HOLD_WORKERS_FILE");
  }

  CallInfo Info() const {
    CallInfo info;
    info.protocol = Protocol::kHttp;
    info.request_id = "test";
    return info;
  }

  std::unique_ptr<v1::ClassifyRequest> Request(std::vector<std::string> texts, const std::string& model = "intents") {
    auto r = std::make_unique<v1::ClassifyRequest>();
    r->set_model(model);
    for (auto& t : texts) r->add_texts(t);
    return r;
  }

  // Admit + Classify; the outcome is filled in by the completion.
  std::shared_ptr<CallHandle> Classify(Outcome* out, std::unique_ptr<v1::ClassifyRequest> request,
                                       CallInfo info) {
    PreprocessGate::Ticket ticket;
    absl::Status admitted = path_->Admit(info, "classify", &ticket);
    if (!admitted.ok()) {
      out->status = admitted;
      out->done.Notify();
      return nullptr;
    }
    return path_->Classify(info, std::move(request), std::move(ticket),
                           [this, out](const absl::Status& s, std::unique_ptr<v1::ClassifyResponse> r) {
                             out->status = s;
                             out->response = std::move(r);
                             out->thread = ThreadName();
                             {
                               std::lock_guard<std::mutex> lock(order_mu_);
                               out->order = finished_++;
                             }
                             out->done.Notify();
                           });
  }

  double Metric(const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    return MetricValue(metrics_->Scrape(), name, labels);
  }

  // Waits until `name` reaches `value` (metrics are updated just after the
  // callbacks they count).
  bool WaitForMetric(const std::string& name, const std::map<std::string, std::string>& labels, double value) {
    const absl::Time give_up = absl::Now() + kPatience;
    while (Metric(name, labels) < value) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }
  // Waits until the held worker has formed `batches` batches.
  bool WaitForBatches(int batches) { return WaitForMetric("dserve_batch_size_count", {}, batches); }

  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<ModelRegistry> registry_;
  std::unique_ptr<RequestPath> path_;
  std::string hold_;
  std::mutex order_mu_;
  int finished_ = 0;
};

TEST_F(RequestPathTest, ClassifyIsDecodedOnACompletionThreadWithTheModelVersion) {
  Start(ServeOptions());
  Outcome out;
  Classify(&out, Request({"I was charged twice", "where is my parcel"}), Info());
  ASSERT_TRUE(out.done.WaitForNotificationWithTimeout(kPatience));
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.response->results_size(), 2);
  EXPECT_EQ(out.response->results(0).labels_size(), 5);
  EXPECT_EQ(out.response->model(), "intents");
  EXPECT_EQ(out.response->model_version(), registry_->Find("intents")->version);
  // Issue 16, defect 5: not on an inference worker ("dsw-...").
  EXPECT_EQ(out.thread, "dserve-complete") << "decoded on " << out.thread;
  EXPECT_EQ(Metric("dserve_requests_total", {{"model", "intents"}, {"code", "OK"}, {"protocol", "http"}}), 1);
  EXPECT_EQ(Metric("dserve_tokenization_duration_seconds_count", {{"model", "intents"}}), 1);
  // Request duration includes tokenization (defect 7).
  EXPECT_GE(Metric("dserve_request_duration_seconds_sum", {{"model", "intents"}, {"protocol", "http"}}),
            Metric("dserve_tokenization_duration_seconds_sum", {{"model", "intents"}}));
}

TEST_F(RequestPathTest, RefusalsHaveTheirCodesAndAreCountedByProtocol) {
  ServeOptions options;
  options.max_queue_items = 2;
  Start(options, TokenAuth("s3cret"));
  CallInfo info = Info();
  info.authorization = "Bearer s3cret";

  CallInfo wrong = info;
  wrong.authorization = "Bearer nope";
  Outcome unauthenticated;
  Classify(&unauthenticated, Request({"x"}), wrong);
  EXPECT_EQ(unauthenticated.status.code(), absl::StatusCode::kUnauthenticated);

  CallInfo late = info;
  late.deadline = absl::Now() - absl::Seconds(1);
  Outcome expired;
  Classify(&expired, Request({"x"}), late);
  EXPECT_EQ(expired.status.code(), absl::StatusCode::kDeadlineExceeded);

  Outcome unknown;
  Classify(&unknown, Request({"x"}, "nope"), info);
  ASSERT_TRUE(unknown.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(unknown.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(unknown.status.message()), HasSubstr("model 'nope' is not served (models: intents)"));

  Outcome too_big;  // 3 texts can never fit a queue of 2
  Classify(&too_big, Request({"a", "b", "c"}), info);
  ASSERT_TRUE(too_big.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(too_big.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_big.status.message()), HasSubstr("max_queue_items=2"));

  path_->StartDraining();
  Outcome draining;
  Classify(&draining, Request({"x"}), info);
  EXPECT_EQ(draining.status.code(), absl::StatusCode::kUnavailable);

  EXPECT_EQ(Metric("dserve_requests_total", {{"model", ""}, {"code", "UNAUTHENTICATED"}, {"protocol", "http"}}), 1);
  EXPECT_EQ(Metric("dserve_requests_total", {{"model", ""}, {"code", "DEADLINE_EXCEEDED"}, {"protocol", "http"}}), 1);
  EXPECT_EQ(Metric("dserve_requests_total", {{"model", ""}, {"code", "NOT_FOUND"}, {"protocol", "http"}}), 1);
  EXPECT_EQ(Metric("dserve_requests_total", {{"model", ""}, {"code", "UNAVAILABLE"}, {"protocol", "http"}}), 1);
  // Refused by a known model's limits: counted under the model.
  EXPECT_EQ(Metric("dserve_requests_total",
                   {{"model", "intents"}, {"code", "INVALID_ARGUMENT"}, {"protocol", "http"}}),
            1);
  EXPECT_EQ(Metric("dserve_requests_total", {{"protocol", "grpc"}}), 0);
}

// HTTP /tokenize's decisions are the path's (issue 17): the model, the
// request limits, the pre-processing slot and the metrics.
TEST_F(RequestPathTest, TokenizeDecidesLimitsModelAndMetrics) {
  ServeOptions options;
  options.max_texts_per_request = 2;
  options.max_text_bytes = 16;
  options.max_concurrent_preprocess = 1;
  Start(options);
  auto tokenize = [&](const std::string& model, std::vector<std::string> texts) {
    PreprocessGate::Ticket ticket;
    absl::Status admitted = path_->Admit(Info(), "tokenize", &ticket);
    if (!admitted.ok()) return absl::StatusOr<std::vector<Encoding>>(admitted);
    return path_->Tokenize(Info(), model, texts, std::move(ticket));
  };
  auto ok = tokenize("intents", {"where is my parcel", "a"});
  EXPECT_EQ(ok.status().code(), absl::StatusCode::kInvalidArgument);  // 18 bytes > 16
  EXPECT_THAT(std::string(ok.status().message()), HasSubstr("inputs[0]: 18 bytes, more than --max-text-bytes (16)"));
  ok = tokenize("intents", {"my parcel", "a"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].sequence_ids.front(), -1);  // [CLS] .. [SEP], whole, with pieces
  EXPECT_EQ((*ok)[1].pieces.size(), (*ok)[1].size());
  auto many = tokenize("intents", {"a", "b", "c"});
  EXPECT_EQ(many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(many.status().message()), HasSubstr("--max-texts-per-request (2)"));
  EXPECT_EQ(tokenize("nope", {"a"}).status().code(), absl::StatusCode::kNotFound);
  // Every outcome released its slot (the gate holds 1): a further call is admitted.
  EXPECT_TRUE(tokenize("intents", {"a"}).ok());
  EXPECT_EQ(Metric("dserve_requests_total", {{"model", "intents"}, {"task", "tokenize"}, {"code", "OK"}}), 2);
  EXPECT_EQ(Metric("dserve_requests_total",
                   {{"model", "intents"}, {"task", "tokenize"}, {"code", "INVALID_ARGUMENT"}, {"protocol", "http"}}),
            2);
  EXPECT_EQ(Metric("dserve_requests_total", {{"model", ""}, {"task", "tokenize"}, {"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(Metric("dserve_tokenization_duration_seconds_count", {{"model", "intents"}}), 2);
  path_->StartDraining();
  EXPECT_EQ(tokenize("intents", {"a"}).status().code(), absl::StatusCode::kUnavailable);
}

// --max-queue-time-ms: an item that waited that long gets DEADLINE_EXCEEDED
// although the client set no deadline.
TEST_F(RequestPathTest, ServerSideQueueTimeoutExpiresItemsWithoutAClientDeadline) {
  HoldWorkers();
  ServeOptions options;
  // Long enough that the idle worker takes `first` in time even on a
  // loaded machine; `second` then waits it out behind the held worker.
  options.max_queue_time_ms = 1000;
  Start(options);
  Outcome first, second;
  Classify(&first, Request({"first"}), Info());
  ASSERT_TRUE(WaitForBatches(1));  // the worker holds `first`
  Classify(&second, Request({"second"}), Info());
  // `second` waits in the queue past 1 s; it is expired then, although
  // no worker is free to look at the queue.
  ASSERT_TRUE(second.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(second.status.code(), absl::StatusCode::kDeadlineExceeded) << second.status;
  EXPECT_FALSE(first.done.HasBeenNotified());  // ... while the worker still holds `first`
  EXPECT_TRUE(WaitForMetric("dserve_rejected_total", {{"model", "intents"}, {"reason", "deadline"}}, 1));
  ReleaseWorkers();
  // `first` was taken into a batch in time, but the hold kept it there past
  // its 1 s, so the check just before compute may drop it too.
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_TRUE(first.status.ok() || first.status.code() == absl::StatusCode::kDeadlineExceeded) << first.status;
}

// Priorities through the path: a request's priority (or the model's
// default) orders the queue; with one worker and batches of one, the
// higher-priority request queued later is computed first.
TEST_F(RequestPathTest, HigherPriorityRequestIsServedFirst) {
  HoldWorkers();
  ServeOptions options;
  options.max_batch_size = 1;
  options.default_priority = 0;
  options.priority_aging_ms = 60000;  // no ageing within the test
  Start(options);
  Outcome blocker, low, high;
  Classify(&blocker, Request({"blocker"}), Info());
  ASSERT_TRUE(WaitForBatches(1));
  Classify(&low, Request({"low"}), Info());  // default priority 0
  CallInfo urgent = Info();
  urgent.priority = 7;
  Classify(&high, Request({"high"}), urgent);
  ReleaseWorkers();
  for (Outcome* o : {&blocker, &low, &high}) {
    ASSERT_TRUE(o->done.WaitForNotificationWithTimeout(kPatience));
    EXPECT_TRUE(o->status.ok()) << o->status;
  }
  EXPECT_LT(high.order, low.order) << "the priority-7 request waited for the priority-0 one";
}

// Cancel() drops a call's queued items before compute: CANCELLED.
TEST_F(RequestPathTest, CancelDropsQueuedItems) {
  HoldWorkers();
  Start(ServeOptions());
  Outcome blocker, cancelled;
  Classify(&blocker, Request({"blocker"}), Info());
  ASSERT_TRUE(WaitForBatches(1));
  auto handle = Classify(&cancelled, Request({"a", "b", "c"}), Info());
  ASSERT_NE(handle, nullptr);
  handle->Cancel();
  ASSERT_TRUE(cancelled.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled) << cancelled.status;
  ReleaseWorkers();
  ASSERT_TRUE(blocker.done.WaitForNotificationWithTimeout(kPatience));
  EXPECT_EQ(Metric("dserve_inference_duration_seconds_count"), 1) << "cancelled items were computed";
}

}  // namespace
}  // namespace dserve
