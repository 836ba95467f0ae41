// DeBERTa-v2/v3's part of training (model/family/trainable_family.h):
// DebertaEncoder without precomputed weights, ContextPooler + classifier,
// every task including masked-LM pretraining with the EMD.
#include "model/deberta/deberta_trainable.h"

#include <cstring>

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "model/deberta/encoder.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

constexpr char kPositionTable[] = "deberta.embeddings.position_embeddings.weight";
constexpr char kLayer0[] = "deberta.encoder.layer.0.";

class DebertaTrainable final : public TrainableEncoder {
 public:
  DebertaTrainable(const ModelConfig& config, std::unique_ptr<DebertaEncoder> encoder)
      : config_(config), encoder_(std::move(encoder)) {}

  torch::Tensor Forward(const EncoderInput& input, const Dropout& dropout) const override {
    return encoder_->Forward(input, nullptr, dropout);
  }

  std::vector<std::pair<std::string, torch::Tensor>> Named(bool for_checkpoint) const override {
    auto named = encoder_->weights().Named(config_);
    if (!for_checkpoint) return named;
    std::vector<std::pair<std::string, torch::Tensor>> kept;
    for (auto& p : named) {
      // The EMD of an MLM model reads the absolute position table: kept.
      if (p.first == kPositionTable && !config_.position_biased_input && config_.task() != Task::kMlm) continue;
      const bool shared = config_.dserve.share_layers && absl::StartsWith(p.first, kLayer0);
      kept.push_back(p);
      if (shared) {
        // Issue 18, defect 9: HF's DebertaV2 has no layer sharing, so a
        // shared layer is written once per layer (the same values under
        // every layer's names) and dserve.share_layers stays in config.json
        // for us; HF computes the same model, we read layer 0. Layer 0's
        // name comes first: it is the one the optimizer's de-duplicated
        // parameter list (and --dump-batches) names the tensor by.
        const std::string rest = p.first.substr(std::strlen(kLayer0));
        for (int64_t i = 1; i < config_.num_hidden_layers; ++i) {
          kept.emplace_back(absl::StrCat("deberta.encoder.layer.", i, ".", rest), p.second);
        }
      }
    }
    return kept;
  }

  const DebertaEncoder* deberta() const override { return encoder_.get(); }

  absl::Status SetGradientCheckpointing(bool on) override {
    encoder_->set_gradient_checkpointing(on);
    return absl::OkStatus();
  }

 private:
  ModelConfig config_;
  std::unique_ptr<DebertaEncoder> encoder_;
};

absl::StatusOr<std::unique_ptr<TrainableEncoder>> Make(const ModelConfig& config, EncoderWeights weights) {
  ASSIGN_OR_RETURN(auto encoder, DebertaEncoder::Create(config, std::move(weights), DebertaEncoder::Options{false}));
  return std::unique_ptr<TrainableEncoder>(new DebertaTrainable(config, std::move(encoder)));
}

absl::StatusOr<std::unique_ptr<TrainableEncoder>> Init(const ModelConfig& config) {
  return Make(config, EncoderWeights::Init(config, torch::kFloat, torch::kCPU));
}

absl::StatusOr<std::unique_ptr<TrainableEncoder>> Load(const ModelConfig& config, WeightStore& store,
                                                       std::vector<std::string>* initialised) {
  ASSIGN_OR_RETURN(EncoderWeights weights, EncoderWeights::Load(config, store));
  OwnStorage(weights.Named(config));
  if (config.task() == Task::kMlm && !config.position_biased_input && InitEmdPositionsIfMissing(config, &weights)) {
    initialised->push_back("EMD position table initialised (no absolute position table in the checkpoint)");
  }
  return Make(config, std::move(weights));
}

HeadDropout DebertaHeadDropout(const ModelConfig& config) {
  // ContextPooler's dropout, then cls_dropout (else hidden_dropout_prob).
  return {config.pooler_dropout, config.cls_dropout.value_or(config.hidden_dropout_prob)};
}

}  // namespace

bool InitEmdPositionsIfMissing(const ModelConfig& c, EncoderWeights* weights) {
  auto& emb = weights->embeddings;
  if (emb.position.defined()) return false;
  emb.position = torch::randn({c.max_position_embeddings, c.embedding_dim()}, emb.word.options()) *
                 c.initializer_range;
  return true;
}

const TrainableFamily& DebertaTrainableFamily() {
  static const TrainableFamily family{"deberta-v2",
                                      "DebertaV2",
                                      /*mlm=*/true,
                                      /*from_scratch=*/true,
                                      /*other_tokenizer=*/true,
                                      &Init,
                                      &Load,
                                      &ClassificationHead::Load,
                                      &ClassificationHead::Init,
                                      &DebertaHeadDropout};
  return family;
}

}  // namespace dserve
