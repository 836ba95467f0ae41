// WorkerPool with a real (tiny, random-weight) checkpoint from
// shared/goldens/model, driven from many threads at once: results reach the
// right caller, shutdown with drain while others submit loses nothing,
// deadline-expired items are dropped before compute, cancelled and shut-down
// items are completed with their codes, a failed forward fails its batch.
// These are the tests the thread sanitizer build runs against the pool
// (docs/reliability.md); they are ordinary unit tests everywhere else.
#include "server/worker_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/metrics.h"
#include "tests/server/metric_value.h"

namespace dserve {
namespace {

constexpr int64_t kCls = 1, kSep = 2;

std::string Golden(const std::string& name) { return std::string(DSERVE_SHARED_DIR) + "/goldens/model/" + name; }

std::shared_ptr<const DebertaModel> Load(const std::string& name) {
  auto model = DebertaModel::Load(Golden(name), ModelOptions{});
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : nullptr;
}

// [CLS] + `length - 2` ids from the vocabulary's body + [SEP].
std::vector<int64_t> RandomIds(std::mt19937& rng, int length, int64_t vocab) {
  std::uniform_int_distribution<int64_t> id(5, vocab - 1);
  std::vector<int64_t> ids = {kCls};
  for (int i = 2; i < length; ++i) ids.push_back(id(rng));
  ids.push_back(kSep);
  return ids;
}

// The model on `ids` alone (batch of one): what the pool must return for it.
HeadOutputs Alone(const DebertaModel& model, const std::vector<int64_t>& ids) {
  auto out = model.Run(TokenBatch::Pad({ids}, {}, model.config().pad_token_id));
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : HeadOutputs{};
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << what << " [" << i << "]";
}


// Every `done` callback lands here, from whichever thread runs it.
class Results {
 public:
  // The callback for item `id`.
  absl::AnyInvocable<void(absl::StatusOr<ItemOutput>)> Callback(int id) {
    return [this, id](absl::StatusOr<ItemOutput> result) {
      absl::MutexLock lock(&mu_);
      by_id_[id].push_back(std::move(result));
      ++calls_;
    };
  }
  // Waits until `n` callbacks have run (false after 120 s).
  bool WaitFor(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(120));
  }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // The results of item `id` (exactly one expected).
  std::vector<absl::StatusOr<ItemOutput>> Of(int id) {
    absl::MutexLock lock(&mu_);
    return by_id_[id];
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int, std::vector<absl::StatusOr<ItemOutput>>> by_id_ ABSL_GUARDED_BY(mu_);
};

struct Fixture {
  std::shared_ptr<const DebertaModel> model;
  std::unique_ptr<Metrics> metrics = Metrics::Create();
  std::unique_ptr<WorkerPool> pool;

  bool Start(const std::string& golden, const std::string& task, WorkerPoolOptions options) {
    model = Load(golden);
    if (model == nullptr) return false;
    options.scheduler.name = "m";
    auto pool_or = WorkerPool::Create(model, metrics->ForModel("m", task, "cpu", "fp32", "v1"), std::move(options));
    EXPECT_TRUE(pool_or.ok()) << pool_or.status();
    if (!pool_or.ok()) return false;
    pool = *std::move(pool_or);
    return true;
  }
  double Metric(const std::string& name, std::map<std::string, std::string> labels = {}) {
    labels["model"] = "m";
    return MetricValue(metrics->Scrape(), name, labels);
  }
};

ItemTask Task(std::vector<int64_t> ids, absl::AnyInvocable<void(absl::StatusOr<ItemOutput>)> done,
              absl::Time deadline = absl::InfiniteFuture()) {
  ItemTask task;
  task.num_tokens = static_cast<int64_t>(ids.size());
  task.deadline = deadline;
  task.payload.ids = std::move(ids);
  task.done = std::move(done);
  return task;
}

TEST(WorkerPoolTest, RejectsZeroWorkers) {
  WorkerPoolOptions options;
  options.workers = 0;
  auto pool = WorkerPool::Create(nullptr, nullptr, options);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(pool.status().message(), "workers")) << pool.status();
}

// Worker threads carry the model's name (top -H, perf, gdb): "dsw-m-0"...
TEST(WorkerPoolTest, WorkerThreadsAreNamedAfterTheModel) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));
  std::set<std::string> names;
  for (int attempt = 0; attempt < 100 && names.size() < 2; ++attempt) {
    names.clear();
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(entry.path() / "comm");
      std::string name;
      std::getline(comm, name);
      if (absl::StartsWith(name, "dsw-")) names.insert(name);
    }
    if (names.size() < 2) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(names, (std::set<std::string>{"dsw-m-0", "dsw-m-1"}));
}

// 6 threads x 8 requests of 1-3 items of 3-24 tokens, 3 workers: every item
// is completed exactly once, OK, with the logits the model gives it alone.
TEST(WorkerPoolTest, ConcurrentSubmittersEachGetTheirOwnResults) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 3;
  options.threads_per_worker = 1;
  options.scheduler.policy.max_batch_size = 8;
  options.scheduler.policy.max_queue_delay = absl::Milliseconds(1);
  options.scheduler.max_queue_items = 100000;
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));

  constexpr int kThreads = 6, kRequests = 8;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> items_per_request(1, 3), length(3, 24);
  // ids[thread][request][item], want[item id]
  std::vector<std::vector<std::vector<std::vector<int64_t>>>> ids(kThreads);
  std::vector<std::vector<float>> want;
  for (int t = 0; t < kThreads; ++t) {
    ids[t].resize(kRequests);
    for (int r = 0; r < kRequests; ++r) {
      const int n = items_per_request(rng);
      for (int i = 0; i < n; ++i) {
        ids[t][r].push_back(RandomIds(rng, length(rng), f.model->config().vocab_size));
        want.push_back(Alone(*f.model, ids[t][r].back()).logits);
      }
    }
  }
  const int total = static_cast<int>(want.size());

  Results results;
  absl::Notification go;
  std::vector<std::thread> threads;
  std::atomic<int> submit_errors{0};
  int first_id = 0;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t, first = first_id] {
      go.WaitForNotification();
      int id = first;
      for (int r = 0; r < kRequests; ++r) {
        std::vector<ItemTask> tasks;
        for (const auto& item : ids[t][r]) tasks.push_back(Task(item, results.Callback(id++)));
        if (!f.pool->Submit(std::move(tasks)).ok()) ++submit_errors;
      }
    });
    for (const auto& request : ids[t]) first_id += static_cast<int>(request.size());
  }
  go.Notify();
  for (auto& t : threads) t.join();
  ASSERT_EQ(submit_errors.load(), 0);
  ASSERT_TRUE(results.WaitFor(total)) << results.calls() << " of " << total << " completed";

  for (int id = 0; id < total; ++id) {
    auto got = results.Of(id);
    ASSERT_EQ(got.size(), 1u) << "item " << id;
    ASSERT_TRUE(got[0].ok()) << "item " << id << ": " << got[0].status();
    ExpectNear(got[0]->logits, want[id], absl::StrCat("item ", id));
    EXPECT_TRUE(got[0]->start_logits.empty());
    EXPECT_GE(got[0]->queue_wait, absl::ZeroDuration());
    EXPECT_GT(got[0]->inference, absl::ZeroDuration());
  }
  // Every item computed once; one forward per formed batch; none rejected.
  EXPECT_EQ(f.Metric("dserve_batch_size_sum"), total);
  EXPECT_EQ(f.Metric("dserve_inference_duration_seconds_count"), f.Metric("dserve_batch_size_count"));
  EXPECT_LE(f.Metric("dserve_batch_size_count"), total);
  EXPECT_EQ(f.Metric("dserve_rejected_total"), 0);
  EXPECT_TRUE(f.pool->Shutdown(/*drain=*/true, absl::Seconds(30)).ok());
  EXPECT_EQ(f.pool->queue_depth(), 0);
  EXPECT_EQ(results.calls(), total);  // nothing completed twice
}

// Answer heads: start/end logits come back unpadded (one per token of the
// item) even when the batch pads items of different lengths.
TEST(WorkerPoolTest, AnswerLogitsAreCutToEachItemsLength) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  options.scheduler.policy.max_batch_size = 16;
  options.scheduler.policy.max_queue_delay = absl::Milliseconds(20);
  ASSERT_TRUE(f.Start("qa_c2p_only", "answer", options));

  std::mt19937 rng(11);
  constexpr int kThreads = 3, kItems = 4;
  std::vector<std::vector<int64_t>> ids;
  std::vector<HeadOutputs> want;
  for (int i = 0; i < kThreads * kItems; ++i) {
    ids.push_back(RandomIds(rng, 3 + 5 * i, f.model->config().vocab_size));
    want.push_back(Alone(*f.model, ids.back()));
  }
  Results results;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<ItemTask> tasks;
      for (int i = t * kItems; i < (t + 1) * kItems; ++i) tasks.push_back(Task(ids[i], results.Callback(i)));
      EXPECT_TRUE(f.pool->Submit(std::move(tasks)).ok());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results.WaitFor(kThreads * kItems));
  for (int i = 0; i < kThreads * kItems; ++i) {
    auto got = results.Of(i);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(got[0].ok()) << got[0].status();
    const size_t n = ids[i].size();
    ASSERT_EQ(got[0]->start_logits.size(), n) << "item " << i;
    ASSERT_EQ(got[0]->end_logits.size(), n) << "item " << i;
    ExpectNear(got[0]->start_logits, std::vector<float>(want[i].start_logits.begin(), want[i].start_logits.begin() + n),
               absl::StrCat("start ", i));
    ExpectNear(got[0]->end_logits, std::vector<float>(want[i].end_logits.begin(), want[i].end_logits.begin() + n),
               absl::StrCat("end ", i));
  }
}

// Shutdown(drain) while 6 threads keep submitting: every accepted item is
// computed (OK) exactly once, every later Submit is UNAVAILABLE naming the
// model, and rejected items never see their callback.
TEST(WorkerPoolTest, ShutdownWithDrainWhileSubmittingLosesNothing) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  options.scheduler.policy.max_batch_size = 4;
  options.scheduler.policy.max_queue_delay = absl::Milliseconds(2);
  options.scheduler.max_queue_items = 100000;
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));

  constexpr int kThreads = 6;
  std::atomic<int> next_id{0}, accepted{0}, rejected{0};
  std::atomic<bool> wrong_rejection{false};
  Results results;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(100 + t);
      std::uniform_int_distribution<int> n(1, 2), length(3, 12);
      while (true) {
        std::vector<ItemTask> tasks;
        const int items = n(rng);
        for (int i = 0; i < items; ++i) {
          tasks.push_back(Task(RandomIds(rng, length(rng), f.model->config().vocab_size), results.Callback(next_id++)));
        }
        absl::Status s = f.pool->Submit(std::move(tasks));
        if (s.ok()) {
          accepted += items;
          continue;
        }
        rejected += items;
        if (s.code() != absl::StatusCode::kUnavailable || !absl::StrContains(s.message(), "'m' is shutting down")) {
          wrong_rejection = true;
          ADD_FAILURE() << s;
        }
        return;
      }
    });
  }
  // Let work pile up and run, then drain in the middle of the submissions.
  while (accepted.load() < 60) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const absl::Status drained = f.pool->Shutdown(/*drain=*/true, absl::Seconds(60));
  for (auto& t : threads) t.join();
  ASSERT_TRUE(drained.ok()) << drained;
  EXPECT_FALSE(wrong_rejection.load());
  EXPECT_EQ(rejected.load() > 0, true);  // every submitter ended on a rejection
  // Drain returned only after every accepted item completed.
  EXPECT_EQ(results.calls(), accepted.load());
  int ok = 0;
  for (int id = 0; id < next_id.load(); ++id) {
    auto got = results.Of(id);
    if (got.empty()) continue;  // rejected at Submit
    ASSERT_EQ(got.size(), 1u) << "item " << id;
    EXPECT_TRUE(got[0].ok()) << "item " << id << ": " << got[0].status();
    ok += got[0].ok();
  }
  EXPECT_EQ(ok, accepted.load());
  EXPECT_EQ(f.Metric("dserve_batch_size_sum"), accepted.load());
  EXPECT_EQ(f.Metric("dserve_rejected_total", {{"reason", "draining"}}), rejected.load());
  // Idempotent, and Submit stays closed.
  EXPECT_TRUE(f.pool->Shutdown(/*drain=*/true, absl::Seconds(1)).ok());
  std::vector<ItemTask> late;
  late.push_back(Task({kCls, 7, kSep}, results.Callback(-1)));
  EXPECT_EQ(f.pool->Submit(std::move(late)).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(results.Of(-1).empty());
}

// Items whose deadline passes while queued are completed with
// DEADLINE_EXCEEDED and never reach the model; live items submitted beside
// them by the same threads are computed. Batches only form after 2 s here
// (the queue delay), long after the 50 ms deadlines.
TEST(WorkerPoolTest, DeadlineExpiredItemsAreDroppedBeforeCompute) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  options.scheduler.policy.max_batch_size = 256;
  options.scheduler.policy.max_batch_tokens = 1 << 20;
  options.scheduler.policy.max_queue_delay = absl::Seconds(2);
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));

  constexpr int kThreads = 4, kPerThread = 5;  // per thread: 5 live + 5 expiring
  Results results;
  std::atomic<int> expired_at_submit{0}, accepted_expiring{0};
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> live_ids(kThreads * kPerThread);
  std::vector<std::vector<float>> want(kThreads * kPerThread);
  std::mt19937 rng(5);
  for (size_t i = 0; i < live_ids.size(); ++i) {
    live_ids[i] = RandomIds(rng, 4 + static_cast<int>(i % 7), f.model->config().vocab_size);
    want[i] = Alone(*f.model, live_ids[i]).logits;
  }
  absl::Notification go;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.WaitForNotification();
      for (int i = 0; i < kPerThread; ++i) {
        const int live = t * kPerThread + i;
        std::vector<ItemTask> a;
        a.push_back(Task(live_ids[live], results.Callback(live)));
        EXPECT_TRUE(f.pool->Submit(std::move(a)).ok());
        std::vector<ItemTask> b;
        b.push_back(Task({kCls, 9, 10, kSep}, results.Callback(1000 + live), absl::Now() + absl::Milliseconds(50)));
        absl::Status s = f.pool->Submit(std::move(b));
        if (s.ok()) {
          ++accepted_expiring;
        } else {
          EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
          ++expired_at_submit;
        }
      }
    });
  }
  go.Notify();
  for (auto& t : threads) t.join();
  const int live_total = kThreads * kPerThread;
  ASSERT_TRUE(results.WaitFor(live_total + accepted_expiring.load()));
  for (int live = 0; live < live_total; ++live) {
    auto got = results.Of(live);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(got[0].ok()) << got[0].status();
    ExpectNear(got[0]->logits, want[live], absl::StrCat("live ", live));
    auto dropped = results.Of(1000 + live);
    if (dropped.empty()) continue;  // rejected at Submit (deadline already passed)
    ASSERT_EQ(dropped.size(), 1u);
    EXPECT_EQ(dropped[0].status().code(), absl::StatusCode::kDeadlineExceeded) << dropped[0].status();
    EXPECT_TRUE(absl::StrContains(dropped[0].status().message(), "dropped before compute")) << dropped[0].status();
  }
  EXPECT_EQ(accepted_expiring.load() + expired_at_submit.load(), live_total);
  // Only the live items were computed; every expiring one counted as "deadline".
  EXPECT_EQ(f.Metric("dserve_batch_size_sum"), live_total);
  EXPECT_EQ(f.Metric("dserve_rejected_total", {{"reason", "deadline"}}), live_total);
}

// Cancel flags set while items wait, then Wake(): CANCELLED, not computed.
// Then destroying the pool (Shutdown without drain) completes what is still
// queued with UNAVAILABLE.
TEST(WorkerPoolTest, CancelledAndShutDownItemsAreCompletedWithTheirCodes) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  options.scheduler.policy.max_batch_size = 256;
  options.scheduler.policy.max_queue_delay = absl::Seconds(30);  // nothing forms a batch
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));

  constexpr int kThreads = 4, kPerThread = 6;
  Results results;
  std::vector<std::shared_ptr<std::atomic<bool>>> flags;
  for (int i = 0; i < kThreads * kPerThread; ++i) flags.push_back(std::make_shared<std::atomic<bool>>(false));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t * kPerThread; i < (t + 1) * kPerThread; ++i) {
        std::vector<ItemTask> tasks;
        tasks.push_back(Task({kCls, 11, 12, 13, kSep}, results.Callback(i)));
        tasks.back().cancelled = flags[i];
        EXPECT_TRUE(f.pool->Submit(std::move(tasks)).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(f.pool->queue_depth(), kThreads * kPerThread);
  // Cancel the even items from several threads, each waking the scheduler.
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t * kPerThread; i < (t + 1) * kPerThread; i += 2) {
        flags[i]->store(true, std::memory_order_release);
        f.pool->Wake();
      }
    });
  }
  for (auto& t : threads) t.join();
  const int cancelled = kThreads * kPerThread / 2;
  ASSERT_TRUE(results.WaitFor(cancelled));
  EXPECT_EQ(f.pool->queue_depth(), kThreads * kPerThread - cancelled);
  f.pool.reset();  // ~WorkerPool: Shutdown(drain=false)
  ASSERT_EQ(results.calls(), kThreads * kPerThread);
  for (int i = 0; i < kThreads * kPerThread; ++i) {
    auto got = results.Of(i);
    ASSERT_EQ(got.size(), 1u);
    if (i % 2 == 0) {
      EXPECT_EQ(got[0].status().code(), absl::StatusCode::kCancelled) << got[0].status();
    } else {
      EXPECT_EQ(got[0].status().code(), absl::StatusCode::kUnavailable) << got[0].status();
      EXPECT_TRUE(absl::StrContains(got[0].status().message(), "shut down before the item ran")) << got[0].status();
    }
  }
  EXPECT_EQ(f.Metric("dserve_rejected_total", {{"reason", "cancelled"}}), cancelled);
  EXPECT_EQ(f.Metric("dserve_rejected_total", {{"reason", "draining"}}), kThreads * kPerThread - cancelled);
  EXPECT_EQ(f.Metric("dserve_batch_size_count"), 0);
}

// Issue 16, defect 8: a batch whose items are cancelled after it was formed
// (here while the test hook holds the worker) is not computed: the items end
// CANCELLED, counted as such, and no forward pass runs.
TEST(WorkerPoolTest, ItemsCancelledAfterTheBatchFormedAreNotComputed) {
  const std::string hold = absl::StrCat(testing::TempDir(), "/worker_pool_hold_", getpid());
  std::ofstream(hold).close();
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 1;
  options.threads_per_worker = 1;
  options.scheduler.policy.max_batch_size = 4;
  options.test_hold_file = hold;
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));
  Results results;
  auto flag = std::make_shared<std::atomic<bool>>(false);
  std::vector<ItemTask> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back(Task({kCls, 30 + i, 31, kSep}, results.Callback(i)));
    tasks.back().cancelled = flag;
  }
  ASSERT_TRUE(f.pool->Submit(std::move(tasks)).ok());
  // The worker has taken all four (one batch) and holds them.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (f.Metric("dserve_batch_size_count") < 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(f.Metric("dserve_batch_size_sum"), 4);
  ASSERT_EQ(f.pool->queue_depth(), 0);
  flag->store(true, std::memory_order_release);  // the client cancels
  f.pool->Wake();
  std::remove(hold.c_str());
  ASSERT_TRUE(results.WaitFor(4));
  for (int i = 0; i < 4; ++i) {
    auto got = results.Of(i);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].status().code(), absl::StatusCode::kCancelled) << "item " << i << ": " << got[0].status();
  }
  EXPECT_EQ(f.Metric("dserve_inference_duration_seconds_count"), 0) << "the cancelled batch was computed";
  EXPECT_EQ(f.Metric("dserve_rejected_total", {{"reason", "cancelled"}}), 4);
}

// Issue 16, defect 6: a reloaded version's pool waits for the hand-over
// (WorkerPoolOptions::start_after) before computing, so the model never has
// more than --workers passes running while the old version drains. Its
// queue takes work meanwhile; once the hand-over happens, everything runs.
// (Without the gate the idle worker takes the batch within milliseconds; a
// machine too slow for that within 300 ms makes this pass, never fail.)
TEST(WorkerPoolTest, NewVersionComputesOnlyAfterTheHandOver) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  std::promise<void> handover;
  options.start_after = handover.get_future().share();
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));
  Results results;
  std::vector<ItemTask> tasks;
  for (int i = 0; i < 3; ++i) tasks.push_back(Task({kCls, 30 + i, 31, kSep}, results.Callback(i)));
  ASSERT_TRUE(f.pool->Submit(std::move(tasks)).ok());
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(results.calls(), 0) << "a worker computed before the hand-over";
  EXPECT_EQ(f.Metric("dserve_batch_size_count"), 0);
  EXPECT_EQ(f.pool->queue_depth(), 3);
  handover.set_value();
  ASSERT_TRUE(results.WaitFor(3));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(results.Of(i).at(0).ok()) << results.Of(i).at(0).status();
}

// A forward that fails (an id past the vocabulary) fails every item of its
// batch with INTERNAL naming the cause; the pool keeps serving afterwards.
TEST(WorkerPoolTest, FailedForwardFailsItsBatchAndThePoolGoesOn) {
  Fixture f;
  WorkerPoolOptions options;
  options.workers = 2;
  options.threads_per_worker = 1;
  ASSERT_TRUE(f.Start("cls_factorized", "classify", options));
  const int64_t vocab = f.model->config().vocab_size;
  Results results;
  std::vector<ItemTask> bad;
  bad.push_back(Task({kCls, vocab + 5, kSep}, results.Callback(0)));
  ASSERT_TRUE(f.pool->Submit(std::move(bad)).ok());
  ASSERT_TRUE(results.WaitFor(1));
  auto got = results.Of(0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kInternal) << got[0].status();
  EXPECT_TRUE(absl::StrContains(got[0].status().message(), "forward failed")) << got[0].status();

  const std::vector<int64_t> ids = {kCls, 20, 21, 22, kSep};
  const auto want = Alone(*f.model, ids).logits;
  std::vector<ItemTask> good;
  good.push_back(Task(ids, results.Callback(1)));
  ASSERT_TRUE(f.pool->Submit(std::move(good)).ok());
  ASSERT_TRUE(results.WaitFor(2));
  got = results.Of(1);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  ExpectNear(got[0]->logits, want, "after the failed batch");
}

}  // namespace
}  // namespace dserve
