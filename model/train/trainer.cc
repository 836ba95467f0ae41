// `dserve train` (trainer.h), the loop: options, tokenizer and config,
// data, the model (fresh, --init or --resume), the schedule and Loop();
// the other rooms are listed in trainer_impl.h.
#include "model/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/deberta/torch_util.h"
#include "model/family/tokenizer_for_model.h"
#include "model/train/portable_random.h"
#include "model/train/trainer_impl.h"
#include "model/util/cpu_info.h"
#include "model/util/process.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace trainer_internal {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

absl::Status Trainer::Run() {
  RETURN_IF_ERROR(Setup());
  return Loop();
}

absl::Status Trainer::Setup() {
  if (const char* steps = std::getenv("DSERVE_TEST_NAN_GRADIENT_STEPS"); steps != nullptr && *steps != '\0') {
    for (absl::string_view part : absl::StrSplit(steps, ',', absl::SkipEmpty())) {
      int64_t step = 0;
      if (absl::SimpleAtoi(part, &step)) poison_steps_.push_back(step);
    }
    log_->warn("test hook DSERVE_TEST_NAN_GRADIENT_STEPS={}: NaN gradients at those steps", steps);
  }
  if (o_.task == "classify") task_ = Task::kClassify;
  else if (o_.task == "answer") task_ = Task::kAnswer;
  else if (o_.task == "rerank") task_ = Task::kRerank;
  else if (o_.task == "mlm") task_ = Task::kMlm;
  else {
    return absl::InvalidArgumentError(absl::StrCat("--task must be classify, answer, rerank or mlm, got \"", o_.task, "\""));
  }
  if (o_.train_path.empty()) return absl::InvalidArgumentError("--train is required");
  if (o_.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  if (o_.init_dir.empty() == o_.config_path.empty()) {
    return absl::InvalidArgumentError("give either --init DIR or --config config.json (with --tokenizer spm.model)");
  }
  if (!o_.config_path.empty() && o_.tokenizer_path.empty()) {
    return absl::InvalidArgumentError("--config needs --tokenizer spm.model");
  }
  if (o_.batch_size < 1 || o_.grad_accum < 1 || o_.epochs < 1 || o_.max_steps < 0) {
    return absl::InvalidArgumentError("--batch-size, --grad-accum and --epochs must be >= 1, --max-steps >= 0");
  }
  if (!(o_.lr > 0) || o_.warmup_ratio < 0 || o_.warmup_ratio > 1) {
    return absl::InvalidArgumentError("--lr must be > 0 and --warmup-ratio in [0, 1]");
  }
  if (o_.lr_schedule != "linear" && o_.lr_schedule != "cosine") {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr-schedule must be linear or cosine (got '", o_.lr_schedule, "')"));
  }
  if (!o_.select_metric.empty()) {
    const std::vector<std::string> valid = SelectableMetrics(task_);
    if (std::find(valid.begin(), valid.end(), o_.select_metric) == valid.end()) {
      return absl::InvalidArgumentError(absl::StrCat("--select-metric ", o_.select_metric, " is not a --task ",
                                                     o_.task, " metric; choose one of ", absl::StrJoin(valid, ", ")));
    }
  }
  if (!(o_.layer_lr_decay > 0 && o_.layer_lr_decay <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--layer-lr-decay must be in (0, 1] (1 = off), got ", o_.layer_lr_decay));
  }
  if (o_.listwise && task_ != Task::kRerank) return absl::InvalidArgumentError("--listwise is for --task rerank");
  if (!o_.class_weights.empty() && task_ != Task::kClassify) {
    return absl::InvalidArgumentError("--class-weights is for --task classify");
  }
  if (!o_.objective.empty() && o_.objective != "sop" && o_.objective != "mlm") {
    return absl::InvalidArgumentError(absl::StrCat("--objective must be sop (or mlm), got \"", o_.objective, "\""));
  }
  if ((o_.objective == "sop" || o_.span_masking || o_.no_emd) && task_ != Task::kMlm) {
    return absl::InvalidArgumentError("--objective sop, --span-masking and --no-emd are for --task mlm");
  }
  if (o_.bf16) {
    // model/deberta/autocast.h: matmuls in bf16, fp32 master weights,
    // LayerNorm/softmax/losses in fp32; evaluation in fp32.
    log_->info("--bf16: training forwards under CPU autocast to bfloat16 ({})", CpuPathNote());
  }
  if (!o_.dump_batches_dir.empty() && o_.resume) {
    return absl::InvalidArgumentError("--dump-batches records a run from its start: not with --resume");
  }
  if (o_.device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat("--device ", o_.device, ": training runs on cpu in this build"));
  }
  Communicator::Options copts;
  copts.world_size = o_.world_size;
  copts.rank = o_.rank;
  copts.master_addr = o_.master_addr;
  copts.master_port = o_.master_port;
  if (o_.threads > 0) {
    at::set_num_threads(o_.threads);
  } else if (o_.world_size > 1) {
    const int cores = UsableCpuCores();
    at::set_num_threads(std::max(1, cores / o_.world_size));
  }
  ASSIGN_OR_RETURN(comm_, Communicator::Create(copts));
  std::error_code ec;
  fs::create_directories(o_.out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(o_.out_dir, ": cannot create: ", ec.message()));
  if (IsMain()) RemoveStaleTemps();

  RETURN_IF_ERROR(LoadTokenizerAndConfig());
  RETURN_IF_ERROR(LoadData());
  RETURN_IF_ERROR(BuildModel());
  model_->set_bf16_autocast(o_.bf16);
  RETURN_IF_ERROR(model_->SetGradientCheckpointing(o_.gradient_checkpointing));
  RETURN_IF_ERROR(SetupOptimizer());
  if (resumed_) RETURN_IF_ERROR(TorchCall("loading optimizer state", [&] {
    torch::load(*optimizer_, (fs::path(StateDir()) / "optimizer.pt").string());
  }));
  if (resumed_ && IsMain()) RETURN_IF_ERROR(FinishInterruptedSave());

  // Schedule.
  const int64_t units = static_cast<int64_t>(train_.units.size());
  const int64_t global = static_cast<int64_t>(o_.batch_size) * comm_->world_size();
  micro_per_epoch_ = (units + global - 1) / global;
  steps_per_epoch_ = (micro_per_epoch_ + o_.grad_accum - 1) / o_.grad_accum;
  total_steps_ = steps_per_epoch_ * o_.epochs;
  if (o_.max_steps > 0) total_steps_ = std::min<int64_t>(total_steps_, o_.max_steps);
  // Hugging Face's TrainingArguments.get_warmup_steps: ceil, not round
  // (the exact-loss oracle caught 2 vs 3 warmup steps for 0.12 x 20).
  warmup_steps_ = static_cast<int64_t>(std::ceil(static_cast<double>(total_steps_) * o_.warmup_ratio));
  if (IsMain()) {
    log_->info("{}: {} training units ({} sequences, {} truncated/windowed), {} steps/epoch, {} steps, global batch {}",
               o_.task, units, train_.features.size(), train_.truncated, steps_per_epoch_, total_steps_,
               global * o_.grad_accum);
    RETURN_IF_ERROR(MetricsCsv::Open((fs::path(o_.out_dir) / "metrics.csv").string(), EvalColumns(),
                                     resumed_ ? step_ : 0, &csv_));
  }
  if (!o_.dump_batches_dir.empty()) {
    json run = {{"format", 1},
                {"task", o_.task},
                {"config", config_.ToJson()},
                {"optimizer",
                 {{"name", "adamw"},
                  {"lr", o_.lr},
                  {"weight_decay", o_.weight_decay},
                  {"betas", {0.9, 0.999}},
                  {"eps", o_.adam_eps},
                  {"max_grad_norm", o_.max_grad_norm},
                  {"schedule", "linear"},
                  {"warmup_ratio", o_.warmup_ratio},
                  {"warmup_steps", warmup_steps_},
                  {"lr_schedule", o_.lr_schedule},
                  {"layer_lr_decay", o_.layer_lr_decay},
                  {"total_steps", total_steps_}}},
                {"batch_size", o_.batch_size},
                {"grad_accum", o_.grad_accum},
                {"listwise", o_.listwise},
                {"bf16", o_.bf16},
                {"gradient_checkpointing", o_.gradient_checkpointing},
                {"emd", !o_.no_emd && family_->mlm_emd},
                {"objective", o_.objective.empty() ? "mlm" : o_.objective},
                {"no_decay", no_decay_names_},
                {"world_size", comm_->world_size()}};
    json names = json::array();
    for (const auto& [name, p] : params_) names.push_back(name);
    run["params"] = names;
    // Each tensor's --layer-lr-decay multiplier (the oracle recomputes them
    // from the names and checks that they agree).
    json multipliers = json::object();
    for (const auto& [name, p] : params_) multipliers[name] = LayerLrMultiplier(name, config_.num_hidden_layers, o_.layer_lr_decay);
    run["lr_multipliers"] = multipliers;
    if (class_weights_.defined()) {
      run["class_weights"] = std::vector<float>(class_weights_.data_ptr<float>(),
                                                class_weights_.data_ptr<float>() + class_weights_.numel());
    }
    ASSIGN_OR_RETURN(dump_, BatchDump::Create(o_.dump_batches_dir, run, params_, comm_->rank(), comm_->world_size()));
    if (IsMain()) log_->info("--dump-batches: writing every step's batches to {}", o_.dump_batches_dir);
  }
  return absl::OkStatus();
}

absl::Status Trainer::LoadTokenizerAndConfig() {
  if (!o_.init_dir.empty()) {
    ASSIGN_OR_RETURN(CheckpointFiles files, ResolveCheckpoint(o_.init_dir));
    ASSIGN_OR_RETURN(config_, ModelConfig::FromFile(files.config));
    // A family that cannot be trained is named before its files are checked.
    RETURN_IF_ERROR(TrainableFamilyOf(config_).status());
    init_weights_ = files.weights;
    tokenizer_src_ = files.tokenizer;
    tokenizer_files_ = files.bpe_files;
    // Without a spm.model / tokenizer.json to copy it beside, the BPE
    // tokenizer's tokenizer_config.json travels on its own.
    if (files.tokenizer.empty() && !files.bpe_files.empty() && !files.tokenizer_config.empty()) {
      tokenizer_files_.push_back(files.tokenizer_config);
    }
    if (o_.tokenizer_path.empty() && files.tokenizer.empty() && files.bpe_files.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          o_.init_dir, ": no spm.model, spiece.model, tokenizer.json or vocab.json + merges.txt (give --tokenizer)"));
    }
  } else {
    ASSIGN_OR_RETURN(config_, ModelConfig::FromFile(o_.config_path));
  }
  ASSIGN_OR_RETURN(family_, TrainableFamilyOf(config_));
  const char* unsupported = o_.init_dir.empty() && !family_->from_scratch           ? "--config (fresh weights)"
                            : !o_.tokenizer_path.empty() && !family_->other_tokenizer ? "--tokenizer"
                            : task_ == Task::kMlm && !family_->mlm                   ? "--task mlm"
                                                                                     : nullptr;
  if (unsupported != nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        "model_type \"", config_.model_type, "\": ", unsupported,
        " is not supported for this family; dserve train fine-tunes its checkpoints (--init DIR, with the "
        "tokenizer and text rules found there) for --task classify, rerank or answer",
        family_->mlm ? ", and continues its masked-LM pretraining (--task mlm)" : ""));
  }
  if (!o_.tokenizer_path.empty()) {
    tokenizer_src_ = o_.tokenizer_path;
    tokenizer_files_.clear();
    RETURN_IF_ERROR(LoadTokenizerFile());
  } else if (!o_.init_dir.empty()) {
    // The checkpoint's tokenizer with its family's text rules, exactly as
    // the server will tokenize for the model this run writes.
    ASSIGN_OR_RETURN(tokenizer_, LoadCheckpointTokenizer(o_.init_dir, config_));
  }
  return CheckTokenizerAndLength();
}

absl::Status Trainer::LoadTokenizerFile() {
  if (fs::path(tokenizer_src_).filename() == "tokenizer.json") {
    ASSIGN_OR_RETURN(tokenizer_, Tokenizer::FromTokenizerJsonFile(tokenizer_src_));
  } else {
    ASSIGN_OR_RETURN(tokenizer_, Tokenizer::FromSpmFile(tokenizer_src_));
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckTokenizerAndLength() {
  if (tokenizer_->vocab_size() > config_.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the tokenizer (", tokenizer_src_, ") has ", tokenizer_->vocab_size(),
                                                   " ids but the config's vocab_size is ", config_.vocab_size));
  }
  const int64_t limit = config_.position_biased_input ? config_.max_position_embeddings : 512;
  max_length_ = o_.max_length > 0 ? o_.max_length : static_cast<int>(std::min<int64_t>(512, config_.max_position_embeddings));
  if (max_length_ > limit) {
    return absl::InvalidArgumentError(absl::StrCat("--max-length ", max_length_, " exceeds max_position_embeddings (",
                                                   config_.max_position_embeddings, ")"));
  }
  if (max_length_ < 8) return absl::InvalidArgumentError("--max-length must be >= 8");
  return absl::OkStatus();
}

absl::Status Trainer::LoadData() {
  has_eval_ = !o_.eval_path.empty();
  const bool has_test = !o_.test_path.empty();
  // Task-specific config: architecture, labels, task block.
  config_.dserve.max_length = max_length_;
  config_.dserve.qa.doc_stride = o_.doc_stride;
  switch (task_) {
    case Task::kClassify: {
      ASSIGN_OR_RETURN(classify_train_, ReadClassifyJsonl(o_.train_path));
      if (has_eval_) { ASSIGN_OR_RETURN(classify_eval_, ReadClassifyJsonl(o_.eval_path)); }
      if (has_test) { ASSIGN_OR_RETURN(classify_test_, ReadClassifyJsonl(o_.test_path)); }
      const bool multi = classify_train_.multi_label || o_.problem_type == "multi_label_classification";
      std::vector<std::string> labels = CollectLabels(classify_train_);
      // Keep an --init checkpoint's label order (and head) when its labels are ours.
      const std::vector<std::string> init_labels = config_.labels();
      const bool same = !o_.init_dir.empty() && config_.task() == Task::kClassify &&
                        std::set<std::string>(init_labels.begin(), init_labels.end()) ==
                            std::set<std::string>(labels.begin(), labels.end());
      init_head_compatible_ = same;
      if (same) labels = init_labels;
      config_.id2label.clear();
      for (size_t i = 0; i < labels.size(); ++i) config_.id2label[static_cast<int64_t>(i)] = labels[i];
      config_.problem_type = multi ? "multi_label_classification" : "single_label_classification";
      config_.architectures = {family_->Architecture("ForSequenceClassification")};
      config_.dserve.task = Task::kClassify;
      ASSIGN_OR_RETURN(train_, BuildClassifyFeatures(classify_train_, *tokenizer_, labels, max_length_));
      RETURN_IF_ERROR(SetClassWeights());
      break;
    }
    case Task::kAnswer: {
      ASSIGN_OR_RETURN(squad_train_, ReadSquadJson(o_.train_path));
      if (has_eval_) { ASSIGN_OR_RETURN(squad_eval_, ReadSquadJson(o_.eval_path)); }
      if (has_test) { ASSIGN_OR_RETURN(squad_test_, ReadSquadJson(o_.test_path)); }
      init_head_compatible_ = config_.task() == Task::kAnswer;
      config_.architectures = {family_->Architecture("ForQuestionAnswering")};
      config_.id2label.clear();
      config_.problem_type.clear();
      config_.dserve.task = Task::kAnswer;
      ASSIGN_OR_RETURN(train_, BuildAnswerFeatures(squad_train_, *tokenizer_, max_length_, o_.doc_stride));
      break;
    }
    case Task::kRerank: {
      ASSIGN_OR_RETURN(rerank_train_, ReadRerankJsonl(o_.train_path));
      if (has_eval_) { ASSIGN_OR_RETURN(rerank_eval_, ReadRerankJsonl(o_.eval_path)); }
      if (has_test) { ASSIGN_OR_RETURN(rerank_test_, ReadRerankJsonl(o_.test_path)); }
      init_head_compatible_ = config_.task() == Task::kRerank && config_.num_labels() == 1;
      config_.architectures = {family_->Architecture("ForSequenceClassification")};
      config_.id2label = {{0, "LABEL_0"}};
      config_.problem_type.clear();
      config_.dserve.task = Task::kRerank;
      ASSIGN_OR_RETURN(train_, BuildRerankFeatures(rerank_train_, *tokenizer_, max_length_, o_.doc_stride, o_.listwise));
      break;
    }
    case Task::kMlm: {
      sop_ = o_.objective == "sop";
      masking_.mask_prob = o_.mask_prob;
      masking_.span_masking = o_.span_masking;
      if (tokenizer_->mask_id() >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("[MASK] id ", tokenizer_->mask_id(), " is outside vocab_size ",
                                                       config_.vocab_size));
      }
      ASSIGN_OR_RETURN(mlm_train_, ReadMlmExamples(o_.train_path, *tokenizer_, max_length_, sop_, o_.seed));
      if (has_eval_) { ASSIGN_OR_RETURN(mlm_eval_, ReadMlmExamples(o_.eval_path, *tokenizer_, max_length_, sop_, o_.seed + 1)); }
      if (has_test) { ASSIGN_OR_RETURN(mlm_test_, ReadMlmExamples(o_.test_path, *tokenizer_, max_length_, sop_, o_.seed + 3)); }
      init_head_compatible_ = true;  // MlmHead::Load initialises what is missing
      if (!family_->mlm_emd && IsMain()) {
        log_->info("model_type \"{}\": {}ForMaskedLM has no Enhanced Mask Decoder; the MLM head reads the last "
                   "layer{}", config_.model_type, family_->architecture_prefix,
                   o_.no_emd ? " (--no-emd changes nothing)" : "");
      }
      config_.architectures = {family_->Architecture("ForMaskedLM")};
      config_.id2label.clear();
      config_.problem_type.clear();
      config_.dserve.task = Task::kMlm;
      for (size_t i = 0; i < mlm_train_.size(); ++i) train_.units.push_back({static_cast<int>(i)});
      break;
    }
    default:
      return absl::InternalError("unreachable task");
  }
  config_.extra.erase("num_labels");
  config_.dserve.training = TrainingSettings();
  RETURN_IF_ERROR(config_.Validate());
  if (train_.units.empty()) return absl::InvalidArgumentError(absl::StrCat(o_.train_path, ": no training examples"));
  return absl::OkStatus();
}

absl::Status Trainer::BuildModel() {
  const std::string resume_dir = ResumeDirectory();
  if (!resume_dir.empty()) {
    ASSIGN_OR_RETURN(ModelConfig saved, ModelConfig::FromFile((fs::path(resume_dir) / "config.json").string()));
    if (saved.labels() != config_.labels() || saved.task() != config_.task()) {
      return absl::InvalidArgumentError(absl::StrCat(resume_dir, ": saved for task ", TaskName(saved.task()), " with ",
                                                     saved.num_labels(), " labels; this run's data and options differ"));
    }
    std::vector<std::string> initialised;
    ASSIGN_OR_RETURN(model_, TrainableModel::FromFiles(config_, {(fs::path(resume_dir) / "model.safetensors").string()},
                                                       true, &initialised, sop_));
    if (!initialised.empty()) {
      return absl::DataLossError(absl::StrCat(resume_dir, ": weights are missing for ", absl::StrJoin(initialised, "; ")));
    }
    RETURN_IF_ERROR(LoadState(resume_dir));
    resumed_ = true;
    saved_step_ = step_;
    if (IsMain()) log_->info("resuming from {} at step {}", resume_dir, step_);
  } else if (!o_.init_dir.empty()) {
    torch::manual_seed(o_.seed);
    std::vector<std::string> initialised;
    ASSIGN_OR_RETURN(model_, TrainableModel::FromFiles(config_, init_weights_, init_head_compatible_, &initialised, sop_));
    if (IsMain()) {
      // Defect 2: say which part was drawn fresh (the phrase "head
      // initialised" is what users and tests grep for).
      for (const std::string& part : initialised) {
        log_->info("--init {}: {}", o_.init_dir, part);
      }
    }
    data_rng_.seed(o_.seed);
  } else {
    torch::manual_seed(o_.seed);
    ASSIGN_OR_RETURN(model_, TrainableModel::FromScratch(config_, sop_));
    data_rng_.seed(o_.seed);
  }
  params_ = model_->Parameters();
  if (comm_->world_size() > 1) RETURN_IF_ERROR(CheckRanksResumeTogether());
  if (comm_->world_size() > 1) {
    // Identical weights everywhere: rank 0's.
    torch::Tensor flat;
    RETURN_IF_ERROR(TorchCall("flattening weights", [&] {
      torch::NoGradGuard g;
      std::vector<torch::Tensor> parts;
      for (auto& [n, p] : params_) parts.push_back(p.detach().reshape(-1));
      flat = torch::cat(parts);
    }));
    std::vector<torch::Tensor> one{flat};
    RETURN_IF_ERROR(comm_->Broadcast(one));
    RETURN_IF_ERROR(TorchCall("unflattening weights", [&] {
      torch::NoGradGuard g;
      int64_t offset = 0;
      for (auto& [n, p] : params_) {
        p.copy_(flat.narrow(0, offset, p.numel()).view_as(p));
        offset += p.numel();
      }
    }));
  }
  return absl::OkStatus();
}

absl::Status Trainer::CheckRanksResumeTogether() {
  // Defect 3: every rank reads OUT/trainer_state itself. Without a shared
  // file system a rank may see another save or none, and the ranks would
  // run different steps (a hang or diverged weights): refuse instead.
  const double mine = resumed_ ? static_cast<double>(step_) : -1.0;
  std::vector<torch::Tensor> both{torch::tensor({mine, -mine}, torch::kDouble)};
  RETURN_IF_ERROR(comm_->AllReduceMax(both));
  const double highest = both[0][0].item<double>(), lowest = -both[0][1].item<double>();
  if (highest == lowest) return absl::OkStatus();
  auto describe = [](double step) {
    return step < 0 ? std::string("no trainer_state") : absl::StrCat("trainer_state at step ", step);
  };
  return absl::FailedPreconditionError(absl::StrCat(
      "--resume: the ranks disagree on where to resume (this rank ", comm_->rank(), ": ", describe(mine),
      "; others: ", describe(highest == mine ? lowest : highest),
      "). Every rank reads OUT/trainer_state: give all ranks the same --out on a shared file system, or copy "
      "rank 0's OUT/trainer_state to each rank's --out"));
}

json Trainer::TrainingSettings() const {
  json j = {{"task", o_.task},
            {"train", o_.train_path},
            {"epochs", o_.epochs},
            {"max_steps", o_.max_steps},
            {"batch_size", o_.batch_size},
            {"grad_accum", o_.grad_accum},
            {"world_size", o_.world_size},
            {"lr", o_.lr},
            {"weight_decay", o_.weight_decay},
            {"warmup_ratio", o_.warmup_ratio},
            {"lr_schedule", o_.lr_schedule},
            {"layer_lr_decay", o_.layer_lr_decay},
            {"select_metric", o_.select_metric.empty() ? SelectableMetrics(task_).front() : o_.select_metric},
            {"max_grad_norm", o_.max_grad_norm},
            {"max_length", max_length_},
            {"seed", o_.seed},
            {"bf16", o_.bf16},
            {"gradient_checkpointing", o_.gradient_checkpointing}};
  if (!o_.class_weights.empty()) j["class_weights"] = o_.class_weights;
  if (!o_.eval_path.empty()) j["eval"] = o_.eval_path;
  if (!o_.test_path.empty()) j["test"] = o_.test_path;
  if (!o_.init_dir.empty()) j["init"] = o_.init_dir;
  if (!o_.config_path.empty()) j["config"] = o_.config_path;
  if (task_ == Task::kRerank) j["listwise"] = o_.listwise;
  if (task_ == Task::kAnswer) j["doc_stride"] = o_.doc_stride;
  if (task_ == Task::kMlm) {
    j["objective"] = o_.objective.empty() ? "mlm" : o_.objective;
    j["span_masking"] = o_.span_masking;
    j["emd"] = !o_.no_emd && family_->mlm_emd;  // what ran: v1 has no EMD
    j["mask_prob"] = o_.mask_prob;
  }
  return j;
}

absl::Status Trainer::CheckRanksInSync() {
  torch::Tensor hi, lo;
  RETURN_IF_ERROR(TorchCall("comparing ranks", [&] {
    torch::NoGradGuard g;
    std::vector<torch::Tensor> parts;
    for (auto& [n, p] : params_) parts.push_back(p.detach().reshape(-1));
    hi = torch::cat(parts);
    lo = -hi;
  }));
  std::vector<torch::Tensor> both{hi, lo};
  RETURN_IF_ERROR(comm_->AllReduceMax(both));
  const double diff = (hi + lo).max().item<double>();  // max over ranks - min over ranks
  if (IsMain()) {
    log_->info("weights across {} ranks: max difference {}", comm_->world_size(), diff);
    json j = {{"world_size", comm_->world_size()}, {"max_weight_diff_across_ranks", diff}, {"step", step_}};
    RETURN_IF_ERROR(WriteTextFile((fs::path(o_.out_dir) / "distributed.json").string(), j.dump(2)));
  }
  return absl::OkStatus();
}

absl::Status Trainer::Loop() {
  const int64_t N = static_cast<int64_t>(train_.units.size());
  const int64_t B = o_.batch_size;
  const int64_t G = B * comm_->world_size();
  const int64_t A = o_.grad_accum;
  auto start_epoch = [&]() {
    epoch_rng_state_ = RngState(data_rng_);
    perm_.resize(static_cast<size_t>(N));
    std::iota(perm_.begin(), perm_.end(), 0);
    PortableShuffle(perm_, data_rng_);
  };
  start_epoch();  // on resume data_rng_ holds the saved epoch's start state
  ProgressLine progress(total_steps_, stderr);
  bool stop = step_ >= total_steps_;
  if (stop && IsMain()) log_->info("nothing to do: step {} of {} already done", step_, total_steps_);
  double tokens_window = 0, seconds_window = 0;
  while (!stop) {
    if (micro_in_epoch_ >= micro_per_epoch_) {
      ++epoch_;
      micro_in_epoch_ = 0;
      start_epoch();
    }
    const auto t0 = Clock::now();
    const int64_t m_begin = micro_in_epoch_, m_end = std::min(micro_per_epoch_, m_begin + A);
    const double denom = static_cast<double>(std::min(N, m_end * G) - m_begin * G);
    RETURN_IF_ERROR(TorchCall("zero grad", [&] { optimizer_->zero_grad(); }));
    // This rank's micro-batches of the step.
    std::vector<std::pair<int64_t, std::vector<int>>> micros;
    for (int64_t m = m_begin; m < m_end; ++m) {
      const int64_t lo = std::min(N, m * G + comm_->rank() * B), hi = std::min(N, m * G + (comm_->rank() + 1) * B);
      if (lo < hi) micros.emplace_back(m, std::vector<int>(perm_.begin() + lo, perm_.begin() + hi));
    }
    // MLM: mask first, then the step's target counts over every rank.
    std::vector<MlmMicro> masked;
    double mlm_targets = 0, sop_examples = 0;
    if (task_ == Task::kMlm) {
      for (const auto& [m, units] : micros) {
        ASSIGN_OR_RETURN(MlmMicro micro, MaskMicro(units));
        mlm_targets += static_cast<double>(micro.targets);
        sop_examples += static_cast<double>(micro.sop_examples);
        masked.push_back(std::move(micro));
      }
      if (comm_->world_size() > 1) {
        std::vector<torch::Tensor> counts{torch::tensor({mlm_targets, sop_examples}, torch::kDouble)};
        RETURN_IF_ERROR(comm_->AllReduceSum(counts));
        mlm_targets = counts[0][0].item<double>();
        sop_examples = counts[0][1].item<double>();
      }
    }
    double local_loss = 0;
    int64_t local_tokens = 0;
    for (size_t i = 0; i < micros.size(); ++i) {
      const int64_t m = micros[i].first;
      torch::manual_seed(MixSeed(o_.seed, static_cast<uint64_t>(comm_->rank()), static_cast<uint64_t>(step_),
                                 static_cast<uint64_t>(m)));
      absl::StatusOr<MicroResult> micro = task_ == Task::kMlm ? MicroMlm(masked[i], mlm_targets, sop_examples)
                                                              : Micro(micros[i].second, denom);
      RETURN_IF_ERROR(micro.status());
      MicroResult& r = *micro;
      local_tokens += r.tokens;
      RETURN_IF_ERROR(TorchCall("backward", [&] {
        r.objective.backward();
        local_loss += r.objective.item<double>();
      }));
    }
    double loss = 0, tokens = 0;
    RETURN_IF_ERROR(ReduceGradients(local_loss, local_tokens, &loss, &tokens));
    // Stop before a non-finite loss or gradient reaches the weights; nothing
    // of this step is saved, so the last checkpoint stays the last good one.
    if (!std::isfinite(loss)) return NonFinite("loss", loss);
    const double lr = LearningRate(step_);
    // The gradient norm, always (defect 8): a non-finite one skips the
    // update (weights and optimizer state stay as they were); the step still
    // counts, as in Hugging Face's Trainer, and is counted as skipped.
    double grad_norm = 0;
    RETURN_IF_ERROR(OptimizerStep(lr, &grad_norm));
    if (dump_ != nullptr) {
      json info = {{"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm}};
      if (task_ == Task::kMlm) {
        info["targets"] = mlm_targets;
        info["sop_examples"] = sop_examples;
      } else {
        info["units"] = denom;
      }
      RETURN_IF_ERROR(dump_->FinishStep(step_ + 1, info));
    }
    if (!std::isfinite(grad_norm)) {
      ++skipped_steps_;
      if (IsMain()) {
        progress.Break();
        log_->warn("step {}: gradient norm is {}; update skipped (weights unchanged), {} step(s) skipped so far",
                   step_ + 1, grad_norm, skipped_steps_);
      }
    }
    ++step_;
    micro_in_epoch_ = m_end;
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    tokens_window = 0.8 * tokens_window + tokens;
    seconds_window = 0.8 * seconds_window + seconds;
    const double tokens_per_s = seconds_window > 0 ? tokens_window / seconds_window : 0;
    const bool epoch_end = micro_in_epoch_ >= micro_per_epoch_;
    const double epoch_pos = static_cast<double>(epoch_) + static_cast<double>(micro_in_epoch_) / micro_per_epoch_;
    if (IsMain()) progress.Update(step_, loss, lr, tokens_per_s, skipped_steps_);
    stop = step_ >= total_steps_;

    // Evaluation (rank 0), then everybody learns whether to stop.
    std::map<std::string, double> csv_eval;
    const bool eval_now = has_eval_ && ((o_.eval_every > 0 && step_ % o_.eval_every == 0) ||
                                        (o_.eval_every <= 0 && epoch_end) || stop);
    if (eval_now) {
      if (IsMain()) {
        progress.Break();
        bool improved = false;
        RETURN_IF_ERROR(Evaluate(&improved, &csv_eval));
        if (o_.early_stopping > 0 && evals_without_improvement_ >= o_.early_stopping) {
          log_->info("early stopping: {} evaluations without improvement (best {:.4f} at step {})",
                     evals_without_improvement_, best_metric_, best_step_);
          stop = true;
        }
      }
      if (comm_->world_size() > 1) {
        torch::Tensor flag = torch::tensor({stop ? 1.0f : 0.0f});
        std::vector<torch::Tensor> one{flag};
        RETURN_IF_ERROR(comm_->Broadcast(one));
        stop = flag.item<float>() > 0.5f;
      }
    }
    if (IsMain()) {
      RETURN_IF_ERROR(csv_.Append(step_, epoch_pos, loss, lr, tokens_per_s, skipped_steps_, csv_eval));
      const bool save_now = (o_.save_every > 0 && step_ % o_.save_every == 0) || stop;
      if (save_now) {
        RETURN_IF_ERROR(SaveState());
        RETURN_IF_ERROR(SaveCheckpoint((fs::path(o_.out_dir) / "last").string(), last_eval_metrics_, last_threshold_));
        saved_step_ = step_;
      }
    }
  }
  if (IsMain()) {
    progress.Break();
    if (!has_eval_ || best_step_ < 0) {
      // Without evaluation the final weights are the model to use.
      RETURN_IF_ERROR(SaveCheckpoint((fs::path(o_.out_dir) / "best").string(), last_eval_metrics_, last_threshold_));
    }
    log_->info("done: {} steps; checkpoint {}", step_, (fs::path(o_.out_dir) / "best").string());
    if (!o_.test_path.empty()) RETURN_IF_ERROR(ScoreTestSet());
  }
  if (comm_->world_size() > 1) RETURN_IF_ERROR(CheckRanksInSync());
  return absl::OkStatus();
}

}  // namespace trainer_internal

absl::Status Train(const TrainOptions& options) {
  trainer_internal::Trainer trainer(options);
  return trainer.Run();
}

}  // namespace dserve
