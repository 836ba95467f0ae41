#include "model/albert/albert_encoder.h"

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/cpu_kernels.h"
#include "model/deberta/packed_linear.h"
#include "model/deberta/tensor_schema.h"
#include "model/deberta/weights.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

std::string LayerPrefix(int64_t group, int64_t inner) {
  return absl::StrCat("albert.encoder.albert_layer_groups.", group, ".albert_layers.", inner);
}

// Linear through oneDNN's sgemm in fp32 inference on CPU (cpu_kernels.h).
torch::Tensor Linear(const torch::Tensor& x, const LinearWeights& w) {
  if (FusedLinearApplies(x, w.weight, w.bias)) return FusedLinear(x, w.weight, w.bias);
  return torch::linear(x, w.weight, w.bias);
}

// `int8` when packed and x can take it (inference), else `packed` (the
// pre-packed oneDNN matmul) when it can take x, else Linear(x, w). x
// [B, L, K] with one length per sequence: each sequence quantized over its
// own valid rows.
torch::Tensor Linear(const torch::Tensor& x, const LinearWeights& w, const Int8Linear* int8,
                     const std::vector<int64_t>& lengths, const PackedLinear* packed = nullptr) {
  if (int8 != nullptr && int8->defined() && Int8LinearApplies(x)) {
    if (x.dim() == 3 && static_cast<int64_t>(lengths.size()) == x.size(0)) return int8->Forward(x, lengths);
    return int8->Forward(x);
  }
  if (packed != nullptr && packed->Applies(x)) return packed->Forward(x);
  return Linear(x, w);
}

// LayerNorm(x + residual), in one pass on CPU where the kernel applies;
// residual may be undefined (LayerNorm(x)).
torch::Tensor AddNorm(const torch::Tensor& x, const torch::Tensor& residual, const NormWeights& w, double eps) {
  if (FusedAddLayerNormApplies(x, w.weight, w.bias)) return FusedAddLayerNorm(x, residual, w.weight, w.bias, eps);
  // In the weights' dtype: under training's bf16 autocast the sum is bf16.
  return torch::layer_norm((residual.defined() ? x + residual : x).to(w.weight.scalar_type()), {x.size(-1)},
                           w.weight, w.bias, eps);
}

// Sizes `w`'s parameter groups from `c`, for Load and Init.
AlbertWeights Skeleton(const ModelConfig& c) {
  AlbertWeights w;
  const int64_t groups = c.albert ? c.albert->num_hidden_groups : 1;
  const int64_t inner = c.albert ? c.albert->inner_group_num : 1;
  w.groups.assign(static_cast<size_t>(groups), std::vector<AlbertLayerWeights>(static_cast<size_t>(inner)));
  return w;
}

// ALBERT's tensor schema, declared once (tensor_schema.h): every tensor with
// its HF name, shape and init, in HF's state_dict order (a layer's
// full_layer_layer_norm first), bound to its slot in `w`. Load reads, Init
// draws (in this order; only the normal ones draw) and Named lists the
// tensors in this order. The groups are `w`'s own (Skeleton for Load and
// Init).
template <typename Weights, typename Visit>
absl::Status VisitSchema(const ModelConfig& c, Weights& w, Visit&& visit) {
  SchemaWalk<Visit> s(visit);
  const int64_t V = c.vocab_size, E = c.embedding_dim(), H = c.hidden_size, I = c.intermediate_size;
  RETURN_IF_ERROR(s.Tensor("albert.embeddings.word_embeddings.weight", {V, E}, InitKind::kNormal, w.word));
  RETURN_IF_ERROR(s.Tensor("albert.embeddings.position_embeddings.weight", {c.max_position_embeddings, E},
                           InitKind::kNormal, w.position));
  RETURN_IF_ERROR(s.Tensor("albert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, E},
                           InitKind::kNormal, w.token_type));
  RETURN_IF_ERROR(s.Norm("albert.embeddings.LayerNorm", E, w.embedding_norm));
  RETURN_IF_ERROR(s.Linear("albert.encoder.embedding_hidden_mapping_in", H, E, w.embedding_to_hidden));
  for (size_t g = 0; g < w.groups.size(); ++g) {
    for (size_t j = 0; j < w.groups[g].size(); ++j) {
      const std::string p = LayerPrefix(static_cast<int64_t>(g), static_cast<int64_t>(j));
      auto& l = w.groups[g][j];
      RETURN_IF_ERROR(s.Norm(p + ".full_layer_layer_norm", H, l.output_norm));
      RETURN_IF_ERROR(s.Linear(p + ".attention.query", H, H, l.query));
      RETURN_IF_ERROR(s.Linear(p + ".attention.key", H, H, l.key));
      RETURN_IF_ERROR(s.Linear(p + ".attention.value", H, H, l.value));
      RETURN_IF_ERROR(s.Linear(p + ".attention.dense", H, H, l.dense));
      RETURN_IF_ERROR(s.Norm(p + ".attention.LayerNorm", H, l.attention_norm));
      RETURN_IF_ERROR(s.Linear(p + ".ffn", I, H, l.ffn));
      RETURN_IF_ERROR(s.Linear(p + ".ffn_output", H, I, l.ffn_output));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AlbertWeights> AlbertWeights::Load(const ModelConfig& c, WeightStore& store) {
  if (!c.albert) return absl::InvalidArgumentError("not an ALBERT config (model_type must be \"albert\")");
  AlbertWeights w = Skeleton(c);
  RETURN_IF_ERROR(VisitSchema(
      c, w, [&](const TensorSpec& spec, torch::Tensor& t) { return LoadTensor(store, spec, t); }));
  return w;
}

AlbertWeights AlbertWeights::Init(const ModelConfig& c, torch::ScalarType dtype, const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  AlbertWeights w = Skeleton(c);
  absl::Status status = VisitSchema(c, w, [&](const TensorSpec& spec, torch::Tensor& t) {
    t = InitTensor(spec, opts, c.initializer_range, /*pad_row=*/-1);
    return absl::OkStatus();
  });
  (void)status;  // the visitor never fails
  return w;
}

std::vector<std::pair<std::string, torch::Tensor>> AlbertWeights::Named() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  // Named has no config: the schema's shapes (unused here) come from a
  // default one; the structure is this object's.
  absl::Status status = VisitSchema(ModelConfig(), *this, [&](const TensorSpec& spec, const torch::Tensor& t) {
    out.emplace_back(spec.name, t);
    return absl::OkStatus();
  });
  (void)status;  // the visitor never fails
  return out;
}

int64_t AlbertEncoder::GroupOfLayer(int64_t layer, int64_t num_layers, int64_t num_groups) {
  // transformers: int(i / (num_hidden_layers / num_hidden_groups)), in float.
  const double per_group = static_cast<double>(num_layers) / static_cast<double>(num_groups);
  return static_cast<int64_t>(static_cast<double>(layer) / per_group);
}

struct AlbertEncoder::Int8Layer {
  Int8Linear qkv, dense, ffn, ffn_output;
};

struct AlbertEncoder::PackedLayer {
  PackedLinear qkv, dense;
  PackedLinear ffn;         // with hidden_act as a post-op when oneDNN has it
  PackedLinear ffn_output;  // with the residual (the attention block's output) as a sum post-op
};

AlbertEncoder::AlbertEncoder(const ModelConfig& config, AlbertWeights weights)
    : config_(config), weights_(std::move(weights)) {}

absl::StatusOr<std::unique_ptr<AlbertEncoder>> AlbertEncoder::Create(const ModelConfig& config,
                                                                     AlbertWeights weights, Options options) {
  if (!config.albert) return absl::InvalidArgumentError("not an ALBERT config");
  std::unique_ptr<AlbertEncoder> e(new AlbertEncoder(config, std::move(weights)));
  ASSIGN_OR_RETURN(e->act_, ActivationByName(config.hidden_act));
  ASSIGN_OR_RETURN(e->act_in_place_, InPlaceActivationByName(config.hidden_act));
  e->attention_kernel_ = options.attention_kernel;
  e->heads_ = config.num_attention_heads;
  e->head_size_ = config.head_size();
  const int64_t groups = static_cast<int64_t>(e->weights_.groups.size());
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const int64_t g = GroupOfLayer(i, config.num_hidden_layers, config.albert->num_hidden_groups);
    if (g < 0 || g >= groups) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, " maps to parameter group ", g, " of ", groups));
    }
  }
  if (options.int8_linear) {
    if (!options.precompute) return absl::InvalidArgumentError("albert encoder: int8 dense layers need precompute");
    const torch::Tensor& probe = e->weights_.embedding_to_hidden.weight;
    if (probe.scalar_type() != torch::kFloat || !probe.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat("dtype int8: needs float32 weights on the CPU (got ",
                                                     c10::toString(probe.scalar_type()), " on ",
                                                     probe.device().str(), ")"));
    }
    if (Int8Engine().empty()) {
      return absl::FailedPreconditionError("dtype int8: this LibTorch has no oneDNN or fbgemm quantized engine");
    }
  }
  if (!options.precompute) return e;
  // Pre-packed dense layers for CPU inference (not with int8, which packs its own).
  const bool pack = !options.int8_linear && PackedLinearEnabled() &&
                    PackedLinear::Supports(e->weights_.embedding_to_hidden.weight);
  const DenseActivation act = DenseActivationByName(config.hidden_act);
  RETURN_IF_ERROR(TorchCall("albert encoder: fusing the QKV weights", [&] {
    torch::InferenceMode guard;
    for (const auto& group : e->weights_.groups) {
      std::vector<Fused> fused;
      for (const AlbertLayerWeights& l : group) {
        Fused f{{torch::cat({l.query.weight, l.key.weight, l.value.weight}, 0).contiguous(),
                 torch::cat({l.query.bias, l.key.bias, l.value.bias}, 0).contiguous()},
                nullptr};
        if (options.int8_linear) {
          auto int8 = std::make_shared<Int8Layer>();
          int8->qkv = Int8Linear::Pack(f.qkv.weight, f.qkv.bias);
          int8->dense = Int8Linear::Pack(l.dense.weight, l.dense.bias);
          int8->ffn = Int8Linear::Pack(l.ffn.weight, l.ffn.bias);
          int8->ffn_output = Int8Linear::Pack(l.ffn_output.weight, l.ffn_output.bias);
          f.int8 = std::move(int8);
        }
        if (pack) {
          auto packed = std::make_shared<PackedLayer>();
          packed->qkv = PackedLinear::Pack(f.qkv.weight, f.qkv.bias);
          packed->dense = PackedLinear::Pack(l.dense.weight, l.dense.bias);
          packed->ffn = PackedLinear::Pack(l.ffn.weight, l.ffn.bias, act);
          packed->ffn_output = PackedLinear::Pack(l.ffn_output.weight, l.ffn_output.bias, DenseActivation::kNone,
                                                  /*residual=*/true);
          f.packed = std::move(packed);
        }
        fused.push_back(std::move(f));
      }
      e->fused_.push_back(std::move(fused));
    }
  }));
  return e;
}

namespace {
torch::Tensor MaybeDropout(const torch::Tensor& x, double p) {
  return p > 0 ? torch::dropout(x, p, /*train=*/true) : x;
}
}  // namespace

torch::Tensor AlbertEncoder::Embed(const EncoderInput& input, const Dropout& dropout) const {
  const int64_t L = input.input_ids.size(1);
  const auto positions = torch::arange(L, input.input_ids.options());
  torch::Tensor x = torch::embedding(weights_.word, input.input_ids);
  // HF adds word + type first, then position. No token types: all type 0,
  // one row broadcast (no [B, L] of zeros to build and gather).
  x = input.token_type_ids.defined() ? x + torch::embedding(weights_.token_type, input.token_type_ids)
                                     : x + weights_.token_type[0];
  x = x + torch::embedding(weights_.position, positions).unsqueeze(0);
  x = torch::layer_norm(x, {x.size(-1)}, weights_.embedding_norm.weight, weights_.embedding_norm.bias,
                        config_.layer_norm_eps);
  return Linear(MaybeDropout(x, dropout.hidden), weights_.embedding_to_hidden);
}

torch::Tensor AlbertEncoder::Layer(const AlbertLayerWeights& w, const Fused* fused, const torch::Tensor& hidden,
                                   const torch::Tensor& key_bias, const torch::Tensor& key_mask,
                                   const std::vector<int64_t>& lengths, const Dropout& dropout) const {
  const int64_t B = hidden.size(0), L = hidden.size(1), H = hidden.size(2);
  // [B, L, 3, heads, d] -> three [B, heads, L, d]. Without precomputed
  // weights (training) the fused QKV is built from the live ones.
  const LinearWeights qkv_weights =
      fused ? fused->qkv
            : LinearWeights{torch::cat({w.query.weight, w.key.weight, w.value.weight}, 0),
                            torch::cat({w.query.bias, w.key.bias, w.value.bias}, 0)};
  const Int8Layer* int8 = fused ? fused->int8.get() : nullptr;
  const PackedLayer* packed = fused ? fused->packed.get() : nullptr;
  const torch::Tensor projected_qkv =
      Linear(hidden, qkv_weights, int8 ? &int8->qkv : nullptr, lengths, packed ? &packed->qkv : nullptr);
  torch::Tensor context;
  // DeBERTa's attention tile with no position terms is ALBERT's attention
  // (a masked key's exp(lowest - max) is 0 in both). As in DebertaEncoder,
  // bf16 keeps the torch ops where the tile measured slower (FusedBf16AttentionPays).
  const bool bf16_threads =
      projected_qkv.scalar_type() == torch::kBFloat16 && !FusedBf16AttentionPays(at::get_num_threads(), head_size_);
  if (fused != nullptr && attention_kernel_ && dropout.attention == 0 && key_mask.defined() && !bf16_threads &&
      FusedAttentionApplies(projected_qkv)) {
    FusedAttentionInput in;
    in.qkv = projected_qkv.contiguous();
    in.qkv.narrow(-1, 0, H).mul_(1.0 / std::sqrt(static_cast<double>(head_size_)));  // the tile takes scaled queries
    in.heads = heads_;
    in.head_size = head_size_;
    in.key_mask = key_mask;
    context = FusedAttention(in);
  } else {
    const auto qkv = projected_qkv.view({B, L, 3, heads_, head_size_}).permute({2, 0, 3, 1, 4});
    const auto q = qkv[0], k = qkv[1], v = qkv[2];
    auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(head_size_));
    scores = scores + key_bias;  // [B, 1, 1, L]: padded keys get the dtype's lowest value
    // Softmax in float32 (bf16 scores keep their argmax but not their sum).
    const auto probs =
        MaybeDropout(torch::softmax(scores, -1, torch::kFloat).to(hidden.scalar_type()), dropout.attention);
    context = torch::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, L, H});
  }
  const auto projected = MaybeDropout(
      Linear(context, w.dense, int8 ? &int8->dense : nullptr, lengths, packed ? &packed->dense : nullptr),
      dropout.hidden);
  const auto attended = AddNorm(projected, hidden, w.attention_norm, config_.layer_norm_eps);
  if (packed != nullptr && packed->ffn.Applies(attended) && attended.is_contiguous()) {
    // Pre-packed oneDNN: the activation in the ffn's epilogue (when oneDNN
    // has hidden_act), the residual added by ffn_output into `attended`'s
    // storage (AddNorm's fresh result, read by nothing after this), then
    // LayerNorm alone.
    torch::Tensor inner = packed->ffn.Forward(attended);
    if (packed->ffn.activation() == DenseActivation::kNone) inner = act_in_place_(inner);
    const torch::Tensor sum = packed->ffn_output.Forward(inner, attended);
    return AddNorm(sum, torch::Tensor(), w.output_norm, config_.layer_norm_eps);
  }
  const Activation& act = torch::GradMode::is_enabled() ? act_ : act_in_place_;
  const auto inner = act(Linear(attended, w.ffn, int8 ? &int8->ffn : nullptr, lengths));
  return AddNorm(Linear(inner, w.ffn_output, int8 ? &int8->ffn_output : nullptr, lengths), attended, w.output_norm,
                 config_.layer_norm_eps);
}

namespace {
// torch.finfo(dtype).min.
double LowestOf(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kBFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case torch::kHalf:
      return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case torch::kDouble:
      return std::numeric_limits<double>::lowest();
    default:
      return static_cast<double>(std::numeric_limits<float>::lowest());
  }
}
}  // namespace

torch::Tensor AlbertEncoder::Forward(const EncoderInput& input, const Dropout& dropout) const {
  torch::Tensor hidden = Embed(input, dropout);
  // (1 - mask) * finfo.min on the key axis only, as HF's AlbertModel does.
  const double lowest = LowestOf(hidden.scalar_type());
  const auto key_bias = ((1 - input.attention_mask).to(hidden.scalar_type()) * lowest).view(
      {input.attention_mask.size(0), 1, 1, input.attention_mask.size(1)});
  const int64_t n = config_.num_hidden_layers, groups = config_.albert->num_hidden_groups;
  const bool int8 = !fused_.empty() && !fused_[0].empty() && fused_[0][0].int8 != nullptr;
  const std::vector<int64_t> lengths = int8 ? ValidLengths(input.attention_mask) : std::vector<int64_t>();
  // The fused attention's key mask, only where it may run (inference).
  const torch::Tensor key_mask = !fused_.empty() && attention_kernel_ && !torch::GradMode::is_enabled()
                                     ? input.attention_mask.ne(0).to(torch::kByte).contiguous()
                                     : torch::Tensor();
  for (int64_t i = 0; i < n; ++i) {
    const size_t g = static_cast<size_t>(GroupOfLayer(i, n, groups));
    for (size_t j = 0; j < weights_.groups[g].size(); ++j) {
      hidden = Layer(weights_.groups[g][j], fused_.empty() ? nullptr : &fused_[g][j], hidden, key_bias, key_mask,
                     lengths, dropout);
    }
  }
  return hidden;
}

}  // namespace dserve
