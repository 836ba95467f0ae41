// The ALBERT encoder exactly as Hugging Face's AlbertModel computes it
// (../shared/goldens/albert/README.md): embeddings in E dimensions with a
// LayerNorm there, a biased E->H projection inside the encoder, then
// num_hidden_layers post-LN layers whose parameters come from
// num_hidden_groups groups of inner_group_num layers each (layer i runs group
// int(i / (num_hidden_layers / num_hidden_groups))), absolute positions, and
// an additive mask on padded keys only.
//
// Thread safety: immutable after Create(); Forward is const and may run on
// several threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"
#include "model/deberta/torch_util.h"
#include "model/family/network.h"

namespace dserve {

class WeightStore;

struct AlbertLayerWeights {
  LinearWeights query, key, value;  // [H, H] each
  LinearWeights dense;              // attention.dense [H, H]
  NormWeights attention_norm;       // attention.LayerNorm [H]
  LinearWeights ffn;                // [I, H]
  LinearWeights ffn_output;         // [H, I]
  NormWeights output_norm;          // full_layer_layer_norm [H]
};

struct AlbertWeights {
  torch::Tensor word;        // albert.embeddings.word_embeddings [V, E]
  torch::Tensor position;    // position_embeddings [P, E]
  torch::Tensor token_type;  // token_type_embeddings [T, E]
  NormWeights embedding_norm;          // embeddings.LayerNorm [E]
  LinearWeights embedding_to_hidden;   // encoder.embedding_hidden_mapping_in [H, E] + bias
  // groups[g][j]: albert_layer_groups.g.albert_layers.j
  std::vector<std::vector<AlbertLayerWeights>> groups;

  // Every tensor by its HF name ("albert." scope), shapes checked against
  // `config` (which must be an ALBERT config).
  static absl::StatusOr<AlbertWeights> Load(const ModelConfig& config, WeightStore& store);
  // Fresh weights as HF's _init_weights draws them (normal(0,
  // initializer_range), LayerNorm 1/0, biases 0): benchmarks, training.
  static AlbertWeights Init(const ModelConfig& config, torch::ScalarType dtype, const torch::Device& device);
  // (HF name, tensor) pairs, "albert." prefixed, in HF's state_dict order.
  std::vector<std::pair<std::string, torch::Tensor>> Named() const;
};

class AlbertEncoder {
 public:
  struct Options {
    // Precompute the fused QKV weight once. Turn off for training, where
    // it must follow the live query/key/value weights on every step.
    bool precompute = true;
    // --dtype int8: the layers' dense projections (fused QKV, attention
    // dense, ffn, ffn_output) quantized to int8 once at Create
    // (cpu_kernels.h Int8Linear); the embedding projection, attention,
    // LayerNorm and the heads stay float32. Needs float32 CPU weights and
    // `precompute`; under autograd the float32 weights are used.
    bool int8_linear = false;
    // CPU inference: self-attention through DeBERTa's fused tile
    // (cpu_kernels.h FusedAttention with no position terms: vectorised
    // softmax, 32-query blocks, no [B, h, L, L] scores); off = torch ops.
    bool attention_kernel = true;
  };
  static absl::StatusOr<std::unique_ptr<AlbertEncoder>> Create(const ModelConfig& config, AlbertWeights weights,
                                                               Options options);
  static absl::StatusOr<std::unique_ptr<AlbertEncoder>> Create(const ModelConfig& config, AlbertWeights weights) {
    return Create(config, std::move(weights), Options{});
  }

  // last_hidden_state [B, L, H]. `dropout` (training) as Hugging Face's
  // AlbertModel applies it: `hidden` on the embeddings (after their
  // LayerNorm) and on the attention output projection, `attention` on the
  // attention probabilities (AlbertLayer's own dropout is never applied
  // there, so the FFN output has none). Under autograd every step is a
  // differentiable torch op (no in-place activation, no fused kernels).
  torch::Tensor Forward(const EncoderInput& input, const Dropout& dropout = {}) const;

  // The parameter group layer `layer` runs (HF's float division, truncated).
  static int64_t GroupOfLayer(int64_t layer, int64_t num_layers, int64_t num_groups);

  const AlbertWeights& weights() const { return weights_; }

 private:
  struct Int8Layer;  // the int8 dense layers of one stored layer (Options::int8_linear)
  // The pre-packed oneDNN dense layers of one stored layer (packed_linear.h),
  // for CPU inference in fp32 / bf16 unless DSERVE_PACKED_LINEAR=0.
  struct PackedLayer;
  struct Fused {
    LinearWeights qkv;  // [3H, H]: one GEMM for query, key and value
    std::shared_ptr<const Int8Layer> int8;  // set with Options::int8_linear
    std::shared_ptr<const PackedLayer> packed;  // set without int8, where oneDNN's matmul runs
  };
  AlbertEncoder(const ModelConfig& config, AlbertWeights weights);
  torch::Tensor Embed(const EncoderInput& input, const Dropout& dropout) const;
  // `lengths`: each sequence's valid rows, for the int8 dense layers (empty
  // without them).
  // `key_mask`: [B, L] uint8, 1 for a real key (the fused attention's form of
  // `key_bias`).
  torch::Tensor Layer(const AlbertLayerWeights& w, const Fused* fused, const torch::Tensor& hidden,
                      const torch::Tensor& key_bias, const torch::Tensor& key_mask,
                      const std::vector<int64_t>& lengths, const Dropout& dropout) const;

  ModelConfig config_;
  AlbertWeights weights_;
  bool attention_kernel_ = true;  // Options::attention_kernel
  std::vector<std::vector<Fused>> fused_;  // parallel to weights_.groups; empty without precompute
  Activation act_ = nullptr;           // hidden_act, under autograd
  Activation act_in_place_ = nullptr;  // hidden_act, on the FFN's fresh output otherwise
  int64_t heads_ = 0;
  int64_t head_size_ = 0;
};

}  // namespace dserve
