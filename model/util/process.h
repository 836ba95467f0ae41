// Process-wide set-up shared by every dserve binary.
#pragma once

namespace dserve {

// Keeps glibc malloc from returning big tensor buffers to the OS after every
// forward (mmap threshold raised to its maximum, trimming effectively off):
// eager PyTorch ran ~2x faster here with this. Idempotent; honours
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ when the user sets them.
void TuneMalloc();

// Re-executes the process with OMP_WAIT_POLICY=PASSIVE unless the variable
// is already set. libgomp reads it when it loads, before main(), hence the
// re-exec. Spinning OpenMP workers (the default) steal the cores that gRPC
// threads, tokenization and other workers need: on 2 busy cores a server
// ran 73-94 req/s spinning against 401-461 passive. Call first in main();
// returns only when no re-exec was needed or it failed.
void EnsurePassiveOpenMpWait(char** argv);

// The cores this process may use: the CPUs of its affinity mask, lowered to
// the cgroup CPU quota when one is set (a Kubernetes CPU limit: cgroup v2
// cpu.max or v1 cpu.cfs_quota_us / cpu.cfs_period_us, rounded up). At
// least 1. std::thread::hardware_concurrency() counts the host's cores
// instead, which oversubscribes a container.
int UsableCpuCores();

// The quota in cores of a cgroup v2 `cpu.max` line ("150000 100000" -> 2,
// rounded up); 0 when unlimited ("max 100000") or unreadable.
int CoresFromCgroupCpuMax(const char* line);

}  // namespace dserve
