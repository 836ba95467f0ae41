// The fused attention tile (model/deberta/cpu_kernels.cc: banded c2p / p2c
// through the Toeplitz relative index, vectorised gathers and softmax)
// against the plain LibTorch expression (float64) on random inputs: lengths
// 1, 7, 128, 129 and 512, random key masks and a fully padded row, c2p only,
// p2c only and both, bucketed and unbucketed (clamped or not) indexes, fp32
// and bf16; and the fused add + LayerNorm at widths that are not multiples
// of the vector length; and the tile's packed GEMM micro-kernels
// (model/deberta/tile_gemm.h) against torch.matmul at shapes that are not
// multiples of their 8 x 32 register tile.
#include <iostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/deberta/cpu_kernels.h"
#include "model/deberta/relative_position.h"
#include "model/deberta/tile_gemm.h"
#include "model/util/cpu_info.h"

namespace dserve {
namespace {

struct IndexKind {
  const char *name;
  int64_t buckets;      // position_buckets (<= 0: none)
  int64_t max_relative; // max_relative_positions
};

struct Terms {
  const char *name;
  bool c2p, p2c;
};

struct TileCase {
  IndexKind index;
  Terms terms;
};

constexpr int64_t kBatch = 3, kHeads = 2, kHeadSize = 24;

struct Problem {
  FusedAttentionInput in;
  torch::Tensor index; // [L, L] int64, absolute table rows
  torch::Tensor mask;  // [B, L] uint8
};

Problem MakeProblem(const IndexKind &kind, const Terms &terms, int64_t L,
                    torch::ScalarType dtype) {
  const int64_t span = kind.buckets > 0 ? kind.buckets : kind.max_relative;
  const RelativePositionMap map(kind.buckets, kind.max_relative, span);
  const RelativePositionMap::Table table = map.Build(L, L);
  torch::manual_seed(1000 + L);
  Problem p;
  p.in.heads = kHeads;
  p.in.head_size = kHeadSize;
  p.in.qkv =
      (torch::randn({kBatch, L, 3 * kHeads * kHeadSize}) * 0.5).to(dtype);
  if (terms.c2p)
    p.in.pos_key =
        (torch::randn({kHeads, 2 * span, kHeadSize}) * 0.5).to(dtype);
  if (terms.p2c)
    p.in.pos_query =
        (torch::randn({kHeads, 2 * span, kHeadSize}) * 0.5).to(dtype);
  std::vector<int32_t> by_rel;
  for (int64_t r : table.by_rel)
    by_rel.push_back(static_cast<int32_t>(r - table.min_row));
  p.in.relative_index = torch::tensor(by_rel, torch::kInt);
  p.in.min_row = table.min_row;
  p.in.rows = table.max_row - table.min_row + 1;
  p.index = torch::tensor(table.index, torch::kLong).view({L, L});
  // Row 0: about a fifth of the keys masked at random (key 0 kept); row 1:
  // padded after its first half; row 2: fully padded (uniform weights).
  p.mask = (torch::rand({kBatch, L}) > 0.2).to(torch::kByte);
  p.mask[0][0] = 1;
  p.mask[1].fill_(0);
  p.mask[1].narrow(0, 0, (L + 1) / 2).fill_(1);
  p.mask[2].fill_(0);
  p.in.key_mask = p.mask.contiguous();
  return p;
}

// Hugging Face's computation, in float64 from the (possibly bf16) inputs.
torch::Tensor Reference(const Problem &p) {
  const int64_t B = p.in.qkv.size(0), L = p.in.qkv.size(1), h = kHeads,
                d = kHeadSize;
  const auto qkv = p.in.qkv.to(torch::kDouble)
                       .view({B, L, 3, h, d})
                       .permute({2, 0, 3, 1, 4});
  const auto q = qkv[0], k = qkv[1], v = qkv[2]; // [B, h, L, d]
  auto scores = torch::matmul(q, k.transpose(-1, -2));
  const auto index = p.index.expand({B, h, L, L});
  if (p.in.pos_key.defined()) {
    const auto c2p = torch::matmul(
        q, p.in.pos_key.to(torch::kDouble).transpose(-1, -2).unsqueeze(0));
    scores = scores + torch::gather(c2p, -1, index);
  }
  if (p.in.pos_query.defined()) {
    const auto p2c = torch::matmul(
        k, p.in.pos_query.to(torch::kDouble).transpose(-1, -2).unsqueeze(0));
    scores = scores +
             torch::gather(p2c, -1, index.transpose(-1, -2)).transpose(-1, -2);
  }
  const auto keep = p.mask.to(torch::kDouble).view({B, 1, 1, L});
  scores = scores + (1.0 - keep) * -1.0e30;
  const auto probs = torch::softmax(scores, -1);
  return torch::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, L, h * d});
}

// The row-kernel sets this CPU runs (avx512, avx2, scalar): each is checked;
// the best one is restored afterwards.
std::vector<std::string> KernelIsas() {
  const std::string best = CpuKernelIsa();
  std::vector<std::string> isas;
  for (const char *isa : {"avx512", "avx2", "scalar"}) {
    if (SetCpuKernelIsa(isa))
      isas.push_back(isa);
  }
  SetCpuKernelIsa(best);
  return isas;
}

struct RestoreIsa {
  std::string isa = CpuKernelIsa();
  ~RestoreIsa() { SetCpuKernelIsa(isa); }
};

class AttentionTileTest : public ::testing::TestWithParam<TileCase> {};

void CheckLengths(const TileCase &c, torch::ScalarType dtype,
                  double tolerance) {
  torch::InferenceMode guard;
  RestoreIsa restore;
  for (int64_t L : {1, 7, 128, 129, 512}) {
    const Problem p = MakeProblem(c.index, c.terms, L, dtype);
    ASSERT_TRUE(FusedAttentionApplies(p.in.qkv));
    const torch::Tensor want = Reference(p);
    for (const std::string &isa : KernelIsas()) {
      SCOPED_TRACE("row kernels " + isa);
      ASSERT_TRUE(SetCpuKernelIsa(isa));
      const torch::Tensor got = FusedAttention(p.in);
      ASSERT_EQ(got.scalar_type(), dtype);
      const double diff =
          (got.to(torch::kDouble) - want).abs().max().item<double>();
      EXPECT_LT(diff, tolerance)
          << c.index.name << " " << c.terms.name << " L=" << L;
      // The fully padded row attends uniformly: its output is the mean of v.
      const auto v = p.in.qkv.to(torch::kDouble)[2].narrow(
          1, 2 * kHeads * kHeadSize, kHeads * kHeadSize);
      EXPECT_LT((got.to(torch::kDouble)[2] - v.mean(0, true))
                    .abs()
                    .max()
                    .item<double>(),
                tolerance)
          << "L=" << L;
    }
    EXPECT_GT(want.abs().max().item<double>(),
              0.05); // a real output, not zeros
  }
}

TEST_P(AttentionTileTest, MatchesTorchInFp32) {
  CheckLengths(GetParam(), torch::kFloat, 2e-5);
}

TEST_P(AttentionTileTest, MatchesTorchInBf16) {
  if (!OneDnnBf16GemmAvailable())
    GTEST_SKIP() << "no oneDNN bf16 GEMM on this CPU";
  // Probabilities and the output rounded to bf16 (8 bits): |error| <=
  // 2^-8 max |v| + 2^-8 |out|, |v| < 3 here.
  CheckLengths(GetParam(), torch::kBFloat16, 2.5e-2);
}

std::vector<TileCase> Cases() {
  const IndexKind kinds[] = {
      {"buckets256", 256, 512}, // DeBERTa-v3: exact to 128, log beyond
      {"buckets16", 16, 64},    // log buckets from 8 on, clamped beyond 64
      {"unbucketed", -1, 512},  // exact, no clamp within 512
      {"unbucketed_clamped", -1, 24}}; // exact, clamped at +-24
  const Terms terms[] = {{"c2p_p2c", true, true},
                         {"c2p_only", true, false},
                         {"p2c_only", false, true}};
  std::vector<TileCase> cases;
  for (const auto &k : kinds) {
    for (const auto &t : terms)
      cases.push_back({k, t});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Indexes, AttentionTileTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<TileCase> &info) {
                           return std::string(info.param.index.name) + "_" +
                                  info.param.terms.name;
                         });

TEST(AttentionTile, NoRelativeTerms) {
  torch::InferenceMode guard;
  for (int64_t L : {1, 7, 129}) {
    Problem p = MakeProblem({"none", 256, 512}, {"none", false, false}, L,
                            torch::kFloat);
    p.in.relative_index = torch::Tensor();
    const double diff = (FusedAttention(p.in).to(torch::kDouble) - Reference(p))
                            .abs()
                            .max()
                            .item<double>();
    EXPECT_LT(diff, 2e-5) << "L=" << L;
  }
}

TEST(AttentionTile, RefusesAnIndexThatIsNotMonotonic) {
  torch::InferenceMode guard;
  Problem p = MakeProblem({"buckets256", 256, 512}, {"both", true, true}, 7,
                          torch::kFloat);
  p.in.relative_index = p.in.relative_index.flip(0).contiguous();
  EXPECT_THROW(FusedAttention(p.in), c10::Error);
  p.in.relative_index =
      torch::zeros({12}, torch::kInt); // 2L - 1 = 13 entries wanted
  EXPECT_THROW(FusedAttention(p.in), c10::Error);
}

TEST(RelativePositionTable, ToeplitzVectorMatchesTheMatrix) {
  for (const auto &[buckets, max_rel] :
       std::vector<std::pair<int64_t, int64_t>>{
           {256, 512}, {16, 64}, {-1, 24}}) {
    const RelativePositionMap map(buckets, max_rel,
                                  buckets > 0 ? buckets : max_rel);
    for (int64_t L : {1, 5, 70, 300}) {
      const auto t = map.Build(L, L);
      ASSERT_EQ(t.by_rel.size(), static_cast<size_t>(2 * L - 1));
      for (int64_t i = 0; i < L; ++i) {
        for (int64_t j = 0; j < L; ++j)
          ASSERT_EQ(t.index[i * L + j], t.by_rel[i - j + L - 1])
              << i << "," << j;
      }
      for (size_t r = 1; r < t.by_rel.size(); ++r)
        ASSERT_LE(t.by_rel[r - 1], t.by_rel[r]);
    }
  }
}

TEST(AddLayerNormRows, MatchesTorchAtOddWidths) {
  torch::InferenceMode guard;
  RestoreIsa restore;
  torch::manual_seed(11);
  for (const std::string &isa : KernelIsas()) {
    SCOPED_TRACE("row kernels " + isa);
    ASSERT_TRUE(SetCpuKernelIsa(isa));
    for (int64_t n : {1, 7, 16, 17, 63, 64, 100, 768, 1000}) {
      const auto x = torch::randn({5, n}) * 3 + 1, r = torch::randn({5, n});
      const auto w = torch::randn({n}), b = torch::randn({n});
      for (const bool with_residual : {true, false}) {
        const auto sum = with_residual ? x + r : x;
        // float64 reference (float32 torch is off by 1e-3 at n = 1, where
        // x - mean is exactly 0 and 1/sqrt(var + eps) is 3162).
        const auto want =
            torch::layer_norm(sum.to(torch::kDouble), {n}, w.to(torch::kDouble),
                              b.to(torch::kDouble), 1e-7);
        const auto got = FusedAddLayerNorm(
            x, with_residual ? r : torch::Tensor(), w, b, 1e-7);
        EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(),
                  2e-5)
            << "n=" << n << " residual " << with_residual;
        // bf16 in and out, float32 inside: one bf16 rounding of the float32
        // result.
        const auto bx = x.to(torch::kBFloat16), br = r.to(torch::kBFloat16);
        const auto bw = w.to(torch::kBFloat16), bb = b.to(torch::kBFloat16);
        const auto bsum = with_residual
                              ? bx.to(torch::kFloat) + br.to(torch::kFloat)
                              : bx.to(torch::kFloat);
        const auto exact = torch::layer_norm(bsum.to(torch::kDouble), {n},
                                             bw.to(torch::kDouble),
                                             bb.to(torch::kDouble), 1e-7);
        const auto bgot = FusedAddLayerNorm(
            bx, with_residual ? br : torch::Tensor(), bw, bb, 1e-7);
        ASSERT_EQ(bgot.scalar_type(), torch::kBFloat16);
        EXPECT_LT(
            ((bgot.to(torch::kDouble) - exact).abs() / (exact.abs() + 1e-3))
                .max()
                .item<double>(),
            1.0 / 128)
            << "n=" << n << " residual " << with_residual;
      }
    }
  }
}

TEST(AttentionTile, RowKernelsForThisCpu) {
  // The best set is chosen; AVX-512 where the CPU has F, BW and VL.
  const std::vector<std::string> isas = KernelIsas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(CpuKernelIsa(), isas.front());
  EXPECT_EQ(isas.back(), "scalar");
  EXPECT_FALSE(SetCpuKernelIsa("sse9"));
  std::cout << "[ cpu      ] row kernels: " << CpuKernelIsa() << " (of "
            << isas.size() << " this CPU runs)" << std::endl;
}

TEST(TileGemm, PathFollowsTheCpu) {
  RestoreIsa restore;
  const bool avx512 = CpuHasFlag("avx512f") && CpuHasFlag("avx512bw") &&
                      CpuHasFlag("avx512vl");
  EXPECT_EQ(tile::HaveF32(), avx512);
  EXPECT_EQ(tile::HaveBf16(), avx512 && CpuHasFlag("avx512_bf16"));
  std::cout << "[ cpu      ] attention GEMMs: fp32 "
            << FusedAttentionGemm(torch::kFloat) << ", bf16 "
            << FusedAttentionGemm(torch::kBFloat16) << std::endl;
  if (avx512) {
    ASSERT_TRUE(SetCpuKernelIsa("avx512"));
    EXPECT_EQ(FusedAttentionGemm(torch::kFloat), "avx512 micro-kernel");
    if (tile::HaveBf16())
      EXPECT_EQ(FusedAttentionGemm(torch::kBFloat16),
                "avx512_bf16 micro-kernel");
    ASSERT_TRUE(SetCpuKernelIsa("avx2"));
    EXPECT_EQ(FusedAttentionGemm(torch::kFloat), "onednn");
  }
}

// Both packings (B^T as rows, B as columns) and the product, fp32 and bf16,
// against the float64 matmul of the same (bf16-rounded) values; C's columns
// past n and rows past m stay untouched.
TEST(TileGemm, MatchesTorchMatmul) {
  if (!tile::HaveF32())
    GTEST_SKIP() << "no AVX-512 on this CPU: the tile runs oneDNN's GEMM";
  torch::manual_seed(7);
  const float kSentinel = -12345.0f;
  for (bool bf16 : {false, true}) {
    if (bf16 && !tile::HaveBf16())
      continue;
    for (int64_t m : {1, 7, 8, 9, 31, 37}) {
      for (int64_t n : {1, 15, 16, 17, 32, 33, 70}) {
        for (int64_t k : {1, 2, 3, 24, 64, 129}) {
          SCOPED_TRACE("bf16 " + std::to_string(bf16) + " m=" +
                       std::to_string(m) + " n=" + std::to_string(n) +
                       " k=" + std::to_string(k));
          const auto dtype = bf16 ? torch::kBFloat16 : torch::kFloat;
          // Row strides wider than the rows, as in the fused QKV tensor.
          const int64_t kp = (k + 1) / 2 * 2; // bf16: k pairs, A zero padded
          auto a = torch::zeros({m, kp + 5}, dtype);
          a.narrow(1, 0, k).copy_(torch::randn({m, k}));
          const auto bt = torch::randn({n, k + 3}).to(dtype);  // B^T rows
          const auto bc = torch::randn({k, n + 2}).to(dtype);  // B rows
          const auto want_t = torch::matmul(
              a.narrow(1, 0, k).to(torch::kDouble),
              bt.narrow(1, 0, k).to(torch::kDouble).t());
          const auto want_c =
              torch::matmul(a.narrow(1, 0, k).to(torch::kDouble),
                            bc.narrow(1, 0, n).to(torch::kDouble));
          for (bool rows : {true, false}) {
            auto c = torch::full({m + 1, n + 3}, kSentinel);
            const int64_t size =
                tile::Panels(n) * (bf16 ? tile::PanelStrideBf16(k)
                                        : tile::PanelStrideF32(k));
            if (bf16) {
              std::vector<uint16_t> packed(size, 0xFFFF);  // NaN unless written
              const auto *src = reinterpret_cast<const uint16_t *>(
                  (rows ? bt : bc).data_ptr<at::BFloat16>());
              if (rows)
                tile::PackRowsBf16(src, k + 3, n, k, packed.data());
              else
                tile::PackColsBf16(src, n + 2, k, n, packed.data());
              tile::GemmBf16(m, n, kp,
                             reinterpret_cast<const uint16_t *>(
                                 a.data_ptr<at::BFloat16>()),
                             kp + 5, packed.data(), c.data_ptr<float>(), n + 3);
            } else {
              std::vector<float> packed(size, std::nanf(""));
              const float *src = (rows ? bt : bc).data_ptr<float>();
              if (rows)
                tile::PackRowsF32(src, k + 3, n, k, packed.data());
              else
                tile::PackColsF32(src, n + 2, k, n, packed.data());
              tile::GemmF32(m, n, k, a.data_ptr<float>(), kp + 5,
                            packed.data(), c.data_ptr<float>(), n + 3);
            }
            const auto &want = rows ? want_t : want_c;
            const double scale = 1.0 + want.abs().max().item<double>();
            const double diff =
                (c.narrow(0, 0, m).narrow(1, 0, n).to(torch::kDouble) - want)
                    .abs()
                    .max()
                    .item<double>();
            EXPECT_LT(diff, 1e-5 * scale * std::sqrt(double(k)))
                << (rows ? "rows" : "cols");
            EXPECT_TRUE(c.narrow(1, n, 3).eq(kSentinel).all().item<bool>());
            EXPECT_TRUE(c.narrow(0, m, 1).eq(kSentinel).all().item<bool>());
          }
        }
      }
    }
  }
}

} // namespace
} // namespace dserve
