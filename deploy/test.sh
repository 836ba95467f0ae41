#!/usr/bin/env bash
# Sets up from nothing and runs the whole test suite (README's second
# command; .ci/run calls this). Tests read the goldens from ../shared
# (override with DSERVE_SHARED_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then
  bash deploy/install-deps.sh
else
  sudo bash deploy/install-deps.sh
fi
shared=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
bash deploy/build.sh -DDSERVE_SHARED_DIR="$shared"
ctest --test-dir "${DSERVE_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"

# Fuzz smoke (DSERVE_FUZZ_SMOKE=0 skips it): the libFuzzer build (clang, no
# torch, no gRPC server; cmake/DserveFuzz.cmake) and each fuzzer run for
# DSERVE_FUZZ_SMOKE_SECONDS (10) over its seeds; a crash fails the run.
# Long runs: deploy/fuzz.sh (docs/reliability.md, "Fuzzing").
if [ "${DSERVE_FUZZ_SMOKE:-1}" != 0 ]; then
  fuzz_dir=${DSERVE_FUZZ_BUILD_DIR:-build-fuzz}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
  cmake -S . -B "$fuzz_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DDSERVE_FUZZ=ON -DDSERVE_FUZZ_SMOKE_SECONDS="${DSERVE_FUZZ_SMOKE_SECONDS:-10}"
  cmake --build "$fuzz_dir" -j "$(nproc)"
  ctest --test-dir "$fuzz_dir" --output-on-failure -j "$(nproc)" -L fuzz
fi
