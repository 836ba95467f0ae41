// Masked-LM pretraining pieces (model/train/mlm.h): masking statistics,
// span masking, determinism, HF head names and loading, the Enhanced Mask
// Decoder (shapes, that --no-emd changes the computation, gradients,
// share_layers), example packing, and a tiny model that learns.
#include "model/train/mlm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/checkpoint/safetensors.h"
#include "model/deberta/weights.h"

namespace dserve {
namespace {

namespace fs = std::filesystem;

// The toy tokenizer's layout (shared/goldens/tokenizer/spm.model): 300
// pieces, [PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3, [MASK]=300 appended.
constexpr int64_t kPad = 0, kCls = 1, kSep = 2, kUnk = 3, kMask = 300, kVocab = 301;
const std::vector<int64_t> kSpecials = {kPad, kCls, kSep, kUnk, kMask};

bool IsSpecial(int64_t id) { return std::count(kSpecials.begin(), kSpecials.end(), id) > 0; }

// 4.5 standard deviations of a sample proportion: a false failure is ~1e-5.
double Tolerance(double p, double n) { return 4.5 * std::sqrt(p * (1 - p) / n); }

// Rows like real batches: [CLS] tokens [SEP] [PAD]..., with some [UNK]s.
std::vector<std::vector<int64_t>> MakeRows(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> rows;
  for (int r = 0; r < count; ++r) {
    const int len = 20 + static_cast<int>(rng() % 81);
    std::vector<int64_t> row = {kCls};
    for (int i = 0; i < len; ++i) row.push_back(rng() % 20 == 0 ? kUnk : 4 + static_cast<int64_t>(rng() % 296));
    row.push_back(kSep);
    for (int i = 0, pad = static_cast<int>(rng() % 5); i < pad; ++i) row.push_back(kPad);
    rows.push_back(row);
  }
  return rows;
}

int64_t Eligible(const std::vector<int64_t>& row) {
  return std::count_if(row.begin(), row.end(), [](int64_t id) { return !IsSpecial(id); });
}

int64_t Budget(int64_t eligible, double p) {
  if (eligible == 0) return 0;
  return std::min(eligible, std::max<int64_t>(1, static_cast<int64_t>(std::floor(p * eligible + 0.5))));
}

// ------------------------------------------------------------------ masking --

TEST(MaskTokensTest, SelectionAndReplacementStatistics) {
  const auto rows = MakeRows(2000, 7);
  std::mt19937_64 rng(42);
  const MaskingOptions options;
  const MaskedTokens masked = MaskTokens(rows, kSpecials, kMask, kVocab, options, rng);
  ASSERT_EQ(masked.input_ids.size(), rows.size());
  ASSERT_EQ(masked.labels.size(), rows.size());

  int64_t eligible_total = 0, selected_total = 0, n_mask = 0, n_random = 0, n_kept = 0;
  int64_t first_half_eligible = 0, first_half_selected = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    ASSERT_EQ(masked.input_ids[r].size(), row.size());
    ASSERT_EQ(masked.labels[r].size(), row.size());
    const int64_t eligible = Eligible(row);
    int64_t selected = 0, seen = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      const int64_t in = masked.input_ids[r][i], label = masked.labels[r][i];
      if (IsSpecial(row[i])) {
        EXPECT_EQ(label, kIgnoreLabel) << "special selected, row " << r << " pos " << i;
        EXPECT_EQ(in, row[i]) << "special changed, row " << r << " pos " << i;
        continue;
      }
      const bool first_half = 2 * seen++ < eligible;
      first_half_eligible += first_half;
      if (label == kIgnoreLabel) {
        EXPECT_EQ(in, row[i]) << "unselected token changed";
        continue;
      }
      ++selected;
      first_half_selected += first_half;
      EXPECT_EQ(label, row[i]) << "label is not the original id";
      if (in == kMask) {
        ++n_mask;
      } else if (in == row[i]) {
        ++n_kept;
      } else {
        ++n_random;
        EXPECT_FALSE(IsSpecial(in)) << "random replacement is a special id: " << in;
        EXPECT_GE(in, 0);
        EXPECT_LT(in, kVocab);
      }
    }
    EXPECT_EQ(selected, Budget(eligible, 0.15)) << "row " << r;
    eligible_total += eligible;
    selected_total += selected;
  }
  // Per-row counts are exact; the pooled fraction differs from 15% only by
  // the per-row rounding (at most half a token per row).
  const double fraction = static_cast<double>(selected_total) / eligible_total;
  const double rounding = 0.5 * rows.size() / eligible_total;
  EXPECT_NEAR(fraction, 0.15, rounding) << selected_total << " of " << eligible_total;
  // Positions are uniform: the first half of each row gets its share.
  const double first = static_cast<double>(first_half_selected) / first_half_eligible;
  EXPECT_NEAR(first, fraction, Tolerance(0.15, first_half_eligible));

  // 80/10/10. A random draw equal to the original (1 in 296) counts as kept.
  const double n = static_cast<double>(selected_total);
  const double p_random = 0.1 * (1.0 - 1.0 / 296);
  EXPECT_NEAR(n_mask / n, 0.8, Tolerance(0.8, n)) << n_mask << "/" << n;
  EXPECT_NEAR(n_random / n, p_random, Tolerance(p_random, n)) << n_random << "/" << n;
  EXPECT_NEAR(n_kept / n, 1 - 0.8 - p_random, Tolerance(0.1, n)) << n_kept << "/" << n;
  std::printf("token masking: %lld of %lld eligible selected (%.4f); [MASK] %.4f random %.4f kept %.4f\n",
              static_cast<long long>(selected_total), static_cast<long long>(eligible_total), fraction,
              n_mask / n, n_random / n, n_kept / n);
}

TEST(MaskTokensTest, OtherRatiosAreHonoured) {
  const auto rows = MakeRows(1000, 11);
  std::mt19937_64 rng(5);
  MaskingOptions options;
  options.mask_prob = 0.3;
  options.mask_token_ratio = 0.5;
  options.random_token_ratio = 0.5;
  const MaskedTokens masked = MaskTokens(rows, kSpecials, kMask, kVocab, options, rng);
  int64_t selected = 0, n_mask = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t row_selected = 0;
    for (size_t i = 0; i < rows[r].size(); ++i) {
      if (masked.labels[r][i] == kIgnoreLabel) continue;
      ++row_selected;
      n_mask += masked.input_ids[r][i] == kMask;
    }
    EXPECT_EQ(row_selected, Budget(Eligible(rows[r]), 0.3));
    selected += row_selected;
  }
  EXPECT_NEAR(static_cast<double>(n_mask) / selected, 0.5, Tolerance(0.5, selected));
}

TEST(MaskTokensTest, EdgeRows) {
  std::mt19937_64 rng(1);
  const MaskedTokens masked =
      MaskTokens({{}, {kCls, kSep}, {kCls, 17, kSep}, {kCls, 17, 18, kSep, kPad}}, kSpecials, kMask, kVocab,
                 MaskingOptions{}, rng);
  EXPECT_TRUE(masked.input_ids[0].empty());
  EXPECT_EQ(masked.labels[1], (std::vector<int64_t>{kIgnoreLabel, kIgnoreLabel}));
  EXPECT_EQ(masked.input_ids[1], (std::vector<int64_t>{kCls, kSep}));
  // One eligible token: exactly one target (round(0.15) = 0, raised to 1).
  EXPECT_EQ(masked.labels[2], (std::vector<int64_t>{kIgnoreLabel, 17, kIgnoreLabel}));
  int targets = 0;
  for (int64_t label : masked.labels[3]) targets += label != kIgnoreLabel;
  EXPECT_EQ(targets, 1);
}

TEST(MaskTokensTest, SpanMaskingGivesContiguousRunsWithinTheBudget) {
  const auto rows = MakeRows(1000, 13);
  MaskingOptions options;
  options.span_masking = true;
  options.max_span = 3;
  std::mt19937_64 rng(99);
  const MaskedTokens masked = MaskTokens(rows, kSpecials, kMask, kVocab, options, rng);
  std::map<int, int64_t> run_lengths;
  int64_t runs = 0, selected_total = 0, in_multi = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    int64_t selected = 0;
    for (size_t i = 0; i < row.size();) {
      if (masked.labels[r][i] == kIgnoreLabel) {
        EXPECT_EQ(masked.input_ids[r][i], row[i]);
        ++i;
        continue;
      }
      size_t j = i;
      int masks = 0;
      while (j < row.size() && masked.labels[r][j] != kIgnoreLabel) {
        EXPECT_FALSE(IsSpecial(row[j]));
        EXPECT_EQ(masked.labels[r][j], row[j]);
        masks += masked.input_ids[r][j] == kMask;
        ++j;
      }
      const int len = static_cast<int>(j - i);
      EXPECT_LE(len, options.max_span) << "row " << r << " run at " << i;
      // The 80/10/10 decision is per span: a run is all [MASK] or none.
      EXPECT_TRUE(masks == 0 || masks == len) << "row " << r << " run at " << i;
      ++run_lengths[len];
      ++runs;
      if (len > 1) in_multi += len;
      selected += len;
      i = j;
    }
    EXPECT_EQ(selected, Budget(Eligible(row), 0.15)) << "row " << r;
    selected_total += selected;
  }
  // p(k) ∝ 1/k: 6/11, 3/11, 2/11 before budget cuts shorten the last span.
  EXPECT_GT(run_lengths[2], runs / 8);
  EXPECT_GT(run_lengths[3], runs / 12);
  EXPECT_GT(run_lengths[1], runs * 4 / 10);
  std::printf("span masking: %lld targets in %lld runs (len1 %lld, len2 %lld, len3 %lld); %.2f in multi-token runs\n",
              static_cast<long long>(selected_total), static_cast<long long>(runs),
              static_cast<long long>(run_lengths[1]), static_cast<long long>(run_lengths[2]),
              static_cast<long long>(run_lengths[3]), static_cast<double>(in_multi) / selected_total);
}

TEST(MaskTokensTest, DeterministicForASeed) {
  const auto rows = MakeRows(50, 3);
  for (bool spans : {false, true}) {
    MaskingOptions options;
    options.span_masking = spans;
    std::mt19937_64 a(123), b(123), c(124);
    const auto x = MaskTokens(rows, kSpecials, kMask, kVocab, options, a);
    const auto y = MaskTokens(rows, kSpecials, kMask, kVocab, options, b);
    const auto z = MaskTokens(rows, kSpecials, kMask, kVocab, options, c);
    EXPECT_EQ(x.input_ids, y.input_ids);
    EXPECT_EQ(x.labels, y.labels);
    EXPECT_EQ(a(), b()) << "rng advanced differently";
    EXPECT_NE(x.labels, z.labels);
  }
}

// ----------------------------------------------------------------- the model --

ModelConfig TinyConfig(bool position_biased_input = false, bool share_layers = false,
                       int64_t embedding_size = 0, bool legacy = true,
                       double initializer_range = 0.02) {
  nlohmann::json j = {{"model_type", "deberta-v2"},
                      {"vocab_size", kVocab},
                      {"hidden_size", 32},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"intermediate_size", 64},
                      {"max_position_embeddings", 64},
                      {"relative_attention", true},
                      {"position_buckets", 16},
                      {"max_relative_positions", -1},
                      {"pos_att_type", {"p2c", "c2p"}},
                      {"norm_rel_ebd", "layer_norm"},
                      {"share_att_key", true},
                      {"position_biased_input", position_biased_input},
                      {"type_vocab_size", 0},
                      {"hidden_act", "gelu"},
                      {"layer_norm_eps", 1e-7},
                      {"initializer_range", initializer_range},
                      {"legacy", legacy},
                      {"architectures", {"DebertaV2ForMaskedLM"}}};
  if (embedding_size > 0) j["embedding_size"] = embedding_size;
  if (share_layers) j["dserve"] = {{"share_layers", true}};
  auto config = ModelConfig::FromJson(j);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// Encoder + heads with every weight a leaf that requires grad.
struct TinyModel {
  ModelConfig config;
  std::unique_ptr<DebertaEncoder> encoder;
  MlmHead head;
  SopHead sop;

  std::vector<torch::Tensor> Parameters() {
    std::vector<torch::Tensor> params;
    for (auto& [name, t] : encoder->weights().Named(config)) params.push_back(t);
    for (auto& t : head.Parameters()) params.push_back(t);
    for (auto& t : sop.Parameters()) params.push_back(t);
    return params;
  }
};

TinyModel MakeModel(const ModelConfig& config, uint64_t seed = 0,
                    EncoderWeights* weights_in = nullptr) {
  torch::manual_seed(seed);
  TinyModel m;
  m.config = config;
  EncoderWeights weights = weights_in ? *weights_in : EncoderWeights::Init(config, torch::kFloat, torch::kCPU);
  for (auto& [name, t] : weights.Named(config)) t.requires_grad_(true);
  auto encoder = DebertaEncoder::Create(config, weights, DebertaEncoder::Options{/*precompute=*/false});
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  m.encoder = *std::move(encoder);
  auto head = MlmHead::Init(config, torch::kFloat, torch::kCPU);
  EXPECT_TRUE(head.ok()) << head.status();
  m.head = *head;
  auto sop = SopHead::Init(config, torch::kFloat, torch::kCPU);
  EXPECT_TRUE(sop.ok()) << sop.status();
  m.sop = *sop;
  for (auto& t : m.head.Parameters()) t.requires_grad_(true);
  for (auto& t : m.sop.Parameters()) t.requires_grad_(true);
  return m;
}

// A masked batch of random rows; the second row is shorter (padding).
MlmBatch RandomBatch(uint64_t seed, int64_t length = 24) {
  std::mt19937_64 rng(seed);
  std::vector<MlmExample> examples;
  for (int r = 0; r < 3; ++r) {
    MlmExample ex;
    const int64_t n = r == 1 ? length - 8 : length;
    ex.input_ids.push_back(kCls);
    for (int64_t i = 0; i < n - 2; ++i) ex.input_ids.push_back(4 + static_cast<int64_t>(rng() % 296));
    ex.input_ids.push_back(kSep);
    ex.token_type_ids.assign(ex.input_ids.size(), 0);
    ex.sop_label = r % 2;
    examples.push_back(ex);
  }
  std::vector<std::vector<int64_t>> rows;
  for (const auto& ex : examples) rows.push_back(ex.input_ids);
  const MaskedTokens masked = MaskTokens(rows, kSpecials, kMask, kVocab, MaskingOptions{}, rng);
  return CollateMlmBatch(examples, masked, kPad, torch::kCPU);
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// Issue 18, defect 5: training applies HF DebertaV2's pos_dropout (on the
// normalised relative table, before the position projections, per layer)
// and ConvLayer's dropout (on the masked conv output, before its
// activation). Dropping everything there must equal a model whose dropped
// tensor is zero: relative LayerNorm weight and bias 0 (table 0), conv
// weight and bias 0 (conv output 0). Before the fix neither dropout existed.
TEST(EncoderDropoutTest, PositionAndConvDropoutSitWhereHuggingFaceHasThem) {
  nlohmann::json j = TinyConfig().ToJson();
  j["conv_kernel_size"] = 3;
  j["conv_act"] = "gelu";
  auto config = ModelConfig::FromJson(j);
  ASSERT_TRUE(config.ok()) << config.status();
  auto make = [&](const std::function<void(EncoderWeights&)>& edit) {
    torch::manual_seed(11);
    EncoderWeights w = EncoderWeights::Init(*config, torch::kFloat, torch::kCPU);
    edit(w);
    auto encoder = DebertaEncoder::Create(*config, w, DebertaEncoder::Options{/*precompute=*/false});
    EXPECT_TRUE(encoder.ok()) << encoder.status();
    return *std::move(encoder);
  };
  torch::NoGradGuard no_grad;
  const MlmBatch batch = RandomBatch(5);
  EncoderInput input{batch.input_ids, batch.attention_mask, torch::Tensor()};
  auto plain = make([](EncoderWeights&) {});
  auto no_table = make([](EncoderWeights& w) {
    w.rel_norm.weight.zero_();
    w.rel_norm.bias.zero_();
  });
  auto no_conv = make([](EncoderWeights& w) {
    w.conv->weight.zero_();
    w.conv->bias.zero_();
  });
  Dropout position_only;
  position_only.hidden = 0;
  position_only.position = 1.0;
  position_only.conv = 0;
  Dropout conv_only;
  conv_only.conv = 1.0;
  conv_only.position = 0;
  const torch::Tensor base = plain->Forward(input, nullptr, {});
  EXPECT_GT(MaxDiff(base, no_table->Forward(input, nullptr, {})), 1e-3);  // the table matters
  EXPECT_GT(MaxDiff(base, no_conv->Forward(input, nullptr, {})), 1e-3);   // the conv matters
  EXPECT_LT(MaxDiff(plain->Forward(input, nullptr, position_only), no_table->Forward(input, nullptr, {})), 1e-5);
  EXPECT_LT(MaxDiff(plain->Forward(input, nullptr, conv_only), no_conv->Forward(input, nullptr, {})), 1e-5);
  // Training dropout follows hidden_dropout_prob for both, as in HF.
  Dropout training{0.1, 0.1};
  EXPECT_DOUBLE_EQ(training.position_p(), 0.1);
  EXPECT_DOUBLE_EQ(training.conv_p(), 0.1);
  // Inference (no dropout) is untouched: the same as a precomputed encoder.
  torch::manual_seed(11);
  EncoderWeights w = EncoderWeights::Init(*config, torch::kFloat, torch::kCPU);
  auto precomputed = DebertaEncoder::Create(*config, w, DebertaEncoder::Options{});
  ASSERT_TRUE(precomputed.ok());
  EXPECT_LT(MaxDiff(base, (*precomputed)->Forward(input, nullptr, {})), 1e-5);
}

TEST(MlmForwardTest, EmdShapesAndThatNoEmdChangesTheComputation) {
  TinyModel m = MakeModel(TinyConfig());
  const MlmBatch batch = RandomBatch(1);
  const int64_t B = batch.input_ids.size(0), L = batch.input_ids.size(1);
  const int64_t M = (batch.labels >= 0).sum().item<int64_t>();
  ASSERT_GT(M, 0);

  const MlmOutput emd = MlmForward(*m.encoder, m.head, nullptr, batch, /*use_emd=*/true);
  const MlmOutput plain = MlmForward(*m.encoder, m.head, nullptr, batch, /*use_emd=*/false);
  EXPECT_TRUE(emd.used_emd);
  EXPECT_FALSE(plain.used_emd);
  EXPECT_EQ(emd.decoder_states.sizes(), (std::vector<int64_t>{B, L, 32}));
  EXPECT_EQ(emd.last_hidden_state.sizes(), (std::vector<int64_t>{B, L, 32}));
  EXPECT_EQ(emd.logits.sizes(), (std::vector<int64_t>{M, kVocab}));
  EXPECT_EQ(plain.logits.sizes(), (std::vector<int64_t>{M, kVocab}));
  EXPECT_EQ(emd.count, M);
  EXPECT_EQ(emd.loss.dim(), 0);
  EXPECT_FALSE(emd.sop_loss.defined());

  // Same encoder pass, different decoder: q₂ ≠ H_N, so logits and loss differ.
  EXPECT_LT(MaxDiff(emd.last_hidden_state, plain.last_hidden_state), 1e-6);
  EXPECT_LT(MaxDiff(plain.decoder_states, plain.last_hidden_state), 1e-7);
  EXPECT_GT(MaxDiff(emd.decoder_states, emd.last_hidden_state), 1e-2);
  EXPECT_GT(MaxDiff(emd.logits, plain.logits), 1e-4);
  EXPECT_NE(emd.loss.item<double>(), plain.loss.item<double>());

  // q₂ is exactly REFERENCE §9: KV = H₁ (N = 2), q₀ = E_pos[0..L) + H₁,
  // twice through the last layer (index 1).
  std::vector<torch::Tensor> hs;
  m.encoder->Forward(EncoderInput{batch.input_ids, batch.attention_mask, {}}, &hs);
  ASSERT_EQ(hs.size(), 3u);
  const auto z = m.encoder->weights().embeddings.position.narrow(0, 0, L);
  auto q = hs[1] + z.unsqueeze(0);
  q = m.encoder->LayerForward(1, hs[1], q, batch.attention_mask);
  q = m.encoder->LayerForward(1, hs[1], q, batch.attention_mask);
  EXPECT_LT(MaxDiff(q, emd.decoder_states), 1e-6);
  // Logits are the head applied to the targets' states only, row-major.
  const auto index = (batch.labels.reshape({-1}) >= 0).nonzero().squeeze(1);
  const auto expected = m.head.Forward(q.reshape({B * L, 32}).index_select(0, index),
                                       m.encoder->weights().embeddings.word);
  EXPECT_LT(MaxDiff(expected, emd.logits), 1e-5);
  const auto targets = batch.labels.reshape({-1}).index_select(0, index);
  EXPECT_NEAR(torch::nn::functional::cross_entropy(expected, targets).item<double>(),
              emd.mlm_loss.item<double>(), 1e-5);
  EXPECT_EQ(emd.correct, expected.argmax(-1).eq(targets).sum().item<int64_t>());
}

TEST(MlmForwardTest, GradientReachesPositionEmbeddingsOnlyWithEmd) {
  for (bool use_emd : {true, false}) {
    TinyModel m = MakeModel(TinyConfig(), 3);
    const MlmBatch batch = RandomBatch(2);
    MlmForward(*m.encoder, m.head, nullptr, batch, use_emd).loss.backward();
    const auto& w = m.encoder->weights();
    const auto& pos_grad = w.embeddings.position.grad();
    const double pos = pos_grad.defined() ? pos_grad.abs().sum().item<double>() : 0.0;
    if (use_emd) {
      EXPECT_GT(pos, 0.0) << "EMD on: no gradient into embeddings.position";
      // Only rows 0..L-1 are used.
      EXPECT_EQ(pos_grad.narrow(0, batch.input_ids.size(1), 64 - batch.input_ids.size(1)).abs().sum().item<double>(), 0.0);
    } else {
      EXPECT_EQ(pos, 0.0) << "EMD off: position_biased_input=false must leave E_pos unused";
    }
    // The last layer (used by both paths, and twice more by the EMD), layer 0,
    // the tied word embeddings and the head all get gradient.
    for (const torch::Tensor* t : std::vector<const torch::Tensor*>{&w.layers[1].attention.query.weight, &w.layers[1].output.weight,
                          &w.layers[0].attention.key.weight, &w.embeddings.word, &m.head.dense.weight,
                          &m.head.bias}) {
      ASSERT_TRUE(t->grad().defined());
      EXPECT_GT(t->grad().abs().sum().item<double>(), 0.0);
    }
  }
}

TEST(MlmForwardTest, EmdWithSharedLayersRunsLayerZero) {
  const ModelConfig shared = TinyConfig(false, /*share_layers=*/true);
  TinyModel s = MakeModel(shared, 5);
  ASSERT_EQ(s.encoder->weights().layers.size(), 1u);
  // The same weights unshared, with layer 0 copied into both slots, must
  // give the same encoder and EMD outputs; a different layer 1 must not.
  EncoderWeights copy = s.encoder->weights();
  copy.layers.push_back(copy.layers[0]);
  const ModelConfig unshared = TinyConfig();
  TinyModel u = MakeModel(unshared, 5, &copy);
  const MlmBatch batch = RandomBatch(4);
  const MlmOutput a = MlmForward(*s.encoder, s.head, nullptr, batch, true);
  u.head = s.head;
  const MlmOutput b = MlmForward(*u.encoder, u.head, nullptr, batch, true);
  EXPECT_LT(MaxDiff(a.decoder_states, b.decoder_states), 1e-6);
  EXPECT_LT(MaxDiff(a.logits, b.logits), 1e-5);

  EncoderWeights other = EncoderWeights::Init(unshared, torch::kFloat, torch::kCPU);
  other.layers[0] = copy.layers[0];
  TinyModel d = MakeModel(unshared, 5, &other);
  d.head = s.head;
  const MlmOutput c = MlmForward(*d.encoder, d.head, nullptr, batch, true);
  EXPECT_GT(MaxDiff(a.decoder_states, c.decoder_states), 1e-2);

  a.loss.backward();
  EXPECT_GT(s.encoder->weights().layers[0].attention.query.weight.grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(s.encoder->weights().embeddings.position.grad().abs().sum().item<double>(), 0.0);
}

TEST(MlmForwardTest, AbsolutePositionsUseTheLastLayerDirectly) {
  TinyModel m = MakeModel(TinyConfig(/*position_biased_input=*/true), 6);
  const MlmBatch batch = RandomBatch(5);
  const MlmOutput out = MlmForward(*m.encoder, m.head, nullptr, batch, /*use_emd=*/true);
  EXPECT_FALSE(out.used_emd);
  EXPECT_LT(MaxDiff(out.decoder_states, out.last_hidden_state), 1e-7);
}

TEST(MlmForwardTest, FactorizedEmbeddingsProjectPositionsAndLegacyHeadMapsToE) {
  TinyModel m = MakeModel(TinyConfig(false, false, /*embedding_size=*/16), 8);
  EXPECT_EQ(m.head.dense.weight.sizes(), (std::vector<int64_t>{16, 32}));
  const MlmBatch batch = RandomBatch(6);
  const MlmOutput out = MlmForward(*m.encoder, m.head, nullptr, batch, true);
  EXPECT_EQ(out.logits.size(1), kVocab);
  out.loss.backward();
  EXPECT_GT(m.encoder->weights().embeddings.projection.grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(m.encoder->weights().embeddings.position.grad().abs().sum().item<double>(), 0.0);
  // The non-legacy layout multiplies by E_wordᵀ directly: E must equal H.
  EXPECT_FALSE(MlmHead::Init(TinyConfig(false, false, 16, /*legacy=*/false), torch::kFloat, torch::kCPU).ok());
}

TEST(MlmForwardTest, NoTargetsGivesAZeroLossThatStillBackpropagates) {
  TinyModel m = MakeModel(TinyConfig(), 9);
  MlmBatch batch = RandomBatch(7);
  batch.labels = torch::full_like(batch.labels, kIgnoreLabel);
  const MlmOutput out = MlmForward(*m.encoder, m.head, nullptr, batch, true);
  EXPECT_EQ(out.count, 0);
  EXPECT_EQ(out.loss.item<double>(), 0.0);
  out.loss.backward();  // must not throw
}

TEST(MlmForwardTest, MissingPositionTableIsAnErrorAndCanBeInitialised) {
  const ModelConfig config = TinyConfig();
  EncoderWeights weights = EncoderWeights::Init(config, torch::kFloat, torch::kCPU);
  weights.embeddings.position = torch::Tensor();
  EncoderWeights fixed = weights;
  TinyModel m = MakeModel(config, 1, &weights);
  EXPECT_THROW(MlmForward(*m.encoder, m.head, nullptr, RandomBatch(1), true), c10::Error);
  EXPECT_TRUE(InitEmdPositionsIfMissing(config, &fixed));
  EXPECT_FALSE(InitEmdPositionsIfMissing(config, &fixed));
  EXPECT_EQ(fixed.embeddings.position.sizes(), (std::vector<int64_t>{64, 32}));
}

// -------------------------------------------------------------- head names --

std::vector<std::string> Names(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& [name, t] : named) names.push_back(name);
  return names;
}

TEST(MlmHeadTest, NamesAndShapesMatchHuggingFace) {
  {
    // LegacyDebertaV2OnlyMLMHead: cls.predictions.{transform.{dense,LayerNorm},bias,decoder}.
    const ModelConfig c = TinyConfig(false, false, 16, /*legacy=*/true);
    auto head = MlmHead::Init(c, torch::kFloat, torch::kCPU);
    ASSERT_TRUE(head.ok()) << head.status();
    const auto word = torch::zeros({kVocab, 16});
    std::vector<std::pair<std::string, torch::Tensor>> named;
    head->AppendNamed(word, &named);
    EXPECT_EQ(Names(named), (std::vector<std::string>{
                                "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
                                "cls.predictions.transform.LayerNorm.weight",
                                "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias",
                                "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"}));
    EXPECT_EQ(named[0].second.sizes(), (std::vector<int64_t>{16, 32}));  // hidden -> embedding_size
    EXPECT_EQ(named[2].second.sizes(), (std::vector<int64_t>{16}));
    EXPECT_EQ(named[4].second.sizes(), (std::vector<int64_t>{kVocab}));
    EXPECT_TRUE(named[5].second.is_same(word));  // tied
    EXPECT_TRUE(named[6].second.is_same(named[4].second));
  }
  {
    // DebertaV2OnlyMLMHead: lm_predictions.lm_head.{dense,LayerNorm,bias}.
    const ModelConfig c = TinyConfig(false, false, 0, /*legacy=*/false);
    auto head = MlmHead::Init(c, torch::kFloat, torch::kCPU);
    ASSERT_TRUE(head.ok()) << head.status();
    std::vector<std::pair<std::string, torch::Tensor>> named;
    head->AppendNamed(torch::zeros({kVocab, 32}), &named);
    EXPECT_EQ(Names(named), (std::vector<std::string>{
                                "lm_predictions.lm_head.dense.weight", "lm_predictions.lm_head.dense.bias",
                                "lm_predictions.lm_head.LayerNorm.weight",
                                "lm_predictions.lm_head.LayerNorm.bias", "lm_predictions.lm_head.bias"}));
    EXPECT_EQ(named[0].second.sizes(), (std::vector<int64_t>{32, 32}));
  }
  {
    const ModelConfig c = TinyConfig();
    auto sop = SopHead::Init(c, torch::kFloat, torch::kCPU);
    ASSERT_TRUE(sop.ok());
    std::vector<std::pair<std::string, torch::Tensor>> named;
    sop->AppendNamed(&named);
    EXPECT_EQ(Names(named), (std::vector<std::string>{"dserve_sop.pooler.dense.weight", "dserve_sop.pooler.dense.bias",
                                                      "dserve_sop.classifier.weight", "dserve_sop.classifier.bias"}));
    EXPECT_EQ(named[2].second.sizes(), (std::vector<int64_t>{2, 32}));
  }
}

// Writes `named` (float32) to a safetensors file and opens it as a store.
std::unique_ptr<WeightStore> Store(const std::string& test,
                                   const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  const fs::path dir = fs::path(DSERVE_BINARY_DIR) / "mlm_test" / test;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<torch::Tensor> keep;
  std::vector<TensorToWrite> tensors;
  for (const auto& [name, t] : named) {
    keep.push_back(t.detach().to(torch::kFloat).contiguous());
    tensors.push_back({name, DType::kF32, keep.back().sizes().vec(), keep.back().data_ptr()});
  }
  const std::string path = (dir / "model.safetensors").string();
  EXPECT_TRUE(WriteSafetensors(path, tensors).ok());
  auto store = WeightStore::Open({path}, torch::kFloat, torch::kCPU);
  EXPECT_TRUE(store.ok()) << store.status();
  return *std::move(store);
}

TEST(MlmHeadTest, LoadRoundTripsBothLayoutsAndReportsMissingTensors) {
  const ModelConfig legacy = TinyConfig();
  const ModelConfig current = TinyConfig(false, false, 0, false);
  torch::manual_seed(3);
  auto head = *MlmHead::Init(legacy, torch::kFloat, torch::kCPU);
  head.bias = torch::randn({kVocab});
  head.norm.weight = torch::randn({32});
  const auto word = torch::randn({kVocab, 32});
  const auto hidden = torch::randn({5, 32});
  const auto want = head.Forward(hidden, word);

  std::vector<std::pair<std::string, torch::Tensor>> named;
  head.AppendNamed(word, &named);
  {
    auto store = Store("legacy", named);
    std::string report;
    auto loaded = MlmHead::Load(legacy, *store, false, &report);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_LT(MaxDiff(loaded->Forward(hidden, word), want), 1e-6);
    EXPECT_EQ(report, "loaded cls.predictions.*");
    EXPECT_TRUE(store->Unused().empty()) << store->Unused()[0];  // tied copies count as used
  }
  {
    // A Hub v3 file carries lm_predictions.lm_head.*, its config legacy = true.
    MlmHead renamed = head;
    renamed.legacy = false;
    std::vector<std::pair<std::string, torch::Tensor>> v3;
    renamed.AppendNamed(word, &v3);
    auto store = Store("v3", v3);
    std::string report;
    auto loaded = MlmHead::Load(legacy, *store, false, &report);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->legacy);
    EXPECT_LT(MaxDiff(loaded->Forward(hidden, word), want), 1e-6);
    EXPECT_NE(report.find("other layout"), std::string::npos) << report;
    auto direct = MlmHead::Load(current, *store);
    ASSERT_TRUE(direct.ok()) << direct.status();
    EXPECT_FALSE(direct->legacy);
    EXPECT_LT(MaxDiff(direct->Forward(hidden, word), want), 1e-6);
  }
  {
    // Nothing there: NotFound unless asked to initialise.
    auto store = Store("none", {{"deberta.embeddings.word_embeddings.weight", word}});
    auto missing = MlmHead::Load(legacy, *store);
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(missing.status().message().find("cls.predictions"), std::string::npos) << missing.status();
    std::string report;
    auto init = MlmHead::Load(legacy, *store, true, &report);
    ASSERT_TRUE(init.ok()) << init.status();
    EXPECT_NE(report.find("initialised"), std::string::npos);
    auto sop_missing = SopHead::Load(legacy, *store);
    EXPECT_FALSE(sop_missing.ok());
    EXPECT_TRUE(SopHead::Load(legacy, *store, true).ok());
  }
  {
    // Partly present is an error even with init_if_missing.
    auto partial = named;
    partial.erase(partial.begin() + 2);  // LayerNorm.weight
    auto store = Store("partial", partial);
    auto loaded = MlmHead::Load(legacy, *store, true);
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.status().message().find("cls.predictions.transform.LayerNorm.weight"), std::string::npos)
        << loaded.status();
  }
}

// ---------------------------------------------------------------- examples --

TEST(BuildMlmExamplesTest, PacksConsecutiveSentencesWithinMaxLength) {
  std::mt19937_64 rng(17);
  std::vector<std::vector<std::vector<int64_t>>> docs;
  int64_t next = 4;
  for (int d = 0; d < 40; ++d) {
    std::vector<std::vector<int64_t>> doc;
    for (int s = 0, n = 1 + static_cast<int>(rng() % 8); s < n; ++s) {
      std::vector<int64_t> sentence;
      for (int i = 0, len = static_cast<int>(rng() % 20); i < len; ++i) sentence.push_back(4 + (next++ % 296));
      doc.push_back(sentence);
    }
    docs.push_back(doc);
  }
  docs.push_back({std::vector<int64_t>(70, 9)});  // longer than a row: cut
  // Without SOP the rows, in order, give back every token in order.
  std::vector<int64_t> all, packed;
  for (const auto& doc : docs)
    for (const auto& s : doc) all.insert(all.end(), s.begin(), s.end());
  const auto plain = BuildMlmExamples(docs, 32, false, kCls, kSep, rng);
  ASSERT_FALSE(plain.empty());
  for (const auto& ex : plain) {
    ASSERT_GE(ex.input_ids.size(), 3u);
    EXPECT_LE(ex.input_ids.size(), 32u);
    EXPECT_EQ(ex.input_ids.front(), kCls);
    EXPECT_EQ(ex.input_ids.back(), kSep);
    EXPECT_EQ(std::count(ex.input_ids.begin(), ex.input_ids.end(), kSep), 1);
    EXPECT_EQ(ex.token_type_ids, std::vector<int64_t>(ex.input_ids.size(), 0));
    EXPECT_EQ(ex.sop_label, kIgnoreLabel);
    packed.insert(packed.end(), ex.input_ids.begin() + 1, ex.input_ids.end() - 1);
  }
  EXPECT_EQ(packed, all);
  // Packing fills rows: fewer rows than sentences.
  size_t sentences = 0;
  for (const auto& doc : docs) sentences += doc.size();
  EXPECT_LT(plain.size(), sentences);

  // With SOP: [CLS] A [SEP] B [SEP], A/B consecutive; un-swapping gives the
  // same token stream; about half swapped.
  std::mt19937_64 rng2(18), rng3(18);
  const auto sop = BuildMlmExamples(docs, 32, true, kCls, kSep, rng2);
  packed.clear();
  int swapped = 0;
  for (const auto& ex : sop) {
    EXPECT_LE(ex.input_ids.size(), 32u);
    ASSERT_EQ(std::count(ex.input_ids.begin(), ex.input_ids.end(), kSep), 2);
    const auto sep = std::find(ex.input_ids.begin(), ex.input_ids.end(), kSep) - ex.input_ids.begin();
    std::vector<int64_t> first(ex.input_ids.begin() + 1, ex.input_ids.begin() + sep);
    std::vector<int64_t> second(ex.input_ids.begin() + sep + 1, ex.input_ids.end() - 1);
    EXPECT_FALSE(first.empty());
    EXPECT_FALSE(second.empty());
    for (size_t i = 0; i < ex.token_type_ids.size(); ++i)
      EXPECT_EQ(ex.token_type_ids[i], static_cast<int64_t>(i) > sep ? 1 : 0);
    ASSERT_TRUE(ex.sop_label == 0 || ex.sop_label == 1);
    swapped += ex.sop_label;
    if (ex.sop_label == 1) std::swap(first, second);
    packed.insert(packed.end(), first.begin(), first.end());
    packed.insert(packed.end(), second.begin(), second.end());
  }
  EXPECT_EQ(packed, all);
  EXPECT_NEAR(static_cast<double>(swapped) / sop.size(), 0.5, Tolerance(0.5, sop.size()));
  const auto again = BuildMlmExamples(docs, 32, true, kCls, kSep, rng3);
  ASSERT_EQ(again.size(), sop.size());
  for (size_t i = 0; i < sop.size(); ++i) EXPECT_EQ(again[i].input_ids, sop[i].input_ids);
}

TEST(BuildMlmExamplesTest, CollatePadsAndKeepsLabels) {
  std::vector<MlmExample> examples = {{{kCls, 5, 6, kSep}, {0, 0, 0, 0}, 1}, {{kCls, 7, kSep}, {0, 0, 1}, 0}};
  MaskedTokens masked;
  masked.input_ids = {{kCls, kMask, 6, kSep}, {kCls, 7, kSep}};
  masked.labels = {{kIgnoreLabel, 5, kIgnoreLabel, kIgnoreLabel}, {kIgnoreLabel, 7, kIgnoreLabel}};
  const MlmBatch b = CollateMlmBatch(examples, masked, kPad, torch::kCPU);
  EXPECT_EQ(b.input_ids.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(b.input_ids[1][3].item<int64_t>(), kPad);
  EXPECT_EQ(b.attention_mask.sum().item<int64_t>(), 7);
  EXPECT_EQ(b.labels[0][1].item<int64_t>(), 5);
  EXPECT_EQ(b.labels[1][3].item<int64_t>(), kIgnoreLabel);
  EXPECT_EQ(b.token_type_ids[1][2].item<int64_t>(), 1);
  ASSERT_TRUE(b.sop_labels.defined());
  EXPECT_EQ(b.sop_labels[0].item<int64_t>(), 1);
}

// ---------------------------------------------------------------- learning --

// A repetitive corpus: 12 fixed "sentences" of 6..11 toy-vocabulary ids,
// each document a random sequence of them.
std::vector<std::vector<std::vector<int64_t>>> SyntheticCorpus(int documents, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> sentences;
  for (int s = 0; s < 12; ++s) {
    std::vector<int64_t> sentence;
    for (int i = 0, len = 6 + static_cast<int>(rng() % 6); i < len; ++i)
      sentence.push_back(4 + static_cast<int64_t>(rng() % 296));
    sentences.push_back(sentence);
  }
  std::vector<std::vector<std::vector<int64_t>>> docs;
  for (int d = 0; d < documents; ++d) {
    std::vector<std::vector<int64_t>> doc;
    for (int s = 0; s < 6; ++s) doc.push_back(sentences[rng() % sentences.size()]);
    docs.push_back(doc);
  }
  return docs;
}

// Trains with AdamW; returns the masked-token accuracy on freshly masked
// batches afterwards, and the SOP accuracy when `sop`.
struct TrainResult {
  double mlm_accuracy = 0;
  double sop_accuracy = 0;
  double first_sop_loss = 0, last_sop_loss = 0;
  double first_loss = 0, last_loss = 0;
};

TrainResult Train(const std::vector<std::vector<std::vector<int64_t>>>& docs, bool sop, int steps,
                  bool use_emd) {
  // HF's 0.02 init leaves a 32-wide model on the unigram plateau for a
  // seed-dependent number of steps; 0.1 learns within 100 steps for every
  // seed tried (1-4: 0.966-0.982 masked accuracy).
  TinyModel m = MakeModel(TinyConfig(false, false, 0, true, /*initializer_range=*/0.1), 21);
  std::mt19937_64 rng(2024);
  const auto examples = BuildMlmExamples(docs, 32, sop, kCls, kSep, rng);
  EXPECT_GE(examples.size(), 64u);
  torch::optim::AdamW optimizer(m.Parameters(), torch::optim::AdamWOptions(5e-3).weight_decay(0.01));
  const int batch_size = 32;
  TrainResult result;
  std::vector<double> losses, sop_losses;
  auto batch_at = [&](int step) {
    std::vector<MlmExample> chunk;
    for (int i = 0; i < batch_size; ++i) chunk.push_back(examples[(step * batch_size + i) % examples.size()]);
    std::vector<std::vector<int64_t>> rows;
    for (const auto& ex : chunk) rows.push_back(ex.input_ids);
    return CollateMlmBatch(chunk, MaskTokens(rows, kSpecials, kMask, kVocab, MaskingOptions{}, rng), kPad,
                           torch::kCPU);
  };
  for (int step = 0; step < steps; ++step) {
    const MlmBatch batch = batch_at(step);
    optimizer.zero_grad();
    const MlmOutput out = MlmForward(*m.encoder, m.head, sop ? &m.sop : nullptr, batch, use_emd);
    out.loss.backward();
    optimizer.step();
    losses.push_back(out.mlm_loss.item<double>());
    if (sop) sop_losses.push_back(out.sop_loss.item<double>());
  }
  auto mean = [](const std::vector<double>& v, size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += v[i];
    return s / (to - from);
  };
  result.first_loss = mean(losses, 0, 10);
  result.last_loss = mean(losses, losses.size() - 10, losses.size());
  if (sop) {
    result.first_sop_loss = mean(sop_losses, 0, 10);
    result.last_sop_loss = mean(sop_losses, sop_losses.size() - 10, sop_losses.size());
  }
  torch::NoGradGuard no_grad;
  int64_t correct = 0, count = 0, sop_correct = 0, sop_count = 0;
  for (int k = 0; k < 8; ++k) {
    const MlmOutput out = MlmForward(*m.encoder, m.head, sop ? &m.sop : nullptr, batch_at(steps + k), use_emd);
    correct += out.correct;
    count += out.count;
    sop_correct += out.sop_correct;
    sop_count += out.sop_count;
  }
  result.mlm_accuracy = static_cast<double>(correct) / count;
  if (sop) result.sop_accuracy = static_cast<double>(sop_correct) / sop_count;
  return result;
}

TEST(MlmTrainingTest, TinyModelLearnsMaskedTokens) {
  const auto docs = SyntheticCorpus(200, 31);
  const TrainResult r = Train(docs, /*sop=*/false, /*steps=*/100, /*use_emd=*/true);
  std::printf("tiny MLM (EMD, 100 steps): loss %.3f -> %.3f, masked-token accuracy %.3f (chance %.4f)\n",
              r.first_loss, r.last_loss, r.mlm_accuracy, 1.0 / 296);
  EXPECT_LT(r.last_loss, r.first_loss - 2.0);
  EXPECT_GE(r.mlm_accuracy, 0.6);  // chance 1/296; the corpus's unigram baseline ~0.03
}

TEST(MlmTrainingTest, SopLossDecreasesOnAnOrderingTask) {
  // Six fixed two-sentence documents (ids 4.. then 150..), trained jointly
  // with MLM. (With random tokens in the two ranges, MLM's noise drowns the
  // SOP signal in 200 steps; SOP alone learns that too.)
  std::mt19937_64 rng(41);
  std::vector<std::vector<std::vector<int64_t>>> docs;
  for (int d = 0; d < 400; ++d) {
    std::vector<int64_t> a, b;
    const int64_t k = static_cast<int64_t>(rng() % 6);
    for (int i = 0; i < 8; ++i) {
      a.push_back(4 + k * 8 + i);
      b.push_back(150 + k * 8 + i);
    }
    docs.push_back({a, b});
  }
  const TrainResult r = Train(docs, /*sop=*/true, /*steps=*/60, /*use_emd=*/true);
  std::printf("tiny SOP (60 steps): sop loss %.3f -> %.3f, sop accuracy %.3f\n", r.first_sop_loss,
              r.last_sop_loss, r.sop_accuracy);
  EXPECT_LT(r.last_sop_loss, r.first_sop_loss - 0.4);
  EXPECT_GE(r.sop_accuracy, 0.9);
}

}  // namespace
}  // namespace dserve
