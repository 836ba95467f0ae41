// The models a server serves: checkpoint, tokenizer, metrics and worker
// pool per name. Built once at start-up; read-only afterwards, so lookups
// need no lock.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/worker_pool.h"

namespace dserve {

struct ServedModel {
  std::string name;
  std::string dir;
  std::shared_ptr<const DebertaModel> model;
  std::shared_ptr<const Tokenizer> tokenizer;
  Task task = Task::kNone;
  std::vector<std::string> labels;
  // Content hash of config.json and the weights (16 hex digits).
  std::string version;
  int64_t max_length = 0;  // tokens, specials included
  std::shared_ptr<ModelMetrics> metrics;
  std::unique_ptr<WorkerPool> workers;
};

class ModelRegistry {
 public:
  // Loads every model of `options` (checkpoint + tokenizer), checks the
  // tokenizer against the model's vocabulary, starts its workers. The error
  // names the model, the file and the problem.
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Load(const ServeOptions& options, Metrics* metrics);

  // nullptr when unknown.
  const ServedModel* Find(const std::string& name) const;
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }

  // Drains every pool (in-flight and queued items finish within `timeout`).
  void Shutdown(bool drain, absl::Duration timeout);

 private:
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::map<std::string, ServedModel*> by_name_;
};

// FNV-1a over config.json, each weights file's header, size and sampled
// blocks: cheap on multi-GB files, changes whenever the checkpoint does.
absl::StatusOr<std::string> CheckpointVersion(const std::string& dir);

}  // namespace dserve
