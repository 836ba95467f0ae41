#include "client/retry_policy.h"

#include <gtest/gtest.h>

namespace dserve {
namespace {

constexpr absl::Time kNow = absl::FromUnixSeconds(1000);

RetryPolicy NoJitter() {
  RetryPolicy p;
  p.max_attempts = 10;
  p.initial_backoff = absl::Milliseconds(50);
  p.multiplier = 2;
  p.max_backoff = absl::Seconds(1);
  p.jitter = 0;
  return p;
}

TEST(RetryPolicyTest, OnlyUnavailableAndResourceExhaustedRetry) {
  int retryable = 0;
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<grpc::StatusCode>(c);
    const bool expected =
        code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::RESOURCE_EXHAUSTED;
    EXPECT_EQ(IsRetryableCode(code), expected) << c;
    EXPECT_EQ(NextRetryDelay(NoJitter(), 1, code, kNow, absl::InfiniteFuture(), 0.5).has_value(),
              expected)
        << c;
    retryable += expected;
  }
  EXPECT_EQ(retryable, 2);
}

// Issue 16: what can succeed on another attempt is retried, a message over
// the size limit (RESOURCE_EXHAUSTED from gRPC core) is not.
TEST(RetryPolicyTest, MessageTooLargeIsFinal) {
  const auto exhausted = grpc::StatusCode::RESOURCE_EXHAUSTED;
  EXPECT_TRUE(IsRetryableStatus(grpc::Status(exhausted, "queue full for model 'm': 16 items queued")));
  EXPECT_TRUE(IsRetryableStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is draining")));
  for (const char* message : {"Received message larger than max (5000000 vs. 4194304)",
                              "Sent message larger than max (5000000 vs. 4194304)"}) {
    const grpc::Status status(exhausted, message);
    EXPECT_FALSE(IsRetryableStatus(status)) << message;
    EXPECT_FALSE(NextRetryDelay(NoJitter(), 1, status, kNow, absl::InfiniteFuture(), 0.5).has_value());
  }
  const grpc::Status too_many(grpc::StatusCode::INVALID_ARGUMENT,
                              "request needs 17 items, more than the queue of model 'm' can ever hold");
  EXPECT_FALSE(IsRetryableStatus(too_many));
  EXPECT_FALSE(NextRetryDelay(NoJitter(), 1, too_many, kNow, absl::InfiniteFuture(), 0.5).has_value());
  EXPECT_EQ(NextRetryDelay(NoJitter(), 1, grpc::Status(exhausted, "queue full"), kNow, absl::InfiniteFuture(), 0.5),
            absl::Milliseconds(50));
}

TEST(RetryPolicyTest, BackoffGrowsExponentiallyUpToTheCap) {
  const RetryPolicy p = NoJitter();
  const int expected_ms[] = {50, 100, 200, 400, 800, 1000, 1000};
  for (int attempt = 1; attempt <= 7; ++attempt) {
    EXPECT_EQ(BaseBackoff(p, attempt), absl::Milliseconds(expected_ms[attempt - 1])) << attempt;
    auto delay = NextRetryDelay(p, attempt, grpc::StatusCode::UNAVAILABLE, kNow,
                                absl::InfiniteFuture(), 0.3);
    ASSERT_TRUE(delay.has_value());
    EXPECT_EQ(*delay, absl::Milliseconds(expected_ms[attempt - 1])) << attempt;
  }
}

TEST(RetryPolicyTest, HugeAttemptCountsStayAtTheCap) {
  EXPECT_EQ(BaseBackoff(NoJitter(), 5000), absl::Seconds(1));
}

TEST(RetryPolicyTest, JitterScalesWithinBounds) {
  RetryPolicy p = NoJitter();
  p.jitter = 0.2;
  auto at = [&](double u) {
    return *NextRetryDelay(p, 2, grpc::StatusCode::RESOURCE_EXHAUSTED, kNow,
                           absl::InfiniteFuture(), u);
  };
  EXPECT_EQ(at(0.0), absl::Milliseconds(80));
  EXPECT_EQ(at(0.5), absl::Milliseconds(100));
  EXPECT_LT(at(0.9999), absl::Milliseconds(120));
  EXPECT_GT(at(0.9999), absl::Milliseconds(119));
  EXPECT_LT(at(0.25), at(0.75));
}

TEST(RetryPolicyTest, StopsAfterMaxAttempts) {
  RetryPolicy p = NoJitter();
  p.max_attempts = 3;
  const auto code = grpc::StatusCode::UNAVAILABLE;
  EXPECT_TRUE(NextRetryDelay(p, 1, code, kNow, absl::InfiniteFuture(), 0).has_value());
  EXPECT_TRUE(NextRetryDelay(p, 2, code, kNow, absl::InfiniteFuture(), 0).has_value());
  EXPECT_FALSE(NextRetryDelay(p, 3, code, kNow, absl::InfiniteFuture(), 0).has_value());
  p.max_attempts = 1;
  EXPECT_FALSE(NextRetryDelay(p, 1, code, kNow, absl::InfiniteFuture(), 0).has_value());
}

TEST(RetryPolicyTest, NoRetryThatWouldStartAtOrAfterTheDeadline) {
  const RetryPolicy p = NoJitter();  // attempt 3 waits 200 ms
  const auto code = grpc::StatusCode::UNAVAILABLE;
  EXPECT_FALSE(NextRetryDelay(p, 3, code, kNow, kNow + absl::Milliseconds(150), 0).has_value());
  EXPECT_FALSE(NextRetryDelay(p, 3, code, kNow, kNow + absl::Milliseconds(200), 0).has_value());
  EXPECT_TRUE(NextRetryDelay(p, 3, code, kNow, kNow + absl::Milliseconds(201), 0).has_value());
  // Already past the deadline.
  EXPECT_FALSE(NextRetryDelay(p, 1, code, kNow, kNow - absl::Seconds(1), 0).has_value());
}

}  // namespace
}  // namespace dserve
