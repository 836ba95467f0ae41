#include "model/heads/heads.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {

absl::StatusOr<ClassificationHead> ClassificationHead::Load(const ModelConfig& c, WeightStore& store) {
  ClassificationHead head;
  const int64_t H = c.hidden_size, P = c.pooler_hidden_size;
  ASSIGN_OR_RETURN(head.pooler.weight, store.Get("pooler.dense.weight", {P, H}));
  ASSIGN_OR_RETURN(head.pooler.bias, store.Get("pooler.dense.bias", {P}));
  ASSIGN_OR_RETURN(head.classifier.weight, store.Get("classifier.weight", {c.num_labels(), P}));
  ASSIGN_OR_RETURN(head.classifier.bias, store.Get("classifier.bias", {c.num_labels()}));
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
  out->emplace_back("pooler.dense.weight", pooler.weight);
  out->emplace_back("pooler.dense.bias", pooler.bias);
  out->emplace_back("classifier.weight", classifier.weight);
  out->emplace_back("classifier.bias", classifier.bias);
}

absl::StatusOr<QaHead> QaHead::Load(const ModelConfig& c, WeightStore& store) {
  QaHead head;
  ASSIGN_OR_RETURN(head.qa_outputs.weight, store.Get("qa_outputs.weight", {2, c.hidden_size}));
  ASSIGN_OR_RETURN(head.qa_outputs.bias, store.Get("qa_outputs.bias", {2}));
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
                                           const ClassificationLoader& load_classification,
                                           const std::string& architectures) {
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
      return absl::InvalidArgumentError(absl::StrCat("task '", TaskName(config.task()),
                                                     "' cannot be served; architectures must be ", architectures,
                                                     " (or set dserve.task)"));
  }
}

void TaskHeads::Forward(const torch::Tensor& hidden, NetworkOutputs* out) const {
  if (classification) out->logits = classification->Forward(hidden);
  if (qa) std::tie(out->start_logits, out->end_logits) = qa->Forward(hidden);
}

}  // namespace dserve
