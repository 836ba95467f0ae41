#!/usr/bin/python3
"""deploy/demo/ablation.sh runs end to end and its table is what it read.

The full ablation (docs/ablation.md) takes ~90 minutes; this runs the same
script at DSERVE_DEMO_STEPS=0.01 (a few optimizer steps per stage) for two
variants and two seeds, two runs at a time, and checks:
- every run left its checkpoints, its three `dserve eval` results, a log and
  its stage times;
- the written table has one mean ± std row per variant and one row per run,
  and each cell equals the value recomputed here from the eval files (mean
  and sample standard deviation over the seeds);
- the two variants really differ in their configs (absolute positions vs
  relative attention), and a second call resumes without training again.

    ablation_smoke_test.py --repo DIR --dserve BIN --work DIR
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

VARIANTS = ["full", "absolute"]
SEEDS = ["13", "14"]
COLUMNS = [("mlm", "accuracy"), ("classify", "accuracy"), ("answer", "f1"), ("answer", "HasAns_f1")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--dserve", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    out = os.path.join(args.work, "ablation")
    env = dict(os.environ, DSERVE_BIN=args.dserve, DSERVE_DEMO_STEPS="0.01",
               DSERVE_ABLATION_SEEDS=" ".join(SEEDS), DSERVE_ABLATION_VARIANTS=" ".join(VARIANTS),
               DSERVE_ABLATION_JOBS="2", DSERVE_ABLATION_THREADS="1",
               DSERVE_ABLATION_DEMO_DIR=os.path.join(args.work, "demo"))
    script = os.path.join(args.repo, "deploy", "demo", "ablation.sh")
    start = time.time()
    subprocess.run(["bash", script, out], check=True, env=env, cwd=args.repo)
    print("ran in %.0f s" % (time.time() - start))
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    values = {}
    for v in VARIANTS:
        for s in SEEDS:
            d = os.path.join(out, v, "seed" + s)
            for task in ("mlm", "classify", "answer"):
                check(os.path.isfile(os.path.join(d, task, "best", "model.safetensors")), f"{d}: {task}/best")
            with open(os.path.join(d, "times.txt")) as f:
                stages = [line.split()[0] for line in f if line.strip()]
            check(stages == ["mlm", "classify", "answer"], f"{d}/times.txt stages {stages}")
            check(os.path.getsize(os.path.join(d, "log.txt")) > 0, f"{d}/log.txt empty")
            for task, key in COLUMNS:
                with open(os.path.join(d, task + ".json")) as f:
                    values[(v, s, task, key)] = float(json.load(f)[key])
        with open(os.path.join(out, v, "seed13", "config.json")) as f:
            config = json.load(f)
        check(config["relative_attention"] == (v != "absolute"), f"{v}: relative_attention {config}")
        check(config["position_biased_input"] == (v == "absolute"), f"{v}: position_biased_input")

    with open(os.path.join(out, "ablation.md")) as f:
        table = f.read()
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 5 and cells[0] in VARIANTS:
            rows[tuple(cells[:2]) if cells[1] in SEEDS else (cells[0],)] = cells
    for v in VARIANTS:
        mean_row = rows.get((v,))
        check(mean_row is not None, f"no mean row for {v}")
        for i, (task, key) in enumerate(COLUMNS):
            vals = [values[(v, s, task, key)] for s in SEEDS]
            if mean_row is not None:
                m = re.fullmatch(r"([-0-9.]+) ± ([-0-9.na]+)", mean_row[1 + i])
                check(m is not None, f"{v} {task}.{key}: cell {mean_row[1 + i]!r}")
                if m:
                    digits = 4 if key == "accuracy" else 2
                    check(abs(float(m.group(1)) - statistics.mean(vals)) <= 0.6 * 10 ** -digits,
                          f"{v} {task}.{key}: mean {m.group(1)} vs {statistics.mean(vals)}")
                    check(abs(float(m.group(2)) - statistics.stdev(vals)) <= 0.6 * 10 ** -digits,
                          f"{v} {task}.{key}: std {m.group(2)} vs {statistics.stdev(vals)}")
            for s in SEEDS:
                run_row = rows.get((v, s))
                check(run_row is not None, f"no row for {v} seed {s}")
                if run_row is not None:
                    check(abs(float(run_row[2 + i]) - values[(v, s, task, key)]) <= 6e-5,
                          f"{v} seed {s} {task}.{key}: {run_row[2 + i]} vs {values[(v, s, task, key)]}")

    # Resumable: a second call finds every stage done and trains nothing.
    mtime = os.path.getmtime(os.path.join(out, "full", "seed13", "answer", "best", "model.safetensors"))
    start = time.time()
    subprocess.run(["bash", script, out], check=True, env=env, cwd=args.repo, stdout=subprocess.DEVNULL)
    check(os.path.getmtime(os.path.join(out, "full", "seed13", "answer", "best", "model.safetensors")) == mtime,
          "the second call retrained")
    print("resumed in %.0f s" % (time.time() - start))

    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok: %d runs, table matches the eval files" % (len(VARIANTS) * len(SEEDS)))


if __name__ == "__main__":
    main()
