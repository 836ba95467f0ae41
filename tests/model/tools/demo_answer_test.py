#!/usr/bin/python3
"""The quickstart's answer model answers (issue 18, defect 12).

Runs deploy/demo/train_demo_models.sh exactly as the quickstart does, for
the answer task only (DSERVE_DEMO_TASKS=answer: demo data, tokenizer, MLM
pretraining with the EMD, then the answer recipe of deploy/demo/recipes.sh),
and scores the servable model on the demo test split with `dserve eval`
(SQuAD v2 rules, the no-answer threshold tuned on dev while training and
saved in the checkpoint). The model must answer: HasAns F1 >= 80 on the
test split's answerable questions, while still abstaining on most
unanswerable ones (NoAns exact >= 50; a model that always answers scores 0
there), and overall F1 above the always-abstain baseline (the unanswerable
share, 37.4).

    demo_answer_test.py --repo DIR --dserve BIN --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--dserve", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    env = dict(os.environ, DSERVE_BIN=args.dserve, DSERVE_DEMO_TASKS="answer")
    start = time.time()
    subprocess.run(["bash", os.path.join(args.repo, "deploy", "demo", "train_demo_models.sh"), args.work],
                   check=True, env=env, cwd=args.repo)
    print("trained in %.0f s" % (time.time() - start))
    with open(os.path.join(args.work, "metrics", "answer.json")) as f:
        m = json.load(f)
    with open(os.path.join(args.work, "data", "stats.json")) as f:
        stats = json.load(f)
    abstain = 100.0 * stats["qa"]["test"]["unanswerable_fraction"]
    print("test: HasAns F1 %.2f (%d), NoAns exact %.2f (%d), F1 %.2f (always abstaining: %.2f), threshold %.3f" % (
        m["HasAns_f1"], m["HasAns_total"], m["NoAns_exact"], m["NoAns_total"], m["f1"], abstain,
        m["null_score_diff_threshold"]))
    failures = []
    if m["HasAns_f1"] < 80:
        failures.append("HasAns F1 %.2f < 80: the model does not answer" % m["HasAns_f1"])
    if m["NoAns_exact"] < 50:
        failures.append("NoAns exact %.2f < 50: the model answers what the text does not say" % m["NoAns_exact"])
    if m["f1"] <= abstain:
        failures.append("F1 %.2f is no better than always abstaining (%.2f)" % (m["f1"], abstain))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
