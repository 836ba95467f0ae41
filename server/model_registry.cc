#include "server/model_registry.h"

#include <sys/stat.h>

#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/family/tokenizer_for_model.h"
#include "model/util/logging.h"
#include "model/util/process.h"
#include "model/util/status_macros.h"
#include "server/reload_watch.h"

namespace dserve {
namespace {

class Fnv1a {
 public:
  void Add(const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      hash_ ^= static_cast<unsigned char>(data[i]);
      hash_ *= 1099511628211ull;
    }
  }
  void Add(const std::string& s) { Add(s.data(), s.size()); }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 14695981039346656037ull;
};

absl::Status HashFile(const std::string& path, bool whole, Fnv1a* hash) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  const int64_t size = in.tellg();
  hash->Add(std::to_string(size));
  std::vector<char> block(64 << 10);
  auto read_at = [&](int64_t offset, size_t n) {
    in.seekg(offset);
    in.read(block.data(), static_cast<std::streamsize>(n));
    hash->Add(block.data(), static_cast<size_t>(in.gcount()));
  };
  if (whole || size <= static_cast<int64_t>(block.size()) * 16) {
    for (int64_t off = 0; off < size; off += static_cast<int64_t>(block.size())) read_at(off, block.size());
    return absl::OkStatus();
  }
  for (int i = 0; i < 16; ++i) read_at(size / 16 * i, block.size());
  read_at(size - static_cast<int64_t>(block.size()), block.size());
  return absl::OkStatus();
}

// Workers per model when --workers is 0. CUDA: 2 (one copies while the
// other computes). CPU: single-threaded workers, one per core of the
// model's share, at most 4 (each holds a batch's activations): a pass split
// over OpenMP threads waits at every barrier for a thread that the gRPC
// threads, tokenization or another worker have taken, while independent
// workers never wait for each other. Measured on 2 cores, demo model, 64
// clients on 128-token texts (docs/performance.md): 1 worker x 2 threads
// 160 items/s, 2 workers x 1 thread 389. With --threads-per-worker T: the
// share's cores / T.
int DefaultWorkers(const ModelServeSettings& o, const DebertaModel& model, int cores, int num_models) {
  if (o.workers > 0) return o.workers;
  if (model.device().rfind("cuda", 0) == 0) return 2;
  const int share = std::max(1, cores / num_models);
  if (o.threads_per_worker > 0) return std::max(1, share / o.threads_per_worker);
  return std::min(4, share);
}

std::string FileStamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return absl::StrCat(path, ":missing");
  return absl::StrCat(path, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace

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

absl::StatusOr<std::string> CheckpointVersion(const std::string& dir) {
  ASSIGN_OR_RETURN(CheckpointFiles files, ResolveCheckpoint(dir));
  Fnv1a hash;
  RETURN_IF_ERROR(HashFile(files.config, /*whole=*/true, &hash));
  for (const auto& w : files.weights) RETURN_IF_ERROR(HashFile(w, /*whole=*/false, &hash));
  for (const std::string& f : {files.tokenizer, files.added_tokens}) {
    hash.Add(f.empty() ? std::string("-") : f.substr(files.dir.size()));
    if (!f.empty()) RETURN_IF_ERROR(HashFile(f, /*whole=*/false, &hash));
  }
  // Its flags change tokenization (ALBERT); absent, versions stay as they were.
  if (!files.tokenizer_config.empty()) {
    hash.Add(files.tokenizer_config.substr(files.dir.size()));
    RETURN_IF_ERROR(HashFile(files.tokenizer_config, /*whole=*/true, &hash));
  }
  return absl::StrFormat("%016x", hash.value());
}

std::string CheckpointFingerprint(const std::string& dir) {
  auto files = ResolveCheckpoint(dir);
  if (!files.ok()) return absl::StrCat("!", files.status().message());
  auto version = CheckpointVersion(dir);
  if (!version.ok()) return absl::StrCat("!", version.status().message());
  std::string out = *version;
  for (const std::string& f : {files->config, files->tokenizer, files->added_tokens, files->tokenizer_config,
                                files->weight_index}) {
    if (!f.empty()) absl::StrAppend(&out, "|", FileStamp(f));
  }
  for (const auto& w : files->weights) absl::StrAppend(&out, "|", FileStamp(w));
  return out;
}

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

namespace {

// Runs `model` on 1 x 16 tokens and on min(max batch, 8) x min(max length,
// 128) tokens (pairs when the model has token types). Seconds taken, or -1
// when a forward failed (its error is logged).
double WarmUp(const std::string& name, const DebertaModel& model, int pad_id, int64_t max_batch_size) {
  const auto started = std::chrono::steady_clock::now();
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(max_batch_size, 8));
  const int64_t length = std::max<int64_t>(4, std::min<int64_t>(model.max_length(), 128));
  const int64_t word = std::min<int64_t>(5, model.config().vocab_size - 1);  // any id in the vocabulary
  for (const auto& [b, l] : {std::pair<int64_t, int64_t>{1, std::min<int64_t>(16, length)}, {rows, length}}) {
    std::vector<std::vector<int64_t>> ids(static_cast<size_t>(b), std::vector<int64_t>(static_cast<size_t>(l), word));
    std::vector<std::vector<int64_t>> types;
    if (model.config().type_vocab_size > 0) types.assign(static_cast<size_t>(b), std::vector<int64_t>(static_cast<size_t>(l), 0));
    auto out = model.Run(TokenBatch::Pad(ids, types, pad_id));
    if (!out.ok()) {
      Logger("server")->error("model {}: warm-up forward {}x{} failed: {}", name, b, l,
                              std::string(out.status().message()));
      return -1;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  Logger("server")->info("model {}: warmed up in {:.3f}s (forwards 1x{} and {}x{})", name, seconds,
                         std::min<int64_t>(16, length), rows, length);
  return seconds;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelRegistry::LoadModel(
    const ModelSpec& spec, std::shared_ptr<ModelMetrics> reuse_metrics, std::shared_future<void> start_after) {
  auto log = Logger("server");
  const int cores = UsableCpuCores();
  const int num_models = static_cast<int>(std::max<size_t>(1, options_.models.size()));
  const auto started = std::chrono::steady_clock::now();
  auto served = std::make_unique<ServedModel>();
  served->name = spec.name;
  served->dir = spec.dir;
  auto model = DebertaModel::Load(spec.dir, ModelOptions{options_.dtype, options_.device});
  if (!model.ok()) return absl::Status(model.status().code(), absl::StrCat("model ", spec.name, ": ", model.status().message()));
  served->model = *model;
  auto tokenizer = LoadCheckpointTokenizer(spec.dir, (*model)->config());
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("model ", spec.name, ": tokenizer: ", tokenizer.status().message()));
  }
  served->tokenizer = std::shared_ptr<const Tokenizer>(std::move(*tokenizer));
  const ModelConfig& config = served->model->config();
  if (served->tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("model ", spec.name, ": tokenizer has ",
                                                   served->tokenizer->vocab_size(), " ids but config.json vocab_size is ",
                                                   config.vocab_size));
  }
  served->task = config.task();
  if (served->task != Task::kClassify && served->task != Task::kAnswer && served->task != Task::kRerank) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", spec.name, ": task ", TaskName(served->task), " cannot be served"));
  }
  // Issue 16, defect 6: the first requests must not pay for allocator
  // growth and kernel set-up (oneDNN primitives, thread pools). A few
  // forwards on representative shapes run here, before this version is
  // returned: before health says SERVING at start-up, before the switch on
  // a reload.
  const ModelServeSettings& settings = spec.settings;
  served->settings = settings;
  // A reload warms up beside the serving version: with one worker's
  // threads, not every core, so serving is not starved meanwhile.
  if (reuse_metrics != nullptr) {
    const int workers = DefaultWorkers(settings, *served->model, cores, num_models);
    ConfigureInferenceThread(settings.threads_per_worker > 0 ? settings.threads_per_worker
                                                             : std::max(1, cores / (workers * num_models)));
  }
  const double warmup = WarmUp(spec.name, *served->model, served->tokenizer->pad_id(), settings.max_batch_size);
  if (warmup < 0) return absl::InternalError(absl::StrCat("model ", spec.name, ": warm-up forward failed"));
  metrics_->OnWarmUp(spec.name, warmup);
  served->labels = config.labels();
  served->max_length = served->model->max_length();
  {
    auto version = CheckpointVersion(spec.dir);
    if (!version.ok()) return absl::Status(version.status().code(), absl::StrCat("model ", spec.name, ": ", version.status().message()));
    served->version = *version;
  }
  served->metrics = reuse_metrics != nullptr
                        ? std::move(reuse_metrics)
                        : metrics_->ForModel(spec.name, TaskName(served->task), served->model->device(),
                                             served->model->dtype(), served->version);
  WorkerPoolOptions pool;
  pool.workers = DefaultWorkers(settings, *served->model, cores, num_models);
  pool.threads_per_worker = settings.threads_per_worker > 0 ? settings.threads_per_worker
                                                            : std::max(1, cores / (pool.workers * num_models));
  pool.scheduler.name = spec.name;
  pool.start_after = std::move(start_after);
  pool.scheduler.max_queue_items = settings.max_queue_items;
  pool.scheduler.priority_aging = absl::Milliseconds(settings.priority_aging_ms);
  pool.scheduler.policy.max_batch_size = settings.max_batch_size;
  pool.scheduler.policy.max_batch_tokens = settings.max_batch_tokens;
  pool.scheduler.policy.max_queue_delay = absl::Microseconds(settings.max_queue_delay_us);
  pool.scheduler.policy.packing = settings.packing;
  pool.scheduler.policy.max_padding_ratio = settings.max_padding_ratio;
  auto workers = WorkerPool::Create(served->model, served->metrics, pool);
  if (!workers.ok()) return absl::Status(workers.status().code(), absl::StrCat("model ", spec.name, ": ", workers.status().message()));
  served->workers = *std::move(workers);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  log->info("model {}: task {}, {} labels [{}], max_length {}, {} on {}, {} workers x {} threads, version {}, loaded in {:.2f}s",
            spec.name, TaskName(served->task), served->labels.size(), absl::StrJoin(served->labels, ","),
            served->max_length, served->model->dtype(), served->model->device(), pool.workers,
            pool.threads_per_worker, served->version, seconds);
  std::shared_ptr<ModelReaper> reaper = reaper_;
  return std::shared_ptr<const ServedModel>(served.release(),
                                            [reaper](const ServedModel* m) { reaper->Retire(m); });
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
      LoadModel(slot.spec, old->metrics, handover->get_future().share());
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
