// Observability hooks of the batching scheduler. The server implements
// SchedulerObserver to feed its Prometheus families (dserve_batch_size,
// dserve_batch_tokens, dserve_batch_real_tokens, dserve_queue_duration_seconds,
// dserve_queue_items, dserve_rejected_total{reason}) so that this library
// does not depend on prometheus.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "server/batching/batch_policy.h"

namespace dserve {

// Why an item did not reach a worker. Names are the `reason` label values.
enum class RejectReason {
  kQueueFull,  // "queue_full": Enqueue found the bounded queue full
  kDeadline,   // "deadline": expired at Enqueue, while queued or before compute
  kCancelled,  // "cancelled": cancelled at Enqueue, while queued or before
               // compute, or dropped because another item of its request failed
  kDraining,   // "draining": Enqueue after Shutdown, or dropped by Shutdown
  kInvalid,    // "invalid": Enqueue of a request with more items than
               // max_queue_items (it can never fit), or num_tokens < 1 (a bug)
};
const char* RejectReasonName(RejectReason reason);

// One formed batch, reported once by the worker thread that took it.
struct BatchStats {
  int64_t size = 0;           // items
  int64_t padded_tokens = 0;  // size x longest item
  int64_t real_tokens = 0;    // sum of the items' num_tokens
  BatchTrigger trigger = BatchTrigger::kNone;
  // Per item, in batch order: time from Enqueue to the batch being formed.
  std::vector<absl::Duration> queue_waits;
};

// Implementations must be thread-safe: hooks are called from gRPC threads
// (Enqueue), worker threads (NextBatch) and Shutdown. Default: no-ops.
class SchedulerObserver {
 public:
  virtual ~SchedulerObserver() = default;

  // Called without scheduler locks held, before NextBatch() returns it.
  virtual void OnBatch(const BatchStats& /*stats*/) {}

  // `count` items were rejected or dropped for `reason`. Called without
  // scheduler locks held. Rejections at Enqueue count every item of the call.
  virtual void OnRejected(RejectReason /*reason*/, int64_t /*count*/) {}

  // The queue now holds `depth` items (a gauge). Called WITH the scheduler's
  // lock held so that updates arrive in order: must be fast (set a gauge)
  // and must not call back into the scheduler.
  virtual void OnQueueDepth(int64_t /*depth*/) {}
};

}  // namespace dserve
