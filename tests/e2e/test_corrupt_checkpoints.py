"""Corrupt and inconsistent checkpoints (issue 8): every kind of damage in
corrupt_checkpoints.VARIANTS makes `dserve serve` exit 2 within seconds,
and `dserve forward`, `dserve eval` and `dserve train --init` fail the same
way: exit 2, one message naming the file and the problem, never a crash.
(Hot reload of the same variants: test_hot_reload.py.)"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import time
import unittest

import corrupt_checkpoints as cc
from e2e_support import BIN, scratch_dir

# "Within seconds": here about 1 s (the tiny model loads in 0.02 s; the rest
# is the binary's start-up); the bound leaves room for a loaded CI machine.
SERVE_LIMIT_S = 20
# Set, so serve/eval/train do not re-exec themselves to set it (half the
# start-up cost of these 40 short runs).
ENV = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
CRASH_SIGNS = ("Segmentation fault", "terminate called", "Aborted", "core dumped", "AddressSanitizer",
               "runtime error:")


class CorruptCheckpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = scratch_dir("corrupt")
        cls.variants = {kind: cc.make_variant(kind, parent=cls.folder) for kind in cc.VARIANTS}
        cls.data = os.path.join(cls.folder, "intents.jsonl")
        with open(cls.data, "w") as f:
            for text, label in (("please refund my order", "refund"), ("I forgot my password", "password_reset"),
                                ("where is my parcel", "shipping"), ("my invoice is wrong", "billing")):
                f.write(json.dumps({"text": text, "label": label}) + "\n")

    def run_all(self, make_command, stdin="", kinds=None):
        """{kind: (CompletedProcess, seconds)} of make_command(kind, dir), two at a time."""
        def one(kind):
            started = time.monotonic()
            result = subprocess.run(make_command(kind, self.variants[kind][0]), input=stdin, capture_output=True,
                                    text=True, timeout=60, env=ENV)
            return kind, result, time.monotonic() - started
        kinds = list(kinds or cc.VARIANTS)
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            return {kind: (result, seconds) for kind, result, seconds in pool.map(one, kinds)}

    def assert_fails_naming(self, command, kind, result):
        _, path, needles = self.variants[kind]
        message = result.stderr
        self.assertEqual(result.returncode, 2, "%s on %s: exit %d\n%s" % (command, kind, result.returncode, message))
        for sign in CRASH_SIGNS:
            self.assertNotIn(sign, message, "%s on %s crashed" % (command, kind))
        self.assertIn(path, message, "%s on %s: the message must name the file" % (command, kind))
        for needle in needles:
            self.assertIn(needle, message, "%s on %s: the message must name the problem" % (command, kind))
        # One line from the command, not a log dump or a stack trace.
        lines = [line for line in message.splitlines() if line.startswith("dserve %s:" % command)]
        self.assertEqual(len(lines), 1, message)
        self.assertNotIn("listening", result.stdout)
        if command != "serve":
            self.assertEqual(result.stdout, "", "no output before the failure")

    def test_serve_exits_2_within_seconds(self):
        results = self.run_all(lambda kind, d: [BIN, "serve", "--model", "m=" + d, "--listen", "127.0.0.1:0",
                                                "--metrics-listen", ""])
        for kind, (result, seconds) in results.items():
            with self.subTest(kind=kind):
                self.assert_fails_naming("serve", kind, result)
                self.assertLess(seconds, SERVE_LIMIT_S)

    def test_forward(self):
        # forward takes token ids: it reads config.json and the weights, not
        # spm.model, so a garbage tokenizer does not concern it.
        kinds = [k for k in cc.VARIANTS if cc.VARIANTS[k][0] != cc.SPM]
        results = self.run_all(lambda kind, d: [BIN, "forward", "--model", d], stdin='{"input_ids": [1, 5, 2]}\n',
                               kinds=kinds)
        for kind, (result, _) in results.items():
            with self.subTest(kind=kind):
                self.assert_fails_naming("forward", kind, result)
        d = self.variants["garbage_spm_model"][0]
        out = subprocess.run([BIN, "forward", "--model", d], input='{"input_ids": [1, 5, 2]}\n', capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(len(json.loads(out.stdout)["logits"]), 5)

    def test_eval(self):
        results = self.run_all(lambda kind, d: [BIN, "eval", "--model", d, "--data", self.data])
        for kind, (result, _) in results.items():
            with self.subTest(kind=kind):
                self.assert_fails_naming("eval", kind, result)

    def test_train_init(self):
        out = os.path.join(self.folder, "train-out")
        results = self.run_all(lambda kind, d: [BIN, "train", "--task", "classify", "--init", d, "--train", self.data,
                                                "--out", os.path.join(out, kind), "--max-steps", "1",
                                                "--threads", "1"])
        for kind, (result, _) in results.items():
            with self.subTest(kind=kind):
                self.assert_fails_naming("train", kind, result)
                # Nothing was trained, so no checkpoint was written.
                self.assertFalse(os.path.exists(os.path.join(out, kind, "last")))
                self.assertFalse(os.path.exists(os.path.join(out, kind, "best")))

    def test_the_good_checkpoint_passes_every_command(self):
        """The variants differ from a checkpoint that works by the one edit."""
        good = os.path.join(self.folder, "good")
        shutil.copytree(cc.e2e.test_models()["classify"], good)
        ev = subprocess.run([BIN, "eval", "--model", good, "--data", self.data], capture_output=True, text=True,
                            timeout=60)
        self.assertEqual(ev.returncode, 0, ev.stderr)
        self.assertIn("accuracy", json.loads(ev.stdout))
        tr = subprocess.run([BIN, "train", "--task", "classify", "--init", good, "--train", self.data, "--out",
                             os.path.join(self.folder, "good-out"), "--max-steps", "1", "--threads", "1"],
                            capture_output=True, text=True, timeout=120)
        self.assertEqual(tr.returncode, 0, tr.stderr)


if __name__ == "__main__":
    unittest.main()
