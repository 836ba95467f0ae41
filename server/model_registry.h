// The models a server serves: checkpoint, tokenizer, metrics and worker
// pool per name, and their hot reload.
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
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/worker_pool.h"

namespace dserve {

struct ServedModel {
  std::string name;
  std::string dir;
  std::shared_ptr<const DebertaModel> model;
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
  // `reuse_metrics` and `start_after` for a reload (WorkerPoolOptions::start_after).
  absl::StatusOr<std::shared_ptr<const ServedModel>> LoadModel(const ModelSpec& spec,
                                                               std::shared_ptr<ModelMetrics> reuse_metrics,
                                                               std::shared_future<void> start_after = {});
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

// FNV-1a over config.json, each weights file's header, size and sampled
// blocks, and the tokenizer files: cheap on multi-GB files, changes
// whenever the checkpoint does.
absl::StatusOr<std::string> CheckpointVersion(const std::string& dir);

// What the watcher compares between polls: the version plus each file's
// inode, size and modification time (so a rewrite that the sampled hash
// could miss still shows). An unreadable directory gives "!" + the error.
std::string CheckpointFingerprint(const std::string& dir);

}  // namespace dserve
