// Task evaluation shared by `dserve eval` (a loaded DebertaModel) and the
// trainer (the live model in eval mode): tokenize as the server does, run a
// Predictor batch by batch, decode with model/decode (the server's
// post-processing) and score with model/train/metrics. Torch-free.
//
// Latency: every item (text, question, query-passage pair) is charged the
// wall time of the batch that holds it (tokenize + forward + decode); with
// batch_size 1 that is the single-request latency.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"
#include "model/train/data.h"
#include "model/train/metrics.h"

namespace dserve {

// Runs one padded batch; returns the raw head outputs (DebertaModel::Run).
using Predictor = std::function<absl::StatusOr<HeadOutputs>(const TokenBatch&)>;

struct EvalOptions {
  int batch_size = 16;  // sequences (windows, pairs) per forward, at least
  int max_length = 0;   // 0 = config.max_sequence_length()
  bool want_predictions = false;
};

struct EvalResult {
  // DESIGN §4 names; see EvaluateClassify/Answer/Rerank.
  nlohmann::json metrics = nlohmann::json::object();
  // answer: {qid: text}; classify: [{"line", "predicted", "gold"}];
  // rerank: [{"line", "score", "label"}].
  nlohmann::json predictions;
  // The metric the trainer keeps the best checkpoint by (higher is better):
  // classify accuracy, answer crossfit_f1 (CrossFitThreshold), rerank mrr@10.
  double main_metric = 0;
  std::string main_metric_name;
  // answer: the null-score threshold maximising F1 (ChooseNullThreshold).
  std::optional<double> null_threshold;
  std::vector<double> item_latency_ms;
  double seconds = 0;  // wall time of the whole evaluation
};

// accuracy, macro_f1, count, per_label {label: {precision, recall, f1,
// support}}, per_tag {tag: {accuracy, macro_f1, count}}. Single-label: the
// arg-max label (DecodeClassification, the checkpoint's temperature);
// multi-label: every label with sigmoid >= 0.5.
absl::StatusOr<EvalResult> EvaluateClassify(const ClassifyData& data, const Tokenizer& tokenizer,
                                            const ModelConfig& config, const Predictor& predict,
                                            const EvalOptions& options);

// Official SQuAD v2 names (exact, f1, total, HasAns_*, NoAns_*, best_exact,
// best_exact_thresh, best_f1, best_f1_thresh) for the predictions at the
// checkpoint's dserve.qa.null_score_diff_threshold; na_prob =
// null_score_diff; best_* as find_best_thresh with each question's best
// non-empty span as its candidate answer. Plus null_score_diff_threshold
// (the configured one), chosen_null_threshold (the F1-maximising one; what
// training stores in the checkpoint) and crossfit_f1 / crossfit_exact /
// crossfit_thresholds (CrossFitThreshold; the main metric).
absl::StatusOr<EvalResult> EvaluateAnswer(const SquadData& data, const Tokenizer& tokenizer,
                                          const ModelConfig& config, const Predictor& predict,
                                          const EvalOptions& options);

// Cross-fitted no-answer threshold (issue 18, defect 7): the questions are
// split in two folds by a stable hash of their id (FoldOf); each fold is
// answered with the threshold ChooseNullThreshold tuned on the other fold
// (`spans`: each question's best non-empty span; na > threshold answers
// ""), and the two halves are scored together. So no question's score
// comes from a threshold fitted to it: an honest F1 for choosing a
// checkpoint on the same set. thresholds[f] was tuned on fold f. With one
// fold empty the other uses its own threshold (tiny sets only).
struct CrossFit {
  double f1 = 0;
  double exact = 0;
  double thresholds[2] = {0, 0};
};
CrossFit CrossFitThreshold(const std::vector<SquadGold>& gold, const std::map<std::string, std::string>& spans,
                           const std::map<std::string, double>& na_probs);
int FoldOf(const std::string& id);  // 0 or 1

// mrr@10, ndcg@10, map, queries, queries_without_relevant: documents scored
// as the server does (long passages chunked, max over chunks).
absl::StatusOr<EvalResult> EvaluateRerank(const RerankData& data, const Tokenizer& tokenizer,
                                          const ModelConfig& config, const Predictor& predict,
                                          const EvalOptions& options);

// Reads `path` in the format of config.task() and evaluates it.
absl::StatusOr<EvalResult> EvaluateFile(const std::string& path, const Tokenizer& tokenizer,
                                        const ModelConfig& config, const Predictor& predict,
                                        const EvalOptions& options);

// Adds latency_p50_ms, latency_p99_ms, items_per_s, items and
// peak_rss_bytes (getrusage ru_maxrss) to result->metrics.
void AddCostMetrics(EvalResult* result);

}  // namespace dserve
