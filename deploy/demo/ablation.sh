#!/usr/bin/env bash
# The shape of the DeBERTa paper's Table 4 at toy scale, on the demo data:
# full model, -EMD, -c2p, -p2c, and BERT-style absolute positions without
# relative attention. Each variant is pretrained (MLM) then fine-tuned for
# classify and answer with the same budget as deploy/demo/train_demo_models.sh
# (scaled by DSERVE_DEMO_STEPS); writes a markdown table to OUT/ablation.md.
# Not run in CI (tens of minutes on 2 cores).
#
#   bash deploy/demo/ablation.sh [OUT]      (default build/ablation)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/ablation}
dserve=${DSERVE_BIN:-build/bin/dserve}
scale=${DSERVE_DEMO_STEPS:-1.0}
steps() { /usr/bin/python3 -c "print(max(1, int($1 * $scale)))"; }
mkdir -p "$out"
# Data and tokenizer shared with the demo models.
bash deploy/demo/train_demo_models.sh build/demo >/dev/null
data=build/demo/data
spm=build/demo/tokenizer/spm.model
base=build/demo/config.json

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
print(json.dumps(config))
PY
}

metric() {  # file key
  /usr/bin/python3 -c "import json,sys; print('%.4f' % json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"
}

rows=()
for name in full no_emd no_c2p no_p2c absolute; do
  dir=$out/$name
  mkdir -p "$dir"
  variant_config "$name" > "$dir/config.json"
  emd=()
  [ "$name" = no_emd ] && emd=(--no-emd)
  if [ ! -f "$dir/mlm/best/config.json" ]; then
    echo "== ablation $name: pretraining" >&2
    "$dserve" train --task mlm --train "$data/mlm_train.txt" --eval "$data/mlm_dev.txt" --config "$dir/config.json" \
      --tokenizer "$spm" --out "$dir/mlm" --seed 13 --epochs 3 --max-steps "$(steps 600)" --batch-size 32 \
      --lr 2e-3 --max-length 128 --span-masking "${emd[@]}"
  fi
  if [ ! -f "$dir/classify/best/config.json" ]; then
    "$dserve" train --task classify --train "$data/tickets_train.jsonl" --eval "$data/tickets_dev.jsonl" \
      --init "$dir/mlm/best" --out "$dir/classify" --seed 13 --epochs 4 --max-steps "$(steps 300)" \
      --batch-size 32 --lr 1e-3 --max-length 96
  fi
  if [ ! -f "$dir/answer/best/config.json" ]; then
    "$dserve" train --task answer --train "$data/qa_train.json" --eval "$data/qa_dev.json" --init "$dir/mlm/best" \
      --out "$dir/answer" --seed 13 --epochs 30 --max-steps "$(steps 300)" --batch-size 16 --lr 1e-3 \
      --max-length 192 --doc-stride 64
  fi
  "$dserve" eval --model "$dir/mlm/best" --data "$data/mlm_dev.txt" > "$dir/mlm.json"
  "$dserve" eval --model "$dir/classify/best" --data "$data/tickets_test.jsonl" > "$dir/classify.json"
  "$dserve" eval --model "$dir/answer/best" --data "$data/qa_test.json" > "$dir/answer.json"
  rows+=("| $name | $(metric "$dir/mlm.json" accuracy) | $(metric "$dir/classify.json" accuracy) | $(metric "$dir/answer.json" f1) |")
done
{
  echo "| variant | MLM accuracy (dev) | classify accuracy (test) | QA F1 (test) |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out/ablation.md"
