// Inference kernels for CPU that LibTorch 1.13 does not fuse.
//
// FusedAttention: disentangled self-attention fused per (batch row,
// head): scores, the c2p and p2c position terms, the key mask, softmax and
// the value product of one head run block by block (32 queries: a 32 x L
// tile that stays in cache). Banded: a block of queries (c2p) or keys (p2c)
// is multiplied only against the relative rows it reads (at L = 128, 159 of
// 255). The position terms are gathered through the Toeplitz index (one
// int32 per i - j) with AVX-512 / AVX2 gathers, and softmax is vectorised
// (branch-free exp, several partial sums), ISA chosen at run time,
// with GEMMs on the fused QKV projection (no permute copies): on AVX-512
// our register-tiled micro-kernels over K, V and the position tables packed
// once per (sequence, head) (tile_gemm.h; vdpbf16ps for bf16 with
// AVX512-BF16), elsewhere oneDNN's row-major GEMM (fp32 and bf16 -> fp32).
// Tiles are spread over torch's intra-op threads; each GEMM then runs
// single-threaded, so the many small GEMMs of attention pay no per-call
// threading cost (the batch-split bmm of this LibTorch build did: one
// multi-threaded OpenBLAS call per L x L matrix).
//
// FusedAddLayerNorm: LayerNorm(x + residual) in one pass per row, float32
// arithmetic for bf16 tensors too (this LibTorch's bf16 layer_norm was ~8x
// slower than its fp32 one); AVX-512 / AVX2 reductions with several
// accumulators.
//
// FusedLinear: float32 x W^T + b through oneDNN's sgemm, which measured
// 5-15% faster than this LibTorch's OpenBLAS path on the encoder's shapes
// (single-thread CPU time, M = 128 and 1024).
//
// Int8Linear: a Linear layer in int8 for `--dtype int8` (dynamic
// quantization): the weight quantized once at load, each input quantized on
// the fly, the product accumulated in int32 and returned in float32.
//
// The caller keeps the torch-op path for training (autograd, dropout), fp16,
// non-CPU devices and builds without oneDNN.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace dserve {

struct FusedAttentionInput {
  // [B, L, 3 * h * d] contiguous, the output of the fused QKV projection;
  // queries already carry the score scale 1/sqrt(d * (1 + #c2p + #p2c)).
  torch::Tensor qkv;
  int64_t heads = 0;
  int64_t head_size = 0;
  // [h, T, d] contiguous, the per-head projections of the relative table
  // (pos_query pre-scaled); either may be undefined (no c2p / no p2c).
  torch::Tensor pos_key;
  torch::Tensor pos_query;
  // [2L - 1] int32, the Toeplitz form of the relative index: entry
  // i - j + L - 1 is the table row of query i against key j, minus `min_row`
  // (RelativePositionMap::Table::by_rel shifted). Non-decreasing (rows are
  // monotonic in i - j), within [0, rows); rows min_row .. min_row + rows - 1
  // of the tables are used. Undefined without relative attention.
  torch::Tensor relative_index;
  int64_t min_row = 0;
  int64_t rows = 0;
  // [B, L] uint8, 1 for a key that may be attended to.
  torch::Tensor key_mask;
};

// Whether oneDNN's bf16 GEMM runs on this CPU (probed once). oneDNN
// implements it only with AVX-512 (avx512_core, natively with avx512_bf16 or
// AMX); on AVX2-only CPUs (AMD EPYC Zen 2/3, say) it returns "unimplemented",
// and bf16 attention then runs as torch ops.
bool OneDnnBf16GemmAvailable();

// The instruction set oneDNN dispatches its GEMMs to on this CPU
// (dnnl_get_effective_cpu_isa): "avx512_core_amx" (AMX tiles: bf16 and int8
// GEMMs on AMX), "avx512_core_bf16", "avx512_core_vnni", "avx512_core",
// "avx2_vnni", "avx2", ...; "unknown (0x..)" for a value this build does not
// name, "none" without oneDNN. For benchmark reports (issue 19: which ISA the
// bf16/int8 paths use).
std::string OneDnnIsa();

// The row kernels FusedAttention and FusedAddLayerNorm use on this CPU
// (softmax, the relative-term gathers, LayerNorm): "avx512" (AVX-512 F, BW,
// VL and FMA), "avx2" (AVX2 and FMA) or "scalar", the best the CPU has,
// chosen once.
std::string CpuKernelIsa();
// Uses `isa` ("avx512", "avx2", "scalar") from now on if this CPU can run
// it, for tests that check every path on one machine; returns false (and
// changes nothing) otherwise. Not for use while kernels run on other threads.
bool SetCpuKernelIsa(const std::string& isa);

// True when FusedAttention can run: built with oneDNN, CPU tensor, float32
// or bfloat16 (when OneDnnBf16GemmAvailable()), and autograd off.
bool FusedAttentionApplies(const torch::Tensor& qkv);

// The GEMMs FusedAttention runs for `dtype` (kFloat or kBFloat16) with this
// CPU's row kernels: "avx512 micro-kernel" / "avx512_bf16 micro-kernel"
// (model/deberta/tile_gemm.h, K and V packed once per sequence and head),
// "onednn" (oneDNN's row-major GEMM per product), "none" (no fused path).
std::string FusedAttentionGemm(torch::ScalarType dtype);

// Whether the callers should use FusedAttention for bf16 with `threads`
// intra-op threads and heads of `head_size`: with our bf16 micro-kernel
// (AVX512-BF16, even head size) always; through oneDNN's
// per-call bf16 GEMM only single-threaded (v3-base 8x128 at 2 threads it
// measured 0.72 s per forward against 0.63 s for torch's ops; at 1 thread
// the tile was faster, 1.14 vs 1.18 CPU s).
bool FusedBf16AttentionPays(int threads, int64_t head_size);

// The attention context [B, L, h * d] in qkv's dtype (before the output
// projection). Softmax and score accumulation in float32 for both dtypes.
torch::Tensor FusedAttention(const FusedAttentionInput& in);

// True when FusedLinear can run: float32 CPU tensors, autograd off, weight
// [N, K] contiguous, bias [N] or undefined.
bool FusedLinearApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// x [..., K] -> [..., N].
torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// True when FusedAddLayerNorm can run on x: CPU, float32 or bfloat16,
// contiguous, autograd off, weight and bias [H] of x's dtype.
bool FusedAddLayerNormApplies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

// LayerNorm over the last dimension of x + residual (residual may be
// undefined: LayerNorm(x)); residual like x. Result in x's dtype.
torch::Tensor FusedAddLayerNorm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                const torch::Tensor& bias, double eps);

// The quantized engine Int8Linear uses here: "onednn" (preferred: this
// LibTorch's oneDNN 2.6 runs u8 x s8 on VNNI / AMX-INT8 where the CPU has
// them), else "fbgemm"; "" when this LibTorch has neither (Debian's 1.13 has
// no fbgemm: its engines are qnnpack, onednn).
std::string Int8Engine();

// Dynamic int8 Linear. Where oneDNN has a brgemm int8 matmul (VNNI or AMX;
// PrePacked()), the weight is reordered once at Pack into its blocked layout
// and each call quantizes the rows with our AVX-512 loop and runs that
// matmul with the scales, zero point and bias in its epilogue
// (dense_onednn.h, PackedDenseInt8). Otherwise, and with
// DSERVE_PACKED_LINEAR=0, LibTorch's quantized ops (quantized::
// linear_prepack / linear_dynamic on Int8Engine()), which run oneDNN's
// plain gemm:jit with the weights repacked per call. (Against oneDNN's
// u8s8s32 GEMM API plus our own dequantize pass, LibTorch's op was faster:
// M = 1024, K = 768, N = 2304, 1 thread: 6.6 ms against 12.2 ms; fp32
// sgemm 21.6 ms; docs/performance.md.) Both compute the scheme below.
//
// Weights: per output channel j, symmetric: scale_j = max_k |W[j, k]| / 127,
// W_q[j, k] = round(W[j, k] / scale_j) in [-127, 127], zero point 0.
// Activations: per tensor (LibTorch's dynamic linear has no per-row mode),
// and with `lengths` per sequence over its valid rows only (below),
// asymmetric uint8 over [min(x, 0), max(x, 0)]: a = (max - min) / levels,
// z = round(-min / a), x_q = clamp(round(x / a) + z, 0, levels), where
// levels = activation_levels(): 255, or 127 on a CPU without VNNI (its
// u8 x s8 pair instruction saturates at int16 with full-range inputs).
// Result: y[i, j] = a * scale_j * sum_k (x_q[i, k] - z) W_q[j, k] + bias[j],
// bias in float32. So |x - x_dq| <= a per element (half a step of rounding,
// half a step of zero-point rounding) and |W - W_dq| <= scale_j / 2.
//
// One range over a whole padded batch made a sequence's result depend on
// the others in its batch and on its padding: on the cls_factorized golden, a
// batch of 4 moved an argmax (fp32 margin 0.49) that each sequence alone
// kept. Forward with `lengths` gives each sequence its own range over its
// valid rows, so its result is the same in any batch and with any padding.
//
// Thread safety: immutable after Pack; Forward is const and may run on
// several threads at once (LibTorch's oneDNN path keeps no per-call state in
// the packed weights; the pre-packed path keeps its quantized rows, output
// staging and scratchpad per calling thread, its primitives behind a lock).
class Int8Linear {
 public:
  Int8Linear() = default;
  // weight [N, K] float32 on CPU, bias [N] float32 or undefined. Throws
  // c10::Error when Int8Engine() is "" or the tensors are not like that.
  static Int8Linear Pack(const torch::Tensor& weight, const torch::Tensor& bias);

  bool defined() const { return packed_ != nullptr; }
  // x [..., K] float32 on CPU -> [..., N] float32, one activation range
  // for all of x.
  torch::Tensor Forward(const torch::Tensor& x) const;
  // x [B, L, K] right-padded sequences, lengths[b] in [0, L] the rows of
  // sequence b that count: each sequence's rows [0, lengths[b]) are
  // quantized with their own range and multiplied (one GEMM per sequence);
  // its rows past lengths[b] are padding, not computed, and 0 in the result.
  torch::Tensor Forward(const torch::Tensor& x, const std::vector<int64_t>& lengths) const;

  int64_t in_features() const;
  int64_t out_features() const;
  // The per-channel weight scales [N] float32 and the int8 weight [N, K]
  // dequantized (W_q * scale), for tests and error bounds.
  const torch::Tensor& weight_scales() const;
  const torch::Tensor& dequantized_weight() const;
  int activation_levels() const;
  // Whether this layer runs on the pre-packed oneDNN int8 matmul
  // (dense_onednn.h, PackedDenseInt8: weights reordered once, brgemm with
  // VNNI / AMX) rather than LibTorch's linear_dynamic (oneDNN's plain gemm,
  // weights not pre-packed); the former unless DSERVE_PACKED_LINEAR=0 or
  // oneDNN offers no brgemm int8 matmul on this CPU.
  bool PrePacked() const;
  // The implementation for m rows (ONEDNN_VERBOSE's name), for reports.
  std::string Implementation(int64_t m) const;

 private:
  struct Packed;
  std::shared_ptr<const Packed> packed_;
};

// True when Int8Linear::Forward can take x: float32, CPU, autograd off.
bool Int8LinearApplies(const torch::Tensor& x);

// Per row of a [B, L] attention mask (integer, any device): the index of its
// last nonzero entry + 1 (0 for an all-zero row), the rows of each sequence
// Int8Linear::Forward(x, lengths) computes.
std::vector<int64_t> ValidLengths(const torch::Tensor& attention_mask);

}  // namespace dserve
