#!/usr/bin/env bash
# README's first command: sets up from nothing, builds, and serves the demo
# models for classify, answer and rerank, with the HTTP door and its try-it
# page on. Prints the page URL and one call per task once it serves.
#
# The demo models are committed in deploy/demo/models/ (a few MB each; its
# MANIFEST.json says how they were trained and holds their sha256 sums), so
# nothing trains here. DSERVE_DEMO_RETRAIN=1 retrains them from scratch
# first (deploy/demo/train_demo_models.sh into build/demo: ~35 min on 2
# cores) and serves those instead.
# Ctrl-C (SIGTERM) drains and stops the server.
#   DSERVE_LISTEN (default 127.0.0.1:5001), DSERVE_HTTP_LISTEN (127.0.0.1:8080),
#   DSERVE_METRICS (127.0.0.1:9090); DSERVE_QUICKSTART_SKIP_SETUP=1 skips the
#   install and build steps (the quickstart test, whose binaries are built).
set -euo pipefail
cd "$(dirname "$0")/.."
grpc=${DSERVE_LISTEN:-127.0.0.1:5001}
http=${DSERVE_HTTP_LISTEN:-127.0.0.1:8080}
metrics=${DSERVE_METRICS:-127.0.0.1:9090}
bin=${DSERVE_BIN_DIR:-build/bin}
source deploy/stage-time.sh
if [ "${DSERVE_QUICKSTART_SKIP_SETUP:-0}" != 1 ]; then
  stage install
  if [ "$(id -u)" -eq 0 ]; then bash deploy/install-deps.sh; else sudo bash deploy/install-deps.sh; fi
  stage build
  shared=${DSERVE_SHARED_DIR:-$(cd .. && pwd)/shared}
  bash deploy/build.sh -DDSERVE_SHARED_DIR="$shared"
fi
stage "start serving"
models=deploy/demo/models
if [ "${DSERVE_DEMO_RETRAIN:-0}" = 1 ]; then
  DSERVE_BIN="$bin/dserve" bash deploy/demo/train_demo_models.sh build/demo
  models=build/demo/models
else
  /usr/bin/python3 deploy/demo/check_manifest.py "$models"
fi

# The server in the background so the calls print once it answers; the trap
# passes Ctrl-C/SIGTERM on (the server drains), and the script exits with it.
"$bin/dserve" serve \
  --model classify="$models/classify" --model answer="$models/answer" --model rerank="$models/rerank" \
  --listen "$grpc" --http-listen "$http" --metrics-listen "$metrics" &
server=$!
trap 'kill -TERM $server 2>/dev/null' INT TERM
for _ in $(seq 1 300); do
  if curl -sf "http://$http/health" >/dev/null 2>&1; then
    stage serving
    /usr/bin/python3 deploy/demo/print_calls.py --examples deploy/demo/examples.json \
      --grpc "$grpc" --http "$http" --metrics "$metrics" --client "$bin/dserve-client"
    break
  fi
  kill -0 $server 2>/dev/null || break
  sleep 0.2
done
set +e
wait $server
rc=$?
# A signal interrupts the first wait; the second one waits for the drain.
kill -0 $server 2>/dev/null && { wait $server; rc=$?; }
exit $rc
