// The pre-packed dense layers (model/deberta/packed_linear.h over
// dense_onednn.h, issue 27) against the plain LibTorch expression in
// float64 on the same (fp32 or bf16-rounded) inputs: linear + bias, linear
// without bias, + GELU (erf and tanh), + ReLU, + residual (sum post-op,
// written in place), at row counts 0, 1, 7, 16 and 129 and widths that are
// not multiples of oneDNN's blocks; several threads at once on one layer;
// the implementation oneDNN picks (brgemm on AVX-512).
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/deberta/cpu_kernels.h"
#include "model/deberta/packed_linear.h"

namespace dserve {
namespace {

struct Variant {
  const char* name;
  bool bias;
  DenseActivation activation;
  bool residual;
};

const Variant kVariants[] = {
    {"bias", true, DenseActivation::kNone, false},
    {"no_bias", false, DenseActivation::kNone, false},
    {"gelu_erf", true, DenseActivation::kGeluErf, false},
    {"gelu_tanh", true, DenseActivation::kGeluTanh, false},
    {"relu", true, DenseActivation::kRelu, false},
    {"residual", true, DenseActivation::kNone, true},
};

struct Shape {
  int64_t in, out;
};
// The encoders' widths (v3-xsmall's 384 / 1536, v3-base's 768 -> 2304) and
// odd ones (no multiple of 16 or 64).
const Shape kShapes[] = {{384, 1536}, {768, 2304}, {1536, 384}, {100, 200}, {37, 5}};
const int64_t kRows[] = {0, 1, 7, 16, 129};

// Hugging Face's expression in float64: act(x W^T + b + residual).
torch::Tensor Reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                        const torch::Tensor& residual, DenseActivation act) {
  auto y = torch::linear(x.to(torch::kDouble), w.to(torch::kDouble),
                         b.defined() ? b.to(torch::kDouble) : torch::Tensor());
  if (residual.defined()) y = y + residual.to(torch::kDouble);
  switch (act) {
    case DenseActivation::kNone: return y;
    case DenseActivation::kGeluErf: return torch::gelu(y);
    case DenseActivation::kGeluTanh: return torch::gelu(y, "tanh");
    case DenseActivation::kRelu: return torch::relu(y);
  }
  return y;
}

// fp32: max |y - ref| within 1e-5 of max |ref|. bf16 (one rounding of the
// float32 result to 8 bits of mantissa, from bf16 inputs): within 2^-8 of
// each |ref| plus 1e-3 of max |ref|.
void ExpectClose(const torch::Tensor& got, const torch::Tensor& ref, torch::ScalarType dtype,
                 const std::string& what) {
  ASSERT_EQ(got.sizes(), ref.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), dtype) << what;
  if (ref.numel() == 0) return;
  const auto g = got.to(torch::kDouble);
  const double scale = ref.abs().max().item<double>();
  if (dtype == torch::kFloat) {
    const double err = (g - ref).abs().max().item<double>();
    EXPECT_LE(err, 1e-5 * scale) << what << " (max |ref| " << scale << ")";
  } else {
    const auto excess = (g - ref).abs() - (ref.abs() * (1.0 / 256) + 1e-3 * scale);
    EXPECT_LE(excess.max().item<double>(), 0.0) << what << " (max |ref| " << scale << ")";
  }
}

class PackedLinearTest : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  void SetUp() override {
    if (!PackedLinear::Supports(torch::empty({1, 1}, torch::TensorOptions().dtype(GetParam())))) {
      GTEST_SKIP() << "no oneDNN matmul for this dtype on this CPU";
    }
  }
};

TEST_P(PackedLinearTest, MatchesTorch) {
  const torch::ScalarType dtype = GetParam();
  torch::InferenceMode guard;
  torch::manual_seed(7);
  for (const Shape& s : kShapes) {
    const auto w = (torch::randn({s.out, s.in}) / std::sqrt(static_cast<double>(s.in))).to(dtype);
    const auto b = torch::randn({s.out}).to(dtype);
    for (const Variant& v : kVariants) {
      const PackedLinear packed = PackedLinear::Pack(w, v.bias ? b : torch::Tensor(), v.activation, v.residual);
      ASSERT_TRUE(packed.defined());
      for (int64_t m : kRows) {
        const std::string what = std::string(v.name) + " in=" + std::to_string(s.in) +
                                 " out=" + std::to_string(s.out) + " rows=" + std::to_string(m) + " " +
                                 c10::toString(dtype);
        const auto x = torch::randn({m, s.in}).to(dtype);
        ASSERT_TRUE(packed.Applies(x)) << what;
        if (v.residual) {
          const auto residual = torch::randn({m, s.out}).to(dtype);
          const auto ref = Reference(x, w, v.bias ? b : torch::Tensor(), residual, v.activation);
          torch::Tensor storage = residual.clone();
          const torch::Tensor got = packed.Forward(x, storage);
          ExpectClose(got, ref, dtype, what);
          if (m > 0) EXPECT_EQ(got.data_ptr(), storage.data_ptr()) << what << ": written in place";
        } else {
          ExpectClose(packed.Forward(x), Reference(x, w, v.bias ? b : torch::Tensor(), {}, v.activation), dtype,
                      what);
        }
      }
    }
  }
}

// [B, L, K] inputs (the encoders'), a non-contiguous one, and a batch of
// zero sequences.
TEST_P(PackedLinearTest, BatchedAndStridedInputs) {
  const torch::ScalarType dtype = GetParam();
  torch::InferenceMode guard;
  torch::manual_seed(11);
  const auto w = (torch::randn({96, 64}) / 8.0).to(dtype);
  const auto b = torch::randn({96}).to(dtype);
  const PackedLinear packed = PackedLinear::Pack(w, b, DenseActivation::kGeluErf);
  const auto x = torch::randn({3, 43, 64}).to(dtype);
  ExpectClose(packed.Forward(x), Reference(x, w, b, {}, DenseActivation::kGeluErf), dtype, "3-d");
  const auto strided = torch::randn({3, 64, 43}).to(dtype).transpose(1, 2);
  ExpectClose(packed.Forward(strided), Reference(strided, w, b, {}, DenseActivation::kGeluErf), dtype, "strided");
  const auto none = torch::randn({0, 128, 64}).to(dtype);
  EXPECT_EQ(packed.Forward(none).sizes(), torch::IntArrayRef({0, 128, 96}));
}

// Several workers on one packed layer at once, each with its own row count
// (each builds and then reuses its primitive).
TEST_P(PackedLinearTest, ConcurrentForwards) {
  const torch::ScalarType dtype = GetParam();
  torch::manual_seed(3);
  const auto w = (torch::randn({256, 128}) / 11.0).to(dtype);
  const auto b = torch::randn({256}).to(dtype);
  const PackedLinear packed = PackedLinear::Pack(w, b, DenseActivation::kGeluErf);
  std::vector<torch::Tensor> inputs, refs;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(torch::randn({5 + 31 * t, 128}).to(dtype));
    refs.push_back(Reference(inputs.back(), w, b, {}, DenseActivation::kGeluErf));
  }
  std::vector<torch::Tensor> outs(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      torch::InferenceMode guard;
      for (int r = 0; r < 20; ++r) outs[t] = packed.Forward(inputs[t]);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) ExpectClose(outs[t], refs[t], dtype, "thread " + std::to_string(t));
}

// Under autograd the encoders keep torch ops: Applies says no.
TEST_P(PackedLinearTest, NotUnderAutograd) {
  const torch::ScalarType dtype = GetParam();
  const PackedLinear packed = PackedLinear::Pack(torch::randn({8, 4}).to(dtype), torch::randn({8}).to(dtype));
  const auto x = torch::randn({2, 4}).to(dtype);
  EXPECT_FALSE(packed.Applies(x));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(packed.Applies(x));
  EXPECT_FALSE(packed.Applies(x.to(dtype == torch::kFloat ? torch::kBFloat16 : torch::kFloat)));
  // fp32 above kMaxFp32Rows rows stays on oneDNN's sgemm; bf16 is packed at every size.
  const auto big = torch::randn({4, PackedLinear::kMaxFp32Rows / 4 + 1, 4}).to(dtype);
  EXPECT_EQ(packed.Applies(big), dtype != torch::kFloat);
  EXPECT_TRUE(packed.Applies(torch::randn({4, PackedLinear::kMaxFp32Rows / 4, 4}).to(dtype)));
}

// On AVX-512 oneDNN runs its brgemm matmul on the packed weights (not the
// gemm:jit that a runtime M would get, nor a reference kernel).
TEST_P(PackedLinearTest, BrgemmOnAvx512) {
  const torch::ScalarType dtype = GetParam();
  const PackedLinear packed =
      PackedLinear::Pack(torch::randn({2304, 768}).to(dtype), torch::randn({2304}).to(dtype));
  for (int64_t m : {1, 128, 1024}) {
    const std::string impl = packed.Implementation(m);
    std::cout << c10::toString(dtype) << " rows " << m << ": " << impl << " (oneDNN isa " << OneDnnIsa() << ")\n";
    EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;
    if (OneDnnIsa().rfind("avx512_core", 0) == 0) EXPECT_EQ(impl.rfind("brg:", 0), 0u) << impl;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PackedLinearTest, ::testing::Values(torch::kFloat, torch::kBFloat16),
                         [](const ::testing::TestParamInfo<torch::ScalarType>& info) {
                           return std::string(info.param == torch::kFloat ? "fp32" : "bf16");
                         });

// fp32 is packed only where oneDNN has a brgemm matmul (AVX-512): on an
// AVX2-only CPU its matmul is the plain gemm, slower through the primitive
// than the unpacked path (dense_onednn.cc, PacksWeights), so the encoders
// must not take it there.
TEST(PackedLinear, Fp32PackedOnlyWithBrgemm) {
  const bool fp32 = PackedLinear::Supports(torch::empty({1, 1}));
  std::cout << "oneDNN isa " << OneDnnIsa() << ": fp32 dense layers " << (fp32 ? "pre-packed" : "unpacked") << "\n";
  if (OneDnnIsa().rfind("avx512_core", 0) == 0) EXPECT_TRUE(fp32);
  if (OneDnnIsa().rfind("avx2", 0) == 0) EXPECT_FALSE(fp32);
}

TEST(PackedLinear, ActivationNames) {
  EXPECT_EQ(DenseActivationByName("gelu"), DenseActivation::kGeluErf);
  EXPECT_EQ(DenseActivationByName("gelu_new"), DenseActivation::kGeluTanh);
  EXPECT_EQ(DenseActivationByName("gelu_pytorch_tanh"), DenseActivation::kGeluTanh);
  EXPECT_EQ(DenseActivationByName("relu"), DenseActivation::kRelu);
  EXPECT_EQ(DenseActivationByName("silu"), DenseActivation::kNone);
}

}  // namespace
}  // namespace dserve
