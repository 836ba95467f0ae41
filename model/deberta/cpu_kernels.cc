#include "model/deberta/cpu_kernels.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/quantized/PackedParams.h>
#include <ATen/record_function.h>
#include <c10/util/CallOnce.h>

#ifdef DSERVE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
extern "C" {
// Exported by libdnnl (PyTorch's bf16 GEMM uses it) but not declared in its
// public header: row-major C = alpha * op(A) op(B) + beta * C, A and B bf16
// (raw 16-bit values), C float32.
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K, float alpha,
                                    const uint16_t* A, dnnl_dim_t lda, const uint16_t* B, dnnl_dim_t ldb, float beta,
                                    float* C, dnnl_dim_t ldc);
}
#endif

namespace dserve {
namespace {

#ifdef DSERVE_HAVE_DNNL
void Check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success) throw std::runtime_error(std::string("fused attention: ") + what + " failed (oneDNN status " + std::to_string(static_cast<int>(status)) + ")");
}

// Row-major C[M, N] = op(A) op(B), float32 result.
void Gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc) {
  Check(dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc), "sgemm");
}
void Gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const c10::BFloat16* a, int64_t lda,
          const c10::BFloat16* b, int64_t ldb, float* c, int64_t ldc) {
  Check(dnnl_gemm_bf16bf16f32(ta, tb, m, n, k, 1.0f, reinterpret_cast<const uint16_t*>(a), lda,
                              reinterpret_cast<const uint16_t*>(b), ldb, 0.0f, c, ldc),
        "bf16 gemm");
}
#endif

// exp(x) for x <= 0 (Cephes' expf: range reduction by ln 2 in two parts, a
// degree-6 polynomial, the exponent set through the bits); relative error
// ~1e-7. Written so the loops below vectorise.
inline float ExpNonPositive(float x) {
  x = std::max(x, -87.0f);
  const float t = x * 1.44269504088896341f;
  const int n = static_cast<int>(t - 0.5f);  // round to nearest (t <= 0)
  const float fn = static_cast<float>(n);
  float z = x - fn * 0.693359375f;
  z = z - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * z + 1.3981999507e-3f;
  p = p * z + 8.3334519073e-3f;
  p = p * z + 4.1665795894e-2f;
  p = p * z + 1.6666665459e-1f;
  p = p * z + 5.0000001201e-1f;
  p = p * z * z + z + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// In place: row <- softmax(row) over the keys with valid[j] != 0; masked keys
// get 0. A row with no valid key becomes uniform (as adding a huge negative
// bias to every key would give).
__attribute__((target_clones("avx512f", "avx2", "default")))
void SoftmaxRow(float* row, const uint8_t* valid, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) max = std::max(max, valid[j] ? row[j] : -std::numeric_limits<float>::infinity());
  if (max == -std::numeric_limits<float>::infinity()) {
    for (int64_t j = 0; j < n; ++j) row[j] = 1.0f / static_cast<float>(n);
    return;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = valid[j] ? ExpNonPositive(row[j] - max) : 0.0f;
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
}

// row[j] += table[idx[j]] for a row of c2p, or the transposed p2c walk.
__attribute__((target_clones("avx512f", "avx2", "default")))
void AddGathered(float* row, const float* table, const int64_t* idx, int64_t n) {
  for (int64_t j = 0; j < n; ++j) row[j] += table[idx[j]];
}

// Round to nearest even, as c10::BFloat16's constructor does (no NaN here:
// probabilities and finite products).
__attribute__((target_clones("avx512f", "avx2", "default")))
void ToBf16(const float* in, int64_t n, uint16_t* out) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t u;
    std::memcpy(&u, &in[j], sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    out[j] = static_cast<uint16_t>(u >> 16);
  }
}

inline float Bf16ToFloat(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// out = LayerNorm(a + b) * w + bias over n values; b may be null. tmp holds
// the n float32 sums. Two passes (mean, then variance of the centred values).
__attribute__((target_clones("avx512f", "avx2", "default")))
void AddNormRowF32(const float* a, const float* b, const float* w, const float* bias, float eps, int64_t n,
                   float* tmp, float* out) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    tmp[j] = b ? a[j] + b[j] : a[j];
    sum += tmp[j];
  }
  const float mean = sum / static_cast<float>(n);
  float sq = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float c = tmp[j] - mean;
    sq += c * c;
  }
  const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) out[j] = (tmp[j] - mean) * inv * w[j] + bias[j];
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void AddNormRowBf16(const uint16_t* a, const uint16_t* b, const uint16_t* w, const uint16_t* bias, float eps,
                    int64_t n, float* tmp, uint16_t* out) {
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    tmp[j] = b ? Bf16ToFloat(a[j]) + Bf16ToFloat(b[j]) : Bf16ToFloat(a[j]);
    sum += tmp[j];
  }
  const float mean = sum / static_cast<float>(n);
  float sq = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float c = tmp[j] - mean;
    sq += c * c;
  }
  const float inv = 1.0f / std::sqrt(sq / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) tmp[j] = (tmp[j] - mean) * inv * Bf16ToFloat(w[j]) + Bf16ToFloat(bias[j]);
  ToBf16(tmp, n, out);
}

struct Scratch {
  std::vector<float> scores, c2p, p2c, out;
  std::vector<uint16_t> probs;
};

#ifdef DSERVE_HAVE_DNNL
template <typename T>
void RunTiles(const FusedAttentionInput& in, torch::Tensor& context) {
  const int64_t B = in.qkv.size(0), L = in.qkv.size(1), h = in.heads, d = in.head_size;
  const int64_t A = h * d, ld = 3 * A, R = in.rows;
  const T* qkv = in.qkv.data_ptr<T>();
  const T* pos_key = in.pos_key.defined() ? in.pos_key.data_ptr<T>() : nullptr;
  const T* pos_query = in.pos_query.defined() ? in.pos_query.data_ptr<T>() : nullptr;
  const int64_t table_rows = pos_key ? in.pos_key.size(1) : pos_query ? in.pos_query.size(1) : 0;
  const int64_t* index = in.index.defined() ? in.index.data_ptr<int64_t>() : nullptr;
  const uint8_t* keys = in.key_mask.data_ptr<uint8_t>();
  T* out = context.data_ptr<T>();
  constexpr bool kFloat = std::is_same<T, float>::value;

  at::parallel_for(0, B * h, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch s;
    s.scores.resize(L * L);
    if (pos_key) s.c2p.resize(L * R);
    if (pos_query) s.p2c.resize(L * R);
    if (!kFloat) {
      s.probs.resize(L * L);
      s.out.resize(L * d);
    }
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / h, head = task % h;
      const T* q = qkv + b * L * ld + head * d;
      const T* k = q + A;
      const T* v = q + 2 * A;
      float* scores = s.scores.data();
      Gemm('N', 'T', L, L, d, q, ld, k, ld, scores, L);
      if (pos_key) {
        Gemm('N', 'T', L, R, d, q, ld, pos_key + (head * table_rows + in.min_row) * d, d, s.c2p.data(), R);
        for (int64_t i = 0; i < L; ++i) AddGathered(scores + i * L, s.c2p.data() + i * R, index + i * L, L);
      }
      if (pos_query) {
        // p2c[i, j] = K_j . P_q[idx[i, j]]: walk row i of the index, row j of the table.
        Gemm('N', 'T', L, R, d, k, ld, pos_query + (head * table_rows + in.min_row) * d, d, s.p2c.data(), R);
        const float* p2c = s.p2c.data();
        for (int64_t i = 0; i < L; ++i) {
          float* row = scores + i * L;
          const int64_t* idx = index + i * L;
          for (int64_t j = 0; j < L; ++j) row[j] += p2c[j * R + idx[j]];
        }
      }
      const uint8_t* valid = keys + b * L;
      for (int64_t i = 0; i < L; ++i) SoftmaxRow(scores + i * L, valid, L);
      T* o = out + b * L * A + head * d;
      if constexpr (kFloat) {
        Gemm('N', 'N', L, d, L, scores, L, v, ld, o, A);
      } else {
        ToBf16(scores, L * L, s.probs.data());
        Gemm('N', 'N', L, d, L, reinterpret_cast<const c10::BFloat16*>(s.probs.data()), L, v, ld, s.out.data(), d);
        for (int64_t i = 0; i < L; ++i) ToBf16(s.out.data() + i * d, d, reinterpret_cast<uint16_t*>(o + i * A));
      }
    }
  });
}
#endif

}  // namespace

std::string OneDnnIsa() {
#ifdef DSERVE_HAVE_DNNL
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof(hex), "unknown (0x%x)", static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
      return hex;
    }
  }
#else
  return "none";
#endif
}

bool OneDnnBf16GemmAvailable() {
#ifdef DSERVE_HAVE_DNNL
  // One 1x1x1 product, once: 1.0 * 1.0 in bf16 (0x3f80) must give 1.0.
  static const bool available = [] {
    const uint16_t one = 0x3f80;
    float c = 0.0f;
    return dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &c, 1) == dnnl_success &&
           c == 1.0f;
  }();
  return available;
#else
  return false;
#endif
}

bool FusedAttentionApplies(const torch::Tensor& qkv) {
#ifdef DSERVE_HAVE_DNNL
  return qkv.device().is_cpu() &&
         (qkv.scalar_type() == torch::kFloat || (qkv.scalar_type() == torch::kBFloat16 && OneDnnBf16GemmAvailable())) &&
         !at::GradMode::is_enabled();
#else
  (void)qkv;
  return false;
#endif
}

bool FusedLinearApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef DSERVE_HAVE_DNNL
  return x.device().is_cpu() && x.scalar_type() == torch::kFloat && !at::GradMode::is_enabled() && x.dim() >= 1 &&
         weight.defined() && weight.scalar_type() == torch::kFloat && weight.dim() == 2 && weight.is_contiguous() &&
         weight.size(1) == x.size(-1) &&
         (!bias.defined() || (bias.scalar_type() == torch::kFloat && bias.dim() == 1 &&
                              bias.size(0) == weight.size(0) && bias.is_contiguous()));
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  RECORD_FUNCTION("dserve::fused_linear", std::vector<c10::IValue>());  // named in profiles
  TORCH_CHECK(FusedLinearApplies(x, weight, bias), "fused linear: not available for these tensors");
  const torch::Tensor in = x.contiguous();
  const int64_t k = weight.size(1), n = weight.size(0), m = in.numel() / std::max<int64_t>(k, 1);
  std::vector<int64_t> shape(in.sizes().begin(), in.sizes().end());
  shape.back() = n;
  auto out = torch::empty(shape, in.options());
  if (m == 0) return out;
  float* c = out.data_ptr<float>();
  float beta = 0.0f;
  if (bias.defined()) {
    const float* b = bias.data_ptr<float>();
    at::parallel_for(0, m, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) std::memcpy(c + i * n, b, sizeof(float) * n);
    });
    beta = 1.0f;
  }
#ifdef DSERVE_HAVE_DNNL
  Check(dnnl_sgemm('N', 'T', m, n, k, 1.0f, in.data_ptr<float>(), k, weight.data_ptr<float>(), k, beta, c, n), "sgemm");
#endif
  return out;
}

bool FusedAddLayerNormApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef DSERVE_HAVE_DNNL
  const auto dtype = x.scalar_type();
  return x.device().is_cpu() && (dtype == torch::kFloat || dtype == torch::kBFloat16) && x.is_contiguous() &&
         !at::GradMode::is_enabled() && weight.defined() && bias.defined() && weight.scalar_type() == dtype &&
         bias.scalar_type() == dtype && weight.dim() == 1 && weight.size(0) == x.size(-1) &&
         bias.sizes() == weight.sizes() && weight.is_contiguous() && bias.is_contiguous();
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

torch::Tensor FusedAddLayerNorm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                const torch::Tensor& bias, double eps) {
  RECORD_FUNCTION("dserve::fused_add_layer_norm", std::vector<c10::IValue>());
  TORCH_CHECK(FusedAddLayerNormApplies(x, weight, bias), "fused layer norm: not available for these tensors");
  torch::Tensor r;
  if (residual.defined()) {
    TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type(),
                "fused layer norm: residual must match x");
    r = residual.contiguous();
  }
  auto out = torch::empty_like(x);
  const int64_t n = x.size(-1), rows = x.numel() / std::max<int64_t>(n, 1);
  const float e = static_cast<float>(eps);
  const bool bf16 = x.scalar_type() == torch::kBFloat16;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> tmp;
    tmp.resize(n);
    for (int64_t i = begin; i < end; ++i) {
      if (bf16) {
        auto p = [&](const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<c10::BFloat16>()); };
        AddNormRowBf16(p(x) + i * n, r.defined() ? p(r) + i * n : nullptr, p(weight), p(bias), e, n, tmp.data(),
                       reinterpret_cast<uint16_t*>(out.data_ptr<c10::BFloat16>()) + i * n);
      } else {
        AddNormRowF32(x.data_ptr<float>() + i * n, r.defined() ? r.data_ptr<float>() + i * n : nullptr,
                      weight.data_ptr<float>(), bias.data_ptr<float>(), e, n, tmp.data(), out.data_ptr<float>() + i * n);
      }
    }
  });
  return out;
}

torch::Tensor FusedAttention(const FusedAttentionInput& in) {
  RECORD_FUNCTION("dserve::fused_attention", std::vector<c10::IValue>());
  TORCH_CHECK(FusedAttentionApplies(in.qkv), "fused attention: not available for this tensor");
  TORCH_CHECK(in.qkv.dim() == 3 && in.qkv.is_contiguous() && in.qkv.size(2) == 3 * in.heads * in.head_size,
              "fused attention: qkv must be contiguous [B, L, 3*h*d]");
  TORCH_CHECK(in.key_mask.scalar_type() == torch::kByte && in.key_mask.is_contiguous() &&
                  in.key_mask.sizes() == torch::IntArrayRef({in.qkv.size(0), in.qkv.size(1)}),
              "fused attention: key_mask must be contiguous uint8 [B, L]");
  const bool relative = in.pos_key.defined() || in.pos_query.defined();
  TORCH_CHECK(!relative || (in.index.defined() && in.index.is_contiguous() && in.rows > 0),
              "fused attention: relative terms need the index");
  for (const torch::Tensor* t : {&in.pos_key, &in.pos_query}) {
    TORCH_CHECK(!t->defined() || (t->is_contiguous() && t->scalar_type() == in.qkv.scalar_type() &&
                                  t->size(0) == in.heads && t->size(2) == in.head_size &&
                                  in.min_row + in.rows <= t->size(1)),
                "fused attention: position table must be contiguous [h, T, d] in qkv's dtype");
  }
  auto context = torch::empty({in.qkv.size(0), in.qkv.size(1), in.heads * in.head_size}, in.qkv.options());
#ifdef DSERVE_HAVE_DNNL
  if (in.qkv.scalar_type() == torch::kFloat) {
    RunTiles<float>(in, context);
  } else {
    RunTiles<c10::BFloat16>(in, context);
  }
#endif
  return context;
}

// ------------------------------------------------------------------- int8 --

namespace {

at::QEngine PreferredQEngine() {
  const auto& engines = at::globalContext().supportedQEngines();
  for (at::QEngine e : {at::QEngine::ONEDNN, at::QEngine::FBGEMM}) {
    if (std::find(engines.begin(), engines.end(), e) != engines.end()) return e;
  }
  return at::QEngine::NoQEngine;
}

// The int16 intermediate of vpmaddubsw (u8 x s8 pairs) saturates with
// full-range activations; VNNI's vpdpbusd (and AMX-INT8) accumulate in int32.
bool CpuHasInt8Dot() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
}

}  // namespace

std::string Int8Engine() {
  switch (PreferredQEngine()) {
    case at::QEngine::ONEDNN: return "onednn";
    case at::QEngine::FBGEMM: return "fbgemm";
    default: return "";
  }
}

struct Int8Linear::Packed {
  c10::intrusive_ptr<LinearPackedParamsBase> params;
  torch::Tensor scales;       // [N] float32
  torch::Tensor dequantized;  // [N, K] float32
  int64_t in = 0, out = 0;
  bool reduce_range = false;  // activations in 7 bits (levels 127)
};

Int8Linear Int8Linear::Pack(const torch::Tensor& weight, const torch::Tensor& bias) {
  const at::QEngine engine = PreferredQEngine();
  TORCH_CHECK(engine != at::QEngine::NoQEngine,
              "int8: this LibTorch has no oneDNN or fbgemm quantized engine (dtype int8 needs one)");
  TORCH_CHECK(weight.defined() && weight.dim() == 2 && weight.scalar_type() == torch::kFloat && weight.device().is_cpu(),
              "int8: weight must be a float32 CPU matrix [out, in]");
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0) &&
                                  bias.scalar_type() == torch::kFloat && bias.device().is_cpu()),
              "int8: bias must be float32 [out] on CPU");
  // linear_prepack packs for the global engine: set it once, before the first pack.
  static c10::once_flag engine_set;
  c10::call_once(engine_set, [engine] { at::globalContext().setQEngine(engine); });
  torch::NoGradGuard no_grad;
  auto packed = std::make_shared<Packed>();
  const torch::Tensor w = weight.detach().contiguous();
  packed->out = w.size(0);
  packed->in = w.size(1);
  // An all-zero row gets scale 1 (its int8 weights are all 0 either way).
  auto max_abs = std::get<0>(w.abs().max(1));
  packed->scales = torch::where(max_abs > 0, max_abs / 127.0, torch::ones_like(max_abs)).contiguous();
  const torch::Tensor zero_points = torch::zeros({packed->out}, torch::kLong);
  const torch::Tensor wq = torch::quantize_per_channel(w, packed->scales.to(torch::kDouble), zero_points, 0, torch::kQInt8);
  packed->dequantized = wq.dequantize().contiguous();
  static auto prepack = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("quantized::linear_prepack", "")
                            .typed<c10::intrusive_ptr<LinearPackedParamsBase>(at::Tensor, c10::optional<at::Tensor>)>();
  c10::optional<at::Tensor> b;
  if (bias.defined()) b = bias.detach().contiguous();
  packed->params = prepack.call(wq, b);
  packed->reduce_range = !CpuHasInt8Dot();
  Int8Linear linear;
  linear.packed_ = std::move(packed);
  return linear;
}

bool Int8LinearApplies(const torch::Tensor& x) {
  return x.defined() && x.device().is_cpu() && x.scalar_type() == torch::kFloat && !at::GradMode::is_enabled();
}

torch::Tensor Int8Linear::Forward(const torch::Tensor& x) const {
  RECORD_FUNCTION("dserve::int8_linear", std::vector<c10::IValue>());
  TORCH_CHECK(defined(), "int8 linear: not packed");
  TORCH_CHECK(Int8LinearApplies(x) && x.dim() >= 1 && x.size(-1) == packed_->in,
              "int8 linear: input must be float32 [..., ", packed_->in, "] on CPU, autograd off");
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = packed_->out;
  const torch::Tensor rows = x.contiguous().view({-1, packed_->in});
  return packed_->params->apply_dynamic(rows, packed_->reduce_range).view(shape);
}

torch::Tensor Int8Linear::Forward(const torch::Tensor& x, const std::vector<int64_t>& lengths) const {
  RECORD_FUNCTION("dserve::int8_linear_per_sequence", std::vector<c10::IValue>());
  TORCH_CHECK(defined(), "int8 linear: not packed");
  TORCH_CHECK(Int8LinearApplies(x) && x.dim() == 3 && x.size(2) == packed_->in,
              "int8 linear: input must be float32 [B, L, ", packed_->in, "] on CPU, autograd off");
  const int64_t B = x.size(0), L = x.size(1);
  TORCH_CHECK(static_cast<int64_t>(lengths.size()) == B, "int8 linear: ", lengths.size(), " lengths for ", B,
              " sequences");
  for (int64_t n : lengths) TORCH_CHECK(n >= 0 && n <= L, "int8 linear: length ", n, " outside [0, ", L, "]");
  const torch::Tensor in = x.contiguous();
  auto out = torch::empty({B, L, packed_->out}, in.options());
  auto one = [&](int64_t b) {
    const int64_t n = lengths[static_cast<size_t>(b)];
    torch::Tensor row = out[b];
    if (n > 0) row.narrow(0, 0, n).copy_(packed_->params->apply_dynamic(in[b].narrow(0, 0, n), packed_->reduce_range));
    if (n < L) row.narrow(0, n, L - n).zero_();
  };
  if (B < 2 || at::get_num_threads() < 2 || at::in_parallel_region()) {
    for (int64_t b = 0; b < B; ++b) one(b);
    return out;
  }
  // Sequences spread over the intra-op threads, each GEMM single-threaded
  // inside (oneDNN runs one thread in a parallel region): one parallel
  // region per layer instead of one per sequence, whose barriers cost most
  // when another process holds a core. Each thread takes the next sequence,
  // longest first, so mixed lengths and a thread that is off its core
  // balance out. The workers inherit InferenceMode.
  std::vector<int64_t> order(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) order[static_cast<size_t>(b)] = b;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  std::atomic<int64_t> next{0};
  const bool inference = c10::InferenceMode::is_enabled();
  const int64_t workers = std::min<int64_t>(B, at::get_num_threads());
  at::parallel_for(0, workers, 1, [&](int64_t begin, int64_t end) {
    c10::InferenceMode guard(inference);
    for (int64_t w = begin; w < end; ++w) {
      for (int64_t i = next++; i < B; i = next++) one(order[static_cast<size_t>(i)]);
    }
  });
  return out;
}

std::vector<int64_t> ValidLengths(const torch::Tensor& attention_mask) {
  TORCH_CHECK(attention_mask.dim() == 2, "attention mask must be [B, L]");
  const int64_t L = attention_mask.size(1);
  // (j + 1) where mask[b, j] != 0, else 0; the max over j is the last valid row + 1.
  const torch::Tensor last = (attention_mask.ne(0).to(torch::kLong) *
                              torch::arange(1, L + 1, attention_mask.options().dtype(torch::kLong)))
                                 .amax(1)
                                 .to(torch::kCPU)
                                 .contiguous();
  const int64_t* p = last.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + last.numel());
}

int64_t Int8Linear::in_features() const { return packed_ ? packed_->in : 0; }
int64_t Int8Linear::out_features() const { return packed_ ? packed_->out : 0; }
const torch::Tensor& Int8Linear::weight_scales() const {
  TORCH_CHECK(defined(), "int8 linear: not packed");
  return packed_->scales;
}
const torch::Tensor& Int8Linear::dequantized_weight() const {
  TORCH_CHECK(defined(), "int8 linear: not packed");
  return packed_->dequantized;
}
int Int8Linear::activation_levels() const { return packed_ && packed_->reduce_range ? 127 : 255; }

}  // namespace dserve
