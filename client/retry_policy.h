// Retry decisions of the dserve client, as pure functions (no clock, no
// randomness of their own) so that tests can check every branch.
//
// Only UNAVAILABLE (server draining, connection lost) and RESOURCE_EXHAUSTED
// (queue full) are retried: both mean "this replica cannot take the call
// now" and the call did no work. Every other code is final, and so is a
// RESOURCE_EXHAUSTED for a message over gRPC's size limit ("Received / Sent
// message larger than max"): the same message fails again on every replica.
// A request with more items than the server's queue holds is
// INVALID_ARGUMENT (final) for the same reason.
#pragma once

#include <optional>

#include <grpcpp/support/status.h>

#include "absl/time/time.h"

namespace dserve {

struct RetryPolicy {
  // Attempts in all, the first one included; 1 = never retry. Default 3.
  int max_attempts = 3;
  // Delay before the second attempt. Default 50 ms (a batch window is ~2 ms,
  // a drain lasts seconds: short first, then growing).
  absl::Duration initial_backoff = absl::Milliseconds(50);
  // Each further delay is the previous one times this. Default 2.
  double multiplier = 2.0;
  // Cap on a single delay before jitter. Default 2 s.
  absl::Duration max_backoff = absl::Seconds(2);
  // Relative jitter: the delay is scaled by a factor uniform in
  // [1 - jitter, 1 + jitter), so that clients rejected together do not come
  // back together. Default 0.2; 0 = none.
  double jitter = 0.2;
};

// True for the codes worth another attempt (UNAVAILABLE, RESOURCE_EXHAUSTED).
bool IsRetryableCode(grpc::StatusCode code);

// True for the statuses worth another attempt: a retryable code, except a
// message over the size limit (see the file comment).
bool IsRetryableStatus(const grpc::Status& status);

// The delay before attempt `attempts_done + 1` without jitter:
// min(max_backoff, initial_backoff * multiplier^(attempts_done - 1)).
// `attempts_done` >= 1.
absl::Duration BaseBackoff(const RetryPolicy& policy, int attempts_done);

// Whether and after how long to retry a call whose attempt number
// `attempts_done` (1-based) just ended with `code` at `now`. Returns nullopt
// when the code is final, the attempts are used up, or the retry would start
// at or after `deadline` (the call's overall deadline; absl::InfiniteFuture()
// for none). `jitter_unit` is a uniform draw from [0, 1) supplied by the
// caller.
std::optional<absl::Duration> NextRetryDelay(const RetryPolicy& policy, int attempts_done,
                                             grpc::StatusCode code, absl::Time now,
                                             absl::Time deadline, double jitter_unit);
// The same for a whole status: nullopt also when !IsRetryableStatus(status).
std::optional<absl::Duration> NextRetryDelay(const RetryPolicy& policy, int attempts_done,
                                             const grpc::Status& status, absl::Time now,
                                             absl::Time deadline, double jitter_unit);

}  // namespace dserve
