#include "model/deberta/tile_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace dserve::tile {

bool HaveF32() {
  static const bool have = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma");
  }();
  return have;
}

bool HaveBf16() {
  static const bool have = HaveF32() && __builtin_cpu_supports("avx512bf16");
  return have;
}

#define DSERVE_TILE_F32 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define DSERVE_TILE_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))

namespace {

constexpr int kRows = 8;    // rows of A per register tile
constexpr int kPanels = 2;  // panels of B per register tile: 8 x 32 outputs, 16 zmm accumulators

inline __mmask16 Mask(int64_t cols) {
  return cols >= kPanel ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1u);
}

DSERVE_TILE_F32 inline __m512i PanelIndex(int64_t ld) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int32_t>(ld)));
}

// The R x P accumulators of a register tile: cleared, and stored to C (the
// last panel only the columns in `last`).
template <int R, int P>
DSERVE_TILE_F32 inline __attribute__((always_inline)) void Zero(__m512 (&acc)[R][P]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
}
template <int R, int P>
DSERVE_TILE_F32 inline __attribute__((always_inline)) void Store(const __m512 (&acc)[R][P], float* c, int64_t ldc,
                                                                 __mmask16 last) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p)
      _mm512_mask_storeu_ps(c + r * ldc + p * kPanel, p == P - 1 ? last : static_cast<__mmask16>(0xFFFF), acc[r][p]);
}

// One register tile: R rows x P panels, k steps; the last panel stores
// only the columns in `last`.
template <int R, int P>
DSERVE_TILE_F32 void TileF32(int64_t k, const float* a, int64_t lda, const float* b, int64_t bstride, float* c,
                             int64_t ldc, __mmask16 last) {
  __m512 acc[R][P];
  Zero<R, P>(acc);
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 bv[P];
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) bv[p] = _mm512_loadu_ps(b + p * bstride + kk * kPanel);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + kk]);
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_fmadd_ps(av, bv[p], acc[r][p]);
    }
  }
  Store<R, P>(acc, c, ldc, last);
}

// The same over k pairs: vdpbf16ps adds A[r][2q] B[2q][j] + A[r][2q+1] B[2q+1][j]
// into fp32 lane j.
template <int R, int P>
DSERVE_TILE_BF16 void TileBf16(int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t bstride, float* c,
                               int64_t ldc, __mmask16 last) {
  __m512 acc[R][P];
  Zero<R, P>(acc);
  for (int64_t q = 0; q < k / 2; ++q) {
    __m512i bv[P];
#pragma GCC unroll 2
    for (int p = 0; p < P; ++p) bv[p] = _mm512_loadu_si512(b + p * bstride + q * 2 * kPanel);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * q, sizeof pair);
      const __m512i av = _mm512_set1_epi32(pair);
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)av, (__m512bh)bv[p]);
    }
  }
  Store<R, P>(acc, c, ldc, last);
}

template <typename E>
using TileFn = void (*)(int64_t, const E*, int64_t, const E*, int64_t, float*, int64_t, __mmask16);

template <typename E, template <int, int> class Pick>
struct Table {
  TileFn<E> fn[kRows][kPanels];
  template <int R>
  constexpr void Fill() {
    fn[R - 1][0] = Pick<R, 1>::fn;
    fn[R - 1][1] = Pick<R, 2>::fn;
    if constexpr (R > 1) Fill<R - 1>();
  }
  constexpr Table() : fn{} { Fill<kRows>(); }
};

template <int R, int P>
struct PickF32 {
  static constexpr TileFn<float> fn = TileF32<R, P>;
};
template <int R, int P>
struct PickBf16 {
  static constexpr TileFn<uint16_t> fn = TileBf16<R, P>;
};

// Panels two at a time (B's pair of panels stays in L1 across A's rows),
// A in blocks of kRows rows.
template <typename E>
void Drive(const TileFn<E> (&fn)[kRows][kPanels], int64_t m, int64_t n, int64_t k, const E* a, int64_t lda,
           const E* b, int64_t bstride, float* c, int64_t ldc) {
  const int64_t panels = Panels(n);
  for (int64_t p0 = 0; p0 < panels; p0 += kPanels) {
    const int64_t np = std::min<int64_t>(kPanels, panels - p0);
    const __mmask16 last = Mask(n - (p0 + np - 1) * kPanel);
    for (int64_t i = 0; i < m; i += kRows) {
      const int64_t r = std::min<int64_t>(kRows, m - i);
      fn[r - 1][np - 1](k, a + i * lda, lda, b + p0 * bstride, bstride, c + i * ldc + p0 * kPanel, ldc, last);
    }
  }
}

const Table<float, PickF32>& F32Table() {
  static const Table<float, PickF32> table;
  return table;
}
const Table<uint16_t, PickBf16>& Bf16Table() {
  static const Table<uint16_t, PickBf16> table;
  return table;
}

}  // namespace

DSERVE_TILE_F32 void PackRowsF32(const float* src, int64_t ld, int64_t n, int64_t k, float* dst) {
  const __m512i index = PanelIndex(ld);
  const int64_t stride = PanelStrideF32(k);
  for (int64_t p = 0; p < Panels(n); ++p) {
    const __mmask16 m = Mask(n - p * kPanel);
    const float* s = src + p * kPanel * ld;
    float* d = dst + p * stride;
    for (int64_t kk = 0; kk < k; ++kk)
      _mm512_storeu_ps(d + kk * kPanel, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, index, s + kk, 4));
  }
}

DSERVE_TILE_F32 void PackColsF32(const float* src, int64_t ld, int64_t k, int64_t n, float* dst) {
  const int64_t stride = PanelStrideF32(k);
  for (int64_t p = 0; p < Panels(n); ++p) {
    const __mmask16 m = Mask(n - p * kPanel);
    float* d = dst + p * stride;
    for (int64_t kk = 0; kk < k; ++kk)
      _mm512_storeu_ps(d + kk * kPanel, _mm512_maskz_loadu_ps(m, src + kk * ld + p * kPanel));
  }
}

DSERVE_TILE_F32 void PackRowsBf16(const uint16_t* src, int64_t ld, int64_t n, int64_t k, uint16_t* dst) {
  const __m512i index = PanelIndex(ld);
  const int64_t stride = PanelStrideBf16(k), pairs = k / 2;
  for (int64_t p = 0; p < Panels(n); ++p) {
    const int64_t cols = std::min<int64_t>(kPanel, n - p * kPanel);
    const __mmask16 m = Mask(cols);
    const uint16_t* s = src + p * kPanel * ld;
    uint16_t* d = dst + p * stride;
    // Pair q of row j is one 32-bit word at s + j * ld + 2q (scale 2: the
    // index counts 16-bit elements).
    for (int64_t q = 0; q < pairs; ++q)
      _mm512_storeu_si512(d + q * 2 * kPanel,
                          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, index, s + 2 * q, 2));
    if (k % 2 != 0) {  // the last pair: element k - 1, then zero (no read past the row)
      uint16_t* t = d + pairs * 2 * kPanel;
      std::memset(t, 0, 2 * kPanel * sizeof(uint16_t));
      for (int64_t j = 0; j < cols; ++j) t[2 * j] = s[j * ld + k - 1];
    }
  }
}

DSERVE_TILE_F32 void PackColsBf16(const uint16_t* src, int64_t ld, int64_t k, int64_t n, uint16_t* dst) {
  // Interleave row 2q's 16 columns with row 2q + 1's: lanes 0..15 of the
  // concatenation are the first row, 16..31 the second.
  const __m512i interleave = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004,
                                               0x00150005, 0x00160006, 0x00170007, 0x00180008, 0x00190009,
                                               0x001A000A, 0x001B000B, 0x001C000C, 0x001D000D, 0x001E000E,
                                               0x001F000F);
  const int64_t stride = PanelStrideBf16(k);
  for (int64_t p = 0; p < Panels(n); ++p) {
    const __mmask16 m = Mask(n - p * kPanel);
    uint16_t* d = dst + p * stride;
    for (int64_t q = 0; q < (k + 1) / 2; ++q) {
      const uint16_t* r0 = src + 2 * q * ld + p * kPanel;
      const __m256i lo = _mm256_maskz_loadu_epi16(m, r0);
      const __m256i hi = 2 * q + 1 < k ? _mm256_maskz_loadu_epi16(m, r0 + ld) : _mm256_setzero_si256();
      const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      _mm512_storeu_si512(d + q * 2 * kPanel, _mm512_permutexvar_epi16(interleave, both));
    }
  }
}

void GemmF32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, float* c, int64_t ldc) {
  Drive(F32Table().fn, m, n, k, a, lda, b, PanelStrideF32(k), c, ldc);
}

void GemmBf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, float* c,
              int64_t ldc) {
  Drive(Bf16Table().fn, m, n, k, a, lda, b, PanelStrideBf16(k), c, ldc);
}

}  // namespace dserve::tile
