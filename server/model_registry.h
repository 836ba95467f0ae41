// The models a server serves, by name, and their versions and hot reload
// (loading one version: server/model_loader.h; version hashes:
// server/checkpoint_version.h; the pools: server/worker_pool.h).
//
// Each name holds an immutable ServedModel handed out as a shared_ptr
// snapshot: a call keeps the snapshot it started with for its whole life,
// so a reload never changes a model under a running call. A reload loads
// the new checkpoint beside the old one (full validation, tokenizer check,
// workers started), then swaps the name's snapshot atomically; the old
// model finishes the work it accepted and is freed when its last call ends.
//
// Thread safety: Find and models() may be called from any thread at any
// time; reloads run on the registry's own watcher thread.
#pragma once

#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/checkpoint_version.h"
#include "server/metrics.h"
#include "server/model_loader.h"
#include "server/options.h"

namespace dserve {

class ModelReaper;

class ModelRegistry {
 public:
  // Loads every model of `options` (checkpoint + tokenizer), checks the
  // tokenizer against the model's vocabulary, starts its workers, and the
  // watcher thread (polling every options.watch_s seconds when > 0). The
  // error names the model, the file and the problem.
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Load(const ServeOptions& options, Metrics* metrics);
  ~ModelRegistry();  // stops the watcher; models are freed once no call holds them

  // The model called `name` as served now; nullptr when unknown. The
  // snapshot (and its workers) stays valid as long as it is held.
  std::shared_ptr<const ServedModel> Find(const std::string& name) const;
  // Every model as served now, in --model order.
  std::vector<std::shared_ptr<const ServedModel>> models() const;

  // Checks every model directory now (SIGHUP), on the watcher thread: a
  // changed checkpoint is loaded at once, without waiting for it to be
  // stable, and a version that failed before is retried. Never blocks.
  void CheckNow();

  // Stops reloading, then drains every pool (in-flight and queued items
  // finish within `timeout`).
  void Shutdown(bool drain, absl::Duration timeout);

 private:
  struct Slot;
  ModelRegistry(const ServeOptions& options, Metrics* metrics);
  // `reuse_metrics`, `start_after` (WorkerPoolOptions::start_after) and
  // `previous` (the version replaced: --dtype auto keeps its dtype) for a reload.
  absl::StatusOr<std::shared_ptr<const ServedModel>> LoadModel(const ModelSpec& spec,
                                                               std::shared_ptr<ModelMetrics> reuse_metrics,
                                                               std::shared_future<void> start_after = {},
                                                               const ServedModel* previous = nullptr);
  void WatchLoop();
  void StopWatching();
  void CheckSlot(Slot& slot, bool forced);

  const ServeOptions options_;
  Metrics* const metrics_;
  std::shared_ptr<ModelReaper> reaper_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::map<std::string, Slot*> by_name_;

  absl::Mutex watch_mu_;
  bool check_requested_ ABSL_GUARDED_BY(watch_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread watcher_;
};


}  // namespace dserve
