#!/usr/bin/env bash
# The shape of the DeBERTa paper's Table 4 at toy scale, on the demo data:
# full model, -EMD, -c2p, -p2c, and BERT-style absolute positions without
# relative attention. Each variant and seed is pretrained (MLM, span masking)
# then fine-tuned for classify and answer with the demo's recipes
# (deploy/demo/recipes.sh, scaled by DSERVE_DEMO_STEPS), at equal steps;
# every number is on a held-out split (MLM dev, classify and QA test). Writes
# OUT/ablation.md: mean ± sample std over the seeds, and every run's numbers.
# The full table is not run in CI (about 11 minutes per variant and seed on
# 2 cores at scale 0.5, docs/ablation.md); ctest demo.ablation_smoke runs the
# script end to end at a tiny scale. Runs are resumable: a finished stage is
# skipped on the next call.
#
#   bash deploy/demo/ablation.sh [OUT]      (default build/ablation)
#   DSERVE_ABLATION_SEEDS="13 14 15" (default), DSERVE_ABLATION_VARIANTS
#   (default "full no_emd no_c2p no_p2c absolute"), DSERVE_ABLATION_JOBS
#   (runs at once, default 1) with DSERVE_ABLATION_THREADS intra-op threads
#   each (default 0 = dserve's default). The toy encoder is too small to
#   keep two threads busy, so on 2 cores JOBS=2 THREADS=1 finishes sooner.
#   DSERVE_ABLATION_DEMO_DIR: where the shared demo data and tokenizer are
#   made (default build/demo).
# Each run's log is OUT/VARIANT/seedS/log.txt, its stage times times.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/ablation}
dserve=${DSERVE_BIN:-build/bin/dserve}
seeds=${DSERVE_ABLATION_SEEDS:-13 14 15}
variants=${DSERVE_ABLATION_VARIANTS:-full no_emd no_c2p no_p2c absolute}
jobs=${DSERVE_ABLATION_JOBS:-1}
threads=${DSERVE_ABLATION_THREADS:-0}
mkdir -p "$out"
# Data and tokenizer shared with the demo models (seed 13's data).
demo=${DSERVE_ABLATION_DEMO_DIR:-build/demo}
DSERVE_DEMO_DATA_ONLY=1 bash deploy/demo/train_demo_models.sh "$demo" >/dev/null
data=$demo/data
spm=$demo/tokenizer/spm.model
base=$demo/config.json
source deploy/demo/recipes.sh

variant_config() {  # name -> config.json edits
  /usr/bin/python3 - "$base" "$1" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
name = sys.argv[2]
if name == "no_c2p":
    config["pos_att_type"] = ["p2c"]
elif name == "no_p2c":
    config["pos_att_type"] = ["c2p"]
elif name == "absolute":
    config.update(relative_attention=False, position_biased_input=True, pos_att_type=[])
elif name not in ("full", "no_emd"):
    sys.exit("unknown variant " + name)
print(json.dumps(config))
PY
}

timed() {  # stage, command...: runs it, appends "stage seconds" to times.txt
  local stage=$1 start=$SECONDS; shift
  "$@"
  echo "$stage $((SECONDS - start))" >> "$dir/times.txt"
}

one_run() {  # variant, seed
  local name=$1 seed=$2
  dir=$out/$name/seed$seed
  mkdir -p "$dir"
  variant_config "$name" > "$dir/config.json"
  local emd=()
  [ "$name" = no_emd ] && emd=(--no-emd)
  if [ ! -f "$dir/mlm/best/config.json" ]; then
    recipe mlm
    timed mlm "$dserve" train "${RECIPE[@]}" --config "$dir/config.json" --tokenizer "$spm" \
      --out "$dir/mlm" --seed "$seed" --threads "$threads" "${emd[@]}"
  fi
  for task in classify answer; do
    if [ ! -f "$dir/$task/best/config.json" ]; then
      recipe "$task"
      timed "$task" "$dserve" train "${RECIPE[@]}" --init "$dir/mlm/best" --out "$dir/$task" \
        --seed "$seed" --threads "$threads"
    fi
  done
  [ -f "$dir/mlm.json" ] || "$dserve" eval --model "$dir/mlm/best" --data "$data/mlm_dev.txt" > "$dir/mlm.json"
  [ -f "$dir/classify.json" ] ||
    "$dserve" eval --model "$dir/classify/best" --data "$data/tickets_test.jsonl" > "$dir/classify.json"
  [ -f "$dir/answer.json" ] || "$dserve" eval --model "$dir/answer/best" --data "$data/qa_test.json" > "$dir/answer.json"
}

# Seeds outer, so an interrupted run has every variant at the first seeds.
failed=0
for seed in $seeds; do
  for name in $variants; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || failed=1; done
    echo "== ablation $name seed $seed ($(date +%H:%M:%S)); log: $out/$name/seed$seed/log.txt" >&2
    mkdir -p "$out/$name/seed$seed"
    one_run "$name" "$seed" > "$out/$name/seed$seed/log.txt" 2>&1 &
  done
done
while [ "$(jobs -rp | wc -l)" -gt 0 ]; do wait -n || failed=1; done
if [ "$failed" != 0 ]; then
  echo "ablation: a run failed; see the log.txt files under $out" >&2
  exit 1
fi

/usr/bin/python3 - "$out" "$variants" "$seeds" "${DSERVE_DEMO_STEPS:-1.0}" <<'PY' | tee "$out/ablation.md"
import json, os, statistics, sys
out, variants, seeds, scale = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
columns = [("mlm", "accuracy", "MLM accuracy (dev)", 1), ("classify", "accuracy", "classify accuracy (test)", 1),
           ("answer", "f1", "QA F1 (test)", 1), ("answer", "HasAns_f1", "QA HasAns F1 (test)", 1)]
def value(name, seed, task, key):
    with open(os.path.join(out, name, "seed" + seed, task + ".json")) as f:
        return float(json.load(f)[key])
print("Seeds %s, DSERVE_DEMO_STEPS=%s; mean ± sample std over the seeds.\n" % (", ".join(seeds), scale))
print("| variant | " + " | ".join(c[2] for c in columns) + " |")
print("|---|" + "---|" * len(columns))
for name in variants:
    cells = []
    for task, key, _, _ in columns:
        vals = [value(name, s, task, key) for s in seeds]
        sd = statistics.stdev(vals) if len(vals) > 1 else float("nan")
        cells.append("%.4f ± %.4f" % (statistics.mean(vals), sd) if key == "accuracy" else
                     "%.2f ± %.2f" % (statistics.mean(vals), sd))
    print("| %s | %s |" % (name, " | ".join(cells)))
print("\nEvery run:\n")
print("| variant | seed | " + " | ".join(c[2] for c in columns) + " |")
print("|---|---|" + "---|" * len(columns))
for name in variants:
    for s in seeds:
        print("| %s | %s | %s |" % (name, s, " | ".join("%.4f" % value(name, s, t, k) for t, k, _, _ in columns)))
PY
