// `dserve serve --dtype auto` (issue 27, "bf16 where it pays"): at load, a
// few forwards of the model in fp32 and in bf16 on one representative shape,
// with the workers' thread count; bf16 is served when it is faster and keeps
// fp32's argmax on the probe inputs. The same timing backs the warning for an
// explicit `--dtype bf16` that is slower than fp32 on this machine.
//
// The decision (ChooseAutoDtype) and the argmax comparison (CompareArgmax)
// are pure functions; ProbeDtypes runs the forwards (on a thread of its own,
// so the caller's intra-op thread setting is left alone). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/deberta/model.h"

namespace dserve {

// bf16 must be at least this much faster (fp32 s / bf16 s) to be chosen:
// within 5% the two are one figure on a machine shared with other work, and
// fp32 is the exact one, so near-ties go to fp32.
inline constexpr double kBf16MinSpeedup = 1.05;

// What the probe measured. Seconds are the fastest of the timed forwards of
// one batch (the minimum: other work on the machine only ever adds time).
struct DtypeProbe {
  int64_t rows = 0;    // probe batch: rows x length tokens
  int64_t length = 0;
  int threads = 0;     // intra-op threads, as one worker has
  int rounds = 0;      // timed forwards per dtype
  double fp32_s = 0;
  double bf16_s = 0;
  int compared = 0;    // argmax comparisons (rows x heads; 1 per batch for a 1-logit reranker)
  int disagreed = 0;   // of which bf16's argmax differs from fp32's
  double probe_s = 0;  // wall time of the whole probe, warm-up forwards included

  bool argmax_kept() const { return compared > 0 && disagreed == 0; }
  // fp32 s / bf16 s (> 1: bf16 faster); 0 when not measured.
  double bf16_speedup() const { return fp32_s > 0 && bf16_s > 0 ? fp32_s / bf16_s : 0.0; }
};

struct DtypeChoice {
  std::string dtype;   // "fp32" | "bf16"
  std::string reason;  // for the log line: why
};

// The --dtype auto decision. `bf16_offered`: whether this device runs bf16
// usefully (Bf16Offered); `probe`: the measurement, nullptr when none was
// made (bf16 not offered, or the bf16 load failed). bf16 when offered,
// measured, faster by kBf16MinSpeedup or more, and every argmax kept; else
// fp32.
DtypeChoice ChooseAutoDtype(bool bf16_offered, const DtypeProbe* probe);

// Whether an explicit --dtype bf16 deserves a warning: measured slower than
// fp32 (any margin), or an argmax changed. Empty string = no warning, else
// the warning's text (both figures).
std::string Bf16Warning(const DtypeProbe& probe);

// Whether bf16 may pay on `device` ("cpu", "cuda:N"): on CUDA yes; on a CPU
// only with native bf16 dot products (cpu_info.h Bf16MatmulPath(): "amx" or
// "avx512_bf16"); elsewhere oneDNN converts bf16 to fp32 and it cannot win.
// `why` (optional) gets the CPU's bf16 path for the log.
bool Bf16Offered(const std::string& device, std::string* why = nullptr);

// Compares the heads' argmax of `reference` (fp32) and `other` (bf16) for
// the same batch: each row's argmax over the labels (classify, num_labels >
// 1), the top row of the batch (a 1-logit reranker: which document ranks
// first), each row's argmax of start and of end logits (answer). A pair
// counts as disagreeing only when the reference separates the two picks by
// more than `tie` (an exact or near tie in fp32 has no argmax to keep).
struct ArgmaxComparison {
  int compared = 0;
  int disagreed = 0;
};
ArgmaxComparison CompareArgmax(const HeadOutputs& reference, const HeadOutputs& other, double tie = 1e-6);

struct DtypeProbeOptions {
  int threads = 1;  // intra-op threads of the probe's thread (the workers' count)
  // Budget for the timed forwards, seconds. After two untimed forwards of
  // one row in each dtype, the timed batch gets as many rows of the given
  // batch as let one round (a forward in each dtype) fit budget / 3 by the
  // second one-row figures (at least 2); rounds stop at 3 or when the next
  // would pass the budget (at least 1).
  double budget_s = 1.0;
};

// Times `fp32` and `bf16` (the same checkpoint loaded in both dtypes): two
// untimed forwards each on `batch`'s first row, then alternating timed
// forwards on its first rows (DtypeProbeOptions::budget_s), whose last
// outputs are the argmax comparison. `batch`: the largest batch to time
// (e.g. 8 x 128). Runs on a new thread with options.threads intra-op
// threads. Errors: a failed forward.
absl::StatusOr<DtypeProbe> ProbeDtypes(const DebertaModel& fp32, const DebertaModel& bf16, const TokenBatch& batch,
                                       const DtypeProbeOptions& options);

// The first `rows` rows of `batch` (same length).
TokenBatch FirstRows(const TokenBatch& batch, int64_t rows);

// One log-line fragment: "8x128, 1 thread: fp32 0.0123s, bf16 0.0071s (1.73x), argmax kept 8/8, probe 0.41s".
std::string DescribeProbe(const DtypeProbe& probe);

}  // namespace dserve
