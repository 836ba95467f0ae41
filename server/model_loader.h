// Loading one served model version: checkpoint and tokenizer (checked
// against each other), warm-up forwards, version, metrics and its worker
// pool. The registry (server/model_registry.h) decides when to load and
// which version serves; this decides how.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/worker_pool.h"

namespace dserve {

// One version of a served model: immutable once loaded, shared by the calls
// that use it (a call keeps the snapshot it started with).
struct ServedModel {
  std::string name;
  std::string dir;
  std::shared_ptr<const DebertaModel> model;
  // --dtype as given for this model ("auto", "fp32", ...); model->dtype() is
  // what it resolved to and serves.
  std::string requested_dtype;
  std::shared_ptr<const Tokenizer> tokenizer;
  Task task = Task::kNone;
  std::vector<std::string> labels;
  // Content hash of config.json, the weights and the tokenizer (16 hex digits).
  std::string version;
  int64_t max_length = 0;  // tokens, specials included
  // Batching, queue and priority settings (the globals with this model's
  // --config overrides).
  ModelServeSettings settings;
  std::shared_ptr<ModelMetrics> metrics;
  std::unique_ptr<WorkerPool> workers;
};

// Loads `spec` as configured by `options`: the checkpoint, its tokenizer
// (checked against the vocabulary), a servable task, warm-up forwards (1x16
// and min(batch, 8) x min(max_length, 128) tokens, before the version is
// returned, so before health says SERVING or a reload switches), the content
// version, then its worker pool (started). `reuse_metrics`: a reload keeps
// the model's metrics (else new ones are made); a reload also warms up with
// one worker's threads only. `start_after`: WorkerPoolOptions::start_after.
// `release` frees the returned version when its last holder drops it.
// dtype (spec.settings.dtype): at start-up (`previous` null) `auto` loads
// fp32 and, where bf16 may pay (Bf16Offered), bf16 too, times both
// (ProbeDtypes) and keeps the one ChooseAutoDtype picks, logging the figures;
// an explicit `bf16` on the CPU loads fp32 beside it for the same timing and
// logs a warning when bf16 is slower or changes an argmax. On a reload (`previous`,
// the version being replaced) `auto` keeps previous's dtype without timing:
// timings taken beside a serving version would measure its load, and the
// machine has not changed (restart to choose again).
// Errors name the model, the file and the problem.
absl::StatusOr<std::shared_ptr<const ServedModel>> LoadServedModel(
    const ModelSpec& spec, const ServeOptions& options, Metrics* metrics, std::shared_ptr<ModelMetrics> reuse_metrics,
    std::shared_future<void> start_after, std::function<void(const ServedModel*)> release,
    const ServedModel* previous = nullptr);

}  // namespace dserve
