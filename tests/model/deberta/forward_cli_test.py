#!/usr/bin/env python3
"""`dserve forward` end to end against the Hugging Face goldens.

usage: forward_cli_test.py DSERVE_BINARY SHARED_DIR
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import cpu_path  # noqa: E402

BINARY = None
SHARED = None
TOL = 1e-4
# An argmax may change under bf16 only where the fp32 top-2 margin is below
# this (bf16 keeps ~3 significant digits; the CPU's bf16 path, AMX,
# avx512_bf16 or fp32 emulation, decides where it rounds). The margins of
# cls_factorized (>= 0.18) and albert_cls (>= 0.0998) are above it, so every
# argmax checked here must hold.
BF16_MARGIN = 0.05


def golden_dir(name):
    """'cls_factorized' -> goldens/model/cls_factorized; 'albert/albert_cls' as it is."""
    return os.path.join(SHARED, "goldens", name if "/" in name else os.path.join("model", name))


# Every golden checkpoint, all three families (the ALBERT and DeBERTa v1 goldens share the layout; v1's pass
# a pair's 0/1 token types to models with type_vocab_size 0, which must take and ignore them).
GOLDENS = ("cls_factorized", "qa_c2p_only", "rerank_p2c_nonorm", "albert/albert_cls", "albert/albert_qa",
           "deberta_v1/cls_mnli", "deberta_v1/qa_clamped", "deberta_v1/rerank_c2p_factorized")


def run_forward(model_dir, lines, *flags):
    text = "".join(json.dumps(l) + "\n" for l in lines)
    return subprocess.run([BINARY, "forward", "--model", model_dir, *flags], input=text,
                          capture_output=True, text=True, timeout=120)


def read_golden(name):
    with open(os.path.join(golden_dir(name), "golden.json")) as f:
        return json.load(f)


def max_abs_diff(a, b):
    if isinstance(a, list):
        assert len(a) == len(b), (len(a), len(b))
        return max([max_abs_diff(x, y) for x, y in zip(a, b)] or [0.0])
    return abs(a - b)


class ForwardCli(unittest.TestCase):
    def check_golden(self, name, batch_size):
        golden = read_golden(name)
        lines = []
        for case in golden["cases"]:
            line = {"input_ids": case["input_ids"]}
            if "token_type_ids" in case:
                line["token_type_ids"] = case["token_type_ids"]
            lines.append(line)
        result = run_forward(golden_dir(name), lines, "--batch-size", str(batch_size), "--hidden")
        self.assertEqual(result.returncode, 0, result.stderr)
        outputs = [json.loads(l) for l in result.stdout.splitlines()]
        self.assertEqual(len(outputs), len(lines))
        compared = 0
        for case, out in zip(golden["cases"], outputs):
            for key in ("logits", "start_logits", "end_logits", "last_hidden_state"):
                if key in case:
                    diff = max_abs_diff(out[key], case[key])
                    self.assertLessEqual(diff, TOL, f"{name} {case['desc']} {key}: {diff}")
                    compared += 1
        self.assertGreaterEqual(compared, len(lines))

    def test_goldens_one_at_a_time(self):
        for name in GOLDENS:
            self.check_golden(name, 1)

    def test_goldens_padded_batches(self):
        # Batches of 3 mix lengths 1..100, so most rows are padded.
        for name in GOLDENS:
            self.check_golden(name, 3)

    def test_bf16_keeps_argmax(self):
        print("\n  bf16 on %s" % cpu_path.note(), end="", flush=True)
        for name in ("cls_factorized", "albert/albert_cls", "deberta_v1/cls_mnli"):
            self.check_bf16_argmax(name)

    def check_bf16_argmax(self, name):
        golden = read_golden(name)
        lines = [{k: c[k] for k in ("input_ids", "token_type_ids") if k in c} for c in golden["cases"]]
        result = run_forward(golden_dir(name), lines, "--dtype", "bf16", "--batch-size", "4")
        self.assertEqual(result.returncode, 0, result.stderr)
        outputs = result.stdout.splitlines()
        self.assertEqual(len(outputs), len(golden["cases"]))
        for case, line in zip(golden["cases"], outputs):
            got = json.loads(line)["logits"]
            want = case["logits"]
            if got.index(max(got)) != want.index(max(want)):
                top = sorted(want, reverse=True)
                self.assertLess(top[0] - top[1], BF16_MARGIN, "%s: bf16 argmax %d, fp32 argmax %d on %s" % (
                    case["desc"], got.index(max(got)), want.index(max(want)), cpu_path.note()))

    def test_int8_keeps_argmax(self):
        """--dtype int8 (dense layers quantized) through the CLI, padded batches of 4: every classification argmax
        of both families' classify goldens equals Hugging Face's, and the logits differ from fp32 (the int8
        path ran) by less than 0.2 x 255 / activation levels of the largest logit (0.2 with 8-bit activations,
        0.4 with the 7-bit ones of a CPU with no int8 dot product; int8_test.cc explains that tolerance)."""
        tolerance = 0.2 * 255 / cpu_path.int8_activation_levels()
        for name in ("cls_factorized", "albert/albert_cls", "deberta_v1/cls_mnli"):
            golden = read_golden(name)
            lines = [{k: c[k] for k in ("input_ids", "token_type_ids") if k in c} for c in golden["cases"]]
            result = run_forward(golden_dir(name), lines, "--dtype", "int8", "--batch-size", "4")
            self.assertEqual(result.returncode, 0, result.stderr)
            outputs = [json.loads(l)["logits"] for l in result.stdout.splitlines()]
            self.assertEqual(len(outputs), len(lines))
            worst = 0.0
            for case, got in zip(golden["cases"], outputs):
                want = case["logits"]
                self.assertEqual(got.index(max(got)), want.index(max(want)), f"{name} {case['desc']}: {got} vs {want}")
                diff = max_abs_diff(got, want)
                worst = max(worst, diff)
                self.assertLessEqual(diff, tolerance * max(1.0, max(abs(x) for x in want)), f"{name} {case['desc']}")
            self.assertGreater(worst, 0.0, f"{name}: int8 logits equal fp32's exactly: the int8 path did not run")

    def test_bad_lines_name_the_line(self):
        qa = golden_dir("qa_c2p_only")  # vocab 1000, absolute positions up to 128
        cases = [
            ([{"input_ids": [1, 2]}, {"input_ids": [1, "x", 2]}], "line 2", "input_ids[1]"),
            ([{"input_ids": [1, 5000, 2]}], "line 1", "5000"),
            ([{"input_ids": [1, 2]}, {"input_ids": [1, 2]}, {"input_ids": [5] * 129}], "line 3", "128"),
            ([{"input_ids": []}], "line 1", "empty"),
            ([{"tokens": [1]}], "line 1", "input_ids"),
        ]
        for lines, where, what in cases:
            result = run_forward(qa, lines)
            self.assertNotEqual(result.returncode, 0, lines)
            self.assertIn(where, result.stderr)
            self.assertIn(what, result.stderr)
            self.assertEqual(result.stdout, "", "nothing is printed when a line is bad")
        result = subprocess.run([BINARY, "forward", "--model", qa], input="not json\n", capture_output=True,
                                text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("line 1", result.stderr)

    def test_unloadable_checkpoint_exits_2(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({"model_type": "deberta-v2", "hidden_size": 96, "num_attention_heads": 5}, f)
            result = run_forward(d, [{"input_ids": [1, 2]}])
            self.assertEqual(result.returncode, 2)
            self.assertIn(d, result.stderr)


if __name__ == "__main__":
    BINARY, SHARED = sys.argv[1], sys.argv[2]
    unittest.main(argv=[sys.argv[0], "-v"])
