// The piece of a model family that training needs (DESIGN §7, the training
// side of model/family/network.h): an encoder whose weights require grad and
// the family's sequence-classification head, under its Hugging Face names.
// TrainableModel and the trainer (model/train/) never ask which family it
// is; each family's part lives in its own folder (model/deberta/
// deberta_trainable.cc, model/albert/albert_trainable.cc,
// model/deberta_v1/deberta_v1_trainable.cc), declared in its
// *_trainable.h, and is one line in the registry of trainable_family.cc,
// keyed by config.json's model_type. This interface sits below model/train/:
// no family includes the trainer.
//
// Not thread-safe: one training loop owns an encoder.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/family/network.h"
#include "model/heads/heads.h"

namespace dserve {

class WeightStore;
struct Dropout;         // model/deberta/encoder.h (the shared encoder's)
class DebertaEncoder;   // model/deberta/encoder.h

class TrainableEncoder {
 public:
  virtual ~TrainableEncoder() = default;
  // last_hidden_state [B, L, H], with the dropout the family's HF model
  // applies in training (`dropout` all zero: eval).
  virtual torch::Tensor Forward(const EncoderInput& input, const Dropout& dropout) const = 0;
  // Every encoder tensor by its HF name, in HF's state_dict order. With
  // `for_checkpoint`, only those HF's model has (DeBERTa without
  // position_biased_input: no absolute position table, unless MLM's EMD
  // reads it).
  virtual std::vector<std::pair<std::string, torch::Tensor>> Named(bool for_checkpoint) const = 0;
  // The encoder tensors the optimizer updates (fine-tuning), with the names
  // its weight-decay and layer-lr rules read. By default the checkpoint's
  // tensors (Named(true)); a family whose checkpoint layout is not the one
  // it computes with (DeBERTa v1's fused in_proj) lists its live tensors,
  // and its Named returns new tensors built from them.
  virtual std::vector<std::pair<std::string, torch::Tensor>> Parameters() const { return Named(true); }
  // The DeBERTa encoder, for masked-LM training (MlmForward; the EMD runs
  // its last layer); nullptr in a family without MLM training
  // (TrainableFamily::mlm).
  virtual const DebertaEncoder* deberta() const { return nullptr; }
  // --gradient-checkpointing: recompute each layer's activations in
  // backward instead of keeping them. Unimplemented where the family lacks it.
  virtual absl::Status SetGradientCheckpointing(bool on) {
    if (!on) return absl::OkStatus();
    return absl::UnimplementedError("--gradient-checkpointing is implemented for DeBERTa encoders only");
  }
};

// Dropout probabilities of the family's sequence-classification head in
// training: on the [CLS] state before the pooler, and before the classifier.
struct HeadDropout {
  double pooler = 0;
  double classifier = 0;
};

struct TrainableFamily {
  const char* model_type;
  const char* architecture_prefix;  // HF class names: prefix + "ForSequenceClassification", ...
  // What the family supports beyond fine-tuning a checkpoint of its own
  // (classify, rerank, answer from --init): masked-LM pretraining (--task
  // mlm), training from --config (fresh weights), a tokenizer other than
  // its checkpoint's (--tokenizer).
  bool mlm;
  bool from_scratch;
  bool other_tokenizer;
  // Fresh weights as HF's _init_weights draws them (torch's default
  // generator); only when from_scratch.
  absl::StatusOr<std::unique_ptr<TrainableEncoder>> (*init)(const ModelConfig& config);
  // From `store` (float32 CPU tensors, cloned: updates touch no other
  // object's storage). A tensor the task needs that was missing and drawn
  // fresh is added to `*initialised`, named with why (DeBERTa MLM: the EMD's
  // position table).
  absl::StatusOr<std::unique_ptr<TrainableEncoder>> (*load)(const ModelConfig& config, WeightStore& store,
                                                             std::vector<std::string>* initialised);
  absl::StatusOr<ClassificationHead> (*load_classification)(const ModelConfig& config, WeightStore& store);
  absl::StatusOr<ClassificationHead> (*init_classification)(const ModelConfig& config, torch::ScalarType dtype,
                                                            const torch::Device& device);
  HeadDropout (*head_dropout)(const ModelConfig& config);
  // Whether --task mlm runs the Enhanced Mask Decoder (Microsoft's
  // DeBERTa-v2/v3 pretraining) unless --no-emd. DeBERTa v1's
  // DebertaForMaskedLM has none: its MLM head always reads the last layer.
  bool mlm_emd = true;

  // "AlbertForQuestionAnswering" for "ForQuestionAnswering".
  std::string Architecture(const char* suffix) const { return std::string(architecture_prefix) + suffix; }
};

// `config`'s family; Unimplemented naming the model_type ("training is not
// supported for this model family yet") when no family trains it.
absl::StatusOr<const TrainableFamily*> TrainableFamilyOf(const ModelConfig& config);

// Makes every tensor of `named` its own storage (a clone).
void OwnStorage(const std::vector<std::pair<std::string, torch::Tensor>>& named);

}  // namespace dserve
