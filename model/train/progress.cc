#include "model/train/progress.h"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace dserve {
namespace {

std::string Duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

ProgressLine::ProgressLine(int64_t total_steps, FILE* out, bool force_plain)
    : total_(total_steps), out_(out), tty_(!force_plain && isatty(fileno(out))) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void ProgressLine::Update(int64_t step, double loss, double lr, double tokens_per_s, int64_t skipped) {
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    first_step_ = step - 1;
    start_ = now;
  }
  const bool last = step >= total_;
  if (!last && std::chrono::duration<double>(now - last_).count() < 1.0 && step != first_step_ + 1) return;
  last_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int64_t done = step - first_step_;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(total_ - step) : NAN;
  std::string bar;
  if (tty_) {
    const int width = 24;
    const int filled = total_ > 0 ? static_cast<int>(width * step / total_) : 0;
    bar = absl::StrCat(" [", std::string(static_cast<size_t>(filled), '='),
                       filled < width ? ">" : "", std::string(static_cast<size_t>(std::max(0, width - filled - 1)), ' '), "]");
  }
  const std::string skips = skipped > 0 ? absl::StrFormat("skipped %d ", skipped) : "";
  const std::string line = absl::StrFormat("step %d/%d%s loss %.4f lr %.3g %.0f tok/s %sETA %s", step, total_, bar,
                                           loss, lr, tokens_per_s, skips, Duration(eta));
  if (tty_) {
    std::fprintf(out_, "\r%s\033[K", line.c_str());
    open_line_ = true;
    if (last) Break();
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressLine::Break() {
  if (open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    open_line_ = false;
  }
}

absl::Status MetricsCsv::Open(const std::string& path, const std::vector<std::string>& eval_columns,
                              int64_t keep_until_step, MetricsCsv* csv) {
  csv->eval_columns_ = eval_columns;
  std::vector<std::string> header = {"step", "epoch", "loss", "lr", "tokens_per_s", "skipped_steps"};
  header.insert(header.end(), eval_columns.begin(), eval_columns.end());
  std::vector<std::string> kept;
  if (keep_until_step > 0) {
    std::ifstream in(path);
    std::string line;
    bool first = true;
    while (std::getline(in, line)) {
      if (first) {
        first = false;
        continue;
      }
      std::vector<std::string> cells = absl::StrSplit(line, ',');
      int64_t step = 0;
      if (cells.empty() || !absl::SimpleAtoi(cells[0], &step)) continue;
      if (step <= keep_until_step) kept.push_back(line);
    }
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat(path, ": cannot write"));
    out << absl::StrJoin(header, ",") << "\n";
    for (const auto& l : kept) out << l << "\n";
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return absl::InternalError(absl::StrCat(path, ": cannot rename"));
  csv->file_ = std::fopen(path.c_str(), "a");
  if (csv->file_ == nullptr) return absl::InternalError(absl::StrCat(path, ": cannot open for appending"));
  return absl::OkStatus();
}

MetricsCsv::~MetricsCsv() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status MetricsCsv::Append(int64_t step, double epoch, double loss, double lr, double tokens_per_s,
                                int64_t skipped_steps, const std::map<std::string, double>& eval) {
  if (file_ == nullptr) return absl::OkStatus();
  std::string line =
      absl::StrFormat("%d,%.6f,%.9g,%.9g,%.1f,%d", step, epoch, loss, lr, tokens_per_s, skipped_steps);
  for (const auto& c : eval_columns_) {
    auto it = eval.find(c);
    line += ",";
    if (it != eval.end()) line += absl::StrFormat("%.9g", it->second);
  }
  std::fprintf(file_, "%s\n", line.c_str());
  std::fflush(file_);
  return absl::OkStatus();
}

}  // namespace dserve
