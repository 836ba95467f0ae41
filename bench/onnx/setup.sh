#!/usr/bin/env bash
# Bench-only set-up for the ONNX Runtime peer of bench/run_all.sh (issue 19):
# installs onnxruntime-node (it bundles the CPU runtime: no Python package,
# no build) from npm into bench/onnx/node_modules (git-ignored), and Debian's
# python3-onnx when it is missing (the int8 rows' quantizer). CI does not
# need it: without it run_all reports the ORT rows as "ORT: not installed,
# run bench/onnx/setup.sh" (SKIP) and everything else still runs.
#
#   bash bench/onnx/setup.sh [VERSION]      (default: the newest release)
#
# Needs node (>= 18) and npm on PATH and the npm registry reachable.
# --ignore-scripts: the package's install script only fetches GPU (CUDA/
# TensorRT) binaries; the CPU runtime is in the tarball itself.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${1:-latest}"
command -v node >/dev/null || { echo "setup.sh: node is not on PATH (apt-get install nodejs npm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup.sh: npm is not on PATH (apt-get install npm)" >&2; exit 1; }
cd "$here"
# A private package.json so npm installs here and not into a parent folder.
[ -f package.json ] || echo '{"name": "dserve-bench-onnx", "private": true}' > package.json
npm install --ignore-scripts --no-audit --no-fund --no-save "onnxruntime-node@${version}"
# The int8 peer (issue 27): bench/onnx/quantize_onnx.py rewrites the fp32 export
# with Debian's python3-onnx (ORT's Python quantizer is not installable here).
if ! /usr/bin/python3 -c 'import onnx' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-onnx
  else
    echo "setup.sh: python3-onnx is missing (the int8 ORT rows need it): apt-get install python3-onnx as root" >&2
  fi
fi
node -e 'const ort = require("onnxruntime-node"); console.log("onnxruntime-node", require("onnxruntime-node/package.json").version, "ok; backends:", Object.keys(ort.env.versions || {}).join(",") || "cpu")'
