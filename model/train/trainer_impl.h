// The trainer behind `dserve train` (trainer.h), private to model/train/:
// one Trainer per run, its members implemented in rooms with one job each:
//   trainer.cc             the loop: options, tokenizer/config, data, model
//                          (fresh, --init or --resume), the schedule, Loop()
//                          and the rank checks
//   trainer_step.cc        one optimisation step: AdamW groups (weight decay
//                          x --layer-lr-decay), the learning-rate schedule,
//                          each micro-batch's loss (Micro, MaskMicro,
//                          MicroMlm), the gradients' all-reduce, non-finite
//                          gradients (skip) and losses (stop)
//   trainer_eval.cc        evaluation on --eval / --test and OUT/best selection
//   trainer_checkpoint.cc  OUT/last, OUT/best, OUT/trainer_state: atomic
//                          writes, resume, and what an interrupted save left
//   progress.{h,cc}        the progress line and OUT/metrics.csv
// Not thread-safe: one thread drives a Trainer.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "model/train/batch_dump.h"
#include "model/train/data.h"
#include "model/train/distributed.h"
#include "model/train/evaluate.h"
#include "model/train/features.h"
#include "model/train/mlm.h"
#include "model/train/progress.h"
#include "model/train/trainable_model.h"
#include "model/train/trainer.h"
#include "model/util/logging.h"

namespace dserve {
namespace trainer_internal {

// ------------------------------------------------- seeds (trainer_step.cc) --

// A seed that is a function of (seed, a, b, c) only (SplitMix64 chain),
// non-negative for torch::manual_seed.
uint64_t MixSeed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);

// --------------------------------------------- files (trainer_checkpoint.cc) --

// The data-order generator's state as text (state.json), and back.
std::string RngState(const std::mt19937_64& rng);
absl::Status SetRngState(const std::string& state, std::mt19937_64* rng);
// Writes `text` to `path` through path.tmp + rename.
absl::Status WriteTextFile(const std::string& path, const std::string& text);
absl::Status FsyncPath(const std::string& path);
// Replaces directory `dir` by `tmp` atomically (exchange, or rename aside).
absl::Status SwapInDirectory(const std::string& tmp, const std::string& dir);

// ------------------------------------------------- eval (trainer_eval.cc) --

// --select-metric's names per task (the eval metrics' keys), the default
// first.
std::vector<std::string> SelectableMetrics(Task task);

// ------------------------------------------------- step (trainer_step.cc) --

// One micro-batch's share of its step's loss: its loss terms summed and
// divided by the whole step's count (over every micro-batch and rank), so
// that summing the micro-batches' objectives gives the step's mean exactly
// as one big batch would (defect 1). backward() runs on `objective`.
struct MicroResult {
  torch::Tensor objective;
  int64_t tokens = 0;
};

// An MLM micro-batch masked before the step's forwards, so that the step's
// target count is known first.
struct MlmMicro {
  std::vector<int> units;
  MlmBatch batch;
  int64_t targets = 0;       // masked tokens (labels >= 0)
  int64_t sop_examples = 0;  // rows with a sentence-order label
  int64_t tokens = 0;
};

class Trainer {
 public:
  explicit Trainer(const TrainOptions& o) : o_(o), log_(Logger("train")) {}
  absl::Status Run();

 private:
  // ---- the loop (trainer.cc)
  absl::Status Setup();
  absl::Status LoadTokenizerAndConfig();
  absl::Status LoadTokenizerFile();  // tokenizer_src_: spm.model or tokenizer.json
  absl::Status CheckTokenizerAndLength();
  absl::Status LoadData();
  absl::Status BuildModel();
  // --resume with several ranks: all resume from the same step, or an error.
  absl::Status CheckRanksResumeTogether();
  absl::Status Loop();
  absl::Status CheckRanksInSync();
  nlohmann::json TrainingSettings() const;

  // ---- one optimisation step (trainer_step.cc)
  absl::Status SetupOptimizer();
  double LearningRate(int64_t step) const;
  // Classify / answer / rerank: loss terms summed over `units`, / `examples`
  // (the step's global count of units).
  absl::StatusOr<MicroResult> Micro(const std::vector<int>& units, double examples);
  // Masks `units` (each unit with its own generator, seeded by (seed, epoch,
  // unit): the masks do not depend on how units are split into micro-batches
  // or ranks).
  absl::StatusOr<MlmMicro> MaskMicro(const std::vector<int>& units);
  // MLM: cross-entropy summed over the micro-batch's targets / the step's
  // targets, plus SOP summed / the step's SOP rows.
  absl::StatusOr<MicroResult> MicroMlm(const MlmMicro& micro, double targets, double sop_examples);
  // Gives every parameter a gradient (zeros where backward left none); with
  // several ranks sums the gradients and (local_loss, local_tokens) over
  // them into `loss`, `tokens`.
  absl::Status ReduceGradients(double local_loss, int64_t local_tokens, double* loss, double* tokens);
  // The gradient norm into `grad_norm`, always (defect 8); when it is finite
  // clips (--max-grad-norm) and steps AdamW at `lr` x each group's
  // multiplier, otherwise leaves weights and optimizer state as they were.
  absl::Status OptimizerStep(double lr, double* grad_norm);
  // The error that stops a run whose `what` became non-finite at this step.
  absl::Status NonFinite(const std::string& what, double value) const;
  // Test hook: DSERVE_TEST_NAN_GRADIENT_STEPS="3,5" makes those steps'
  // gradients NaN (after backward), so that tests can reach the
  // non-finite-gradient path with a finite loss. Warns once when set.
  void PoisonGradientsForTesting(int64_t step);

  // ---- evaluation and selection (trainer_eval.cc)
  // Scores --eval; a new best (by the selection metric) is saved to OUT/best.
  absl::Status Evaluate(bool* improved, std::map<std::string, double>* csv_eval);
  // `model` with `config` on --eval's data (or --test's).
  absl::StatusOr<EvalResult> Score(const TrainableModel& model, const ModelConfig& config, bool test);
  // --test: OUT/best scored once at the end, into OUT/test_metrics.json.
  absl::Status ScoreTestSet();
  std::vector<std::string> EvalColumns() const;

  // ---- checkpoint I/O (trainer_checkpoint.cc)
  // The trainer_state directory --resume continues from ("" = none: start).
  std::string ResumeDirectory() const;
  // state.json of `resume_dir` into the progress counters and data_rng_.
  absl::Status LoadState(const std::string& resume_dir);
  absl::Status SaveState();
  absl::Status SaveCheckpoint(const std::string& dir, const nlohmann::json& metrics, std::optional<double> threshold);
  absl::Status FinishInterruptedSave();
  // Deletes what a killed run left of an unfinished save (OUT/last.tmp.*,
  // OUT/best.tmp.*, OUT/trainer_state.tmp, and the *.old of a fallback swap)
  // when the directory it was replacing is in place.
  void RemoveStaleTemps() const;
  std::string StateDir() const;

  bool IsMain() const { return comm_->rank() == 0; }

  std::vector<int64_t> poison_steps_;
  TrainOptions o_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<Communicator> comm_;
  Task task_ = Task::kNone;
  const TrainableFamily* family_ = nullptr;  // config_'s (trainable_family.h)
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizer_src_;
  // --init's BPE tokenizer files (DeBERTa v1: vocab.json, merges.txt, ...),
  // copied into every checkpoint written beside tokenizer_src_.
  std::vector<std::string> tokenizer_files_;
  std::vector<std::string> init_weights_;  // --init's safetensors
  bool init_head_compatible_ = false;
  int max_length_ = 0;

  // data
  ClassifyData classify_train_, classify_eval_, classify_test_;
  SquadData squad_train_, squad_eval_, squad_test_;
  RerankData rerank_train_, rerank_eval_, rerank_test_;
  bool has_eval_ = false;
  FeatureSet train_;
  std::vector<MlmExample> mlm_train_, mlm_eval_, mlm_test_;
  bool sop_ = false;
  MaskingOptions masking_;

  std::unique_ptr<TrainableModel> model_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::vector<std::string> no_decay_names_;  // parameters without weight decay
  std::vector<double> group_lr_multipliers_;  // per optimizer group: --layer-lr-decay's factor
  torch::Tensor class_weights_;  // --class-weights: [num_labels] float, mean 1 over the training set
  // --class-weights: class_weights_ from the training features' labels.
  absl::Status SetClassWeights();
  std::unique_ptr<BatchDump> dump_;          // --dump-batches

  // progress counters (saved in trainer_state/state.json)
  int64_t step_ = 0;
  int64_t epoch_ = 0;
  int64_t micro_in_epoch_ = 0;
  std::mt19937_64 data_rng_;
  std::string epoch_rng_state_;
  double best_metric_ = -std::numeric_limits<double>::infinity();
  int64_t best_step_ = -1;
  int64_t evals_without_improvement_ = 0;
  nlohmann::json last_eval_metrics_ = nlohmann::json::object();
  std::optional<double> last_threshold_;
  bool resumed_ = false;
  int64_t skipped_steps_ = 0;  // steps whose gradients were not finite (no update)
  int64_t saved_step_ = -1;  // step of the last trainer_state/ + last/ of this output dir

  // schedule
  int64_t micro_per_epoch_ = 0;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
  int64_t warmup_steps_ = 0;
  std::vector<int> perm_;
  MetricsCsv csv_;
};

}  // namespace trainer_internal
}  // namespace dserve
