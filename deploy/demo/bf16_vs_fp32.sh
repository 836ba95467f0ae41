#!/usr/bin/env bash
# `dserve train --bf16` against fp32 on the demo tasks, side by side in one
# run: each task fine-tuned from the demo's pretrained encoder with the demo
# recipe (deploy/demo/recipes.sh), same seed and data order, once in fp32 and
# once with --bf16 (CPU autocast), then scored on the test split. Prints a
# markdown table (training tokens/s from metrics.csv, wall time, the test
# metric) with the CPU's bf16 path, and writes it to OUT/bf16_vs_fp32.md.
# Not run in CI (minutes per task on 2 cores).
#
#   bash deploy/demo/bf16_vs_fp32.sh [OUT]     (default build/bf16_vs_fp32)
#   DSERVE_BF16_TASKS (default "classify answer rerank"), DSERVE_DEMO_STEPS
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/bf16_vs_fp32}
dserve=${DSERVE_BIN:-build/bin/dserve}
tasks=${DSERVE_BF16_TASKS:-classify answer rerank}
mkdir -p "$out"
DSERVE_DEMO_TASKS=classify bash deploy/demo/train_demo_models.sh build/demo >/dev/null  # data, tokenizer, MLM
data=build/demo/data
init=build/demo/runs/mlm/best
source deploy/demo/recipes.sh
declare -A test_data=([classify]=tickets_test.jsonl [answer]=qa_test.json [rerank]=rerank_test.jsonl)

for task in $tasks; do
  recipe "$task"
  for precision in fp32 bf16; do
    dir=$out/$task-$precision
    [ -f "$dir/test.json" ] && continue
    rm -rf "$dir"
    flag=()
    [ "$precision" = bf16 ] && flag=(--bf16)
    echo "== $task $precision" >&2
    start=$(date +%s%N)
    "$dserve" train "${RECIPE[@]}" --init "$init" --out "$dir" --seed 13 "${flag[@]}"
    echo $(( ($(date +%s%N) - start) / 1000000 )) > "$dir/wall_ms"
    "$dserve" eval --model "$dir/best" --data "$data/${test_data[$task]}" > "$dir/test.json.tmp"
    mv "$dir/test.json.tmp" "$dir/test.json"
  done
done

/usr/bin/python3 - "$out" "$tasks" "$(grep -o -m1 -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" <<'PY' | tee "$out/bf16_vs_fp32.md"
import csv, json, os, statistics, sys
out, tasks, flags, cpu = sys.argv[1], sys.argv[2].split(), sys.argv[3].strip(), sys.argv[4].strip()
metric = {"classify": "accuracy", "answer": "f1", "rerank": "mrr@10"}
def run(task, precision):
    d = os.path.join(out, "%s-%s" % (task, precision))
    with open(os.path.join(d, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    tps = statistics.median(float(r["tokens_per_s"]) for r in rows if r["tokens_per_s"])
    with open(os.path.join(d, "wall_ms")) as f:
        wall = float(f.read()) / 1000
    with open(os.path.join(d, "test.json")) as f:
        test = json.load(f)
    value = float(test[metric[task]])
    return tps, wall, value * (100 if metric[task] != "f1" else 1), len(rows)
print("CPU: %s (bf16 flags: %s)\n" % (cpu, flags or "none: bf16 is emulated"))
print("| task | steps | fp32 tokens/s | bf16 tokens/s | bf16 / fp32 speed | fp32 wall s | bf16 wall s "
      "| test metric (x100) | fp32 | bf16 | bf16 - fp32 |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for task in tasks:
    f_tps, f_wall, f_val, steps = run(task, "fp32")
    b_tps, b_wall, b_val, _ = run(task, "bf16")
    print("| %s | %d | %.0f | %.0f | %.2fx | %.0f | %.0f | %s | %.2f | %.2f | %+.2f |" % (
        task, steps, f_tps, b_tps, b_tps / f_tps, f_wall, b_wall, metric[task], f_val, b_val, b_val - f_val))
PY
