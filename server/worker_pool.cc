#include "server/worker_pool.h"

#include <pthread.h>
#include <sys/stat.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "model/util/logging.h"
#include "server/metrics.h"

namespace dserve {

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Create(std::shared_ptr<const DebertaModel> model,
                                                               std::shared_ptr<ModelMetrics> metrics,
                                                               WorkerPoolOptions options) {
  if (options.workers < 1) return absl::InvalidArgumentError("workers must be >= 1");
  std::unique_ptr<WorkerPool> pool(new WorkerPool());
  pool->model_ = std::move(model);
  pool->metrics_ = std::move(metrics);
  pool->test_hold_file_ = std::move(options.test_hold_file);
  pool->start_after_ = std::move(options.start_after);
  if (pool->test_hold_file_.empty()) {
    const char* hold = std::getenv("DSERVE_TEST_HOLD_WORKERS_FILE");
    if (hold != nullptr) pool->test_hold_file_ = hold;
  }
  if (!pool->test_hold_file_.empty()) {
    Logger("server")->warn("test hook: workers hold each batch while {} exists", pool->test_hold_file_);
  }
  // Its own share of the model's queue gauge, so an old version's pool
  // draining during a hot reload does not reset the new one's depth.
  if (pool->metrics_ != nullptr) options.scheduler.observer = pool->metrics_->ForPool();
  const std::string name = options.scheduler.name;
  auto scheduler = ItemScheduler::Create(std::move(options.scheduler));
  if (!scheduler.ok()) return scheduler.status();
  pool->scheduler_ = *std::move(scheduler);
  for (int i = 0; i < options.workers; ++i) {
    // "dsw-NAME-I" in top -H, perf and gdb (15 characters at most).
    std::string thread_name = absl::StrCat("dsw-", name.substr(0, 7), "-", i).substr(0, 15);
    pool->threads_.emplace_back([p = pool.get(), threads = options.threads_per_worker, thread_name] {
      pthread_setname_np(pthread_self(), thread_name.c_str());
      p->WorkerLoop(threads);
    });
  }
  return pool;
}

WorkerPool::~WorkerPool() { Shutdown(/*drain=*/false, absl::ZeroDuration()).IgnoreError(); }

absl::Status WorkerPool::Shutdown(bool drain, absl::Duration timeout) {
  if (shut_down_) return absl::OkStatus();
  shut_down_ = true;
  absl::Status status = scheduler_->Shutdown(drain, timeout);
  for (auto& t : threads_) t.join();
  threads_.clear();
  return status;
}

void WorkerPool::WorkerLoop(int threads) {
  ConfigureInferenceThread(threads);
  if (start_after_.valid()) start_after_.wait();
  while (auto batch = scheduler_->NextBatch()) {
    WaitWhileHeld();
    RunBatch(*batch);
  }
}

void WorkerPool::WaitWhileHeld() const {
  if (test_hold_file_.empty()) return;
  struct stat st;
  while (stat(test_hold_file_.c_str(), &st) == 0) absl::SleepFor(absl::Milliseconds(2));
}

void WorkerPool::RunBatch(ItemScheduler::BatchType& batch) {
  const absl::Time formed = absl::Now();
  // Cancelled, expired or failed-request items since the batch formed are
  // completed here and not computed; the others are run.
  batch.DropStale();
  std::vector<size_t> live;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch.completed(i)) live.push_back(i);
  }
  if (live.empty()) return;
  std::vector<std::vector<int64_t>> ids, types;
  bool any_types = false;
  for (size_t i : live) any_types |= !batch.payload(i).type_ids.empty();
  for (size_t i : live) {
    ItemInput& in = batch.payload(i);
    ids.push_back(std::move(in.ids));
    if (any_types) {
      types.push_back(in.type_ids.empty() ? std::vector<int64_t>(ids.back().size(), 0) : std::move(in.type_ids));
    }
  }
  const TokenBatch tokens = TokenBatch::Pad(ids, types, model_->config().pad_token_id);
  const absl::Time started = absl::Now();
  absl::StatusOr<HeadOutputs> out = model_->Run(tokens);
  const absl::Duration inference = absl::Now() - started;
  if (!out.ok()) {
    Logger("server")->error("model {}: forward of {} items failed: {}", model_->directory(), live.size(),
                            out.status().ToString());
    batch.FailAll(absl::InternalError(absl::StrCat("forward failed: ", out.status().message())));
    return;
  }
  if (metrics_) metrics_->OnInference(inference);
  const HeadOutputs& o = *out;
  for (size_t row = 0; row < live.size(); ++row) {
    const size_t i = live[row];
    ItemOutput item;
    const size_t n = ids[row].size();
    if (!o.logits.empty()) {
      item.logits.assign(o.logits.begin() + row * o.num_labels, o.logits.begin() + (row + 1) * o.num_labels);
    }
    if (!o.start_logits.empty()) {
      item.start_logits.assign(o.start_logits.begin() + row * o.length, o.start_logits.begin() + row * o.length + n);
      item.end_logits.assign(o.end_logits.begin() + row * o.length, o.end_logits.begin() + row * o.length + n);
    }
    item.queue_wait = formed - batch.enqueue_time(i);
    item.inference = inference;
    batch.Complete(i, std::move(item));
  }
}

}  // namespace dserve
