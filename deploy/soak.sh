#!/usr/bin/env bash
# soak.sh: runs `dserve serve` at twice its measured capacity for a long
# time and reports whether memory drifts (issue 8; not part of CI).
#
#   1. starts `dserve serve` with one classify model on 127.0.0.1 (port 0);
#   2. capacity: `dserve-client load` closed loop (--concurrency clients)
#      for --capacity-s seconds; capacity = OK calls per second;
#   3. soak: `dserve-client load` open loop at --factor x capacity calls per
#      second (a fixed schedule, whatever the server answers) for
#      --duration-s seconds, sampling the server's resident memory
#      (/proc/PID/status VmRSS) every --sample-s seconds;
#   4. reports RSS at the start (after --settle-s seconds of the soak: the
#      queue full, the largest batches formed once) and at the end, and its
#      drift (target <= 10%), the count of each gRPC status code, p50/p99 of
#      the OK calls, the server's rejections by reason, and exits 1 when the
#      drift exceeds the target or a code other than OK, RESOURCE_EXHAUSTED
#      or DEADLINE_EXCEEDED came back (the only ones overload may give).
#
# Usage:
#   deploy/soak.sh [--build-dir DIR]     (default REPO/build; needs bin/dserve and bin/dserve-client)
#                  [--shared-dir DIR]    (default REPO/../shared; goldens for the tiny test model)
#                  [--model-dir DIR]     (a classify checkpoint; default the tiny test model of
#                                         tests/data/make_test_models.py)
#                  [--duration-s S]      (soak length; default 600)
#                  [--capacity-s S]      (capacity measurement; default 20)
#                  [--concurrency N]     (closed-loop clients for the capacity; default 128, enough
#                                         to keep the batcher's queue from running dry)
#                  [--factor F]          (soak rate = F x capacity; default 2)
#                  [--sample-s S]        (RSS sampling period; default 5)
#                  [--settle-s S]        (soak seconds before the start RSS is taken; default 60)
#                  [--timeout-ms N]      (deadline of each soak call; default 5000)
#                  [--server-args "..."] (extra `dserve serve` flags)
#                  [--out DIR]           (keep the server log, RSS samples and reports here)
# Needs /usr/bin/python3 (JSON, and the default model). The server and the
# load generator are stopped on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$REPO/build"
SHARED="$REPO/../shared"
MODEL_DIR=""
DURATION_S=600
CAPACITY_S=20
CONCURRENCY=128
FACTOR=2
SAMPLE_S=5
SETTLE_S=60
TIMEOUT_MS=5000
SERVER_ARGS=""
OUT=""
PY=/usr/bin/python3
DRIFT_TARGET_PCT=10

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --shared-dir) SHARED=$2; shift 2 ;;
    --model-dir) MODEL_DIR=$2; shift 2 ;;
    --duration-s) DURATION_S=$2; shift 2 ;;
    --capacity-s) CAPACITY_S=$2; shift 2 ;;
    --concurrency) CONCURRENCY=$2; shift 2 ;;
    --factor) FACTOR=$2; shift 2 ;;
    --sample-s) SAMPLE_S=$2; shift 2 ;;
    --settle-s) SETTLE_S=$2; shift 2 ;;
    --timeout-ms) TIMEOUT_MS=$2; shift 2 ;;
    --server-args) SERVER_ARGS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

DSERVE="$BUILD/bin/dserve"
CLIENT="$BUILD/bin/dserve-client"
for b in "$DSERVE" "$CLIENT"; do
  [[ -x "$b" ]] || { echo "soak.sh: missing $b (build dserve and dserve-client)" >&2; exit 2; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dserve-soak.XXXXXX")
[[ -n "$OUT" ]] || OUT="$WORK"
mkdir -p "$OUT"
SERVER_PID=""
LOAD_PID=""
cleanup() {
  [[ -n "$LOAD_PID" ]] && kill "$LOAD_PID" 2>/dev/null || true
  if [[ -n "$SERVER_PID" ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  [[ "$OUT" == "$WORK" ]] || rm -rf "$WORK"
}
trap cleanup EXIT

if [[ -z "$MODEL_DIR" ]]; then
  "$PY" "$REPO/tests/data/make_test_models.py" "$SHARED" "$WORK/models" > /dev/null
  MODEL_DIR="$WORK/models/classify"
fi

# Inputs: support-ticket texts of 5 to ~60 tokens, cycled through.
INPUT="$WORK/inputs.jsonl"
"$PY" - "$INPUT" <<'EOF'
import json, sys
parts = ["please refund my order", "the parcel never arrived", "I forgot my password and cannot log in",
         "my invoice shows a charge twice this month", "where is my package, the tracking page is empty",
         "update the billing address on my account before the next payment goes out"]
with open(sys.argv[1], "w") as f:
    for i in range(60):
        text = ", and ".join(parts[(i + k) % len(parts)] for k in range(1 + i % 4))
        f.write(json.dumps({"text": text}) + "\n")
EOF

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# --- server ------------------------------------------------------------------
# shellcheck disable=SC2086
"$DSERVE" serve --model "classify=$MODEL_DIR" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 $SERVER_ARGS \
  > "$OUT/server.stdout" 2> "$OUT/server.log" &
SERVER_PID=$!
PORT=""
for _ in $(seq 600); do
  PORT=$(sed -n 's/^dserve: listening on port \([0-9]*\)$/\1/p' "$OUT/server.stdout")
  [[ -n "$PORT" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "soak.sh: the server exited:" >&2; cat "$OUT/server.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$PORT" ]] || { echo "soak.sh: the server did not start" >&2; exit 1; }
METRICS_PORT=$(sed -n 's/^dserve: metrics on port \([0-9]*\)$/\1/p' "$OUT/server.stdout")
TARGET="127.0.0.1:$PORT"

echo "soak.sh: $(nproc) cores, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)"
echo "soak.sh: model $MODEL_DIR; server pid $SERVER_PID on $TARGET; args: ${SERVER_ARGS:-(defaults)}"

# --- capacity ----------------------------------------------------------------
"$CLIENT" --target "$TARGET" --json load --model classify --task classify --input "$INPUT" \
  --duration-s "$CAPACITY_S" --concurrency "$CONCURRENCY" --warmup-s 3 > "$OUT/capacity.json"
CAPACITY=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["throughput_rps"])' "$OUT/capacity.json")
RATE=$("$PY" -c 'import sys; print(round(float(sys.argv[1]) * float(sys.argv[2]), 1))' "$CAPACITY" "$FACTOR")
echo "soak.sh: capacity $CAPACITY calls/s (closed loop, $CONCURRENCY clients, ${CAPACITY_S}s); soak at $RATE calls/s for ${DURATION_S}s"

# --- soak --------------------------------------------------------------------
RSS_BEFORE=$(rss_kib "$SERVER_PID")
"$CLIENT" --target "$TARGET" --timeout-ms "$TIMEOUT_MS" --json load --model classify --task classify \
  --input "$INPUT" --duration-s "$DURATION_S" --rps "$RATE" --warmup-s 0 > "$OUT/soak.json" &
LOAD_PID=$!
echo "elapsed_s,rss_kib" > "$OUT/rss.csv"
START=$(date +%s.%N)
while kill -0 "$LOAD_PID" 2>/dev/null; do
  NOW=$(date +%s.%N)
  echo "$("$PY" -c "print(round($NOW - $START, 1))"),$(rss_kib "$SERVER_PID")" >> "$OUT/rss.csv"
  sleep "$SAMPLE_S"
done
LOAD_RC=0
wait "$LOAD_PID" || LOAD_RC=$?
LOAD_PID=""
[[ "$LOAD_RC" -eq 0 ]] || { echo "soak.sh: the load generator failed ($LOAD_RC)" >&2; exit 1; }
RSS_AFTER=$(rss_kib "$SERVER_PID")
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" > "$OUT/metrics.txt" || true

"$PY" - "$OUT" "$RSS_BEFORE" "$RSS_AFTER" "$DRIFT_TARGET_PCT" "$CAPACITY" "$RATE" "$SETTLE_S" <<'EOF'
import csv, json, os, re, sys
out, before, after, target, capacity, rate, settle = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
samples = [(float(r["elapsed_s"]), int(r["rss_kib"])) for r in csv.DictReader(open(os.path.join(out, "rss.csv")))]
soak = json.load(open(os.path.join(out, "soak.json")))
settled = [s for s in samples if s[0] >= settle] or samples[-1:]
start_t, start = settled[0]
end = after
drift = 100.0 * (end - start) / start
mib = lambda kib: kib / 1024.0
print("RSS (server): before the soak %.1f MiB; at %.0f s into the soak (start) %.1f MiB; max %.1f MiB; end %.1f MiB; "
      "drift start->end %+.1f%% (target <= %g%%)"
      % (mib(before), start_t, mib(start), mib(max(s for _, s in samples)), mib(end), drift, target))
marks = [samples[int(i * (len(samples) - 1) / 5)] for i in range(6)] if samples else []
print("RSS samples: " + ", ".join("%.0fs %.1f MiB" % (t, mib(s)) for t, s in marks))
print("soak: %d calls sent at %.1f/s (%.1f x capacity %.1f/s) in %.1f s; %.1f OK calls/s; %.1f completed/s"
      % (soak["requests"], rate, rate / capacity, capacity, soak["elapsed_s"], soak["throughput_rps"], soak["completed_rps"]))
print("codes: " + ", ".join("%s=%d" % kv for kv in sorted(soak["codes"].items())))
lat = soak["latency_ms"]
print("latency of OK calls (client): p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms" % (lat["p50"], lat["p90"], lat["p99"], lat["max"]))
metrics = open(os.path.join(out, "metrics.txt")).read() if os.path.exists(os.path.join(out, "metrics.txt")) else ""
rejected = {m.group(1): float(m.group(2)) for m in re.finditer(r'^dserve_rejected_total\{[^}]*reason="([a-z_]+)"[^}]*\} (\S+)', metrics, re.M)}
print("server rejections by reason: " + ", ".join("%s=%d" % (k, v) for k, v in sorted(rejected.items())))
bad = sorted(set(soak["codes"]) - {"OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"})
verdict = drift <= target and not bad and soak["ok"] > 0
print("verdict: %s%s" % ("PASS" if verdict else "FAIL", (" (unexpected codes: %s)" % bad) if bad else ""))
sys.exit(0 if verdict else 1)
EOF
