#!/usr/bin/env bash
# Configures and builds dserve into build/ (Ninja, ccache when present, a
# precompiled torch header). Extra arguments go to cmake, e.g.
#   bash deploy/build.sh -DDSERVE_WITH_SERVER=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${DSERVE_BUILD_DIR:-build}
jobs=${DSERVE_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
# Torch translation units need ~1.5 GB each; cap parallelism by memory too.
mem_jobs=$(( $(awk '/MemAvailable/ {print int($2/1024/1024/2)}' /proc/meminfo) ))
[ "$mem_jobs" -lt 1 ] && mem_jobs=1
[ "$jobs" -gt "$mem_jobs" ] && jobs=$mem_jobs
cmake --build "$build_dir" -j "$jobs"
echo "build.sh: binaries in $build_dir/bin: $(ls "$build_dir/bin" | tr '\n' ' ')"
