// Dynamic batching scheduler, one per model: a bounded queue of work items
// and a pull API through which the server's worker threads take batches.
//
// Why a template on <Payload, Result>: the payload (token ids, a pointer to
// the request's state) and the result (logits) are the server's types; a
// template keeps them typed end to end with no casts. All of the queueing,
// deciding and locking is in the non-template SchedulerCore
// (scheduler_core.h); this header only wraps and unwraps the types.
//
// Why pull (NextBatch) rather than a callback: the workers hold the torch
// replicas, one per device stream; the server owns those threads and each
// one loops `while (auto batch = scheduler.NextBatch()) Run(*batch);`. A
// thread blocked in NextBatch() is "an idle worker" to the batch policy.
//
// Usage (server):
//   SchedulerOptions options;  // from --max-batch-size etc.
//   options.observer = metrics;  // SchedulerObserver -> Prometheus
//   ASSIGN_OR_RETURN(auto scheduler,
//                    (Scheduler<Item, Logits>::Create(std::move(options))));
//   // gRPC thread, one WorkTask per text / QA window / rerank pair, never blocks:
//   std::vector<Scheduler<Item, Logits>::TaskType> tasks = ...;
//   //   task.num_tokens = ids.size(); task.deadline = call deadline;
//   //   task.cancelled = the call's flag; task.payload = {state, index, ids};
//   //   task.done = [state, index](absl::StatusOr<Logits> r) {...};
//   absl::Status s = scheduler->EnqueueAll(std::move(tasks));
//   if (!s.ok()) finish the call with s;  // no `done` was or will be called
//   // worker thread:
//   while (auto batch = scheduler->NextBatch()) {
//     batch->DropStale();  // cancelled / expired since the batch formed
//     pad the items not completed(i), run the model, then
//     batch->Complete(i, logits_i) for each i (or batch->FailAll(status));
//   }
//   // shutdown: scheduler->Shutdown(/*drain=*/true, drain_timeout); join the
//   // worker threads (NextBatch returns nullopt); destroy the scheduler.
//
// Completion guarantee: every task accepted by Enqueue/EnqueueAll has its
// `done` called exactly once: by the worker through Batch::Complete/FailAll;
// with DEADLINE_EXCEEDED when it expired in the queue (never computed); with
// CANCELLED when its flag was set while queued, or when another task of the
// same EnqueueAll call failed first (Batch::DropStale() applies both rules to
// a formed batch just before compute); with UNAVAILABLE when the
// scheduler shut down (without drain, or after the drain timeout) before it
// ran; with INTERNAL when a worker destroyed a Batch without completing it.
// `done` runs on whichever thread completes it (worker, Enqueue caller,
// Shutdown caller), never with a scheduler lock held; it may call back into
// the scheduler. Tasks rejected by Enqueue never have `done` called.
#pragma once

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/batching/scheduler_core.h"

namespace dserve {

// One unit of work: a text, a QA window or a rerank pair.
template <typename Payload, typename Result>
struct WorkTask {
  // Real tokens (sequence length with specials); >= 1. Drives batching.
  int64_t num_tokens = 0;
  // Absolute; the item is dropped with DEADLINE_EXCEEDED once it passes.
  absl::Time deadline = absl::InfiniteFuture();
  // Optional; see CancelFlag.
  CancelFlag cancelled;
  // Higher is batched first (with ageing: SchedulerOptions::priority_aging).
  int priority = 0;
  Payload payload;
  // Called exactly once with the result or the error (see the file comment).
  absl::AnyInvocable<void(absl::StatusOr<Result>)> done;
};

namespace batching_internal {

template <typename Payload, typename Result>
class TypedWorkItem final : public WorkItem {
 public:
  explicit TypedWorkItem(WorkTask<Payload, Result> task)
      : WorkItem(task.num_tokens, task.deadline, task.cancelled, task.priority),
        task_(std::move(task)) {}
  ~TypedWorkItem() override {
    Finish(absl::InternalError("work item dropped without being completed"));
  }
  void Fail(absl::Status status) override { Finish(std::move(status)); }
  void Discard() override { completed_ = true; }

  // Returns false (and does nothing) when already completed.
  bool Finish(absl::StatusOr<Result> result) {
    if (completed_) return false;
    completed_ = true;
    const bool failed = !result.ok();
    if (task_.done) task_.done(std::move(result));
    // After `done`, so the caller sees this item's error before any
    // sibling's CANCELLED.
    if (failed) MarkRequestFailed();
    return true;
  }
  bool completed() const { return completed_; }
  Payload& payload() { return task_.payload; }
  const Payload& payload() const { return task_.payload; }

 private:
  WorkTask<Payload, Result> task_;
  bool completed_ = false;
};

}  // namespace batching_internal

// A formed batch, owned by the worker that took it. Move-only; not
// thread-safe (one worker uses it). Destroying it completes every item not
// yet completed with INTERNAL and tells Shutdown(drain) the batch is done.
template <typename Payload, typename Result>
class Batch {
 public:
  explicit Batch(CoreBatch core) : core_(std::move(core)) {}
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&&) noexcept = default;

  size_t size() const { return core_.items.size(); }
  Payload& payload(size_t i) { return item(i)->payload(); }
  const Payload& payload(size_t i) const { return item(i)->payload(); }
  int64_t num_tokens(size_t i) const { return core_.items[i]->num_tokens(); }
  absl::Time deadline(size_t i) const { return core_.items[i]->deadline(); }
  absl::Time enqueue_time(size_t i) const {
    return core_.items[i]->enqueue_time();
  }
  // Cancelled after the batch was formed; DropStale() completes such items.
  bool IsCancelled(size_t i) const { return core_.items[i]->IsCancelled(); }
  // Item `i` has been completed (by Complete, FailAll or DropStale).
  bool completed(size_t i) const { return item(i)->completed(); }

  // Call just before compute: completes the items no longer wanted since
  // the batch was formed (cancelled: CANCELLED; deadline passed:
  // DEADLINE_EXCEEDED; another item of their request failed: CANCELLED),
  // counting them as rejections, so the worker computes only the others
  // (those with !completed(i)). Returns how many it completed.
  size_t DropStale() {
    size_t dropped = 0;
    for (size_t i = 0; i < size(); ++i) {
      if (completed(i)) continue;
      absl::Status stale = core_.core->StaleStatus(*core_.items[i]);
      if (stale.ok()) continue;
      Complete(i, std::move(stale));
      ++dropped;
    }
    return dropped;
  }

  // The length every item is padded to, and the batch's token counts.
  int64_t longest_tokens() const { return core_.longest_tokens; }
  int64_t padded_tokens() const { return core_.padded_tokens; }
  int64_t real_tokens() const { return core_.real_tokens; }
  BatchTrigger trigger() const { return core_.trigger; }

  // Completes item `i` with its result or error. Returns false, doing
  // nothing, when item `i` was already completed.
  bool Complete(size_t i, absl::StatusOr<Result> result) {
    const bool first = item(i)->Finish(std::move(result));
    if (first && ++completed_ == size()) core_.token.Release();
    return first;
  }
  // Completes every item not yet completed with `status` (e.g. INTERNAL
  // after a torch error).
  void FailAll(const absl::Status& status) {
    for (size_t i = 0; i < size(); ++i) Complete(i, status);
  }

 private:
  using Item = batching_internal::TypedWorkItem<Payload, Result>;
  Item* item(size_t i) const {
    return static_cast<Item*>(core_.items[i].get());
  }

  CoreBatch core_;
  size_t completed_ = 0;
};

// Thread-safe. See the file comment for the usage and guarantees. Worker
// threads must have returned from NextBatch() before destruction; the
// destructor shuts down without drain (queued tasks get UNAVAILABLE).
template <typename Payload, typename Result>
class Scheduler {
 public:
  using TaskType = WorkTask<Payload, Result>;
  using BatchType = Batch<Payload, Result>;

  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      SchedulerOptions options) {
    absl::StatusOr<std::shared_ptr<SchedulerCore>> core =
        SchedulerCore::Create(std::move(options));
    if (!core.ok()) return core.status();
    return std::unique_ptr<Scheduler>(new Scheduler(*std::move(core)));
  }
  ~Scheduler() {
    core_->Shutdown(/*drain=*/false, absl::ZeroDuration()).IgnoreError();
  }
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Never blocks. See SchedulerCore::Enqueue for the error codes; on error
  // `done` is not called. RESOURCE_EXHAUSTED names max_queue_items.
  absl::Status Enqueue(TaskType task) {
    std::vector<TaskType> tasks;
    tasks.push_back(std::move(task));
    return EnqueueAll(std::move(tasks));
  }
  // All-or-nothing, so a request's items are queued together or not at all;
  // once one of them fails, the others are dropped before compute.
  absl::Status EnqueueAll(std::vector<TaskType> tasks) {
    std::vector<std::unique_ptr<WorkItem>> items;
    items.reserve(tasks.size());
    for (TaskType& task : tasks) {
      items.push_back(std::make_unique<Item>(std::move(task)));
    }
    return core_->Enqueue(std::move(items));
  }

  // See SchedulerCore::CheckAdmission: Enqueue's cheap checks before a
  // request is tokenized. Never blocks.
  absl::Status CheckAdmission(absl::Time deadline) { return core_->CheckAdmission(deadline); }

  // Blocks until a batch is formed or, after Shutdown, nothing is left
  // (nullopt: the worker thread should exit).
  std::optional<BatchType> NextBatch() {
    std::optional<CoreBatch> core = core_->NextBatch();
    if (!core.has_value()) return std::nullopt;
    return BatchType(*std::move(core));
  }

  // See SchedulerCore::Shutdown. Blocks up to `timeout` when draining.
  absl::Status Shutdown(bool drain, absl::Duration timeout) {
    return core_->Shutdown(drain, timeout);
  }
  // Re-runs the decision now (call after setting cancel flags to free their
  // slots at once; otherwise they are freed at the next decision).
  void Wake() { core_->Wake(); }

  int64_t queue_depth() const { return core_->queue_depth(); }
  int64_t inflight_items() const { return core_->inflight_items(); }
  const SchedulerOptions& options() const { return core_->options(); }

 private:
  using Item = batching_internal::TypedWorkItem<Payload, Result>;
  explicit Scheduler(std::shared_ptr<SchedulerCore> core)
      : core_(std::move(core)) {}

  std::shared_ptr<SchedulerCore> core_;
};

}  // namespace dserve
