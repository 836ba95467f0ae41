#!/usr/bin/env bash
# serve_bench.sh: the serving benchmark of dserve (issue 4, "Done means" 5).
#
# In ONE run on ONE machine it measures two ratios, which hold up on noisy
# machines better than absolute figures:
#   (a) end to end vs bare engine: items/s of `dserve serve` under 64
#       concurrent clients (closed loop, `dserve-client load`, one ~128-token
#       text per call) divided by items/s of the bare engine on the same
#       token ids (`dserve forward --batch-size 32`, timed as
#       t(N lines) - t(1 line) so the model load cancels out). Target >= 0.90.
#   (b) dynamic batching vs none: items/s of `dserve serve` (default batcher)
#       over items/s of `dserve serve --max-batch-size 1`, on short texts
#       (<= 32 tokens) with 32 concurrent clients. Target >= 3x.
# Each measurement is repeated (--repeats, default 3); the report gives the
# config, the machine (nproc, CPU model), every repeat and the medians.
#
# By default the model is the tiny test checkpoint that
# tests/data/make_test_models.py builds (3 layers, hidden 96). Its forward
# pass costs microseconds per item, so ratio (a) then mostly measures the
# per-call overhead of gRPC + server + the load client sharing the CPU, not
# what a production-size encoder would see. Pass --model-dir with a real
# classify checkpoint (config.json, model.safetensors, spm.model) for that.
#
# Usage:
#   bench/serve/serve_bench.sh [--build-dir DIR]   (default: REPO/build; needs bin/dserve, bin/dserve-client)
#                              [--shared-dir DIR]  (default: REPO/../shared; goldens for the test models)
#                              [--model-dir DIR]   (a classify checkpoint; default: the tiny test model)
#                              [--repeats N]       (default 3)
#                              [--duration-s S]    (measuring window per load run; default 5)
#                              [--warmup-s S]      (uncounted seconds before it; default 2; a big model
#                                                  needs several batch latencies of both)
#                              [--engine-lines N]  (lines of the engine run; default 2048)
#                              [--json FILE]       (also write the summary as JSON)
#                              [--server-args "ARGS"] (extra `dserve serve` flags for every server,
#                                                  e.g. "--threads-per-worker 1 --max-queue-delay-us 500")
#                              [--before-dserve BIN] (instead of (a) and (b): (c) the server's own
#                                                  items/s with an earlier dserve binary (the engine
#                                                  "before") against BUILD's ("after"), same model,
#                                                  texts and load as (a), servers alternating per
#                                                  repeat, once per dtype of --dtypes)
#                              [--dtypes LIST]     (with --before-dserve; default fp32, e.g. fp32,bf16)
#   or: ninja -C BUILD bench_serve
# The environment reaches both the engine and the servers, so e.g.
#   OMP_WAIT_POLICY=PASSIVE bench/serve/serve_bench.sh
# compares them under the same OpenMP settings (on a busy or small machine,
# spinning OpenMP threads fight the gRPC threads and the load client).
# Needs /usr/bin/python3 with sentencepiece (Debian python3-sentencepiece) to
# tokenize the inputs ([CLS]=1 ... [SEP]=2). Servers listen on 127.0.0.1 port
# 0 and are killed on exit.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD="$REPO/build"
SHARED="$REPO/../shared"
MODEL_DIR=""
REPEATS=3
DURATION_S=5
WARMUP_S=2
ENGINE_LINES=2048
JSON_OUT=""
SERVER_ARGS=""
LONG_CLIENTS=64
SHORT_CLIENTS=32
BEFORE_DSERVE=""
DTYPES=fp32
PY=/usr/bin/python3

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) BUILD=$2; shift 2 ;;
    --shared-dir) SHARED=$2; shift 2 ;;
    --model-dir) MODEL_DIR=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --duration-s) DURATION_S=$2; shift 2 ;;
    --warmup-s) WARMUP_S=$2; shift 2 ;;
    --engine-lines) ENGINE_LINES=$2; shift 2 ;;
    --json) JSON_OUT=$2; shift 2 ;;
    --server-args) SERVER_ARGS=$2; shift 2 ;;
    --before-dserve) BEFORE_DSERVE=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "serve_bench.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

DSERVE="$BUILD/bin/dserve"
CLIENT="$BUILD/bin/dserve-client"
for b in "$DSERVE" "$CLIENT"; do
  [[ -x "$b" ]] || { echo "serve_bench.sh: missing $b (build dserve and dserve-client)" >&2; exit 2; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dserve_serve_bench.XXXXXX")
SERVER_PIDS=()
cleanup() {
  for pid in "${SERVER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${SERVER_PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

MODEL_KIND="custom checkpoint"
if [[ -z "$MODEL_DIR" ]]; then
  "$PY" "$REPO/tests/data/make_test_models.py" "$SHARED" "$WORK/models" >/dev/null
  MODEL_DIR="$WORK/models/classify"
  MODEL_KIND="tiny test checkpoint (make_test_models.py)"
fi

# Inputs: long.jsonl (~128 tokens per text) + long_ids.jsonl (the same texts
# tokenized, for the engine) and short.jsonl (8..32 tokens per text).
"$PY" - "$MODEL_DIR/spm.model" "$WORK" <<'PYEOF'
import json, random, sys
import sentencepiece as spm
sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
out = sys.argv[2]
rng = random.Random(1234)
words = ("the a customer order refund billing password reset shipping parcel late "
         "account charge card invoice delivery address change cancel subscription "
         "please help my was not has been could you why when where how what today "
         "yesterday week month double charged wrong item broken missing login email "
         "phone number support ticket status update fast slow again still never").split()

def text_with_tokens(lo, hi):
    # Grow a sentence until it has lo..hi tokens with [CLS] and [SEP].
    while True:
        t = []
        while True:
            t.append(rng.choice(words))
            n = len(sp.encode(" ".join(t))) + 2
            if n >= lo:
                break
        if n <= hi:
            s = " ".join(t)
            return s, [1] + sp.encode(s) + [2]

with open(f"{out}/long.jsonl", "w") as texts, open(f"{out}/long_ids.jsonl", "w") as ids:
    lengths = []
    for _ in range(512):
        s, i = text_with_tokens(127, 129)
        lengths.append(len(i))
        texts.write(json.dumps({"text": s}) + "\n")
        ids.write(json.dumps({"input_ids": i}) + "\n")
with open(f"{out}/short.jsonl", "w") as texts:
    short = []
    for _ in range(512):
        s, i = text_with_tokens(rng.randint(8, 30), 32)
        short.append(len(i))
        texts.write(json.dumps({"text": s}) + "\n")
print(f"inputs: 512 long texts ({min(lengths)}..{max(lengths)} tokens), "
      f"512 short texts ({min(short)}..{max(short)} tokens, mean {sum(short)/len(short):.1f})")
PYEOF

# The engine input of N lines: the long ids cycled.
"$PY" - "$WORK/long_ids.jsonl" "$ENGINE_LINES" "$WORK" <<'PYEOF'
import sys
lines = open(sys.argv[1]).read().splitlines()
n = int(sys.argv[2])
with open(f"{sys.argv[3]}/engine_n.jsonl", "w") as f:
    f.writelines(lines[i % len(lines)] + "\n" for i in range(n))
with open(f"{sys.argv[3]}/engine_1.jsonl", "w") as f:
    f.write(lines[0] + "\n")
PYEOF

now() { date +%s.%N; }

# Items/s of the bare engine: (N - 1) lines over t(N) - t(1).
engine_rate() {
  local t0 t1 t2 t3
  t0=$(now); "$DSERVE" forward --model "$MODEL_DIR" --batch-size 32 <"$WORK/engine_1.jsonl" >/dev/null; t1=$(now)
  t2=$(now); "$DSERVE" forward --model "$MODEL_DIR" --batch-size 32 <"$WORK/engine_n.jsonl" >/dev/null; t3=$(now)
  "$PY" -c "import sys; n=int(sys.argv[1]); d=(float(sys.argv[5])-float(sys.argv[4]))-(float(sys.argv[3])-float(sys.argv[2])); print(f'{(n-1)/d:.2f}')" \
    "$ENGINE_LINES" "$t0" "$t1" "$t2" "$t3"
}

# Starts `dserve serve` with extra flags; sets PORT and METRICS_PORT.
start_server() {
  local log="$WORK/server_$#_$RANDOM.log"
  : >"$log.out"  # exists before the first poll below
  # fp32 unless --server-args names a dtype: the bare engine (`dserve forward`)
  # runs fp32, and serve's default (--dtype auto) may pick bf16.
  local dtype="--dtype fp32"
  [[ " $SERVER_ARGS $* " == *" --dtype"* ]] && dtype=""
  # shellcheck disable=SC2086  # SERVER_ARGS is a list of flags
  "$DSERVE" serve --model "classify=$MODEL_DIR" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
    $dtype $SERVER_ARGS "$@" >"$log.out" 2>"$log" &
  SERVER_PIDS+=($!)
  local pid=$!
  for _ in $(seq 600); do
    PORT=$(sed -n 's/^dserve: listening on port \([0-9]*\)$/\1/p' "$log.out" || true)
    METRICS_PORT=$(sed -n 's/^dserve: metrics on port \([0-9]*\)$/\1/p' "$log.out" || true)
    [[ -n "$PORT" && -n "$METRICS_PORT" ]] && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server failed:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "server did not start" >&2; exit 1
}

stop_server() {
  local pid=${SERVER_PIDS[-1]}
  kill "$pid"; wait "$pid" 2>/dev/null || true
  unset 'SERVER_PIDS[-1]'
}

# Items/s of the closed-loop load: load INPUT CLIENTS.
load_rate() {
  "$CLIENT" --target "127.0.0.1:$PORT" --json load --model classify --task classify \
    --input "$1" --concurrency "$2" --duration-s "$DURATION_S" --warmup-s "$WARMUP_S" --channels 4 \
    >"$WORK/load.json"
  "$PY" - "$WORK/load.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
if r["items_per_s"] <= 0 or set(r["codes"]) - {"OK"}:
    sys.exit(f"load run failed or too short for this model (raise --duration-s/--warmup-s): {r}")
print(f"{r['items_per_s']:.2f} {r['latency_ms']['p50']:.2f} {r['latency_ms']['p99']:.2f}")
PYEOF
}

mean_batch() {
  "$PY" - "$METRICS_PORT" <<'PYEOF'
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
def total(name):
    return sum(float(m.group(1)) for m in re.finditer(rf'^{name}{{[^}}]*model="classify"[^}}]*}} (\S+)$', text, re.M))
count = total("dserve_batch_size_count")
print(f"{total('dserve_batch_size_sum') / count:.2f}" if count else "n/a")
PYEOF
}

echo "== dserve serve benchmark =="
echo "machine: nproc=$(nproc), cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -sr)"
echo "model:   $MODEL_DIR ($MODEL_KIND)"
echo "config:  repeats=$REPEATS, load ${DURATION_S}s window after ${WARMUP_S}s warm-up per run (rates = replies in the window), 4 client channels,"
if [[ -z "$BEFORE_DSERVE" ]]; then
  echo "         (a) $LONG_CLIENTS clients, long texts, server defaults (max-batch-size 32) vs 'dserve forward --batch-size 32' over $ENGINE_LINES lines"
  echo "         (b) $SHORT_CLIENTS clients, short texts, server defaults vs --max-batch-size 1"
fi
echo "         client and server share this machine's cores (the load client's CPU is part of the cost)"
echo "         extra server flags: ${SERVER_ARGS:-(none)}; OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)};" \
     "load average before start: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ "$MODEL_KIND" != "custom checkpoint" ]]; then
  echo "NOTE:    tiny model: its forward pass is microseconds per item, so ratio (a) is dominated by"
  echo "         per-call gRPC/server/client overhead; use --model-dir for a production-size encoder."
fi

if [[ -n "$BEFORE_DSERVE" ]]; then
  # (c) The engine before/after, seen through the server: the same load on a
  # server of each binary, one at a time, the order swapped every repeat.
  [[ -x "$BEFORE_DSERVE" ]] || { echo "serve_bench.sh: --before-dserve $BEFORE_DSERVE is not executable" >&2; exit 2; }
  AFTER_DSERVE=$DSERVE
  echo "(c) engine before/after through the server: $LONG_CLIENTS clients, long texts, server defaults;"
  echo "    before = $BEFORE_DSERVE ($(stat -c '%y' "$BEFORE_DSERVE" | cut -d. -f1)), after = $AFTER_DSERVE; dtypes $DTYPES"
  C_ROWS=()
  for dtype in ${DTYPES//,/ }; do
    for r in $(seq "$REPEATS"); do
      order="before after"; (( r % 2 == 0 )) && order="after before"
      declare -A RATE=()
      for which in $order; do
        if [[ $which == before ]]; then DSERVE=$BEFORE_DSERVE; else DSERVE=$AFTER_DSERVE; fi
        start_server --dtype "$dtype"
        out=$(load_rate "$WORK/long.jsonl" "$LONG_CLIENTS"); read -r rate p50 p99 <<<"$out"
        stop_server
        RATE[$which]=$rate
        printf '%s repeat %d: %-6s %s items/s (p50 %s ms, p99 %s ms)\n' "$dtype" "$r" "$which" "$rate" "$p50" "$p99"
      done
      C_ROWS+=("$dtype ${RATE[before]} ${RATE[after]}")
    done
  done
  DSERVE=$AFTER_DSERVE
  "$PY" - "$JSON_OUT" "${C_ROWS[@]}" <<'PYEOF'
import json, statistics, sys
out, rows = sys.argv[1], [r.split() for r in sys.argv[2:]]
res = {}
print("== medians (ratio = median over repeats of after / before) ==")
for dtype in dict.fromkeys(r[0] for r in rows):
    b = [float(r[1]) for r in rows if r[0] == dtype]
    a = [float(r[2]) for r in rows if r[0] == dtype]
    ratios = [x / y for x, y in zip(a, b)]
    res[dtype] = {"before_items_per_s": b, "after_items_per_s": a, "ratio_after_vs_before": ratios,
                  "median_ratio": statistics.median(ratios)}
    print(f"(c) {dtype}: after / before {statistics.median(ratios):.2f}x (per repeat "
          f"{', '.join(f'{x:.2f}' for x in ratios)}); medians: before {statistics.median(b):.1f} items/s, "
          f"after {statistics.median(a):.1f} items/s")
if out:
    json.dump({"before_after": res}, open(out, "w"), indent=2)
PYEOF
  exit 0
fi

A_ENGINE=(); A_SERVER=(); A_RATIO=(); B_BATCH=(); B_ONE=(); B_RATIO=()
start_server
BATCHED_PORT=$PORT
BATCHED_METRICS=$METRICS_PORT
start_server --max-batch-size 1
ONE_PORT=$PORT

for r in $(seq "$REPEATS"); do
  engine=$(engine_rate)
  PORT=$BATCHED_PORT
  out=$(load_rate "$WORK/long.jsonl" "$LONG_CLIENTS"); read -r server a_p50 a_p99 <<<"$out"
  out=$(load_rate "$WORK/short.jsonl" "$SHORT_CLIENTS"); read -r batched b_p50 b_p99 <<<"$out"
  PORT=$ONE_PORT
  out=$(load_rate "$WORK/short.jsonl" "$SHORT_CLIENTS"); read -r one o_p50 o_p99 <<<"$out"
  ratio_a=$("$PY" -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.3f}')" "$server" "$engine")
  ratio_b=$("$PY" -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$batched" "$one")
  A_ENGINE+=("$engine"); A_SERVER+=("$server"); A_RATIO+=("$ratio_a")
  B_BATCH+=("$batched"); B_ONE+=("$one"); B_RATIO+=("$ratio_b")
  printf 'repeat %d: (a) engine %s items/s, server %s items/s (p50 %s ms, p99 %s ms), ratio %s | (b) batched %s items/s (p50 %s ms), batch-size-1 %s items/s (p50 %s ms), ratio %s\n' \
    "$r" "$engine" "$server" "$a_p50" "$a_p99" "$ratio_a" "$batched" "$b_p50" "$one" "$o_p50" "$ratio_b"
done
METRICS_PORT=$BATCHED_METRICS
MEAN_BATCH=$(mean_batch)

"$PY" - "$JSON_OUT" "$MEAN_BATCH" "${A_ENGINE[*]}" "${A_SERVER[*]}" "${A_RATIO[*]}" \
  "${B_BATCH[*]}" "${B_ONE[*]}" "${B_RATIO[*]}" <<'PYEOF'
import json, statistics, sys
out, mean_batch = sys.argv[1], sys.argv[2]
cols = [list(map(float, a.split())) for a in sys.argv[3:]]
med = [statistics.median(c) for c in cols]
ok_a, ok_b = med[2] >= 0.90, med[5] >= 3.0
print("== medians ==")
print(f"(a) server end to end / bare engine: {med[2]:.3f}  (server {med[1]:.1f} items/s, engine {med[0]:.1f} items/s)"
      f"  target >= 0.90: {'met' if ok_a else 'NOT met'}")
print(f"(b) dynamic batching / max-batch-size 1: {med[5]:.2f}x  (batched {med[3]:.1f} items/s, "
      f"batch-size-1 {med[4]:.1f} items/s; mean formed batch {mean_batch} over the whole run)"
      f"  target >= 3x: {'met' if ok_b else 'NOT met'}")
if out:
    keys = ["engine_items_per_s", "server_items_per_s", "ratio_server_vs_engine",
            "batched_items_per_s", "batch1_items_per_s", "ratio_batching"]
    json.dump({"repeats": {k: c for k, c in zip(keys, cols)},
               "medians": dict(zip(keys, med)), "mean_formed_batch": mean_batch,
               "targets_met": {"server_vs_engine": ok_a, "batching": ok_b}},
              open(out, "w"), indent=2)
PYEOF
