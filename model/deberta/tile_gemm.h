// Register-blocked GEMM micro-kernels for the fused attention tile (issue
// 27): C[M, N] = A[M, K] x B with B packed once into 16-column panels.
//
// Why: one (sequence, head) of attention makes 4 + L / 16 small GEMMs per
// block of 32 queries (QK^T, the c2p band, the p2c bands, P x V) against
// the same K, V and position rows. Through oneDNN's row-major GEMM API each
// call repacked its B (keys strided 3 * h * d floats apart, a multiple of
// 256 that lands every row in the same few L1 sets) and, in bf16
// (dnnl_gemm_bf16bf16f32), paid a per-call set-up that made the tile slower
// than torch's batched ops at 2 threads. Here K, V and the position tables
// are packed once per (sequence, head) or per head, and each product is a
// loop of 8-row x 32-column register tiles over the packed panels:
// vfmadd231ps in fp32, vdpbf16ps (AVX512-BF16: two bf16 products per fp32
// lane, accumulated in fp32) in bf16.
//
// Packed layout, per 16-column panel (zero padded past N and K):
//   fp32: [K][16] floats;  bf16: [ceil(K / 2)][16][2] values (k pairs).
// Panel p starts PanelStride(k) elements after panel p - 1.
//
// No LibTorch here (raw row-major buffers; bf16 as raw 16-bit values).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dserve::tile {

constexpr int64_t kPanel = 16;

// Whether this CPU runs the fp32 kernels (AVX-512 F/BW/VL, FMA) and the
// bf16 ones (also AVX512-BF16), probed once.
bool HaveF32();
bool HaveBf16();

// Elements between consecutive panels, and the whole packed size for N
// columns, in the element type (float or uint16_t).
inline int64_t PanelStrideF32(int64_t k) { return k * kPanel; }
inline int64_t PanelStrideBf16(int64_t k) { return (k + 1) / 2 * 2 * kPanel; }
inline int64_t Panels(int64_t n) { return (n + kPanel - 1) / kPanel; }

// B^T given as N rows of K values: B[k][n] = src[n * ld + k] (keys for
// QK^T, position rows for c2p).
void PackRowsF32(const float* src, int64_t ld, int64_t n, int64_t k, float* dst);
void PackRowsBf16(const uint16_t* src, int64_t ld, int64_t n, int64_t k, uint16_t* dst);
// B given as K rows of N values: B[k][n] = src[k * ld + n] (values for P x V).
void PackColsF32(const float* src, int64_t ld, int64_t k, int64_t n, float* dst);
void PackColsBf16(const uint16_t* src, int64_t ld, int64_t k, int64_t n, uint16_t* dst);

// C[i][j] = sum_k A[i][k] B[k][j] for i < m, j < n (C overwritten; columns
// past n are not written). `b` points at the first panel to use (column 0
// of C is that panel's column 0). bf16: k must be even (A's rows padded
// with zeros by the caller where the true K is odd).
void GemmF32(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, float* c, int64_t ldc);
void GemmBf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b, float* c,
              int64_t ldc);

}  // namespace dserve::tile
