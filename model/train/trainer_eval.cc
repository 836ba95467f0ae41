// The trainer's evaluation and checkpoint selection (trainer_impl.h):
// --eval scored during training (a new best by the selection metric goes to
// OUT/best), --test scored once at the end by OUT/best as saved.
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/train/trainer_impl.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace trainer_internal {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::string> SelectableMetrics(Task task) {
  switch (task) {
    case Task::kClassify: return {"accuracy", "macro_f1"};
    case Task::kAnswer: return {"crossfit_f1", "crossfit_exact", "f1", "exact"};
    case Task::kRerank: return {"mrr@10", "ndcg@10", "map"};
    case Task::kMlm: return {"loss", "perplexity", "accuracy"};
    default: return {};
  }
}

std::vector<std::string> Trainer::EvalColumns() const {
  switch (task_) {
    case Task::kClassify: return {"eval_accuracy", "eval_macro_f1"};
    case Task::kAnswer: return {"eval_exact", "eval_f1", "eval_best_f1", "eval_crossfit_f1", "eval_chosen_null_threshold"};
    case Task::kRerank: return {"eval_mrr@10", "eval_ndcg@10", "eval_map"};
    case Task::kMlm: return {"eval_loss", "eval_perplexity", "eval_accuracy"};
    default: return {};
  }
}

absl::StatusOr<EvalResult> Trainer::Score(const TrainableModel& model, const ModelConfig& config, bool test) {
  EvalOptions eo;
  eo.batch_size = o_.eval_batch_size;
  eo.max_length = max_length_;
  Predictor predict = [&](const TokenBatch& b) { return model.Predict(b); };
  const std::string& path = test ? o_.test_path : o_.eval_path;
  absl::StatusOr<EvalResult> result = absl::InternalError("no evaluation for this task");
  switch (task_) {
    case Task::kClassify:
      result = EvaluateClassify(test ? classify_test_ : classify_eval_, *tokenizer_, config, predict, eo);
      break;
    case Task::kAnswer: result = EvaluateAnswer(test ? squad_test_ : squad_eval_, *tokenizer_, config, predict, eo); break;
    case Task::kRerank:
      result = EvaluateRerank(test ? rerank_test_ : rerank_eval_, *tokenizer_, config, predict, eo);
      break;
    case Task::kMlm: {
      auto mlm = EvaluateMlm(model, test ? mlm_test_ : mlm_eval_, *tokenizer_, o_.eval_batch_size, o_.seed + 2,
                             masking_, !o_.no_emd);
      if (!mlm.ok()) {
        result = mlm.status();
        break;
      }
      EvalResult r;
      r.metrics = mlm->metrics;
      r.item_latency_ms = mlm->item_latency_ms;
      r.seconds = mlm->seconds;
      r.main_metric = -mlm->metrics["loss"].get<double>();  // higher is better
      r.main_metric_name = "-loss";
      result = std::move(r);
      break;
    }
    default: break;
  }
  if (!result.ok()) return absl::Status(result.status().code(), absl::StrCat(path, ": ", result.status().message()));
  AddCostMetrics(&*result);
  if (!o_.select_metric.empty()) {
    // --select-metric: the score that picks OUT/best, higher is better.
    const auto it = result->metrics.find(o_.select_metric);
    if (it == result->metrics.end() || !it->is_number()) {
      return absl::InternalError(absl::StrCat(path, ": the evaluation has no metric ", o_.select_metric));
    }
    const bool lower_is_better = o_.select_metric == "loss" || o_.select_metric == "perplexity";
    result->main_metric = lower_is_better ? -it->get<double>() : it->get<double>();
    result->main_metric_name = lower_is_better ? "-" + o_.select_metric : o_.select_metric;
  }
  return result;
}

absl::Status Trainer::ScoreTestSet() {
  // Issue 18, defect 7: the best checkpoint and its threshold were chosen
  // on --eval; --test is scored once, by that checkpoint as saved, on data
  // neither training nor selection saw.
  const fs::path best = fs::path(o_.out_dir) / "best";
  ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile((best / "config.json").string()));
  std::vector<std::string> initialised;
  ASSIGN_OR_RETURN(auto model, TrainableModel::FromFiles(config, {(best / "model.safetensors").string()}, true,
                                                         &initialised, sop_));
  if (!initialised.empty()) return absl::DataLossError(absl::StrCat(best.string(), ": ", absl::StrJoin(initialised, "; ")));
  ASSIGN_OR_RETURN(EvalResult result, Score(*model, config, /*test=*/true));
  json metrics = result.metrics;
  metrics["step"] = config.dserve.training.value("step", int64_t{0});
  metrics["data"] = o_.test_path;
  RETURN_IF_ERROR(WriteTextFile((fs::path(o_.out_dir) / "test_metrics.json").string(), metrics.dump(2)));
  log_->info("test set {} with {} (step {}): {} {:.4f}; all metrics in {}", o_.test_path, best.string(),
             metrics["step"].get<int64_t>(), result.main_metric_name, result.main_metric,
             (fs::path(o_.out_dir) / "test_metrics.json").string());
  return absl::OkStatus();
}

absl::Status Trainer::Evaluate(bool* improved, std::map<std::string, double>* csv_eval) {
  *improved = false;
  absl::StatusOr<EvalResult> result = Score(*model_, config_, /*test=*/false);
  RETURN_IF_ERROR(result.status());
  json metrics = result->metrics;
  metrics["step"] = step_;
  last_eval_metrics_ = metrics;
  last_threshold_ = result->null_threshold;
  for (const auto& col : EvalColumns()) {
    const std::string key = col.substr(5);
    if (metrics.contains(key) && metrics[key].is_number()) (*csv_eval)[col] = metrics[key].get<double>();
  }
  log_->info("eval at step {}: {} {:.4f} (best {:.4f})", step_, result->main_metric_name, result->main_metric,
             std::isfinite(best_metric_) ? best_metric_ : 0.0);
  if (result->main_metric > best_metric_ + 1e-12) {
    best_metric_ = result->main_metric;
    best_step_ = step_;
    evals_without_improvement_ = 0;
    *improved = true;
    RETURN_IF_ERROR(SaveCheckpoint((fs::path(o_.out_dir) / "best").string(), metrics, result->null_threshold));
  } else {
    ++evals_without_improvement_;
  }
  return absl::OkStatus();
}

}  // namespace trainer_internal
}  // namespace dserve
