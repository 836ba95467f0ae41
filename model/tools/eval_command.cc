#include "model/tools/eval_command.h"

#include <fstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/family/tokenizer_for_model.h"
#include "model/deberta/model.h"
#include "model/tokenizer/tokenizer.h"
#include "model/train/evaluate.h"
#include "model/train/trainable_model.h"

namespace dserve {

CLI::App* AddEvalCommand(CLI::App& app, EvalCommandOptions* options) {
  auto* cmd = app.add_subcommand("eval", "Evaluate a checkpoint on a data file; prints one JSON object of metrics");
  cmd->add_option("--model", options->model_dir, "checkpoint directory")->required();
  cmd->add_option("--data", options->data, "data file in the format of the model's task (DESIGN §4)")->required();
  cmd->add_option("--predictions", options->predictions, "write predictions here (answer: {qid: text})");
  cmd->add_option("--batch-size", options->batch_size, "sequences per forward")->capture_default_str();
  cmd->add_option("--max-length", options->max_length, "0 = the checkpoint's max length")->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "fp32|bf16|fp16|int8")->capture_default_str();
  cmd->add_option("--device", options->device, "auto|cpu|cuda|cuda:N")->capture_default_str();
  cmd->add_option("--threads", options->threads, "intra-op threads (0 = default)")->capture_default_str();
  return cmd;
}

namespace {

// Masked-LM checkpoints are not servable; they are evaluated through the
// training model (encoder + EMD + MLM head) in eval mode.
int RunMlmEval(const EvalCommandOptions& options, std::ostream& out, std::ostream& err) {
  auto files = ResolveCheckpoint(options.model_dir);
  if (!files.ok()) {
    err << "dserve eval: " << files.status().message() << "\n";
    return 2;
  }
  auto config = ModelConfig::FromFile(files->config);
  auto tokenizer = config.ok() ? LoadCheckpointTokenizer(options.model_dir, *config)
                               : absl::StatusOr<std::unique_ptr<Tokenizer>>(config.status());
  if (!config.ok() || !tokenizer.ok()) {
    err << "dserve eval: " << (config.ok() ? tokenizer.status() : config.status()).message() << "\n";
    return 2;
  }
  const nlohmann::json& training = config->dserve.training;
  const bool sop = training.value("objective", "mlm") == "sop";
  const bool emd = training.value("emd", true);
  std::vector<std::string> initialised;
  auto model = TrainableModel::FromFiles(*config, files->weights, true, &initialised, sop);
  if (!model.ok()) {
    err << "dserve eval: " << model.status().message() << "\n";
    return 2;
  }
  if (!initialised.empty()) {
    err << "dserve eval: " << options.model_dir << " cannot be evaluated as a masked LM: "
        << absl::StrJoin(initialised, "; ") << "\n";
    return 2;
  }
  const int max_length = options.max_length > 0 ? options.max_length : static_cast<int>(config->max_sequence_length());
  auto examples = ReadMlmExamples(options.data, **tokenizer, max_length, sop, /*seed=*/0);
  if (!examples.ok()) {
    err << "dserve eval: " << examples.status().message() << "\n";
    return 1;
  }
  MaskingOptions masking;
  masking.mask_prob = training.value("mask_prob", 0.15);
  masking.span_masking = training.value("span_masking", false);
  auto result = EvaluateMlm(**model, *examples, **tokenizer, options.batch_size, /*seed=*/1, masking, emd);
  if (!result.ok()) {
    err << "dserve eval: " << result.status().message() << "\n";
    return 1;
  }
  EvalResult r;
  r.metrics = result->metrics;
  r.item_latency_ms = result->item_latency_ms;
  r.seconds = result->seconds;
  AddCostMetrics(&r);
  out << r.metrics.dump() << "\n";
  return 0;
}

}  // namespace

int RunEvalCommand(const EvalCommandOptions& options, std::ostream& out, std::ostream& err) {
  if (options.threads > 0) ConfigureInferenceThread(options.threads);
  if (auto files = ResolveCheckpoint(options.model_dir); files.ok()) {
    auto config = ModelConfig::FromFile(files->config);
    if (config.ok() && config->task() == Task::kMlm) return RunMlmEval(options, out, err);
  }
  ModelOptions mo;
  mo.dtype = options.dtype;
  mo.device = options.device;
  auto model = DebertaModel::Load(options.model_dir, mo);
  if (!model.ok()) {
    err << "dserve eval: " << model.status().message() << "\n";
    return 2;
  }
  auto tokenizer = LoadCheckpointTokenizer(options.model_dir, (*model)->config());
  if (!tokenizer.ok()) {
    err << "dserve eval: " << tokenizer.status().message() << "\n";
    return 2;
  }
  const DebertaModel& m = **model;
  Predictor predict = [&](const TokenBatch& batch) { return m.Run(batch); };
  EvalOptions eo;
  eo.batch_size = options.batch_size;
  eo.max_length = options.max_length > 0 ? options.max_length : static_cast<int>(m.max_length());
  eo.want_predictions = !options.predictions.empty();
  auto result = EvaluateFile(options.data, **tokenizer, m.config(), predict, eo);
  if (!result.ok()) {
    err << "dserve eval: " << result.status().message() << "\n";
    return result.status().code() == absl::StatusCode::kUnimplemented ? 2 : 1;
  }
  AddCostMetrics(&*result);
  if (!options.predictions.empty()) {
    std::ofstream p(options.predictions, std::ios::trunc);
    p << result->predictions.dump(2) << "\n";
    if (!p) {
      err << "dserve eval: cannot write " << options.predictions << "\n";
      return 1;
    }
  }
  out << result->metrics.dump() << "\n";
  return 0;
}

}  // namespace dserve
