#!/usr/bin/env python3
"""bench/eager/eager_baseline.py's DeBERTa v1 (model_type "deberta", the eager
module `dserve bench encoder --shape deberta-base` is timed against, and the
graph bench/onnx/export_onnx.py exports for ONNX Runtime) reproduces Hugging
Face's outputs in shared/goldens/deberta_v1: every case alone, the extra
cases and the padded batch (valid rows), within the goldens' tolerance
(1e-4). Also: the random deberta-base shape builds with v1's tensor names.

usage: deberta_v1_eager_test.py SHARED_DIR"""
import json
import os
import sys
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "bench", "eager"))
import eager_baseline  # noqa: E402

SHARED = None
TOL = 1e-4
MODELS = ("cls_mnli", "qa_clamped", "rerank_c2p_factorized")


class V1EagerMatchesGoldens(unittest.TestCase):
    def check(self, name):
        d = os.path.join(SHARED, "goldens", "deberta_v1", name)
        with open(os.path.join(d, "golden.json")) as f:
            golden = json.load(f)
        model = eager_baseline.load_checkpoint(d)
        self.assertTrue(model.c.v1)
        worst, n = 0.0, 0

        def close(got, want):
            nonlocal worst, n
            want = torch.tensor(want, dtype=torch.float32).reshape(got.shape)
            worst = max(worst, (got - want).abs().max().item())
            n += 1
        with torch.inference_mode():
            for case in golden["cases"] + golden.get("extra_cases", []):
                ids = torch.tensor([case["input_ids"]])
                out = model(ids, torch.ones_like(ids), torch.tensor([case["token_type_ids"]]))
                for k in ("logits", "start_logits", "end_logits", "last_hidden_state"):
                    if k in case:
                        close(out[k][0], case[k])
                if "last_hidden_state_row0" in case:
                    close(out["last_hidden_state"][0, 0], case["last_hidden_state_row0"])
            b = golden["batch"]
            ids = torch.tensor(b["input_ids"])
            out = model(ids, torch.tensor(b["attention_mask"]), torch.tensor(b["token_type_ids"]))
            lengths = [sum(m) for m in b["attention_mask"]]
            for k in ("start_logits", "end_logits"):
                if k + "_valid" in b:
                    for r, m in enumerate(lengths):
                        close(out[k][r, :m], b[k + "_valid"][r])
            if "logits" in b:
                close(out["logits"], b["logits"])
            for r, rows in enumerate(b.get("last_hidden_state_valid_first_two", [])):
                close(out["last_hidden_state"][r, :lengths[r]], rows)
        print("\n  %s: %d outputs, max |diff| %.2e" % (name, n, worst), end="", flush=True)
        self.assertGreater(n, 8)
        self.assertLessEqual(worst, TOL)

    def test_cls_mnli(self):
        self.check("cls_mnli")

    def test_qa_clamped(self):
        self.check("qa_clamped")

    def test_rerank_c2p_factorized(self):
        self.check("rerank_c2p_factorized")

    def test_deberta_base_shape(self):
        """The random v1 Base of the bench: v1's names and sizes (deberta-base: 768 / 12 / 12 / 3072)."""
        m = eager_baseline.DebertaV2Eager(eager_baseline.V1_BASE)
        names = dict((k, tuple(v.shape)) for k, v in m.state_dict().items())
        self.assertEqual(names["encoder.layer.0.attention.self.in_proj.weight"], (3 * 768, 768))
        self.assertEqual(names["encoder.layer.11.attention.self.pos_proj.weight"], (768, 768))
        self.assertEqual(names["encoder.rel_embeddings.weight"], (1024, 768))
        self.assertNotIn("encoder.LayerNorm.weight", names)
        self.assertNotIn("embeddings.position_embeddings.weight", names)
        self.assertEqual(m.c.scale_factor, 3)


if __name__ == "__main__":
    SHARED = sys.argv.pop(1)
    unittest.main(verbosity=2)
