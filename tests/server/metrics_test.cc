// Metrics (issue 16 "rooms": unit tests of the metrics, which had none):
// the queue gauge over a model's live pools, the protocol label, and the
// request and tokenization histograms, read back from the text exposition.
#include "server/metrics.h"
#include "tests/server/metric_value.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace dserve {
namespace {

double Value(const Metrics& metrics, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  return MetricValue(metrics.Scrape(), name, labels);
}


// Issue 16, defect 7: during a hot reload the old version's pool drains to
// 0 while the new one has work queued; the model's gauge is their sum, so
// the old pool's 0 no longer resets it (before: each pool Set() the gauge).
TEST(MetricsTest, QueueGaugeIsTheSumOverTheModelsLivePools) {
  auto metrics = Metrics::Create();
  std::shared_ptr<ModelMetrics> model = metrics->ForModel("intents", "classify", "cpu", "fp32", "v1");
  auto old_pool = model->ForPool();
  auto new_pool = model->ForPool();
  old_pool->OnQueueDepth(4);
  new_pool->OnQueueDepth(3);
  EXPECT_EQ(Value(*metrics, "dserve_queue_items", {{"model", "intents"}}), 7);
  old_pool->OnQueueDepth(0);  // the old version drained
  EXPECT_EQ(Value(*metrics, "dserve_queue_items", {{"model", "intents"}}), 3);
  new_pool->OnQueueDepth(5);
  old_pool.reset();  // retired: whatever it last reported leaves the sum
  EXPECT_EQ(Value(*metrics, "dserve_queue_items", {{"model", "intents"}}), 5);
  new_pool->OnQueueDepth(2);
  new_pool.reset();
  EXPECT_EQ(Value(*metrics, "dserve_queue_items", {{"model", "intents"}}), 0);
}

TEST(MetricsTest, RequestsCarryTheProtocolAndDurationsIncludeTokenization) {
  auto metrics = Metrics::Create();
  std::shared_ptr<ModelMetrics> model = metrics->ForModel("qa", "answer", "cpu", "fp32", "v1");
  model->OnTokenization(absl::Milliseconds(3));
  model->OnRequest("OK", Protocol::kHttp, absl::Milliseconds(20), 42);
  model->OnRequest("OK", Protocol::kGrpc, absl::Milliseconds(10), 8);
  model->OnRequest("RESOURCE_EXHAUSTED", Protocol::kGrpc, absl::Milliseconds(1), 0);
  metrics->OnUnroutedRequest("classify", "NOT_FOUND", Protocol::kHttp);
  EXPECT_EQ(Value(*metrics, "dserve_requests_total", {{"model", "qa"}, {"code", "OK"}, {"protocol", "http"}}), 1);
  EXPECT_EQ(Value(*metrics, "dserve_requests_total", {{"model", "qa"}, {"protocol", "grpc"}}), 2);
  EXPECT_EQ(Value(*metrics, "dserve_requests_total", {{"model", ""}, {"code", "NOT_FOUND"}, {"protocol", "http"}}),
            1);
  EXPECT_EQ(Value(*metrics, "dserve_request_duration_seconds_count", {{"model", "qa"}, {"protocol", "grpc"}}), 2);
  EXPECT_DOUBLE_EQ(Value(*metrics, "dserve_request_duration_seconds_sum", {{"model", "qa"}, {"protocol", "http"}}),
                   0.02);
  EXPECT_EQ(Value(*metrics, "dserve_tokenization_duration_seconds_count", {{"model", "qa"}}), 1);
  EXPECT_EQ(Value(*metrics, "dserve_tokens_total", {{"model", "qa"}}), 50);  // only successful calls count
}

}  // namespace
}  // namespace dserve
