// The type-erased engine behind Scheduler<Payload, Result> (scheduler.h):
// the bounded queue, the decide loop that workers run in NextBatch(), the
// in-flight accounting and Shutdown. Servers use scheduler.h; this header is
// public only so that the template there stays a thin typed facade and the
// concurrency logic is compiled (and tested) once, here.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/batching/batch_policy.h"
#include "server/batching/clock.h"
#include "server/batching/observer.h"

namespace dserve {

// Set to true by the caller (e.g. the gRPC layer when the call is
// cancelled); read by the scheduler. Null means "never cancelled". One flag
// is typically shared by all items of a request.
using CancelFlag = std::shared_ptr<const std::atomic<bool>>;

struct SchedulerOptions {
  BatchPolicyOptions policy;
  // Items the queue holds (--max-queue-items). A request is admitted while
  // fewer than this many items are queued, whatever its own size (all its
  // items go in, so the queue may hold up to 2 x max_queue_items - 1): a big
  // request is refused under the same condition as a small one, and a
  // stream of small requests cannot starve it. When the queue is full,
  // Enqueue fails with RESOURCE_EXHAUSTED instead of blocking; a request with
  // more items than this can never be admitted (INVALID_ARGUMENT). Default
  // 1024: ~30 full batches, seconds of work at most, so a full queue means
  // "overloaded", not "busy".
  int64_t max_queue_items = 1024;
  // Priorities (WorkTask::priority, higher first): batches are formed from
  // the queue ordered by effective priority = priority + one level per
  // `priority_aging` waited, ties oldest first, so a low priority item is
  // overtaken only until it has aged past the traffic above it (never
  // starved). When every queued item has the same priority the order is
  // FIFO, exactly as without priorities. Default 100 ms.
  absl::Duration priority_aging = absl::Milliseconds(100);
  // Not owned; must outlive the scheduler. Null = Clock::Real().
  Clock* clock = nullptr;
  // Optional; shared so that it outlives batches still held by workers.
  std::shared_ptr<SchedulerObserver> observer;
  // For log lines (the model name).
  std::string name;
};

// Returns INVALID_ARGUMENT naming the field when an option is out of range.
absl::Status ValidateSchedulerOptions(const SchedulerOptions& options);

// One queued item, type-erased. Subclasses (scheduler.h) hold the payload
// and the completion callback and guarantee exactly-once completion.
class WorkItem {
 public:
  WorkItem(int64_t num_tokens, absl::Time deadline, CancelFlag cancelled,
           int priority = 0)
      : num_tokens_(num_tokens),
        deadline_(deadline),
        cancelled_(std::move(cancelled)),
        priority_(priority) {}
  virtual ~WorkItem() = default;
  WorkItem(const WorkItem&) = delete;
  WorkItem& operator=(const WorkItem&) = delete;

  // Completes the item with an error, unless already completed.
  virtual void Fail(absl::Status status) = 0;
  // Marks the item completed without calling its callback (the caller got
  // the error from Enqueue instead).
  virtual void Discard() = 0;

  int64_t num_tokens() const { return num_tokens_; }
  absl::Time deadline() const { return deadline_; }
  absl::Time enqueue_time() const { return enqueue_time_; }
  int priority() const { return priority_; }
  bool IsCancelled() const {
    return cancelled_ != nullptr && cancelled_->load(std::memory_order_acquire);
  }
  // Another item of the same request (one Enqueue call) failed: the request
  // has failed, so this item need not be computed.
  bool RequestFailed() const {
    return request_failed_ != nullptr &&
           request_failed_->load(std::memory_order_acquire);
  }

 protected:
  // Subclasses call this after completing the item with an error: its
  // siblings still queued are then dropped at the next decision, and those in
  // a formed batch before compute.
  void MarkRequestFailed() {
    if (request_failed_ != nullptr) {
      request_failed_->store(true, std::memory_order_release);
    }
  }

 private:
  friend class SchedulerCore;
  const int64_t num_tokens_;
  const absl::Time deadline_;
  const CancelFlag cancelled_;
  const int priority_;
  absl::Time enqueue_time_;
  // Shared by the items of one Enqueue call of two or more items.
  std::shared_ptr<std::atomic<bool>> request_failed_;
};

class SchedulerCore;

// Returns a batch's items to the scheduler's in-flight count (which drain
// waits on) when released or destroyed. Move-only.
class InflightToken {
 public:
  InflightToken() = default;
  InflightToken(std::shared_ptr<SchedulerCore> core, int64_t items)
      : core_(std::move(core)), items_(items) {}
  InflightToken(InflightToken&& other) noexcept { *this = std::move(other); }
  InflightToken& operator=(InflightToken&& other) noexcept;
  ~InflightToken() { Release(); }
  void Release();

 private:
  std::shared_ptr<SchedulerCore> core_;
  int64_t items_ = 0;
};

// A formed batch, type-erased. Member order matters: items are destroyed
// (failing any not completed) before the token tells drain they are done.
struct CoreBatch {
  InflightToken token;
  // The scheduler that formed it (for StaleStatus before compute).
  std::shared_ptr<SchedulerCore> core;
  std::vector<std::unique_ptr<WorkItem>> items;  // queue order
  int64_t longest_tokens = 0;  // the length every item is padded to
  int64_t padded_tokens = 0;
  int64_t real_tokens = 0;
  BatchTrigger trigger = BatchTrigger::kNone;
};

// Thread-safe. Owned through std::shared_ptr (batches keep it alive).
class SchedulerCore : public std::enable_shared_from_this<SchedulerCore> {
 public:
  static absl::StatusOr<std::shared_ptr<SchedulerCore>> Create(
      SchedulerOptions options);
  ~SchedulerCore();

  // One request's items, all-or-nothing; never blocks. On error no item is
  // queued and no item's callback is called (Discard()). Admitted while
  // fewer than max_queue_items items are queued, whatever the request's size
  // (see SchedulerOptions::max_queue_items). Once one of its items fails,
  // the others still waiting are dropped (CANCELLED) before compute. Errors:
  // INVALID_ARGUMENT (num_tokens < 1, or more items than max_queue_items:
  // it can never be admitted), UNAVAILABLE (shut down), DEADLINE_EXCEEDED /
  // CANCELLED (an item already expired / cancelled), RESOURCE_EXHAUSTED
  // (queue full; cancelled and expired items are purged first so they never
  // hold a slot).
  absl::Status Enqueue(std::vector<std::unique_ptr<WorkItem>> items);

  // The cheap part of Enqueue's admission, for a request whose items are not
  // built yet: call before parsing and tokenizing it, so a request that the
  // queue would refuse costs nothing. Errors as Enqueue's: UNAVAILABLE (shut
  // down), DEADLINE_EXCEEDED (`deadline` already passed), RESOURCE_EXHAUSTED
  // (queue full once stale items are purged), each counted as one rejected
  // item (its items are not known yet). OK promises nothing: Enqueue checks
  // again. Never blocks.
  absl::Status CheckAdmission(absl::Time deadline);

  // Blocks until a batch is formed (the caller counts as an idle worker) or
  // the scheduler is shut down and has nothing left to hand out (nullopt).
  // Drops expired / cancelled items (failing them) on the way.
  std::optional<CoreBatch> NextBatch();

  // Stops accepting items. drain=false: queued items fail with UNAVAILABLE
  // now. drain=true: workers keep taking batches (formed at once, no delay)
  // until the queue is empty and every handed-out batch is done, or until
  // `timeout` passes on the clock; then what is still queued fails with
  // UNAVAILABLE and DEADLINE_EXCEEDED is returned. Either way NextBatch()
  // returns nullopt once nothing is left. Idempotent; a later call with
  // drain=false cuts a running drain short.
  absl::Status Shutdown(bool drain, absl::Duration timeout);

  // Drops the queued items that are cancelled (or expired, or whose request
  // failed) now, on the calling thread, and makes waiting workers decide
  // again: call after setting cancel flags, so cancelled items free their
  // slots at once even when every worker is busy.
  void Wake();

  // For an item of a formed batch, just before compute: OK when it is still
  // wanted; otherwise the status to complete it with (DEADLINE_EXCEEDED,
  // CANCELLED), counted as a rejection (reason "deadline" / "cancelled").
  absl::Status StaleStatus(const WorkItem& item);

  int64_t queue_depth() const;
  int64_t inflight_items() const;
  const SchedulerOptions& options() const { return options_; }
  Clock* clock() const { return clock_; }

 private:
  friend class InflightToken;
  using ItemList = std::vector<std::unique_ptr<WorkItem>>;
  struct Drops {
    ItemList expired;
    ItemList cancelled;
    ItemList request_failed;
    bool empty() const {
      return expired.empty() && cancelled.empty() && request_failed.empty();
    }
  };

  explicit SchedulerCore(SchedulerOptions options);
  void ReleaseInflight(int64_t items);
  // Moves cancelled (and, at `now`, expired) items and those whose request
  // failed out of the queue.
  void PurgeLocked(absl::Time now, Drops* drops)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Admission's one rule (Enqueue and CheckAdmission): OK while fewer than
  // max_queue_items items are queued (stale ones purged first when full),
  // else RESOURCE_EXHAUSTED naming the limit.
  absl::Status RoomLocked(absl::Time now, Drops* drops) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ItemList TakeAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Orders the queue by effective priority at `now` (see
  // SchedulerOptions::priority_aging); a no-op when all priorities are equal.
  void OrderByPriorityLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReportDepthLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails and reports dropped items; call without mu_ held.
  void FailDrops(Drops drops);
  void FailAll(ItemList items, const absl::Status& status, RejectReason reason);
  void Reject(RejectReason reason, int64_t count);

  const SchedulerOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<WorkItem>> queue_ ABSL_GUARDED_BY(mu_);
  // Bumped on every change workers should react to (enqueue, wake, stop).
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t inflight_items_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace dserve
