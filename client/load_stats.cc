#include "client/load_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/dserve_client.h"

namespace dserve {

double PercentileOfSorted(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * n);
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

LoadReport Summarize(const std::vector<LoadSample>& samples, double elapsed_s) {
  LoadReport report;
  report.requests = static_cast<int64_t>(samples.size());
  report.elapsed_s = elapsed_s;
  std::vector<double> ok_latency;
  int64_t ok_items = 0;
  for (const LoadSample& s : samples) {
    ++report.codes[std::string(StatusCodeName(s.code))];
    if (s.code != grpc::StatusCode::OK) continue;
    ok_latency.push_back(s.latency_ms);
    ok_items += s.items;
  }
  report.ok = static_cast<int64_t>(ok_latency.size());
  if (elapsed_s > 0) {
    report.throughput_rps = report.ok / elapsed_s;
    report.items_per_s = ok_items / elapsed_s;
    report.completed_rps = report.requests / elapsed_s;
  }
  if (!ok_latency.empty()) {
    std::sort(ok_latency.begin(), ok_latency.end());
    report.mean_ms = std::accumulate(ok_latency.begin(), ok_latency.end(), 0.0) / ok_latency.size();
    report.p50_ms = PercentileOfSorted(ok_latency, 50);
    report.p90_ms = PercentileOfSorted(ok_latency, 90);
    report.p99_ms = PercentileOfSorted(ok_latency, 99);
    report.max_ms = ok_latency.back();
  }
  return report;
}

void ApplyWindowRates(const WindowCounts& window, double window_s, LoadReport* report) {
  if (window_s <= 0) return;
  report->elapsed_s = window_s;
  report->throughput_rps = window.ok / window_s;
  report->items_per_s = window.ok_items / window_s;
  report->completed_rps = window.completed / window_s;
}

nlohmann::json ReportToJson(const LoadReport& r) {
  nlohmann::json codes = nlohmann::json::object();
  for (const auto& [name, count] : r.codes) codes[name] = count;
  return {
      {"requests", r.requests},
      {"ok", r.ok},
      {"elapsed_s", r.elapsed_s},
      {"throughput_rps", r.throughput_rps},
      {"items_per_s", r.items_per_s},
      {"completed_rps", r.completed_rps},
      {"latency_ms",
       {{"mean", r.mean_ms}, {"p50", r.p50_ms}, {"p90", r.p90_ms}, {"p99", r.p99_ms},
        {"max", r.max_ms}}},
      {"codes", codes},
  };
}

std::string FormatReport(const LoadReport& r) {
  std::string out = absl::StrFormat(
      "requests:   %d (%d OK) in %.3f s\n"
      "throughput: %.1f req/s OK, %.1f items/s (%.1f req/s all outcomes)\n"
      "latency:    p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms  mean %.2f ms (OK calls)\n"
      "codes:     ",
      r.requests, r.ok, r.elapsed_s, r.throughput_rps, r.items_per_s, r.completed_rps, r.p50_ms,
      r.p90_ms, r.p99_ms, r.max_ms, r.mean_ms);
  for (const auto& [name, count] : r.codes) absl::StrAppend(&out, " ", name, "=", count);
  absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace dserve
