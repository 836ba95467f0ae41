#include "model/deberta/deberta_network.h"

#include <torch/torch.h>

#include "model/deberta/encoder.h"
#include "model/deberta/weights.h"
#include "model/heads/heads.h"
#include "model/util/status_macros.h"

namespace dserve {

absl::StatusOr<std::unique_ptr<Network>> LoadDebertaNetwork(const ModelConfig& config, WeightStore& store) {
  ASSIGN_OR_RETURN(EncoderWeights weights, EncoderWeights::Load(config, store));
  ASSIGN_OR_RETURN(TaskHeads heads, TaskHeads::Load(config, store, &ClassificationHead::Load));
  DebertaEncoder::Options options;
  options.int8_linear = store.quantize_linear();
  ASSIGN_OR_RETURN(auto encoder, DebertaEncoder::Create(config, std::move(weights), options));
  return std::unique_ptr<Network>(new EncoderWithHeads<DebertaEncoder>(std::move(encoder), std::move(heads)));
}

}  // namespace dserve
