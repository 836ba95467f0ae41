#include "server/model_registry.h"

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"
#include "server/reload_watch.h"

namespace dserve {

// Frees models whose last reference dropped, on its own thread: the last
// reference of a replaced model is often released on one of that model's
// own worker threads (the call finishing there), which must not join itself.
class ModelReaper {
 public:
  ModelReaper() : thread_([this] { Run(); }) {}
  ~ModelReaper() { Stop(); }

  void Retire(const ServedModel* model) {
    Post([model] { Free(model); });
  }

  // After a reload's switch: the replaced version's pool stops taking work
  // and finishes what it accepted (up to `timeout`), then its worker threads
  // exit, instead of idling beside the new version's until the last call
  // holding the old snapshot ends (issue 16, defect 6).
  // Then `handover` is set: the new version's workers start (they wait for
  // it, WorkerPoolOptions::start_after), so the model never has more than
  // its --workers computing at once.
  void DrainPool(std::shared_ptr<const ServedModel> old, absl::Duration timeout,
                 std::shared_ptr<std::promise<void>> handover) {
    Post([old = std::move(old), timeout, handover = std::move(handover)] {
      absl::Status s = old->workers->Shutdown(/*drain=*/true, timeout);
      if (!s.ok()) Logger("server")->warn("model {}: version {} drain: {}", old->name, old->version, s.ToString());
      handover->set_value();
    });
  }

  // Runs what is queued and joins; later tasks run inline.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    thread_.join();
  }

 private:
  void Post(std::function<void()> task) {
    {
      absl::MutexLock lock(&mu_);
      if (!stopped_) {
        queue_.push_back(std::move(task));
        return;
      }
    }
    task();
  }

  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_ || !queue_.empty(); }

  void Run() {
    absl::MutexLock lock(&mu_);
    for (;;) {
      mu_.Await(absl::Condition(this, &ModelReaper::Ready));
      if (queue_.empty()) return;  // stopped
      std::deque<std::function<void()>> batch;
      batch.swap(queue_);
      mu_.Unlock();
      for (auto& task : batch) task();
      batch.clear();  // a drain task's snapshot may be the last: freed (queued) here
      mu_.Lock();
    }
  }

  static void Free(const ServedModel* model) {
    Logger("server")->info("model {}: version {} unloaded", model->name, model->version);
    delete model;
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

struct ModelRegistry::Slot {
  explicit Slot(ModelSpec s, std::shared_ptr<const ServedModel> model, std::string fingerprint)
      : spec(std::move(s)), current(std::move(model)), watch(std::move(fingerprint)) {}
  const ModelSpec spec;
  mutable absl::Mutex mu;
  std::shared_ptr<const ServedModel> current ABSL_GUARDED_BY(mu);
  ReloadWatch watch;  // watcher thread only

  std::shared_ptr<const ServedModel> Get() const {
    absl::ReaderMutexLock lock(&mu);
    return current;
  }
};

ModelRegistry::ModelRegistry(const ServeOptions& options, Metrics* metrics)
    : options_(options), metrics_(metrics), reaper_(std::make_shared<ModelReaper>()) {}

ModelRegistry::~ModelRegistry() {
  StopWatching();
  slots_.clear();
  by_name_.clear();
  reaper_->Stop();
}

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Load(const ServeOptions& options, Metrics* metrics) {
  ASSIGN_OR_RETURN(std::vector<ModelSpec> specs, ResolveModelSpecs(options));
  std::unique_ptr<ModelRegistry> registry(new ModelRegistry(options, metrics));
  for (const auto& spec : specs) {
    const std::string fingerprint = CheckpointFingerprint(spec.dir);
    ASSIGN_OR_RETURN(std::shared_ptr<const ServedModel> model, registry->LoadModel(spec, nullptr));
    auto slot = std::make_unique<Slot>(spec, std::move(model), fingerprint);
    registry->by_name_[spec.name] = slot.get();
    registry->slots_.push_back(std::move(slot));
  }
  registry->watcher_ = std::thread([r = registry.get()] { r->WatchLoop(); });
  if (options.watch_s > 0) {
    Logger("server")->info("hot reload: polling {} model directories every {}s (SIGHUP checks at once)",
                           specs.size(), options.watch_s);
  }
  return registry;
}

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelRegistry::LoadModel(
    const ModelSpec& spec, std::shared_ptr<ModelMetrics> reuse_metrics, std::shared_future<void> start_after,
    const ServedModel* previous) {
  std::shared_ptr<ModelReaper> reaper = reaper_;
  return LoadServedModel(spec, options_, metrics_, std::move(reuse_metrics), std::move(start_after),
                         [reaper](const ServedModel* m) { reaper->Retire(m); }, previous);
}

std::shared_ptr<const ServedModel> ModelRegistry::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second->Get();
}

std::vector<std::shared_ptr<const ServedModel>> ModelRegistry::models() const {
  std::vector<std::shared_ptr<const ServedModel>> out;
  out.reserve(slots_.size());
  for (const auto& slot : slots_) out.push_back(slot->Get());
  return out;
}

void ModelRegistry::CheckNow() {
  absl::MutexLock lock(&watch_mu_);
  check_requested_ = true;
}

void ModelRegistry::WatchLoop() {
  const absl::Duration interval = options_.watch_s > 0 ? absl::Seconds(options_.watch_s) : absl::InfiniteDuration();
  auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(watch_mu_) { return stopping_ || check_requested_; };
  absl::MutexLock lock(&watch_mu_);
  for (;;) {
    watch_mu_.AwaitWithTimeout(absl::Condition(&wake), interval);
    if (stopping_) return;
    const bool forced = check_requested_;
    check_requested_ = false;
    watch_mu_.Unlock();
    for (auto& slot : slots_) CheckSlot(*slot, forced);
    watch_mu_.Lock();
  }
}

void ModelRegistry::StopWatching() {
  {
    absl::MutexLock lock(&watch_mu_);
    stopping_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
}

void ModelRegistry::CheckSlot(Slot& slot, bool forced) {
  auto log = Logger("server");
  const std::string& name = slot.spec.name;
  const std::string before = CheckpointFingerprint(slot.spec.dir);
  if (!slot.watch.ShouldLoad(before, forced)) return;
  std::shared_ptr<const ServedModel> old = slot.Get();
  // A copy of the same content (a new inode, same hash): nothing to load.
  if (before[0] != '!' && before.substr(0, before.find('|')) == old->version) {
    log->info("model {}: {} rewritten with the same content (version {})", name, slot.spec.dir, old->version);
    slot.watch.Loaded(before);
    return;
  }
  log->info("model {}: {} changed{}; loading it beside version {}", name, slot.spec.dir,
            forced ? " (SIGHUP)" : "", old->version);
  const auto started = std::chrono::steady_clock::now();
  // The new version's workers start when the old version's pool has
  // drained (ModelReaper::DrainPool); a version that is not switched to
  // must be able to stop, so every other exit opens the gate too.
  auto handover = std::make_shared<std::promise<void>>();
  struct OpenUnlessHandedOver {
    std::shared_ptr<std::promise<void>> gate;
    ~OpenUnlessHandedOver() {
      if (gate != nullptr) gate->set_value();
    }
  } open_on_exit{handover};
  absl::StatusOr<std::shared_ptr<const ServedModel>> loaded =
      LoadModel(slot.spec, old->metrics, handover->get_future().share(), old.get());
  absl::Status status = loaded.status();
  if (status.ok() && (*loaded)->task != old->task) {
    status = absl::FailedPreconditionError(absl::StrCat("model ", name, ": the new checkpoint's task is ",
                                                        TaskName((*loaded)->task), ", not ", TaskName(old->task),
                                                        " (restart the server to change a model's task)"));
  }
  if (CheckpointFingerprint(slot.spec.dir) != before) {
    // Files read before and after the change may have mixed: discard.
    log->info("model {}: {} changed again while it was being loaded; waiting until it is stable", name,
              slot.spec.dir);
    slot.watch.ChangedDuringLoad();
    return;
  }
  if (!status.ok()) {
    slot.watch.Failed(before);
    metrics_->OnReload(name, /*ok=*/false);
    std::string why(status.message());
    const std::string prefix = absl::StrCat("model ", name, ": ");
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    log->error("model {}: reload failed, version {} keeps serving: {}", name, old->version, why);
    return;
  }
  std::shared_ptr<const ServedModel> next = *std::move(loaded);
  {
    absl::MutexLock lock(&slot.mu);
    slot.current = next;
  }
  metrics_->SetModelInfo(name, TaskName(next->task), next->model->device(), next->model->dtype(), next->version);
  metrics_->OnReload(name, /*ok=*/true);
  open_on_exit.gate = nullptr;
  reaper_->DrainPool(old, absl::Seconds(options_.drain_timeout_s), std::move(handover));
  slot.watch.Loaded(before);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  log->info("model {}: reloaded in {:.2f}s, version {} -> {}; the old version finishes its accepted calls", name,
            seconds, old->version, next->version);
}

void ModelRegistry::Shutdown(bool drain, absl::Duration timeout) {
  StopWatching();
  const absl::Time deadline = absl::Now() + timeout;
  for (const auto& m : models()) {
    absl::Status s = m->workers->Shutdown(drain, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (!s.ok()) Logger("server")->warn("model {}: drain: {}", m->name, s.ToString());
  }
}

}  // namespace dserve
