// The DeBERTa-v2/v3 encoder (REFERENCE §2–§5): embeddings, the shared
// relative-position table, disentangled attention layers and the optional
// ConvLayer (DeBERTa v1 runs on it too, its weights mapped by
// model/deberta_v1/, with talking heads as an option of AttentionWeights),
// written as functions over plain weight tensors so that the same code
// serves inference (weights frozen, derived tensors precomputed
// at load) and training (weights require grad, nothing cached).
//
// Thread safety: a DebertaEncoder is immutable after Create(); Forward is
// const and may run concurrently on several threads.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/relative_position.h"
#include "model/deberta/torch_util.h"
#include "model/family/network.h"

namespace dserve {

class WeightStore;

struct AttentionWeights {
  LinearWeights query, key, value;
  LinearWeights pos_key;    // only when !share_att_key and c2p
  LinearWeights pos_query;  // only when !share_att_key and p2c
  LinearWeights output;
  NormWeights output_norm;
  // Talking-heads attention (DeBERTa v1's talking_head; undefined = off):
  // [h, h] without bias, mixing the heads' scores before the softmax
  // (head_logits) and their probabilities after it (head_weights). With
  // them the layer runs as torch ops (the fused CPU attention has no
  // head-mixing step).
  torch::Tensor head_logits;
  torch::Tensor head_weights;
};

struct LayerWeights {
  AttentionWeights attention;
  LinearWeights intermediate;  // [I, H]
  LinearWeights output;        // [H, I]
  NormWeights output_norm;
};

struct EmbeddingWeights {
  torch::Tensor word;        // [V, E]
  torch::Tensor position;    // [P, E] when position_biased_input (or kept for EMD)
  torch::Tensor token_type;  // [T, E] when type_vocab_size > 0
  torch::Tensor projection;  // [H, E] when E != H (no bias)
  NormWeights norm;
};

struct ConvWeights {
  torch::Tensor weight;  // [H, H / groups, k]
  torch::Tensor bias;
  NormWeights norm;
};

struct EncoderWeights {
  EmbeddingWeights embeddings;
  // num_hidden_layers entries, or one when dserve.share_layers.
  std::vector<LayerWeights> layers;
  torch::Tensor rel_embeddings;  // [2*span, H] when relative_attention
  NormWeights rel_norm;          // when norm_rel_ebd has layer_norm
  std::optional<ConvWeights> conv;

  // Loads every tensor by its HF name, checking shapes against `config`.
  // embeddings.position_embeddings is taken when present even without
  // position_biased_input: the Enhanced Mask Decoder uses it.
  static absl::StatusOr<EncoderWeights> Load(const ModelConfig& config, WeightStore& store);
  // Fresh weights as HF's _init_weights draws them (normal(0, initializer_range),
  // LayerNorm 1/0, biases 0), for training from scratch.
  static EncoderWeights Init(const ModelConfig& config, torch::ScalarType dtype,
                             const torch::Device& device);
  // (HF name, tensor) pairs in HF's state_dict order, "deberta." prefixed.
  std::vector<std::pair<std::string, torch::Tensor>> Named(const ModelConfig& config) const;
};

// Training-time dropout (probabilities; 0 = off, the inference default), as
// Hugging Face applies it: `hidden` after the embeddings and on the
// attention-output and FFN-output projections before their residual,
// `attention` on the attention probabilities; HF's DebertaV2 also applies
// hidden_dropout_prob as each layer's pos_dropout (on the normalised
// relative table before the position projections) and in ConvLayer (on
// the masked conv output before its activation): `position` and `conv`,
// which follow `hidden` unless set (>= 0; tests set them alone). Uses
// torch's default RNG.
struct Dropout {
  double hidden = 0.0;
  double attention = 0.0;
  double position = -1.0;
  double conv = -1.0;
  double position_p() const { return position >= 0 ? position : hidden; }
  double conv_p() const { return conv >= 0 ? conv : hidden; }
  bool any() const { return hidden > 0 || attention > 0 || position_p() > 0 || conv_p() > 0; }
};

class DebertaEncoder {
 public:
  struct Options {
    // Precompute weight-only tensors (normalised relative table, per-layer
    // position projections, fused QKV). Turn off for training, where they
    // must be recomputed from the live weights on every step.
    bool precompute = true;
    // Inference on CPU through our kernels (cpu_kernels.h) where they
    // apply; each off = torch ops for that step.
    struct Kernels {
      bool attention = true;       // fused per-head disentangled attention
      bool add_layer_norm = true;  // residual add + LayerNorm in one pass
      // The dense layers through oneDNN: pre-packed matmul primitives with
      // bias, GELU and the FFN residual fused (packed_linear.h; fp32 and
      // bf16, built at Create unless DSERVE_PACKED_LINEAR=0), else fp32
      // through oneDNN sgemm.
      bool linear = true;
      static Kernels None() { return {false, false, false}; }
    };
    Kernels kernels;
    // --dtype int8: the dense layers of every encoder layer (fused QKV,
    // attention output, intermediate, output) quantized to int8 once at
    // Create (cpu_kernels.h Int8Linear: per-channel weights, dynamic
    // activations); attention, LayerNorm, the embeddings and the heads stay
    // float32. The position projections are computed once at load from the
    // relative table (LayerCache), so they stay float32 and cost nothing per
    // forward. Needs float32 weights on CPU and `precompute`; inference only
    // (under autograd the float32 weights are used).
    bool int8_linear = false;
    // Training on long sequences: under autograd each layer runs through
    // Checkpointed (grad_checkpoint.h), keeping only its input and
    // recomputing its activations in backward (about one more forward of
    // the layers per step for most of the activation memory).
    bool gradient_checkpointing = false;
  };

  static absl::StatusOr<std::unique_ptr<DebertaEncoder>> Create(const ModelConfig& config,
                                                                EncoderWeights weights,
                                                                const Options& options);

  // Runs embeddings and every layer; returns last_hidden_state [B, L, H].
  // When `hidden_states` is given it receives the embedding output followed
  // by each layer's output (num_hidden_layers + 1 tensors).
  torch::Tensor Forward(const EncoderInput& input, std::vector<torch::Tensor>* hidden_states = nullptr,
                        const Dropout& dropout = {}) const;

  // One layer with separate query states (the Enhanced Mask Decoder runs the
  // last layer with query = positions + hidden): keys/values from `hidden`,
  // queries and the attention residual from `query_states`. Same length.
  torch::Tensor LayerForward(int64_t layer, const torch::Tensor& hidden,
                             const torch::Tensor& query_states,
                             const torch::Tensor& attention_mask, const Dropout& dropout = {}) const;

  const ModelConfig& config() const { return config_; }
  const EncoderWeights& weights() const { return weights_; }
  // Mutable access for training (e.g. to set requires_grad); not for
  // concurrent use with Forward.
  EncoderWeights& mutable_weights() { return weights_; }
  // Options::gradient_checkpointing, switched by the trainer; not for
  // concurrent use with Forward.
  void set_gradient_checkpointing(bool on) { options_.gradient_checkpointing = on; }
  torch::Tensor Embed(const EncoderInput& input, const Dropout& dropout = {}) const;

 private:
  struct Int8Layer;  // the int8 dense layers of one stored layer (Options::int8_linear)
  struct PackedLayer;  // the pre-packed oneDNN dense layers of one stored layer (Kernels::linear)
  struct LayerCache {
    LinearWeights qkv;        // fused [3H, H]
    torch::Tensor pos_key;    // [h, 2*span, d], when c2p
    torch::Tensor pos_query;  // [h, 2*span, d] pre-scaled by 1/sqrt(d*k), when p2c
    std::shared_ptr<const Int8Layer> int8;  // set with Options::int8_linear
    std::shared_ptr<const PackedLayer> packed;  // set with Kernels::linear (CPU inference)
  };
  // The key mask two ways: an additive bias [B, 1, 1, L] for the torch path,
  // uint8 [B, L] flags for the fused CPU attention.
  struct Masks {
    torch::Tensor bias;
    torch::Tensor keys;
    // With int8 dense layers: each sequence's valid rows (ValidLengths), so
    // each is quantized over its own rows (cpu_kernels.h Int8Linear).
    std::vector<int64_t> lengths;
  };
  struct Relative {
    torch::Tensor index;  // [L, L] int64 rows of the table, shifted by -min_row
    torch::Tensor by_rel;  // [2L - 1] int32, the same as a Toeplitz vector (FusedAttentionInput)
    int64_t min_row = 0;
    int64_t rows = 0;
  };

  DebertaEncoder(const ModelConfig& config, EncoderWeights weights, const Options& options);
  absl::Status Prepare();
  void PackDenseLayers();  // caches_[i].packed, when Kernels::linear applies
  const LayerWeights& Layer(int64_t index) const;
  torch::Tensor NormalisedRelEmbeddings() const;
  LayerCache BuildLayerCache(const LayerWeights& layer, const torch::Tensor& rel) const;
  Relative BuildRelative(int64_t length, const torch::Device& device) const;
  torch::Tensor Attention(const LayerWeights& layer, const LayerCache& cache,
                          const torch::Tensor& hidden, const torch::Tensor* query_states,
                          const Masks& masks, const Relative& relative, const Dropout& dropout) const;
  torch::Tensor LayerImpl(int64_t index, const LayerCache& cache, const torch::Tensor& hidden,
                          const torch::Tensor* query_states, const Masks& masks,
                          const Relative& relative, const Dropout& dropout) const;
  torch::Tensor ConvImpl(const torch::Tensor& embedded, const torch::Tensor& layer0_out,
                         const torch::Tensor& attention_mask, double dropout) const;
  Masks MakeMasks(const torch::Tensor& attention_mask, torch::ScalarType dtype) const;
  // Precomputed, or built from live weights with `position_dropout` on each
  // layer's copy of the relative table (HF's per-layer pos_dropout).
  std::vector<LayerCache> Caches(double position_dropout) const;

  ModelConfig config_;
  EncoderWeights weights_;
  Options options_;
  RelativePositionMap relative_map_;
  Activation hidden_act_ = nullptr;
  Activation hidden_act_in_place_ = nullptr;
  Activation conv_act_ = nullptr;
  int64_t heads_ = 0;
  int64_t head_size_ = 0;
  double score_scale_ = 1.0;  // 1 / sqrt(head_size * (1 + #c2p + #p2c))
  std::vector<LayerCache> caches_;  // when options_.precompute
};

}  // namespace dserve
