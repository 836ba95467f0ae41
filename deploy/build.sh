#!/usr/bin/env bash
# Configures and builds dserve into build/ (Ninja, ccache when present, a
# precompiled torch header). Extra arguments go to cmake, e.g.
#   bash deploy/build.sh -DDSERVE_WITH_SERVER=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${DSERVE_BUILD_DIR:-build}
# ccache: paths relative to the checkout, so another clone (CI's) hits the
# same cache; the sloppiness lets it cache compiles that use the torch PCH.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
jobs=${DSERVE_JOBS:-$(nproc)}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
# Torch translation units need ~1.5 GB each; cap parallelism by memory too.
mem_jobs=$(( $(awk '/MemAvailable/ {print int($2/1024/1024/2)}' /proc/meminfo) ))
[ "$mem_jobs" -lt 1 ] && mem_jobs=1
[ "$jobs" -gt "$mem_jobs" ] && jobs=$mem_jobs
cmake --build "$build_dir" -j "$jobs"
echo "build.sh: binaries in $build_dir/bin: $(ls "$build_dir/bin" | tr '\n' ' ')"
