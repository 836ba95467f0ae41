#include "client/load_stats.h"

#include <algorithm>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

namespace dserve {
namespace {

TEST(PercentileTest, NearestRankOnOneToHundred) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);
  EXPECT_EQ(PercentileOfSorted(v, 0), 1);
  EXPECT_EQ(PercentileOfSorted(v, 50), 50);
  EXPECT_EQ(PercentileOfSorted(v, 90), 90);
  EXPECT_EQ(PercentileOfSorted(v, 99), 99);
  EXPECT_EQ(PercentileOfSorted(v, 99.5), 100);
  EXPECT_EQ(PercentileOfSorted(v, 100), 100);
}

TEST(PercentileTest, SmallAndEmptyLists) {
  EXPECT_EQ(PercentileOfSorted({}, 50), 0);
  EXPECT_EQ(PercentileOfSorted({7}, 0), 7);
  EXPECT_EQ(PercentileOfSorted({7}, 99), 7);
  // Ten values: p50 is the 5th, p90 the 9th, p99 the 10th.
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(PercentileOfSorted(v, 50), 5);
  EXPECT_EQ(PercentileOfSorted(v, 90), 9);
  EXPECT_EQ(PercentileOfSorted(v, 99), 10);
}

TEST(SummarizeTest, ExactPercentilesOfOkCallsFromUnsortedSamples) {
  std::vector<LoadSample> samples;
  for (int i = 1; i <= 1000; ++i) samples.push_back({static_cast<double>(i), grpc::StatusCode::OK, 2});
  std::shuffle(samples.begin(), samples.end(), std::mt19937(7));
  // Errors are counted but their (tiny) latency does not enter the percentiles.
  for (int i = 0; i < 10; ++i) samples.push_back({0.01, grpc::StatusCode::RESOURCE_EXHAUSTED, 2});
  samples.push_back({0.01, grpc::StatusCode::UNAVAILABLE, 2});

  const LoadReport r = Summarize(samples, 2.0);
  EXPECT_EQ(r.requests, 1011);
  EXPECT_EQ(r.ok, 1000);
  EXPECT_EQ(r.p50_ms, 500);
  EXPECT_EQ(r.p90_ms, 900);
  EXPECT_EQ(r.p99_ms, 990);
  EXPECT_EQ(r.max_ms, 1000);
  EXPECT_DOUBLE_EQ(r.mean_ms, 500.5);
  EXPECT_DOUBLE_EQ(r.throughput_rps, 500);
  EXPECT_DOUBLE_EQ(r.items_per_s, 1000);
  EXPECT_DOUBLE_EQ(r.completed_rps, 505.5);
  EXPECT_EQ(r.codes.at("OK"), 1000);
  EXPECT_EQ(r.codes.at("RESOURCE_EXHAUSTED"), 10);
  EXPECT_EQ(r.codes.at("UNAVAILABLE"), 1);
  EXPECT_EQ(r.codes.size(), 3u);
}

TEST(SummarizeTest, NoSamplesAndZeroElapsedGiveZeros) {
  const LoadReport r = Summarize({}, 0);
  EXPECT_EQ(r.requests, 0);
  EXPECT_EQ(r.throughput_rps, 0);
  EXPECT_EQ(r.p99_ms, 0);
  EXPECT_TRUE(r.codes.empty());
}

TEST(SummarizeTest, WindowRatesReplaceTheRunRates) {
  std::vector<LoadSample> samples(30, {10, grpc::StatusCode::OK, 2});
  LoadReport r = Summarize(samples, 7.5);  // ramp-down included: 4 req/s
  EXPECT_DOUBLE_EQ(r.throughput_rps, 4);
  ApplyWindowRates({/*completed=*/28, /*ok=*/25, /*ok_items=*/50}, 5, &r);
  EXPECT_DOUBLE_EQ(r.elapsed_s, 5);
  EXPECT_DOUBLE_EQ(r.throughput_rps, 5);
  EXPECT_DOUBLE_EQ(r.items_per_s, 10);
  EXPECT_DOUBLE_EQ(r.completed_rps, 5.6);
  EXPECT_EQ(r.requests, 30);  // counts and latency stay those of the counted calls
  EXPECT_EQ(r.p50_ms, 10);
  ApplyWindowRates({1, 1, 1}, 0, &r);  // no window: unchanged
  EXPECT_DOUBLE_EQ(r.throughput_rps, 5);
}

TEST(SummarizeTest, JsonAndTextCarryTheFigures) {
  const LoadReport r = Summarize({{3, grpc::StatusCode::OK, 1}, {5, grpc::StatusCode::DEADLINE_EXCEEDED, 1}}, 1);
  const nlohmann::json j = ReportToJson(r);
  EXPECT_EQ(j["requests"], 2);
  EXPECT_EQ(j["ok"], 1);
  EXPECT_EQ(j["latency_ms"]["p99"], 3.0);
  EXPECT_EQ(j["codes"]["DEADLINE_EXCEEDED"], 1);
  const std::string text = FormatReport(r);
  EXPECT_NE(text.find("DEADLINE_EXCEEDED=1"), std::string::npos) << text;
  EXPECT_NE(text.find("p99 3.00 ms"), std::string::npos) << text;
}

}  // namespace
}  // namespace dserve
