#include "model/deberta_v1/deberta_v1_network.h"

#include <torch/torch.h>

#include "absl/strings/str_join.h"
#include "model/deberta/encoder.h"
#include "model/deberta/weights.h"
#include "model/deberta_v1/deberta_v1_weights.h"
#include "model/heads/heads.h"
#include "model/util/logging.h"
#include "model/util/status_macros.h"

namespace dserve {

absl::StatusOr<std::unique_ptr<Network>> LoadDebertaV1Network(const ModelConfig& config, WeightStore& store) {
  ASSIGN_OR_RETURN(EncoderWeights weights, LoadDebertaV1EncoderWeights(config, store));
  ASSIGN_OR_RETURN(TaskHeads heads, TaskHeads::Load(config, store, &ClassificationHead::Load));
  std::vector<std::string> skipped, unknown;
  for (const std::string& name : store.Unused()) {
    (IgnoredByHuggingFace(config, name) ? skipped : unknown).push_back(name);
  }
  auto log = Logger("model");
  if (!skipped.empty()) {
    log->info("{}: DeBERTa v1: skipped {} tensors Hugging Face ignores too: {}", store.Describe(), skipped.size(),
              absl::StrJoin(skipped, ", "));
  }
  if (!unknown.empty()) {
    log->warn("{}: DeBERTa v1: {} tensors unused by {}: {}", store.Describe(), unknown.size(),
              TaskName(config.task()), absl::StrJoin(unknown, ", "));
  }
  DebertaEncoder::Options options;
  options.int8_linear = store.quantize_linear();
  ASSIGN_OR_RETURN(auto encoder, DebertaEncoder::Create(config, std::move(weights), options));
  return std::unique_ptr<Network>(new EncoderWithHeads<DebertaEncoder>(std::move(encoder), std::move(heads)));
}

}  // namespace dserve
