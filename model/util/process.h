// Process-wide set-up shared by every dserve binary.
#pragma once

namespace dserve {

// Keeps glibc malloc from returning big tensor buffers to the OS after every
// forward (mmap threshold raised to its maximum, trimming effectively off):
// eager PyTorch ran ~2x faster here with this. Idempotent; honours
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ when the user sets them.
void TuneMalloc();

}  // namespace dserve
