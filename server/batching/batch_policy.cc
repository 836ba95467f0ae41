#include "server/batching/batch_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace dserve {
namespace {

struct Selection {
  std::vector<size_t> indices;  // into the policy input
  int64_t longest = 0;
  int64_t real_tokens = 0;
  // The padded-token budget (not the item cap or the padding bound) kept
  // candidates out of the batch.
  bool token_bound = false;
};

// Oldest items in queue order while they fit; the first always fits.
Selection SelectFifo(const BatchPolicyOptions& options,
                     const std::vector<QueuedItemInfo>& items,
                     const std::vector<size_t>& live) {
  Selection sel;
  for (size_t index : live) {
    const int64_t count = static_cast<int64_t>(sel.indices.size()) + 1;
    const int64_t longest = std::max(sel.longest, items[index].num_tokens);
    if (count > options.max_batch_size) break;
    if (count > 1 && count * longest > options.max_batch_tokens) {
      sel.token_bound = true;
      break;
    }
    sel.indices.push_back(index);
    sel.longest = longest;
    sel.real_tokens += items[index].num_tokens;
  }
  return sel;
}

// Sorts the window by length and takes the contiguous run containing the
// oldest candidate (window[0]) with the most items within the limits; ties go
// to the least padding, then to the older items. O(W log W).
Selection SelectPacked(const BatchPolicyOptions& options,
                       const std::vector<QueuedItemInfo>& items,
                       const std::vector<size_t>& window) {
  std::vector<size_t> sorted = window;
  std::stable_sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
    return items[a].num_tokens < items[b].num_tokens;
  });
  const size_t n = sorted.size();
  // The stable sort puts the oldest first among the items of its length;
  // items of equal length are interchangeable, so a run holds "the oldest"
  // when it holds any position in [first_eq, last_eq].
  const size_t first_eq =
      std::find(sorted.begin(), sorted.end(), window.front()) - sorted.begin();
  size_t last_eq = first_eq;
  while (last_eq + 1 < n && items[sorted[last_eq + 1]].num_tokens ==
                                items[sorted[first_eq]].num_tokens) {
    ++last_eq;
  }
  // Prefix sums of lengths and of queue positions (age tie-break).
  std::vector<int64_t> len_sum(n + 1, 0), pos_sum(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    len_sum[i + 1] = len_sum[i] + items[sorted[i]].num_tokens;
    pos_sum[i + 1] = pos_sum[i] + static_cast<int64_t>(sorted[i]);
  }
  // The run [l, r] within the padding bound? For a fixed r (the longest
  // item), lowering l adds an item no longer than the others, which raises
  // both the padding and the padded/real ratio: the admissible l form a
  // range [l*, r], found by binary search.
  auto padding_ok = [&](size_t l, size_t r) {
    if (options.max_padding_ratio <= 0) return true;
    const int64_t count = static_cast<int64_t>(r - l) + 1;
    const int64_t padded = count * items[sorted[r]].num_tokens;
    if (count == 1) return true;
    const int64_t real = len_sum[r + 1] - len_sum[l];
    return static_cast<double>(padded) <=
           options.max_padding_ratio * static_cast<double>(real);
  };

  size_t best_l = first_eq, best_r = first_eq;
  int64_t best_count = 0, best_padding = 0, best_pos = 0;
  bool best_token_bound = false;
  // The run [l, r] holds the oldest (l <= last_eq, r >= first_eq); its
  // longest item is sorted[r], so for a fixed r the most items is the cap,
  // reached with the smallest admissible l.
  for (size_t r = first_eq; r < n; ++r) {
    const int64_t longest = items[sorted[r]].num_tokens;
    const int64_t token_cap =
        options.max_batch_tokens / std::max<int64_t>(longest, 1);
    int64_t cap = std::min(options.max_batch_size, token_cap);
    if (r <= last_eq) cap = std::max<int64_t>(cap, 1);  // oversize goes alone
    const size_t l_max = std::min(r, last_eq);  // the shortest run ending at r
    const int64_t needed = static_cast<int64_t>(r - l_max) + 1;
    if (needed > cap) break;  // lengths only grow with r: no later r fits
    if (!padding_ok(l_max, r)) continue;  // a longer r may fit again
    const int64_t limit = std::min<int64_t>(cap, static_cast<int64_t>(r) + 1);
    // Smallest l in [r + 1 - limit, l_max] within the padding bound.
    size_t lo = r + 1 - static_cast<size_t>(limit), hi = l_max;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (padding_ok(mid, r)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    const size_t l = lo;
    const int64_t count = static_cast<int64_t>(r - l) + 1;
    const int64_t padding = count * longest - (len_sum[r + 1] - len_sum[l]);
    const int64_t pos = pos_sum[r + 1] - pos_sum[l];
    if (count > best_count || (count == best_count &&
                               (padding < best_padding ||
                                (padding == best_padding && pos < best_pos)))) {
      best_count = count;
      best_padding = padding;
      best_pos = pos;
      best_l = l;
      best_r = r;
      // The budget, not the item cap, set this run's size, and an item
      // could otherwise have joined it.
      best_token_bound = count == token_cap && token_cap < options.max_batch_size &&
                         static_cast<size_t>(count) < n;
    }
  }

  // A run that starts after the oldest's position holds an item of its
  // length in its place.
  if (best_l > first_eq) std::swap(sorted[best_l], sorted[first_eq]);
  Selection sel;
  sel.indices.assign(sorted.begin() + best_l, sorted.begin() + best_r + 1);
  std::sort(sel.indices.begin(), sel.indices.end());
  sel.longest = items[sorted[best_r]].num_tokens;
  sel.real_tokens = len_sum[best_r + 1] - len_sum[best_l];
  sel.token_bound = best_token_bound;
  return sel;
}

}  // namespace

absl::Status ValidateBatchPolicyOptions(const BatchPolicyOptions& options) {
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_size must be >= 1, got ", options.max_batch_size));
  }
  if (options.max_batch_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_tokens must be >= 1, got ", options.max_batch_tokens));
  }
  if (options.max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue_delay must be >= 0, got ",
                     absl::FormatDuration(options.max_queue_delay)));
  }
  if (options.max_padding_ratio != 0 && !(options.max_padding_ratio >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_padding_ratio must be 0 (no bound) or >= 1, got ",
        options.max_padding_ratio));
  }
  if (options.packing_window_items != 0 &&
      options.packing_window_items < options.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packing_window_items must be 0 (whole queue) or >= max_batch_size (",
        options.max_batch_size, "), got ", options.packing_window_items));
  }
  return absl::OkStatus();
}

const char* BatchTriggerName(BatchTrigger trigger) {
  switch (trigger) {
    case BatchTrigger::kNone:
      return "none";
    case BatchTrigger::kSize:
      return "size";
    case BatchTrigger::kTokens:
      return "tokens";
    case BatchTrigger::kDelay:
      return "delay";
    case BatchTrigger::kIdleWorker:
      return "idle_worker";
    case BatchTrigger::kFlush:
      return "flush";
  }
  return "unknown";
}

BatchDecision DecideBatch(const BatchPolicyOptions& options,
                          const std::vector<QueuedItemInfo>& items,
                          absl::Time now, bool flush) {
  BatchDecision decision;
  std::vector<size_t> live;
  live.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].deadline <= now) {
      decision.expired.push_back(i);
    } else {
      live.push_back(i);
    }
  }
  if (live.empty()) return decision;

  std::vector<size_t> candidates = live;
  if (options.packing && options.packing_window_items > 0 &&
      static_cast<int64_t>(candidates.size()) > options.packing_window_items) {
    candidates.resize(static_cast<size_t>(options.packing_window_items));
  }
  Selection sel = options.packing ? SelectPacked(options, items, candidates)
                                  : SelectFifo(options, items, live);
  const int64_t count = static_cast<int64_t>(sel.indices.size());
  const int64_t padded = count * sel.longest;
  const QueuedItemInfo& oldest = items[live.front()];
  const absl::Time delay_expiry = oldest.enqueue_time + options.max_queue_delay;

  BatchTrigger trigger = BatchTrigger::kNone;
  if (count >= options.max_batch_size) {
    trigger = BatchTrigger::kSize;
  } else if (sel.token_bound || padded >= options.max_batch_tokens) {
    trigger = BatchTrigger::kTokens;
  } else if (options.max_queue_delay == absl::ZeroDuration()) {
    trigger = BatchTrigger::kIdleWorker;
  } else if (now >= delay_expiry) {
    trigger = BatchTrigger::kDelay;
  } else if (flush) {
    trigger = BatchTrigger::kFlush;
  }

  if (trigger == BatchTrigger::kNone) {
    absl::Time wake = delay_expiry;
    for (size_t index : live) wake = std::min(wake, items[index].deadline);
    decision.wait_until = wake;
    return decision;
  }
  decision.trigger = trigger;
  decision.batch = std::move(sel.indices);
  decision.padded_tokens = padded;
  decision.real_tokens = sel.real_tokens;
  return decision;
}

}  // namespace dserve
