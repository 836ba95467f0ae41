#!/usr/bin/python3
"""reference.goldens: deberta_reference.py reproduces Hugging Face's goldens.

usage: goldens_test.py [SHARED_DIR]   (default: the shared/ beside the repo)

Checks, at 1e-5 (float64 reference vs HF float32 outputs):
  - every golden case run alone (logits / start / end / last_hidden_state),
    the extra long case, and the padded batch at valid positions;
  - the log-bucket tables in relative_position_buckets.json;
  - the debug trace of cls_factorized (relative positions, c2p/p2c indices,
    normalised relative table, embedding output, layer-0 probabilities, each
    layer's output), so that a future regression shows where it starts.
"""

import json
import os
import sys
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deberta_reference as ref  # noqa: E402

SHARED = os.path.join(HERE, "..", "..", "..", "..", "shared")
TOL = 1e-5


def maxdiff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


class GoldensTest(unittest.TestCase):
    def test_cases_and_batches(self):
        report = ref.self_check(SHARED, tol=TOL, verbose=True)
        self.assertEqual(len([k for k in report if not k.endswith(".batch")]), 3, report)
        for name, diff in report.items():
            self.assertLessEqual(diff, TOL, name)

    def test_bucket_tables(self):
        with open(os.path.join(SHARED, "goldens", "model", "relative_position_buckets.json")) as f:
            tables = json.load(f)["tables"]
        for t in tables:
            rel = torch.tensor(t["relative_pos"], dtype=torch.long)
            bucket = ref.make_log_bucket_position(rel, t["position_buckets"], t["max_relative_positions"])
            self.assertEqual(bucket.to(torch.long).tolist(), t["bucket"])
            span = t["att_span"]
            idx = torch.clamp(bucket.to(torch.long) + span, 0, 2 * span - 1)
            self.assertEqual(idx.tolist(), t["c2p_index"])

    def test_cli_jsonl(self):
        """The CLI (stdin JSONL -> stdout JSONL, padded batches of 3, --hidden)."""
        import subprocess
        for name in ("qa_c2p_only", "cls_factorized"):
            d = os.path.join(SHARED, "goldens", "model", name)
            with open(os.path.join(d, "golden.json")) as f:
                cases = json.load(f)["cases"]
            text = ""
            for c in cases:
                line = {"input_ids": c["input_ids"]}
                if "token_type_ids" in c:
                    line["token_type_ids"] = c["token_type_ids"]
                text += json.dumps(line) + "\n"
            r = subprocess.run([sys.executable, os.path.join(HERE, "deberta_reference.py"), d,
                                "--batch-size", "3", "--hidden"],
                               input=text, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            outs = [json.loads(l) for l in r.stdout.splitlines()]
            self.assertEqual(len(outs), len(cases))
            for c, o in zip(cases, outs):
                for key in ("logits", "start_logits", "end_logits", "last_hidden_state"):
                    if key in c:
                        self.assertLessEqual(maxdiff(o[key], c[key]), TOL, (name, c["desc"], key))

    def test_debug_trace(self):
        d = os.path.join(SHARED, "goldens", "model", "cls_factorized")
        with open(os.path.join(d, "golden.json")) as f:
            g = json.load(f)
        t = g["debug_trace"]
        case = g["cases"][t["sequence_index"]]
        model = ref.load(d)
        trace = {}
        model.forward([case["input_ids"]], trace=trace)
        rel = trace["relative_pos"][0]
        span = model.cfg.span
        self.assertEqual(span, t["att_span"])
        self.assertEqual(rel.tolist(), t["relative_pos"])
        self.assertEqual(torch.clamp(rel + span, 0, 2 * span - 1).tolist(), t["c2p_index"])
        self.assertEqual(torch.clamp(-rel + span, 0, 2 * span - 1).tolist(), t["p2c_index_before_transpose"])
        self.assertLessEqual(maxdiff(trace["rel_embeddings"], t["rel_embeddings_after_layernorm"]), TOL)
        self.assertLessEqual(maxdiff(trace["embedding_output"][0], t["embedding_output"]), TOL)
        probs = trace["layer0_attention_probs"][0]
        self.assertLessEqual(maxdiff(probs, np.asarray(t["layer0_attention_probs"]).reshape(probs.shape)), TOL)
        for i in range(model.cfg.num_hidden_layers):
            key = "layer%d_output" % i
            self.assertLessEqual(maxdiff(trace[key][0], t[key]), TOL, key)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        SHARED = sys.argv.pop(1)
    unittest.main(verbosity=2)
