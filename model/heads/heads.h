// Task heads over the encoder's last hidden state (REFERENCE §6), as plain
// functions over weight tensors (shared by inference and training).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"

namespace dserve {

class WeightStore;

// ContextPooler + classifier: DebertaV2ForSequenceClassification (classify,
// and rerank with one label).
struct ClassificationHead {
  LinearWeights pooler;      // pooler.dense [H, H]
  LinearWeights classifier;  // classifier [num_labels, H]
  Activation pooler_act = nullptr;
  // The pooler's HF name (AppendNamed): DeBERTa's ContextPooler; another
  // family's loader sets its own (ALBERT: "albert.pooler").
  std::string pooler_name = "pooler.dense";

  static absl::StatusOr<ClassificationHead> Load(const ModelConfig& config, WeightStore& store);
  static absl::StatusOr<ClassificationHead> Init(const ModelConfig& config, torch::ScalarType dtype,
                                                 const torch::Device& device);
  // hidden [B, L, H] -> logits [B, num_labels]
  torch::Tensor Forward(const torch::Tensor& hidden) const;
  void AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const;
};

// qa_outputs: DebertaV2ForQuestionAnswering.
struct QaHead {
  LinearWeights qa_outputs;  // [2, H]

  static absl::StatusOr<QaHead> Load(const ModelConfig& config, WeightStore& store);
  static QaHead Init(const ModelConfig& config, torch::ScalarType dtype, const torch::Device& device);
  // hidden [B, L, H] -> (start [B, L], end [B, L])
  std::pair<torch::Tensor, torch::Tensor> Forward(const torch::Tensor& hidden) const;
  void AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const;
};

// The head a served checkpoint carries, by config.task(): sequence
// classification (classify, rerank) or QA (answer). Shared by the families'
// Networks; only the classification head's tensor names differ by family.
struct TaskHeads {
  using ClassificationLoader = std::function<absl::StatusOr<ClassificationHead>(const ModelConfig&, WeightStore&)>;

  std::optional<ClassificationHead> classification;
  std::optional<QaHead> qa;

  // `load_classification` reads the family's pooler + classifier; QA reads
  // qa_outputs. Another task is InvalidArgument (DebertaModel::Load refuses
  // such a checkpoint first, naming its file and architectures).
  static absl::StatusOr<TaskHeads> Load(const ModelConfig& config, WeightStore& store,
                                        const ClassificationLoader& load_classification);
  // hidden [B, L, H] -> the head's outputs into `out` (logits, or start/end).
  void Forward(const torch::Tensor& hidden, NetworkOutputs* out) const;
};

// A family's encoder (anything with `torch::Tensor Forward(const
// EncoderInput&) const`) with its task head: the Network of model/family/.
template <typename Encoder>
class EncoderWithHeads final : public Network {
 public:
  EncoderWithHeads(std::unique_ptr<Encoder> encoder, TaskHeads heads)
      : encoder_(std::move(encoder)), heads_(std::move(heads)) {}
  NetworkOutputs Forward(const EncoderInput& input) const override {
    NetworkOutputs out;
    out.hidden = encoder_->Forward(input);
    heads_.Forward(out.hidden, &out);
    return out;
  }

 private:
  std::unique_ptr<Encoder> encoder_;
  TaskHeads heads_;
};

}  // namespace dserve
