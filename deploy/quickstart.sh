#!/usr/bin/env bash
# Sets up from nothing, builds, trains the tiny demo models for all three
# tasks if they are not there yet (deploy/demo/train_demo_models.sh: demo
# data, tokenizer, MLM pretraining with the EMD, fine-tuning; minutes on 2
# cores, with progress), and serves them (README's first command).
# Ctrl-C (SIGTERM) drains and stops the server.
#   DSERVE_LISTEN (default 127.0.0.1:5001), DSERVE_METRICS (127.0.0.1:9090)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then bash deploy/install-deps.sh; else sudo bash deploy/install-deps.sh; fi
shared=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
bash deploy/build.sh -DDSERVE_SHARED_DIR="$shared"
bash deploy/demo/train_demo_models.sh build/demo
models=build/demo/models
echo "== serving classify, answer, rerank; try:"
echo "   build/bin/dserve-client --target ${DSERVE_LISTEN:-127.0.0.1:5001} classify --model classify 'my parcel never arrived'"
exec build/bin/dserve serve \
  --model classify="$models/classify" --model answer="$models/answer" --model rerank="$models/rerank" \
  --listen "${DSERVE_LISTEN:-127.0.0.1:5001}" --metrics-listen "${DSERVE_METRICS:-127.0.0.1:9090}"
