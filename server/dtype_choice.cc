#include "server/dtype_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/util/cpu_info.h"

namespace dserve {
namespace {

// Index of the largest of values[begin, begin + n) relative to begin.
int64_t ArgMax(const std::vector<float>& values, size_t begin, int64_t n, int64_t stride = 1) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (values[begin + i * stride] > values[begin + best * stride]) best = i;
  }
  return best;
}

// One comparison: the other's pick disagrees when the reference scores it
// more than `tie` below its own pick.
void Compare(const std::vector<float>& ref, const std::vector<float>& other, size_t begin, int64_t n, int64_t stride,
             double tie, ArgmaxComparison* out) {
  if (n <= 0) return;
  const int64_t a = ArgMax(ref, begin, n, stride);
  const int64_t b = ArgMax(other, begin, n, stride);
  ++out->compared;
  if (a != b && ref[begin + a * stride] - ref[begin + b * stride] > tie) ++out->disagreed;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

DtypeChoice ChooseAutoDtype(bool bf16_offered, const DtypeProbe* probe) {
  if (!bf16_offered) return {"fp32", "bf16 not offered on this device"};
  if (probe == nullptr || probe->fp32_s <= 0 || probe->bf16_s <= 0) return {"fp32", "bf16 not measured"};
  if (!probe->argmax_kept()) {
    return {"fp32", probe->compared == 0 ? "no argmax to compare"
                                         : absl::StrCat("bf16 changed ", probe->disagreed, " of ", probe->compared,
                                                        " argmax")};
  }
  if (probe->bf16_speedup() < kBf16MinSpeedup) {
    return {"fp32", absl::StrFormat("bf16 not faster by %.0f%% or more", (kBf16MinSpeedup - 1) * 100)};
  }
  return {"bf16", "bf16 faster and argmax kept"};
}

std::string Bf16Warning(const DtypeProbe& probe) {
  std::string why;
  if (probe.fp32_s > 0 && probe.bf16_s > probe.fp32_s) {
    why = absl::StrFormat("bf16 is slower than fp32 on this machine (%.2fx)", probe.bf16_speedup());
  }
  if (probe.compared > 0 && probe.disagreed > 0) {
    absl::StrAppend(&why, why.empty() ? "" : "; ", "bf16 changed ", probe.disagreed, " of ", probe.compared,
                    " argmax of fp32");
  }
  if (why.empty()) return why;
  return absl::StrCat(why, " (", DescribeProbe(probe), "); --dtype auto would serve fp32");
}

bool Bf16Offered(const std::string& device, std::string* why) {
  if (device.rfind("cuda", 0) == 0) {
    if (why != nullptr) *why = device;
    return true;
  }
  const std::string path = Bf16MatmulPath();
  if (why != nullptr) *why = absl::StrCat("CPU bf16 matmul path ", path);
  return path == "amx" || path == "avx512_bf16";
}

ArgmaxComparison CompareArgmax(const HeadOutputs& reference, const HeadOutputs& other, double tie) {
  ArgmaxComparison out;
  const int64_t rows = std::min(reference.batch_size, other.batch_size);
  if (!reference.logits.empty() && reference.logits.size() == other.logits.size() &&
      reference.num_labels == other.num_labels && reference.num_labels > 0) {
    const int64_t labels = reference.num_labels;
    if (labels == 1) {
      if (rows > 1) Compare(reference.logits, other.logits, 0, rows, 1, tie, &out);  // the top document
    } else {
      for (int64_t r = 0; r < rows; ++r) Compare(reference.logits, other.logits, r * labels, labels, 1, tie, &out);
    }
  }
  if (!reference.start_logits.empty() && reference.start_logits.size() == other.start_logits.size() &&
      reference.end_logits.size() == other.end_logits.size() && reference.length == other.length) {
    const int64_t length = reference.length;
    for (int64_t r = 0; r < rows; ++r) {
      Compare(reference.start_logits, other.start_logits, r * length, length, 1, tie, &out);
      Compare(reference.end_logits, other.end_logits, r * length, length, 1, tie, &out);
    }
  }
  return out;
}

TokenBatch FirstRows(const TokenBatch& batch, int64_t rows) {
  rows = std::max<int64_t>(1, std::min(rows, batch.batch_size));
  const size_t n = static_cast<size_t>(rows * batch.length);
  TokenBatch out;
  out.batch_size = rows;
  out.length = batch.length;
  out.input_ids.assign(batch.input_ids.begin(), batch.input_ids.begin() + n);
  out.attention_mask.assign(batch.attention_mask.begin(), batch.attention_mask.begin() + n);
  if (!batch.token_type_ids.empty()) out.token_type_ids.assign(batch.token_type_ids.begin(), batch.token_type_ids.begin() + n);
  return out;
}

absl::StatusOr<DtypeProbe> ProbeDtypes(const DebertaModel& fp32, const DebertaModel& bf16, const TokenBatch& batch,
                                       const DtypeProbeOptions& options) {
  absl::StatusOr<DtypeProbe> result = absl::InternalError("probe did not run");
  // A thread of its own: intra-op threads are a per-thread setting, and the
  // caller's (the start-up thread's) must stay as it is.
  std::thread([&] {
    const auto started = std::chrono::steady_clock::now();
    ConfigureInferenceThread(options.threads);
    DtypeProbe probe;
    probe.threads = options.threads;
    probe.length = batch.length;
    auto run = [](const DebertaModel& model, const TokenBatch& b, double* seconds) -> absl::StatusOr<HeadOutputs> {
      const auto t0 = std::chrono::steady_clock::now();
      auto out = model.Run(b);
      *seconds = Seconds(t0);
      if (!out.ok()) {
        return absl::Status(out.status().code(),
                            absl::StrCat("dtype probe: ", model.dtype(), " forward failed: ", out.status().message()));
      }
      return out;
    };
    // Warm-up: one row, twice each (first calls set up kernels, allocator
    // pools and, first in the process, OpenMP's threads; cheap even for a
    // large model). The second figures size the timed batch.
    const TokenBatch one = FirstRows(batch, 1);
    double warm32 = 0, warm16 = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto [model, seconds] : {std::pair{&fp32, &warm32}, std::pair{&bf16, &warm16}}) {
        if (auto out = run(*model, one, seconds); !out.ok()) {
          result = out.status();
          return;
        }
      }
    }
    // As many rows as let one round of both dtypes fit budget / 3, judged
    // by the one-row forwards (an overestimate per row: set-up included, and
    // a row costs less in a bigger batch); at least 2, so that a reranker's
    // top row can be compared.
    const double per_row = std::max(1e-9, warm32 + warm16);
    const int64_t rows = std::clamp<int64_t>(static_cast<int64_t>(std::floor(options.budget_s / 3 / per_row)),
                                             std::min<int64_t>(2, batch.batch_size), batch.batch_size);
    const TokenBatch timed = FirstRows(batch, rows);
    probe.rows = rows;
    probe.fp32_s = probe.bf16_s = 1e30;
    HeadOutputs out32, out16;
    double spent = 0;
    while (probe.rounds < 3 && (probe.rounds == 0 || spent + (probe.fp32_s + probe.bf16_s) <= options.budget_s)) {
      double s32 = 0, s16 = 0;
      auto a = run(fp32, timed, &s32);
      if (!a.ok()) {
        result = a.status();
        return;
      }
      auto b = run(bf16, timed, &s16);
      if (!b.ok()) {
        result = b.status();
        return;
      }
      probe.fp32_s = std::min(probe.fp32_s, s32);
      probe.bf16_s = std::min(probe.bf16_s, s16);
      spent += s32 + s16;
      ++probe.rounds;
      out32 = *std::move(a);
      out16 = *std::move(b);
    }
    const ArgmaxComparison argmax = CompareArgmax(out32, out16);
    probe.compared = argmax.compared;
    probe.disagreed = argmax.disagreed;
    probe.probe_s = Seconds(started);
    result = probe;
  }).join();
  return result;
}

std::string DescribeProbe(const DtypeProbe& p) {
  return absl::StrFormat("%dx%d, %d thread%s, %d round%s: fp32 %.4fs, bf16 %.4fs (bf16 %.2fx), argmax kept %d/%d, "
                         "probe %.2fs",
                         p.rows, p.length, p.threads, p.threads == 1 ? "" : "s", p.rounds, p.rounds == 1 ? "" : "s",
                         p.fp32_s, p.bf16_s, p.bf16_speedup(), p.compared - p.disagreed, p.compared, p.probe_s);
}

}  // namespace dserve
