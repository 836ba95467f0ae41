#include "model/util/process.h"

#include <malloc.h>

#include <unistd.h>

#include <cstdlib>

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

}  // namespace dserve
