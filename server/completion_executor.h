// CompletionExecutor: the threads that finish calls (issue 16, defect 5).
//
// When the last item of a call is computed, the inference worker hands the
// call here and goes back to the queue for its next batch; decode (softmax,
// span search, sort), response building and the front door's serialisation
// run on these threads instead of keeping the worker (and its cores' torch
// threads) idle meanwhile.
//
// The queue is unbounded on purpose: everything posted is a call the
// scheduler already admitted (bounded by --max-queue-items), and refusing a
// finished call here would lose work already done.
//
// Thread safety: Post from any thread; the destructor runs every task
// already posted, then joins.
#pragma once

#include <pthread.h>

#include <deque>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace dserve {

class CompletionExecutor {
 public:
  // `threads` >= 1 (values below are raised to 1).
  explicit CompletionExecutor(int threads) {
    if (threads < 1) threads = 1;
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        pthread_setname_np(pthread_self(), "dserve-complete");  // top -H, perf, gdb
        Loop();
      });
    }
  }
  ~CompletionExecutor() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  CompletionExecutor(const CompletionExecutor&) = delete;
  CompletionExecutor& operator=(const CompletionExecutor&) = delete;

  void Post(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    tasks_.push_back(std::move(task));
  }

  // Tasks posted and not yet started (tests, metrics).
  size_t pending() const {
    absl::MutexLock lock(&mu_);
    return tasks_.size();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](CompletionExecutor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->stopping_ || !e->tasks_.empty(); },
            this));
        if (tasks_.empty()) return;  // stopping, and everything posted has run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace dserve
