// Prometheus metrics of the server (DESIGN §3): families created once at
// start-up; per-model children resolved once per model so the hot path only
// touches atomics. Implements SchedulerObserver for the batching families.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batching/observer.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace dserve {

class HttpServer;
class Metrics;

// The children of one model, resolved once. Hands out the observer the
// model's scheduler reports to.
class ModelMetrics : public SchedulerObserver {
 public:
  ModelMetrics(Metrics* metrics, const std::string& model, const std::string& task, const std::string& device);

  // One finished RPC: `code` is the gRPC status name ("OK", "INVALID_ARGUMENT", ...).
  void OnRequest(const std::string& code, absl::Duration duration, int64_t tokens);
  void OnInference(absl::Duration duration);
  void OnNoAnswer();

  // SchedulerObserver
  void OnBatch(const BatchStats& stats) override;
  void OnRejected(RejectReason reason, int64_t count) override;
  void OnQueueDepth(int64_t depth) override;

 private:
  Metrics* metrics_;
  std::string model_, task_;
  prometheus::Histogram* request_duration_;
  prometheus::Histogram* queue_duration_;
  prometheus::Histogram* inference_duration_;
  prometheus::Histogram* batch_size_;
  prometheus::Histogram* batch_tokens_;
  prometheus::Histogram* batch_real_tokens_;
  // dserve_batches_total{trigger}, indexed by BatchTrigger.
  prometheus::Counter* batches_by_trigger_[static_cast<int>(BatchTrigger::kFlush) + 1] = {};
  prometheus::Gauge* queue_items_;
  prometheus::Counter* tokens_;
  prometheus::Counter* no_answer_;  // answer models only
};

class Metrics {
 public:
  // Creates the registry and its families (once, at start-up).
  static std::unique_ptr<Metrics> Create();
  ~Metrics();
  // Starts serving GET (and HEAD) /metrics on `listen` (HOST:PORT, port 0
  // picks one) on its own plaintext HttpServer (4 threads: concurrent
  // scrapes, keep-alive). Returns the bound port, or an error naming the
  // address.
  absl::StatusOr<int> Listen(const std::string& listen);
  // Adds GET /metrics to `server` (when --metrics-listen equals
  // --http-listen, one server serves both). `server` must not outlive this.
  void ServeOn(HttpServer* server);

  // The children of `model`, and its dserve_model_info series.
  std::shared_ptr<ModelMetrics> ForModel(const std::string& model, const std::string& task,
                                         const std::string& device, const std::string& dtype,
                                         const std::string& version);
  // After a hot reload: dserve_model_info{model} shows the new version (the
  // old series is removed, so one series per model).
  void SetModelInfo(const std::string& model, const std::string& task, const std::string& device,
                    const std::string& dtype, const std::string& version);
  // A reload attempt of `model`: dserve_model_reloads_total{model,result},
  // result "ok" (the new version serves) or "failed" (the old one still does).
  void OnReload(const std::string& model, bool ok);
  // Requests rejected before reaching a model (unknown model, auth, draining).
  void OnUnroutedRequest(const std::string& method, const std::string& code);
  // dserve_preprocessing_requests: requests being parsed and tokenized now
  // (at most --max-concurrent-preprocess).
  void SetPreprocessing(int requests);
  // dserve_model_warmup_seconds{model}: how long the served version's
  // warm-up forwards took (set when it was loaded, before it served).
  void OnWarmUp(const std::string& model, double seconds);
  // Text exposition of everything (for tests and `dserve-client metrics`).
  std::string Scrape() const;

 private:
  friend class ModelMetrics;
  Metrics();
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<HttpServer> exposer_;
  prometheus::Family<prometheus::Gauge>* warmup_seconds_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* request_duration_;
  prometheus::Family<prometheus::Histogram>* queue_duration_;
  prometheus::Family<prometheus::Histogram>* inference_duration_;
  prometheus::Family<prometheus::Histogram>* batch_size_;
  prometheus::Family<prometheus::Histogram>* batch_tokens_;
  prometheus::Family<prometheus::Histogram>* batch_real_tokens_;
  prometheus::Family<prometheus::Counter>* batches_;
  prometheus::Family<prometheus::Gauge>* queue_items_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Counter>* no_answer_;
  prometheus::Family<prometheus::Gauge>* model_info_;
  prometheus::Family<prometheus::Counter>* reloads_;
  prometheus::Gauge* preprocessing_;
  absl::Mutex info_mu_;
  std::map<std::string, prometheus::Gauge*> info_by_model_ ABSL_GUARDED_BY(info_mu_);
};

}  // namespace dserve
