#include "model/train/trainable_model.h"

#include <chrono>
#include <cmath>
#include <set>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint/checkpoint_dir.h"
#include "model/deberta/weights.h"
#include "model/deberta/autocast.h"
#include "model/train/data.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace F = torch::nn::functional;

namespace {

bool NeedsClassification(Task t) { return t == Task::kClassify || t == Task::kRerank; }

absl::Status Unsupported(const TrainableFamily& family, const char* what) {
  return absl::UnimplementedError(absl::StrCat("model_type \"", family.model_type, "\": ", what,
                                               " is not implemented for this family"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainableModel>> TrainableModel::FromScratch(const ModelConfig& config, bool sop) {
  std::unique_ptr<TrainableModel> m(new TrainableModel());
  m->config_ = config;
  ASSIGN_OR_RETURN(m->family_, TrainableFamilyOf(config));
  if (!m->family_->from_scratch) return Unsupported(*m->family_, "training from fresh weights");
  if (config.task() == Task::kMlm && !m->family_->mlm) return Unsupported(*m->family_, "masked-LM training");
  absl::Status status = absl::OkStatus();
  auto init = [&]() -> absl::Status {
    torch::NoGradGuard no_grad;
    ASSIGN_OR_RETURN(m->encoder_, m->family_->init(config));
    if (NeedsClassification(config.task())) {
      ASSIGN_OR_RETURN(m->classification_, m->family_->init_classification(config, torch::kFloat, torch::kCPU));
    } else if (config.task() == Task::kAnswer) {
      m->qa_ = QaHead::Init(config, torch::kFloat, torch::kCPU);
    } else if (config.task() == Task::kMlm) {
      ASSIGN_OR_RETURN(m->mlm_, MlmHead::Init(config, torch::kFloat, torch::kCPU));
      if (sop) { ASSIGN_OR_RETURN(m->sop_, SopHead::Init(config, torch::kFloat, torch::kCPU)); }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(TorchCall("initialising weights", [&] { status = init(); }));
  RETURN_IF_ERROR(status);
  RETURN_IF_ERROR(m->Finish());
  return m;
}

absl::StatusOr<std::unique_ptr<TrainableModel>> TrainableModel::FromFiles(
    const ModelConfig& config, const std::vector<std::string>& weight_paths, bool load_head,
    std::vector<std::string>* initialised, bool sop) {
  std::unique_ptr<TrainableModel> m(new TrainableModel());
  m->config_ = config;
  initialised->clear();
  ASSIGN_OR_RETURN(m->family_, TrainableFamilyOf(config));
  if (config.task() == Task::kMlm && !m->family_->mlm) return Unsupported(*m->family_, "masked-LM training");
  ASSIGN_OR_RETURN(auto store, WeightStore::Open(weight_paths, torch::kFloat, torch::kCPU));
  absl::Status status = absl::OkStatus();
  auto load = [&]() -> absl::Status {
    torch::NoGradGuard no_grad;
    ASSIGN_OR_RETURN(m->encoder_, m->family_->load(config, *store, initialised));
    if (config.task() != Task::kMlm) return m->LoadOrInitHead(*store, load_head, initialised);
    std::string report;
    ASSIGN_OR_RETURN(MlmHead head, MlmHead::Load(config, *store, /*init_if_missing=*/true, &report));
    // MlmHead/SopHead::Load report "initialised (why)" or "loaded ...".
    if (absl::StartsWith(report, "initialised")) initialised->push_back("MLM head " + report);
    m->mlm_ = std::move(head);
    if (sop) {
      std::string sop_report;
      ASSIGN_OR_RETURN(SopHead sop_head, SopHead::Load(config, *store, /*init_if_missing=*/true, &sop_report));
      if (absl::StartsWith(sop_report, "initialised")) initialised->push_back("SOP head " + sop_report);
      m->sop_ = std::move(sop_head);
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(TorchCall("loading weights", [&] { status = load(); }));
  RETURN_IF_ERROR(status);
  RETURN_IF_ERROR(m->Finish());
  return m;
}

absl::Status TrainableModel::LoadOrInitHead(WeightStore& store, bool load_head,
                                            std::vector<std::string>* initialised) {
  const ModelConfig& c = config_;
  const absl::Status other = absl::FailedPreconditionError("the checkpoint's head is for another task or label set");
  auto why = [](const absl::Status& s) { return absl::StrCat(" (", s.message(), ")"); };
  if (NeedsClassification(c.task())) {
    absl::StatusOr<ClassificationHead> head = other;
    if (load_head) head = family_->load_classification(c, store);
    if (!head.ok()) {
      initialised->push_back(absl::StrCat(TaskName(c.task()), " head initialised", why(head.status())));
      head = family_->init_classification(c, torch::kFloat, torch::kCPU);
    }
    if (!head.ok()) return head.status();
    classification_ = *std::move(head);
  } else if (c.task() == Task::kAnswer) {
    absl::StatusOr<QaHead> head = other;
    if (load_head) head = QaHead::Load(c, store);
    if (!head.ok()) {
      initialised->push_back(absl::StrCat("answer head initialised", why(head.status())));
      head = QaHead::Init(c, torch::kFloat, torch::kCPU);
    }
    qa_ = *std::move(head);
  }
  return absl::OkStatus();
}

absl::Status TrainableModel::Finish() {
  return TorchCall("preparing parameters", [&] {
    for (auto& [name, t] : Parameters()) {
      t.set_data(t.detach().contiguous());
      t.set_requires_grad(true);
    }
  });
}

std::vector<std::pair<std::string, torch::Tensor>> TrainableModel::Named(bool for_checkpoint) const {
  auto named = encoder_->Named(for_checkpoint);
  if (classification_) classification_->AppendNamed(&named);
  if (qa_) qa_->AppendNamed(&named);
  if (mlm_) mlm_->AppendNamed(encoder_->deberta()->weights().embeddings.word, &named);
  if (sop_) sop_->AppendNamed(&named);
  return named;
}

std::vector<std::pair<std::string, torch::Tensor>> TrainableModel::Parameters() const {
  if (!mlm_) {
    // The checkpoint's tensors (no unread position table), each once: a
    // shared layer appears there under every layer's names.
    std::vector<std::pair<std::string, torch::Tensor>> params;
    std::set<const void*> seen;
    auto named = encoder_->Parameters();
    if (classification_) classification_->AppendNamed(&named);
    if (qa_) qa_->AppendNamed(&named);
    for (auto& [name, t] : named) {
      if (seen.insert(t.unsafeGetTensorImpl()).second) params.emplace_back(name, t);
    }
    return params;
  }
  // MLM: the encoder's trained tensors (DeBERTa-v2/v3: the position table
  // included, for the EMD; v1: its live q/k/v layout, not the in_proj built
  // for saving), each once, and the heads' own tensors (the decoder is tied
  // to the word embeddings).
  std::vector<std::pair<std::string, torch::Tensor>> params;
  {
    std::set<const void*> seen;
    for (auto& [name, t] : encoder_->Parameters()) {
      if (seen.insert(t.unsafeGetTensorImpl()).second) params.emplace_back(name, t);
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> head_named;
  mlm_->AppendNamed(encoder_->deberta()->weights().embeddings.word, &head_named);
  if (sop_) sop_->AppendNamed(&head_named);
  auto name_of = [&](const torch::Tensor& t) {  // HF name, for the weight-decay rule
    for (const auto& [n, h] : head_named) {
      if (h.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return n;
    }
    return std::string("head");
  };
  std::vector<torch::Tensor> own = mlm_->Parameters();
  if (sop_) {
    auto more = sop_->Parameters();
    own.insert(own.end(), more.begin(), more.end());
  }
  for (const auto& t : own) params.emplace_back(name_of(t), t);
  return params;
}

MlmOutput TrainableModel::Mlm(const MlmBatch& batch, bool use_emd, bool training) const {
  CpuAutocastScope autocast(training && bf16_autocast_);
  // A family without the EMD (DeBERTa v1) ignores use_emd.
  return MlmForward(*encoder_->deberta(), *mlm_, sop_ ? &*sop_ : nullptr, batch, use_emd && family_->mlm_emd,
                    training ? TrainingDropout() : Dropout{});
}

Dropout TrainableModel::TrainingDropout() const {
  return Dropout{config_.hidden_dropout_prob, config_.attention_probs_dropout_prob};
}

std::vector<int64_t> MlmSpecialIds(const Tokenizer& tokenizer) {
  return {tokenizer.pad_id(), tokenizer.cls_id(), tokenizer.sep_id(), tokenizer.unk_id(), tokenizer.mask_id()};
}

absl::StatusOr<std::vector<MlmExample>> ReadMlmExamples(const std::string& path, const Tokenizer& tokenizer,
                                                        int max_length, bool sop, uint64_t seed) {
  ASSIGN_OR_RETURN(std::vector<TextDocument> docs, ReadTextDocuments(path));
  std::vector<std::vector<std::vector<int64_t>>> ids;
  std::vector<SpmPiece> pieces;
  for (const auto& doc : docs) {
    ids.emplace_back();
    for (size_t l = 0; l < doc.lines.size(); ++l) {
      pieces.clear();
      absl::Status s = tokenizer.EncodeRaw(doc.lines[l], &pieces);
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ":", doc.first_line + l, ": ", s.message()));
      std::vector<int64_t> line;
      for (const auto& p : pieces) line.push_back(p.id);
      ids.back().push_back(std::move(line));
    }
  }
  std::mt19937_64 rng(seed);
  std::vector<MlmExample> examples =
      BuildMlmExamples(ids, max_length, sop, tokenizer.cls_id(), tokenizer.sep_id(), rng);
  if (examples.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no training rows (text too short?)"));
  return examples;
}

absl::StatusOr<MlmEvalResult> EvaluateMlm(const TrainableModel& model, const std::vector<MlmExample>& examples,
                                          const Tokenizer& tokenizer, int batch_size, uint64_t seed,
                                          const MaskingOptions& masking, bool use_emd) {
  MlmEvalResult result;
  const auto started = std::chrono::steady_clock::now();
  double loss_sum = 0, sop_correct = 0, sop_count = 0;
  int64_t correct = 0, count = 0;
  std::mt19937_64 rng(seed);
  const size_t bs = static_cast<size_t>(std::max(1, batch_size));
  absl::Status status = TorchCall("mlm eval", [&] {
    torch::NoGradGuard no_grad;
    for (size_t begin = 0; begin < examples.size(); begin += bs) {
      const auto t0 = std::chrono::steady_clock::now();
      const size_t end = std::min(examples.size(), begin + bs);
      std::vector<MlmExample> part(examples.begin() + static_cast<std::ptrdiff_t>(begin),
                                   examples.begin() + static_cast<std::ptrdiff_t>(end));
      std::vector<std::vector<int64_t>> rows;
      for (const auto& e : part) rows.push_back(e.input_ids);
      MaskedTokens masked = MaskTokens(rows, MlmSpecialIds(tokenizer), tokenizer.mask_id(),
                                       model.config().vocab_size, masking, rng);
      MlmBatch batch = CollateMlmBatch(part, masked, tokenizer.pad_id(), torch::kCPU);
      MlmOutput out = model.Mlm(batch, use_emd);
      loss_sum += out.mlm_loss.item<double>() * static_cast<double>(out.count);
      correct += out.correct;
      count += out.count;
      sop_correct += static_cast<double>(out.sop_correct);
      sop_count += static_cast<double>(out.sop_count);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      for (size_t i = begin; i < end; ++i) result.item_latency_ms.push_back(ms);
    }
  });
  RETURN_IF_ERROR(status);
  const double loss = count > 0 ? loss_sum / static_cast<double>(count) : 0.0;
  result.metrics = {{"loss", loss},
                    {"perplexity", std::exp(loss)},
                    {"accuracy", count > 0 ? static_cast<double>(correct) / static_cast<double>(count) : 0.0},
                    {"count", count}};
  if (sop_count > 0) result.metrics["sop_accuracy"] = sop_correct / sop_count;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

torch::Tensor TrainableModel::Encode(const TokenBatch& batch, bool training) const {
  const int64_t B = batch.batch_size, L = batch.length;
  auto from = [&](const std::vector<int64_t>& v) {
    return torch::from_blob(const_cast<int64_t*>(v.data()), {B, L}, torch::kLong).clone();
  };
  EncoderInput input;
  input.input_ids = from(batch.input_ids);
  input.attention_mask = from(batch.attention_mask);
  if (!batch.token_type_ids.empty() && config_.type_vocab_size > 0) input.token_type_ids = from(batch.token_type_ids);
  const Dropout dropout = training ? TrainingDropout() : Dropout{};
  return encoder_->Forward(input, dropout);
}

TrainableModel::Outputs TrainableModel::Forward(const TokenBatch& batch, bool training) const {
  CpuAutocastScope autocast(training && bf16_autocast_);
  Outputs out;
  torch::Tensor hidden = Encode(batch, training);
  if (classification_) {
    const auto& h = *classification_;
    const HeadDropout p = training ? family_->head_dropout(config_) : HeadDropout{};
    torch::Tensor ctx = hidden.select(1, 0);
    if (p.pooler > 0) ctx = F::dropout(ctx, F::DropoutFuncOptions().p(p.pooler).training(true));
    torch::Tensor pooled = h.pooler_act(torch::linear(ctx, h.pooler.weight, h.pooler.bias));
    if (p.classifier > 0) pooled = F::dropout(pooled, F::DropoutFuncOptions().p(p.classifier).training(true));
    out.logits = torch::linear(pooled, h.classifier.weight, h.classifier.bias);
  }
  if (qa_) std::tie(out.start, out.end) = qa_->Forward(hidden);
  return out;
}

absl::StatusOr<HeadOutputs> TrainableModel::Predict(const TokenBatch& batch) const {
  HeadOutputs out;
  out.batch_size = batch.batch_size;
  out.length = batch.length;
  RETURN_IF_ERROR(TorchCall("eval forward", [&] {
    torch::NoGradGuard no_grad;
    Outputs o = Forward(batch, /*training=*/false);
    auto to_vector = [](const torch::Tensor& t) {
      auto cpu = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
      return std::vector<float>(cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel());
    };
    if (o.logits.defined()) {
      out.num_labels = o.logits.size(1);
      out.logits = to_vector(o.logits);
    }
    if (o.start.defined()) {
      out.start_logits = to_vector(o.start);
      out.end_logits = to_vector(o.end);
    }
  }));
  return out;
}

TensorsForWrite ToWrite(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  TensorsForWrite w;
  w.storage.reserve(named.size());
  for (const auto& [name, t] : named) {
    w.storage.push_back(t.detach().to(torch::kCPU, torch::kFloat).contiguous().clone());
    const torch::Tensor& s = w.storage.back();
    w.tensors.push_back(TensorToWrite{name, DType::kF32, s.sizes().vec(), s.data_ptr()});
  }
  return w;
}

absl::Status TrainableModel::Save(const std::string& dir, const ModelConfig& config, const std::string& tokenizer_src,
                                  bool for_checkpoint, const std::vector<std::string>& tokenizer_files) const {
  TensorsForWrite w;
  RETURN_IF_ERROR(TorchCall("copying weights", [&] { w = ToWrite(Named(for_checkpoint)); }));
  return WriteCheckpointDir(dir, config, w.tensors, tokenizer_src, {}, tokenizer_files);
}

}  // namespace dserve
