#!/usr/bin/python3
"""Export the eager baseline (bench/eager/eager_baseline.py: Hugging Face's
DebertaV2 computation) to ONNX for the ONNX Runtime peer of bench/run_all.sh
(issue 19), plus the reference the ORT run is checked against.

Runs with Debian's /usr/bin/python3 (torch 1.13; `torch.onnx.export`, no
`onnx` package needed). The module is the one the eager rows time: the same
class, the same random weights (DebertaV2Eager(V3_BASE).init_random(seed),
v3-base shape, 2-label classification head; --shape deberta-base: DeBERTa v1
Base, V1_BASE, issue 26) or, with --model, a checkpoint directory (DeBERTa-v2
or v1; tiny mode: the cls_factorized golden, or the v1 cls_mnli golden). Fixed shapes (batch x
length are constants of the graph), so ORT can constant-fold the whole
relative-position index and every shape computation: the peer's best case,
as a user exporting for one serving shape would get. Opset 17 (the highest
torch 1.13 writes; LayerNorm exports as LayerNormalization).

Outputs, in OUT_DIR (one folder per shape/weights/source version, reused when
it already holds a complete export; --force re-exports):
  model.onnx   inputs input_ids, attention_mask [B, L] int64;
               outputs logits [B, labels], last_hidden_state [B, L, H] (fp32)
  model.int8.onnx  with --int8: the same graph dynamically quantized as ONNX
               Runtime's quantizer does it (bench/onnx/quantize_onnx.py)
  check.json   {"batch", "length", "input_ids" (the eager timing inputs: the
               same generator and seed as eager_baseline.time_forward),
               "logits" (eager fp32 on them), "hidden_file", ...}
  hidden.f32   eager fp32 last_hidden_state, raw little-endian float32
Prints one JSON object: {"dir", "model", "check", "reused", "export_s", ...}.

usage: export_onnx.py --batch 8 --length 128 --out-dir DIR [--shape v3-base|deberta-base | --model CKPT]
                     [--int8 [--int8-reduce-range]] [--seed 0] [--opset 17] [--force]
       export_onnx.py ... --cache-root ROOT   (OUT_DIR = ROOT/<shape>-<hash of the sources>; an export of
                                             the same shape under another hash is deleted)
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "eager"))
import eager_baseline as eb  # noqa: E402

SOURCES = [os.path.abspath(__file__), os.path.join(REPO, "bench", "eager", "eager_baseline.py"),
           os.path.join(REPO, "tests", "model", "reference", "deberta_reference.py")]
SHAPES = {"v3-base": ("V3_BASE", "deberta-v3-base shape (random weights, 2-label head)"),
          "deberta-base": ("V1_BASE", "deberta-base (v1) shape (random weights, 2-label head)")}
FORMAT = 1  # bump when the files written here change meaning


class Wrapped(torch.nn.Module):
    """The eager module with tuple outputs (torch.onnx wants tensors, not a dict)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        out = self.m(input_ids, attention_mask)
        return out["logits"], out["last_hidden_state"]


def cache_key(a):
    h = hashlib.sha256(f"{FORMAT} {a.batch} {a.length} {a.seed} {a.opset} {torch.__version__}".encode())
    for p in SOURCES:
        with open(p, "rb") as f:
            h.update(f.read())
    if a.model:
        for name in ("config.json", "model.safetensors"):
            st = os.stat(os.path.join(a.model, name))
            h.update(f"{os.path.abspath(a.model)}/{name} {st.st_size} {st.st_mtime_ns}".encode())
    what = os.path.basename(os.path.abspath(a.model)) if a.model else a.shape
    return f"{what}-{a.batch}x{a.length}-s{a.seed}-{h.hexdigest()[:12]}"


def quantize(src, dst, reduce_range=False):
    """model.int8.onnx beside model.onnx (made once; a summary of what was quantized). Debian's python3-onnx
    (bench/onnx/quantize_onnx.py); torch.onnx.export itself needs no onnx package."""
    with open(os.path.join(HERE, "quantize_onnx.py"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()[:12]
    if os.path.isfile(dst) and os.path.getmtime(dst) >= os.path.getmtime(src) and os.path.isfile(dst + ".json"):
        with open(dst + ".json") as f:
            info = json.load(f)
        if info.get("quantizer_sha") == sha and info.get("reduce_range", False) == reduce_range:
            return info
    sys.path.insert(0, HERE)
    try:
        import quantize_onnx  # noqa: E402 - needs the onnx package only here
    except ImportError as e:  # the fp32 rows must not depend on it
        return {"error": f"no int8 graph: {e} (Debian python3-onnx; bench/onnx/setup.sh installs it)"}
    info = quantize_onnx.quantize_file(src, dst, reduce_range=reduce_range)
    info["quantizer_sha"] = sha
    with open(dst + ".json.tmp", "w") as f:
        json.dump(info, f)
    os.replace(dst + ".json.tmp", dst + ".json")
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--model", help="checkpoint dir (DeBERTa-v2 or v1) instead of a random shape")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="v3-base", help="random-weight shape (no --model)")
    ap.add_argument("--int8", action="store_true",
                    help="also write model.int8.onnx (bench/onnx/quantize_onnx.py: dynamic int8, per-channel weights)")
    ap.add_argument("--int8-reduce-range", action="store_true",
                    help="with --int8: weights in 7 bits (ORT's reduce_range, for CPUs without VNNI)")
    ap.add_argument("--seed", type=int, default=0, help="init_random seed (the eager rows use 0)")
    ap.add_argument("--opset", type=int, default=17)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out-dir")
    g.add_argument("--cache-root")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    out_dir = a.out_dir or os.path.join(a.cache_root, cache_key(a))
    paths = {k: os.path.join(out_dir, k) for k in ("model.onnx", "check.json", "hidden.f32")}
    int8_path = os.path.join(out_dir, "model.int8.onnx")
    if not a.force and all(os.path.isfile(p) for p in paths.values()):
        with open(paths["check.json"]) as f:
            meta = json.load(f)
        if a.int8:
            q = quantize(paths["model.onnx"], int8_path, a.int8_reduce_range)
            meta["int8" if "error" not in q else "int8_error"] = q.get("error", q)
        meta.update(reused=True, dir=out_dir)
        meta.pop("input_ids", None)
        meta.pop("attention_mask", None)
        meta.pop("logits", None)
        print(json.dumps(meta))
        return 0
    if a.cache_root:  # older exports of this shape (other sources): ~740 MB each at v3-base, not kept
        prefix = cache_key(a).rsplit("-", 1)[0] + "-"
        for d in os.listdir(a.cache_root) if os.path.isdir(a.cache_root) else []:
            if d.startswith(prefix) and os.path.join(a.cache_root, d) != out_dir:
                shutil.rmtree(os.path.join(a.cache_root, d), ignore_errors=True)
    os.makedirs(out_dir, exist_ok=True)
    for p in paths.values():  # a half-written export is never reused: check.json is written last
        if os.path.exists(p):
            os.remove(p)

    torch.manual_seed(a.seed)
    if a.model:
        if eb.model_type(a.model) not in ("deberta-v2", "deberta"):
            ap.error("--model: only DeBERTa-v2 and v1 checkpoints (model_type deberta-v2 or deberta)")
        model = eb.load_checkpoint(a.model, torch.float32)
        name = os.path.abspath(a.model)
    else:
        config, name = SHAPES[a.shape]
        model = eb.DebertaV2Eager(getattr(eb, config)).init_random(a.seed).to(torch.float32).eval()
    if model.c.head != "classify":
        ap.error("--model: a classification checkpoint (the ONNX graph outputs logits)")
    # The inputs eager_baseline.time_forward times with (same generator, same seed).
    gen = torch.Generator().manual_seed(a.seed + 1)
    ids = torch.randint(4, model.c.vocab_size, (a.batch, a.length), generator=gen)
    ids[:, 0] = 1
    ids[:, -1] = 2
    mask = torch.ones_like(ids)
    w = Wrapped(model).eval()
    # The tracer's notes on constants (the rel-position table, the scale) are what fixed shapes mean here.
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    warnings.filterwarnings("ignore", message="To copy construct from a tensor")
    with torch.no_grad():
        logits, hidden = w(ids, mask)
        t0 = time.time()
        torch.onnx.export(w, (ids, mask), paths["model.onnx"], opset_version=a.opset,
                          input_names=["input_ids", "attention_mask"], output_names=["logits", "last_hidden_state"],
                          do_constant_folding=True)
        export_s = time.time() - t0
    hidden.contiguous().numpy().astype("<f4").tofile(paths["hidden.f32"])
    meta = {"format": FORMAT, "model_name": name, "batch": a.batch, "length": a.length, "seed": a.seed,
            "opset": a.opset, "torch_version": torch.__version__, "shapes": "fixed",
            "hidden_shape": list(hidden.shape), "hidden_file": "hidden.f32", "export_s": export_s,
            "onnx_bytes": os.path.getsize(paths["model.onnx"]), "model": paths["model.onnx"],
            "check": paths["check.json"]}
    tmp = paths["check.json"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(meta, input_ids=ids.tolist(), attention_mask=mask.tolist(), logits=logits.tolist()), f)
    os.replace(tmp, paths["check.json"])
    if a.int8:
        q = quantize(paths["model.onnx"], int8_path, a.int8_reduce_range)
        meta["int8" if "error" not in q else "int8_error"] = q.get("error", q)
    meta.update(reused=False, dir=out_dir)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
