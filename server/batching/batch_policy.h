// BatchPolicy: the pure "decide" step of dynamic batching.
//
// Given the queue (oldest first) and the time, DecideBatch() says which
// items expired (drop them with DEADLINE_EXCEEDED, never compute them) and
// either which items form the next batch or until when to wait before
// deciding again. It is asked by an idle worker (the scheduler decides only
// when a worker wants a batch). It has no state, no clock and no threads, so
// every rule is unit-tested with plain values.
//
// Rules (first match wins, after dropping the expired items), Triton's
// dynamic batcher semantics for max_queue_delay:
//   kSize        the ready window holds max_batch_size items;
//   kTokens      the padded-token budget stops the batch from growing
//                (items are left behind that the budget did not admit);
//   kIdleWorker  max_queue_delay is 0: the idle worker takes what is there;
//   kDelay       the oldest item has waited max_queue_delay (> 0);
//   kFlush       `flush` (the scheduler is draining): take what is there.
// Otherwise (max_queue_delay > 0 and none of the above) the decision is to
// wait until the oldest item's delay expires or the earliest deadline passes,
// whichever comes first: an idle worker waits for companions.
//
// `items` must be in queue order (oldest first); the first live item is "the
// oldest".
//
// Which items: without packing, the oldest items in FIFO order while the
// batch fits (count <= max_batch_size and count * longest <= budget). With
// packing, the candidates are the `packing_window_items` oldest items; they
// are sorted by length and the contiguous run (in that order) that contains
// the oldest item, fits the limits (max_padding_ratio included) and holds the
// most items is taken, ties broken by least padding. The oldest item is always in the batch, so every
// item is served after at most queue-length batches (no starvation). An item
// longer than max_batch_tokens alone is sent alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace dserve {

struct BatchPolicyOptions {
  // Items per batch. Default 32: enough to fill a CPU or GPU forward pass for
  // short texts without making the longest-waiting item wait long.
  int64_t max_batch_size = 32;
  // Padded tokens per batch (items x longest item). Bounds activation memory
  // and the cost of one forward pass. Default 8192 = 32 items x 256 tokens.
  int64_t max_batch_tokens = 8192;
  // How long an idle worker lets the oldest item wait for companions
  // before the batch goes (unless size or tokens end the wait first).
  // Default 0: dispatch at once, the lowest latency; under load the workers
  // are busy and batches fill while they compute, and on a CPU a fuller
  // batch buys little throughput (docs/operations.md). A few ms helps a GPU
  // at moderate load, where one pass costs about the same for 1 item as
  // for 32.
  absl::Duration max_queue_delay = absl::ZeroDuration();
  // Length-aware packing inside the ready window. Default on: it cuts padding
  // on mixed-length traffic at no cost for uniform traffic.
  bool packing = true;
  // Candidates considered by packing: the N oldest items. 0 = the whole
  // queue; otherwise at least max_batch_size. A larger window packs tighter
  // but reorders more (never starving: the oldest item always goes).
  int64_t packing_window_items = 0;
  // Length-aware packing only: a batch's padded tokens (items x longest) may
  // be at most this many times its real tokens; the items left out wait for
  // the next batch (the oldest item always goes, so alone if it must).
  // Default 1.15: on a CPU the cost of a pass is linear in padded tokens, so
  // padding is compute thrown away, while a smaller batch costs little more
  // per token (measured: docs/performance.md, row 7). 0 = no bound (the
  // largest batches the other limits allow).
  double max_padding_ratio = 1.15;
};

// Returns INVALID_ARGUMENT naming the field when an option is out of range.
absl::Status ValidateBatchPolicyOptions(const BatchPolicyOptions& options);

// What the policy needs to know about one queued item.
struct QueuedItemInfo {
  int64_t num_tokens = 0;  // real tokens (sequence length incl. specials)
  absl::Time enqueue_time;
  absl::Time deadline = absl::InfiniteFuture();
};

enum class BatchTrigger {
  kNone,  // no batch formed: wait
  kSize,
  kTokens,
  kDelay,
  kIdleWorker,  // max_queue_delay 0: an idle worker took what was there
  kFlush,
};
const char* BatchTriggerName(BatchTrigger trigger);

struct BatchDecision {
  // Indices into the input of items whose deadline has passed (deadline <=
  // now); ascending. Reported whether or not a batch is formed.
  std::vector<size_t> expired;
  // Indices into the input of the items of the batch, in queue order
  // (ascending). Empty when waiting.
  std::vector<size_t> batch;
  BatchTrigger trigger = BatchTrigger::kNone;
  // When `batch` is empty: decide again at this time at the latest (earlier
  // if the queue changes). InfiniteFuture() when nothing is left to wait for.
  absl::Time wait_until = absl::InfiniteFuture();
  // Padded tokens (size x longest) and real tokens of `batch`.
  int64_t padded_tokens = 0;
  int64_t real_tokens = 0;
};

// The pure decide function, asked by an idle worker. `items` is the queue,
// oldest first. An item whose deadline equals `now` counts as expired (it
// cannot be met, and a waiter woken exactly at the deadline must make
// progress).
BatchDecision DecideBatch(const BatchPolicyOptions& options,
                          const std::vector<QueuedItemInfo>& items,
                          absl::Time now, bool flush = false);

}  // namespace dserve
