#include "model/albert/albert_network.h"

#include <torch/torch.h>

#include "model/albert/albert_encoder.h"
#include "model/deberta/weights.h"
#include "model/heads/heads.h"
#include "model/util/status_macros.h"

namespace dserve {

absl::StatusOr<ClassificationHead> LoadAlbertClassificationHead(const ModelConfig& c, WeightStore& store) {
  ClassificationHead head;
  const int64_t H = c.hidden_size;
  head.pooler_name = kAlbertPooler;
  RETURN_IF_ERROR(LoadLinear(store, kAlbertPooler, H, H, &head.pooler));
  RETURN_IF_ERROR(LoadLinear(store, "classifier", c.num_labels(), H, &head.classifier));
  ASSIGN_OR_RETURN(head.pooler_act, ActivationByName("tanh"));
  return head;
}

absl::StatusOr<ClassificationHead> InitAlbertClassificationHead(const ModelConfig& c, torch::ScalarType dtype,
                                                                const torch::Device& device) {
  ASSIGN_OR_RETURN(ClassificationHead head, ClassificationHead::Init(c, dtype, device));
  head.pooler_name = kAlbertPooler;
  ASSIGN_OR_RETURN(head.pooler_act, ActivationByName("tanh"));
  return head;
}

absl::StatusOr<std::unique_ptr<Network>> LoadAlbertNetwork(const ModelConfig& config, WeightStore& store) {
  store.set_scope("albert.");
  ASSIGN_OR_RETURN(AlbertWeights weights, AlbertWeights::Load(config, store));
  ASSIGN_OR_RETURN(TaskHeads heads, TaskHeads::Load(config, store, &LoadAlbertClassificationHead));
  AlbertEncoder::Options options;
  options.int8_linear = store.quantize_linear();
  ASSIGN_OR_RETURN(auto encoder, AlbertEncoder::Create(config, std::move(weights), options));
  return std::unique_ptr<Network>(new EncoderWithHeads<AlbertEncoder>(std::move(encoder), std::move(heads)));
}

}  // namespace dserve
