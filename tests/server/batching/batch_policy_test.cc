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
  return options;
}

class BatchPolicyTest : public ::testing::TestWithParam<bool> {
 protected:
  bool packing() const { return GetParam(); }
};

TEST_P(BatchPolicyTest, SizeTriggerFormsFullBatch) {
  const auto options = Options(4, 1 << 20, packing());
  std::vector<QueuedItemInfo> items(5, Item(16));
  const BatchDecision d =
      DecideBatch(options, items, kT0, /*worker_idle=*/false);
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
  BatchDecision d = DecideBatch(options, items, kT0 + absl::Milliseconds(4),
                                /*worker_idle=*/false);
  EXPECT_EQ(d.trigger, BatchTrigger::kNone);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(10));  // oldest + delay

  // Just before: still waiting; at oldest + delay: the delay trigger.
  d = DecideBatch(options, items,
                  kT0 + absl::Milliseconds(10) - absl::Nanoseconds(1), false);
  EXPECT_THAT(d.batch, IsEmpty());
  d = DecideBatch(options, items, kT0 + absl::Milliseconds(10), false);
  EXPECT_EQ(d.trigger, BatchTrigger::kDelay);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
}

TEST_P(BatchPolicyTest, TokenBudgetTrigger) {
  // 3 x 30 = 90 fits 100; a fourth item would pad to 120.
  const auto options = Options(32, 100, packing());
  std::vector<QueuedItemInfo> items(4, Item(30));
  const BatchDecision d = DecideBatch(options, items, kT0, false);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0, 1, 2));
  EXPECT_EQ(d.padded_tokens, 90);
  EXPECT_LE(d.padded_tokens, options.max_batch_tokens);
}

TEST_P(BatchPolicyTest, TokenBudgetReachedExactly) {
  const auto options = Options(32, 100, packing());
  std::vector<QueuedItemInfo> items = {Item(50), Item(40)};
  const BatchDecision d = DecideBatch(options, items, kT0, false);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
  EXPECT_EQ(d.padded_tokens, 100);
  EXPECT_EQ(d.real_tokens, 90);
}

TEST_P(BatchPolicyTest, IdleWorkerTakesWhatIsThere) {
  auto options = Options(32, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {Item(7)};
  BatchDecision d = DecideBatch(options, items, kT0, /*worker_idle=*/true);
  EXPECT_EQ(d.trigger, BatchTrigger::kIdleWorker);
  EXPECT_THAT(d.batch, ElementsAre(0));

  d = DecideBatch(options, items, kT0, /*worker_idle=*/false);
  EXPECT_THAT(d.batch, IsEmpty());

  options.dispatch_when_worker_idle = false;
  d = DecideBatch(options, items, kT0, /*worker_idle=*/true);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(10));
}

TEST_P(BatchPolicyTest, FlushTakesWhatIsThere) {
  auto options = Options(32, 1 << 20, packing());
  options.dispatch_when_worker_idle = false;
  std::vector<QueuedItemInfo> items = {Item(7), Item(9)};
  const BatchDecision d =
      DecideBatch(options, items, kT0, /*worker_idle=*/true, /*flush=*/true);
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
  const BatchDecision d =
      DecideBatch(options, items, now, /*worker_idle=*/true);
  EXPECT_THAT(d.expired, ElementsAre(0, 1));
  EXPECT_THAT(d.batch, ElementsAre(2, 3));
}

TEST_P(BatchPolicyTest, AllExpiredNothingToWaitFor) {
  const auto options = Options(32, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {Item(10, kT0, kT0)};
  const BatchDecision d = DecideBatch(options, items, kT0, true);
  EXPECT_THAT(d.expired, ElementsAre(0));
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, absl::InfiniteFuture());
}

TEST_P(BatchPolicyTest, WaitsUntilEarliestDeadlineWhenBeforeDelay) {
  const auto options = Options(32, 1 << 20, packing());
  std::vector<QueuedItemInfo> items = {
      Item(10, kT0), Item(10, kT0, kT0 + absl::Milliseconds(3))};
  const BatchDecision d = DecideBatch(options, items, kT0, false);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, kT0 + absl::Milliseconds(3));
}

TEST_P(BatchPolicyTest, EmptyQueueWaitsForever) {
  const BatchDecision d =
      DecideBatch(Options(4, 100, packing()), {}, kT0, true);
  EXPECT_THAT(d.batch, IsEmpty());
  EXPECT_EQ(d.wait_until, absl::InfiniteFuture());
}

TEST_P(BatchPolicyTest, OversizeItemGoesAlone) {
  const auto options = Options(32, 100, packing());
  std::vector<QueuedItemInfo> items = {Item(500), Item(10), Item(10)};
  BatchDecision d = DecideBatch(options, items, kT0, false);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0));
  EXPECT_EQ(d.padded_tokens, 500);

  // Alone in the queue it still goes at once: the budget is already reached.
  d = DecideBatch(options, {Item(500)}, kT0, false);
  EXPECT_THAT(d.batch, ElementsAre(0));

  // When it is not the oldest it never joins a batch of others: packing
  // skips it, FIFO stops in front of it.
  d = DecideBatch(options, {Item(10), Item(500), Item(10)}, kT0, true);
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
  const BatchDecision d = DecideBatch(options, items, kT0, true);
  EXPECT_THAT(d.batch, ElementsAre(0));  // 2 x 90 > 100: FIFO stops
}

TEST(BatchPolicyPackingTest, GroupsSimilarLengthsAroundOldest) {
  const auto options = Options(3, 1 << 20, /*packing=*/true);
  // Oldest is 100 long; the two closest lengths are 98 and 103.
  std::vector<QueuedItemInfo> items = {Item(100), Item(10),  Item(98),
                                       Item(250), Item(103), Item(12)};
  const BatchDecision d = DecideBatch(options, items, kT0, false);
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
  const BatchDecision d = DecideBatch(options, items, kT0, true);
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
  const BatchDecision d = DecideBatch(options, items, kT0, false);
  EXPECT_EQ(d.trigger, BatchTrigger::kTokens);
  EXPECT_THAT(d.batch, ElementsAre(0, 2, 3, 4, 5));
  EXPECT_EQ(d.padded_tokens, 100);
}

TEST(BatchPolicyPackingTest, WindowLimitsCandidates) {
  auto options = Options(2, 1 << 20, /*packing=*/true);
  options.packing_window_items = 2;
  // The perfect partner (index 2) lies outside the 2-item window.
  std::vector<QueuedItemInfo> items = {Item(100), Item(10), Item(100)};
  BatchDecision d = DecideBatch(options, items, kT0, false);
  EXPECT_THAT(d.batch, ElementsAre(0, 1));
  options.packing_window_items = 0;
  d = DecideBatch(options, items, kT0, false);
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
        DecideBatch(options, infos, kT0, /*worker_idle=*/true);
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
}

}  // namespace
}  // namespace dserve
