// ALBERT's part of training (model/family/trainable_family.h): fine-tuning a
// Hugging Face ALBERT checkpoint for classify, rerank and answer, with
// AlbertEncoder following the live weights (no precomputed QKV) and
// ALBERT's dropouts; tensors under AlbertFor*'s names.
#include "model/albert/albert_trainable.h"

#include <torch/torch.h>

#include "model/albert/albert_encoder.h"
#include "model/albert/albert_network.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

class AlbertTrainable final : public TrainableEncoder {
 public:
  explicit AlbertTrainable(std::unique_ptr<AlbertEncoder> encoder) : encoder_(std::move(encoder)) {}

  torch::Tensor Forward(const EncoderInput& input, const Dropout& dropout) const override {
    return encoder_->Forward(input, dropout);
  }
  std::vector<std::pair<std::string, torch::Tensor>> Named(bool /*for_checkpoint*/) const override {
    return encoder_->weights().Named();
  }

 private:
  std::unique_ptr<AlbertEncoder> encoder_;
};

absl::StatusOr<std::unique_ptr<TrainableEncoder>> Load(const ModelConfig& config, WeightStore& store,
                                                       std::vector<std::string>* /*initialised*/) {
  store.set_scope("albert.");  // a bare AlbertModel file has no prefix
  ASSIGN_OR_RETURN(AlbertWeights weights, AlbertWeights::Load(config, store));
  OwnStorage(weights.Named());
  ASSIGN_OR_RETURN(auto encoder, AlbertEncoder::Create(config, std::move(weights), AlbertEncoder::Options{false}));
  return std::unique_ptr<TrainableEncoder>(new AlbertTrainable(std::move(encoder)));
}

HeadDropout AlbertHeadDropout(const ModelConfig& config) {
  // AlbertForSequenceClassification: tanh pooler, then
  // dropout(classifier_dropout_prob), then the classifier.
  return {0.0, config.albert ? config.albert->classifier_dropout_prob : 0.0};
}

}  // namespace

const TrainableFamily& AlbertTrainableFamily() {
  // Fine-tuning only: AlbertForMaskedLM's predictions head is not
  // implemented, and the tokenizer is the checkpoint's (spiece.model with
  // the text rules of its tokenizer_config.json).
  static const TrainableFamily family{"albert",
                                      "Albert",
                                      /*mlm=*/false,
                                      /*from_scratch=*/false,
                                      /*other_tokenizer=*/false,
                                      /*init=*/nullptr,
                                      &Load,
                                      &LoadAlbertClassificationHead,
                                      &InitAlbertClassificationHead,
                                      &AlbertHeadDropout};
  return family;
}

}  // namespace dserve
