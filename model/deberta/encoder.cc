#include "model/deberta/encoder.h"

#include <cmath>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/cpu_kernels.h"
#include "model/deberta/grad_checkpoint.h"
#include "model/deberta/packed_linear.h"
#include "model/deberta/tensor_schema.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace F = torch::nn::functional;

namespace {

torch::Tensor Linear(const torch::Tensor& x, const LinearWeights& w) {
  return torch::linear(x, w.weight, w.bias);
}

// Linear, through oneDNN's sgemm in fp32 inference on CPU when `fused`.
torch::Tensor Linear(const torch::Tensor& x, const LinearWeights& w, bool fused) {
  if (fused && FusedLinearApplies(x, w.weight, w.bias)) return FusedLinear(x, w.weight, w.bias);
  return Linear(x, w);
}

// `int8` when packed and x can take it (inference), else `packed` (the
// pre-packed oneDNN matmul) when it can take x, else Linear(x, w, fused).
// x [B, L, K] with one length per sequence: each sequence quantized over its
// own valid rows.
torch::Tensor Linear(const torch::Tensor& x, const LinearWeights& w, bool fused, const Int8Linear* int8,
                     const std::vector<int64_t>& lengths, const PackedLinear* packed = nullptr) {
  if (int8 != nullptr && int8->defined() && Int8LinearApplies(x)) {
    if (x.dim() == 3 && static_cast<int64_t>(lengths.size()) == x.size(0)) return int8->Forward(x, lengths);
    return int8->Forward(x);
  }
  if (packed != nullptr && packed->Applies(x)) return packed->Forward(x);
  return Linear(x, w, fused);
}

// Dropout in training mode; the identity when p is 0 (inference).
torch::Tensor Drop(const torch::Tensor& x, double p) {
  return p > 0 ? torch::dropout(x, p, /*train=*/true) : x;
}

// In the weights' dtype: under training's bf16 autocast (model/deberta/autocast.h)
// a bf16 activation meets fp32 weights, and LayerNorm stays fp32.
torch::Tensor Norm(const torch::Tensor& x, const NormWeights& w, double eps) {
  return torch::layer_norm(x.to(w.weight.scalar_type()), {x.size(-1)}, w.weight, w.bias, eps);
}

// LayerNorm(dropout(x) + residual); residual may be undefined. In inference
// on CPU one fused pass (cpu_kernels.h) when `fused`.
torch::Tensor AddNorm(const torch::Tensor& x, const torch::Tensor& residual, const NormWeights& w, double eps,
                      double dropout, bool fused) {
  if (fused && dropout == 0 && FusedAddLayerNormApplies(x, w.weight, w.bias)) {
    return FusedAddLayerNorm(x, residual, w.weight, w.bias, eps);
  }
  const torch::Tensor dropped = Drop(x, dropout);
  return Norm(residual.defined() ? dropped + residual : dropped, w, eps);
}

int64_t NumStoredLayers(const ModelConfig& c) {
  return c.dserve.share_layers ? 1 : c.num_hidden_layers;
}

std::string LayerPrefix(int64_t i) { return absl::StrCat("deberta.encoder.layer.", i); }

}  // namespace

// ----------------------------------------------------------------- schema --

namespace {

// Sizes `w`'s structure (stored layers, the conv) from `c`, for Load and Init.
EncoderWeights Skeleton(const ModelConfig& c) {
  EncoderWeights w;
  w.layers.resize(static_cast<size_t>(NumStoredLayers(c)));
  if (c.conv_kernel_size > 0) w.conv.emplace();
  return w;
}

// The encoder's tensor schema, declared once (tensor_schema.h): every tensor
// with its HF name, shape and init, in HF's state_dict order, bound to its
// slot in `w`. Load reads, Init draws (this order is the order of the random
// draws) and Named lists the tensors in this order. The structure
// (w.layers' size, w.conv) is `w`'s own: Skeleton for Load and Init.
template <typename Weights, typename Visit>
absl::Status VisitSchema(const ModelConfig& c, Weights& w, Visit&& visit) {
  SchemaWalk<Visit> s(visit);
  const int64_t H = c.hidden_size, E = c.embedding_size, A = c.num_attention_heads * c.head_size(),
                I = c.intermediate_size;
  auto& emb = w.embeddings;
  RETURN_IF_ERROR(s.Tensor("deberta.embeddings.word_embeddings.weight", {c.vocab_size, E}, InitKind::kWordTable,
                           emb.word));
  // Without position_biased_input the encoder does not use it (the EMD of
  // MLM training does), and Hub v3 files may carry one of another shape,
  // which HF ignores too: optional.
  RETURN_IF_ERROR(s.Tensor("deberta.embeddings.position_embeddings.weight", {c.max_position_embeddings, E},
                           InitKind::kNormal, emb.position, /*optional=*/!c.position_biased_input));
  if (c.type_vocab_size > 0) {
    RETURN_IF_ERROR(s.Tensor("deberta.embeddings.token_type_embeddings.weight", {c.type_vocab_size, E},
                             InitKind::kNormal, emb.token_type));
  }
  if (E != H) {
    RETURN_IF_ERROR(s.Tensor("deberta.embeddings.embed_proj.weight", {H, E}, InitKind::kNormal, emb.projection));
  }
  RETURN_IF_ERROR(s.Norm("deberta.embeddings.LayerNorm", H, emb.norm));
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = LayerPrefix(static_cast<int64_t>(i));
    auto& layer = w.layers[i];
    auto& at = layer.attention;
    RETURN_IF_ERROR(s.Linear(p + ".attention.self.query_proj", A, H, at.query));
    RETURN_IF_ERROR(s.Linear(p + ".attention.self.key_proj", A, H, at.key));
    RETURN_IF_ERROR(s.Linear(p + ".attention.self.value_proj", A, H, at.value));
    if (c.relative_attention && !c.share_att_key) {
      if (c.has_c2p()) RETURN_IF_ERROR(s.Linear(p + ".attention.self.pos_key_proj", A, H, at.pos_key));
      if (c.has_p2c()) RETURN_IF_ERROR(s.Linear(p + ".attention.self.pos_query_proj", A, H, at.pos_query));
    }
    RETURN_IF_ERROR(s.Linear(p + ".attention.output.dense", H, A, at.output));
    RETURN_IF_ERROR(s.Norm(p + ".attention.output.LayerNorm", H, at.output_norm));
    RETURN_IF_ERROR(s.Linear(p + ".intermediate.dense", I, H, layer.intermediate));
    RETURN_IF_ERROR(s.Linear(p + ".output.dense", H, I, layer.output));
    RETURN_IF_ERROR(s.Norm(p + ".output.LayerNorm", H, layer.output_norm));
  }
  if (c.relative_attention) {
    RETURN_IF_ERROR(s.Tensor("deberta.encoder.rel_embeddings.weight", {2 * c.att_span(), H}, InitKind::kNormal,
                             w.rel_embeddings));
    if (c.norm_rel_embeddings()) RETURN_IF_ERROR(s.Norm("deberta.encoder.LayerNorm", H, w.rel_norm));
  }
  if (w.conv) {
    RETURN_IF_ERROR(s.Tensor("deberta.encoder.conv.conv.weight", {H, H / c.conv_groups, c.conv_kernel_size},
                             InitKind::kNormal, w.conv->weight));
    RETURN_IF_ERROR(s.Tensor("deberta.encoder.conv.conv.bias", {H}, InitKind::kZeros, w.conv->bias));
    RETURN_IF_ERROR(s.Norm("deberta.encoder.conv.LayerNorm", H, w.conv->norm));
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------- weights --

absl::StatusOr<EncoderWeights> EncoderWeights::Load(const ModelConfig& c, WeightStore& store) {
  EncoderWeights w = Skeleton(c);
  RETURN_IF_ERROR(VisitSchema(
      c, w, [&](const TensorSpec& spec, torch::Tensor& t) { return LoadTensor(store, spec, t); }));
  return w;
}

EncoderWeights EncoderWeights::Init(const ModelConfig& c, torch::ScalarType dtype,
                                    const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  EncoderWeights w = Skeleton(c);
  absl::Status status = VisitSchema(c, w, [&](const TensorSpec& spec, torch::Tensor& t) {
    t = InitTensor(spec, opts, c.initializer_range, c.pad_token_id);
    return absl::OkStatus();
  });
  (void)status;  // the visitor never fails
  return w;
}

std::vector<std::pair<std::string, torch::Tensor>> EncoderWeights::Named(const ModelConfig& c) const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  absl::Status status = VisitSchema(c, *this, [&](const TensorSpec& spec, const torch::Tensor& t) {
    if (t.defined()) out.emplace_back(spec.name, t);  // e.g. a position table Load did not find
    return absl::OkStatus();
  });
  (void)status;  // the visitor never fails
  return out;
}

// ---------------------------------------------------------------- encoder --

struct DebertaEncoder::Int8Layer {
  Int8Linear qkv, attention_output, intermediate, output;
};

DebertaEncoder::DebertaEncoder(const ModelConfig& config, EncoderWeights weights,
                               const Options& options)
    : config_(config), weights_(std::move(weights)), options_(options), relative_map_(config) {}

absl::StatusOr<std::unique_ptr<DebertaEncoder>> DebertaEncoder::Create(const ModelConfig& config,
                                                                       EncoderWeights weights,
                                                                       const Options& options) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<DebertaEncoder> encoder(new DebertaEncoder(config, std::move(weights), options));
  RETURN_IF_ERROR(encoder->Prepare());
  return encoder;
}

absl::Status DebertaEncoder::Prepare() {
  ASSIGN_OR_RETURN(hidden_act_, ActivationByName(config_.hidden_act));
  ASSIGN_OR_RETURN(hidden_act_in_place_, InPlaceActivationByName(config_.hidden_act));
  ASSIGN_OR_RETURN(conv_act_, ActivationByName(config_.conv_act));
  heads_ = config_.num_attention_heads;
  head_size_ = config_.head_size();
  const int64_t factor = 1 + (config_.has_c2p() ? 1 : 0) + (config_.has_p2c() ? 1 : 0);
  score_scale_ = 1.0 / std::sqrt(static_cast<double>(head_size_ * factor));
  if (static_cast<int64_t>(weights_.layers.size()) != NumStoredLayers(config_)) {
    return absl::InvalidArgumentError(absl::StrCat("encoder: ", weights_.layers.size(),
                                                   " layers of weights, config needs ",
                                                   NumStoredLayers(config_)));
  }
  if (options_.int8_linear) {
    if (!options_.precompute) return absl::InvalidArgumentError("encoder: int8 dense layers need precompute");
    const torch::Tensor& probe = weights_.layers.front().intermediate.weight;
    if (probe.scalar_type() != torch::kFloat || !probe.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat("dtype int8: needs float32 weights on the CPU (got ",
                                                     c10::toString(probe.scalar_type()), " on ",
                                                     probe.device().str(), ")"));
    }
    if (Int8Engine().empty()) {
      return absl::FailedPreconditionError(
          "dtype int8: this LibTorch has no oneDNN or fbgemm quantized engine");
    }
  }
  if (options_.precompute) {
    return TorchCall("encoder: precomputing position projections", [&] {
      torch::InferenceMode guard;
      caches_ = Caches(/*position_dropout=*/0);
      if (!options_.int8_linear) {
        PackDenseLayers();
        return;
      }
      for (size_t i = 0; i < caches_.size(); ++i) {
        // The fused QKV already carries the score scale on its query rows.
        const LayerWeights& layer = weights_.layers[i];
        auto int8 = std::make_shared<Int8Layer>();
        int8->qkv = Int8Linear::Pack(caches_[i].qkv.weight, caches_[i].qkv.bias);
        int8->attention_output = Int8Linear::Pack(layer.attention.output.weight, layer.attention.output.bias);
        int8->intermediate = Int8Linear::Pack(layer.intermediate.weight, layer.intermediate.bias);
        int8->output = Int8Linear::Pack(layer.output.weight, layer.output.bias);
        caches_[i].int8 = std::move(int8);
      }
    });
  }
  return absl::OkStatus();
}

struct DebertaEncoder::PackedLayer {
  PackedLinear qkv, attention_output;
  PackedLinear intermediate;  // with hidden_act as a post-op when oneDNN has it
  PackedLinear output;        // with the residual (the attention output) as a sum post-op
};

void DebertaEncoder::PackDenseLayers() {
  // Inference on CPU in fp32 / bf16 with the linear kernel on; the weights
  // stay as they are for the torch path (autograd, other devices).
  const torch::Tensor& probe = weights_.layers.front().intermediate.weight;
  if (!options_.kernels.linear || !PackedLinearEnabled() || !PackedLinear::Supports(probe)) return;
  const DenseActivation act = DenseActivationByName(config_.hidden_act);
  for (size_t i = 0; i < caches_.size(); ++i) {
    const LayerWeights& layer = weights_.layers[i];
    auto packed = std::make_shared<PackedLayer>();
    packed->qkv = PackedLinear::Pack(caches_[i].qkv.weight, caches_[i].qkv.bias);
    packed->attention_output = PackedLinear::Pack(layer.attention.output.weight, layer.attention.output.bias);
    packed->intermediate = PackedLinear::Pack(layer.intermediate.weight, layer.intermediate.bias, act);
    packed->output = PackedLinear::Pack(layer.output.weight, layer.output.bias, DenseActivation::kNone,
                                        /*residual=*/true);
    caches_[i].packed = std::move(packed);
  }
}

const LayerWeights& DebertaEncoder::Layer(int64_t index) const {
  return weights_.layers[config_.dserve.share_layers ? 0 : static_cast<size_t>(index)];
}

torch::Tensor DebertaEncoder::NormalisedRelEmbeddings() const {
  if (!config_.relative_attention) return {};
  if (!config_.norm_rel_embeddings()) return weights_.rel_embeddings;
  return Norm(weights_.rel_embeddings, weights_.rel_norm, config_.layer_norm_eps);
}

DebertaEncoder::LayerCache DebertaEncoder::BuildLayerCache(const LayerWeights& layer,
                                                           const torch::Tensor& rel) const {
  LayerCache cache;
  const auto& at = layer.attention;
  // The query rows carry the score scale, so scores need no extra pass
  // (scaled in float32, then back to the weights' dtype).
  auto scaled = [&](const torch::Tensor& t) { return (t.to(torch::kFloat) * score_scale_).to(t.scalar_type()); };
  cache.qkv.weight = torch::cat({scaled(at.query.weight), at.key.weight, at.value.weight}, 0);
  cache.qkv.bias = torch::cat({scaled(at.query.bias), at.key.bias, at.value.bias}, 0);
  if (!config_.relative_attention) return cache;
  // [2*span, h*d] -> [h, 2*span, d]
  auto per_head = [&](const torch::Tensor& x) {
    return x.view({x.size(0), heads_, head_size_}).permute({1, 0, 2}).contiguous();
  };
  if (config_.has_c2p()) {
    const LinearWeights& proj = config_.share_att_key ? at.key : at.pos_key;
    cache.pos_key = per_head(Linear(rel, proj));
  }
  if (config_.has_p2c()) {
    const LinearWeights& proj = config_.share_att_key ? at.query : at.pos_query;
    cache.pos_query = per_head(Linear(rel, proj) * score_scale_);
  }
  return cache;
}

std::vector<DebertaEncoder::LayerCache> DebertaEncoder::Caches(double position_dropout) const {
  if (!caches_.empty() && position_dropout == 0) return caches_;
  const torch::Tensor rel = NormalisedRelEmbeddings();
  std::vector<LayerCache> caches;
  // Each layer drops its own copy of the table, as each HF layer's
  // pos_dropout does (with share_layers the one stored layer's cache serves
  // every layer, so its draw is shared too).
  for (const auto& layer : weights_.layers) {
    caches.push_back(BuildLayerCache(layer, rel.defined() ? Drop(rel, position_dropout) : rel));
  }
  return caches;
}

DebertaEncoder::Relative DebertaEncoder::BuildRelative(int64_t length,
                                                       const torch::Device& device) const {
  Relative relative;
  if (!config_.relative_attention) return relative;
  RelativePositionMap::Table table = relative_map_.Build(length, length);
  for (auto& v : table.index) v -= table.min_row;
  relative.min_row = table.min_row;
  relative.rows = table.max_row - table.min_row + 1;
  relative.index = torch::from_blob(table.index.data(), {length, length}, torch::kLong)
                       .to(device, /*non_blocking=*/false, /*copy=*/true);
  std::vector<int32_t> by_rel(table.by_rel.size());
  for (size_t r = 0; r < by_rel.size(); ++r) by_rel[r] = static_cast<int32_t>(table.by_rel[r] - table.min_row);
  relative.by_rel = torch::tensor(by_rel, torch::kInt);
  return relative;
}

DebertaEncoder::Masks DebertaEncoder::MakeMasks(const torch::Tensor& attention_mask,
                                                torch::ScalarType dtype) const {
  // Additive key mask [B, 1, 1, L]. Half the dtype's lowest value: masked
  // scores vanish in the softmax without overflowing to -inf, and a row with
  // no valid key (only ever a padding row) stays finite.
  const double lowest = dtype == torch::kHalf ? -65504.0 / 2 : -1.0e30;
  auto keep = attention_mask.to(dtype).unsqueeze(1).unsqueeze(2);
  Masks masks;
  masks.bias = (1.0 - keep) * lowest;
  masks.keys = attention_mask.ne(0).to(torch::kByte).contiguous();
  if (options_.int8_linear) masks.lengths = ValidLengths(attention_mask);
  return masks;
}

torch::Tensor DebertaEncoder::Embed(const EncoderInput& input, const Dropout& dropout) const {
  const auto& emb = weights_.embeddings;
  const int64_t length = input.input_ids.size(1);
  torch::Tensor x = torch::embedding(emb.word, input.input_ids);
  if (config_.position_biased_input) {
    auto positions = torch::arange(length, input.input_ids.options());
    x = x + torch::embedding(emb.position, positions).unsqueeze(0);
  }
  if (config_.type_vocab_size > 0) {
    torch::Tensor types = input.token_type_ids.defined() ? input.token_type_ids
                                                         : torch::zeros_like(input.input_ids);
    x = x + torch::embedding(emb.token_type, types);
  }
  if (emb.projection.defined()) x = torch::linear(x, emb.projection);
  x = AddNorm(x, torch::Tensor(), emb.norm, config_.layer_norm_eps, 0.0, options_.kernels.add_layer_norm);
  return Drop(x * input.attention_mask.unsqueeze(-1).to(x.scalar_type()), dropout.hidden);
}

torch::Tensor DebertaEncoder::Attention(const LayerWeights& layer, const LayerCache& cache,
                                        const torch::Tensor& hidden,
                                        const torch::Tensor* query_states,
                                        const Masks& masks,
                                        const Relative& relative, const Dropout& dropout) const {
  const int64_t B = hidden.size(0), L = hidden.size(1), h = heads_, d = head_size_;
  const torch::Tensor& residual = query_states ? *query_states : hidden;
  const Int8Layer* int8 = cache.int8.get();
  const PackedLayer* packed = cache.packed.get();
  auto finish = [&](const torch::Tensor& context) {
    return AddNorm(Linear(context, layer.attention.output, options_.kernels.linear,
                          int8 ? &int8->attention_output : nullptr, masks.lengths,
                          packed ? &packed->attention_output : nullptr),
                   residual,
                   layer.attention.output_norm, config_.layer_norm_eps, dropout.hidden, options_.kernels.add_layer_norm);
  };
  torch::Tensor q, k, v;  // [B, h, L, d]; q carries the score scale once
  if (query_states == nullptr) {
    // [B, L, 3*h*d], queries pre-scaled
    torch::Tensor fused = Linear(hidden, cache.qkv, options_.kernels.linear, int8 ? &int8->qkv : nullptr,
                                 masks.lengths, packed ? &packed->qkv : nullptr);
    // bf16 through oneDNN's GEMM with several threads: torch's ops are faster.
    const bool bf16_threads =
        fused.scalar_type() == torch::kBFloat16 && !FusedBf16AttentionPays(at::get_num_threads(), d);
    const bool talking = layer.attention.head_logits.defined();
    if (options_.kernels.attention && dropout.attention == 0 && !bf16_threads && !talking &&
        FusedAttentionApplies(fused)) {
      FusedAttentionInput in;
      in.qkv = fused.contiguous();
      in.heads = h;
      in.head_size = d;
      if (config_.relative_attention) {
        if (config_.has_c2p()) in.pos_key = cache.pos_key;
        if (config_.has_p2c()) in.pos_query = cache.pos_query;
        in.relative_index = relative.by_rel;
        in.min_row = relative.min_row;
        in.rows = relative.rows;
      }
      in.key_mask = masks.keys;
      return finish(FusedAttention(in));
    }
    auto qkv = fused.view({B, L, 3, h, d}).permute({2, 0, 3, 1, 4});
    q = qkv[0];
    k = qkv[1];
    v = qkv[2];
  } else {
    const auto& at = layer.attention;
    auto split = [&](const torch::Tensor& x) { return x.view({B, L, h, d}).permute({0, 2, 1, 3}); };
    q = split(Linear(*query_states, at.query)) * score_scale_;
    k = split(Linear(hidden, at.key));
    v = split(Linear(hidden, at.value));
  }
  torch::Tensor scores = torch::matmul(q, k.transpose(-1, -2));  // [B, h, L, L]
  if (config_.relative_attention) {
    // Only the rows a sequence of length L can reach, then a gather.
    auto index = relative.index.expand({B, h, L, L});
    // x [B, h, L, d] against the table rows [h, R, d] -> [B, h, L, R] as one
    // matmul per head over all B*L rows: far fewer, larger GEMMs than
    // broadcasting the table over the batch (2.5x faster in fp32 here).
    auto against_table = [&](const torch::Tensor& x, const torch::Tensor& table) {
      const int64_t R = relative.rows;
      auto rows = table.narrow(1, relative.min_row, R);
      auto per_head = torch::bmm(x.permute({1, 0, 2, 3}).reshape({h, B * L, d}), rows.transpose(1, 2));
      return per_head.view({h, B, L, R}).permute({1, 0, 2, 3});
    };
    if (config_.has_c2p()) {
      scores = scores + torch::gather(against_table(q, cache.pos_key), -1, index);
    }
    if (config_.has_p2c()) {
      // p2c[i, j] = K_j . P_q[idx[i, j]]: gather row j at idx[i, j], transpose.
      auto p2c = against_table(k, cache.pos_query);  // [B, h, Lk, R]
      scores = scores + torch::gather(p2c, -1, index.transpose(-1, -2)).transpose(-1, -2);
    }
  }
  // Talking heads: out[n] = sum_m W[n, m] in[m] over the head axis, on the
  // scores (after the relative terms, before the mask) and on the
  // probabilities (after the softmax and its dropout).
  auto mix_heads = [](const torch::Tensor& x, const torch::Tensor& w) {
    return torch::linear(x.permute({0, 2, 3, 1}), w.to(x.scalar_type())).permute({0, 3, 1, 2});
  };
  const auto& at = layer.attention;
  if (at.head_logits.defined()) scores = mix_heads(scores, at.head_logits);
  scores = scores + masks.bias;
  auto probs = Drop(torch::softmax(scores, -1), dropout.attention);
  if (at.head_weights.defined()) probs = mix_heads(probs, at.head_weights);
  return finish(torch::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, L, h * d}));
}

torch::Tensor DebertaEncoder::LayerImpl(int64_t index, const LayerCache& cache,
                                        const torch::Tensor& hidden,
                                        const torch::Tensor* query_states,
                                        const Masks& masks,
                                        const Relative& relative, const Dropout& dropout) const {
  const LayerWeights& layer = Layer(index);
  auto attention = Attention(layer, cache, hidden, query_states, masks, relative, dropout);
  const PackedLayer* packed = cache.packed.get();
  if (packed != nullptr && dropout.hidden == 0 && packed->intermediate.Applies(attention) &&
      attention.is_contiguous()) {
    // Pre-packed oneDNN: GELU in the intermediate's epilogue (when oneDNN
    // has hidden_act), the residual added by the output GEMM into
    // `attention`'s storage (a fresh tensor of Attention's that nothing else
    // reads after this), then LayerNorm alone.
    torch::Tensor inner = packed->intermediate.Forward(attention);
    if (packed->intermediate.activation() == DenseActivation::kNone) inner = hidden_act_in_place_(inner);
    torch::Tensor sum = packed->output.Forward(inner, attention);
    return AddNorm(sum, torch::Tensor(), layer.output_norm, config_.layer_norm_eps, 0.0,
                   options_.kernels.add_layer_norm);
  }
  // The intermediate is a temporary: without autograd, activate it in place.
  const Int8Layer* int8 = cache.int8.get();
  auto inner = Linear(attention, layer.intermediate, options_.kernels.linear, int8 ? &int8->intermediate : nullptr,
                      masks.lengths);
  inner = at::GradMode::is_enabled() ? hidden_act_(inner) : hidden_act_in_place_(inner);
  return AddNorm(Linear(inner, layer.output, options_.kernels.linear, int8 ? &int8->output : nullptr, masks.lengths),
                 attention,
                 layer.output_norm,
                 config_.layer_norm_eps, dropout.hidden, options_.kernels.add_layer_norm);
}

torch::Tensor DebertaEncoder::ConvImpl(const torch::Tensor& embedded, const torch::Tensor& layer0_out,
                                       const torch::Tensor& attention_mask, double dropout) const {
  const auto& conv = *weights_.conv;
  auto mask = attention_mask.unsqueeze(-1).to(embedded.scalar_type());
  auto out = torch::conv1d(embedded.permute({0, 2, 1}), conv.weight, conv.bias, 1,
                           (config_.conv_kernel_size - 1) / 2, 1, config_.conv_groups)
                 .permute({0, 2, 1});
  out = conv_act_(Drop(out * mask, dropout));  // HF ConvLayer: act(dropout(masked conv))
  return Norm(layer0_out + out, conv.norm, config_.layer_norm_eps) * mask;
}

torch::Tensor DebertaEncoder::Forward(const EncoderInput& input, std::vector<torch::Tensor>* hidden_states,
                                      const Dropout& dropout) const {
  const bool fresh = !options_.precompute || dropout.position_p() > 0;
  const std::vector<LayerCache> local = fresh ? Caches(dropout.position_p()) : std::vector<LayerCache>();
  const std::vector<LayerCache>& caches = fresh ? local : caches_;
  torch::Tensor x = Embed(input, dropout);
  if (hidden_states) hidden_states->push_back(x);
  const Relative relative = BuildRelative(x.size(1), x.device());
  const Masks masks = MakeMasks(input.attention_mask, x.scalar_type());
  const torch::Tensor embedded = x;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const LayerCache& cache = caches[config_.dserve.share_layers ? 0 : static_cast<size_t>(i)];
    if (options_.gradient_checkpointing && at::GradMode::is_enabled()) {
      // The cache's tensors derive from live weights (non-leaf): explicit
      // inputs of the checkpoint, so their gradients flow back through it.
      x = Checkpointed(
          [this, i, masks, relative, dropout, int8 = cache.int8](const std::vector<torch::Tensor>& in) {
            LayerCache c;
            c.qkv = LinearWeights{in[1], in[2]};
            c.pos_key = in[3];
            c.pos_query = in[4];
            c.int8 = int8;
            return LayerImpl(i, c, in[0], nullptr, masks, relative, dropout);
          },
          {x, cache.qkv.weight, cache.qkv.bias, cache.pos_key, cache.pos_query});
    } else {
      x = LayerImpl(i, cache, x, nullptr, masks, relative, dropout);
    }
    if (i == 0 && weights_.conv) x = ConvImpl(embedded, x, input.attention_mask, dropout.conv_p());
    if (hidden_states) hidden_states->push_back(x);
  }
  return x;
}

torch::Tensor DebertaEncoder::LayerForward(int64_t layer, const torch::Tensor& hidden,
                                           const torch::Tensor& query_states,
                                           const torch::Tensor& attention_mask, const Dropout& dropout) const {
  const size_t slot = config_.dserve.share_layers ? 0 : static_cast<size_t>(layer);
  const torch::Tensor rel = NormalisedRelEmbeddings();
  const LayerCache cache =
      options_.precompute && dropout.position_p() == 0
          ? caches_[slot]
          : BuildLayerCache(weights_.layers[slot], rel.defined() ? Drop(rel, dropout.position_p()) : rel);
  const Relative relative = BuildRelative(hidden.size(1), hidden.device());
  const Masks masks = MakeMasks(attention_mask, hidden.scalar_type());
  return LayerImpl(layer, cache, hidden, &query_states, masks, relative, dropout);
}

}  // namespace dserve
