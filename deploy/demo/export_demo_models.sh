#!/usr/bin/env bash
# Copies the demo models that deploy/demo/train_demo_models.sh left in
# OUT/models into deploy/demo/models/ (what the quickstart serves) and writes
# deploy/demo/models/MANIFEST.json: the command, the commit, the data seed,
# the test metrics and the sha256 of every file. Run after a retrain that
# should replace the committed models, then commit deploy/demo/models/.
#
#   bash deploy/demo/export_demo_models.sh [OUT]     (default build/demo)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/demo}
dest=deploy/demo/models
for task in classify answer rerank; do
  [ -f "$out/models/$task/config.json" ] || { echo "export: $out/models/$task is missing (train first)" >&2; exit 2; }
done
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
for task in classify answer rerank; do
  mkdir -p "$dest.tmp/$task"
  cp "$out/models/$task"/{config.json,model.safetensors,spm.model} "$dest.tmp/$task/"
done
/usr/bin/python3 - "$out" "$dest.tmp" "$(git rev-parse HEAD)$(git diff --quiet HEAD -- deploy/demo model || echo '+changes')" \
    "$dest/MANIFEST.json" <<'PY'
import datetime, hashlib, json, os, platform, sys
out, dest, commit, committed = sys.argv[1:5]
def sha(p):
    return hashlib.sha256(open(p, "rb").read()).hexdigest()
stats = json.load(open(os.path.join(out, "data", "stats.json")))  # the seed and scale the data was made with
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
manifest = {
    "command": "bash deploy/demo/train_demo_models.sh %s && bash deploy/demo/export_demo_models.sh %s" % (out, out),
    "commit": commit,
    "data": dict(generator="deploy/demo/generate_demo_data.py", **{k: stats[k] for k in ("seed", "scale")}),
    "recipes": "deploy/demo/recipes.sh",
    "exported": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "machine": "%d cores, %s" % (os.cpu_count(), cpu),
    "models": {},
}
# Each model says where it was trained. A model whose files are byte for byte
# the committed ones (a partial retrain, DSERVE_DEMO_TASKS) keeps its old
# commit, machine and date; the top-level fields are this export's.
try:
    old = json.load(open(committed))
except (OSError, ValueError):
    old = {"models": {}}
for task in ("classify", "answer", "rerank"):
    files = sorted(os.listdir(os.path.join(dest, task)))
    m = {"files": {f: sha(os.path.join(dest, task, f)) for f in files}}
    was = old["models"].get(task, {})
    same = was.get("files") == m["files"]
    for k in ("commit", "machine", "exported"):
        m[k] = was.get(k, old.get(k)) if same else manifest[k]
    metrics = os.path.join(out, "metrics", task + ".json")
    if os.path.exists(metrics):
        m["test_metrics"] = json.load(open(metrics))
    elif same and "test_metrics" in was:
        m["test_metrics"] = was["test_metrics"]
    manifest["models"][task] = m
json.dump(manifest, open(os.path.join(dest, "MANIFEST.json"), "w"), indent=1, sort_keys=True)
PY
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "export: $dest ($(du -sh "$dest" | cut -f1)); MANIFEST.json written"
