#include "model/deberta/cpu_kernels.h"

#include "model/deberta/dense_onednn.h"
#include "model/deberta/packed_linear.h"
#include "model/deberta/tile_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <immintrin.h>

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

// ------------------------------------------------------------ row kernels --
// Each has a portable version and AVX2 / AVX-512 versions written with
// intrinsics (GCC does not vectorise float reductions without -ffast-math,
// and the clamp of the old scalar exp became a branch); the best one for
// this CPU is picked once (RowKernelsForCpu).

// Queries per c2p block and keys per p2c block. A multiple of 16 so no
// vector of the gathers straddles two key blocks.
constexpr int64_t kBlock = 32;

// One query row of the position terms:
//   row[j] += c2p[idx[j] - c2p_lo]                                (c2p)
//   row[j] += p2c_band(j / kBlock)[(idx[j] - p2c_lo[j / kBlock]) * kBlock + j % kBlock]   (p2c)
// idx[j]: the table row of key j for this query, read from the reversed
// Toeplitz index (contiguous in j). c2p: this query's row of its block's
// band; p2c: the bands of the key blocks ([rows, kBlock] each, p2c_stride
// floats apart). Either may be null.
struct RelativeRow {
  float* row = nullptr;
  int64_t n = 0;
  const int32_t* idx = nullptr;
  const float* c2p = nullptr;
  int32_t c2p_lo = 0;
  const float* p2c = nullptr;
  const int32_t* p2c_lo = nullptr;
  int64_t p2c_stride = 0;
};

// exp(x) for x <= 0 (Cephes' expf: range reduction by ln 2 in two parts, a
// degree-6 polynomial, the exponent set through the bits); relative error
// ~1e-7. The vector versions below are the same steps.
constexpr float kExpLow = -87.0f, kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

inline float ExpNonPositive(float x) {
  x = std::max(x, kExpLow);
  const float t = x * kLog2e;
  const int n = static_cast<int>(t - 0.5f);  // round to nearest (t <= 0)
  const float fn = static_cast<float>(n);
  float z = x - fn * kLn2Hi;
  z = z - fn * kLn2Lo;
  float p = kExpP[0];
  for (int k = 1; k < 6; ++k) p = p * z + kExpP[k];
  p = p * z * z + z + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float Bf16ToFloat(uint16_t v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
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

// ---- portable

// In place: row <- softmax(row) over the keys with valid[j] != 0; masked keys
// get 0. A row with no valid key becomes uniform (as adding a huge negative
// bias to every key would give).
void SoftmaxRowScalar(float* row, const uint8_t* valid, int64_t n) {
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

void AddRelativeRowScalar(const RelativeRow& a) {
  for (int64_t j = 0; j < a.n; ++j) {
    if (a.c2p) a.row[j] += a.c2p[a.idx[j] - a.c2p_lo];
    if (a.p2c) {
      const int64_t kb = j / kBlock;
      a.row[j] += a.p2c[kb * a.p2c_stride + (a.idx[j] - a.p2c_lo[kb]) * kBlock + j % kBlock];
    }
  }
}

// out = LayerNorm(a + b) * w + bias over n values; b may be null. tmp holds
// the n float32 sums. Two passes (mean, then variance of the centred values).
void AddNormRowF32Scalar(const float* a, const float* b, const float* w, const float* bias, float eps, int64_t n,
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

void AddNormRowBf16Scalar(const uint16_t* a, const uint16_t* b, const uint16_t* w, const uint16_t* bias, float eps,
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

// ---- AVX-512 (F, BW, VL: masked byte / word loads for the tails)

#define DSERVE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))

DSERVE_AVX512 inline __mmask16 Tail16(int64_t left) {
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

DSERVE_AVX512 inline __m512 Exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(kExpLow));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(kLog2e));
  const __m512i n = _mm512_cvttps_epi32(_mm512_sub_ps(t, _mm512_set1_ps(0.5f)));
  const __m512 fn = _mm512_cvtepi32_ps(n);
  __m512 z = _mm512_fnmadd_ps(fn, _mm512_set1_ps(kLn2Hi), x);
  z = _mm512_fnmadd_ps(fn, _mm512_set1_ps(kLn2Lo), z);
  __m512 p = _mm512_set1_ps(kExpP[0]);
  for (int k = 1; k < 6; ++k) p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(kExpP[k]));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, z), z, z), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}

// The lanes of keys j .. j+15 that exist and may be attended to.
DSERVE_AVX512 inline __mmask16 Valid16(const uint8_t* valid, int64_t j, int64_t n) {
  const __mmask16 tail = Tail16(n - j);
  const __m128i v = _mm_maskz_loadu_epi8(tail, valid + j);
  return _mm_test_epi8_mask(v, v);
}

// The same for 16 keys that all exist (no tail).
DSERVE_AVX512 inline __mmask16 Valid16Full(const uint8_t* valid) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(valid));
  return _mm_test_epi8_mask(v, v);
}

DSERVE_AVX512 void SoftmaxRowAvx512(float* row, const uint8_t* valid, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf;
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    const __mmask16 v0 = Valid16Full(valid + j), v1 = Valid16Full(valid + j + 16);
    m0 = _mm512_mask_max_ps(m0, v0, m0, _mm512_loadu_ps(row + j));
    m1 = _mm512_mask_max_ps(m1, v1, m1, _mm512_loadu_ps(row + j + 16));
  }
  for (; j < n; j += 16) {
    const __mmask16 v0 = Valid16(valid, j, n);
    m0 = _mm512_mask_max_ps(m0, v0, m0, _mm512_maskz_loadu_ps(Tail16(n - j), row + j));
  }
  const float max = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
  if (max == -std::numeric_limits<float>::infinity()) {
    const __m512 u = _mm512_set1_ps(1.0f / static_cast<float>(n));
    for (j = 0; j < n; j += 16) _mm512_mask_storeu_ps(row + j, Tail16(n - j), u);
    return;
  }
  const __m512 vmax = _mm512_set1_ps(max);
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  j = 0;
  for (; j + 64 <= n; j += 64) {
    for (int k = 0; k < 4; ++k) {
      const __mmask16 v = Valid16Full(valid + j + 16 * k);
      const __m512 e = _mm512_maskz_mov_ps(v, Exp512(_mm512_sub_ps(_mm512_loadu_ps(row + j + 16 * k), vmax)));
      _mm512_storeu_ps(row + j + 16 * k, e);
      s[k] = _mm512_add_ps(s[k], e);
    }
  }
  for (; j < n; j += 16) {
    const __mmask16 tail = Tail16(n - j), v = Valid16(valid, j, n);
    const __m512 e = _mm512_maskz_mov_ps(v, Exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, row + j), vmax)));
    _mm512_mask_storeu_ps(row + j, tail, e);
    s[0] = _mm512_add_ps(s[0], e);
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3])));
  const __m512 inv = _mm512_set1_ps(1.0f / sum);
  for (j = 0; j < n; j += 16) {
    const __mmask16 tail = Tail16(n - j);
    _mm512_mask_storeu_ps(row + j, tail, _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, row + j), inv));
  }
}

DSERVE_AVX512 void AddRelativeRowAvx512(const RelativeRow& a) {
  const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i c2p_lo = _mm512_set1_epi32(a.c2p_lo);
  for (int64_t j = 0; j < a.n; j += 16) {
    const __mmask16 m = Tail16(a.n - j);
    const __m512i idx = _mm512_maskz_loadu_epi32(m, a.idx + j);
    __m512 s = _mm512_maskz_loadu_ps(m, a.row + j);
    if (a.c2p) {
      s = _mm512_add_ps(s, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, _mm512_sub_epi32(idx, c2p_lo), a.c2p, 4));
    }
    if (a.p2c) {
      const int64_t kb = j / kBlock;
      const __m512i col = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(j % kBlock)));
      const __m512i r = _mm512_sub_epi32(idx, _mm512_set1_epi32(a.p2c_lo[kb]));
      const __m512i at = _mm512_add_epi32(_mm512_mullo_epi32(r, _mm512_set1_epi32(kBlock)), col);
      s = _mm512_add_ps(s, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, at, a.p2c + kb * a.p2c_stride, 4));
    }
    _mm512_mask_storeu_ps(a.row + j, m, s);
  }
}

DSERVE_AVX512 inline __m512 Load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
DSERVE_AVX512 inline __m512 Load16(const uint16_t* p, __mmask16 m) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// tmp = a + b (b may be null); returns the mean and the variance (of the
// centred values), each sum over four accumulators.
template <typename E>
DSERVE_AVX512 inline void Moments512(const E* a, const E* b, int64_t n, float* tmp, float* mean, float* var) {
  __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  int64_t j = 0;
  const __mmask16 all = 0xFFFF;
  for (; j + 64 <= n; j += 64) {
    for (int k = 0; k < 4; ++k) {
      __m512 x = Load16(a + j + 16 * k, all);
      if (b) x = _mm512_add_ps(x, Load16(b + j + 16 * k, all));
      _mm512_storeu_ps(tmp + j + 16 * k, x);
      s[k] = _mm512_add_ps(s[k], x);
    }
  }
  for (; j < n; j += 16) {
    const __mmask16 m = Tail16(n - j);
    __m512 x = Load16(a + j, m);
    if (b) x = _mm512_add_ps(x, Load16(b + j, m));
    _mm512_mask_storeu_ps(tmp + j, m, x);
    s[0] = _mm512_add_ps(s[0], x);
  }
  *mean = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]))) /
          static_cast<float>(n);
  const __m512 vm = _mm512_set1_ps(*mean);
  for (auto& v : s) v = _mm512_setzero_ps();
  for (j = 0; j + 64 <= n; j += 64) {
    for (int k = 0; k < 4; ++k) {
      const __m512 c = _mm512_sub_ps(_mm512_loadu_ps(tmp + j + 16 * k), vm);
      s[k] = _mm512_fmadd_ps(c, c, s[k]);
    }
  }
  for (; j < n; j += 16) {
    const __mmask16 m = Tail16(n - j);
    const __m512 c = _mm512_maskz_sub_ps(m, _mm512_maskz_loadu_ps(m, tmp + j), vm);
    s[0] = _mm512_fmadd_ps(c, c, s[0]);
  }
  *var = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]))) /
         static_cast<float>(n);
}

DSERVE_AVX512 void AddNormRowF32Avx512(const float* a, const float* b, const float* w, const float* bias, float eps,
                                       int64_t n, float* tmp, float* out) {
  float mean, var;
  Moments512(a, b, n, tmp, &mean, &var);
  const __m512 vm = _mm512_set1_ps(mean), vi = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = Tail16(n - j);
    const __m512 c = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, tmp + j), vm), vi);
    _mm512_mask_storeu_ps(out + j, m,
                          _mm512_fmadd_ps(c, _mm512_maskz_loadu_ps(m, w + j), _mm512_maskz_loadu_ps(m, bias + j)));
  }
}

DSERVE_AVX512 void AddNormRowBf16Avx512(const uint16_t* a, const uint16_t* b, const uint16_t* w,
                                        const uint16_t* bias, float eps, int64_t n, float* tmp, uint16_t* out) {
  float mean, var;
  Moments512(a, b, n, tmp, &mean, &var);
  const __m512 vm = _mm512_set1_ps(mean), vi = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
  const __m512i round = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = Tail16(n - j);
    const __m512 c = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, tmp + j), vm), vi);
    const __m512 y = _mm512_fmadd_ps(c, Load16(w + j, m), Load16(bias + j, m));
    // Round to nearest even, as ToBf16.
    __m512i u = _mm512_castps_si512(y);
    u = _mm512_add_epi32(u, _mm512_add_epi32(round, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    _mm256_mask_storeu_epi16(out + j, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
  }
}

#undef DSERVE_AVX512

// ---- AVX2 (+FMA); tails through an 8-lane buffer or scalar code

#define DSERVE_AVX2 __attribute__((target("avx2,fma")))

DSERVE_AVX2 inline __m256 Exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(kExpLow));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(kLog2e));
  const __m256i n = _mm256_cvttps_epi32(_mm256_sub_ps(t, _mm256_set1_ps(0.5f)));
  const __m256 fn = _mm256_cvtepi32_ps(n);
  __m256 z = _mm256_fnmadd_ps(fn, _mm256_set1_ps(kLn2Hi), x);
  z = _mm256_fnmadd_ps(fn, _mm256_set1_ps(kLn2Lo), z);
  __m256 p = _mm256_set1_ps(kExpP[0]);
  for (int k = 1; k < 6; ++k) p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(kExpP[k]));
  p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, z), z, z), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// All-ones lanes for the keys j .. j+7 that may be attended to (8 readable bytes).
DSERVE_AVX2 inline __m256 Valid8(const uint8_t* valid) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(valid)));
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(v, _mm256_setzero_si256()));
}

DSERVE_AVX2 inline float ReduceAdd256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

DSERVE_AVX2 inline float ReduceMax256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// p[0..8) <- exp(p - max) on the valid keys, 0 elsewhere; returns the values.
DSERVE_AVX2 inline __m256 ExpStore8(float* p, const uint8_t* valid, __m256 vmax) {
  const __m256 e = _mm256_and_ps(Exp256(_mm256_sub_ps(_mm256_loadu_ps(p), vmax)), Valid8(valid));
  _mm256_storeu_ps(p, e);
  return e;
}

DSERVE_AVX2 void SoftmaxRowAvx2(float* row, const uint8_t* valid, int64_t n) {
  const int64_t full = n / 8 * 8, rest = n - full;
  // The tail as one padded vector: values 0, keys invalid past n.
  alignas(32) float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  alignas(8) uint8_t tail_valid[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(tail, row + full, sizeof(float) * rest);
  std::memcpy(tail_valid, valid + full, rest);
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 m0 = ninf, m1 = ninf;
  int64_t j = 0;
  for (; j + 16 <= full; j += 16) {
    m0 = _mm256_max_ps(m0, _mm256_blendv_ps(ninf, _mm256_loadu_ps(row + j), Valid8(valid + j)));
    m1 = _mm256_max_ps(m1, _mm256_blendv_ps(ninf, _mm256_loadu_ps(row + j + 8), Valid8(valid + j + 8)));
  }
  for (; j < full; j += 8) m0 = _mm256_max_ps(m0, _mm256_blendv_ps(ninf, _mm256_loadu_ps(row + j), Valid8(valid + j)));
  if (rest) m1 = _mm256_max_ps(m1, _mm256_blendv_ps(ninf, _mm256_load_ps(tail), Valid8(tail_valid)));
  const float max = ReduceMax256(_mm256_max_ps(m0, m1));
  if (max == -std::numeric_limits<float>::infinity()) {
    for (j = 0; j < n; ++j) row[j] = 1.0f / static_cast<float>(n);
    return;
  }
  const __m256 vmax = _mm256_set1_ps(max);
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  j = 0;
  for (; j + 32 <= full; j += 32) {
    for (int k = 0; k < 4; ++k) s[k] = _mm256_add_ps(s[k], ExpStore8(row + j + 8 * k, valid + j + 8 * k, vmax));
  }
  for (; j < full; j += 8) s[0] = _mm256_add_ps(s[0], ExpStore8(row + j, valid + j, vmax));
  if (rest) s[1] = _mm256_add_ps(s[1], ExpStore8(tail, tail_valid, vmax));
  const float sum = ReduceAdd256(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (j = 0; j < full; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
  if (rest) {
    _mm256_store_ps(tail, _mm256_mul_ps(_mm256_load_ps(tail), inv));
    std::memcpy(row + full, tail, sizeof(float) * rest);
  }
}

DSERVE_AVX2 void AddRelativeRowAvx2(const RelativeRow& a) {
  const __m256i iota = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i c2p_lo = _mm256_set1_epi32(a.c2p_lo);
  const int64_t full = a.n / 8 * 8;
  for (int64_t j = 0; j < full; j += 8) {
    const __m256i idx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.idx + j));
    __m256 s = _mm256_loadu_ps(a.row + j);
    if (a.c2p) s = _mm256_add_ps(s, _mm256_i32gather_ps(a.c2p, _mm256_sub_epi32(idx, c2p_lo), 4));
    if (a.p2c) {
      const int64_t kb = j / kBlock;
      const __m256i col = _mm256_add_epi32(iota, _mm256_set1_epi32(static_cast<int32_t>(j % kBlock)));
      const __m256i r = _mm256_sub_epi32(idx, _mm256_set1_epi32(a.p2c_lo[kb]));
      const __m256i at = _mm256_add_epi32(_mm256_mullo_epi32(r, _mm256_set1_epi32(kBlock)), col);
      s = _mm256_add_ps(s, _mm256_i32gather_ps(a.p2c + kb * a.p2c_stride, at, 4));
    }
    _mm256_storeu_ps(a.row + j, s);
  }
  for (int64_t j = full; j < a.n; ++j) {
    if (a.c2p) a.row[j] += a.c2p[a.idx[j] - a.c2p_lo];
    if (a.p2c) {
      const int64_t kb = j / kBlock;
      a.row[j] += a.p2c[kb * a.p2c_stride + (a.idx[j] - a.p2c_lo[kb]) * kBlock + j % kBlock];
    }
  }
}

DSERVE_AVX2 inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
DSERVE_AVX2 inline __m256 Load8(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
inline float ToFloat(float v) { return v; }
inline float ToFloat(uint16_t v) { return Bf16ToFloat(v); }

// tmp = a + b (b may be null); the mean and the variance (of the centred
// values), four accumulators, a scalar tail.
template <typename E>
DSERVE_AVX2 inline void Moments256(const E* a, const E* b, int64_t n, float* tmp, float* mean, float* var) {
  __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) {
    for (int k = 0; k < 4; ++k) {
      __m256 x = Load8(a + j + 8 * k);
      if (b) x = _mm256_add_ps(x, Load8(b + j + 8 * k));
      _mm256_storeu_ps(tmp + j + 8 * k, x);
      s[k] = _mm256_add_ps(s[k], x);
    }
  }
  for (; j + 8 <= n; j += 8) {
    __m256 x = Load8(a + j);
    if (b) x = _mm256_add_ps(x, Load8(b + j));
    _mm256_storeu_ps(tmp + j, x);
    s[0] = _mm256_add_ps(s[0], x);
  }
  const int64_t full = j;
  float sum = ReduceAdd256(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  for (; j < n; ++j) sum += (tmp[j] = b ? ToFloat(a[j]) + ToFloat(b[j]) : ToFloat(a[j]));
  *mean = sum / static_cast<float>(n);
  const __m256 vm = _mm256_set1_ps(*mean);
  for (auto& v : s) v = _mm256_setzero_ps();
  for (j = 0; j + 32 <= n; j += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(tmp + j + 8 * k), vm);
      s[k] = _mm256_fmadd_ps(c, c, s[k]);
    }
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(tmp + j), vm);
    s[0] = _mm256_fmadd_ps(c, c, s[0]);
  }
  float sq = ReduceAdd256(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), _mm256_add_ps(s[2], s[3])));
  for (j = full; j < n; ++j) sq += (tmp[j] - *mean) * (tmp[j] - *mean);
  *var = sq / static_cast<float>(n);
}

DSERVE_AVX2 void AddNormRowF32Avx2(const float* a, const float* b, const float* w, const float* bias, float eps,
                                   int64_t n, float* tmp, float* out) {
  float mean, var;
  Moments256(a, b, n, tmp, &mean, &var);
  const float inv = 1.0f / std::sqrt(var + eps);
  const __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(inv);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 c = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(tmp + j), vm), vi);
    _mm256_storeu_ps(out + j, _mm256_fmadd_ps(c, _mm256_loadu_ps(w + j), _mm256_loadu_ps(bias + j)));
  }
  for (; j < n; ++j) out[j] = (tmp[j] - mean) * inv * w[j] + bias[j];
}

DSERVE_AVX2 void AddNormRowBf16Avx2(const uint16_t* a, const uint16_t* b, const uint16_t* w, const uint16_t* bias,
                                    float eps, int64_t n, float* tmp, uint16_t* out) {
  float mean, var;
  Moments256(a, b, n, tmp, &mean, &var);
  const float inv = 1.0f / std::sqrt(var + eps);
  const __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(inv);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 c = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(tmp + j), vm), vi);
    _mm256_storeu_ps(tmp + j, _mm256_fmadd_ps(c, Load8(w + j), Load8(bias + j)));
  }
  for (; j < n; ++j) tmp[j] = (tmp[j] - mean) * inv * Bf16ToFloat(w[j]) + Bf16ToFloat(bias[j]);
  ToBf16(tmp, n, out);
}

#undef DSERVE_AVX2

struct RowKernels {
  const char* isa;
  void (*softmax)(float* row, const uint8_t* valid, int64_t n);
  void (*add_relative)(const RelativeRow& a);
  void (*add_norm_f32)(const float* a, const float* b, const float* w, const float* bias, float eps, int64_t n,
                       float* tmp, float* out);
  void (*add_norm_bf16)(const uint16_t* a, const uint16_t* b, const uint16_t* w, const uint16_t* bias, float eps,
                        int64_t n, float* tmp, uint16_t* out);
};

constexpr RowKernels kAvx512Kernels{"avx512", SoftmaxRowAvx512, AddRelativeRowAvx512, AddNormRowF32Avx512,
                                     AddNormRowBf16Avx512};
constexpr RowKernels kAvx2Kernels{"avx2", SoftmaxRowAvx2, AddRelativeRowAvx2, AddNormRowF32Avx2, AddNormRowBf16Avx2};
constexpr RowKernels kScalarKernels{"scalar", SoftmaxRowScalar, AddRelativeRowScalar, AddNormRowF32Scalar,
                                    AddNormRowBf16Scalar};

// The kernel sets this CPU can run, best first.
std::vector<const RowKernels*> SupportedRowKernels() {
  __builtin_cpu_init();
  std::vector<const RowKernels*> sets;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma")) {
    sets.push_back(&kAvx512Kernels);
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) sets.push_back(&kAvx2Kernels);
  sets.push_back(&kScalarKernels);
  return sets;
}

std::atomic<const RowKernels*>& ChosenRowKernels() {
  static std::atomic<const RowKernels*> chosen{SupportedRowKernels().front()};
  return chosen;
}

const RowKernels& RowKernelsForCpu() { return *ChosenRowKernels().load(std::memory_order_relaxed); }

struct Scratch {
  std::vector<float> scores, c2p, p2c, out;
  std::vector<int32_t> p2c_lo;
  std::vector<uint16_t> probs;
  // The packed micro-kernels' operands (tile_gemm.h): K^T and V of the
  // current (sequence, head), in T's element type.
  std::vector<float> kpack_f32, vpack_f32;
  std::vector<uint16_t> kpack_bf16, vpack_bf16;
};

#ifdef DSERVE_HAVE_DNNL
// Element type of the packed panels, and the packing / product calls for it.
template <typename T>
struct Packed;
template <>
struct Packed<float> {
  using E = float;
  static int64_t Stride(int64_t k) { return tile::PanelStrideF32(k); }
  static void Rows(const float* s, int64_t ld, int64_t n, int64_t k, E* d) { tile::PackRowsF32(s, ld, n, k, d); }
  static void Cols(const float* s, int64_t ld, int64_t k, int64_t n, E* d) { tile::PackColsF32(s, ld, k, n, d); }
  static void Gemm(int64_t m, int64_t n, int64_t k, const E* a, int64_t lda, const E* b, float* c, int64_t ldc) {
    tile::GemmF32(m, n, k, a, lda, b, c, ldc);
  }
  static std::vector<E>& K(Scratch& s) { return s.kpack_f32; }
  static std::vector<E>& V(Scratch& s) { return s.vpack_f32; }
};
template <>
struct Packed<c10::BFloat16> {
  using E = uint16_t;
  static const E* Raw(const c10::BFloat16* p) { return reinterpret_cast<const E*>(p); }
  static int64_t Stride(int64_t k) { return tile::PanelStrideBf16(k); }
  static void Rows(const c10::BFloat16* s, int64_t ld, int64_t n, int64_t k, E* d) {
    tile::PackRowsBf16(Raw(s), ld, n, k, d);
  }
  static void Cols(const c10::BFloat16* s, int64_t ld, int64_t k, int64_t n, E* d) {
    tile::PackColsBf16(Raw(s), ld, k, n, d);
  }
  static void Gemm(int64_t m, int64_t n, int64_t k, const E* a, int64_t lda, const E* b, float* c, int64_t ldc) {
    tile::GemmBf16(m, n, k, a, lda, b, c, ldc);
  }
  static std::vector<E>& K(Scratch& s) { return s.kpack_bf16; }
  static std::vector<E>& V(Scratch& s) { return s.vpack_bf16; }
};

// The packed micro-kernels run when the row kernels are the AVX-512 ones
// (so SetCpuKernelIsa("avx2") also tests the oneDNN path on an AVX-512
// machine) and the CPU has them; bf16 needs AVX512-BF16 and an even head
// size (k pairs). Otherwise every product goes through oneDNN's GEMM.
template <typename T>
bool UseTileMicroKernels(int64_t head_size) {
  if (std::strcmp(RowKernelsForCpu().isa, "avx512") != 0) return false;
  if constexpr (std::is_same<T, float>::value) {
    return tile::HaveF32();
  } else {
    return tile::HaveBf16() && head_size % 2 == 0;
  }
}

// rev[m] (m = j - i + L - 1, 2L - 1 entries): the table row (minus min_row)
// of query i against key j, non-increasing in m; query i's keys read
// rev + L - 1 - i, contiguous.
template <typename T>
void RunTiles(const FusedAttentionInput& in, const std::vector<int32_t>& rev, torch::Tensor& context) {
  const int64_t B = in.qkv.size(0), L = in.qkv.size(1), h = in.heads, d = in.head_size;
  const int64_t A = h * d, ld = 3 * A;
  const T* qkv = in.qkv.data_ptr<T>();
  const T* pos_key = in.pos_key.defined() ? in.pos_key.data_ptr<T>() : nullptr;
  const T* pos_query = in.pos_query.defined() ? in.pos_query.data_ptr<T>() : nullptr;
  const int64_t table_rows = pos_key ? in.pos_key.size(1) : pos_query ? in.pos_query.size(1) : 0;
  const uint8_t* keys = in.key_mask.data_ptr<uint8_t>();
  T* out = context.data_ptr<T>();
  constexpr bool kFloat = std::is_same<T, float>::value;
  using P = Packed<T>;
  using E = typename P::E;
  const RowKernels& kern = RowKernelsForCpu();
  const bool micro = UseTileMicroKernels<T>(d);
  // bf16 P x V: k pairs, so the probabilities' rows are padded to even.
  const int64_t probs_ld = kFloat || !micro ? L : (L + 1) / 2 * 2;
  // A block of queries or keys reads at most L + kBlock - 1 distinct rows.
  const int64_t key_blocks = (L + kBlock - 1) / kBlock, band = std::min<int64_t>(L + kBlock - 1, in.rows);
  // The c2p table packed once per head for all sequences (micro path): its
  // bands then start at a panel boundary, up to 15 columns before `lo`.
  const int64_t pk_stride = micro && pos_key ? tile::Panels(in.rows) * P::Stride(d) : 0;
  // The calling thread's buffer, reused across layers (every element is
  // written by the packing; no per-call allocation or zero fill).
  // The lambdas below run on other threads too, so they use this pointer
  // and never name the thread_local.
  thread_local std::vector<E> pk_buffer;
  if (pk_buffer.size() < static_cast<size_t>(pk_stride * h)) pk_buffer.resize(static_cast<size_t>(pk_stride * h));
  E* const pk_packed = pk_buffer.data();
  if (pk_stride > 0) {
    at::parallel_for(0, h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t head = begin; head < end; ++head)
        P::Rows(pos_key + (head * table_rows + in.min_row) * d, d, in.rows, d, pk_packed + head * pk_stride);
    });
  }

  at::parallel_for(0, B * h, 1, [&](int64_t begin, int64_t end) {
    thread_local Scratch s;
    s.scores.resize(kBlock * L);
    if (pos_key) s.c2p.resize(kBlock * (band + tile::kPanel));
    if (pos_query) {
      s.p2c.resize(key_blocks * band * kBlock);
      s.p2c_lo.resize(key_blocks);
    }
    if (!kFloat) {
      s.probs.resize(kBlock * probs_ld);
      s.out.resize(kBlock * d);
    }
    std::vector<E>& kpack = P::K(s);
    std::vector<E>& vpack = P::V(s);
    if (micro) {
      kpack.resize(tile::Panels(L) * P::Stride(d));
      vpack.resize(tile::Panels(d) * P::Stride(L));
    }
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / h, head = task % h;
      const T* q = qkv + b * L * ld + head * d;
      const T* k = q + A;
      const T* v = q + 2 * A;
      if (micro) {
        P::Rows(k, ld, L, d, kpack.data());
        P::Cols(v, ld, L, d, vpack.data());
      }
      // C[m, n] = Q-like rows [m, d] x K^T for keys j0 .. j0 + n (j0 a multiple of 16).
      auto times_keys = [&](int64_t m, const T* a, int64_t lda, int64_t j0, int64_t n, float* c, int64_t ldc) {
        if (micro) {
          P::Gemm(m, n, d, reinterpret_cast<const E*>(a), lda, kpack.data() + j0 / tile::kPanel * P::Stride(d), c,
                  ldc);
        } else {
          Gemm('N', 'T', m, n, d, a, lda, k + j0 * ld, ld, c, ldc);
        }
      };
      if (pos_query) {
        // p2c[i, j] = K_j . P_q[row(i, j)]: per block of keys, the band of
        // table rows its keys read, [rows, kBlock] (transposed: a query row
        // then gathers its block's 16 keys from one or two cache lines per row).
        for (int64_t kb = 0; kb < key_blocks; ++kb) {
          const int64_t j0 = kb * kBlock, nk = std::min(kBlock, L - j0);
          const int32_t lo = rev[j0 + nk + L - 2], hi = rev[j0];
          s.p2c_lo[kb] = lo;
          times_keys(hi - lo + 1, pos_query + (head * table_rows + in.min_row + lo) * d, d, j0, nk,
                     s.p2c.data() + kb * band * kBlock, kBlock);
        }
      }
      const uint8_t* valid = keys + b * L;
      for (int64_t i0 = 0; i0 < L; i0 += kBlock) {
        const int64_t nq = std::min(kBlock, L - i0);
        float* scores = s.scores.data();
        times_keys(nq, q + i0 * ld, ld, 0, L, scores, L);
        RelativeRow rel;
        rel.n = L;
        int64_t c2p_cols = 0;
        if (pos_key) {
          // c2p[i, j] = Q_i . P_k[row(i, j)], only the rows this block reads.
          const int32_t lo = rev[2 * L - 2 - i0], hi = rev[L - nq - i0];
          if (micro) {
            const int64_t first = lo / tile::kPanel;
            rel.c2p_lo = static_cast<int32_t>(first * tile::kPanel);
            c2p_cols = hi - rel.c2p_lo + 1;
            P::Gemm(nq, c2p_cols, d, reinterpret_cast<const E*>(q + i0 * ld), ld,
                    pk_packed + head * pk_stride + first * P::Stride(d), s.c2p.data(), c2p_cols);
          } else {
            rel.c2p_lo = lo;
            c2p_cols = hi - lo + 1;
            Gemm('N', 'T', nq, c2p_cols, d, q + i0 * ld, ld, pos_key + (head * table_rows + in.min_row + lo) * d, d,
                 s.c2p.data(), c2p_cols);
          }
        }
        if (pos_query) {
          rel.p2c = s.p2c.data();
          rel.p2c_lo = s.p2c_lo.data();
          rel.p2c_stride = band * kBlock;
        }
        for (int64_t ii = 0; ii < nq; ++ii) {
          float* row = scores + ii * L;
          if (pos_key || pos_query) {
            rel.row = row;
            rel.idx = rev.data() + (L - 1 - (i0 + ii));
            if (pos_key) rel.c2p = s.c2p.data() + ii * c2p_cols;
            kern.add_relative(rel);
          }
          kern.softmax(row, valid, L);
        }
        T* o = out + b * L * A + i0 * A + head * d;
        if constexpr (kFloat) {
          if (micro) {
            P::Gemm(nq, d, L, scores, L, vpack.data(), o, A);
          } else {
            Gemm('N', 'N', nq, d, L, scores, L, v, ld, o, A);
          }
        } else {
          uint16_t* probs = s.probs.data();
          for (int64_t ii = 0; ii < nq; ++ii) {
            ToBf16(scores + ii * L, L, probs + ii * probs_ld);
            if (probs_ld > L) probs[ii * probs_ld + L] = 0;  // the zero partner of the odd last key
          }
          if (micro) {
            P::Gemm(nq, d, probs_ld, probs, probs_ld, vpack.data(), s.out.data(), d);
          } else {
            Gemm('N', 'N', nq, d, L, reinterpret_cast<const c10::BFloat16*>(probs), L, v, ld, s.out.data(), d);
          }
          for (int64_t ii = 0; ii < nq; ++ii) ToBf16(s.out.data() + ii * d, d, reinterpret_cast<uint16_t*>(o + ii * A));
        }
      }
    }
  });
}
#endif

}  // namespace

std::string CpuKernelIsa() { return RowKernelsForCpu().isa; }

bool SetCpuKernelIsa(const std::string& isa) {
  for (const RowKernels* k : SupportedRowKernels()) {
    if (isa == k->isa) {
      ChosenRowKernels().store(k, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

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

std::string FusedAttentionGemm(torch::ScalarType dtype) {
#ifdef DSERVE_HAVE_DNNL
  if (dtype == torch::kFloat) return UseTileMicroKernels<float>(2) ? "avx512 micro-kernel" : "onednn";
  if (dtype == torch::kBFloat16 && OneDnnBf16GemmAvailable())
    return UseTileMicroKernels<c10::BFloat16>(2) ? "avx512_bf16 micro-kernel" : "onednn";
#endif
  return "none";
}

bool FusedBf16AttentionPays(int threads, int64_t head_size) {
#ifdef DSERVE_HAVE_DNNL
  return threads <= 1 || UseTileMicroKernels<c10::BFloat16>(head_size);
#else
  return threads <= 1;
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
  const RowKernels& kern = RowKernelsForCpu();
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> tmp;
    tmp.resize(n);
    for (int64_t i = begin; i < end; ++i) {
      if (bf16) {
        auto p = [&](const torch::Tensor& t) { return reinterpret_cast<const uint16_t*>(t.data_ptr<c10::BFloat16>()); };
        kern.add_norm_bf16(p(x) + i * n, r.defined() ? p(r) + i * n : nullptr, p(weight), p(bias), e, n, tmp.data(),
                           reinterpret_cast<uint16_t*>(out.data_ptr<c10::BFloat16>()) + i * n);
      } else {
        kern.add_norm_f32(x.data_ptr<float>() + i * n, r.defined() ? r.data_ptr<float>() + i * n : nullptr,
                          weight.data_ptr<float>(), bias.data_ptr<float>(), e, n, tmp.data(),
                          out.data_ptr<float>() + i * n);
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
  const int64_t L = in.qkv.size(1);
  const bool relative = in.pos_key.defined() || in.pos_query.defined();
  // The Toeplitz index, reversed (RunTiles reads it along keys), checked:
  // the bands assume rows within [0, rows) and monotonic in i - j.
  std::vector<int32_t> rev;
  if (relative && L > 0) {
    const torch::Tensor& t = in.relative_index;
    TORCH_CHECK(t.defined() && t.scalar_type() == torch::kInt && t.dim() == 1 && t.is_contiguous() &&
                    t.device().is_cpu() && t.size(0) == 2 * L - 1 && in.rows > 0,
                "fused attention: relative terms need the int32 [2L - 1] relative_index");
    const int32_t* by_rel = t.data_ptr<int32_t>();
    rev.resize(static_cast<size_t>(2 * L - 1));
    for (int64_t m = 0; m < 2 * L - 1; ++m) {
      rev[m] = by_rel[2 * L - 2 - m];
      TORCH_CHECK(rev[m] >= 0 && rev[m] < in.rows && (m == 0 || rev[m] <= rev[m - 1]),
                  "fused attention: relative_index must be non-decreasing within [0, rows)");
    }
  }
  for (const torch::Tensor* t : {&in.pos_key, &in.pos_query}) {
    TORCH_CHECK(!t->defined() || (t->is_contiguous() && t->scalar_type() == in.qkv.scalar_type() &&
                                  t->size(0) == in.heads && t->size(2) == in.head_size &&
                                  in.min_row + in.rows <= t->size(1)),
                "fused attention: position table must be contiguous [h, T, d] in qkv's dtype");
  }
  auto context = torch::empty({in.qkv.size(0), in.qkv.size(1), in.heads * in.head_size}, in.qkv.options());
#ifdef DSERVE_HAVE_DNNL
  if (in.qkv.scalar_type() == torch::kFloat) {
    RunTiles<float>(in, rev, context);
  } else {
    RunTiles<c10::BFloat16>(in, rev, context);
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

namespace {

// lo = min(0, x...), hi = max(0, x...) over n floats.
__attribute__((target("avx512f"))) void MinMaxAvx512(const float* x, int64_t n, float* lo, float* hi) {
  __m512 l0 = _mm512_setzero_ps(), h0 = _mm512_setzero_ps(), l1 = l0, h1 = h0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    l0 = _mm512_min_ps(l0, a);
    h0 = _mm512_max_ps(h0, a);
    l1 = _mm512_min_ps(l1, b);
    h1 = _mm512_max_ps(h1, b);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_loadu_ps(x + i);
    l0 = _mm512_min_ps(l0, a);
    h0 = _mm512_max_ps(h0, a);
  }
  float l = _mm512_reduce_min_ps(_mm512_min_ps(l0, l1)), h = _mm512_reduce_max_ps(_mm512_max_ps(h0, h1));
  for (; i < n; ++i) {
    l = std::min(l, x[i]);
    h = std::max(h, x[i]);
  }
  *lo = l;
  *hi = h;
}

// q = clamp(round(x * inv) + z, 0, levels), round half to even.
void QuantizeScalar(const float* x, int64_t n, float inv, float z, float levels, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(std::min(std::max(std::nearbyint(x[i] * inv) + z, 0.0f), levels));
}

__attribute__((target("avx512f"))) void QuantizeAvx512(const float* x, int64_t n, float inv, float z, float levels,
                                                      uint8_t* q) {
  const __m512 vinv = _mm512_set1_ps(inv), vz = _mm512_set1_ps(z), vmax = _mm512_set1_ps(levels);
  const __m512 vzero = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vinv),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, vz), vzero), vmax);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtusepi32_epi8(_mm512_cvtps_epi32(v)));
  }
  QuantizeScalar(x + i, n - i, inv, z, levels, q + i);
}

void MinMax(const float* x, int64_t n, float* lo, float* hi) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return MinMaxAvx512(x, n, lo, hi);
  float l = 0, h = 0;
  for (int64_t i = 0; i < n; ++i) {
    l = std::min(l, x[i]);
    h = std::max(h, x[i]);
  }
  *lo = l;
  *hi = h;
}

void Quantize(const float* x, int64_t n, float inv, float z, float levels, uint8_t* q) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return QuantizeAvx512(x, n, inv, z, levels, q);
  QuantizeScalar(x, n, inv, z, levels, q);
}

int DenseThreads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

}  // namespace

struct Int8Linear::Packed {
  c10::intrusive_ptr<LinearPackedParamsBase> params;  // LibTorch's path, when `dense` is null
  std::unique_ptr<PackedDenseInt8> dense;             // the pre-packed oneDNN brgemm path
  torch::Tensor scales;       // [N] float32
  torch::Tensor dequantized;  // [N, K] float32
  int64_t in = 0, out = 0;
  bool reduce_range = false;  // activations in 7 bits (levels 127)

  // The rows x [n, in] (contiguous) quantized with one range, into y [n, out]
  // (contiguous; y_rows >= n rows there may be written, the rest past n
  // with bias values when the rows are padded).
  void Dense(const float* x, int64_t n, float* y, int64_t y_rows) const {
    if (n <= 0) return;
    const int64_t q = PackedDenseInt8::kRowQuantum;
    const int64_t m = (n + q - 1) / q * q;
    thread_local std::vector<uint8_t> xq;
    thread_local std::vector<float> tmp;
    xq.resize(static_cast<size_t>(m * in));
    float lo = 0, hi = 0;
    MinMax(x, n * in, &lo, &hi);
    const float levels = reduce_range ? 127.0f : 255.0f;
    float a = (hi - lo) / levels;
    if (!(a > 0) || !std::isfinite(a)) a = 1.0f;  // all zero (or not finite: garbage either way)
    const float z = std::min(std::max(std::nearbyint(-lo / a), 0.0f), levels);
    Quantize(x, n * in, 1.0f / a, z, levels, xq.data());
    std::memset(xq.data() + n * in, static_cast<int>(z), static_cast<size_t>((m - n) * in));
    float* dst = y;
    if (m > y_rows) {
      tmp.resize(static_cast<size_t>(m * out));
      dst = tmp.data();
    }
    try {
      dense->Forward(xq.data(), m, static_cast<int32_t>(z), a, dst, DenseThreads());
    } catch (const std::runtime_error& e) {
      TORCH_CHECK(false, e.what());
    }
    if (dst != y) std::memcpy(y, dst, static_cast<size_t>(n * out) * sizeof(float));
  }

  torch::Tensor Rows(const torch::Tensor& rows) const {  // [n, in] contiguous
    if (!dense) return params->apply_dynamic(rows, reduce_range);
    auto y = torch::empty({rows.size(0), out}, rows.options());
    Dense(rows.data_ptr<float>(), rows.size(0), y.data_ptr<float>(), rows.size(0));
    return y;
  }
};

bool Int8Linear::PrePacked() const { return packed_ && packed_->dense; }

std::string Int8Linear::Implementation(int64_t m) const {
  TORCH_CHECK(defined(), "int8 linear: not packed");
  if (!packed_->dense) return "libtorch quantized::linear_dynamic (" + Int8Engine() + ")";
  const int64_t q = PackedDenseInt8::kRowQuantum;
  return packed_->dense->Implementation((m + q - 1) / q * q, DenseThreads());
}

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
  packed->reduce_range = !CpuHasInt8Dot();
  if (PackedLinearEnabled() && PackedDenseInt8::Available()) {
    const torch::Tensor w8 = wq.int_repr().contiguous();
    const torch::Tensor s32 = packed->scales.to(torch::kFloat).contiguous();
    try {
      packed->dense = PackedDenseInt8::Create(packed->in, packed->out, w8.data_ptr<int8_t>(), s32.data_ptr<float>(),
                                              b.has_value() ? b->to(torch::kFloat).contiguous().data_ptr<float>() : nullptr);
    } catch (const std::runtime_error&) {
      packed->dense.reset();  // LibTorch's path below
    }
  }
  if (!packed->dense) packed->params = prepack.call(wq, b);
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
  return packed_->Rows(rows).view(shape);
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
    if (packed_->dense) {
      packed_->Dense(in[b].data_ptr<float>(), n, row.data_ptr<float>(), L);
    } else if (n > 0) {
      row.narrow(0, 0, n).copy_(packed_->params->apply_dynamic(in[b].narrow(0, 0, n), packed_->reduce_range));
    }
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
