#include "server/batching/scheduler.h"

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batching/clock.h"

namespace dserve {
namespace {

using ::testing::HasSubstr;
using IntScheduler = Scheduler<int, int>;
using IntTask = IntScheduler::TaskType;

// Counts everything the scheduler reports.
class CountingObserver : public SchedulerObserver {
 public:
  void OnBatch(const BatchStats& stats) override {
    absl::MutexLock lock(&mu_);
    ++batches_;
    items_ += stats.size;
    padded_tokens_ += stats.padded_tokens;
    real_tokens_ += stats.real_tokens;
    EXPECT_EQ(static_cast<int64_t>(stats.queue_waits.size()), stats.size);
    for (absl::Duration wait : stats.queue_waits) waits_.push_back(wait);
    last_trigger_ = stats.trigger;
  }
  void OnRejected(RejectReason reason, int64_t count) override {
    absl::MutexLock lock(&mu_);
    rejected_[RejectReasonName(reason)] += count;
  }
  void OnQueueDepth(int64_t depth) override {
    depth_.store(depth, std::memory_order_relaxed);
  }

  int64_t batches() const {
    absl::MutexLock l(&mu_);
    return batches_;
  }
  int64_t items() const {
    absl::MutexLock l(&mu_);
    return items_;
  }
  int64_t padded_tokens() const {
    absl::MutexLock l(&mu_);
    return padded_tokens_;
  }
  int64_t real_tokens() const {
    absl::MutexLock l(&mu_);
    return real_tokens_;
  }
  std::vector<absl::Duration> waits() const {
    absl::MutexLock l(&mu_);
    return waits_;
  }
  BatchTrigger last_trigger() const {
    absl::MutexLock l(&mu_);
    return last_trigger_;
  }
  int64_t rejected(const std::string& reason) const {
    absl::MutexLock l(&mu_);
    auto it = rejected_.find(reason);
    return it == rejected_.end() ? 0 : it->second;
  }
  int64_t depth() const { return depth_.load(std::memory_order_relaxed); }

 private:
  mutable absl::Mutex mu_;
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t items_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t padded_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t real_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<absl::Duration> waits_ ABSL_GUARDED_BY(mu_);
  BatchTrigger last_trigger_ ABSL_GUARDED_BY(mu_) = BatchTrigger::kNone;
  std::map<std::string, int64_t> rejected_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> depth_{0};
};

// Records how each task was completed (thread-safe).
class Outcomes {
 public:
  explicit Outcomes(int n) : calls_(n), codes_(n), values_(n) {
    for (auto& c : calls_) c = 0;
  }
  // A task with payload `id` whose completion is recorded here.
  IntTask Make(int id, int64_t tokens = 10,
               absl::Time deadline = absl::InfiniteFuture(),
               CancelFlag cancelled = nullptr) {
    IntTask task;
    task.num_tokens = tokens;
    task.deadline = deadline;
    task.cancelled = std::move(cancelled);
    task.payload = id;
    task.done = [this, id](absl::StatusOr<int> result) {
      codes_[id] = result.status().code();
      values_[id] = result.ok() ? *result : -1;
      calls_[id].fetch_add(1);
    };
    return task;
  }
  int calls(int id) const { return calls_[id].load(); }
  absl::StatusCode code(int id) const { return codes_[id]; }
  int value(int id) const { return values_[id]; }

 private:
  std::vector<std::atomic<int>> calls_;
  std::vector<absl::StatusCode> codes_;  // written before calls_ (release)
  std::vector<int> values_;
};

// Completes every item with payload * 2.
void CompleteAll(IntScheduler::BatchType& batch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_TRUE(batch.Complete(i, batch.payload(i) * 2));
  }
}

// Tests declare their Outcomes before the scheduler: the scheduler's
// destructor completes what is still queued, which writes to them.
class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerOptions Options() {
    SchedulerOptions options;
    options.name = "test-model";
    options.clock = &clock_;
    options.observer = observer_;
    options.max_queue_items = 1024;
    options.policy.max_batch_size = 8;
    options.policy.max_batch_tokens = 1 << 20;
    options.policy.max_queue_delay = absl::Milliseconds(10);
    return options;
  }
  std::unique_ptr<IntScheduler> Make(SchedulerOptions options) {
    auto scheduler = IntScheduler::Create(std::move(options));
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return *std::move(scheduler);
  }

  FakeClock clock_;
  std::shared_ptr<CountingObserver> observer_ =
      std::make_shared<CountingObserver>();
};

TEST_F(SchedulerTest, CreateRejectsBadOptions) {
  SchedulerOptions options = Options();
  options.max_queue_items = 0;
  auto bad = IntScheduler::Create(options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("max_queue_items"));
  options = Options();
  options.policy.max_batch_size = 0;
  EXPECT_FALSE(IntScheduler::Create(options).ok());
}

TEST_F(SchedulerTest, BoundedQueueRejectsWhenFullAndAcceptsAfterBatch) {
  SchedulerOptions options = Options();
  options.max_queue_items = 4;
  options.policy.max_batch_size = 2;
  Outcomes out(9);
  auto scheduler = Make(options);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  EXPECT_EQ(scheduler->queue_depth(), 4);
  EXPECT_EQ(observer_->depth(), 4);

  absl::Status full = scheduler->Enqueue(out.Make(4));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("max_queue_items=4"));
  EXPECT_EQ(out.calls(4), 0);  // rejected tasks are never completed
  EXPECT_EQ(observer_->rejected("queue_full"), 1);

  // A batch taken makes room again.
  auto batch = scheduler->NextBatch();  // size trigger: takes 2
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size(), 2u);
  EXPECT_EQ(scheduler->queue_depth(), 2);
  EXPECT_EQ(scheduler->inflight_items(), 2);
  ASSERT_TRUE(scheduler->Enqueue(out.Make(5)).ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(6)).ok());
  // All-or-nothing: a request refused when full queues none of its items.
  std::vector<IntTask> two;
  two.push_back(out.Make(7));
  two.push_back(out.Make(8));
  EXPECT_EQ(scheduler->EnqueueAll(std::move(two)).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(scheduler->queue_depth(), 4);
  EXPECT_EQ(observer_->rejected("queue_full"), 3);
  CompleteAll(*batch);
  EXPECT_EQ(scheduler->inflight_items(), 0);
  EXPECT_EQ(out.calls(0), 1);
  EXPECT_EQ(out.value(0), 0);
  EXPECT_EQ(out.value(1), 2);
  EXPECT_EQ(out.calls(7) + out.calls(8), 0);
  scheduler->Shutdown(/*drain=*/false, absl::ZeroDuration()).IgnoreError();
  for (int id : {2, 3, 5, 6}) {
    EXPECT_EQ(out.calls(id), 1);
    EXPECT_EQ(out.code(id), absl::StatusCode::kUnavailable);
  }
}

// Issue 16, defect 2: the server asks CheckAdmission before it tokenizes a
// request, so what Enqueue would refuse (queue full, deadline past, shut
// down) is refused without that work; stale items are purged first, as in
// Enqueue, so they never make a request look refused.
TEST_F(SchedulerTest, CheckAdmissionRefusesWhatEnqueueWouldBeforeAnyItemExists) {
  SchedulerOptions options = Options();
  options.max_queue_items = 2;
  Outcomes out(4);
  auto scheduler = Make(options);
  const absl::Time later = clock_.Now() + absl::Seconds(10);
  EXPECT_TRUE(scheduler->CheckAdmission(later).ok());
  EXPECT_EQ(scheduler->CheckAdmission(clock_.Now()).code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(observer_->rejected("deadline"), 1);

  ASSERT_TRUE(scheduler->Enqueue(out.Make(0)).ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(1, 10, clock_.Now() + absl::Seconds(1))).ok());
  absl::Status full = scheduler->CheckAdmission(later);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("max_queue_items=2"));
  EXPECT_EQ(observer_->rejected("queue_full"), 1);
  EXPECT_EQ(scheduler->queue_depth(), 2);

  // Item 1 expires: CheckAdmission purges it (DEADLINE_EXCEEDED) and admits.
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(scheduler->CheckAdmission(clock_.Now() + absl::Seconds(10)).ok());
  EXPECT_EQ(out.calls(1), 1);
  EXPECT_EQ(out.code(1), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(scheduler->queue_depth(), 1);

  scheduler->Shutdown(/*drain=*/false, absl::ZeroDuration()).IgnoreError();
  const int64_t draining = observer_->rejected("draining");
  EXPECT_EQ(scheduler->CheckAdmission(clock_.Now() + absl::Seconds(10)).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(observer_->rejected("draining"), draining + 1);
}

// Issue 16, defect 3: a request is admitted whenever the queue has room for
// one more item, whatever its size, so a big request is refused under the
// same condition as a small one and is not starved by a stream of small ones
// keeping the queue nearly full. Its items then go in arrival order.
TEST_F(SchedulerTest, BigRequestIsAdmittedWheneverTheQueueHasRoom) {
  SchedulerOptions options = Options();
  options.max_queue_items = 4;
  options.policy.max_batch_size = 2;
  options.policy.packing = false;
  Outcomes out(9);
  auto scheduler = Make(options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  std::vector<IntTask> big;
  for (int i = 3; i < 7; ++i) big.push_back(out.Make(i));
  absl::Status s = scheduler->EnqueueAll(std::move(big));
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(scheduler->queue_depth(), 7);
  // Now full (7 >= 4): the next request waits for room like any other.
  absl::Status full = scheduler->Enqueue(out.Make(7));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_THAT(std::string(full.message()), HasSubstr("max_queue_items=4"));
  std::vector<int> order;
  for (int b = 0; b < 3; ++b) {
    auto batch = scheduler->NextBatch();
    ASSERT_TRUE(batch.has_value());
    for (size_t i = 0; i < batch->size(); ++i) order.push_back(batch->payload(i));
    CompleteAll(*batch);
  }
  // Room again (1 queued): a small request is admitted after the big one.
  ASSERT_TRUE(scheduler->Enqueue(out.Make(8)).ok());
  auto last = scheduler->NextBatch();
  ASSERT_TRUE(last.has_value());
  for (size_t i = 0; i < last->size(); ++i) order.push_back(last->payload(i));
  CompleteAll(*last);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 8}));
  for (int id : {0, 1, 2, 3, 4, 5, 6, 8}) EXPECT_EQ(out.code(id), absl::StatusCode::kOk) << id;
  EXPECT_EQ(out.calls(7), 0);
}

// Issue 16, defect 3: a request with more items than the queue can ever hold
// is INVALID_ARGUMENT naming the limit (RESOURCE_EXHAUSTED made clients retry
// it forever).
TEST_F(SchedulerTest, RequestLargerThanTheQueueIsInvalid) {
  SchedulerOptions options = Options();
  options.max_queue_items = 4;
  Outcomes out(5);
  auto scheduler = Make(options);
  std::vector<IntTask> huge;
  for (int i = 0; i < 5; ++i) huge.push_back(out.Make(i));
  absl::Status s = scheduler->EnqueueAll(std::move(huge));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_queue_items=4"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("5 items"));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out.calls(i), 0);
  EXPECT_EQ(observer_->rejected("invalid"), 5);
  EXPECT_EQ(observer_->rejected("queue_full"), 0);
  EXPECT_EQ(scheduler->queue_depth(), 0);
}

TEST_F(SchedulerTest, EnqueueRejectsInvalidExpiredAndCancelled) {
  Outcomes out(3);
  auto scheduler = Make(Options());
  EXPECT_EQ(scheduler->Enqueue(out.Make(0, /*tokens=*/0)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->Enqueue(out.Make(1, 10, clock_.Now())).code(),
            absl::StatusCode::kDeadlineExceeded);
  auto flag = std::make_shared<std::atomic<bool>>(true);
  EXPECT_EQ(
      scheduler->Enqueue(out.Make(2, 10, absl::InfiniteFuture(), flag)).code(),
      absl::StatusCode::kCancelled);
  for (int id = 0; id < 3; ++id) EXPECT_EQ(out.calls(id), 0);
  EXPECT_EQ(observer_->rejected("invalid"), 1);
  EXPECT_EQ(observer_->rejected("deadline"), 1);
  EXPECT_EQ(observer_->rejected("cancelled"), 1);
  EXPECT_EQ(scheduler->queue_depth(), 0);
}

TEST_F(SchedulerTest, EveryItemCompletedExactlyOnceUnderConcurrency) {
  SchedulerOptions options = Options();
  options.max_queue_items = 64;
  options.policy.max_batch_size = 16;
  options.policy.max_batch_tokens = 16 * 64;
  options.policy.max_queue_delay = absl::ZeroDuration();  // idle worker: at once
  auto scheduler = Make(options);
  constexpr int kProducers = 4;
  constexpr int kPerProducer = 2500;
  constexpr int kTotal = kProducers * kPerProducer;
  Outcomes out(kTotal);
  std::atomic<int64_t> queue_full{0};

  std::vector<std::thread> consumers;
  for (int c = 0; c < 3; ++c) {
    consumers.emplace_back([&] {
      while (auto batch = scheduler->NextBatch()) {
        EXPECT_LE(batch->size(), 16u);
        EXPECT_LE(batch->padded_tokens(), 16 * 64);
        CompleteAll(*batch);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        const int id = p * kPerProducer + i;
        while (true) {
          absl::Status s = scheduler->Enqueue(out.Make(id, 1 + id % 64));
          if (s.ok()) break;
          ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
          queue_full.fetch_add(1);
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& t : producers) t.join();
  ASSERT_TRUE(
      scheduler->Shutdown(/*drain=*/true, absl::InfiniteDuration()).ok());
  for (auto& t : consumers) t.join();

  for (int id = 0; id < kTotal; ++id) {
    ASSERT_EQ(out.calls(id), 1) << id;
    ASSERT_EQ(out.code(id), absl::StatusCode::kOk) << id;
    ASSERT_EQ(out.value(id), 2 * id) << id;
  }
  EXPECT_EQ(observer_->items(), kTotal);
  EXPECT_EQ(observer_->rejected("queue_full"), queue_full.load());
  EXPECT_EQ(scheduler->queue_depth(), 0);
  EXPECT_EQ(scheduler->inflight_items(), 0);
  EXPECT_EQ(observer_->depth(), 0);
}

TEST_F(SchedulerTest, CancelledItemsFreeTheirSlots) {
  SchedulerOptions options = Options();
  options.max_queue_items = 2;
  options.policy.max_queue_delay = absl::ZeroDuration();  // idle worker: at once
  Outcomes out(4);
  auto scheduler = Make(options);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  std::vector<IntTask> request;
  request.push_back(out.Make(0, 10, absl::InfiniteFuture(), flag));
  request.push_back(out.Make(1, 10, absl::InfiniteFuture(), flag));
  ASSERT_TRUE(scheduler->EnqueueAll(std::move(request)).ok());
  flag->store(true);  // the gRPC layer saw the call cancelled
  // The queue is "full" of cancelled items: they make room.
  ASSERT_TRUE(scheduler->Enqueue(out.Make(2)).ok());
  EXPECT_EQ(out.calls(0), 1);
  EXPECT_EQ(out.code(0), absl::StatusCode::kCancelled);
  EXPECT_EQ(out.code(1), absl::StatusCode::kCancelled);
  EXPECT_EQ(observer_->rejected("cancelled"), 2);
  EXPECT_EQ(scheduler->queue_depth(), 1);

  // Cancelled while queued and found by the next decision: never batched.
  auto flag3 = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(
      scheduler->Enqueue(out.Make(3, 10, absl::InfiniteFuture(), flag3)).ok());
  flag3->store(true);
  auto batch = scheduler->NextBatch();
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ(batch->payload(0), 2);
  EXPECT_EQ(out.code(3), absl::StatusCode::kCancelled);
  EXPECT_EQ(observer_->rejected("cancelled"), 3);
  CompleteAll(*batch);
  EXPECT_EQ(out.code(2), absl::StatusCode::kOk);
}

// Issue 16, defect 8: once an item of a request fails, its siblings still
// queued are dropped (CANCELLED) before compute; other requests are not.
TEST_F(SchedulerTest, FailedItemDropsItsQueuedSiblings) {
  SchedulerOptions options = Options();
  options.policy.max_batch_size = 1;
  Outcomes out(4);
  auto scheduler = Make(options);
  std::vector<IntTask> request;
  for (int i = 0; i < 3; ++i) request.push_back(out.Make(i));
  ASSERT_TRUE(scheduler->EnqueueAll(std::move(request)).ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(3)).ok());  // another request
  auto first = scheduler->NextBatch();  // size trigger: item 0
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->payload(0), 0);
  EXPECT_TRUE(first->Complete(0, absl::InternalError("forward failed")));
  auto next = scheduler->NextBatch();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->payload(0), 3) << "a sibling of the failed item was batched";
  CompleteAll(*next);
  EXPECT_EQ(out.code(0), absl::StatusCode::kInternal);
  for (int id : {1, 2}) {
    EXPECT_EQ(out.calls(id), 1) << id;
    EXPECT_EQ(out.code(id), absl::StatusCode::kCancelled) << id;
  }
  EXPECT_EQ(out.code(3), absl::StatusCode::kOk);
  EXPECT_EQ(observer_->rejected("cancelled"), 2);
  EXPECT_EQ(observer_->items(), 2);  // items 0 and 3 were batched, no other
  EXPECT_EQ(scheduler->queue_depth(), 0);
}

// Batch::DropStale, just before compute: items cancelled, expired or whose
// request failed since the batch formed are completed and not computed.
TEST_F(SchedulerTest, DropStaleCompletesWhatIsNoLongerWanted) {
  SchedulerOptions options = Options();
  options.policy.max_queue_delay = absl::ZeroDuration();
  Outcomes out(5);
  auto scheduler = Make(options);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(scheduler->Enqueue(out.Make(0, 10, absl::InfiniteFuture(), flag)).ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(1, 10, clock_.Now() + absl::Seconds(1))).ok());
  std::vector<IntTask> request;  // items 2 and 3: one request
  request.push_back(out.Make(2));
  request.push_back(out.Make(3));
  ASSERT_TRUE(scheduler->EnqueueAll(std::move(request)).ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(4)).ok());
  auto batch = scheduler->NextBatch();
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->size(), 5u);
  flag->store(true);                   // item 0: the client cancels
  clock_.Advance(absl::Seconds(1));    // item 1: its deadline passes
  EXPECT_TRUE(batch->Complete(2, absl::InternalError("bad input")));  // item 3's request failed
  EXPECT_EQ(batch->DropStale(), 3u);
  EXPECT_EQ(out.code(0), absl::StatusCode::kCancelled);
  EXPECT_EQ(out.code(1), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out.code(3), absl::StatusCode::kCancelled);
  EXPECT_FALSE(batch->completed(4));
  EXPECT_TRUE(batch->Complete(4, 8));
  EXPECT_EQ(out.value(4), 8);
  EXPECT_EQ(observer_->rejected("cancelled"), 2);
  EXPECT_EQ(observer_->rejected("deadline"), 1);
  EXPECT_EQ(scheduler->inflight_items(), 0);
  for (int id = 0; id < 5; ++id) EXPECT_EQ(out.calls(id), 1) << id;
}

TEST_F(SchedulerTest, CancelledJustBeforeItsDeadlineCountsAsExpired) {
  // The client's deadline timer cancels the call a little before the
  // server's copy of the deadline passes: that is a deadline drop.
  SchedulerOptions options = Options();
  Outcomes out(3);
  auto scheduler = Make(options);
  auto near = std::make_shared<std::atomic<bool>>(false);
  auto far = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(scheduler->Enqueue(out.Make(0, 10, clock_.Now() + absl::Milliseconds(5), near)).ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(1, 10, clock_.Now() + absl::Seconds(5), far)).ok());
  near->store(true);
  far->store(true);
  auto flag = std::make_shared<std::atomic<bool>>(true);
  EXPECT_EQ(scheduler->Enqueue(out.Make(2, 10, clock_.Now() + absl::Milliseconds(5), flag)).code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread worker([&] {
    while (auto batch = scheduler->NextBatch()) CompleteAll(*batch);
  });
  scheduler->Wake();
  while (out.calls(0) == 0 || out.calls(1) == 0) std::this_thread::yield();
  EXPECT_EQ(out.code(0), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out.code(1), absl::StatusCode::kCancelled);
  EXPECT_EQ(observer_->rejected("deadline"), 2);
  EXPECT_EQ(observer_->rejected("cancelled"), 1);
  scheduler->Shutdown(/*drain=*/false, absl::ZeroDuration()).IgnoreError();
  worker.join();
}

TEST_F(SchedulerTest, WakeLetsWaitingWorkerDropCancelledItem) {
  SchedulerOptions options = Options();
  Outcomes out(1);
  auto scheduler = Make(options);
  auto flag = std::make_shared<std::atomic<bool>>(false);
  ASSERT_TRUE(
      scheduler->Enqueue(out.Make(0, 10, absl::InfiniteFuture(), flag)).ok());
  std::atomic<bool> got_batch{false};
  std::thread worker([&] {
    while (auto batch = scheduler->NextBatch()) got_batch = true;
  });
  clock_.WaitForWaiters(1);  // waiting for the 10 ms delay
  flag->store(true);
  scheduler->Wake();
  // The worker frees the slot without any time passing.
  while (out.calls(0) == 0) std::this_thread::yield();
  EXPECT_EQ(out.code(0), absl::StatusCode::kCancelled);
  EXPECT_EQ(scheduler->queue_depth(), 0);
  scheduler->Shutdown(/*drain=*/false, absl::ZeroDuration()).IgnoreError();
  worker.join();
  EXPECT_FALSE(got_batch.load());
}

TEST_F(SchedulerTest, DelayTriggerOnFakeClock) {
  SchedulerOptions options = Options();
  Outcomes out(3);
  auto scheduler = Make(options);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(scheduler->Enqueue(out.Make(i, 20 + i)).ok());
  std::optional<IntScheduler::BatchType> batch;
  std::atomic<bool> returned{false};
  std::thread worker([&] {
    batch = scheduler->NextBatch();
    returned = true;
  });
  clock_.WaitForWaiters(1);
  clock_.Advance(absl::Milliseconds(9));
  EXPECT_FALSE(returned.load());  // 9 ms < max_queue_delay
  clock_.Advance(absl::Milliseconds(1));
  worker.join();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size(), 3u);
  EXPECT_EQ(batch->trigger(), BatchTrigger::kDelay);
  EXPECT_EQ(batch->longest_tokens(), 22);
  EXPECT_EQ(batch->padded_tokens(), 66);
  EXPECT_EQ(batch->real_tokens(), 63);
  EXPECT_EQ(observer_->last_trigger(), BatchTrigger::kDelay);
  for (absl::Duration wait : observer_->waits()) {
    EXPECT_EQ(wait, absl::Milliseconds(10));
  }
  EXPECT_EQ(observer_->padded_tokens(), 66);
  EXPECT_EQ(observer_->real_tokens(), 63);
  CompleteAll(*batch);
}

// Issue 16, defect 1: with max_queue_delay > 0 an idle worker waits for
// companions (size, tokens or the delay); before the fix it took a lone item
// at once and the delay never applied.
TEST_F(SchedulerTest, IdleWorkerWaitsForTheQueueDelay) {
  Outcomes out(1);
  auto scheduler = Make(Options());  // max_queue_delay 10 ms, max size 8
  ASSERT_TRUE(scheduler->Enqueue(out.Make(0)).ok());
  std::optional<IntScheduler::BatchType> batch;
  std::atomic<bool> returned{false};
  std::thread worker([&] {
    batch = scheduler->NextBatch();
    returned = true;
  });
  // The worker either goes to sleep on the clock or returns with a batch.
  while (!returned.load() && clock_.NumWaiters() == 0) std::this_thread::yield();
  EXPECT_FALSE(returned.load())
      << "an idle worker took a lone item before max_queue_delay passed";
  if (!returned.load()) {
    clock_.Advance(absl::Milliseconds(9));
    clock_.WaitForWaiters(1);
    EXPECT_FALSE(returned.load());  // 9 ms < max_queue_delay
    clock_.Advance(absl::Milliseconds(1));
  }
  worker.join();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size(), 1u);
  EXPECT_EQ(batch->trigger(), BatchTrigger::kDelay);
  ASSERT_EQ(observer_->waits().size(), 1u);
  EXPECT_EQ(observer_->waits()[0], absl::Milliseconds(10));
  CompleteAll(*batch);
}

// ... and the token budget ends the wait without time passing.
TEST_F(SchedulerTest, IdleWorkerWaitingForDelayTakesBatchAtTokenBudget) {
  SchedulerOptions options = Options();
  options.policy.max_batch_tokens = 100;  // 3 x 30 fits, 4 x 30 does not
  Outcomes out(4);
  auto scheduler = Make(options);
  ASSERT_TRUE(scheduler->Enqueue(out.Make(0, 30)).ok());
  std::optional<IntScheduler::BatchType> batch;
  std::atomic<bool> returned{false};
  std::thread worker([&] {
    batch = scheduler->NextBatch();
    returned = true;
  });
  while (!returned.load() && clock_.NumWaiters() == 0) std::this_thread::yield();
  EXPECT_FALSE(returned.load())
      << "an idle worker took a lone item before max_queue_delay passed";
  for (int i = 1; i < 4; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i, 30)).ok());
  worker.join();
  ASSERT_TRUE(batch.has_value());
  if (returned.load() && batch->size() == 1u) {
    ADD_FAILURE() << "batch of 1 (trigger " << BatchTriggerName(batch->trigger())
                  << "), want the token budget's 3";
  } else {
    EXPECT_EQ(batch->size(), 3u);
    EXPECT_EQ(batch->trigger(), BatchTrigger::kTokens);
  }
  CompleteAll(*batch);
}

// max_queue_delay 0: an idle worker takes what is there at once.
TEST_F(SchedulerTest, ZeroDelayDispatchesALoneItemAtOnce) {
  SchedulerOptions options = Options();
  options.policy.max_queue_delay = absl::ZeroDuration();
  Outcomes out(1);
  auto scheduler = Make(options);
  ASSERT_TRUE(scheduler->Enqueue(out.Make(0)).ok());
  auto batch = scheduler->NextBatch();  // this thread: no time passes
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size(), 1u);
  EXPECT_EQ(batch->trigger(), BatchTrigger::kIdleWorker);
  CompleteAll(*batch);
}

TEST_F(SchedulerTest, SizeTriggerWakesWaitingWorkerWithoutTimePassing) {
  SchedulerOptions options = Options();
  options.policy.max_batch_size = 4;
  Outcomes out(5);
  auto scheduler = Make(options);
  std::optional<IntScheduler::BatchType> batch;
  std::thread worker([&] { batch = scheduler->NextBatch(); });
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  worker.join();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size(), 4u);
  EXPECT_EQ(batch->trigger(), BatchTrigger::kSize);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_EQ(batch->payload(i), static_cast<int>(i));
  EXPECT_EQ(scheduler->queue_depth(), 1);
  CompleteAll(*batch);
}

TEST_F(SchedulerTest, ExpiredItemsDroppedBeforeCompute) {
  SchedulerOptions options = Options();
  Outcomes out(2);
  auto scheduler = Make(options);
  ASSERT_TRUE(
      scheduler->Enqueue(out.Make(0, 10, clock_.Now() + absl::Milliseconds(5)))
          .ok());
  ASSERT_TRUE(scheduler->Enqueue(out.Make(1)).ok());
  std::optional<IntScheduler::BatchType> batch;
  std::thread worker([&] { batch = scheduler->NextBatch(); });
  clock_.WaitForWaiters(1);  // sleeping until the 5 ms deadline
  clock_.Advance(absl::Milliseconds(5));
  while (out.calls(0) == 0) std::this_thread::yield();
  EXPECT_EQ(out.code(0), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(observer_->rejected("deadline"), 1);
  clock_.Advance(absl::Milliseconds(5));  // item 1 reaches the delay
  worker.join();
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->size(), 1u);
  EXPECT_EQ(batch->payload(0), 1);
  CompleteAll(*batch);
  EXPECT_EQ(out.calls(0), 1);
  EXPECT_EQ(out.calls(1), 1);
}

TEST_F(SchedulerTest, ShutdownWithDrainCompletesEverything) {
  SchedulerOptions options = Options();
  options.policy.max_queue_delay = absl::Hours(1);
  options.policy.max_batch_size = 3;
  Outcomes out(10);
  auto scheduler = Make(options);
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&] {
      while (auto batch = scheduler->NextBatch()) {
        EXPECT_TRUE(batch->trigger() == BatchTrigger::kSize ||
                    batch->trigger() == BatchTrigger::kFlush);
        CompleteAll(*batch);
      }
    });
  }
  EXPECT_TRUE(scheduler->Shutdown(/*drain=*/true, absl::Seconds(30)).ok());
  for (auto& t : workers) t.join();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(out.calls(i), 1);
    EXPECT_EQ(out.code(i), absl::StatusCode::kOk);
  }
  EXPECT_EQ(observer_->items(), 10);
  Outcomes late(1);
  EXPECT_EQ(scheduler->Enqueue(late.Make(0)).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(late.calls(0), 0);
  EXPECT_EQ(observer_->rejected("draining"), 1);
  EXPECT_FALSE(scheduler->NextBatch().has_value());
}

TEST_F(SchedulerTest, ShutdownWithoutDrainGivesUnavailable) {
  Outcomes out(5);
  auto scheduler = Make(Options());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  EXPECT_TRUE(scheduler->Shutdown(/*drain=*/false, absl::ZeroDuration()).ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(out.calls(i), 1);
    EXPECT_EQ(out.code(i), absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(observer_->rejected("draining"), 5);
  EXPECT_EQ(observer_->depth(), 0);
  EXPECT_FALSE(scheduler->NextBatch().has_value());
}

TEST_F(SchedulerTest, ShutdownWakesIdleWorkers) {
  auto scheduler = Make(Options());
  std::vector<std::thread> workers;
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back(
        [&] { EXPECT_FALSE(scheduler->NextBatch().has_value()); });
  }
  scheduler->Shutdown(/*drain=*/true, absl::Seconds(1)).IgnoreError();
  for (auto& t : workers) t.join();
}

TEST_F(SchedulerTest, DrainTimeoutFailsWhatIsLeftAndWaitsForInflight) {
  SchedulerOptions options = Options();
  options.policy.max_batch_size = 2;
  Outcomes out(3);
  auto scheduler = Make(options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  auto batch = scheduler->NextBatch();  // held by a "slow worker"
  ASSERT_TRUE(batch.has_value());
  absl::Status drain_status;
  std::thread stopper([&] {
    drain_status = scheduler->Shutdown(/*drain=*/true, absl::Seconds(10));
  });
  clock_.WaitForWaiters(1);  // Shutdown waits on the clock
  clock_.Advance(absl::Seconds(10));
  stopper.join();
  EXPECT_EQ(drain_status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(out.code(2), absl::StatusCode::kUnavailable);  // never ran
  EXPECT_EQ(out.calls(0), 0);                              // still in flight
  CompleteAll(*batch);
  EXPECT_EQ(out.code(0), absl::StatusCode::kOk);
  EXPECT_EQ(scheduler->inflight_items(), 0);
}

TEST_F(SchedulerTest, DrainWaitsForInflightBatch) {
  SchedulerOptions options = Options();
  options.policy.max_queue_delay = absl::ZeroDuration();  // idle worker: at once
  Outcomes out(1);
  auto scheduler = Make(options);
  ASSERT_TRUE(scheduler->Enqueue(out.Make(0)).ok());
  auto batch = scheduler->NextBatch();
  ASSERT_TRUE(batch.has_value());
  std::atomic<bool> drained{false};
  std::thread stopper([&] {
    EXPECT_TRUE(scheduler->Shutdown(/*drain=*/true, absl::Seconds(10)).ok());
    drained = true;
  });
  clock_.WaitForWaiters(1);
  EXPECT_FALSE(drained.load());
  CompleteAll(*batch);  // releases the in-flight count: drain finishes
  stopper.join();
  EXPECT_TRUE(drained.load());
  EXPECT_EQ(out.code(0), absl::StatusCode::kOk);
}

TEST_F(SchedulerTest, BatchCompletesEachItemOnce) {
  SchedulerOptions options = Options();
  options.policy.max_queue_delay = absl::ZeroDuration();  // idle worker: at once
  Outcomes out(3);
  auto scheduler = Make(options);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  {
    auto batch = scheduler->NextBatch();
    ASSERT_TRUE(batch.has_value());
    ASSERT_EQ(batch->size(), 3u);
    EXPECT_TRUE(batch->Complete(0, 42));
    EXPECT_FALSE(batch->Complete(0, 43));  // second completion ignored
    EXPECT_TRUE(batch->Complete(1, absl::InternalError("torch error")));
    // Item 2 left: destroying the batch fails it with INTERNAL.
  }
  EXPECT_EQ(out.value(0), 42);
  EXPECT_EQ(out.code(1), absl::StatusCode::kInternal);
  EXPECT_EQ(out.code(2), absl::StatusCode::kInternal);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out.calls(i), 1);
  EXPECT_EQ(scheduler->inflight_items(), 0);

  Outcomes more(2);
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(scheduler->Enqueue(more.Make(i)).ok());
  auto batch = scheduler->NextBatch();
  batch->FailAll(absl::InternalError("boom"));
  EXPECT_EQ(more.code(0), absl::StatusCode::kInternal);
  EXPECT_EQ(more.code(1), absl::StatusCode::kInternal);
  EXPECT_EQ(scheduler->inflight_items(), 0);
}

TEST_F(SchedulerTest, DestructorFailsQueuedItems) {
  Outcomes out(2);
  {
    auto scheduler = Make(Options());
    for (int i = 0; i < 2; ++i)
      ASSERT_TRUE(scheduler->Enqueue(out.Make(i)).ok());
  }
  EXPECT_EQ(out.calls(0), 1);
  EXPECT_EQ(out.code(1), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, PackingFormsLengthGroupedBatches) {
  SchedulerOptions options = Options();
  options.policy.max_batch_size = 2;
  Outcomes out(4);
  auto scheduler = Make(options);
  const int64_t lengths[] = {100, 8, 101, 9};
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(scheduler->Enqueue(out.Make(i, lengths[i])).ok());
  auto first = scheduler->NextBatch();
  auto second = scheduler->NextBatch();
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(first->payload(0), 0);
  EXPECT_EQ(first->payload(1), 2);
  EXPECT_EQ(second->payload(0), 1);
  EXPECT_EQ(second->payload(1), 3);
  EXPECT_EQ(first->padded_tokens() + second->padded_tokens(), 202 + 18);
  CompleteAll(*first);
  CompleteAll(*second);
}


// Issue 16, priorities: with the queue contended, higher priority items
// are batched first; equal priorities keep arrival order.
TEST_F(SchedulerTest, HigherPriorityIsBatchedFirst) {
  SchedulerOptions options = Options();
  options.policy.max_batch_size = 2;
  options.policy.max_queue_delay = absl::ZeroDuration();
  options.policy.packing = false;
  options.priority_aging = absl::Seconds(10);
  Outcomes out(5);
  auto scheduler = Make(options);
  const int priorities[] = {0, 0, 5, 1, 5};
  for (int i = 0; i < 5; ++i) {
    IntTask task = out.Make(i);
    task.priority = priorities[i];
    ASSERT_TRUE(scheduler->Enqueue(std::move(task)).ok());
  }
  std::vector<int> order;
  for (int b = 0; b < 3; ++b) {
    auto batch = scheduler->NextBatch();
    ASSERT_TRUE(batch.has_value());
    for (size_t i = 0; i < batch->size(); ++i) order.push_back(batch->payload(i));
    CompleteAll(*batch);
  }
  // 2 and 4 (priority 5, in arrival order), 3 (priority 1), then 0 and 1.
  EXPECT_EQ(order, (std::vector<int>{2, 4, 3, 0, 1}));
}

// ... and ageing: a low priority item that has waited long enough overtakes
// fresh higher-priority traffic (one level per priority_aging waited), so it
// is never starved.
TEST_F(SchedulerTest, LowPriorityAgesPastNewerHighPriority) {
  SchedulerOptions options = Options();
  options.policy.max_batch_size = 1;
  options.policy.max_queue_delay = absl::ZeroDuration();
  options.priority_aging = absl::Milliseconds(100);
  Outcomes out(3);
  auto scheduler = Make(options);
  IntTask low = out.Make(0);
  low.priority = 0;
  ASSERT_TRUE(scheduler->Enqueue(std::move(low)).ok());
  clock_.Advance(absl::Milliseconds(250));  // aged 2 levels
  IntTask high = out.Make(1);
  high.priority = 1;  // fresh, priority 1 < 0 + 2
  ASSERT_TRUE(scheduler->Enqueue(std::move(high)).ok());
  IntTask higher = out.Make(2);
  higher.priority = 3;  // fresh, priority 3 > 0 + 2
  ASSERT_TRUE(scheduler->Enqueue(std::move(higher)).ok());
  std::vector<int> order;
  for (int b = 0; b < 3; ++b) {
    auto batch = scheduler->NextBatch();
    ASSERT_TRUE(batch.has_value());
    order.push_back(batch->payload(0));
    CompleteAll(*batch);
  }
  EXPECT_EQ(order, (std::vector<int>{2, 0, 1}));
}

}  // namespace
}  // namespace dserve
