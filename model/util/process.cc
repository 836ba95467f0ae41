#include "model/util/process.h"

#include <malloc.h>

#include <cstdlib>

namespace dserve {

void TuneMalloc() {
  // glibc caps the mmap threshold at 32 MiB on 64-bit (HEAP_MAX); anything
  // below that is served from the heap and reused across forwards.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 32 << 20);
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (std::getenv("MALLOC_TOP_PAD_") == nullptr) mallopt(M_TOP_PAD, 64 << 20);
}

}  // namespace dserve
