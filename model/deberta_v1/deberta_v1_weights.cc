#include "model/deberta_v1/deberta_v1_weights.h"

#include <torch/torch.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

std::string LayerPrefix(int64_t i) { return absl::StrCat("deberta.encoder.layer.", i); }

absl::Status LoadAttention(const ModelConfig& c, WeightStore& store, const std::string& p, AttentionWeights* at) {
  const int64_t H = c.hidden_size, h = c.num_attention_heads, d = c.head_size();
  const std::string self = p + ".attention.self.";
  ASSIGN_OR_RETURN(torch::Tensor in_proj, store.Get(self + "in_proj.weight", {3 * H, H}));
  // Rows 3*d*n .. 3*d*n + 3d - 1 belong to head n: its query, key and value.
  const torch::Tensor per_head = in_proj.view({h, 3, d, H});
  at->query.weight = per_head.select(1, 0).reshape({H, H}).contiguous();
  at->key.weight = per_head.select(1, 1).reshape({H, H}).contiguous();
  at->value.weight = per_head.select(1, 2).reshape({H, H}).contiguous();
  ASSIGN_OR_RETURN(at->query.bias, store.Get(self + "q_bias", {H}));
  ASSIGN_OR_RETURN(at->value.bias, store.Get(self + "v_bias", {H}));
  at->key.bias = torch::zeros({H}, at->query.bias.options());  // v1's key has no bias
  if (c.relative_attention) {
    if (c.has_c2p()) {
      ASSIGN_OR_RETURN(at->pos_key.weight, store.Get(self + "pos_proj.weight", {H, H}));
    }
    if (c.has_p2c()) RETURN_IF_ERROR(LoadLinear(store, self + "pos_q_proj", H, H, &at->pos_query));
  }
  if (c.deberta_v1 && c.deberta_v1->talking_head) {
    ASSIGN_OR_RETURN(at->head_logits, store.Get(self + "head_logits_proj.weight", {h, h}));
    ASSIGN_OR_RETURN(at->head_weights, store.Get(self + "head_weights_proj.weight", {h, h}));
  }
  RETURN_IF_ERROR(LoadLinear(store, p + ".attention.output.dense", H, H, &at->output));
  return LoadNorm(store, p + ".attention.output.LayerNorm", H, &at->output_norm);
}

}  // namespace

absl::StatusOr<EncoderWeights> LoadDebertaV1EncoderWeights(const ModelConfig& c, WeightStore& store) {
  if (!c.deberta_v1) {
    return absl::InvalidArgumentError(absl::StrCat("model_type \"", c.model_type, "\" is not DeBERTa v1"));
  }
  EncoderWeights w;
  const int64_t H = c.hidden_size, E = c.embedding_dim(), I = c.intermediate_size;
  auto& emb = w.embeddings;
  ASSIGN_OR_RETURN(emb.word, store.Get("deberta.embeddings.word_embeddings.weight", {c.vocab_size, E}));
  if (c.position_biased_input) {
    ASSIGN_OR_RETURN(emb.position,
                     store.Get("deberta.embeddings.position_embeddings.weight", {c.max_position_embeddings, E}));
  }
  if (c.type_vocab_size > 0) {
    ASSIGN_OR_RETURN(emb.token_type,
                     store.Get("deberta.embeddings.token_type_embeddings.weight", {c.type_vocab_size, E}));
  }
  if (E != H) {
    ASSIGN_OR_RETURN(emb.projection, store.Get("deberta.embeddings.embed_proj.weight", {H, E}));
  }
  RETURN_IF_ERROR(LoadNorm(store, "deberta.embeddings.LayerNorm", H, &emb.norm));
  w.layers.resize(static_cast<size_t>(c.dserve.share_layers ? 1 : c.num_hidden_layers));
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = LayerPrefix(static_cast<int64_t>(i));
    LayerWeights& layer = w.layers[i];
    RETURN_IF_ERROR(LoadAttention(c, store, p, &layer.attention));
    RETURN_IF_ERROR(LoadLinear(store, p + ".intermediate.dense", I, H, &layer.intermediate));
    RETURN_IF_ERROR(LoadLinear(store, p + ".output.dense", H, I, &layer.output));
    RETURN_IF_ERROR(LoadNorm(store, p + ".output.LayerNorm", H, &layer.output_norm));
  }
  if (c.relative_attention) {
    ASSIGN_OR_RETURN(w.rel_embeddings, store.Get("deberta.encoder.rel_embeddings.weight", {2 * c.max_relative(), H}));
  }
  return w;
}

bool IgnoredByHuggingFace(const ModelConfig& c, const std::string& name) {
  auto is = [&](const char* suffix) {
    return name == suffix || name == absl::StrCat("deberta.", suffix);
  };
  if (!c.position_biased_input && is("embeddings.position_embeddings.weight")) return true;
  if (is("embeddings.position_ids")) return true;
  if (c.task() != Task::kMlm &&
      (absl::StartsWith(name, "cls.predictions.") || absl::StartsWith(name, "lm_predictions.lm_head."))) {
    return true;
  }
  // HF's (older) DebertaForQuestionAnswering / TokenClassification drop a
  // ContextPooler they do not have.
  if (c.task() == Task::kAnswer && absl::StartsWith(name, "pooler.")) return true;
  return false;
}

}  // namespace dserve
