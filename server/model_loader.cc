#include "server/model_loader.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/family/tokenizer_for_model.h"
#include "model/util/logging.h"
#include "model/util/process.h"
#include "server/checkpoint_version.h"
#include "server/dtype_choice.h"

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

// Text for the dtype probe's rows: ordinary English, long enough that every
// row fills 128 tokens; row r starts at sentence r so rows differ.
constexpr const char* kProbeSentences[] = {
    "My order arrived two weeks late and the box was damaged when it came.",
    "I was charged twice for the same subscription this month, please refund one payment.",
    "How do I reset my password if I no longer have access to the old email address?",
    "The tracking number you sent does not work on the carrier's website.",
    "Can I change the delivery address after the parcel has already been shipped?",
    "The invoice shows a price that is higher than the one on your product page.",
    "Your support team was very helpful and solved the problem within an hour.",
    "I would like to cancel my account and have all of my personal data deleted.",
    "The application crashes every time I try to upload a photo from my phone.",
    "Is there a discount for students or for customers who pay for a whole year?",
};
constexpr const char* kProbeQuestion = "What went wrong with the order?";

// rows x length tokens of the probe: classify models get one text per row,
// answer and rerank models a (question, text) pair, as they are served.
absl::StatusOr<TokenBatch> ProbeBatch(const Tokenizer& tokenizer, Task task, int64_t rows, int64_t length) {
  constexpr size_t kSentences = sizeof(kProbeSentences) / sizeof(kProbeSentences[0]);
  std::vector<std::vector<int64_t>> ids, types;
  EncodeOptions encode;
  encode.max_length = static_cast<int>(length);
  for (int64_t r = 0; r < rows; ++r) {
    std::string text;
    for (size_t k = 0; k < 4 * kSentences; ++k) {
      absl::StrAppend(&text, text.empty() ? "" : " ", kProbeSentences[(static_cast<size_t>(r) + k) % kSentences]);
    }
    absl::StatusOr<Encoding> encoding;
    if (task == Task::kClassify) {
      encode.truncation = Truncation::kLongestFirst;
      encoding = tokenizer.Encode(text, encode);
    } else {
      encode.truncation = Truncation::kOnlySecond;
      encoding = tokenizer.EncodePair(kProbeQuestion, text, encode);
    }
    if (!encoding.ok()) return encoding.status();
    ids.emplace_back(encoding->ids.begin(), encoding->ids.end());
    types.emplace_back(encoding->type_ids.begin(), encoding->type_ids.end());
  }
  return TokenBatch::Pad(ids, types, tokenizer.pad_id());
}

// The dtype probe of `model` against the same checkpoint loaded as `other`
// ("bf16" when `model` is fp32, "fp32" when it is bf16), with `threads`
// intra-op threads. Errors: `other` cannot load, or a forward failed.
absl::StatusOr<DtypeProbe> ProbeAgainst(const ModelSpec& spec, const ServeOptions& options,
                                        const std::shared_ptr<const DebertaModel>& model,
                                        std::shared_ptr<const DebertaModel>* other, const Tokenizer& tokenizer,
                                        int threads) {
  const std::string other_dtype = model->dtype() == "bf16" ? "fp32" : "bf16";
  auto loaded = DebertaModel::Load(spec.dir, ModelOptions{other_dtype, options.device});
  if (!loaded.ok()) return loaded.status();
  *other = *loaded;
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(spec.settings.max_batch_size, 8));
  const int64_t length = std::max<int64_t>(4, std::min<int64_t>(model->max_length(), 128));
  auto batch = ProbeBatch(tokenizer, model->task(), rows, length);
  if (!batch.ok()) return batch.status();
  DtypeProbeOptions probe;
  probe.threads = threads;
  const DebertaModel& fp32 = model->dtype() == "fp32" ? *model : **other;
  const DebertaModel& bf16 = model->dtype() == "fp32" ? **other : *model;
  return ProbeDtypes(fp32, bf16, *batch, probe);
}

// --dtype auto at start-up: `fp32` (loaded) or the bf16 copy, whichever
// ChooseAutoDtype picks; one log line with the figures and the choice.
std::shared_ptr<const DebertaModel> ResolveAutoDtype(const ModelSpec& spec, const ServeOptions& options,
                                                     std::shared_ptr<const DebertaModel> fp32,
                                                     const Tokenizer& tokenizer, int threads) {
  auto log = Logger("server");
  std::string where;
  if (!Bf16Offered(fp32->device(), &where)) {
    const DtypeChoice choice = ChooseAutoDtype(false, nullptr);
    log->info("model {}: --dtype auto: serving {} ({}: {}; no timing)", spec.name, choice.dtype, choice.reason, where);
    return fp32;
  }
  std::shared_ptr<const DebertaModel> bf16;
  auto probe = ProbeAgainst(spec, options, fp32, &bf16, tokenizer, threads);
  if (!probe.ok()) {
    log->warn("model {}: --dtype auto: serving fp32 (bf16 probe failed: {})", spec.name,
              std::string(probe.status().message()));
    return fp32;
  }
  const DtypeChoice choice = ChooseAutoDtype(true, &*probe);
  log->info("model {}: --dtype auto: serving {} ({}; {}; {})", spec.name, choice.dtype, choice.reason,
            DescribeProbe(*probe), where);
  return choice.dtype == "bf16" ? bf16 : fp32;
}

// An explicit --dtype bf16 at start-up: timed against fp32 once; a warning
// when bf16 is slower or changes an argmax (the fp32 copy is then dropped).
void CheckExplicitBf16(const ModelSpec& spec, const ServeOptions& options,
                       const std::shared_ptr<const DebertaModel>& bf16, const Tokenizer& tokenizer, int threads) {
  auto log = Logger("server");
  std::shared_ptr<const DebertaModel> fp32;
  auto probe = ProbeAgainst(spec, options, bf16, &fp32, tokenizer, threads);
  if (!probe.ok()) {
    log->warn("model {}: --dtype bf16: could not time it against fp32: {}", spec.name,
              std::string(probe.status().message()));
    return;
  }
  const std::string warning = Bf16Warning(*probe);
  if (!warning.empty()) {
    log->warn("model {}: --dtype bf16: {}", spec.name, warning);
  } else {
    log->info("model {}: --dtype bf16: {}", spec.name, DescribeProbe(*probe));
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ServedModel>> LoadServedModel(
    const ModelSpec& spec, const ServeOptions& options, Metrics* metrics, std::shared_ptr<ModelMetrics> reuse_metrics,
    std::shared_future<void> start_after, std::function<void(const ServedModel*)> release,
    const ServedModel* previous) {
  auto log = Logger("server");
  const int cores = UsableCpuCores();
  const int num_models = static_cast<int>(std::max<size_t>(1, options.models.size()));
  const auto started = std::chrono::steady_clock::now();
  auto served = std::make_unique<ServedModel>();
  served->name = spec.name;
  served->dir = spec.dir;
  const std::string& requested = spec.settings.dtype;
  served->requested_dtype = requested;
  // auto: fp32 first (bf16 may follow below); a reload keeps what serves.
  const std::string load_dtype =
      requested != "auto" ? requested : previous != nullptr ? previous->model->dtype() : std::string("fp32");
  auto model = DebertaModel::Load(spec.dir, ModelOptions{load_dtype, options.device});
  if (!model.ok()) return absl::Status(model.status().code(), absl::StrCat("model ", spec.name, ": ", model.status().message()));
  served->model = *std::move(model);
  auto tokenizer = LoadCheckpointTokenizer(spec.dir, served->model->config());
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
  const ModelServeSettings& settings = spec.settings;
  served->settings = settings;
  if (previous != nullptr && requested == "auto") {
    log->info("model {}: the reload keeps dtype {}, chosen by --dtype auto at start-up (no timing beside a serving "
              "version)", spec.name, served->model->dtype());
  }
  if (previous == nullptr && (requested == "auto" || requested == "bf16")) {
    // With one worker's intra-op threads (the probe runs on a thread of its
    // own). `config` is not used below: it refers into the fp32 model, which
    // may go here.
    const int workers = DefaultWorkers(settings, *served->model, cores, num_models);
    const int threads = settings.threads_per_worker > 0 ? settings.threads_per_worker
                                                        : std::max(1, cores / (workers * num_models));
    if (requested == "auto") {
      served->model = ResolveAutoDtype(spec, options, served->model, *served->tokenizer, threads);
    } else if (served->model->device() == "cpu") {  // on a GPU an fp32 copy would cost its memory
      CheckExplicitBf16(spec, options, served->model, *served->tokenizer, threads);
    }
  }
  // Issue 16, defect 6: the first requests must not pay for allocator
  // growth and kernel set-up (oneDNN primitives, thread pools). A few
  // forwards on representative shapes run here, before this version is
  // returned: before health says SERVING at start-up, before the switch on
  // a reload.
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
  served->labels = served->model->config().labels();
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
            served->max_length, served->model->dtype() + (requested == "auto" ? " (auto)" : ""),
            served->model->device(), pool.workers,
            pool.threads_per_worker, served->version, seconds);
  return std::shared_ptr<const ServedModel>(served.release(), std::move(release));
}

}  // namespace dserve
