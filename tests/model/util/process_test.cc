// UsableCpuCores and the cgroup quota parsing (model/util/process.h).
#include "model/util/process.h"

#include <sched.h>

#include <thread>

#include <gtest/gtest.h>

namespace dserve {
namespace {

TEST(CoresFromCgroupCpuMax, QuotaOverPeriodRoundedUp) {
  EXPECT_EQ(CoresFromCgroupCpuMax("200000 100000"), 2);
  EXPECT_EQ(CoresFromCgroupCpuMax("150000 100000\n"), 2);
  EXPECT_EQ(CoresFromCgroupCpuMax("50000 100000"), 1);
  EXPECT_EQ(CoresFromCgroupCpuMax("400000 50000"), 8);
}

TEST(CoresFromCgroupCpuMax, UnlimitedOrUnreadableIsZero) {
  EXPECT_EQ(CoresFromCgroupCpuMax("max 100000"), 0);
  EXPECT_EQ(CoresFromCgroupCpuMax(""), 0);
  EXPECT_EQ(CoresFromCgroupCpuMax("garbage"), 0);
  EXPECT_EQ(CoresFromCgroupCpuMax("-1 100000"), 0);
  EXPECT_EQ(CoresFromCgroupCpuMax(nullptr), 0);
}

TEST(UsableCpuCores, FollowsTheAffinityMask) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int all = UsableCpuCores();
  EXPECT_GE(all, 1);
  EXPECT_LE(all, CPU_COUNT(&saved));
  const unsigned host = std::thread::hardware_concurrency();
  if (host > 0) EXPECT_LE(all, static_cast<int>(host));
  // Pinned to one CPU (as `taskset -c N` or a cpuset would): one core.
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &saved)) {
      CPU_SET(cpu, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(UsableCpuCores(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(UsableCpuCores(), all);
}

}  // namespace
}  // namespace dserve
