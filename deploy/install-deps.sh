#!/usr/bin/env bash
# Installs everything dserve needs to build, test and run on Debian 12, as
# root. Idempotent: packages already present are left alone. Everything
# comes from Debian's archive except npm packages: playwright-core (pinned
# in tests/e2e/page/package-lock.json) for the try-it page's browser test,
# @grpc/grpc-js and @grpc/proto-loader (tests/e2e/oip_node/package-lock.json)
# for the Node OIP client test.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (apt-get install needs it)" >&2
  exit 1
fi

packages=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # LibTorch (CPU) and a fast BLAS: without libopenblas0-openmp Debian's
  # reference BLAS runs a 2048^2 matmul ~30x slower.
  libtorch-dev libopenblas0-openmp libgloo-dev libdnnl-dev
  # (libgloo-dev: headers c10d's ProcessGroupGloo needs for distributed training)
  # RPC, serialisation and the rest of the stack
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev nlohmann-json3-dev
  libcli11-dev libyaml-cpp-dev
  # tests and benchmarks; clang + its sanitizer/libFuzzer runtimes for the
  # fuzz build (libclang-rt-dev is only a recommendation of clang)
  libgtest-dev libgmock-dev libbenchmark-dev clang libclang-rt-dev
  # promtool (checks our /metrics) and openssl (test certificates)
  prometheus openssl
  # Python oracles and clients (run with /usr/bin/python3)
  python3 python3-numpy python3-torch python3-sentencepiece sentencepiece python3-grpcio
  # python3-regex: the GPT-2 pre-tokenizer pattern of the byte-level BPE oracle
  python3-regex
  # HTTP/JSON front door (issue 17): cpp-httplib (built with OpenSSL), its
  # e2e tests (curl, requests, jsonschema for openapi.json), the try-it page's
  # headless-browser test (chromium, driven by npm playwright-core below) and
  # wrk for the HTTP library measurement (docs/performance.md)
  libcpp-httplib-dev libssl-dev curl python3-requests python3-jsonschema chromium nodejs wrk
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps.sh: all ${#packages[@]} packages already installed"
else
  echo "install-deps.sh: installing ${#missing[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The OpenMP OpenBLAS must be the BLAS that LibTorch resolves.
if command -v update-alternatives >/dev/null; then
  lib=$(update-alternatives --list libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas-openmp | head -1 || true)
  if [ -n "$lib" ]; then
    update-alternatives --set libblas.so.3-x86_64-linux-gnu "$lib" >/dev/null
  fi
  lib=$(update-alternatives --list liblapack.so.3-x86_64-linux-gnu 2>/dev/null | grep openblas-openmp | head -1 || true)
  if [ -n "$lib" ]; then
    update-alternatives --set liblapack.so.3-x86_64-linux-gnu "$lib" >/dev/null
  fi
fi

# playwright-core drives Debian's chromium in tests/e2e/test_http_page.py
# (no browser download: the test passes executablePath /usr/bin/chromium).
# npm: Debian's own nodejs needs the npm package; NodeSource's nodejs ships
# npm and conflicts with Debian's (apt then reports "held broken packages").
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm
fi
page_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/e2e/page"
if [ ! -d "$page_dir/node_modules/playwright-core" ]; then
  echo "install-deps.sh: npm ci in $page_dir (playwright-core)"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix "$page_dir" --no-audit --no-fund
fi
# @grpc/grpc-js + @grpc/proto-loader: the Node OIP client of
# tests/e2e/test_oip_grpc.py (pinned in tests/e2e/oip_node/package-lock.json).
oip_node_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/e2e/oip_node"
if [ ! -d "$oip_node_dir/node_modules/@grpc/grpc-js" ]; then
  echo "install-deps.sh: npm ci in $oip_node_dir (@grpc/grpc-js, @grpc/proto-loader)"
  npm ci --prefix "$oip_node_dir" --no-audit --no-fund
fi
