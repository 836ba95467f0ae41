#include "server/metrics.h"

#include "server/net/http_server.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <iterator>
#include <sstream>

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "absl/time/clock.h"

#ifndef DSERVE_VERSION
#define DSERVE_VERSION "dev"
#endif

namespace dserve {
namespace {

using prometheus::Histogram;

// Latency buckets, seconds: 0.5 ms .. 30 s.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                0.25,   0.5,   1,      2.5,   5,    10,    30};
  return b;
}
const Histogram::BucketBoundaries& SizeBuckets() {
  static const Histogram::BucketBoundaries b = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  return b;
}
const Histogram::BucketBoundaries& TokenBuckets() {
  static const Histogram::BucketBoundaries b = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  return b;
}

// process_* metrics as the Prometheus client libraries name them, read from
// /proc on every scrape.
class ProcessCollector : public prometheus::Collectable {
 public:
  ProcessCollector() : start_time_(StartTime()) {}

  // Computed once (issue 16, defect 7): ReadStartTime() pairs time(2), in
  // whole seconds, with /proc/uptime, in hundredths, so each reading differs
  // by up to a second and a scrape-to-scrape change looks like a restart.
  static double StartTime() {
    static const double value = ReadStartTime();
    return value;
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    double cpu = 0, rss = 0, vsize = 0;
    ReadStat(&cpu, &rss, &vsize);
    out.push_back(Single("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                         prometheus::MetricType::Counter, cpu));
    out.push_back(Single("process_resident_memory_bytes", "Resident memory size in bytes.",
                         prometheus::MetricType::Gauge, rss));
    out.push_back(Single("process_virtual_memory_bytes", "Virtual memory size in bytes.",
                         prometheus::MetricType::Gauge, vsize));
    out.push_back(Single("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                         prometheus::MetricType::Gauge, start_time_));
    return out;
  }

 private:
  static prometheus::MetricFamily Single(const std::string& name, const std::string& help,
                                         prometheus::MetricType type, double value) {
    prometheus::MetricFamily family;
    family.name = name;
    family.help = help;
    family.type = type;
    prometheus::ClientMetric metric;
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(metric);
    return family;
  }

  // Fields of /proc/self/stat after the command name: utime (14), stime (15),
  // starttime (22), vsize (23), rss pages (24), 1-based as in proc(5).
  static std::vector<std::string> StatFields() {
    std::ifstream in("/proc/self/stat");
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = all.rfind(')');
    std::istringstream rest(paren == std::string::npos ? "" : all.substr(paren + 2));
    std::vector<std::string> fields = {"pid", "comm"};
    std::string f;
    while (rest >> f) fields.push_back(f);
    return fields;
  }

  static void ReadStat(double* cpu, double* rss, double* vsize) {
    const auto fields = StatFields();
    if (fields.size() < 24) return;
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    *cpu = (std::stod(fields[13]) + std::stod(fields[14])) / ticks;
    *vsize = std::stod(fields[22]);
    *rss = std::stod(fields[23]) * static_cast<double>(sysconf(_SC_PAGESIZE));
  }

  static double ReadStartTime() {
    const auto fields = StatFields();
    std::ifstream uptime_in("/proc/uptime");
    double uptime = 0;
    uptime_in >> uptime;
    if (fields.size() < 22) return 0;
    const double started_after_boot = std::stod(fields[21]) / static_cast<double>(sysconf(_SC_CLK_TCK));
    const double now = static_cast<double>(time(nullptr));
    return now - uptime + started_after_boot;
  }

  double start_time_;
};

}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  ProcessCollector::StartTime();  // read at start-up, the same in every scrape
  auto& r = *registry_;
  requests_ = &prometheus::BuildCounter()
                   .Name("dserve_requests_total")
                   .Help("Calls finished, by model, task, gRPC status code and protocol (grpc, http, tei-grpc...).")
                   .Register(r);
  request_duration_ = &prometheus::BuildHistogram()
                           .Name("dserve_request_duration_seconds")
                           .Help("Time from a call's arrival to its reply (parse and tokenization included).")
                           .Register(r);
  tokenization_duration_ = &prometheus::BuildHistogram()
                                .Name("dserve_tokenization_duration_seconds")
                                .Help("Time to tokenize (and window) one request's texts.")
                                .Register(r);
  queue_duration_ = &prometheus::BuildHistogram()
                         .Name("dserve_queue_duration_seconds")
                         .Help("Time an item waited in the batching queue.")
                         .Register(r);
  inference_duration_ = &prometheus::BuildHistogram()
                             .Name("dserve_inference_duration_seconds")
                             .Help("Time of one batch's forward pass on a worker.")
                             .Register(r);
  batch_size_ = &prometheus::BuildHistogram().Name("dserve_batch_size").Help("Items per formed batch.").Register(r);
  batch_tokens_ = &prometheus::BuildHistogram()
                       .Name("dserve_batch_tokens")
                       .Help("Padded tokens per batch (items x longest item).")
                       .Register(r);
  batch_real_tokens_ = &prometheus::BuildHistogram()
                            .Name("dserve_batch_real_tokens")
                            .Help("Real (unpadded) tokens per batch.")
                            .Register(r);
  batches_ = &prometheus::BuildCounter()
                  .Name("dserve_batches_total")
                  .Help("Batches formed, by what made each go: size, tokens, delay, idle_worker (max queue delay 0) "
                        "or flush (drain).")
                  .Register(r);
  queue_items_ = &prometheus::BuildGauge().Name("dserve_queue_items").Help("Items waiting in the queue.").Register(r);
  rejected_ = &prometheus::BuildCounter()
                   .Name("dserve_rejected_total")
                   .Help("Items rejected or dropped before compute, by reason.")
                   .Register(r);
  tokens_ = &prometheus::BuildCounter()
                 .Name("dserve_tokens_total")
                 .Help("Real tokens run through the encoder.")
                 .Register(r);
  no_answer_ = &prometheus::BuildCounter()
                    .Name("dserve_answer_no_answer_total")
                    .Help("Answer calls that returned no_answer.")
                    .Register(r);
  model_info_ = &prometheus::BuildGauge()
                     .Name("dserve_model_info")
                     .Help("Models served (value 1), with task, version, device and dtype.")
                     .Register(r);
  warmup_seconds_ = &prometheus::BuildGauge()
                         .Name("dserve_model_warmup_seconds")
                         .Help("Seconds the served version's warm-up forwards took, before it served.")
                         .Register(r);
  reloads_ = &prometheus::BuildCounter()
                  .Name("dserve_model_reloads_total")
                  .Help("Checkpoint reloads of a served model (--watch, SIGHUP), by result: ok or failed.")
                  .Register(r);
  preprocessing_ = &prometheus::BuildGauge()
                        .Name("dserve_preprocessing_requests")
                        .Help("Requests being parsed and tokenized now (at most --max-concurrent-preprocess).")
                        .Register(r)
                        .Add({});
  prometheus::BuildGauge()
      .Name("dserve_build_info")
      .Help("Build of this binary (value 1).")
      .Register(r)
      .Add({{"version", DSERVE_VERSION}})
      .Set(1);
}

Metrics::~Metrics() = default;

std::unique_ptr<Metrics> Metrics::Create() {
  std::unique_ptr<Metrics> metrics(new Metrics());
  return metrics;
}

absl::StatusOr<int> Metrics::Listen(const std::string& listen) {
  HttpServerOptions options;
  options.listen = listen;
  options.threads = 8;
  options.max_body_bytes = 64 << 10;
  auto server = HttpServer::Start(options);
  if (!server.ok()) return server.status();
  exposer_ = *std::move(server);
  ServeOn(exposer_.get());
  return exposer_->port();
}

void Metrics::ServeOn(HttpServer* server) {
  server->Handle("GET", "/metrics", [this](const HttpRequest&, HttpResponse* response) {
    response->content_type = "text/plain; version=0.0.4; charset=utf-8";
    response->body = Scrape();
  });
}

std::string Metrics::Scrape() const {
  auto families = registry_->Collect();
  auto process = ProcessCollector().Collect();
  families.insert(families.end(), process.begin(), process.end());
  return prometheus::TextSerializer().Serialize(families);
}

std::shared_ptr<ModelMetrics> Metrics::ForModel(const std::string& model, const std::string& task,
                                                const std::string& device, const std::string& dtype,
                                                const std::string& version) {
  SetModelInfo(model, task, device, dtype, version);
  // Both results at 0 from the start, so rate() and alerts see the series.
  reloads_->Add({{"model", model}, {"result", "ok"}});
  reloads_->Add({{"model", model}, {"result", "failed"}});
  return std::make_shared<ModelMetrics>(this, model, task, device);
}

void Metrics::SetModelInfo(const std::string& model, const std::string& task, const std::string& device,
                           const std::string& dtype, const std::string& version) {
  absl::MutexLock lock(&info_mu_);
  prometheus::Gauge*& current = info_by_model_[model];
  prometheus::Gauge* next =
      &model_info_->Add({{"model", model}, {"task", task}, {"version", version}, {"device", device}, {"dtype", dtype}});
  if (current != nullptr && current != next) model_info_->Remove(current);
  current = next;
  current->Set(1);
}

void Metrics::OnReload(const std::string& model, bool ok) {
  reloads_->Add({{"model", model}, {"result", ok ? "ok" : "failed"}}).Increment();
}

void Metrics::OnUnroutedRequest(const std::string& method, const std::string& code, Protocol protocol) {
  requests_->Add({{"model", ""}, {"task", method}, {"code", code}, {"protocol", ProtocolName(protocol)}}).Increment();
}

void Metrics::OnModelRequest(const std::string& model, const std::string& method, const std::string& code,
                             Protocol protocol) {
  requests_->Add({{"model", model}, {"task", method}, {"code", code}, {"protocol", ProtocolName(protocol)}})
      .Increment();
}

void Metrics::SetPreprocessing(int requests) { preprocessing_->Set(static_cast<double>(requests)); }

void Metrics::OnWarmUp(const std::string& model, double seconds) {
  warmup_seconds_->Add({{"model", model}}).Set(seconds);
}

ModelMetrics::ModelMetrics(Metrics* m, const std::string& model, const std::string& task,
                           const std::string& device)
    : metrics_(m),
      model_(model),
      task_(task),
      tokenization_duration_(&m->tokenization_duration_->Add({{"model", model}}, LatencyBuckets())),
      queue_duration_(&m->queue_duration_->Add({{"model", model}}, LatencyBuckets())),
      inference_duration_(&m->inference_duration_->Add({{"model", model}, {"device", device}}, LatencyBuckets())),
      batch_size_(&m->batch_size_->Add({{"model", model}}, SizeBuckets())),
      batch_tokens_(&m->batch_tokens_->Add({{"model", model}}, TokenBuckets())),
      batch_real_tokens_(&m->batch_real_tokens_->Add({{"model", model}}, TokenBuckets())),
      queue_items_(&m->queue_items_->Add({{"model", model}})),
      tokens_(&m->tokens_->Add({{"model", model}, {"task", task}})),
      no_answer_(task == "answer" ? &m->no_answer_->Add({{"model", model}}) : nullptr) {
  for (Protocol protocol : kAllProtocols) {
    request_duration_[static_cast<int>(protocol)] = &m->request_duration_->Add(
        {{"model", model}, {"task", task}, {"protocol", ProtocolName(protocol)}}, LatencyBuckets());
  }
  for (BatchTrigger trigger : {BatchTrigger::kSize, BatchTrigger::kTokens, BatchTrigger::kDelay,
                               BatchTrigger::kIdleWorker, BatchTrigger::kFlush}) {
    batches_by_trigger_[static_cast<int>(trigger)] =
        &m->batches_->Add({{"model", model}, {"trigger", BatchTriggerName(trigger)}});
  }
  // Every reason at 0 from the start, so rate() and alerts see the series.
  for (RejectReason reason : {RejectReason::kQueueFull, RejectReason::kDeadline, RejectReason::kCancelled,
                              RejectReason::kDraining, RejectReason::kInvalid}) {
    m->rejected_->Add({{"model", model}, {"reason", RejectReasonName(reason)}});
  }
}

void ModelMetrics::OnRequest(const std::string& code, Protocol protocol, absl::Duration duration, int64_t tokens) {
  // Label children are cached by the family; Add() with existing labels is a lookup.
  metrics_->requests_->Add({{"model", model_}, {"task", task_}, {"code", code}, {"protocol", ProtocolName(protocol)}})
      .Increment();
  request_duration_[static_cast<int>(protocol)]->Observe(absl::ToDoubleSeconds(duration));
  if (tokens > 0) tokens_->Increment(static_cast<double>(tokens));
  const auto ns = static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(duration)));
  if (code == "OK") {
    success_count_.fetch_add(1, std::memory_order_relaxed);
    success_ns_.fetch_add(ns, std::memory_order_relaxed);
    last_inference_ms_.store(static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())), std::memory_order_relaxed);
  } else {
    fail_count_.fetch_add(1, std::memory_order_relaxed);
    fail_ns_.fetch_add(ns, std::memory_order_relaxed);
  }
}

ModelStatsSnapshot ModelMetrics::Stats() const {
  ModelStatsSnapshot s;
  s.success_count = success_count_.load(std::memory_order_relaxed);
  s.success_ns = success_ns_.load(std::memory_order_relaxed);
  s.fail_count = fail_count_.load(std::memory_order_relaxed);
  s.fail_ns = fail_ns_.load(std::memory_order_relaxed);
  s.queue_count = queue_count_.load(std::memory_order_relaxed);
  s.queue_ns = queue_ns_.load(std::memory_order_relaxed);
  s.execution_count = execution_count_.load(std::memory_order_relaxed);
  s.execution_ns = execution_ns_.load(std::memory_order_relaxed);
  s.inference_count = inference_count_.load(std::memory_order_relaxed);
  s.last_inference_ms = last_inference_ms_.load(std::memory_order_relaxed);
  return s;
}

void ModelMetrics::OnTokenization(absl::Duration duration) {
  tokenization_duration_->Observe(absl::ToDoubleSeconds(duration));
}

void ModelMetrics::OnInference(absl::Duration duration) {
  inference_duration_->Observe(absl::ToDoubleSeconds(duration));
  execution_count_.fetch_add(1, std::memory_order_relaxed);
  execution_ns_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(duration))),
                          std::memory_order_relaxed);
}

void ModelMetrics::OnNoAnswer() {
  if (no_answer_ != nullptr) no_answer_->Increment();
}

void ModelMetrics::OnBatch(const BatchStats& stats) {
  batch_size_->Observe(static_cast<double>(stats.size));
  batch_tokens_->Observe(static_cast<double>(stats.padded_tokens));
  batch_real_tokens_->Observe(static_cast<double>(stats.real_tokens));
  const auto trigger = static_cast<size_t>(stats.trigger);
  if (trigger < std::size(batches_by_trigger_) && batches_by_trigger_[trigger] != nullptr) {
    batches_by_trigger_[trigger]->Increment();
  }
  for (const auto& wait : stats.queue_waits) {
    queue_duration_->Observe(absl::ToDoubleSeconds(wait));
    queue_ns_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(wait))),
                        std::memory_order_relaxed);
  }
  queue_count_.fetch_add(stats.queue_waits.size(), std::memory_order_relaxed);
  inference_count_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(0, stats.size)), std::memory_order_relaxed);
}

void ModelMetrics::OnRejected(RejectReason reason, int64_t count) {
  metrics_->rejected_->Add({{"model", model_}, {"reason", RejectReasonName(reason)}})
      .Increment(static_cast<double>(count));
}

void ModelMetrics::OnQueueDepth(int64_t depth) { queue_items_->Set(static_cast<double>(depth)); }

namespace {

// One pool's share of its model's series (ModelMetrics::ForPool).
class PoolObserver final : public SchedulerObserver {
 public:
  PoolObserver(std::shared_ptr<ModelMetrics> model, prometheus::Gauge* queue_items)
      : model_(std::move(model)), queue_items_(queue_items) {}
  ~PoolObserver() override { queue_items_->Decrement(static_cast<double>(depth_.load())); }
  void OnBatch(const BatchStats& stats) override { model_->OnBatch(stats); }
  void OnRejected(RejectReason reason, int64_t count) override { model_->OnRejected(reason, count); }
  void OnQueueDepth(int64_t depth) override {
    const int64_t before = depth_.exchange(depth);
    queue_items_->Increment(static_cast<double>(depth - before));
  }

 private:
  const std::shared_ptr<ModelMetrics> model_;
  prometheus::Gauge* const queue_items_;
  std::atomic<int64_t> depth_{0};
};

}  // namespace

std::shared_ptr<SchedulerObserver> ModelMetrics::ForPool() {
  return std::make_shared<PoolObserver>(shared_from_this(), queue_items_);
}

}  // namespace dserve
