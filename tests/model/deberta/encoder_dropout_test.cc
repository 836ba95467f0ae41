// Training-time dropout of the encoder: off by default (inference outputs
// are deterministic), on only when asked, and each site is reached.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/checkpoint/checkpoint_dir.h"
#include "model/deberta/encoder.h"
#include "model/deberta/weights.h"

namespace dserve {
namespace {

std::unique_ptr<DebertaEncoder> GoldenEncoder() {
  const std::string dir = std::string(DSERVE_SHARED_DIR) + "/goldens/model/cls_factorized";
  auto files = ResolveCheckpoint(dir);
  EXPECT_TRUE(files.ok()) << files.status();
  auto config = ModelConfig::FromFile(files->config);
  auto store = WeightStore::Open(files->weights, torch::kFloat, torch::kCPU);
  EXPECT_TRUE(config.ok() && store.ok());
  auto weights = EncoderWeights::Load(*config, **store);
  EXPECT_TRUE(weights.ok()) << weights.status();
  auto encoder = DebertaEncoder::Create(*config, *std::move(weights), DebertaEncoder::Options{false});
  EXPECT_TRUE(encoder.ok()) << encoder.status();
  return encoder.ok() ? *std::move(encoder) : nullptr;
}

EncoderInput Input() {
  EncoderInput input;
  input.input_ids = torch::tensor({{1, 17, 250, 31, 99, 2}}, torch::kLong);
  input.attention_mask = torch::ones_like(input.input_ids);
  return input;
}

TEST(EncoderDropout, OffByDefaultAndOnWhenAsked) {
  auto encoder = GoldenEncoder();
  ASSERT_TRUE(encoder);
  torch::NoGradGuard no_grad;
  const auto a = encoder->Forward(Input());
  const auto b = encoder->Forward(Input());
  EXPECT_TRUE(torch::equal(a, b));
  torch::manual_seed(1);
  const auto hidden_only = encoder->Forward(Input(), nullptr, Dropout{0.3, 0.0});
  torch::manual_seed(1);
  const auto attention_only = encoder->Forward(Input(), nullptr, Dropout{0.0, 0.3});
  EXPECT_GT((hidden_only - a).abs().max().item<double>(), 1e-3);
  EXPECT_GT((attention_only - a).abs().max().item<double>(), 1e-3);
  // Same seed, same mask: dropout is reproducible (resume relies on it).
  torch::manual_seed(1);
  const auto again = encoder->Forward(Input(), nullptr, Dropout{0.3, 0.0});
  EXPECT_TRUE(torch::equal(hidden_only, again));
  // Zero probabilities are the inference path exactly.
  EXPECT_TRUE(torch::equal(encoder->Forward(Input(), nullptr, Dropout{0.0, 0.0}), a));
}

}  // namespace
}  // namespace dserve
