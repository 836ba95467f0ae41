// Masked-LM pretraining pieces (issue 5, `--task mlm`, `--objective sop`):
//
// - MaskTokens: BERT/DeBERTa masking (15% of the non-special tokens, of
//   which 80% [MASK], 10% a random id, 10% kept), optionally in spans;
// - MlmHead: the DebertaV2ForMaskedLM prediction head (DeBERTa v1's
//   DebertaForMaskedLM has the same one under the same names), in either of
//   Hugging Face's layouts (`legacy` true: cls.predictions.*, false:
//   lm_predictions.lm_head.*), decoder tied to the word embeddings;
// - SopHead: ALBERT's sentence-order prediction head (our extension, saved
//   under dserve_sop.*);
// - MlmForward: encoder + Enhanced Mask Decoder (REFERENCE §9) + heads +
//   losses;
// - BuildMlmExamples: documents -> [CLS] A [SEP] (B [SEP]) training rows.
//
// Everything here is a plain function over weight tensors (like
// model/heads/heads.h), so training and evaluation share the code; autograd
// flows into every weight that requires grad.
//
// Thread safety: MaskTokens and BuildMlmExamples touch only their arguments
// (give each thread its own rng). The heads are immutable values; their
// Forward and MlmForward are const and may run concurrently, but not
// concurrently with an optimizer step or anything else that writes the
// weights in place.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/deberta_trainable.h"
#include "model/deberta/encoder.h"
#include "model/deberta/torch_util.h"

namespace dserve {

class WeightStore;

// Label value of a position that is not a prediction target (Hugging Face's
// CrossEntropyLoss ignore_index). Any negative label is treated the same way.
inline constexpr int64_t kIgnoreLabel = -100;

// ------------------------------------------------------------------ masking --

struct MaskingOptions {
  // Fraction of the eligible (non-special) tokens of a row that are selected
  // as prediction targets: exactly round(mask_prob * eligible) per row, and
  // at least one when the row has an eligible token.
  double mask_prob = 0.15;
  // Of the selected targets: this fraction becomes [MASK] ...
  double mask_token_ratio = 0.8;
  // ... this fraction becomes a random non-special id, the rest is kept.
  double random_token_ratio = 0.1;
  // Select whole spans instead of single tokens (see MaskTokens).
  bool span_masking = false;
  int max_span = 3;  // longest span, in tokens (>= 1)
};

struct MaskedTokens {
  // Per row, same lengths as the input rows.
  std::vector<std::vector<int64_t>> input_ids;  // after masking
  std::vector<std::vector<int64_t>> labels;     // original id at targets, kIgnoreLabel elsewhere
};

// Masks every row independently.
//
// Eligible positions are those whose id is not in `special_ids` (pass
// [PAD], [CLS], [SEP], [UNK] if wanted, [MASK]); they are never selected.
// The target budget per row is n = clamp(round(mask_prob * eligible), 1,
// eligible) (0 when nothing is eligible).
//
// Token masking: n distinct eligible positions drawn uniformly without
// replacement; each target independently becomes [MASK] with probability
// mask_token_ratio, a random id with probability random_token_ratio, else is
// kept.
//
// Span masking: span lengths are drawn from ALBERT's n-gram distribution,
// p(len = k) ∝ 1/k for k = 1..max_span (so 1: 6/11, 2: 3/11, 3: 2/11 for
// max_span 3), starting at eligible positions visited in a random order. A
// span is cut short at a non-eligible token, at an already selected token
// and at the remaining budget, and it never starts or ends next to an
// already selected token, so every contiguous run of targets is one span
// of at most max_span tokens. The budget is the same n as for token masking;
// if the no-adjacency rule leaves it unmet (only in very short or densely
// special rows), the remainder is filled with single tokens that may touch
// a span. The 80/10/10 decision is made once per span (SpanBERT), a random
// replacement draws a fresh id for each token.
//
// Random ids are uniform over [0, vocab_size) minus `special_ids` and
// `mask_id`. All randomness comes from `rng` through portable integer
// arithmetic (no std::*_distribution), so the output is a pure function of
// the inputs and the rng state on every platform; `rng` advances.
MaskedTokens MaskTokens(const std::vector<std::vector<int64_t>>& rows,
                        const std::vector<int64_t>& special_ids, int64_t mask_id,
                        int64_t vocab_size, const MaskingOptions& options, std::mt19937_64& rng);

// -------------------------------------------------------------------- heads --

// The masked-LM prediction head of DebertaV2ForMaskedLM:
//   logits = LN(act(dense(h))) · E_wordᵀ + bias,   act = config.hidden_act.
//
// Tensor names (Hugging Face's state_dict):
// - legacy = true (HF's default; LegacyDebertaV2OnlyMLMHead):
//     cls.predictions.transform.dense.{weight [E, H], bias [E]}
//     cls.predictions.transform.LayerNorm.{weight, bias} [E]
//     cls.predictions.bias [V]            (also written as cls.predictions.decoder.bias)
//     cls.predictions.decoder.weight [V, E] = the word embeddings (tied; written so
//                                        that HF finds it, ignored on load)
// - legacy = false (DebertaV2OnlyMLMHead; Microsoft's checkpoint names):
//     lm_predictions.lm_head.dense.{weight [H, H], bias [H]}
//     lm_predictions.lm_head.LayerNorm.{weight, bias} [H]
//     lm_predictions.lm_head.bias [V]
//   HF multiplies by E_wordᵀ directly, so this layout needs embedding_size ==
//   hidden_size (Init/Load return InvalidArgument otherwise).
struct MlmHead {
  bool legacy = true;
  LinearWeights dense;  // [E, H] (legacy) or [H, H]
  NormWeights norm;     // [E] or [H]
  torch::Tensor bias;   // [V]
  Activation act = nullptr;
  double layer_norm_eps = 1e-7;

  // Fresh weights as HF's _init_weights draws them: dense N(0,
  // initializer_range), LayerNorm 1/0, biases 0. Layout from config.legacy.
  static absl::StatusOr<MlmHead> Init(const ModelConfig& config, torch::ScalarType dtype,
                                      const torch::Device& device);
  // Loads the layout config.legacy names, with the store's dtype and device.
  // If those tensors are absent but the other layout's are there with the
  // same shapes (e.g. a Hub v3 file, which carries lm_predictions.lm_head.*,
  // under a config with the default legacy = true), they are taken instead.
  // If neither layout is present: NotFound naming the missing tensor, unless
  // `init_if_missing`, in which case the head is Init()ed. A partially
  // present layout is always an error. `report` (optional) receives one line
  // saying where the head came from ("loaded cls.predictions.*",
  // "loaded lm_predictions.lm_head.* (the other layout)", "initialised").
  static absl::StatusOr<MlmHead> Load(const ModelConfig& config, WeightStore& store,
                                      bool init_if_missing = false, std::string* report = nullptr);

  // hidden [..., H], word_embeddings [V, E] -> logits [..., V].
  torch::Tensor Forward(const torch::Tensor& hidden, const torch::Tensor& word_embeddings) const;
  // The head's own trainable tensors (not the tied word embeddings), for an
  // optimizer; each exactly once.
  std::vector<torch::Tensor> Parameters() const;
  // (HF name, tensor) pairs for saving, names as listed above. Legacy also
  // writes cls.predictions.decoder.weight = `word_embeddings` and
  // cls.predictions.decoder.bias = bias (the same tensors, saved twice).
  void AppendNamed(const torch::Tensor& word_embeddings,
                   std::vector<std::pair<std::string, torch::Tensor>>* out) const;
};

// ALBERT's sentence-order prediction head; our extension (Hugging Face has
// no DeBERTa SOP head, and ignores these tensors with a warning):
//   logits [B, 2] = classifier(act(pooler(h[:, 0]))),  act = pooler_hidden_act
// Names: dserve_sop.pooler.dense.{weight [H, H], bias [H]},
//        dserve_sop.classifier.{weight [2, H], bias [2]}.
// Class 0 = segments in document order, 1 = swapped.
struct SopHead {
  LinearWeights pooler;
  LinearWeights classifier;
  Activation act = nullptr;

  static absl::StatusOr<SopHead> Init(const ModelConfig& config, torch::ScalarType dtype,
                                      const torch::Device& device);
  // Missing tensors: NotFound, unless `init_if_missing` (then Init()).
  static absl::StatusOr<SopHead> Load(const ModelConfig& config, WeightStore& store,
                                      bool init_if_missing = false, std::string* report = nullptr);
  // hidden [B, L, H] -> logits [B, 2]
  torch::Tensor Forward(const torch::Tensor& hidden) const;
  std::vector<torch::Tensor> Parameters() const;
  void AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const;
};

// InitEmdPositionsIfMissing (the EMD's position table for a checkpoint
// without one) is DeBERTa's: model/deberta/deberta_trainable.h.

// ------------------------------------------------------------ forward/loss --

// One training/eval batch. All tensors on the encoder's device.
struct MlmBatch {
  torch::Tensor input_ids;       // [B, L] int64, after masking
  torch::Tensor attention_mask;  // [B, L] int64, 1 real / 0 padding
  torch::Tensor token_type_ids;  // [B, L] int64, or undefined (all zero)
  torch::Tensor labels;          // [B, L] int64, original id at targets, negative elsewhere
  torch::Tensor sop_labels;      // [B] int64 (0 in order, 1 swapped, negative = ignore), or undefined
};

struct MlmOutput {
  torch::Tensor loss;      // scalar: mlm_loss (+ sop_loss when SOP ran); backward() on this
  torch::Tensor mlm_loss;  // scalar: mean cross-entropy over the M targets (0 with a graph if M = 0)
  torch::Tensor sop_loss;  // scalar mean cross-entropy, or undefined
  // Logits of the targets only, [M, V], in row-major order of labels >= 0.
  torch::Tensor logits;
  // What fed the MLM head, [B, L, H]: q₂ with the EMD, else H_N.
  torch::Tensor decoder_states;
  torch::Tensor last_hidden_state;  // H_N [B, L, H]
  torch::Tensor sop_logits;         // [B, 2], or undefined
  bool used_emd = false;            // false when use_emd but position_biased_input
  int64_t correct = 0;  // targets whose argmax is the label
  int64_t count = 0;    // M
  int64_t sop_correct = 0;
  int64_t sop_count = 0;
};

// Encoder -> (EMD) -> MLM head (+ SOP head) -> losses.
//
// Enhanced Mask Decoder (REFERENCE §9), when use_emd and
// !config.position_biased_input. With layer outputs H₁..H_N
// (hidden_states[1..N] of DebertaEncoder::Forward; H₀ = embeddings):
//   z   = E_pos[0..L-1], projected by embed_proj (no bias) when E != H, so
//         that it lives in hidden space; no LayerNorm (Microsoft adds the raw
//         position embedding; its configs never factorise, so the projection
//         is our choice for E != H)
//   KV  = H_{N-1};  q₀ = z + H_{N-1}   (broadcast over the batch)
//   q_t = Layer_N(hidden = KV, query_states = q_{t-1}),  t = 1, 2
// where Layer_N is DebertaEncoder::LayerForward(num_hidden_layers - 1, ...):
// the last layer's weights (layer 0's with dserve.share_layers), the same
// attention mask and relative table. q₂ feeds the MLM head. With one layer,
// H_{N-1} is the embedding output. Without the EMD (or with absolute input
// positions, where use_emd is ignored) H_N feeds the head.
//
// Only the target positions (labels >= 0) are gathered before the head, so
// the vocabulary projection costs M x V, not B x L x V. SOP (when `sop` and
// batch.sop_labels are given) pools H_N's [CLS]; its loss is added with
// weight 1. correct/count are computed without grad.
//
// Throws c10::Error (TORCH_CHECK) on bad shapes or when the EMD is asked
// for and the encoder has no position table; call inside TorchCall at a
// Status boundary.
// `dropout`: training-time dropout of the encoder (and the decoder layer).
MlmOutput MlmForward(const DebertaEncoder& encoder, const MlmHead& head, const SopHead* sop,
                     const MlmBatch& batch, bool use_emd, const Dropout& dropout = {});

// ------------------------------------------------------------------- data --

struct MlmExample {
  std::vector<int64_t> input_ids;       // [CLS] A [SEP] (B [SEP]), unpadded
  std::vector<int64_t> token_type_ids;  // 0 for [CLS] A [SEP], 1 for B [SEP]
  int64_t sop_label = kIgnoreLabel;     // with SOP: 0 in order, 1 swapped
};

// Packs each document's consecutive sentences (token ids without specials)
// into rows of at most max_length tokens (specials included); sentences
// never cross documents, empty sentences are skipped, and a sentence longer
// than a row holds is cut into row-sized pieces first.
//
// Without SOP: sentences are appended while [CLS] chunk [SEP] fits, giving
// [CLS] A [SEP] rows (token types 0).
//
// With SOP: a chunk is filled the same way up to max_length - 3 tokens and
// split at a uniformly chosen sentence boundary (a chunk of one sentence is
// split at a uniformly chosen token) into consecutive segments A and B; with
// probability 0.5 they are swapped ([CLS] B [SEP] A [SEP], sop_label 1),
// else sop_label 0. A chunk of a single token cannot form a pair and is
// dropped. Needs max_length >= 5 with SOP, >= 3 without (else no examples).
//
// Deterministic for a given rng state; rng advances.
std::vector<MlmExample> BuildMlmExamples(
    const std::vector<std::vector<std::vector<int64_t>>>& documents, int64_t max_length, bool sop,
    int64_t cls_id, int64_t sep_id, std::mt19937_64& rng);

// Pads `masked` (rows of input ids and labels, e.g. MaskTokens over the
// examples' input_ids) on the right with pad_id (labels kIgnoreLabel,
// attention 0) into an MlmBatch on `device`. `examples` supplies token types
// and SOP labels (sop_labels is left undefined when no example has one);
// it must have as many rows as `masked`.
MlmBatch CollateMlmBatch(const std::vector<MlmExample>& examples, const MaskedTokens& masked,
                         int64_t pad_id, const torch::Device& device);

}  // namespace dserve
