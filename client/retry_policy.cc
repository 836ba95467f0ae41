#include "client/retry_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace dserve {

bool IsRetryableCode(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

bool IsRetryableStatus(const grpc::Status& status) {
  if (!IsRetryableCode(status.error_code())) return false;
  // gRPC core's size-limit errors, client or server side: "Received message
  // larger than max (N vs. M)", "Sent message larger than max (N vs. M)".
  return !(status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
           absl::StrContains(absl::AsciiStrToLower(status.error_message()), "message larger than max"));
}

absl::Duration BaseBackoff(const RetryPolicy& policy, int attempts_done) {
  const int exponent = std::max(0, attempts_done - 1);
  const double factor = std::pow(std::max(1.0, policy.multiplier), exponent);
  // Compare in doubles first: the product can overflow a Duration.
  const double cap_s = absl::ToDoubleSeconds(policy.max_backoff);
  const double delay_s = absl::ToDoubleSeconds(policy.initial_backoff) * factor;
  return absl::Seconds(std::min(delay_s, cap_s));
}

std::optional<absl::Duration> NextRetryDelay(const RetryPolicy& policy, int attempts_done,
                                             grpc::StatusCode code, absl::Time now,
                                             absl::Time deadline, double jitter_unit) {
  if (!IsRetryableCode(code) || attempts_done >= policy.max_attempts) return std::nullopt;
  const double jitter = std::clamp(policy.jitter, 0.0, 1.0);
  const double scale = 1.0 - jitter + 2.0 * jitter * std::clamp(jitter_unit, 0.0, 1.0);
  const absl::Duration delay = BaseBackoff(policy, attempts_done) * scale;
  if (now + delay >= deadline) return std::nullopt;
  return delay;
}

std::optional<absl::Duration> NextRetryDelay(const RetryPolicy& policy, int attempts_done,
                                             const grpc::Status& status, absl::Time now,
                                             absl::Time deadline, double jitter_unit) {
  if (!IsRetryableStatus(status)) return std::nullopt;
  return NextRetryDelay(policy, attempts_done, status.error_code(), now, deadline, jitter_unit);
}

}  // namespace dserve
