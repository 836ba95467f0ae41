#!/usr/bin/env bash
# Trains the tiny demo models for all three tasks from scratch on the demo
# data, as the DeBERTa recipe does at toy scale: a SentencePiece tokenizer,
# MLM pretraining with the Enhanced Mask Decoder, then fine-tuning of each
# head from the pretrained encoder. Minutes on 2 CPU cores, with progress.
#
#   bash deploy/demo/train_demo_models.sh [OUT]     (default build/demo)
#
# Leaves OUT/models/{classify,answer,rerank} (servable checkpoints) and
# OUT/metrics/{classify,answer,rerank}.json (`dserve eval` on the test
# splits). Skips every step whose output already exists, so a second run
# returns at once; DSERVE_DEMO_FORCE=1 retrains. DSERVE_DEMO_STEPS scales the
# number of optimizer steps (default 1.0). DSERVE_DEMO_TASKS picks the
# fine-tuned tasks (default "classify answer rerank"; the MLM runs when
# classify or answer is among them). The reranker is the exception to the
# recipe above: it trains from scratch in two stages on a config of its own
# (absolute positions; deploy/demo/README.md, issue 25).
# DSERVE_DEMO_DATA_ONLY=1 stops after the data, tokenizer and config.json
# (what deploy/demo/ablation.sh shares with the demo).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/demo}
dserve=${DSERVE_BIN:-build/bin/dserve}
source deploy/demo/recipes.sh  # recipe TASK: the training settings
[ "${DSERVE_DEMO_FORCE:-0}" = 1 ] && rm -rf "$out"
mkdir -p "$out"/{data,tokenizer,runs,models,metrics}
data=$out/data
say() { echo "== demo: $*" >&2; }

if [ ! -f "$data/stats.json" ]; then
  say "generating demo data"
  /usr/bin/python3 deploy/demo/generate_demo_data.py --out "$data" --seed 13 >/dev/null
fi
if [ ! -f "$out/tokenizer/spm.model" ]; then
  say "training the tokenizer"
  "$dserve" train-tokenizer --input "$data/mlm_train.txt" "$data/manuals.txt" --vocab-size 2000 \
    --out "$out/tokenizer"
fi
# A DeBERTa-v3-shaped encoder at toy size: relative attention with log
# buckets, c2p + p2c, shared keys, normalised relative table, no absolute
# positions in the input (the EMD adds them while pretraining). Two token
# types (DeBERTa-v3 has none), trained by the sentence-order objective, so a
# pair's tokens know their side.
cat > "$out/config.json" <<JSON
{"model_type": "deberta-v2", "architectures": ["DebertaV2ForMaskedLM"],
 "vocab_size": 2000, "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
 "intermediate_size": 512, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
 "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 256, "type_vocab_size": 2,
 "initializer_range": 0.05, "layer_norm_eps": 1e-7, "relative_attention": true,
 "max_relative_positions": -1, "position_buckets": 64, "pos_att_type": ["p2c", "c2p"],
 "norm_rel_ebd": "layer_norm", "share_att_key": true, "position_biased_input": false,
 "pooler_hidden_act": "gelu", "pooler_dropout": 0, "pad_token_id": 0}
JSON
# The reranker's own config (issue 25): config.json's encoder size with
# absolute positions in the input and no relative attention, so that a content
# match between the query's words and the passage's is the whole attention
# logit from the start, initializer_range 0.02 and no dropout. Trained from
# scratch in two stages (recipes.sh: rerank_first, then rerank);
# deploy/demo/README.md says why.
/usr/bin/python3 - "$out/config.json" "$out/rerank_config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
for k in ("max_relative_positions", "position_buckets", "pos_att_type", "norm_rel_ebd", "share_att_key"):
    del c[k]  # relative attention only
c.update(architectures=["DebertaV2ForSequenceClassification"], hidden_dropout_prob=0.0,
         attention_probs_dropout_prob=0.0, initializer_range=0.02, relative_attention=False,
         position_biased_input=True)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
[ "${DSERVE_DEMO_DATA_ONLY:-0}" = 1 ] && exit 0

run() {  # name, then dserve train arguments
  local name=$1; shift
  if [ -f "$out/runs/$name/best/config.json" ]; then return; fi
  say "training $name"
  "$dserve" train --out "$out/runs/$name" --seed 13 "$@"
}
tasks=${DSERVE_DEMO_TASKS:-classify answer rerank}
for task in $tasks; do
  case $task in classify|answer|rerank) ;; *) echo "DSERVE_DEMO_TASKS: unknown task '$task' (classify, answer, rerank)" >&2; exit 2 ;; esac
done
# The MLM encoder is what classify and answer start from; the reranker
# trains from scratch, so DSERVE_DEMO_TASKS=rerank skips it.
init=$out/runs/mlm/best
if [[ " $tasks " == *" classify "* || " $tasks " == *" answer "* ]]; then
  recipe mlm
  run mlm "${RECIPE[@]}" --config "$out/config.json" --tokenizer "$out/tokenizer/spm.model" --objective sop
fi
for task in $tasks; do
  if [ "$task" = rerank ]; then
    recipe rerank_first
    run rerank_first "${RECIPE[@]}" --config "$out/rerank_config.json" --tokenizer "$out/tokenizer/spm.model"
    recipe rerank
    run rerank "${RECIPE[@]}" --init "$out/runs/rerank_first/best"
    continue
  fi
  recipe "$task"
  run "$task" "${RECIPE[@]}" --init "$init"
done

for task in $tasks; do
  if [ ! -f "$out/models/$task/config.json" ]; then
    rm -rf "$out/models/$task" && cp -r "$out/runs/$task/best" "$out/models/$task"
  fi
done
declare -A test_data=([classify]=tickets_test.jsonl [answer]=qa_test.json [rerank]=rerank_test.jsonl)
for task in $tasks; do
  if [ ! -f "$out/metrics/$task.json" ]; then
    "$dserve" eval --model "$out/models/$task" --data "$data/${test_data[$task]}" > "$out/metrics/$task.json.tmp"
    mv "$out/metrics/$task.json.tmp" "$out/metrics/$task.json"
  fi
  say "$task test metrics: $(head -c 400 "$out/metrics/$task.json")"
done
