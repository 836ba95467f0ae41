// ALBERT's self-attention through DeBERTa's fused attention tile (issue 27,
// "ALBERT gets the same kernels"): AlbertEncoder with the tile against the
// same encoder with torch ops (matmul, + key bias, softmax, matmul: Hugging
// Face's expression), random weights, fp32 and bf16, at lengths that are
// not multiples of 16 or 32, with padded keys, and a fully padded row.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "model/albert/albert_encoder.h"
#include "model/checkpoint/model_config.h"
#include "model/deberta/cpu_kernels.h"

namespace dserve {
namespace {

// The golden ALBERT config (factorized embeddings 48 -> 96, 6 heads of 16),
// resized: `hidden`/`heads` set the head size, positions cover 200 tokens.
ModelConfig Config(int64_t hidden, int64_t heads) {
  const nlohmann::json c = {{"architectures", {"AlbertModel"}},
                            {"model_type", "albert"},
                            {"embedding_size", 48},
                            {"hidden_size", hidden},
                            {"num_attention_heads", heads},
                            {"intermediate_size", 2 * hidden},
                            {"num_hidden_layers", 2},
                            {"num_hidden_groups", 1},
                            {"inner_group_num", 1},
                            {"hidden_act", "gelu_new"},
                            {"max_position_embeddings", 200},
                            {"type_vocab_size", 2},
                            {"vocab_size", 300},
                            {"layer_norm_eps", 1e-12},
                            {"hidden_dropout_prob", 0},
                            {"attention_probs_dropout_prob", 0}};
  auto config = ModelConfig::FromJson(c);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

struct Case {
  int64_t hidden, heads, length;
  torch::ScalarType dtype;
};

class AlbertAttentionTile : public ::testing::TestWithParam<Case> {};

TEST_P(AlbertAttentionTile, MatchesTheTorchOpsExpression) {
  const Case c = GetParam();
  if (c.dtype == torch::kBFloat16 && !OneDnnBf16GemmAvailable()) {
    GTEST_SKIP() << "oneDNN has no bf16 GEMM on this CPU: the tile does not run in bf16 here";
  }
  torch::manual_seed(static_cast<uint64_t>(c.length * 31 + c.heads));
  const ModelConfig config = Config(c.hidden, c.heads);
  const AlbertWeights weights = AlbertWeights::Init(config, c.dtype, torch::kCPU);
  AlbertEncoder::Options on, off;
  off.attention_kernel = false;
  auto tiled = AlbertEncoder::Create(config, weights, on);
  auto plain = AlbertEncoder::Create(config, weights, off);
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  ASSERT_TRUE(plain.ok()) << plain.status();

  // Rows: full, padded to about a third, one real token, fully padded.
  const int64_t B = 4, L = c.length;
  EncoderInput in;
  in.input_ids = torch::randint(5, config.vocab_size, {B, L}, torch::kLong);
  in.attention_mask = torch::ones({B, L}, torch::kLong);
  in.attention_mask[1].narrow(0, std::max<int64_t>(1, L / 3), L - std::max<int64_t>(1, L / 3)).zero_();
  if (L > 1) in.attention_mask[2].narrow(0, 1, L - 1).zero_();
  in.attention_mask[3].zero_();
  in.token_type_ids = torch::randint(0, 2, {B, L}, torch::kLong);

  torch::InferenceMode guard;
  // The bf16 tile runs only on one thread (AlbertEncoder keeps torch ops for
  // bf16 with several, as DebertaEncoder does).
  const int threads = at::get_num_threads();
  if (c.dtype == torch::kBFloat16) at::set_num_threads(1);
  ASSERT_TRUE(FusedAttentionApplies(torch::zeros({1, 1, 3 * c.hidden}, c.dtype)));
  const torch::Tensor got = (*tiled)->Forward(in).to(torch::kFloat);
  const torch::Tensor want = (*plain)->Forward(in).to(torch::kFloat);
  at::set_num_threads(threads);

  // Every row with a real key, at every position (padded queries attend to
  // the real keys in both). The fully padded row has no key to attend to:
  // HF's expression averages all values, the tile writes zeros; nothing
  // serves such a row, so only its finiteness is checked.
  const double scale = want.narrow(0, 0, 3).abs().max().item<double>();
  const double tol = c.dtype == torch::kFloat ? 2e-5 : 4e-2;
  const double err = (got.narrow(0, 0, 3) - want.narrow(0, 0, 3)).abs().max().item<double>();
  EXPECT_LE(err, tol * scale) << "max |tile - torch ops| " << err << " of max " << scale;
  EXPECT_TRUE(torch::isfinite(got[3]).all().item<bool>());
  // Row 1's real tokens do not see its padded keys: changing their ids
  // leaves them as they were.
  if (L > 3) {
    EncoderInput changed = in;
    changed.input_ids = in.input_ids.clone();
    changed.input_ids[1].narrow(0, L - 1, 1).fill_(4);
    if (c.dtype == torch::kBFloat16) at::set_num_threads(1);
    const torch::Tensor again = (*tiled)->Forward(changed).to(torch::kFloat);
    at::set_num_threads(threads);
    const int64_t real = std::max<int64_t>(1, L / 3);
    EXPECT_TRUE(torch::equal(again[1].narrow(0, 0, real), got[1].narrow(0, 0, real)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    LengthsAndHeads, AlbertAttentionTile,
    ::testing::Values(Case{96, 6, 1, torch::kFloat}, Case{96, 6, 7, torch::kFloat}, Case{96, 6, 37, torch::kFloat},
                      Case{96, 6, 129, torch::kFloat}, Case{128, 2, 50, torch::kFloat},
                      Case{96, 6, 37, torch::kBFloat16}, Case{128, 2, 129, torch::kBFloat16}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return "h" + std::to_string(info.param.hidden) + "_heads" + std::to_string(info.param.heads) + "_L" +
             std::to_string(info.param.length) + (info.param.dtype == torch::kFloat ? "_fp32" : "_bf16");
    });

}  // namespace
}  // namespace dserve
