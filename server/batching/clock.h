// Clock injected into the batching scheduler so that its timing logic
// (queue delay, deadlines, drain timeout) is tested without sleeping.
//
// The scheduler never calls absl::Now() or sleeps itself: it reads Now() and
// blocks with AwaitWithDeadline(), which waits on an absl::Condition over the
// caller's mutex until the condition holds or the clock reaches a deadline.
// RealClock maps that onto absl::Mutex::AwaitWithDeadline; FakeClock only
// moves when a test calls Advance()/SetNow(), and advancing wakes every
// waiter whose deadline has been reached.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace dserve {

// Thread-safe. Implementations must outlive every object that uses them.
class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // Blocks until `cond` holds or Now() >= `deadline`, releasing `*mu` while
  // waiting (absl::Mutex::Await semantics: `cond` is re-evaluated whenever
  // `*mu` is released by another thread). `*mu` must be held on entry and is
  // held again on return. Returns true when `cond` holds on return.
  // `deadline` may be absl::InfiniteFuture().
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                 absl::Time deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // The process-wide wall clock (never destroyed).
  static Clock* Real();
};

// absl::Now() and absl::Mutex::AwaitWithDeadline.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

// A manually driven clock for tests. Starts at `start` (default: the Unix
// epoch + 1000 s, so that "now - delay" never underflows in tests).
//
// Contract: an object blocked in AwaitWithDeadline() on this clock (and its
// mutex) must not be destroyed while another thread is inside Advance() or
// SetNow(); in tests, stop the workers before destroying the scheduler.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1000));

  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                         absl::Time deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves time forward by `d` (>= 0) and wakes the waiters so they
  // re-evaluate their condition and deadline.
  void Advance(absl::Duration d);
  // Sets the time (never backwards) and wakes the waiters.
  void SetNow(absl::Time t);

  // Test synchronisation: blocks (in real time, no timeout) until at least
  // `n` threads are blocked in AwaitWithDeadline() on this clock. Lets a test
  // know that a worker has really gone to sleep before it advances time.
  void WaitForWaiters(int n) const;
  int NumWaiters() const;

 private:
  void WakeWaiters();

  // Nanoseconds since the Unix epoch; atomic so that waiters' conditions can
  // read it while holding only their own mutex.
  std::atomic<int64_t> now_ns_;

  mutable absl::Mutex registry_mu_;
  // The mutexes that waiters are blocked on (one entry per waiter).
  mutable std::vector<absl::Mutex*> waiters_ ABSL_GUARDED_BY(registry_mu_);
};

}  // namespace dserve
