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
