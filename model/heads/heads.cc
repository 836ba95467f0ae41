#include "model/heads/heads.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {

absl::StatusOr<ClassificationHead> ClassificationHead::Load(const ModelConfig& c, WeightStore& store) {
  ClassificationHead head;
  const int64_t H = c.hidden_size, P = c.pooler_hidden_size;
  RETURN_IF_ERROR(LoadLinear(store, "pooler.dense", P, H, &head.pooler));
  RETURN_IF_ERROR(LoadLinear(store, "classifier", c.num_labels(), P, &head.classifier));
  ASSIGN_OR_RETURN(head.pooler_act, ActivationByName(c.pooler_hidden_act));
  return head;
}

absl::StatusOr<ClassificationHead> ClassificationHead::Init(const ModelConfig& c,
                                                            torch::ScalarType dtype,
                                                            const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  ClassificationHead head;
  const int64_t H = c.hidden_size, P = c.pooler_hidden_size;
  head.pooler = {torch::randn({P, H}, opts) * c.initializer_range, torch::zeros({P}, opts)};
  head.classifier = {torch::randn({c.num_labels(), P}, opts) * c.initializer_range,
                     torch::zeros({c.num_labels()}, opts)};
  ASSIGN_OR_RETURN(head.pooler_act, ActivationByName(c.pooler_hidden_act));
  return head;
}

torch::Tensor ClassificationHead::Forward(const torch::Tensor& hidden) const {
  auto pooled = pooler_act(torch::linear(hidden.select(1, 0), pooler.weight, pooler.bias));
  return torch::linear(pooled, classifier.weight, classifier.bias);
}

void ClassificationHead::AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const {
  out->emplace_back(pooler_name + ".weight", pooler.weight);
  out->emplace_back(pooler_name + ".bias", pooler.bias);
  out->emplace_back("classifier.weight", classifier.weight);
  out->emplace_back("classifier.bias", classifier.bias);
}

absl::StatusOr<QaHead> QaHead::Load(const ModelConfig& c, WeightStore& store) {
  QaHead head;
  RETURN_IF_ERROR(LoadLinear(store, "qa_outputs", 2, c.hidden_size, &head.qa_outputs));
  return head;
}

QaHead QaHead::Init(const ModelConfig& c, torch::ScalarType dtype, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  return QaHead{{torch::randn({2, c.hidden_size}, opts) * c.initializer_range, torch::zeros({2}, opts)}};
}

std::pair<torch::Tensor, torch::Tensor> QaHead::Forward(const torch::Tensor& hidden) const {
  auto logits = torch::linear(hidden, qa_outputs.weight, qa_outputs.bias);  // [B, L, 2]
  return {logits.select(-1, 0), logits.select(-1, 1)};
}

void QaHead::AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const {
  out->emplace_back("qa_outputs.weight", qa_outputs.weight);
  out->emplace_back("qa_outputs.bias", qa_outputs.bias);
}

absl::StatusOr<TaskHeads> TaskHeads::Load(const ModelConfig& config, WeightStore& store,
                                           const ClassificationLoader& load_classification) {
  TaskHeads heads;
  switch (config.task()) {
    case Task::kClassify:
    case Task::kRerank: {
      ASSIGN_OR_RETURN(auto head, load_classification(config, store));
      heads.classification = std::move(head);
      return heads;
    }
    case Task::kAnswer: {
      ASSIGN_OR_RETURN(auto head, QaHead::Load(config, store));
      heads.qa = std::move(head);
      return heads;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("task '", TaskName(config.task()), "' has no served head"));
  }
}

void TaskHeads::Forward(const torch::Tensor& hidden, NetworkOutputs* out) const {
  if (classification) out->logits = classification->Forward(hidden);
  if (qa) std::tie(out->start_logits, out->end_logits) = qa->Forward(hidden);
}

}  // namespace dserve
