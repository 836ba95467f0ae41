// Prometheus metrics of the server (DESIGN §3): families created once at
// start-up; per-model children resolved once per model so the hot path only
// touches atomics. Implements SchedulerObserver for the batching families.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batching/observer.h"
#include "server/protocol.h"

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

// Cumulative counters of one model across its versions and every front door
// (Triton's ModelStatistics, served by the OIP door): requests by outcome
// with their durations (arrival to reply), the items' queue waits, the
// forward passes and the items they computed. Never reset.
struct ModelStatsSnapshot {
  uint64_t success_count = 0, success_ns = 0;
  uint64_t fail_count = 0, fail_ns = 0;
  uint64_t queue_count = 0, queue_ns = 0;        // one per item that reached a batch
  uint64_t execution_count = 0, execution_ns = 0;  // forward passes (batches)
  uint64_t inference_count = 0;                  // items in those batches
  uint64_t last_inference_ms = 0;                // ms since the epoch of the last success; 0 = none
};

// The children of one model, resolved once. Hands out the observer the
// model's scheduler reports to.
class ModelMetrics : public SchedulerObserver, public std::enable_shared_from_this<ModelMetrics> {
 public:
  ModelMetrics(Metrics* metrics, const std::string& model, const std::string& task, const std::string& device);

  // One finished call: `code` is the gRPC status name ("OK",
  // "INVALID_ARGUMENT", ...), `protocol` the front door it came through;
  // `duration` from its arrival (parse and tokenization included) to its reply.
  void OnRequest(const std::string& code, Protocol protocol, absl::Duration duration, int64_t tokens);
  // The parse-free part of pre-processing: tokenizing (and windowing) one
  // request's texts (dserve_tokenization_duration_seconds{model}).
  void OnTokenization(absl::Duration duration);
  void OnInference(absl::Duration duration);
  void OnNoAnswer();
  // The counters above (lock-free reads; fields may be a few updates apart).
  ModelStatsSnapshot Stats() const;

  // SchedulerObserver
  void OnBatch(const BatchStats& stats) override;
  void OnRejected(RejectReason reason, int64_t count) override;
  // The depth of the model's only queue. Pools use ForPool() instead: while
  // a hot reload keeps the old version's pool alive beside the new one,
  // dserve_queue_items{model} must be the sum of both, so an old pool
  // draining to 0 cannot reset it (issue 16, defect 7).
  void OnQueueDepth(int64_t depth) override;
  // An observer for one pool's scheduler: batches and rejections go to this
  // model's series; its queue depth is added to dserve_queue_items{model}
  // (and removed from it when the observer is destroyed with its pool).
  std::shared_ptr<SchedulerObserver> ForPool();

 private:
  Metrics* metrics_;
  std::string model_, task_;
  prometheus::Histogram* request_duration_[kNumProtocols];  // by Protocol
  prometheus::Histogram* tokenization_duration_;
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
  // Stats(): updated by OnRequest, OnBatch and OnInference.
  std::atomic<uint64_t> success_count_{0}, success_ns_{0}, fail_count_{0}, fail_ns_{0};
  std::atomic<uint64_t> queue_count_{0}, queue_ns_{0}, execution_count_{0}, execution_ns_{0};
  std::atomic<uint64_t> inference_count_{0}, last_inference_ms_{0};
};

class Metrics {
 public:
  // Creates the registry and its families (once, at start-up).
  static std::unique_ptr<Metrics> Create();
  ~Metrics();
  // Starts serving GET (and HEAD) /metrics on `listen` (HOST:PORT, port 0
  // picks one) on its own plaintext HttpServer (8 threads: concurrent
  // scrapes, keep-alive; an idle keep-alive connection holds a thread until
  // it has been idle 5 s, so a 9th idle client delays scrapes that long). Returns the bound port, or an error naming the
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
  void OnUnroutedRequest(const std::string& method, const std::string& code, Protocol protocol);
  // A call that read `model` without queueing work on it (HTTP /tokenize):
  // dserve_requests_total{model, task=method, code, protocol}.
  void OnModelRequest(const std::string& model, const std::string& method, const std::string& code,
                      Protocol protocol);
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
  prometheus::Family<prometheus::Histogram>* tokenization_duration_;
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
