// An encoder + task head whose weights require grad: the training
// counterpart of the served Network, for the config's model family
// (trainable_family.h: DeBERTa-v2/v3 for every task, MLM included; DeBERTa
// v1 from --init for every task, MLM without the EMD; ALBERT for classify,
// rerank and answer), tensors under that family's HF names.
// Forward in training mode adds the dropout the config asks for.
//
// Not thread-safe: one training loop owns it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"
#include "model/deberta/model.h"
#include "model/family/trainable_family.h"
#include "model/heads/heads.h"
#include "model/tokenizer/tokenizer.h"
#include "model/train/mlm.h"

namespace dserve {

class WeightStore;

class TrainableModel {
 public:
  // Fresh weights (HF init) drawn from torch's default generator.
  // For config.task() == mlm: the MLM head (and `sop`: the SOP head).
  static absl::StatusOr<std::unique_ptr<TrainableModel>> FromScratch(const ModelConfig& config, bool sop = false);
  // Encoder weights from `weight_paths` (safetensors, HF names); the task
  // head from the same files when present with matching shapes and
  // `load_head`, else freshly initialised. `*initialised` lists what was
  // drawn fresh, each naming the part and why ("classify head initialised
  // (...)", "MLM head initialised (no MLM head tensors in the checkpoint)"),
  // empty when everything came from the files.
  static absl::StatusOr<std::unique_ptr<TrainableModel>> FromFiles(const ModelConfig& config,
                                                                   const std::vector<std::string>& weight_paths,
                                                                   bool load_head, std::vector<std::string>* initialised,
                                                                   bool sop = false);

  struct Outputs {
    torch::Tensor logits;       // [B, num_labels] (classify, rerank)
    torch::Tensor start, end;   // [B, L] (answer)
  };
  // Runs encoder + head. With `training`: the family's encoder dropout
  // (hidden_dropout_prob, attention_probs_dropout_prob where its HF model
  // applies them), then its head's (TrainableFamily::head_dropout).
  Outputs Forward(const TokenBatch& batch, bool training) const;

  // Masked-LM forward (DeBERTa mlm models): MlmForward with this model's heads.
  // `training` applies the config's dropout.
  MlmOutput Mlm(const MlmBatch& batch, bool use_emd, bool training = false) const;
  // The config's hidden / attention dropout, for training forwards.
  Dropout TrainingDropout() const;
  bool has_sop() const { return sop_.has_value(); }

  // --bf16: training forwards (Forward / Mlm with `training`) run under CPU
  // autocast to bfloat16 (model/deberta/autocast.h); the weights stay fp32 and
  // evaluation forwards stay fp32.
  void set_bf16_autocast(bool on) { bf16_autocast_ = on; }
  // --gradient-checkpointing (TrainableEncoder::SetGradientCheckpointing).
  absl::Status SetGradientCheckpointing(bool on) { return encoder_->SetGradientCheckpointing(on); }

  // Eval-mode forward (no grad) with DebertaModel::Run's output layout.
  absl::StatusOr<HeadOutputs> Predict(const TokenBatch& batch) const;

  // Every tensor under its HF name, encoder first (EncoderWeights::Named),
  // then the head. With `for_checkpoint`, tensors HF's model would not have
  // (the absolute position table when position_biased_input is false) are
  // left out.
  std::vector<std::pair<std::string, torch::Tensor>> Named(bool for_checkpoint) const;
  // The tensors the optimizer updates, with their names.
  std::vector<std::pair<std::string, torch::Tensor>> Parameters() const;

  // Writes a complete checkpoint directory (WriteCheckpointDir) with
  // `config` and the tokenizer copied from `tokenizer_src` (may be empty) and
  // `tokenizer_files` (copied under their own names: DeBERTa v1's BPE files).
  absl::Status Save(const std::string& dir, const ModelConfig& config, const std::string& tokenizer_src,
                    bool for_checkpoint, const std::vector<std::string>& tokenizer_files = {}) const;

  const ModelConfig& config() const { return config_; }
  Task task() const { return config_.task(); }

 private:
  TrainableModel() = default;
  absl::Status Finish();
  // The task head from `store` (when `load_head` and present) or fresh.
  absl::Status LoadOrInitHead(WeightStore& store, bool load_head, std::vector<std::string>* initialised);
  torch::Tensor Encode(const TokenBatch& batch, bool training) const;

  ModelConfig config_;
  const TrainableFamily* family_ = nullptr;
  std::unique_ptr<TrainableEncoder> encoder_;
  std::optional<ClassificationHead> classification_;
  std::optional<QaHead> qa_;
  std::optional<MlmHead> mlm_;
  std::optional<SopHead> sop_;
  bool bf16_autocast_ = false;
};

// Masked-LM evaluation: every example masked once with an rng seeded by
// `seed` (deterministic), batches of `batch_size`. metrics: loss (mean
// cross-entropy over the masked targets), perplexity (exp(loss)), accuracy
// (masked-token top-1), count (targets), plus sop_accuracy with SOP.
struct MlmEvalResult {
  nlohmann::json metrics;
  std::vector<double> item_latency_ms;
  double seconds = 0;
};
absl::StatusOr<MlmEvalResult> EvaluateMlm(const TrainableModel& model, const std::vector<MlmExample>& examples,
                                          const Tokenizer& tokenizer, int batch_size, uint64_t seed,
                                          const MaskingOptions& masking, bool use_emd);

// Documents of a text file -> MlmExamples (BuildMlmExamples over the
// tokenizer's raw pieces of each line).
absl::StatusOr<std::vector<MlmExample>> ReadMlmExamples(const std::string& path, const Tokenizer& tokenizer,
                                                        int max_length, bool sop, uint64_t seed);

// The special ids never masked: [PAD], [CLS], [SEP], [UNK], [MASK].
std::vector<int64_t> MlmSpecialIds(const Tokenizer& tokenizer);

// Float32 CPU copies of `named` as safetensors tensors (the returned
// storage keeps the data alive).
struct TensorsForWrite {
  std::vector<torch::Tensor> storage;
  std::vector<TensorToWrite> tensors;
};
TensorsForWrite ToWrite(const std::vector<std::pair<std::string, torch::Tensor>>& named);

}  // namespace dserve
