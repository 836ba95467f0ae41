#!/usr/bin/env bash
# GPU check (DESIGN §6): builds model/ and the bench/parity tools against the
# CUDA LibTorch inside the machine's PyTorch (no gRPC, no tokenizer, no
# package registry), runs the golden parity tests on CUDA and the encoder
# throughput bench (fp32, bf16; batch 32x128 and 1x128), and writes its
# report under OUTDIR. One non-interactive run, well under 8 minutes.
#
#   bash deploy/gpu-prepare.sh            # here, first: fills .gpu/
#   bash deploy/gpu-check.sh OUTDIR       # on the GPU machine (carry .gpu)
#   bash deploy/gpu-check.sh OUTDIR --cpu-dry-run   # same steps on this CPU machine
set -uo pipefail
out=${1:?usage: gpu-check.sh OUTDIR [--cpu-dry-run]}
mode=${2:-gpu}
cd "$(dirname "$0")/.."
mkdir -p "$out"
report="$out/gpu-check-report.txt"
exec > >(tee "$out/gpu-check.log") 2>&1
say() { echo "== $*" | tee -a "$report"; }
started=$(date +%s)

say "gpu-check $(date -u +%FT%TZ) mode=$mode commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)"
if [ "$mode" = "--cpu-dry-run" ]; then
  device=cpu; build=build-gpu-dry; python=/usr/bin/python3; goldens_root=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
  prefix=""
else
  device=cuda; build=build-gpu; python=python3; goldens_root=$PWD/.gpu
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee -a "$report"
  deps=$PWD/.gpu/root
  if [ -d .gpu/debs ]; then
    mkdir -p "$deps"
    for f in .gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
  fi
  prefix="$deps/usr;$deps/usr/lib/x86_64-linux-gnu/cmake"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
torch_prefix=$($python -c 'import torch;print(torch.utils.cmake_prefix_path)')
say "torch $($python -c 'import torch;print(torch.__version__, torch.version.cuda)') at $torch_prefix"

say "configure + build (model/ only, $device)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDSERVE_WITH_SERVER=OFF -DDSERVE_WITH_TOKENIZER=OFF \
  -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix" -DDSERVE_SHARED_DIR="$goldens_root" \
  -DCMAKE_CUDA_ARCHITECTURES=90 || { say "FAILED: configure"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target deberta_test deberta_v1_test dserve || { say "FAILED: build"; exit 1; }
say "build took $(( $(date +%s) - started ))s"

say "golden parity on $device (fp32 <= 1e-4, bf16 argmax)"
DSERVE_TEST_DEVICE=$device "$build/bin/deberta_test" --gtest_brief=1 2>&1 | tail -5 | tee -a "$report"
parity=${PIPESTATUS[0]}
say "DeBERTa v1 golden parity on $device"
DSERVE_TEST_DEVICE=$device "$build/bin/deberta_v1_test" --gtest_brief=1 --gtest_filter='*V1Golden*' 2>&1 | tail -5 | tee -a "$report"
[ "${PIPESTATUS[0]}" -eq 0 ] || parity=1

say "encoder bench (v3-base shape, random weights)"
if [ "$device" = cuda ]; then
  runs=("--batch-size 32 --length 128 --dtypes fp32,bf16 --repeats 20" "--batch-size 1 --length 128 --dtypes fp32,bf16 --repeats 50")
else
  runs=("--batch-size 2 --length 64 --dtypes fp32,bf16 --repeats 2")
fi
for args in "${runs[@]}"; do
  # shellcheck disable=SC2086
  timeout 180 "$build/bin/dserve" bench encoder --shape v3-base --device "$device" $args | tee -a "$report"
done
say "done in $(( $(date +%s) - started ))s; parity exit code $parity"
exit "$parity"
