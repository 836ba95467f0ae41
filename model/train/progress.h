// Training progress on stderr and the per-run metrics CSV. Torch-free.
#pragma once

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace dserve {

// One line per update, at most once a second (and always for the last
// step): "step 120/400 [=====>    ] loss 0.4123 lr 4.1e-05 1234 tok/s ETA 1m05s",
// with "skipped 2 " before the ETA once steps were skipped for non-finite
// gradients.
// On a terminal the line is redrawn in place with '\r'; otherwise plain lines.
class ProgressLine {
 public:
  ProgressLine(int64_t total_steps, FILE* out, bool force_plain = false);
  void Update(int64_t step, double loss, double lr, double tokens_per_s, int64_t skipped = 0);
  // Ends a '\r' line so that other output starts on a fresh line.
  void Break();

 private:
  int64_t total_;
  FILE* out_;
  bool tty_;
  bool open_line_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t first_step_ = -1;
};

// OUT/metrics.csv: step,epoch,loss,lr,tokens_per_s,skipped_steps,<eval
// columns>; skipped_steps counts the steps so far whose gradients were not
// finite (no update). Opening
// an existing file for a resumed run keeps its rows up to `keep_until_step`
// (rows of steps lost in the crash are dropped) and appends.
class MetricsCsv {
 public:
  MetricsCsv() = default;
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;
  static absl::Status Open(const std::string& path, const std::vector<std::string>& eval_columns,
                           int64_t keep_until_step, MetricsCsv* csv);
  ~MetricsCsv();
  // `eval` maps eval column -> value for evaluation steps (may be empty).
  absl::Status Append(int64_t step, double epoch, double loss, double lr, double tokens_per_s, int64_t skipped_steps,
                      const std::map<std::string, double>& eval);

 private:
  FILE* file_ = nullptr;
  std::vector<std::string> eval_columns_;
};

}  // namespace dserve
