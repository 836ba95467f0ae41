// Canaries of the DSERVE_SANITIZE builds: each mode does one thing, and the
// tests in tests/sanitizers/CMakeLists.txt check that the build's sanitizer
// reports it (so a build or an option that silently stops detecting fails)
// or, for the clean modes, that it stays quiet.
//
//   heap-overflow    ASan must report heap-buffer-overflow
//   leak             LSan must report the leak (lsan.supp must not hide it)
//   signed-overflow  UBSan must report it and stop (non-recoverable)
//   race             TSan must report a data race: two threads increment one
//                    counter under two different absl::Mutexes
//   locked           TSan must stay quiet: the same counter under one
//                    absl::Mutex, an Await whose condition other threads
//                    evaluate, a CondVar hand-off and a Notification. Without
//                    the TSan-annotated absl::Mutex (cmake/DserveSanitize.cmake)
//                    each of these is a false report.
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace {

int HeapOverflow(int argc) {
  std::vector<int> v(4, 1);
  volatile int* p = v.data();
  return p[argc + 3];  // v[4] with argc == 2
}

// The only pointer to the block lives in this frame; Clobber() then
// overwrites the stack area so no stale copy keeps it reachable.
__attribute__((noinline)) void Leak(int argc) {
  volatile int* lost = new int[100];
  lost[0] = argc;
}

__attribute__((noinline)) int Clobber() {
  volatile char buffer[4096];
  for (size_t i = 0; i < sizeof(buffer); ++i) buffer[i] = static_cast<char>(i);
  return buffer[100];
}

int SignedOverflow(int argc) {
  volatile int x = INT_MAX;
  return x + argc;
}

long Counter(bool same_mutex) {
  absl::Mutex a, b;
  long counter = 0;
  absl::Notification start;
  auto work = [&](absl::Mutex* mu) {
    start.WaitForNotification();
    for (int i = 0; i < 20000; ++i) {
      absl::MutexLock lock(mu);
      ++counter;
    }
  };
  std::thread t1(work, &a), t2(work, same_mutex ? &a : &b);
  start.Notify();
  t1.join();
  t2.join();
  return counter;
}

// The scheduler's patterns: a consumer Awaits a condition over a vector that
// producers append to under the same mutex (absl evaluates the condition on
// the producers' threads in Unlock), and a CondVar hand-off of a plain value.
long Locked() {
  long total = Counter(/*same_mutex=*/true);
  absl::Mutex mu;
  std::vector<int> items;
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        absl::MutexLock lock(&mu);
        items.push_back(t);
      }
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto full = [&]() { return items.size() >= 800; };
    mu.Await(absl::Condition(&full));
    total += static_cast<long>(items.size());
  }
  for (auto& t : producers) t.join();

  absl::CondVar cv;
  int value = 0;
  bool ready = false;
  std::thread writer([&] {
    absl::MutexLock lock(&mu);
    value = 42;
    ready = true;
    cv.Signal();
  });
  {
    absl::MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
    total += value;
  }
  writer.join();
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sanitizer_canary heap-overflow|leak|signed-overflow|race|locked\n");
    return 2;
  }
  const char* mode = argv[1];
  if (std::strcmp(mode, "heap-overflow") == 0) return HeapOverflow(argc) == 12345;
  if (std::strcmp(mode, "leak") == 0) {
    Leak(argc);
    return Clobber() == 1000;
  }
  if (std::strcmp(mode, "signed-overflow") == 0) return SignedOverflow(argc) == 0;
  if (std::strcmp(mode, "race") == 0) {
    std::printf("counter %ld\n", Counter(/*same_mutex=*/false));
    return 0;
  }
  if (std::strcmp(mode, "locked") == 0) {
    const long total = Locked();
    std::printf("total %ld\n", total);
    return total == 40000 + 800 + 42 ? 0 : 1;
  }
  std::fprintf(stderr, "sanitizer_canary: unknown mode '%s'\n", mode);
  return 2;
}
