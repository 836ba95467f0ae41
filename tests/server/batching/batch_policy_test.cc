#include "server/batching/batch_policy.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dserve {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

QueuedItemInfo Item(int64_t tokens, absl::Time enqueued = kT0,
                    absl::Time deadline = absl::InfiniteFuture()) {
  return QueuedItemInfo{tokens, enqueued, deadline};
}

BatchPolicyOptions Options(int64_t size, int64_t tokens, bool packing) {
  BatchPolicyOptions options;
  options.max_batch_size = size;
  options.max_batch_tokens = tokens;
  options.max_queue_delay = absl::Milliseconds(10);
  options.packing = packing;
  // The padding bound has its own tests (PaddingBound*); the others check
  // the rules before it.
  options.max_padding_ratio = 0;
  return options;
}

// As asked by an idle worker with max_queue_delay 0: what is there goes at
// once (the selection rules, without waiting).
BatchDecision DecideIdle(BatchPolicyOptions options,
                         const std::vector<QueuedItemInfo>& items,
                         absl::Time now) {
  options.max_queue_delay = absl::ZeroDuration();
  return DecideBatch(options, items, now);
}

class BatchPolicyTest : public ::testing::TestWithParam<bool> {
 protected:
  bool packing() const { return GetParam(); }
};

TEST_P(BatchPolicyTest, SizeTriggerFormsFullBatch) {
  const auto options = Options(4, 1 << 20, packing());
  std::vector<QueuedItemInfo> items(5, Item(16));
  const BatchDecision d =
      DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kSize);
  EXPECT_THAT(d.batch, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(d.padded_tokens, 64);
  EXPECT_EQ(d.real_tokens, 64);
  EXPECT_THAT(d.expired, IsEmpty());
}

TEST_P(BatchPolicyTest, FewerThanSizeWaitsForOldestDelay) {
  const auto options = Options(4, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {Item(16, kT0),
                                       Item(16, kT0 + absl::Milliseconds(3))};
  BatchDecision d = DecideBatch(options, items, kT0 + absl::Milliseconds(4));
  EXPECT_EQ(d.trigger, BatchTrigger::kNone);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(10));  // oldest + delay

  // Just before: still waiting; at oldest + delay: the delay trigger.
  d = DecideBatch(options, items,
                  kT0 + absl::Milliseconds(10) - absl::Nanoseconds(1));
  EXPECT_THAT(d.batch, IsEmpty());
  d = DecideBatch(options, items, kT0 + absl::Milliseconds(10));
  EXPECT_EQ(d.trigger, BatchTrigger::kDelay);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
}

TEST_P(BatchPolicyTest, TokenBudgetTrigger) {
  // 3 x 30 = 90 fits 100; a fourth item would pad to 120.
  const auto options = Options(32, 100, packing());
  std::vector<QueuedItemInfo> items(4, Item(30));
  const BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0, 1, 2));
  EXPECT_EQ(d.padded_tokens, 90);
  EXPECT_LE(d.padded_tokens, options.max_batch_tokens);
}

TEST_P(BatchPolicyTest, TokenBudgetReachedExactly) {
  const auto options = Options(32, 100, packing());
  std::vector<QueuedItemInfo> items = {Item(50), Item(40)};
  const BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
  EXPECT_EQ(d.padded_tokens, 100);
  EXPECT_EQ(d.real_tokens, 90);
}

// Issue 16, defect 1 (Triton's max_queue_delay): with a delay, an idle
// worker waits for companions; with 0 it takes what is there at once.
TEST_P(BatchPolicyTest, IdleWorkerWaitsForTheDelayUnlessItIsZero) {
  auto options = Options(32, 1 << 20, packing());  // delay 10 ms
  std::vector<QueuedItemInfo> items = {Item(7)};
  BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kNone);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(10));

  options.max_queue_delay = absl::ZeroDuration();
  d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kIdleWorker);
  EXPECT_THAT(d.batch, ElementsAre(0));
}

TEST_P(BatchPolicyTest, FlushTakesWhatIsThere) {
  auto options = Options(32, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {Item(7), Item(9)};
  const BatchDecision d =
      DecideBatch(options, items, kT0, /*flush=*/true);
  EXPECT_EQ(d.trigger, BatchTrigger::kFlush);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
}

TEST_P(BatchPolicyTest, ExpiredItemsAreDroppedNotBatched) {
  const auto options = Options(32, 1 << 20, packing());
  const absl::Time now = kT0 + absl::Milliseconds(5);
  std::vector<QueuedItemInfo> items = {
      Item(10, kT0, kT0 + absl::Milliseconds(1)),  // expired
      Item(10, kT0, now),                          // expires exactly now
      Item(10, kT0, now + absl::Seconds(1)), Item(10, kT0)};
  const BatchDecision d = DecideIdle(options, items, now);
  EXPECT_THAT(d.expired, ElementsAre(0, 1));
  EXPECT_THAT(d.batch, ElementsAre(2, 3));
}

TEST_P(BatchPolicyTest, AllExpiredNothingToWaitFor) {
  const auto options = Options(32, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {Item(10, kT0, kT0)};
  const BatchDecision d = DecideIdle(options, items, kT0);
  EXPECT_THAT(d.expired, ElementsAre(0));
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, absl::InfiniteFuture());
}

TEST_P(BatchPolicyTest, WaitsUntilEarliestDeadlineWhenBeforeDelay) {
  const auto options = Options(32, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {
      Item(10, kT0), Item(10, kT0, kT0 + absl::Milliseconds(3))};
  const BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(3));
}

TEST_P(BatchPolicyTest, EmptyQueueWaitsForever) {
  const BatchDecision d = DecideIdle(Options(4, 100, packing()), {}, kT0);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, absl::InfiniteFuture());
}

TEST_P(BatchPolicyTest, OversizeItemGoesAlone) {
  const auto options = Options(32, 100, packing());
  std::vector<QueuedItemInfo> items = {Item(500), Item(10), Item(10)};
  BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0));
  EXPECT_EQ(d.padded_tokens, 500);

  // Alone in the queue it still goes at once: the budget is already reached.
  d = DecideBatch(options, {Item(500)}, kT0);
  EXPECT_THAT(d.batch, ElementsAre(0));

  // When it is not the oldest it never joins a batch of others: packing
  // skips it, FIFO stops in front of it.
  d = DecideIdle(options, {Item(10), Item(500), Item(10)}, kT0);
  if (packing()) {
    EXPECT_THAT(d.batch, ElementsAre(0, 2));
  } else {
    EXPECT_THAT(d.batch, ElementsAre(0));
  }
}

INSTANTIATE_TEST_SUITE_P(PackingOnOff, BatchPolicyTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Packing" : "Fifo";
                         });

TEST(BatchPolicyFifoTest, KeepsQueueOrderAndStopsAtFirstMisfit) {
  const auto options = Options(32, 100, /*packing=*/false);
  std::vector<QueuedItemInfo> items = {Item(10), Item(90), Item(10)};
  const BatchDecision d = DecideIdle(options, items, kT0);
  EXPECT_THAT(d.batch, ElementsAre(0));  // 2 x 90 > 100: FIFO stops
}

TEST(BatchPolicyPackingTest, GroupsSimilarLengthsAroundOldest) {
  const auto options = Options(3, 1 << 20, /*packing=*/true);
  // Oldest is 100 long; the two closest lengths are 98 and 103.
  std::vector<QueuedItemInfo> items = {Item(100), Item(10),  Item(98),
                                       Item(250), Item(103), Item(12)};
  const BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kSize);
  EXPECT_THAT(d.batch, ElementsAre(0, 2, 4));
  EXPECT_EQ(d.padded_tokens, 3 * 103);
  EXPECT_EQ(d.real_tokens, 301);
}

TEST(BatchPolicyPackingTest, OldestAlwaysIncluded) {
  // A long oldest item among many short ones still goes first, even though
  // a batch of short items would hold more.
  const auto options = Options(8, 1000, /*packing=*/true);
  std::vector<QueuedItemInfo> items = {Item(400)};
  for (int i = 0; i < 20; ++i) items.push_back(Item(10));
  const BatchDecision d = DecideIdle(options, items, kT0);
  ASSERT_FALSE(d.batch.empty());
  EXPECT_EQ(d.batch.front(), 0u);
  EXPECT_LE(d.padded_tokens, 1000);
  EXPECT_EQ(d.batch.size(), 2u);  // 2 x 400 <= 1000 < 3 x 400
}

TEST(BatchPolicyPackingTest, BudgetPicksMoreShortItems) {
  // Oldest is 20; with a 100-token budget the best run is 5 items of <= 20,
  // not 2 items that include the 50.
  const auto options = Options(32, 100, /*packing=*/true);
  std::vector<QueuedItemInfo> items = {Item(20), Item(50), Item(18), Item(19),
                                       Item(20), Item(17), Item(50)};
  const BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0, 2, 3, 4, 5));
  EXPECT_EQ(d.padded_tokens, 100);
}

TEST(BatchPolicyPackingTest, WindowLimitsCandidates) {
  auto options = Options(2, 1 << 20, /*packing=*/true);
  options.packing_window_items = 2;
  // The perfect partner (index 2) lies outside the 2-item window.
  std::vector<QueuedItemInfo> items = {Item(100), Item(10), Item(100)};
  BatchDecision d = DecideBatch(options, items, kT0);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
  options.packing_window_items = 0;
  d = DecideBatch(options, items, kT0);
  EXPECT_THAT(d.batch, ElementsAre(0, 2));
}

struct PaddingResult {
  double ratio = 0;              // padded / real over all batches
  int64_t max_wait_batches = 0;  // most batches any item waited for
  int64_t served = 0;
};

// Steady load: the queue is topped up to `depth` items of uniform random
// length in [8, 256] before every decision (a busy server), and a worker
// takes a batch each time.
PaddingResult SimulateMixedLoad(bool packing, int depth, int batches) {
  BatchPolicyOptions options = Options(32, 4096, packing);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int64_t> length(8, 256);
  struct Queued {
    QueuedItemInfo info;
    int64_t arrival_batch;
  };
  std::deque<Queued> queue;
  int64_t seq = 0;
  PaddingResult result;
  int64_t padded = 0, real = 0;
  for (int b = 0; b < batches; ++b) {
    while (static_cast<int>(queue.size()) < depth) {
      queue.push_back({Item(length(rng), kT0 + absl::Microseconds(seq++)), b});
    }
    std::vector<QueuedItemInfo> infos;
    for (const auto& q : queue) infos.push_back(q.info);
    const BatchDecision d =
        DecideIdle(options, infos, kT0);
    EXPECT_FALSE(d.batch.empty());
    EXPECT_EQ(d.batch.front(), 0u);  // the oldest always goes
    EXPECT_LE(d.padded_tokens, options.max_batch_tokens);
    padded += d.padded_tokens;
    real += d.real_tokens;
    for (auto it = d.batch.rbegin(); it != d.batch.rend(); ++it) {
      result.max_wait_batches =
          std::max(result.max_wait_batches, b - queue[*it].arrival_batch);
      queue.erase(queue.begin() + static_cast<long>(*it));
      ++result.served;
    }
  }
  result.ratio = static_cast<double>(padded) / static_cast<double>(real);
  return result;
}

TEST(BatchPolicyPackingTest, PackingCutsPaddingOnMixedLengths) {
  const PaddingResult fifo = SimulateMixedLoad(false, 256, 2000);
  const PaddingResult packed = SimulateMixedLoad(true, 256, 2000);
  RecordProperty("fifo_padded_over_real", std::to_string(fifo.ratio));
  RecordProperty("packed_padded_over_real", std::to_string(packed.ratio));
  std::printf("padded/real: fifo %.3f, packed %.3f (max wait %lld batches)\n",
              fifo.ratio, packed.ratio,
              static_cast<long long>(packed.max_wait_batches));
  EXPECT_LT(packed.ratio, fifo.ratio);
  EXPECT_LE(packed.ratio, 1.15);
  EXPECT_GT(fifo.ratio, 1.5);  // the workload really is mixed
  // No starvation: every item is served within depth batches of arriving
  // (each batch takes the oldest item).
  EXPECT_LE(packed.max_wait_batches, 256);
}

TEST(BatchPolicyPackingTest, PaddingBoundLeavesMisfitsForTheNextBatch) {
  auto options = Options(32, 1 << 20, /*packing=*/true);
  options.max_padding_ratio = BatchPolicyOptions().max_padding_ratio;  // 1.15
  // Oldest is 100: the 10s would make 5 x 100 = 500 padded for 320 real.
  std::vector<QueuedItemInfo> items = {Item(100), Item(10), Item(10),
                                       Item(105), Item(98)};
  BatchDecision d = DecideIdle(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kIdleWorker);
  EXPECT_THAT(d.batch, ElementsAre(0, 3, 4));
  EXPECT_EQ(d.padded_tokens, 3 * 105);
  EXPECT_EQ(d.real_tokens, 303);
  // Left-out items are not a token-budget trigger: with a queue delay the
  // batch waits for companions until the oldest's delay.
  d = DecideBatch(options, items, kT0);
  EXPECT_EQ(d.trigger, BatchTrigger::kNone);
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(10));
  // No bound: everything goes together.
  options.max_padding_ratio = 0;
  d = DecideIdle(options, items, kT0);
}

TEST(BatchPolicyPackingTest, ShortOldestAmongLongOnesGoesAlone) {
  auto options = Options(32, 1 << 20, /*packing=*/true);
  options.max_padding_ratio = 1.15;
  const std::vector<QueuedItemInfo> items = {Item(10), Item(200), Item(210)};
  const BatchDecision d = DecideIdle(options, items, kT0);
  EXPECT_THAT(d.batch, ElementsAre(0));
  EXPECT_EQ(d.padded_tokens, 10);
}

// Brute force over every contiguous run (in length order) that holds the
// oldest item: the policy's batch has the most items any admissible run has,
// and is itself admissible.
TEST(BatchPolicyPackingTest, PaddingBoundMatchesBruteForce) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 2000; ++trial) {
    auto options = Options(1 + rng() % 12, 64 + rng() % 2000, true);
    options.max_padding_ratio = 1.0 + (rng() % 60) / 100.0;
    const int n = 1 + static_cast<int>(rng() % 16);
    std::vector<QueuedItemInfo> items;
    for (int i = 0; i < n; ++i) items.push_back(Item(1 + rng() % 300));
    std::vector<int64_t> sorted;
    for (const auto& item : items) sorted.push_back(item.num_tokens);
    std::sort(sorted.begin(), sorted.end());
    auto admissible = [&](int64_t count, int64_t longest, int64_t real) {
      if (count > options.max_batch_size) return false;
      if (count > 1 && count * longest > options.max_batch_tokens) return false;
      return count == 1 || count * longest <= options.max_padding_ratio * real;
    };
    // Equal lengths are interchangeable, so "holds the oldest" = the run
    // covers one position of the oldest's length.
    const int64_t oldest = items[0].num_tokens;
    int64_t most = 1;
    for (int l = 0; l < n; ++l) {
      int64_t real = 0;
      for (int r = l; r < n; ++r) {
        real += sorted[r];
        if (sorted[l] > oldest || sorted[r] < oldest) continue;
        if (admissible(r - l + 1, sorted[r], real)) most = std::max<int64_t>(most, r - l + 1);
      }
    }
    const BatchDecision d = DecideIdle(options, items, kT0);
    ASSERT_FALSE(d.batch.empty());
    EXPECT_EQ(d.batch.front(), 0u);
    const auto count = static_cast<int64_t>(d.batch.size());
    int64_t longest = 0, real = 0;
    for (size_t i : d.batch) {
      longest = std::max(longest, items[i].num_tokens);
      real += items[i].num_tokens;
    }
    EXPECT_TRUE(admissible(count, longest, real) || count == 1) << "trial " << trial;
    EXPECT_EQ(count, most) << "trial " << trial;
    EXPECT_EQ(d.padded_tokens, count * longest);
    EXPECT_EQ(d.real_tokens, real);
  }
}

// A busy server with one worker and 64 closed-loop clients keeps about half
// of them queued: the window packing chooses from is small, and without a
// padding bound almost every batch spans the whole 8-256 range.
TEST(BatchPolicyPackingTest, PaddingBoundHoldsOnAShallowQueue) {
  auto bounded = Options(32, 8192, true);
  bounded.max_padding_ratio = BatchPolicyOptions().max_padding_ratio;
  auto unbounded = bounded;
  unbounded.max_padding_ratio = 0;
  std::mt19937 rng(4321);
  std::uniform_int_distribution<int64_t> length(8, 256);
  int64_t padded[2] = {0, 0}, real[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const auto& options = which == 0 ? bounded : unbounded;
    std::deque<QueuedItemInfo> queue;
    for (int b = 0; b < 2000; ++b) {
      while (queue.size() < 32) queue.push_back(Item(length(rng)));
      const std::vector<QueuedItemInfo> infos(queue.begin(), queue.end());
      const BatchDecision d = DecideIdle(options, infos, kT0);
      ASSERT_FALSE(d.batch.empty());
      padded[which] += d.padded_tokens;
      real[which] += d.real_tokens;
      for (auto it = d.batch.rbegin(); it != d.batch.rend(); ++it) {
        queue.erase(queue.begin() + static_cast<long>(*it));
      }
    }
  }
  const double bounded_ratio = static_cast<double>(padded[0]) / real[0];
  const double unbounded_ratio = static_cast<double>(padded[1]) / real[1];
  std::printf("queue depth 32: padded/real %.3f bounded, %.3f unbounded\n",
              bounded_ratio, unbounded_ratio);
  EXPECT_LE(bounded_ratio, 1.15);
  EXPECT_GT(unbounded_ratio, 1.3);
}

TEST(BatchPolicyOptionsTest, Validation) {
  BatchPolicyOptions options;
  EXPECT_TRUE(ValidateBatchPolicyOptions(options).ok());
  options.max_batch_size = 0;
  EXPECT_EQ(ValidateBatchPolicyOptions(options).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ValidateBatchPolicyOptions(options).message()),
              ::testing::HasSubstr("max_batch_size"));
  options = BatchPolicyOptions();
  options.max_batch_tokens = 0;
  EXPECT_FALSE(ValidateBatchPolicyOptions(options).ok());
  options = BatchPolicyOptions();
  options.max_queue_delay = absl::Milliseconds(-1);
  EXPECT_FALSE(ValidateBatchPolicyOptions(options).ok());
  options = BatchPolicyOptions();
  options.packing_window_items = options.max_batch_size - 1;
  EXPECT_FALSE(ValidateBatchPolicyOptions(options).ok());
  options = BatchPolicyOptions();
  options.max_padding_ratio = 0.9;
  EXPECT_THAT(std::string(ValidateBatchPolicyOptions(options).message()),
              ::testing::HasSubstr("max_padding_ratio"));
  options.max_padding_ratio = 0;
  EXPECT_TRUE(ValidateBatchPolicyOptions(options).ok());
}

}  // namespace
}  // namespace dserve
