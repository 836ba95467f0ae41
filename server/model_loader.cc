#include "server/model_loader.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/family/tokenizer_for_model.h"
#include "model/util/logging.h"
#include "model/util/process.h"
#include "server/checkpoint_version.h"

namespace dserve {
namespace {

// Workers per model when --workers is 0. CUDA: 2, so one worker's
// host-side work (padding, the blocking host-to-device copy, waiting for the
// outputs) overlaps the other's kernels. There are no per-worker streams or
// pinned buffers: both queue on the device's default stream, so their copies
// and kernels do not overlap on the GPU (issue 16, defect 6: the claim that
// they did is withdrawn). CPU: single-threaded workers, one per core of the
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

absl::StatusOr<std::shared_ptr<const ServedModel>> LoadServedModel(
    const ModelSpec& spec, const ServeOptions& options, Metrics* metrics, std::shared_ptr<ModelMetrics> reuse_metrics,
    std::shared_future<void> start_after, std::function<void(const ServedModel*)> release) {
  auto log = Logger("server");
  const int cores = UsableCpuCores();
  const int num_models = static_cast<int>(std::max<size_t>(1, options.models.size()));
  const auto started = std::chrono::steady_clock::now();
  auto served = std::make_unique<ServedModel>();
  served->name = spec.name;
  served->dir = spec.dir;
  auto model = DebertaModel::Load(spec.dir, ModelOptions{options.dtype, options.device});
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
  metrics->OnWarmUp(spec.name, warmup);
  served->labels = config.labels();
  served->max_length = served->model->max_length();
  {
    auto version = CheckpointVersion(spec.dir);
    if (!version.ok()) return absl::Status(version.status().code(), absl::StrCat("model ", spec.name, ": ", version.status().message()));
    served->version = *version;
  }
  served->metrics = reuse_metrics != nullptr
                        ? std::move(reuse_metrics)
                        : metrics->ForModel(spec.name, TaskName(served->task), served->model->device(),
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
  return std::shared_ptr<const ServedModel>(served.release(), std::move(release));
}

}  // namespace dserve
