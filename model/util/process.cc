#include "model/util/process.h"

#include <malloc.h>

#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace dserve {

void TuneMalloc() {
  // glibc caps the mmap threshold at 32 MiB on 64-bit (HEAP_MAX); anything
  // below that is served from the heap and reused across forwards.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (std::getenv("MALLOC_TOP_PAD_") == nullptr) mallopt(M_TOP_PAD, 64 << 20);
}

void EnsurePassiveOpenMpWait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  execv("/proc/self/exe", argv);
  // execv failed (no /proc): carry on with the default policy.
}

int CoresFromCgroupCpuMax(const char* line) {
  if (line == nullptr || std::strncmp(line, "max", 3) == 0) return 0;
  long long quota = 0, period = 0;
  if (std::sscanf(line, "%lld %lld", &quota, &period) != 2 || quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

namespace {

// The CPU quota of this process's cgroup in cores, 0 when none.
int CgroupQuotaCores() {
  std::string line;
  if (std::ifstream v2("/sys/fs/cgroup/cpu.max"); v2 && std::getline(v2, line)) {
    return CoresFromCgroupCpuMax(line.c_str());
  }
  // cgroup v1: the same two numbers in two files (quota -1 = unlimited).
  std::string quota, period;
  std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (q >> quota && p >> period) return CoresFromCgroupCpuMax((quota + " " + period).c_str());
  return 0;
}

}  // namespace

int UsableCpuCores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) cores = CPU_COUNT(&set);
  const int quota = CgroupQuotaCores();
  if (quota > 0 && quota < cores) cores = quota;
  return cores < 1 ? 1 : cores;
}

}  // namespace dserve
