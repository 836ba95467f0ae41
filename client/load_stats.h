// Report math of `dserve-client load`: exact latency percentiles (every
// sample kept, sorted once at the end), throughput and status-code counts.
// Pure functions; no clock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <grpcpp/support/status.h>
#include <nlohmann/json.hpp>

namespace dserve {

// One finished call.
struct LoadSample {
  // From the (scheduled) send time to the reply, milliseconds.
  double latency_ms = 0;
  grpc::StatusCode code = grpc::StatusCode::OK;
  // Inputs the request carried (texts, contexts, documents).
  int items = 0;
};

// Nearest-rank percentile of ascending `sorted` values, p in [0, 100]: the
// smallest value with at least p% of the values <= it (p = 0 gives the
// minimum). 0 for an empty list.
double PercentileOfSorted(const std::vector<double>& sorted, double p);

struct LoadReport {
  // Counted calls (sent after warm-up) and how many were OK.
  int64_t requests = 0;
  int64_t ok = 0;
  // The time the rates are over, seconds: the measuring window with
  // --duration-s, else from the end of warm-up to the last counted reply.
  double elapsed_s = 0;
  // OK calls per second, and their items per second.
  double throughput_rps = 0;
  double items_per_s = 0;
  // Calls of any outcome per second.
  double completed_rps = 0;
  // Latency of the OK calls, milliseconds (0 when none).
  double mean_ms = 0;
  double p50_ms = 0;
  double p90_ms = 0;
  double p99_ms = 0;
  double max_ms = 0;
  // Count per status code name ("OK", "RESOURCE_EXHAUSTED", ...).
  std::map<std::string, int64_t> codes;
};

// Summarizes the samples of a run that lasted `elapsed_s` (> 0 for rates).
LoadReport Summarize(const std::vector<LoadSample>& samples, double elapsed_s);

// Replies that arrived inside a fixed measuring window, whenever their call
// was sent.
struct WindowCounts {
  int64_t completed = 0;
  int64_t ok = 0;
  int64_t ok_items = 0;
};

// Replaces the rates of `report` with those of the window (`window_s` > 0
// seconds long): the steady-state rate, free of the ramp-down at the end of a
// run, when the last calls sent are still being answered.
void ApplyWindowRates(const WindowCounts& window, double window_s, LoadReport* report);

nlohmann::json ReportToJson(const LoadReport& report);
// Multi-line human-readable report.
std::string FormatReport(const LoadReport& report);

}  // namespace dserve
