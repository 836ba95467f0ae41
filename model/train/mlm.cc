#include "model/train/mlm.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "model/deberta/weights.h"
#include "model/train/portable_random.h"
#include "model/util/status_macros.h"

namespace dserve {
namespace {

// All draws go through portable_random.h, so a seed gives the same masks
// everywhere.

enum class Action { kMask, kRandom, kKeep };

Action DrawAction(const MaskingOptions& o, std::mt19937_64& rng) {
  const double u = UniformReal(rng);
  if (u < o.mask_token_ratio) return Action::kMask;
  if (u < o.mask_token_ratio + o.random_token_ratio) return Action::kRandom;
  return Action::kKeep;
}

// Draws random replacement ids: uniform over [0, vocab) minus `forbidden`.
class RandomIds {
 public:
  RandomIds(int64_t vocab, std::set<int64_t> forbidden) : vocab_(vocab), forbidden_(std::move(forbidden)) {
    int64_t inside = 0;
    for (int64_t id : forbidden_) inside += (id >= 0 && id < vocab_) ? 1 : 0;
    allowed_ = vocab_ - inside;
  }
  // Returns `fallback` when no id is allowed.
  int64_t Draw(std::mt19937_64& rng, int64_t fallback) const {
    if (allowed_ <= 0) return fallback;
    for (;;) {
      const auto id = static_cast<int64_t>(UniformInt(rng, static_cast<uint64_t>(vocab_)));
      if (!forbidden_.count(id)) return id;
    }
  }

 private:
  int64_t vocab_;
  std::set<int64_t> forbidden_;
  int64_t allowed_ = 0;
};

// ALBERT's n-gram length distribution: p(k) ∝ 1/k, k = 1..max_span.
int DrawSpanLength(int max_span, std::mt19937_64& rng) {
  if (max_span <= 1) return 1;
  double total = 0;
  for (int k = 1; k <= max_span; ++k) total += 1.0 / k;
  double u = UniformReal(rng) * total;
  for (int k = 1; k <= max_span; ++k) {
    u -= 1.0 / k;
    if (u < 0) return k;
  }
  return max_span;
}

void ApplyAction(Action action, int64_t mask_id, const RandomIds& random, std::mt19937_64& rng,
                 int64_t original, int64_t* input, int64_t* label) {
  *label = original;
  switch (action) {
    case Action::kMask: *input = mask_id; break;
    case Action::kRandom: *input = random.Draw(rng, original); break;
    case Action::kKeep: *input = original; break;
  }
}

torch::Tensor Linear(const torch::Tensor& x, const LinearWeights& w) {
  return torch::linear(x, w.weight, w.bias);
}

// Whether every name is in the store.
int CountPresent(const WeightStore& store, const std::vector<std::string>& names) {
  int n = 0;
  for (const auto& name : names) n += store.Has(name) ? 1 : 0;
  return n;
}

// One naming of the MLM head.
struct MlmLayout {
  bool legacy;
  std::string dense, norm, bias;
  std::string bias_alias;  // legacy: cls.predictions.decoder.bias
  std::vector<std::string> Required() const {
    return {dense + ".weight", dense + ".bias", norm + ".weight", norm + ".bias"};
  }
  bool HasBias(const WeightStore& store) const {
    return store.Has(bias) || (!bias_alias.empty() && store.Has(bias_alias));
  }
  int Present(const WeightStore& store) const {
    return CountPresent(store, Required()) + (HasBias(store) ? 1 : 0);
  }
};

const MlmLayout& Layout(bool legacy) {
  static const MlmLayout kLegacy{true, "cls.predictions.transform.dense",
                                 "cls.predictions.transform.LayerNorm", "cls.predictions.bias",
                                 "cls.predictions.decoder.bias"};
  static const MlmLayout kCurrent{false, "lm_predictions.lm_head.dense",
                                  "lm_predictions.lm_head.LayerNorm", "lm_predictions.lm_head.bias", ""};
  return legacy ? kLegacy : kCurrent;
}

const char* const kSopNames[] = {"dserve_sop.pooler.dense.weight", "dserve_sop.pooler.dense.bias",
                                 "dserve_sop.classifier.weight", "dserve_sop.classifier.bias"};

}  // namespace

// ------------------------------------------------------------------ masking --

MaskedTokens MaskTokens(const std::vector<std::vector<int64_t>>& rows,
                        const std::vector<int64_t>& special_ids, int64_t mask_id,
                        int64_t vocab_size, const MaskingOptions& options, std::mt19937_64& rng) {
  const std::set<int64_t> specials(special_ids.begin(), special_ids.end());
  std::set<int64_t> forbidden = specials;
  forbidden.insert(mask_id);
  const RandomIds random(vocab_size, std::move(forbidden));
  const int max_span = std::max(1, options.max_span);

  MaskedTokens out;
  out.input_ids.reserve(rows.size());
  out.labels.reserve(rows.size());
  for (const auto& row : rows) {
    const int64_t len = static_cast<int64_t>(row.size());
    std::vector<int64_t> input = row;
    std::vector<int64_t> labels(row.size(), kIgnoreLabel);
    std::vector<char> eligible(row.size(), 0);
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < len; ++i) {
      if (!specials.count(row[i])) {
        eligible[i] = 1;
        positions.push_back(i);
      }
    }
    const int64_t m = static_cast<int64_t>(positions.size());
    int64_t budget = 0;
    if (m > 0) {
      budget = static_cast<int64_t>(std::floor(options.mask_prob * static_cast<double>(m) + 0.5));
      budget = std::min(std::max<int64_t>(budget, 1), m);
    }
    auto select = [&](int64_t i, Action action) {
      ApplyAction(action, mask_id, random, rng, row[i], &input[i], &labels[i]);
    };

    if (!options.span_masking) {
      // Partial Fisher-Yates: the first `budget` entries become a uniform sample.
      for (int64_t i = 0; i < budget; ++i) {
        const int64_t j = i + static_cast<int64_t>(UniformInt(rng, static_cast<uint64_t>(m - i)));
        std::swap(positions[i], positions[j]);
        select(positions[i], DrawAction(options, rng));
      }
    } else if (budget > 0) {
      // Random visiting order over every eligible start.
      for (int64_t i = m - 1; i > 0; --i) {
        const int64_t j = static_cast<int64_t>(UniformInt(rng, static_cast<uint64_t>(i + 1)));
        std::swap(positions[i], positions[j]);
      }
      std::vector<char> selected(row.size(), 0);
      auto is_selected = [&](int64_t i) { return i >= 0 && i < len && selected[i]; };
      int64_t remaining = budget;
      for (int64_t start : positions) {
        if (remaining == 0) break;
        if (selected[start] || is_selected(start - 1) || is_selected(start + 1)) continue;
        const int64_t want = std::min<int64_t>(DrawSpanLength(max_span, rng), remaining);
        int64_t end = start;
        while (end - start + 1 < want && end + 1 < len && eligible[end + 1] && !selected[end + 1] &&
               !is_selected(end + 2)) {
          ++end;
        }
        const Action action = DrawAction(options, rng);
        for (int64_t i = start; i <= end; ++i) {
          selected[i] = 1;
          select(i, action);
        }
        remaining -= end - start + 1;
      }
      // Rare: the no-adjacency rule left budget unmet; fill with single tokens.
      for (int64_t start : positions) {
        if (remaining == 0) break;
        if (selected[start]) continue;
        selected[start] = 1;
        select(start, DrawAction(options, rng));
        --remaining;
      }
    }
    out.input_ids.push_back(std::move(input));
    out.labels.push_back(std::move(labels));
  }
  return out;
}

// -------------------------------------------------------------------- heads --

absl::StatusOr<MlmHead> MlmHead::Init(const ModelConfig& c, torch::ScalarType dtype,
                                      const torch::Device& device) {
  const int64_t H = c.hidden_size, E = c.embedding_dim();
  if (!c.legacy && E != H) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLM head: legacy=false (lm_predictions.lm_head) needs embedding_size == hidden_size, got ", E,
        " and ", H, "; use legacy=true"));
  }
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  const int64_t out = c.legacy ? E : H;
  MlmHead head;
  head.legacy = c.legacy;
  head.dense = {torch::randn({out, H}, opts) * c.initializer_range, torch::zeros({out}, opts)};
  head.norm = {torch::ones({out}, opts), torch::zeros({out}, opts)};
  head.bias = torch::zeros({c.vocab_size}, opts);
  head.layer_norm_eps = c.layer_norm_eps;
  ASSIGN_OR_RETURN(head.act, ActivationByName(c.hidden_act));
  return head;
}

absl::StatusOr<MlmHead> MlmHead::Load(const ModelConfig& c, WeightStore& store, bool init_if_missing,
                                      std::string* report) {
  const int64_t H = c.hidden_size, E = c.embedding_dim(), V = c.vocab_size;
  const MlmLayout& own = Layout(c.legacy);
  const MlmLayout& other = Layout(!c.legacy);
  const MlmLayout* use = &own;
  const int own_present = own.Present(store);
  if (own_present == 0) {
    // Both layouts have the same shapes when E == H (the non-legacy one
    // requires it anyway).
    if (E == H && other.Present(store) == 5) {
      use = &other;
    } else if (init_if_missing) {
      if (report) *report = "initialised (no MLM head tensors in the checkpoint)";
      return Init(c, store.dtype(), store.device());
    }
  }
  if (!c.legacy && E != H) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MLM head: legacy=false (lm_predictions.lm_head) needs embedding_size == hidden_size, got ", E,
        " and ", H));
  }
  MlmHead head;
  head.legacy = c.legacy;
  head.layer_norm_eps = c.layer_norm_eps;
  const int64_t out = c.legacy ? E : H;
  RETURN_IF_ERROR(LoadLinear(store, use->dense, out, H, &head.dense));
  RETURN_IF_ERROR(LoadNorm(store, use->norm, out, &head.norm));
  if (!use->bias_alias.empty() && !store.Has(use->bias) && store.Has(use->bias_alias)) {
    ASSIGN_OR_RETURN(head.bias, store.Get(use->bias_alias, {V}));
  } else {
    ASSIGN_OR_RETURN(head.bias, store.Get(use->bias, {V}));
  }
  if (use->legacy) {
    // Tied copies HF writes; read (shape-checked) so they count as used.
    { ASSIGN_OR_RETURN(auto unused_bias, store.GetOptional("cls.predictions.decoder.bias", {V})); }
    { ASSIGN_OR_RETURN(auto unused_weight, store.GetOptional("cls.predictions.decoder.weight", {V, E})); }
  }
  ASSIGN_OR_RETURN(head.act, ActivationByName(c.hidden_act));
  if (report) {
    *report = use == &own ? absl::StrCat("loaded ", c.legacy ? "cls.predictions.*" : "lm_predictions.lm_head.*")
                          : absl::StrCat("loaded ", c.legacy ? "lm_predictions.lm_head.*" : "cls.predictions.*",
                                         " (the other layout; saved as ",
                                         c.legacy ? "cls.predictions.*" : "lm_predictions.lm_head.*", ")");
  }
  return head;
}

torch::Tensor MlmHead::Forward(const torch::Tensor& hidden, const torch::Tensor& word_embeddings) const {
  auto x = act(Linear(hidden, dense));
  x = torch::layer_norm(x.to(norm.weight.scalar_type()), {x.size(-1)}, norm.weight, norm.bias, layer_norm_eps);
  return torch::linear(x, word_embeddings, bias);
}

std::vector<torch::Tensor> MlmHead::Parameters() const {
  return {dense.weight, dense.bias, norm.weight, norm.bias, bias};
}

void MlmHead::AppendNamed(const torch::Tensor& word_embeddings,
                          std::vector<std::pair<std::string, torch::Tensor>>* out) const {
  const MlmLayout& l = Layout(legacy);
  out->emplace_back(l.dense + ".weight", dense.weight);
  out->emplace_back(l.dense + ".bias", dense.bias);
  out->emplace_back(l.norm + ".weight", norm.weight);
  out->emplace_back(l.norm + ".bias", norm.bias);
  out->emplace_back(l.bias, bias);
  if (legacy) {
    out->emplace_back("cls.predictions.decoder.weight", word_embeddings);
    out->emplace_back("cls.predictions.decoder.bias", bias);
  }
}

absl::StatusOr<SopHead> SopHead::Init(const ModelConfig& c, torch::ScalarType dtype,
                                      const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  const int64_t H = c.hidden_size;
  SopHead head;
  head.pooler = {torch::randn({H, H}, opts) * c.initializer_range, torch::zeros({H}, opts)};
  head.classifier = {torch::randn({2, H}, opts) * c.initializer_range, torch::zeros({2}, opts)};
  ASSIGN_OR_RETURN(head.act, ActivationByName(c.pooler_hidden_act));
  return head;
}

absl::StatusOr<SopHead> SopHead::Load(const ModelConfig& c, WeightStore& store, bool init_if_missing,
                                      std::string* report) {
  int present = 0;
  for (const char* name : kSopNames) present += store.Has(name) ? 1 : 0;
  if (present == 0 && init_if_missing) {
    if (report) *report = "initialised (no dserve_sop.* tensors in the checkpoint)";
    return Init(c, store.dtype(), store.device());
  }
  const int64_t H = c.hidden_size;
  SopHead head;
  RETURN_IF_ERROR(LoadLinear(store, "dserve_sop.pooler.dense", H, H, &head.pooler));
  RETURN_IF_ERROR(LoadLinear(store, "dserve_sop.classifier", 2, H, &head.classifier));
  ASSIGN_OR_RETURN(head.act, ActivationByName(c.pooler_hidden_act));
  if (report) *report = "loaded dserve_sop.*";
  return head;
}

torch::Tensor SopHead::Forward(const torch::Tensor& hidden) const {
  return Linear(act(Linear(hidden.select(1, 0), pooler)), classifier);
}

std::vector<torch::Tensor> SopHead::Parameters() const {
  return {pooler.weight, pooler.bias, classifier.weight, classifier.bias};
}

void SopHead::AppendNamed(std::vector<std::pair<std::string, torch::Tensor>>* out) const {
  out->emplace_back(kSopNames[0], pooler.weight);
  out->emplace_back(kSopNames[1], pooler.bias);
  out->emplace_back(kSopNames[2], classifier.weight);
  out->emplace_back(kSopNames[3], classifier.bias);
}

// ------------------------------------------------------------ forward/loss --

MlmOutput MlmForward(const DebertaEncoder& encoder, const MlmHead& head, const SopHead* sop,
                     const MlmBatch& batch, bool use_emd, const Dropout& dropout) {
  const ModelConfig& c = encoder.config();
  TORCH_CHECK(batch.input_ids.dim() == 2, "MlmForward: input_ids must be [B, L]");
  TORCH_CHECK(batch.attention_mask.sizes() == batch.input_ids.sizes(),
              "MlmForward: attention_mask must match input_ids");
  TORCH_CHECK(batch.labels.sizes() == batch.input_ids.sizes(), "MlmForward: labels must match input_ids");
  const int64_t B = batch.input_ids.size(0), L = batch.input_ids.size(1);

  MlmOutput out;
  std::vector<torch::Tensor> hidden_states;
  out.last_hidden_state =
      encoder.Forward(EncoderInput{batch.input_ids, batch.attention_mask, batch.token_type_ids},
                      &hidden_states, dropout);
  out.decoder_states = out.last_hidden_state;
  out.used_emd = use_emd && !c.position_biased_input;
  if (out.used_emd) {
    const auto& emb = encoder.weights().embeddings;
    TORCH_CHECK(emb.position.defined(),
                "MlmForward: the Enhanced Mask Decoder needs embeddings.position_embeddings "
                "(see InitEmdPositionsIfMissing)");
    TORCH_CHECK(L <= emb.position.size(0), "MlmForward: length ", L, " exceeds max_position_embeddings ",
                emb.position.size(0));
    torch::Tensor z = emb.position.narrow(0, 0, L);  // [L, E]
    if (emb.projection.defined()) z = torch::linear(z, emb.projection);  // [L, H]
    const torch::Tensor& kv = hidden_states[hidden_states.size() - 2];  // H_{N-1}
    torch::Tensor q = kv + z.to(kv.scalar_type()).unsqueeze(0);
    const int64_t last_layer = c.num_hidden_layers - 1;
    for (int step = 0; step < 2; ++step) q = encoder.LayerForward(last_layer, kv, q, batch.attention_mask, dropout);
    out.decoder_states = q;
  }

  // Targets only, before the vocabulary projection.
  const torch::Tensor flat_labels = batch.labels.reshape({B * L});
  const torch::Tensor index = (flat_labels >= 0).nonzero().squeeze(1);
  const torch::Tensor targets = flat_labels.index_select(0, index);
  const torch::Tensor states = out.decoder_states.reshape({B * L, -1}).index_select(0, index);
  out.logits = head.Forward(states, encoder.weights().embeddings.word);  // [M, V]
  out.count = index.size(0);
  if (out.count > 0) {
    out.mlm_loss = torch::nn::functional::cross_entropy(out.logits.to(torch::kFloat), targets);
  } else {
    out.mlm_loss = out.logits.sum().to(torch::kFloat) * 0.0;  // keeps the graph for backward()
  }
  out.loss = out.mlm_loss;

  if (sop != nullptr && batch.sop_labels.defined()) {
    TORCH_CHECK(batch.sop_labels.dim() == 1 && batch.sop_labels.size(0) == B,
                "MlmForward: sop_labels must be [B]");
    out.sop_logits = sop->Forward(out.last_hidden_state);  // [B, 2]
    const torch::Tensor valid = (batch.sop_labels >= 0).nonzero().squeeze(1);
    const torch::Tensor sop_logits = out.sop_logits.index_select(0, valid).to(torch::kFloat);
    const torch::Tensor sop_targets = batch.sop_labels.index_select(0, valid);
    out.sop_count = valid.size(0);
    out.sop_loss = out.sop_count > 0 ? torch::nn::functional::cross_entropy(sop_logits, sop_targets)
                                     : sop_logits.sum() * 0.0;
    out.loss = out.loss + out.sop_loss;
    torch::NoGradGuard no_grad;
    if (out.sop_count > 0) out.sop_correct = sop_logits.argmax(-1).eq(sop_targets).sum().item<int64_t>();
  }
  {
    torch::NoGradGuard no_grad;
    if (out.count > 0) out.correct = out.logits.argmax(-1).eq(targets).sum().item<int64_t>();
  }
  return out;
}

// ------------------------------------------------------------------- data --

std::vector<MlmExample> BuildMlmExamples(
    const std::vector<std::vector<std::vector<int64_t>>>& documents, int64_t max_length, bool sop,
    int64_t cls_id, int64_t sep_id, std::mt19937_64& rng) {
  std::vector<MlmExample> examples;
  const int64_t target = max_length - (sop ? 3 : 2);  // content tokens per row
  if (target < (sop ? 2 : 1)) return examples;

  using Piece = std::vector<int64_t>;
  auto emit = [&](const std::vector<Piece>& chunk) {
    MlmExample ex;
    if (!sop) {
      ex.input_ids.push_back(cls_id);
      for (const auto& p : chunk) ex.input_ids.insert(ex.input_ids.end(), p.begin(), p.end());
      ex.input_ids.push_back(sep_id);
      ex.token_type_ids.assign(ex.input_ids.size(), 0);
      examples.push_back(std::move(ex));
      return;
    }
    Piece a, b;
    if (chunk.size() >= 2) {
      const size_t a_end = 1 + static_cast<size_t>(UniformInt(rng, chunk.size() - 1));
      for (size_t i = 0; i < chunk.size(); ++i) {
        Piece& dst = i < a_end ? a : b;
        dst.insert(dst.end(), chunk[i].begin(), chunk[i].end());
      }
    } else {
      const Piece& only = chunk[0];
      if (only.size() < 2) return;  // cannot form a pair
      const size_t cut = 1 + static_cast<size_t>(UniformInt(rng, only.size() - 1));
      a.assign(only.begin(), only.begin() + static_cast<std::ptrdiff_t>(cut));
      b.assign(only.begin() + static_cast<std::ptrdiff_t>(cut), only.end());
    }
    const bool swap = UniformInt(rng, 2) == 1;
    const Piece& first = swap ? b : a;
    const Piece& second = swap ? a : b;
    ex.input_ids.push_back(cls_id);
    ex.input_ids.insert(ex.input_ids.end(), first.begin(), first.end());
    ex.input_ids.push_back(sep_id);
    ex.token_type_ids.assign(ex.input_ids.size(), 0);
    ex.input_ids.insert(ex.input_ids.end(), second.begin(), second.end());
    ex.input_ids.push_back(sep_id);
    ex.token_type_ids.resize(ex.input_ids.size(), 1);
    ex.sop_label = swap ? 1 : 0;
    examples.push_back(std::move(ex));
  };

  for (const auto& document : documents) {
    std::vector<Piece> chunk;
    int64_t chunk_len = 0;
    for (const auto& sentence : document) {
      for (size_t begin = 0; begin < sentence.size(); begin += static_cast<size_t>(target)) {
        const size_t end = std::min(sentence.size(), begin + static_cast<size_t>(target));
        Piece piece(sentence.begin() + static_cast<std::ptrdiff_t>(begin),
                    sentence.begin() + static_cast<std::ptrdiff_t>(end));
        const int64_t n = static_cast<int64_t>(piece.size());
        if (!chunk.empty() && chunk_len + n > target) {
          emit(chunk);
          chunk.clear();
          chunk_len = 0;
        }
        chunk.push_back(std::move(piece));
        chunk_len += n;
      }
    }
    if (!chunk.empty()) emit(chunk);
  }
  return examples;
}

MlmBatch CollateMlmBatch(const std::vector<MlmExample>& examples, const MaskedTokens& masked,
                         int64_t pad_id, const torch::Device& device) {
  const size_t B = masked.input_ids.size();
  TORCH_CHECK(examples.size() == B && masked.labels.size() == B,
              "CollateMlmBatch: examples and masked rows differ in number");
  size_t L = 0;
  for (const auto& row : masked.input_ids) L = std::max(L, row.size());
  std::vector<int64_t> ids(B * L, pad_id), mask(B * L, 0), types(B * L, 0), labels(B * L, kIgnoreLabel);
  std::vector<int64_t> sop(B, kIgnoreLabel);
  bool any_sop = false;
  for (size_t b = 0; b < B; ++b) {
    const auto& row = masked.input_ids[b];
    TORCH_CHECK(masked.labels[b].size() == row.size(), "CollateMlmBatch: row ", b,
                ": labels and input_ids differ in length");
    TORCH_CHECK(examples[b].token_type_ids.empty() || examples[b].token_type_ids.size() == row.size(),
                "CollateMlmBatch: row ", b, ": token types and input_ids differ in length");
    for (size_t i = 0; i < row.size(); ++i) {
      ids[b * L + i] = row[i];
      mask[b * L + i] = 1;
      labels[b * L + i] = masked.labels[b][i];
      if (!examples[b].token_type_ids.empty()) types[b * L + i] = examples[b].token_type_ids[i];
    }
    sop[b] = examples[b].sop_label;
    any_sop = any_sop || examples[b].sop_label >= 0;
  }
  const int64_t Bi = static_cast<int64_t>(B), Li = static_cast<int64_t>(L);
  auto tensor = [&](std::vector<int64_t>& v, std::vector<int64_t> shape) {
    return torch::from_blob(v.data(), shape, torch::kLong).to(device, /*non_blocking=*/false, /*copy=*/true);
  };
  MlmBatch batch;
  batch.input_ids = tensor(ids, {Bi, Li});
  batch.attention_mask = tensor(mask, {Bi, Li});
  batch.token_type_ids = tensor(types, {Bi, Li});
  batch.labels = tensor(labels, {Bi, Li});
  if (any_sop) batch.sop_labels = tensor(sop, {Bi});
  return batch;
}

}  // namespace dserve
