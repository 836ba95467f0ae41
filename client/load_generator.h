// The load generator behind `dserve-client load`.
//
// Closed loop (concurrency N): N calls in flight; each reply sends the next
// call at once. Open loop (rps R): call k is scheduled at start + k/R, fixed in
// advance, and its latency is measured from that scheduled time, so a slow
// server shows up as latency instead of silently lowering the offered load
// (no coordinated omission). Calls cycle through the inputs in order.
//
// The first `warmup_s` seconds run the same way but are not counted; then
// `requests` calls are counted, or all calls sent during `duration_s`.
// Latency percentiles are over the counted calls. Rates: with `requests`,
// counted calls over the time from the end of warm-up to the last reply;
// with `duration_s`, replies that arrive inside the window over its length
// (so the ramp-down after the window, while the last calls are answered, does
// not dilute a steady-state rate).
// Calls use the async callback API: a handful of gRPC threads drive any
// number of calls in flight. Calls are spread over `channels` connections.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "client/dserve_client.h"
#include "client/load_input.h"
#include "client/load_stats.h"

namespace dserve {

struct LoadOptions {
  // Counted calls; 0 = run for duration_s instead. Exactly one of the two.
  int64_t requests = 0;
  // Seconds during which counted calls are sent; 0 = use requests.
  double duration_s = 0;
  // Closed loop: calls in flight. Exactly one of concurrency and rps.
  int concurrency = 0;
  // Open loop: calls sent per second.
  double rps = 0;
  // Seconds of uncounted calls before measuring. Default 1.
  double warmup_s = 1;
  // gRPC channels (connections per backend) the calls are spread over.
  // Default 1.
  int channels = 1;
  // Where the once-a-second progress line goes (nullptr = none); with
  // progress_tty the line is rewritten in place.
  std::ostream* progress = nullptr;
  bool progress_tty = false;
  // How long to wait for the first connection. Default 10 s.
  double connect_timeout_s = 10;
  // Which service the calls go to: dserve.v1 Classify/Answer/Rerank, or the
  // Open Inference Protocol's ModelInfer with the same inputs as tensors.
  enum class Protocol { kDserve, kOip };
  Protocol protocol = Protocol::kDserve;
};

// Checks the combinations above; errors name the flags.
absl::Status ValidateLoadOptions(const LoadOptions& options);

// Runs the load against `client_options.target` and summarizes the counted
// calls. Fails when the target cannot be reached at all; call errors are
// counted in the report instead. When the target lists several addresses
// ("ipv4:a:1,b:2") and the policy is round-robin, no call is sent until every
// listed backend has answered a health check (or connect_timeout_s passes,
// with a warning on stderr), so the load is spread evenly from the first call.
absl::StatusOr<LoadReport> RunLoad(const ClientOptions& client_options, const LoadOptions& options,
                                   std::vector<LoadRequest> inputs);

}  // namespace dserve
