// `dserve bench encoder`: encoder throughput on a DeBERTa-v3-shaped model with
// random weights, beside the machine's measured matmul peak, in one run.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace dserve {

struct EncoderBenchOptions {
  std::string shape = "v3-base";       // v3-xsmall | v3-small | v3-base | v3-large | deberta-base | deberta-large (v1) | albert-base | path to config.json
  int batch_size = 8;
  int length = 128;
  int repeats = 5;                     // timed forwards per dtype (median reported)
  int warmup = 2;
  int threads = 0;                     // intra-op threads; 0 = all cores
  std::vector<std::string> dtypes = {"fp32", "bf16"};
  std::string device = "cpu";          // cpu | cuda | cuda:N (timings synchronise the device)
  bool json = false;                   // one JSON object instead of a table
  // When set: after timing, one more forward per dtype runs under the torch
  // profiler; its Chrome trace goes to PROFILE.<dtype>.json and the ops with
  // the most self time are printed (bench/profile_summary.py reads it too).
  std::string profile;
  // Also time each dtype with torch ops only (fused CPU kernels off): their
  // before/after, side by side in one run.
  bool compare_unfused = false;
  // Also time each dtype with one kernel off at a time (rows
  // <dtype>-no-<kernel>) and all off: the before/after of each.
  bool ablate_kernels = false;
};

// Prints the machine (nproc, CPU model, ISA flags), the matmul GFLOP/s per
// dtype, and per dtype the median forward time, sequences/s, model GFLOP/s
// and its share of the matmul peak. Returns the exit code.
int RunEncoderBench(const EncoderBenchOptions& options, std::ostream& out, std::ostream& err);

// Floating-point operations of one encoder forward (matmuls only), the
// figure model-FLOP utilisation is computed from: the model's maths, not the
// work a kernel happens to execute (c2p and p2c count L x L products each,
// `positional_terms` of them: 0 without relative attention).
double EncoderForwardFlops(int64_t batch, int64_t length, int64_t hidden, int64_t layers,
                           int64_t intermediate, int positional_terms);

}  // namespace dserve
