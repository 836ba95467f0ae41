#!/usr/bin/python3
"""reference.variants: `dserve forward` vs deberta_reference.py on encoder variants
the shared goldens do not cover.

usage: variants_test.py DSERVE_BINARY [SHARED_DIR] [SCRATCH_DIR] [unittest args]
  (or env DSERVE_BIN / DSERVE_SHARED_DIR / REFERENCE_SCRATCH)

For each variant of make_variant_checkpoint.VARIANTS (random weights, seeded):
  - writes the checkpoint under SCRATCH_DIR/<variant>;
  - runs `dserve forward --model DIR --batch-size 3 --hidden` on 6 sequences of
    1..150 tokens (capped at max_position_embeddings with absolute positions),
    ordered so that every batch of 3 is padded;
  - runs the float64 reference on each sequence alone;
  - asserts max |diff| <= 1e-4 on logits / start_logits / end_logits and on
    last_hidden_state (valid rows).
bf16: for every classification variant with >= 2 labels, `dserve forward
--dtype bf16` must keep the fp32 reference's argmax, except where the fp32
top-2 margin is < 0.05 (such flips are counted and printed).
A summary goes to stdout and SCRATCH_DIR/variants_report.json.
"""

import json
import os
import subprocess
import sys
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deberta_reference as ref  # noqa: E402
import make_variant_checkpoint as mvc  # noqa: E402
sys.path.insert(0, os.path.join(HERE, ".."))
import cpu_path  # noqa: E402

BINARY = os.environ.get("DSERVE_BIN")
SHARED = os.environ.get("DSERVE_SHARED_DIR")
SCRATCH = os.environ.get("REFERENCE_SCRATCH", "/tmp/dserve_reference_scratch")
TOL = 1e-4
BF16_MARGIN = 0.05
LENGTHS = [23, 1, 150, 5, 64, 111]  # batches of 3: [23, 1, 150], [5, 64, 111]
REPORT = {}


def make_inputs(cfg, seed=1234):
    """6 lines: [CLS] random ids [SEP]; token types (0 then 1) when type_vocab_size > 0,
    left out on the first line so dserve's zero default is used in a mixed batch."""
    rs = np.random.RandomState(seed)
    limit = cfg["max_position_embeddings"] if cfg.get("position_biased_input", True) else 10 ** 9
    lines = []
    for i, n in enumerate(LENGTHS):
        n = min(n, limit)
        ids = [1] + [int(x) for x in rs.randint(4, cfg["vocab_size"], size=max(0, n - 2))]
        if n >= 2:
            ids.append(2)
        line = {"input_ids": ids[:n]}
        if cfg.get("type_vocab_size", 0) > 0 and i > 0:
            half = n // 2
            line["token_type_ids"] = [0] * half + [1] * (n - half)
        lines.append(line)
    return lines


def run_dserve(model_dir, lines, *flags):
    text = "".join(json.dumps(l) + "\n" for l in lines)
    r = subprocess.run([BINARY, "forward", "--model", model_dir, "--batch-size", "3", *flags],
                       input=text, capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        raise AssertionError("dserve forward %s failed (rc %d): %s" % (" ".join(flags), r.returncode, r.stderr))
    out = [json.loads(l) for l in r.stdout.splitlines() if l.strip()]
    if len(out) != len(lines):
        raise AssertionError("dserve forward printed %d lines for %d inputs" % (len(out), len(lines)))
    return out


def maxdiff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError("shape %s vs %s" % (a.shape, b.shape))
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def variant_dir(name):
    return os.path.join(SCRATCH, name)


def ensure_checkpoint(name):
    d = variant_dir(name)
    seed = sorted(mvc.VARIANTS).index(name) + 1
    cfg = mvc.write_checkpoint(d, mvc.VARIANTS[name], seed=seed)
    return d, cfg


class VariantsTest(unittest.TestCase):
    def check_variant(self, name):
        d, cfg = ensure_checkpoint(name)
        lines = make_inputs(cfg)
        got = run_dserve(d, lines, "--hidden")
        model = ref.load(d, torch.float64)
        want = ref.run_lines(model, lines, batch_size=1, hidden=True)
        diffs = {}
        for key in ("logits", "start_logits", "end_logits", "last_hidden_state"):
            vals = []
            for g, w in zip(got, want):
                if key in w:
                    self.assertIn(key, g, "%s: dserve printed no %s" % (name, key))
                    vals.append(maxdiff(g[key], w[key]))
            if vals:
                diffs[key] = max(vals)
        REPORT.setdefault(name, {})["fp32_max_abs_diff"] = diffs
        REPORT[name]["lengths"] = [len(l["input_ids"]) for l in lines]
        print("\n  %-28s lengths %s  %s" % (name, REPORT[name]["lengths"],
              "  ".join("%s %.2e" % (k, v) for k, v in diffs.items())), end="", flush=True)
        for key, v in diffs.items():
            self.assertLessEqual(v, TOL, "%s: %s max |diff| %.3g" % (name, key, v))
        self.assertTrue(any(k != "last_hidden_state" for k in diffs), "%s: no head output" % name)

    def test_bf16_argmax(self):
        total = flips = allowed = 0
        worst = {}
        for name, spec in sorted(mvc.VARIANTS.items()):
            if spec.get("head", "classify") != "classify" or int(spec.get("num_labels", 3)) < 2:
                continue
            d, cfg = ensure_checkpoint(name)
            lines = make_inputs(cfg)
            got = run_dserve(d, lines, "--dtype", "bf16")
            want = ref.run_lines(ref.load(d, torch.float32), lines)
            vdiff = 0.0
            for i, (g, w) in enumerate(zip(got, want)):
                total += 1
                wl = np.asarray(w["logits"])
                gl = np.asarray(g["logits"])
                vdiff = max(vdiff, maxdiff(gl, wl))
                top = np.sort(wl)[::-1]
                margin = float(top[0] - top[1])
                if int(np.argmax(gl)) != int(np.argmax(wl)):
                    flips += 1
                    msg = "%s line %d (len %d): bf16 argmax %d, fp32 argmax %d, fp32 margin %.4f" % (
                        name, i, len(lines[i]["input_ids"]), int(np.argmax(gl)), int(np.argmax(wl)), margin)
                    print("\n  " + msg, end="")
                    self.assertLess(margin, BF16_MARGIN, msg)
                    allowed += 1
            worst[name] = vdiff
            REPORT.setdefault(name, {})["bf16_logits_max_abs_diff"] = vdiff
        REPORT["bf16_argmax"] = {"compared": total, "flips": flips, "flips_with_margin_lt_0.05": allowed}
        REPORT["bf16_argmax"]["cpu"] = cpu_path.note()
        print("\n  bf16 on %s: %d classifications compared, %d argmax flips (all with fp32 margin < %.2f); "
              "logits max |diff| per variant: %s" % (
                  cpu_path.note(), total, flips, BF16_MARGIN, ", ".join("%s %.3f" % kv for kv in worst.items())),
              end="", flush=True)
        self.assertGreaterEqual(total, 30)


def _add_variant_tests():
    for name in mvc.VARIANTS:
        def test(self, name=name):
            self.check_variant(name)
        setattr(VariantsTest, "test_variant_" + name, test)


_add_variant_tests()


class SanityTest(unittest.TestCase):
    def test_matrix_covers_options(self):
        specs = [dict(mvc.BASE, **v) for v in mvc.VARIANTS.values()]
        has = lambda f: any(f(s) for s in specs)  # noqa: E731
        self.assertGreaterEqual(len(specs), 10)
        self.assertTrue(has(lambda s: s.get("conv_kernel_size", 0) > 0 and s.get("conv_groups", 1) > 1
                            and s.get("conv_act") == "tanh"))
        self.assertTrue(has(lambda s: s.get("conv_kernel_size", 0) > 0 and s.get("conv_act") == "gelu"))
        self.assertTrue(has(lambda s: not s["relative_attention"] and s["position_biased_input"]))
        self.assertTrue(has(lambda s: not s["share_att_key"] and set(s["pos_att_type"]) == {"c2p", "p2c"}))
        self.assertTrue(has(lambda s: not s["share_att_key"] and s["pos_att_type"] == ["p2c"]))
        self.assertTrue(has(lambda s: s["position_buckets"] <= 0 and s["max_relative_positions"] == -1
                            and s["relative_attention"]))
        for a in ("gelu_new", "relu", "silu"):
            self.assertTrue(has(lambda s, a=a: s["hidden_act"] == a), a)
        self.assertTrue(has(lambda s: s["type_vocab_size"] == 2))
        self.assertTrue(has(lambda s: s.get("embedding_size", s["hidden_size"]) < s["hidden_size"]))
        self.assertTrue(has(lambda s: s.get("share_layers")))
        self.assertTrue(has(lambda s: s.get("head") == "qa"))
        self.assertTrue(has(lambda s: s.get("num_labels") == 1))
        self.assertTrue(has(lambda s: isinstance(s["pos_att_type"], str)))
        self.assertTrue(has(lambda s: s["norm_rel_ebd"] == "none" and s["relative_attention"]))
        # a sequence longer than the bucket range and than max_rel
        self.assertTrue(has(lambda s: s["relative_attention"] and s["position_buckets"] > 0
                            and max(LENGTHS) > s["max_position_embeddings"] > 2 * s["position_buckets"]))

    def test_safetensors_roundtrip_and_prefixless_names(self):
        os.makedirs(SCRATCH, exist_ok=True)
        d, _ = ensure_checkpoint("v3_like")
        cfg, w = ref.load_checkpoint(d)
        bare = os.path.join(SCRATCH, "v3_like_bare")
        os.makedirs(bare, exist_ok=True)
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        with open(os.path.join(bare, "config.json"), "w") as f:
            json.dump(c, f)
        ref.write_safetensors(os.path.join(bare, "model.safetensors"), w)  # names without "deberta."
        cfg2, w2 = ref.load_checkpoint(bare)
        self.assertEqual(sorted(w), sorted(w2))
        for k in w:
            self.assertTrue(torch.equal(w[k], w2[k]), k)
        ids = [[1, 7, 9, 2]]
        a = ref.DebertaReference(cfg, w).forward(ids)["logits"]
        b = ref.DebertaReference(cfg2, w2).forward(ids)["logits"]
        self.assertTrue(torch.equal(a, b))


def tearDownModule():
    if REPORT:
        os.makedirs(SCRATCH, exist_ok=True)
        with open(os.path.join(SCRATCH, "variants_report.json"), "w") as f:
            json.dump(REPORT, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    flags = [a for a in sys.argv[1:] if a.startswith("-")]
    if args:
        BINARY = args.pop(0)
    if args:
        SHARED = args.pop(0)
    if args:
        SCRATCH = args.pop(0)
    if not BINARY:
        sys.exit("usage: variants_test.py DSERVE_BINARY [SHARED_DIR] [SCRATCH_DIR]")
    BINARY = os.path.abspath(BINARY)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    unittest.main(argv=[sys.argv[0]] + flags + args, verbosity=2)
