// The registry of the families' training parts (trainable_family.h): an
// explicit table, one line per family (a new family is one more folder and
// one more line), each family's entry declared in its *_trainable.h.
#include "model/family/trainable_family.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/albert/albert_trainable.h"
#include "model/deberta/deberta_trainable.h"
#include "model/deberta_v1/deberta_v1_trainable.h"

namespace dserve {

absl::StatusOr<const TrainableFamily*> TrainableFamilyOf(const ModelConfig& config) {
  // One line per family (a third one is one more folder and one more line).
  const TrainableFamily* families[] = {&DebertaTrainableFamily(), &AlbertTrainableFamily(),
                                       &DebertaV1TrainableFamily()};
  std::vector<std::string> known;
  for (const TrainableFamily* family : families) {
    if (config.model_type == family->model_type) return family;
    known.push_back(family->model_type);
  }
  return absl::UnimplementedError(absl::StrCat("config.json: model_type \"", config.model_type,
                                               "\": training is not supported for this model family yet "
                                               "(dserve train fine-tunes model_type ",
                                               absl::StrJoin(known, ", "), ")"));
}

void OwnStorage(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  for (const auto& [name, t] : named) t.set_data(t.clone());
}

}  // namespace dserve
