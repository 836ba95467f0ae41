#!/usr/bin/env bash
# Run HERE (the CPU machine) before a GPU check: fills .gpu/ (git-ignored)
# with what the GPU machine lacks and cannot download: the goldens (../shared
# does not travel) and Debian's header/library packages of the model/ layer's
# dependencies (abseil, spdlog, fmt, nlohmann-json, CLI11, GoogleTest), which
# gpu-check.sh unpacks into a private prefix (never into /). Then call the
# device tool with carry [".gpu"] and `bash deploy/gpu-check.sh $OUT`.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
rm -rf .gpu && mkdir -p .gpu/debs
cp -r "$shared/goldens" .gpu/goldens
(cd .gpu/debs && apt-get download \
  libabsl-dev libabsl20220623 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 \
  nlohmann-json3-dev libcli11-dev libgtest-dev googletest >/dev/null)
du -sh .gpu
