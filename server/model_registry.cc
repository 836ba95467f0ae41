#include "server/model_registry.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

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

int DefaultWorkers(const ServeOptions& o, const DebertaModel& model) {
  if (o.workers > 0) return o.workers;
  return model.device().rfind("cuda", 0) == 0 ? 2 : 1;
}

}  // namespace

absl::StatusOr<std::string> CheckpointVersion(const std::string& dir) {
  ASSIGN_OR_RETURN(CheckpointFiles files, ResolveCheckpoint(dir));
  Fnv1a hash;
  RETURN_IF_ERROR(HashFile(files.config, /*whole=*/true, &hash));
  for (const auto& w : files.weights) RETURN_IF_ERROR(HashFile(w, /*whole=*/false, &hash));
  return absl::StrFormat("%016x", hash.value());
}

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Load(const ServeOptions& options, Metrics* metrics) {
  ASSIGN_OR_RETURN(std::vector<ModelSpec> specs, ParseModelSpecs(options.models));
  auto registry = std::make_unique<ModelRegistry>();
  auto log = Logger("server");
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  for (const auto& spec : specs) {
    const auto started = std::chrono::steady_clock::now();
    auto served = std::make_unique<ServedModel>();
    served->name = spec.name;
    served->dir = spec.dir;
    auto model = DebertaModel::Load(spec.dir, ModelOptions{options.dtype, options.device});
    if (!model.ok()) return absl::Status(model.status().code(), absl::StrCat("model ", spec.name, ": ", model.status().message()));
    served->model = *model;
    auto tokenizer = Tokenizer::FromDirectory(spec.dir);
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
    served->labels = config.labels();
    served->max_length = served->model->max_length();
    ASSIGN_OR_RETURN(served->version, CheckpointVersion(spec.dir));
    served->metrics = metrics->ForModel(spec.name, TaskName(served->task), served->model->device(),
                                        served->model->dtype(), served->version);
    WorkerPoolOptions pool;
    pool.workers = DefaultWorkers(options, *served->model);
    pool.threads_per_worker = options.threads_per_worker > 0
                                  ? options.threads_per_worker
                                  : std::max(1, cores / (pool.workers * static_cast<int>(specs.size())));
    pool.scheduler.name = spec.name;
    pool.scheduler.max_queue_items = options.max_queue_items;
    pool.scheduler.policy.max_batch_size = options.max_batch_size;
    pool.scheduler.policy.max_batch_tokens = options.max_batch_tokens;
    pool.scheduler.policy.max_queue_delay = absl::Microseconds(options.max_queue_delay_us);
    pool.scheduler.policy.packing = options.packing;
    auto workers = WorkerPool::Create(served->model, served->metrics, pool);
    if (!workers.ok()) return absl::Status(workers.status().code(), absl::StrCat("model ", spec.name, ": ", workers.status().message()));
    served->workers = *std::move(workers);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    log->info("model {}: task {}, {} labels [{}], max_length {}, {} on {}, {} workers x {} threads, version {}, loaded in {:.2f}s",
              spec.name, TaskName(served->task), served->labels.size(), absl::StrJoin(served->labels, ","),
              served->max_length, served->model->dtype(), served->model->device(), pool.workers,
              pool.threads_per_worker, served->version, seconds);
    registry->by_name_[spec.name] = served.get();
    registry->models_.push_back(std::move(served));
  }
  return registry;
}

const ServedModel* ModelRegistry::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void ModelRegistry::Shutdown(bool drain, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (auto& m : models_) {
    absl::Status s = m->workers->Shutdown(drain, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    if (!s.ok()) Logger("server")->warn("model {}: drain: {}", m->name, s.ToString());
  }
}

}  // namespace dserve
