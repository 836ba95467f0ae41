#!/usr/bin/python3
"""reference.eager: bench/eager/eager_baseline.py computes what deberta_reference.py does.

usage: eager_test.py [SCRATCH_DIR] [unittest args]

For every variant of make_variant_checkpoint.VARIANTS: load the checkpoint into
the eager nn.Module with float64 weights and compare with the float64
reference (1e-6: only the float32 rounding of HF's sqrt(d*k) scale differs), on
sequences run alone and as one right-padded batch (valid positions); float32
eager within 1e-4.  Plus a smoke run of the CLI (--model DIR --json).
"""

import json
import os
import subprocess
import sys
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
EAGER = os.path.join(REPO, "bench", "eager", "eager_baseline.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(EAGER))
import deberta_reference as ref  # noqa: E402
import eager_baseline as eager  # noqa: E402
import make_variant_checkpoint as mvc  # noqa: E402

SCRATCH = os.environ.get("REFERENCE_SCRATCH", "/tmp/dserve_reference_scratch")
LENGTHS = [23, 1, 150, 5, 64, 111]
KEYS = ("logits", "start_logits", "end_logits", "last_hidden_state")


def inputs(cfg, seed=99):
    rs = np.random.RandomState(seed)
    limit = cfg["max_position_embeddings"] if cfg.get("position_biased_input", True) else 10 ** 9
    out = []
    for n in LENGTHS:
        n = min(n, limit)
        ids = [1] + list(rs.randint(4, cfg["vocab_size"], size=max(0, n - 1)))
        tt = [0] * (n // 2) + [1] * (n - n // 2) if cfg.get("type_vocab_size", 0) > 0 else [0] * n
        out.append((ids[:n], tt))
    return out


def padded(seqs):
    L = max(len(s[0]) for s in seqs)
    ids = torch.zeros(len(seqs), L, dtype=torch.long)
    tt = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for r, (i, t) in enumerate(seqs):
        ids[r, :len(i)] = torch.tensor(i)
        tt[r, :len(i)] = torch.tensor(t)
        mask[r, :len(i)] = 1
    return ids, mask, tt


def diff_valid(a, b, seqs):
    worst = 0.0
    for key in KEYS:
        if key not in b:
            continue
        for r, (i, _) in enumerate(seqs):
            x, y = a[key][r], b[key][r]
            if key != "logits":
                x, y = x[:len(i)], y[:len(i)]
            worst = max(worst, float((x.double() - y.double()).abs().max()))
    return worst


class EagerMatchesReference(unittest.TestCase):
    def check(self, name):
        d = os.path.join(SCRATCH, "eager_" + name)
        cfg = mvc.write_checkpoint(d, mvc.VARIANTS[name], seed=sorted(mvc.VARIANTS).index(name) + 1)
        seqs = inputs(cfg)
        model_ref = ref.load(d, torch.float64)
        e64 = eager.load_checkpoint(d, torch.float64)
        e32 = eager.load_checkpoint(d, torch.float32)
        worst64 = worst32 = 0.0
        with torch.inference_mode():
            for s in seqs:  # alone
                ids, mask, tt = padded([s])
                want = model_ref.forward(ids, mask, tt)
                worst64 = max(worst64, diff_valid(e64(ids, mask, tt), want, [s]))
                worst32 = max(worst32, diff_valid(e32(ids, mask, tt), want, [s]))
            ids, mask, tt = padded(seqs)  # one padded batch
            want = model_ref.forward(ids, mask, tt)
            worst64 = max(worst64, diff_valid(e64(ids, mask, tt), want, seqs))
            worst32 = max(worst32, diff_valid(e32(ids, mask, tt), want, seqs))
        print("\n  %-28s eager fp64 %.2e  eager fp32 %.2e" % (name, worst64, worst32), end="", flush=True)
        self.assertLessEqual(worst64, 1e-6, name)
        self.assertLessEqual(worst32, 1e-4, name)

    def test_cli_json(self):
        d = os.path.join(SCRATCH, "eager_cli")
        mvc.write_checkpoint(d, mvc.VARIANTS["v3_like"], seed=5)
        r = subprocess.run([sys.executable, EAGER, "--model", d, "--batch", "2", "--length", "40",
                            "--dtype", "bf16", "--threads", "1", "--repeats", "3", "--warmup", "1",
                            "--json"], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        res = json.loads(r.stdout)
        for k in ("dtype", "batch", "length", "threads", "median_s", "repeats", "torch_version"):
            self.assertIn(k, res)
        self.assertEqual((res["dtype"], res["batch"], res["length"], res["threads"], res["repeats"]),
                         ("bf16", 2, 40, 1, 3))
        self.assertGreater(res["median_s"], 0)

    def test_v3_base_shape(self):
        m = eager.DebertaV2Eager(eager.V3_BASE)
        n = sum(p.numel() for name, p in m.named_parameters() if not name.startswith("embeddings.word"))
        self.assertEqual(m.encoder.rel_embeddings.weight.shape, (512, 768))
        self.assertEqual(len(m.encoder.layer), 12)
        self.assertTrue(85e6 < n < 88e6, n)  # backbone without the embedding table: 86M


for _name in mvc.VARIANTS:
    setattr(EagerMatchesReference, "test_" + _name, lambda self, n=_name: self.check(n))


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SCRATCH = sys.argv.pop(1)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    unittest.main(verbosity=2)
