#include "server/batching/clock.h"

#include <algorithm>

namespace dserve {

Clock* Clock::Real() {
  static Clock* const clock = new RealClock();
  return clock;
}

bool RealClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline) const {
  return mu->AwaitWithDeadline(cond, deadline);
}

FakeClock::FakeClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}

absl::Time FakeClock::Now() const {
  return absl::FromUnixNanos(now_ns_.load(std::memory_order_acquire));
}

bool FakeClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline) const {
  // Registered before the first evaluation of the predicate, so an Advance()
  // that this evaluation misses will find us and lock/unlock `*mu`, which
  // makes absl re-evaluate the predicate (no lost wake-up).
  {
    absl::MutexLock lock(&registry_mu_);
    waiters_.push_back(mu);
  }
  auto reached = [&]() { return cond.Eval() || Now() >= deadline; };
  mu->Await(absl::Condition(&reached));
  {
    absl::MutexLock lock(&registry_mu_);
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), mu));
  }
  return cond.Eval();
}

void FakeClock::Advance(absl::Duration d) {
  if (d > absl::ZeroDuration()) {
    now_ns_.fetch_add(absl::ToInt64Nanoseconds(d), std::memory_order_acq_rel);
  }
  WakeWaiters();
}

void FakeClock::SetNow(absl::Time t) {
  const int64_t target = absl::ToUnixNanos(t);
  int64_t current = now_ns_.load(std::memory_order_acquire);
  while (current < target && !now_ns_.compare_exchange_weak(
                                 current, target, std::memory_order_acq_rel)) {
  }
  WakeWaiters();
}

void FakeClock::WakeWaiters() {
  std::vector<absl::Mutex*> mutexes;
  {
    absl::MutexLock lock(&registry_mu_);
    mutexes = waiters_;
  }
  std::sort(mutexes.begin(), mutexes.end());
  mutexes.erase(std::unique(mutexes.begin(), mutexes.end()), mutexes.end());
  // Locking outside registry_mu_: waiters take their mutex first and the
  // registry second, so holding the registry here could deadlock.
  for (absl::Mutex* mu : mutexes) {
    mu->Lock();
    mu->Unlock();  // Unlock re-evaluates the waiters' conditions.
  }
}

void FakeClock::WaitForWaiters(int n) const {
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mu_) {
    return static_cast<int>(waiters_.size()) >= n;
  };
  absl::MutexLock lock(&registry_mu_);
  registry_mu_.Await(absl::Condition(&enough));
}

int FakeClock::NumWaiters() const {
  absl::MutexLock lock(&registry_mu_);
  return static_cast<int>(waiters_.size());
}

}  // namespace dserve
