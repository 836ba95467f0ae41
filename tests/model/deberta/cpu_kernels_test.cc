// The fused CPU kernels (model/deberta/cpu_kernels.cc) against torch ops: the
// whole encoder with and without them on every relative-attention variant,
// padded batches, lengths inside and beyond the bucket range, fp32 and bf16;
// add + LayerNorm on its own.
#include <cstdio>
#include <iostream>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "model/checkpoint/model_config.h"
#include "model/deberta/encoder.h"
#include "model/deberta/cpu_kernels.h"
#include "model/util/cpu_info.h"

namespace dserve {
namespace {

struct Variant {
  const char* name;
  nlohmann::json overrides;
};

ModelConfig Config(const nlohmann::json& overrides) {
  nlohmann::json raw = {{"model_type", "deberta-v2"}, {"vocab_size", 300}, {"hidden_size", 64},
                        {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"intermediate_size", 128},
                        {"hidden_act", "gelu"}, {"max_position_embeddings", 512}, {"type_vocab_size", 0},
                        {"layer_norm_eps", 1e-7}, {"relative_attention", true}, {"max_relative_positions", -1},
                        {"position_buckets", 16}, {"pos_att_type", {"p2c", "c2p"}},
                        {"norm_rel_ebd", "layer_norm"}, {"share_att_key", true}, {"position_biased_input", false}};
  raw.update(overrides);
  auto config = ModelConfig::FromJson(raw);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// Three rows of `length` ids; rows 1 and 2 padded after 60% and 1 token.
EncoderInput Input(int64_t length) {
  torch::manual_seed(7);
  EncoderInput input;
  input.input_ids = torch::randint(3, 300, {3, length}, torch::kLong);
  input.attention_mask = torch::ones({3, length}, torch::kLong);
  input.attention_mask[1].narrow(0, length * 6 / 10, length - length * 6 / 10).zero_();
  input.attention_mask[2].narrow(0, 1, length - 1).zero_();
  return input;
}

torch::Tensor Encode(const ModelConfig& config, torch::ScalarType dtype, bool fused, const EncoderInput& input) {
  torch::manual_seed(3);
  auto weights = EncoderWeights::Init(config, torch::kFloat, torch::kCPU);
  if (dtype != torch::kFloat) {
    for (auto& layer : weights.layers) {
      for (LinearWeights* w : {&layer.attention.query, &layer.attention.key, &layer.attention.value,
                               &layer.attention.pos_key, &layer.attention.pos_query, &layer.attention.output,
                               &layer.intermediate, &layer.output}) {
        if (w->weight.defined()) w->weight = w->weight.to(dtype);
        if (w->bias.defined()) w->bias = w->bias.to(dtype);
      }
      for (NormWeights* n : {&layer.attention.output_norm, &layer.output_norm}) {
        n->weight = n->weight.to(dtype);
        n->bias = n->bias.to(dtype);
      }
    }
    weights.embeddings.word = weights.embeddings.word.to(dtype);
    if (weights.embeddings.position.defined()) weights.embeddings.position = weights.embeddings.position.to(dtype);
    weights.embeddings.norm.weight = weights.embeddings.norm.weight.to(dtype);
    weights.embeddings.norm.bias = weights.embeddings.norm.bias.to(dtype);
    if (weights.rel_embeddings.defined()) weights.rel_embeddings = weights.rel_embeddings.to(dtype);
    if (weights.rel_norm.weight.defined()) {
      weights.rel_norm.weight = weights.rel_norm.weight.to(dtype);
      weights.rel_norm.bias = weights.rel_norm.bias.to(dtype);
    }
  }
  DebertaEncoder::Options options;
  if (!fused) options.kernels = DebertaEncoder::Options::Kernels::None();
  auto encoder = DebertaEncoder::Create(config, std::move(weights), options);
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  torch::InferenceMode guard;
  return (*encoder)->Forward(input).to(torch::kFloat);
}

std::string Sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

// Largest |a - b| over the positions that are real tokens.
double MaxDiffOnValid(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
  auto keep = mask.to(torch::kBool).unsqueeze(-1).expand_as(a);
  return (a - b).abs().masked_select(keep).max().item<double>();
}

class FusedAttentionTest : public ::testing::TestWithParam<Variant> {};

TEST(FusedAttention, AppliesOnCpuInInference) {
  torch::InferenceMode guard;
  std::cout << "[ cpu      ] " << CpuPathNote() << "; oneDNN bf16 gemm "
            << (OneDnnBf16GemmAvailable() ? "available: fused bf16 attention" : "unimplemented: bf16 attention as torch ops")
            << std::endl;
#ifdef DSERVE_EXPECT_FUSED_ATTENTION
  EXPECT_TRUE(FusedAttentionApplies(torch::zeros({1, 2, 12})));
  // bf16 only where oneDNN has a bf16 GEMM for this CPU (AVX-512 and up).
  EXPECT_EQ(FusedAttentionApplies(torch::zeros({1, 2, 12}, torch::kBFloat16)), OneDnnBf16GemmAvailable());
  if (CpuHasFlag("avx512_bf16") || CpuHasFlag("amx_bf16")) EXPECT_TRUE(OneDnnBf16GemmAvailable());
  if (!CpuHasFlag("avx512f")) EXPECT_FALSE(OneDnnBf16GemmAvailable());
#endif
  EXPECT_FALSE(FusedAttentionApplies(torch::zeros({1, 2, 12}, torch::kHalf)));
}

TEST(FusedAttention, NotUsedWhenAutogradIsOn) {
  EXPECT_FALSE(FusedAttentionApplies(torch::zeros({1, 2, 12})));
}

TEST(FusedLinear, MatchesTorchLinear) {
  torch::InferenceMode guard;
  torch::manual_seed(9);
  const auto x = torch::randn({2, 5, 48}) * 2, w = torch::randn({72, 48}) * 0.3, b = torch::randn({72});
  ASSERT_TRUE(FusedLinearApplies(x, w, b));
  EXPECT_LT((FusedLinear(x, w, b) - torch::linear(x, w, b)).abs().max().item<double>(), 1e-4);
  EXPECT_LT((FusedLinear(x, w, torch::Tensor()) - torch::linear(x, w)).abs().max().item<double>(), 1e-4);
  EXPECT_FALSE(FusedLinearApplies(x.to(torch::kBFloat16), w, b));
}

TEST(FusedAddLayerNorm, MatchesTorchLayerNorm) {
  torch::InferenceMode guard;
  torch::manual_seed(5);
  const auto x = torch::randn({3, 7, 96}) * 3 + 1, r = torch::randn({3, 7, 96});
  const auto w = torch::randn({96}), b = torch::randn({96});
  const auto want = torch::layer_norm(x + r, {96}, w, b, 1e-7);
  EXPECT_LT((FusedAddLayerNorm(x, r, w, b, 1e-7) - want).abs().max().item<double>(), 1e-5);
  const auto alone = torch::layer_norm(x, {96}, w, b, 1e-7);
  EXPECT_LT((FusedAddLayerNorm(x, torch::Tensor(), w, b, 1e-7) - alone).abs().max().item<double>(), 1e-5);
  // bf16 in and out, float32 inside: within bf16 rounding of the fp32 result.
  const auto bx = x.to(torch::kBFloat16), br = r.to(torch::kBFloat16);
  const auto bw = w.to(torch::kBFloat16), bb = b.to(torch::kBFloat16);
  const auto exact = torch::layer_norm(bx.to(torch::kFloat) + br.to(torch::kFloat), {96}, bw.to(torch::kFloat),
                                       bb.to(torch::kFloat), 1e-7);
  const auto got = FusedAddLayerNorm(bx, br, bw, bb, 1e-7);
  ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
  EXPECT_LT(((got.to(torch::kFloat) - exact).abs() / (exact.abs() + 1e-3)).max().item<double>(), 1.0 / 128);
}

TEST_P(FusedAttentionTest, MatchesTorchPathInFp32) {
  const ModelConfig config = Config(GetParam().overrides);
  for (int64_t length : {5, 37, 70}) {  // 70 reaches past the 16-bucket range
    const EncoderInput input = Input(length);
    const auto fused = Encode(config, torch::kFloat, true, input);
    const auto plain = Encode(config, torch::kFloat, false, input);
    const double diff = MaxDiffOnValid(fused, plain, input.attention_mask);
    RecordProperty(std::string("max_abs_diff_L") + std::to_string(length), Sci(diff));
    EXPECT_LT(diff, 2e-5) << GetParam().name << " length " << length;
    EXPECT_GT(plain.abs().max().item<double>(), 0.1);  // a real output, not zeros
  }
}

TEST_P(FusedAttentionTest, Bf16IsNoWorseThanTorchPath) {
  // Both bf16 paths ride on this CPU's bf16 GEMMs (AMX, avx512_bf16 or fp32
  // emulation); say which, so a failure names the machine's path. Without
  // oneDNN's bf16 GEMM (AVX2-only CPUs) the encoder must fall back to torch's
  // attention (the fused add+LayerNorm still runs), within the same bounds.
  std::cout << "[ cpu      ] " << CpuPathNote() << "; fused bf16 attention "
            << (OneDnnBf16GemmAvailable() ? "on" : "off (oneDNN bf16 gemm unimplemented here)") << std::endl;
  RecordProperty("cpu", CpuPathNote());
  // The encoder uses the bf16 fused attention with one intra-op thread only.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { at::set_num_threads(n); }
  } restore{threads};
  const ModelConfig config = Config(GetParam().overrides);
  const EncoderInput input = Input(37);
  const auto reference = Encode(config, torch::kFloat, false, input);
  const double fused = MaxDiffOnValid(Encode(config, torch::kBFloat16, true, input), reference, input.attention_mask);
  const double plain = MaxDiffOnValid(Encode(config, torch::kBFloat16, false, input), reference, input.attention_mask);
  RecordProperty("bf16_fused_vs_fp32", Sci(fused));
  const double fused_vs_torch = MaxDiffOnValid(Encode(config, torch::kBFloat16, true, input),
                                               Encode(config, torch::kBFloat16, false, input), input.attention_mask);
  RecordProperty("bf16_fused_vs_torch", Sci(fused_vs_torch));
  RecordProperty("bf16_torch_vs_fp32", Sci(plain));
  EXPECT_LT(fused, 1.25 * plain + 1e-3) << GetParam().name;
  EXPECT_LT(fused, 0.25) << GetParam().name;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, FusedAttentionTest,
    ::testing::Values(Variant{"c2p_p2c_shared", nlohmann::json::object()},
                      Variant{"c2p_only", {{"pos_att_type", {"c2p"}}}},
                      Variant{"p2c_only", {{"pos_att_type", {"p2c"}}}},
                      Variant{"separate_position_projections", {{"share_att_key", false}}},
                      Variant{"no_buckets_clamped", {{"position_buckets", -1}, {"max_relative_positions", 24}}},
                      Variant{"no_relative_attention",
                              {{"relative_attention", false}, {"position_biased_input", true}, {"pos_att_type", nlohmann::json::array()}}}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace dserve
