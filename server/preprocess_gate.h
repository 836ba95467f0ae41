// PreprocessGate: caps how many requests are parsed and tokenized at once.
//
// Pre-processing runs on gRPC threads and is CPU-bound (a 4 MiB request of
// long texts takes seconds); without a cap a burst of such requests takes
// every core and the memory of all their token ids before the queue can
// refuse any. A request that finds the gate full is refused at once
// (RESOURCE_EXHAUSTED, which clients retry with backoff) rather than made
// to wait: a gRPC reaction must never block.
//
// Thread safety: TryEnter and in_use from any thread; a Ticket is released
// (on destruction) by whichever thread holds it.
#pragma once

#include <atomic>
#include <functional>
#include <utility>

namespace dserve {

class PreprocessGate {
 public:
  // `limit` >= 1: requests in pre-processing at once. `on_change` (may be
  // empty) is told the count after each change (the metrics gauge).
  explicit PreprocessGate(int limit, std::function<void(int)> on_change = {})
      : limit_(limit < 1 ? 1 : limit), on_change_(std::move(on_change)) {}
  PreprocessGate(const PreprocessGate&) = delete;
  PreprocessGate& operator=(const PreprocessGate&) = delete;

  // A slot of the gate, held until destroyed (or moved from).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept : gate_(std::exchange(other.gate_, nullptr)) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        Release();
        gate_ = std::exchange(other.gate_, nullptr);
      }
      return *this;
    }
    ~Ticket() { Release(); }
    // True when the slot was granted (TryEnter found room).
    explicit operator bool() const { return gate_ != nullptr; }
    void Release() {
      if (gate_ != nullptr) std::exchange(gate_, nullptr)->Leave();
    }

   private:
    friend class PreprocessGate;
    explicit Ticket(PreprocessGate* gate) : gate_(gate) {}
    PreprocessGate* gate_ = nullptr;
  };

  // A granted ticket when fewer than limit() are held, else an empty one.
  // Never blocks.
  Ticket TryEnter() {
    int n = in_use_.load(std::memory_order_relaxed);
    do {
      if (n >= limit_) return Ticket();
    } while (!in_use_.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel));
    if (on_change_) on_change_(n + 1);
    return Ticket(this);
  }

  int limit() const { return limit_; }
  int in_use() const { return in_use_.load(std::memory_order_acquire); }

 private:
  void Leave() {
    const int n = in_use_.fetch_sub(1, std::memory_order_acq_rel) - 1;
    if (on_change_) on_change_(n);
  }

  const int limit_;
  const std::function<void(int)> on_change_;
  std::atomic<int> in_use_{0};
};

}  // namespace dserve
