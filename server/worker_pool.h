// WorkerPool: one model's batching scheduler and the worker threads that
// pull batches from it and run the model. Torch-free interface.
//
// Thread safety: Submit may be called from any thread (gRPC threads);
// Shutdown from one thread (the drain path).
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/deberta/model.h"
#include "server/batching/scheduler.h"
#include "server/item_input.h"

namespace dserve {

class ModelMetrics;

// Raw head outputs of one item, float32, unpadded.
struct ItemOutput {
  std::vector<float> logits;        // classify / rerank: [num_labels]
  std::vector<float> start_logits;  // answer: [num_tokens]
  std::vector<float> end_logits;
  absl::Duration queue_wait;        // time from enqueue to batch formation
  absl::Duration inference;         // forward pass of the batch carrying it
};

using ItemScheduler = Scheduler<ItemInput, ItemOutput>;
using ItemTask = ItemScheduler::TaskType;

struct WorkerPoolOptions {
  int workers = 1;             // threads pulling batches
  int threads_per_worker = 1;  // intra-op threads of each (CPU)
  SchedulerOptions scheduler;
  // Test hook, empty in production: while this file exists, a worker that
  // has taken a batch holds it before running it (the rest stay queued), so
  // end-to-end tests can act while work is certainly queued or in flight
  // instead of sleeping and hoping. Create() fills it from the environment
  // variable DSERVE_TEST_HOLD_WORKERS_FILE when left empty.
  std::string test_hold_file;
  // When valid, the workers start pulling batches only once it is ready
  // (the queue takes work meanwhile). A hot reload hands over with it: the
  // new version's workers start when the old version's pool has drained, so
  // a model never has more than its --workers computing at once (issue 16,
  // defect 6).
  std::shared_future<void> start_after;
};

class WorkerPool {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Create(std::shared_ptr<const DebertaModel> model,
                                                            std::shared_ptr<ModelMetrics> metrics,
                                                            WorkerPoolOptions options);
  ~WorkerPool();  // Shutdown(drain=false) and join

  // All-or-nothing enqueue of one request's items (never blocks).
  absl::Status Submit(std::vector<ItemTask> tasks) { return scheduler_->EnqueueAll(std::move(tasks)); }
  // Before a request is parsed and tokenized: would the queue refuse it now
  // (full, shut down, deadline passed)? ItemScheduler::CheckAdmission.
  absl::Status CheckAdmission(absl::Time deadline) { return scheduler_->CheckAdmission(deadline); }
  // Drops cancelled queued items now and re-runs the batching decision
  // (call after a cancel flag was set).
  void Wake() { scheduler_->Wake(); }
  // Stops taking work; with `drain`, queued and running items finish first
  // (up to `timeout`). Joins the workers. Idempotent.
  absl::Status Shutdown(bool drain, absl::Duration timeout);
  int64_t queue_depth() const { return scheduler_->queue_depth(); }

 private:
  WorkerPool() = default;
  void WorkerLoop(int threads);
  void RunBatch(ItemScheduler::BatchType& batch);
  void WaitWhileHeld() const;  // see WorkerPoolOptions::test_hold_file

  std::shared_ptr<const DebertaModel> model_;
  std::shared_ptr<ModelMetrics> metrics_;
  std::unique_ptr<ItemScheduler> scheduler_;
  std::vector<std::thread> threads_;
  std::string test_hold_file_;
  std::shared_future<void> start_after_;
  bool shut_down_ = false;
};

}  // namespace dserve
