#include "server/batching/clock.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace dserve {
namespace {

TEST(FakeClockTest, AdvancesOnlyWhenTold) {
  FakeClock clock(absl::FromUnixSeconds(50));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(50));
  clock.Advance(absl::Milliseconds(3));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(50) + absl::Milliseconds(3));
  clock.SetNow(absl::FromUnixSeconds(60));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(60));
  clock.SetNow(absl::FromUnixSeconds(10));  // never backwards
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(60));
}

TEST(FakeClockTest, AwaitReturnsAtOnceWhenConditionHoldsOrDeadlinePassed) {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.AwaitWithDeadline(&mu, absl::Condition(&ready),
                                      absl::InfiniteFuture()));
  ready = false;
  EXPECT_FALSE(
      clock.AwaitWithDeadline(&mu, absl::Condition(&ready), clock.Now()));
  EXPECT_EQ(clock.NumWaiters(), 0);
}

TEST(FakeClockTest, AdvancingPastDeadlineWakesWaiter) {
  FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Milliseconds(10);
  absl::Mutex mu;
  bool ready = false;
  std::atomic<bool> returned{false};
  bool result = true;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&ready), deadline);
    returned = true;
  });
  clock.WaitForWaiters(1);
  clock.Advance(absl::Milliseconds(9));
  // Advance re-evaluated the waiter's condition (false): it is still asleep.
  EXPECT_FALSE(returned.load());
  clock.Advance(absl::Milliseconds(1));
  waiter.join();
  EXPECT_TRUE(returned.load());
  EXPECT_FALSE(result);  // timed out
  EXPECT_EQ(clock.NumWaiters(), 0);
}

TEST(FakeClockTest, ConditionWakesWaiterWithoutTimeMoving) {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&ready),
                                     absl::InfiniteFuture());
  });
  clock.WaitForWaiters(1);
  {
    absl::MutexLock lock(&mu);
    ready = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
}

TEST(RealClockTest, AwaitHonoursConditionAndPastDeadline) {
  Clock* clock = Clock::Real();
  const absl::Time before = absl::Now();
  EXPECT_GE(clock->Now(), before);
  absl::Mutex mu;
  bool ready = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock->AwaitWithDeadline(&mu, absl::Condition(&ready),
                                        absl::InfinitePast()));
  ready = true;
  EXPECT_TRUE(clock->AwaitWithDeadline(&mu, absl::Condition(&ready),
                                       absl::InfiniteFuture()));
}

}  // namespace
}  // namespace dserve
