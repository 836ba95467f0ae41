#!/usr/bin/env python3
"""bench/eager/albert_eager.py (the eager ALBERT our encoder is timed
against) reproduces Hugging Face's outputs in shared/goldens/albert: every
case alone and the padded batch, within the goldens' tolerance (1e-4).

usage: albert_eager_test.py SHARED_DIR"""
import json
import os
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench", "eager"))
import albert_eager  # noqa: E402

SHARED = None
TOL = 1e-4


class AlbertEagerMatchesGoldens(unittest.TestCase):
    def check(self, name):
        d = os.path.join(SHARED, "goldens", "albert", name)
        with open(os.path.join(d, "golden.json")) as f:
            golden = json.load(f)
        model = albert_eager.load_checkpoint(d)
        keys = ("logits", "start_logits", "end_logits", "last_hidden_state")
        worst = 0.0
        with torch.inference_mode():
            for case in golden["cases"]:
                ids = torch.tensor([case["input_ids"]])
                out = model(ids, torch.ones_like(ids), torch.tensor([case["token_type_ids"]]))
                for k in keys:
                    if k in case:
                        want = torch.tensor(case[k], dtype=torch.float32)
                        worst = max(worst, (out[k][0] - want.reshape(out[k][0].shape)).abs().max().item())
            b = golden["batch"]
            ids = torch.tensor(b["input_ids"])
            out = model(ids, torch.tensor(b["attention_mask"]), torch.tensor(b["token_type_ids"]))
            lengths = [sum(m) for m in b["attention_mask"]]
            for k in ("start_logits", "end_logits"):
                if k + "_valid" in b:
                    for r, n in enumerate(lengths):
                        worst = max(worst, (out[k][r, :n] - torch.tensor(b[k + "_valid"][r])).abs().max().item())
            if "logits" in b:
                worst = max(worst, (out["logits"] - torch.tensor(b["logits"])).abs().max().item())
        print("\n  %s: max |diff| %.2e" % (name, worst), end="", flush=True)
        self.assertLessEqual(worst, TOL)

    def test_albert_cls(self):
        self.check("albert_cls")

    def test_albert_qa(self):
        self.check("albert_qa")


if __name__ == "__main__":
    SHARED = sys.argv.pop(1)
    unittest.main(verbosity=2)
