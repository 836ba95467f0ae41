#include "server/batching/scheduler_core.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/util/logging.h"

namespace dserve {
namespace {

// A call cancelled this close to its deadline expired: the client's own
// deadline timer fires (and cancels the call) before the server's copy of
// the deadline, which starts when the call arrives, a few ms later.
constexpr absl::Duration kCancelNearDeadline = absl::Milliseconds(50);

// Why an item waiting for compute is no longer wanted at `now`.
enum class Staleness { kLive, kExpired, kCancelled, kRequestFailed };

Staleness Classify(const WorkItem& item, absl::Time now) {
  // Deadline first: gRPC cancels a call whose deadline passed, and such an
  // item is counted as expired ("deadline"), not "cancelled".
  if (item.deadline() <= now ||
      (item.IsCancelled() && item.deadline() <= now + kCancelNearDeadline)) {
    return Staleness::kExpired;
  }
  if (item.IsCancelled()) return Staleness::kCancelled;
  if (item.RequestFailed()) return Staleness::kRequestFailed;
  return Staleness::kLive;
}

absl::Status ExpiredStatus() {
  return absl::DeadlineExceededError(
      "deadline passed while queued; dropped before compute");
}

absl::Status RequestFailedStatus() {
  return absl::CancelledError(
      "another item of the same request failed; dropped before compute");
}

}  // namespace

const char* RejectReasonName(RejectReason reason) {
  switch (reason) {
    case RejectReason::kQueueFull:
      return "queue_full";
    case RejectReason::kDeadline:
      return "deadline";
    case RejectReason::kCancelled:
      return "cancelled";
    case RejectReason::kDraining:
      return "draining";
    case RejectReason::kInvalid:
      return "invalid";
  }
  return "unknown";
}

absl::Status ValidateSchedulerOptions(const SchedulerOptions& options) {
  if (absl::Status s = ValidateBatchPolicyOptions(options.policy); !s.ok()) {
    return s;
  }
  if (options.max_queue_items < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queue_items must be >= 1, got ", options.max_queue_items));
  }
  return absl::OkStatus();
}

InflightToken& InflightToken::operator=(InflightToken&& other) noexcept {
  if (this != &other) {
    Release();
    core_ = std::move(other.core_);
    items_ = std::exchange(other.items_, 0);
  }
  return *this;
}

void InflightToken::Release() {
  if (core_ == nullptr) return;
  core_->ReleaseInflight(items_);
  items_ = 0;
  core_.reset();
}

absl::StatusOr<std::shared_ptr<SchedulerCore>> SchedulerCore::Create(
    SchedulerOptions options) {
  if (absl::Status s = ValidateSchedulerOptions(options); !s.ok()) return s;
  return std::shared_ptr<SchedulerCore>(new SchedulerCore(std::move(options)));
}

SchedulerCore::SchedulerCore(SchedulerOptions options)
    : options_(std::move(options)),
      clock_(options_.clock != nullptr ? options_.clock : Clock::Real()) {
  Logger("batching")
      ->debug(
          "scheduler '{}': max_batch_size={} max_batch_tokens={} "
          "max_queue_delay_us={} packing={} max_padding_ratio={} "
          "max_queue_items={}",
          options_.name, options_.policy.max_batch_size,
          options_.policy.max_batch_tokens,
          absl::ToInt64Microseconds(options_.policy.max_queue_delay),
          options_.policy.packing, options_.policy.max_padding_ratio,
          options_.max_queue_items);
}

SchedulerCore::~SchedulerCore() {
  // Only reached when nothing else references the core, so no lock races.
  ItemList left;
  {
    absl::MutexLock lock(&mu_);
    left = TakeAllLocked();
  }
  FailAll(std::move(left),
          absl::UnavailableError("scheduler destroyed before the item ran"),
          RejectReason::kDraining);
}

absl::Status SchedulerCore::Enqueue(ItemList items) {
  if (items.empty()) return absl::OkStatus();
  const int64_t n = static_cast<int64_t>(items.size());
  absl::Status status;
  RejectReason reason = RejectReason::kInvalid;
  Drops drops;
  for (const auto& item : items) {
    if (item->num_tokens() < 1) {
      status = absl::InvalidArgumentError(
          absl::StrCat("num_tokens must be >= 1, got ", item->num_tokens()));
    }
  }
  if (status.ok() && n > options_.max_queue_items) {
    // Refusing it as "queue full" would make clients retry it forever.
    status = absl::InvalidArgumentError(absl::StrCat(
        "request needs ", n, " items, more than the queue of model '",
        options_.name, "' can ever hold (max_queue_items=",
        options_.max_queue_items, "); split it into smaller requests"));
  }
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (stopped_) {
      status = absl::UnavailableError(
          absl::StrCat("model '", options_.name, "' is shutting down"));
      reason = RejectReason::kDraining;
    } else if (std::any_of(items.begin(), items.end(), [&](const auto& item) {
                 return item->deadline() <= now ||
                        (item->IsCancelled() && item->deadline() <= now + kCancelNearDeadline);
               })) {
      status = absl::DeadlineExceededError(
          "deadline passed before the request was queued");
      reason = RejectReason::kDeadline;
    } else if (std::any_of(items.begin(), items.end(), [](const auto& item) {
                 return item->IsCancelled();
               })) {
      status = absl::CancelledError("request cancelled before it was queued");
      reason = RejectReason::kCancelled;
    } else {
      status = RoomLocked(now, &drops);
      if (!status.ok()) {
        reason = RejectReason::kQueueFull;
      } else {
        std::shared_ptr<std::atomic<bool>> request_failed;
        if (n > 1) request_failed = std::make_shared<std::atomic<bool>>(false);
        for (auto& item : items) {
          item->enqueue_time_ = now;
          item->request_failed_ = request_failed;
          queue_.push_back(std::move(item));
        }
        ++version_;
      }
    }
    ReportDepthLocked();
  }
  FailDrops(std::move(drops));
  if (!status.ok()) {
    for (auto& item : items) item->Discard();
    Reject(reason, n);
  }
  return status;
}

absl::Status SchedulerCore::CheckAdmission(absl::Time deadline) {
  absl::Status status;
  RejectReason reason = RejectReason::kQueueFull;
  Drops drops;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (stopped_) {
      status = absl::UnavailableError(
          absl::StrCat("model '", options_.name, "' is shutting down"));
      reason = RejectReason::kDraining;
    } else if (deadline <= now) {
      status = absl::DeadlineExceededError(
          "deadline passed before the request was read");
      reason = RejectReason::kDeadline;
    } else {
      // The same rule as Enqueue's, so a request refused here would have
      // been refused there (only later, after its tokenization).
      status = RoomLocked(now, &drops);
    }
    if (!drops.empty()) ReportDepthLocked();
  }
  FailDrops(std::move(drops));
  if (!status.ok()) Reject(reason, 1);
  return status;
}

absl::Status SchedulerCore::RoomLocked(absl::Time now, Drops* drops) {
  const auto max = static_cast<size_t>(options_.max_queue_items);
  // Stale items must not hold slots that a live request needs.
  if (queue_.size() >= max) PurgeLocked(now, drops);
  // Room for one more item admits the whole request, so a big request is
  // refused under the same condition as a small one (fair admission; the
  // queue holds at most 2 x max - 1 items).
  if (queue_.size() < max) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("queue full for model '", options_.name, "': ", queue_.size(),
                                                   " items queued, max_queue_items=", options_.max_queue_items));
}

std::optional<CoreBatch> SchedulerCore::NextBatch() {
  while (true) {
    Drops drops;
    std::optional<CoreBatch> batch;
    std::vector<absl::Duration> waits;
    bool finished = false;
    {
      absl::MutexLock lock(&mu_);
      while (true) {
        const absl::Time now = clock_->Now();
        PurgeLocked(now, &drops);
        if (stopped_ && (queue_.empty() || !draining_)) {
          finished = true;
          break;
        }
        // Fail the dropped items (outside the lock) before sleeping.
        if (!drops.empty()) break;
        const uint64_t seen = version_;
        auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return version_ != seen;
        };
        if (queue_.empty()) {
          mu_.Await(absl::Condition(&changed));
          continue;
        }
        OrderByPriorityLocked(now);
        std::vector<QueuedItemInfo> infos;
        infos.reserve(queue_.size());
        for (const auto& item : queue_) {
          infos.push_back(
              {item->num_tokens(), item->enqueue_time(), item->deadline()});
        }
        const BatchDecision decision =
            DecideBatch(options_.policy, infos, now, /*flush=*/stopped_);
        if (!decision.batch.empty()) {
          batch.emplace();
          batch->trigger = decision.trigger;
          batch->padded_tokens = decision.padded_tokens;
          batch->real_tokens = decision.real_tokens;
          for (size_t index : decision.batch) {
            batch->longest_tokens =
                std::max(batch->longest_tokens, queue_[index]->num_tokens());
            waits.push_back(now - queue_[index]->enqueue_time());
            batch->items.push_back(std::move(queue_[index]));
          }
          queue_.erase(std::remove(queue_.begin(), queue_.end(), nullptr),
                       queue_.end());
          const auto size = static_cast<int64_t>(batch->items.size());
          inflight_items_ += size;
          batch->token = InflightToken(shared_from_this(), size);
          batch->core = shared_from_this();
          ReportDepthLocked();
          break;
        }
        clock_->AwaitWithDeadline(&mu_, absl::Condition(&changed),
                                  decision.wait_until);
      }
    }
    FailDrops(std::move(drops));
    if (batch.has_value()) {
      if (options_.observer != nullptr) {
        BatchStats stats;
        stats.size = static_cast<int64_t>(batch->items.size());
        stats.padded_tokens = batch->padded_tokens;
        stats.real_tokens = batch->real_tokens;
        stats.trigger = batch->trigger;
        stats.queue_waits = std::move(waits);
        options_.observer->OnBatch(stats);
      }
      return batch;
    }
    if (finished) return std::nullopt;
  }
}

void SchedulerCore::OrderByPriorityLocked(absl::Time now) {
  if (queue_.size() < 2) return;
  const int first = queue_.front()->priority();
  if (std::all_of(queue_.begin(), queue_.end(),
                  [first](const auto& item) { return item->priority() == first; })) {
    return;  // FIFO already
  }
  const absl::Duration aging = options_.priority_aging;
  std::vector<std::pair<int64_t, std::unique_ptr<WorkItem>>> keyed;
  keyed.reserve(queue_.size());
  for (auto& item : queue_) {
    int64_t key = item->priority();
    if (aging > absl::ZeroDuration()) {
      absl::Duration rest;
      key += absl::IDivDuration(std::max(absl::ZeroDuration(), now - item->enqueue_time()), aging, &rest);
    }
    keyed.emplace_back(key, std::move(item));
  }
  // Stable: equal effective priorities keep queue (arrival) order.
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < keyed.size(); ++i) queue_[i] = std::move(keyed[i].second);
}

absl::Status SchedulerCore::Shutdown(bool drain, absl::Duration timeout) {
  ItemList dropped;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_ || !drain) {
      stopped_ = true;
      draining_ = drain;
      ++version_;
    }
    if (draining_) {
      const absl::Time deadline = clock_->Now() + timeout;
      auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return queue_.empty() && inflight_items_ == 0;
      };
      if (!clock_->AwaitWithDeadline(&mu_, absl::Condition(&drained),
                                     deadline)) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "drain of model '", options_.name, "' timed out after ",
            absl::FormatDuration(timeout), " with ", queue_.size(),
            " items queued and ", inflight_items_, " in flight"));
        draining_ = false;
        ++version_;
      }
    }
    dropped = TakeAllLocked();
    ReportDepthLocked();
  }
  if (!status.ok())
    Logger("batching")->warn("{}", std::string(status.message()));
  FailAll(std::move(dropped),
          absl::UnavailableError(absl::StrCat(
              "model '", options_.name, "' shut down before the item ran")),
          RejectReason::kDraining);
  return status;
}

void SchedulerCore::Wake() {
  Drops drops;
  {
    absl::MutexLock lock(&mu_);
    PurgeLocked(clock_->Now(), &drops);
    ++version_;
  }
  FailDrops(std::move(drops));
}

absl::Status SchedulerCore::StaleStatus(const WorkItem& item) {
  switch (Classify(item, clock_->Now())) {
    case Staleness::kLive:
      return absl::OkStatus();
    case Staleness::kExpired:
      Reject(RejectReason::kDeadline, 1);
      return ExpiredStatus();
    case Staleness::kCancelled:
      Reject(RejectReason::kCancelled, 1);
      return absl::CancelledError("call cancelled before compute");
    case Staleness::kRequestFailed:
      Reject(RejectReason::kCancelled, 1);
      return RequestFailedStatus();
  }
  return absl::OkStatus();
}

int64_t SchedulerCore::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t SchedulerCore::inflight_items() const {
  absl::MutexLock lock(&mu_);
  return inflight_items_;
}

void SchedulerCore::ReleaseInflight(int64_t items) {
  absl::MutexLock lock(&mu_);
  inflight_items_ -= items;
}

void SchedulerCore::PurgeLocked(absl::Time now, Drops* drops) {
  bool removed = false;
  for (auto& item : queue_) {
    switch (Classify(*item, now)) {
      case Staleness::kLive:
        continue;
      case Staleness::kExpired:
        drops->expired.push_back(std::move(item));
        break;
      case Staleness::kCancelled:
        drops->cancelled.push_back(std::move(item));
        break;
      case Staleness::kRequestFailed:
        drops->request_failed.push_back(std::move(item));
        break;
    }
    removed = true;
  }
  if (!removed) return;
  queue_.erase(std::remove(queue_.begin(), queue_.end(), nullptr),
               queue_.end());
  ReportDepthLocked();
}

SchedulerCore::ItemList SchedulerCore::TakeAllLocked() {
  ItemList items;
  items.reserve(queue_.size());
  for (auto& item : queue_) items.push_back(std::move(item));
  queue_.clear();
  return items;
}

void SchedulerCore::ReportDepthLocked() {
  if (options_.observer != nullptr) {
    options_.observer->OnQueueDepth(static_cast<int64_t>(queue_.size()));
  }
}

void SchedulerCore::FailDrops(Drops drops) {
  FailAll(std::move(drops.expired), ExpiredStatus(), RejectReason::kDeadline);
  FailAll(std::move(drops.cancelled),
          absl::CancelledError("call cancelled while queued"),
          RejectReason::kCancelled);
  FailAll(std::move(drops.request_failed), RequestFailedStatus(),
          RejectReason::kCancelled);
}

void SchedulerCore::FailAll(ItemList items, const absl::Status& status,
                            RejectReason reason) {
  if (items.empty()) return;
  for (auto& item : items) item->Fail(status);
  Reject(reason, static_cast<int64_t>(items.size()));
}

void SchedulerCore::Reject(RejectReason reason, int64_t count) {
  if (options_.observer != nullptr && count > 0) {
    options_.observer->OnRejected(reason, count);
  }
}

}  // namespace dserve
