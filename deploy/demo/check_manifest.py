#!/usr/bin/python3
"""Checks the committed demo models against deploy/demo/models/MANIFEST.json
(the sha256 of every file, and no file the manifest does not list), so a
model that was changed by hand or half-copied is not served as the demo.

    check_manifest.py [MODELS_DIR]     (default deploy/demo/models)
"""
import hashlib
import json
import os
import sys

TASKS = ("classify", "answer", "rerank")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check(models):
    """(manifest, failures): failures is a list of messages, empty when all match."""
    path = os.path.join(models, "MANIFEST.json")
    if not os.path.exists(path):
        return None, ["%s: missing" % path]
    with open(path) as f:
        manifest = json.load(f)
    failures = []
    for task in TASKS:
        files = manifest["models"].get(task, {}).get("files", {})
        if not files:
            failures.append("%s: MANIFEST.json lists no files" % task)
        for name, digest in files.items():
            p = os.path.join(models, task, name)
            if not os.path.exists(p):
                failures.append("%s/%s: missing" % (task, name))
            elif sha256(p) != digest:
                failures.append("%s/%s: sha256 differs from MANIFEST.json" % (task, name))
        folder = os.path.join(models, task)
        on_disk = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        extra = sorted(set(on_disk) - set(files))
        if extra:
            failures.append("%s: files not in MANIFEST.json: %s" % (task, ", ".join(extra)))
    return manifest, failures


def main():
    models = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "models")
    _, failures = check(models)
    for f in failures:
        print("check_manifest: %s" % f, file=sys.stderr)
    if failures:
        print("check_manifest: %s does not match its MANIFEST.json; DSERVE_DEMO_RETRAIN=1 retrains the demo "
              "models" % models, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
