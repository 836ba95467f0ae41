// DeBERTa v1's part of training (model/family/trainable_family.h):
// fine-tuning a Hugging Face `model_type: "deberta"` checkpoint for
// classify, rerank and answer, and continuing its masked-LM pretraining
// (--task mlm, DebertaForMaskedLM). The encoder is DebertaEncoder with v1's
// tensors mapped onto it (deberta_v1_weights.h) and following the live
// weights; what the optimizer updates is that v2 layout (the query, key and
// value rows of in_proj as three matrices: the same numbers, so the same
// gradients and AdamW steps element by element), minus what v1 does not
// have (the key bias stays zero and frozen; pos_proj has no bias). Saves
// write v1's names back: in_proj re-interleaved per head, exactly inverting
// the split at load, q_bias, v_bias, pos_proj, pos_q_proj.
//
// Masked LM: the shared MlmHead (model/train/mlm.h) on the last layer's
// states, as DebertaForMaskedLM computes it: dense -> act -> LayerNorm ->
// word embeddingsᵀ + bias. Its names are HF's: cls.predictions.* (config
// legacy true, the default; decoder tied to the word embeddings and written
// as cls.predictions.decoder.{weight,bias} too) or lm_predictions.lm_head.*
// (legacy false); a checkpoint carrying the other naming is loaded from it
// and written under the config's, one without a head gets a fresh one. No
// Enhanced Mask Decoder (TrainableFamily::mlm_emd false): HF's v1 classes
// have none, so --no-emd changes nothing and no position table is added.
#include "model/deberta_v1/deberta_v1_trainable.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/encoder.h"
#include "model/deberta/weights.h"
#include "model/deberta_v1/deberta_v1_weights.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

class DebertaV1Trainable final : public TrainableEncoder {
 public:
  DebertaV1Trainable(const ModelConfig& config, std::unique_ptr<DebertaEncoder> encoder)
      : config_(config), encoder_(std::move(encoder)) {}

  torch::Tensor Forward(const EncoderInput& input, const Dropout& dropout) const override {
    return encoder_->Forward(input, nullptr, dropout);
  }

  // HF DebertaModel's names; in_proj is built from the live q/k/v rows (a
  // new tensor: for writing, not for the optimizer).
  NamedTensors Named(bool /*for_checkpoint*/) const override { return Collect(/*v1_names=*/true); }

  // The tensors the optimizer updates: the layout the encoder computes with.
  // q/k/v weights are named as v2's (query_proj, key_proj, value_proj); the
  // others keep v1's names (q_bias and v_bias end in "_bias": no weight
  // decay, as HF's Trainer decides by "bias" in the name).
  NamedTensors Parameters() const override { return Collect(/*v1_names=*/false); }

  // MLM (MlmForward) runs this encoder; the EMD is off for v1.
  const DebertaEncoder* deberta() const override { return encoder_.get(); }

  absl::Status SetGradientCheckpointing(bool on) override {
    encoder_->set_gradient_checkpointing(on);
    return absl::OkStatus();
  }

 private:
  NamedTensors Collect(bool v1_names) const {
    const ModelConfig& c = config_;
    const EncoderWeights& w = encoder_->weights();
    NamedTensors out;
    auto linear = [&](const std::string& p, const LinearWeights& l) {
      out.emplace_back(p + ".weight", l.weight);
      if (l.bias.defined()) out.emplace_back(p + ".bias", l.bias);
    };
    auto norm = [&](const std::string& p, const NormWeights& n) {
      out.emplace_back(p + ".weight", n.weight);
      out.emplace_back(p + ".bias", n.bias);
    };
    const auto& emb = w.embeddings;
    out.emplace_back("deberta.embeddings.word_embeddings.weight", emb.word);
    if (c.position_biased_input && emb.position.defined()) {
      out.emplace_back("deberta.embeddings.position_embeddings.weight", emb.position);
    }
    if (emb.token_type.defined()) out.emplace_back("deberta.embeddings.token_type_embeddings.weight", emb.token_type);
    if (emb.projection.defined()) out.emplace_back("deberta.embeddings.embed_proj.weight", emb.projection);
    norm("deberta.embeddings.LayerNorm", emb.norm);
    const int64_t H = c.hidden_size, h = c.num_attention_heads, d = c.head_size();
    // A shared layer (dserve.share_layers) is written under every layer's
    // names (as DeBERTa-v2's trainable does) and trained once.
    const int64_t written = v1_names ? c.num_hidden_layers : static_cast<int64_t>(w.layers.size());
    for (int64_t i = 0; i < written; ++i) {
      const LayerWeights& layer = w.layers[static_cast<size_t>(std::min<int64_t>(i, w.layers.size() - 1))];
      const AttentionWeights& at = layer.attention;
      const std::string p = absl::StrCat("deberta.encoder.layer.", i);
      const std::string self = p + ".attention.self.";
      if (v1_names) {
        // Head n's rows of in_proj: its query, key and value (the inverse of
        // LoadDebertaV1EncoderWeights' view({h, 3, d, H}).select(1, .)).
        torch::Tensor in_proj = torch::stack({at.query.weight.detach().view({h, d, H}), at.key.weight.detach().view({h, d, H}),
                                              at.value.weight.detach().view({h, d, H})},
                                             1)
                                    .reshape({3 * H, H});
        out.emplace_back(self + "in_proj.weight", in_proj);
      } else {
        out.emplace_back(self + "query_proj.weight", at.query.weight);
        out.emplace_back(self + "key_proj.weight", at.key.weight);
        out.emplace_back(self + "value_proj.weight", at.value.weight);
      }
      out.emplace_back(self + "q_bias", at.query.bias);
      out.emplace_back(self + "v_bias", at.value.bias);
      if (at.head_logits.defined()) out.emplace_back(self + "head_logits_proj.weight", at.head_logits);
      if (at.head_weights.defined()) out.emplace_back(self + "head_weights_proj.weight", at.head_weights);
      if (at.pos_key.weight.defined()) out.emplace_back(self + "pos_proj.weight", at.pos_key.weight);
      if (at.pos_query.weight.defined()) linear(self + "pos_q_proj", at.pos_query);
      linear(p + ".attention.output.dense", at.output);
      norm(p + ".attention.output.LayerNorm", at.output_norm);
      linear(p + ".intermediate.dense", layer.intermediate);
      linear(p + ".output.dense", layer.output);
      norm(p + ".output.LayerNorm", layer.output_norm);
    }
    if (w.rel_embeddings.defined()) out.emplace_back("deberta.encoder.rel_embeddings.weight", w.rel_embeddings);
    return out;
  }

  ModelConfig config_;
  std::unique_ptr<DebertaEncoder> encoder_;
};

absl::StatusOr<std::unique_ptr<TrainableEncoder>> Load(const ModelConfig& config, WeightStore& store,
                                                       std::vector<std::string>* /*initialised*/) {
  ASSIGN_OR_RETURN(EncoderWeights weights, LoadDebertaV1EncoderWeights(config, store));
  for (LayerWeights& layer : weights.layers) {
    AttentionWeights& at = layer.attention;
    // Defined and not trained: v1 has no key bias (LoadDebertaV1EncoderWeights
    // sets it to zeros) and no pos_proj bias (left undefined there).
    if (at.pos_key.bias.defined()) {
      return absl::InternalError("DeBERTa v1: pos_proj has no bias, yet one was loaded");
    }
    at.key.bias = at.key.bias.clone();
  }
  ASSIGN_OR_RETURN(auto encoder, DebertaEncoder::Create(config, std::move(weights), DebertaEncoder::Options{false}));
  std::unique_ptr<DebertaV1Trainable> trainable(new DebertaV1Trainable(config, std::move(encoder)));
  OwnStorage(trainable->Parameters());
  return std::unique_ptr<TrainableEncoder>(std::move(trainable));
}

HeadDropout DebertaV1HeadDropout(const ModelConfig& config) {
  // DebertaForSequenceClassification: ContextPooler's dropout (pooler_dropout),
  // then cls_dropout (else hidden_dropout_prob), as DebertaV2's.
  return {config.pooler_dropout, config.cls_dropout.value_or(config.hidden_dropout_prob)};
}

}  // namespace

const TrainableFamily& DebertaV1TrainableFamily() {
  // From a v1 checkpoint only (--init, its own BPE tokenizer): fresh v1
  // weights are not drawn. MLM without the EMD (DebertaForMaskedLM).
  static const TrainableFamily family{"deberta",
                                      "Deberta",
                                      /*mlm=*/true,
                                      /*from_scratch=*/false,
                                      /*other_tokenizer=*/false,
                                      /*init=*/nullptr,
                                      &Load,
                                      &ClassificationHead::Load,
                                      &ClassificationHead::Init,
                                      &DebertaV1HeadDropout,
                                      /*mlm_emd=*/false};
  return family;
}

}  // namespace dserve
