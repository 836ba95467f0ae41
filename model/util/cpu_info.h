// What this machine's CPU can do, for the benchmark reports and for the
// tests whose path depends on it (bf16 kernels, AVX-512, AMX). Read from
// /proc/cpuinfo once; torch-free.
#pragma once

#include <string>
#include <vector>

namespace dserve {

// "model name" of the first processor ("unknown" when unreadable).
const std::string& CpuModelName();

// Whether the first processor's "flags" line lists `flag` exactly
// ("avx512f", "avx512_bf16", "amx_bf16", ...).
bool CpuHasFlag(const std::string& flag);

// The flags that decide our kernel paths, in a fixed order, comma-separated:
// a subset of fma,avx2,avx512f,avx512_bf16,amx_tile,amx_bf16,amx_int8.
std::string CpuIsaFlags();

// How a bf16 matmul runs here (oneDNN picks the best the CPU has):
//   "amx"          AMX tiles (amx_bf16): Intel Xeon Sapphire Rapids and later
//   "avx512_bf16"  native bf16 dot products (AMD Zen 4, Intel Cooper Lake)
//   "avx512f"      bf16 converted to fp32 and multiplied in AVX-512
//   "avx2"         converted to fp32 in AVX2
//   "scalar"       none of the above
std::string Bf16MatmulPath();

// One line for test and benchmark output: "cpu AMD EPYC ..., flags
// fma,avx2,..., bf16 matmul path avx512_bf16".
std::string CpuPathNote();

}  // namespace dserve
