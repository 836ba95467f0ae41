#include "model/albert/albert_network.h"

#include <torch/torch.h>

#include "model/albert/albert_encoder.h"
#include "model/deberta/weights.h"
#include "model/heads/heads.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

// AlbertForSequenceClassification: tanh(albert.pooler(h[:, 0])), then the
// classifier (dropout is the identity at inference).
absl::StatusOr<ClassificationHead> LoadClassificationHead(const ModelConfig& c, WeightStore& store) {
  ClassificationHead head;
  const int64_t H = c.hidden_size;
  RETURN_IF_ERROR(LoadLinear(store, "albert.pooler", H, H, &head.pooler));
  RETURN_IF_ERROR(LoadLinear(store, "classifier", c.num_labels(), H, &head.classifier));
  ASSIGN_OR_RETURN(head.pooler_act, ActivationByName("tanh"));
  return head;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Network>> LoadAlbertNetwork(const ModelConfig& config, WeightStore& store) {
  store.set_scope("albert.");
  ASSIGN_OR_RETURN(AlbertWeights weights, AlbertWeights::Load(config, store));
  ASSIGN_OR_RETURN(TaskHeads heads, TaskHeads::Load(config, store, &LoadClassificationHead));
  ASSIGN_OR_RETURN(auto encoder, AlbertEncoder::Create(config, std::move(weights)));
  return std::unique_ptr<Network>(new EncoderWithHeads<AlbertEncoder>(std::move(encoder), std::move(heads)));
}

}  // namespace dserve
