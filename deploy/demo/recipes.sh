# The demo's training recipes, in one place (sourced by train_demo_models.sh,
# ablation.sh and bf16_vs_fp32.sh, so the three train with the same
# settings). Needs $data (the demo data folder) and DSERVE_DEMO_STEPS
# (optional, scales every step count; default 1.0).
#
#   recipe TASK   sets RECIPE=(dserve train arguments) for mlm, classify,
#                 answer or rerank, without --out, --seed, --init/--config.

demo_steps() { /usr/bin/python3 -c "print(max(1, int($1 * ${DSERVE_DEMO_STEPS:-1.0})))"; }

recipe() {
  case $1 in
    mlm)
      RECIPE=(--task mlm --train "$data/mlm_train.txt" --eval "$data/mlm_dev.txt"
              --epochs 3 --max-steps "$(demo_steps 600)" --batch-size 32 --lr 2e-3 --max-length 128 --span-masking) ;;
    classify)
      RECIPE=(--task classify --train "$data/tickets_train.jsonl" --eval "$data/tickets_dev.jsonl"
              --epochs 4 --max-steps "$(demo_steps 300)" --batch-size 32 --lr 1e-3 --max-length 96) ;;
    answer)
      # ~2,700 training questions (mostly product sheets, deploy/demo/README.md)
      # need several epochs before the model answers instead of abstaining
      # (issue 18 defect 12: 300 steps gave HasAns F1 0).
      RECIPE=(--task answer --train "$data/qa_train.json" --eval "$data/qa_dev.json"
              --epochs 30 --max-steps "$(demo_steps 1200)" --eval-every "$(demo_steps 300)" --warmup-ratio 0.06
              --batch-size 16 --lr 1e-3 --max-length 192 --doc-stride 64) ;;
    rerank)
      RECIPE=(--task rerank --train "$data/rerank_train.jsonl" --eval "$data/rerank_dev.jsonl"
              --epochs 10 --max-steps "$(demo_steps 300)" --batch-size 32 --lr 1e-3 --max-length 160) ;;
    *)
      echo "recipe: unknown task '$1' (mlm, classify, answer, rerank)" >&2
      return 2 ;;
  esac
}
