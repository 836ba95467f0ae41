"""Training faults (issue 8): `dserve train` SIGKILLed at random moments and
in the middle of checkpoint saves never leaves a half-written checkpoint in
OUT/last or OUT/trainer_state, and `--resume` finishes the run as if it had
never stopped; a non-finite loss stops the run with a clear message and
keeps the last checkpoint as it was.

(tests/model/train/train_test.cc TrainResume kills once between saves and
compares every loss; this file kills repeatedly, mid-save included.)"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import time
import unittest

import corrupt_checkpoints as cc
import e2e_support as e2e

STEPS = 16
PREFIXES = ["please", "hi,", "hello", "urgent:", "I need help,", "quick question:"]
INTENTS = {"refund": ["refund my order", "I want my money back", "return the item for a refund"],
           "billing": ["my invoice is wrong", "I was charged twice", "update my billing address"],
           "password_reset": ["I forgot my password", "reset my password", "cannot log in to my account"],
           "shipping": ["where is my parcel", "the package is late", "track my delivery"]}


def write_data(path):
    with open(path, "w") as f:
        for prefix in PREFIXES:
            for label, texts in INTENTS.items():
                for text in texts:
                    f.write(json.dumps({"text": prefix + " " + text, "label": label}) + "\n")


def losses(out):
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = [line.strip().split(",") for line in f][1:]
    return [(int(r[0]), float(r[2])) for r in rows]


def saving_now(out):
    """A save under way: trainer_state.tmp/ (trainer state) or last.tmp.XXXXXX/
    (WriteCheckpointDir) exists."""
    names = os.listdir(out) if os.path.isdir(out) else []
    return any(n == "trainer_state.tmp" or n.startswith(("last.tmp.", "best.tmp.")) for n in names)


def saved_step(out):
    """The step of OUT/trainer_state, 0 when there is none yet."""
    try:
        with open(os.path.join(out, "trainer_state", "state.json")) as f:
            return json.load(f)["step"]
    except (OSError, ValueError):
        return 0


def checkpoint_complete(test, d, extra=()):
    """A checkpoint directory whose every file is whole: config.json parses,
    the safetensors header is valid and the data covers every tensor."""
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    header, data = cc.read_safetensors(os.path.join(d, cc.SAFETENSORS))
    names = cc.tensors(header)
    test.assertGreater(len(names), 10, d)
    test.assertEqual(max(header[n]["data_offsets"][1] for n in names), len(data), d)
    for name in extra:
        test.assertGreater(os.path.getsize(os.path.join(d, name)), 0, d)
    return config


class SigkillTest(unittest.TestCase):
    def setUp(self):
        self.folder = e2e.scratch_dir("train-kill")
        self.data = os.path.join(self.folder, "train.jsonl")
        write_data(self.data)

    def command(self, out, resume=False, save_every=1):
        cmd = [e2e.BIN, "train", "--task", "classify", "--init", e2e.test_models()["classify"], "--train", self.data,
               "--out", out, "--max-steps", str(STEPS), "--epochs", "100", "--batch-size", "8", "--save-every",
               str(save_every), "--threads", "1", "--seed", "3", "--max-length", "32", "--lr", "1e-3"]
        return cmd + (["--resume"] if resume else [])

    def check_invariants(self, out):
        """What a kill may leave: last/ and trainer_state/ whole or absent."""
        if os.path.exists(os.path.join(out, "trainer_state")):
            state_dir = os.path.join(out, "trainer_state")
            checkpoint_complete(self, state_dir, extra=["optimizer.pt"])
            with open(os.path.join(state_dir, "state.json")) as f:
                self.assertGreaterEqual(json.load(f)["step"], 1)
        if os.path.exists(os.path.join(out, "last")):
            config = checkpoint_complete(self, os.path.join(out, "last"), extra=["spm.model"])
            self.assertGreaterEqual(config["dserve"]["training"]["step"], 1)

    def test_kills_at_random_moments_and_mid_save_then_resume(self):
        reference = os.path.join(self.folder, "reference")
        # Saving does not change the run (tests/model/train TrainResume): the
        # reference saves only at the end.
        result = subprocess.run(self.command(reference, save_every=0), capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        expected = losses(reference)
        self.assertEqual([s for s, _ in expected], list(range(1, STEPS + 1)))

        out = os.path.join(self.folder, "killed")
        rng = random.Random(int(os.environ.get("DSERVE_TEST_SEED", time.time())))
        kills, mid_save = [], 0
        # Each run is killed once it has saved a step beyond the last kill's:
        # alternately the moment its next save is under way (polled without
        # sleeping: on a fast machine a save lasts well under a millisecond),
        # and at a random moment of the next step and its save (in a step, in
        # a save, anywhere), the delay drawn from that run's own step time so
        # that the run neither finishes first on a fast machine nor always
        # dies early on a slow one.
        def wait_for_save_beyond(step, deadline):
            while proc.poll() is None and time.monotonic() < deadline and saved_step(out) <= step:
                time.sleep(0.0005)
            return saved_step(out)

        for attempt in range(5):
            resumed_from = saved_step(out)
            proc = subprocess.Popen(self.command(out, resume=attempt > 0), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            step = wait_for_save_beyond(resumed_from, deadline)
            saving = False
            if attempt % 2 == 0:
                while proc.poll() is None and time.monotonic() < deadline and not saving:
                    saving = saving_now(out)
            else:
                start = time.monotonic()
                wait_for_save_beyond(step, deadline)
                time.sleep(rng.uniform(0, time.monotonic() - start))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            if proc.returncode != -signal.SIGKILL:
                break  # finished before the kill
            mid_save += saving and saving_now(out)
            kills.append(saved_step(out))
            self.check_invariants(out)

        print("\n%d kills (%d mid-save) after saved steps %s" % (len(kills), mid_save, kills))
        self.assertGreaterEqual(len(kills), 3)
        self.assertGreaterEqual(mid_save, 1, "no kill landed inside a save")
        self.assertEqual(kills, sorted(set(kills)), "every resumed run made progress")

        result = subprocess.run(self.command(out, resume=True), capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.check_invariants(out)
        # Every step once, with the loss the uninterrupted run had.
        got = losses(out)
        self.assertEqual([s for s, _ in got], list(range(1, STEPS + 1)))
        for (step, loss), (_, want) in zip(got, expected):
            self.assertAlmostEqual(loss, want, delta=1e-5, msg="step %d" % step)
        for name in ("last", "best"):
            config = checkpoint_complete(self, os.path.join(out, name), extra=["spm.model"])
            self.assertEqual(config["dserve"]["training"]["step"], STEPS)
        self.assertEqual(sorted(n for n in os.listdir(out) if ".tmp" in n or ".old" in n), [],
                         "an interrupted save's leftovers are removed on resume")
        # The result serves: `dserve forward` loads it.
        row = {"input_ids": e2e.single_ids("please refund my order")}
        self.assertEqual(len(e2e.forward(os.path.join(out, "last"), [row])[0]["logits"]), 4)

    def test_resume_rewrites_last_left_behind_by_a_kill_between_state_and_last(self):
        # A save writes trainer_state/ then last/. A kill between the two
        # (seen in CI: kills after saved steps [.., 15, 16], then last/ stayed
        # at step 15) leaves last/ one save behind; resuming at the final step
        # must still leave last/ at that step, with the state's weights.
        behind = os.path.join(self.folder, "behind")
        out = os.path.join(self.folder, "state-ahead")
        for folder, steps in ((behind, 1), (out, 2)):
            cmd = self.command(folder)
            cmd[cmd.index("--max-steps") + 1] = str(steps)
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            self.assertEqual(result.returncode, 0, result.stderr)
        shutil.rmtree(os.path.join(out, "last"))
        shutil.copytree(os.path.join(behind, "last"), os.path.join(out, "last"))
        cmd = self.command(out, resume=True)
        cmd[cmd.index("--max-steps") + 1] = "2"
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("a save was interrupted", result.stderr)
        config = checkpoint_complete(self, os.path.join(out, "last"), extra=["spm.model"])
        self.assertEqual(config["dserve"]["training"]["step"], 2)
        def classifier(folder):
            header, data = cc.read_safetensors(os.path.join(folder, cc.SAFETENSORS))
            begin, end = header["classifier.weight"]["data_offsets"]
            return data[begin:end]
        self.assertNotEqual(classifier(os.path.join(behind, "last")), classifier(os.path.join(out, "trainer_state")))
        self.assertEqual(classifier(os.path.join(out, "last")), classifier(os.path.join(out, "trainer_state")),
                         "last/ holds the resumed step's weights")

    def test_resume_with_nothing_left_removes_an_unfinished_state_save(self):
        # Seen in CI: a kill inside the final step's trainer_state save left
        # OUT/trainer_state.tmp; the resume found step 2 of 2 done, trained
        # nothing, and kept it. Leftovers of a fallback swap (*.old beside a
        # complete directory) are stale too.
        out = os.path.join(self.folder, "done")
        cmd = self.command(out)
        cmd[cmd.index("--max-steps") + 1] = "2"
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        shutil.copytree(os.path.join(out, "trainer_state"), os.path.join(out, "trainer_state.tmp"))
        os.remove(os.path.join(out, "trainer_state.tmp", "state.json"))  # the save never finished
        shutil.copytree(os.path.join(out, "trainer_state"), os.path.join(out, "trainer_state.old"))
        shutil.copytree(os.path.join(out, "last"), os.path.join(out, "last.old"))
        cmd = self.command(out, resume=True)
        cmd[cmd.index("--max-steps") + 1] = "2"
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("nothing to do", result.stderr)
        self.assertEqual(sorted(n for n in os.listdir(out) if ".tmp" in n or ".old" in n), [], result.stderr)
        self.check_invariants(out)


class NonFiniteLossTest(unittest.TestCase):
    def setUp(self):
        self.folder = e2e.scratch_dir("train-nan")
        self.data = os.path.join(self.folder, "train.jsonl")
        write_data(self.data)

    def train(self, init, out, *extra):
        return subprocess.run([e2e.BIN, "train", "--task", "classify", "--init", init, "--train", self.data, "--out",
                               out, "--epochs", "100", "--batch-size", "8", "--threads", "1", "--seed", "3",
                               "--max-length", "32"] + list(extra), capture_output=True, text=True, timeout=120)

    def snapshot(self, out):
        files = {}
        for root, _, names in os.walk(out):
            for name in names:
                if name != "metrics.csv":
                    path = os.path.join(root, name)
                    files[os.path.relpath(path, out)] = e2e.read_bytes(path)
        return files

    def test_diverging_learning_rate_stops_at_the_first_nan(self):
        # lr 1e30: step 1's loss is finite, its update blows the weights up,
        # step 2's loss is NaN. The run stops there; step 1's save stays.
        out = os.path.join(self.folder, "diverge")
        result = self.train(e2e.test_models()["classify"], out, "--lr", "1e30", "--max-steps", "6",
                            "--save-every", "1")
        self.assertEqual(result.returncode, 1, result.stderr)
        message = result.stderr.strip().splitlines()[-1]
        for part in ("dserve train: loss is nan at step 2", "training stopped", os.path.join(out, "last"),
                     "step 1) is kept", "--lr"):
            self.assertIn(part, message)
        self.assertEqual([s for s, _ in losses(out)], [1])
        config = checkpoint_complete(self, os.path.join(out, "last"), extra=["spm.model"])
        self.assertEqual(config["dserve"]["training"]["step"], 1)
        with open(os.path.join(out, "trainer_state", "state.json")) as f:
            self.assertEqual(json.load(f)["step"], 1)
        self.assertFalse(os.path.exists(os.path.join(out, "best")))

    def test_inf_weight_stops_at_step_one_and_keeps_the_earlier_checkpoint(self):
        out = os.path.join(self.folder, "out")
        good = self.train(e2e.test_models()["classify"], out, "--max-steps", "2", "--save-every", "1")
        self.assertEqual(good.returncode, 0, good.stderr)
        before = self.snapshot(out)
        self.assertIn(os.path.join("last", cc.SAFETENSORS), before)

        bad = os.path.join(self.folder, "inf-init")
        shutil.copytree(e2e.test_models()["classify"], bad)
        path = os.path.join(bad, cc.SAFETENSORS)
        header, data = cc.read_safetensors(path)
        begin, end = header["deberta.embeddings.LayerNorm.weight"]["data_offsets"]
        data = data[:begin] + struct.pack("<f", float("inf")) * ((end - begin) // 4) + data[end:]
        cc.write_safetensors(path, header, data)

        result = self.train(bad, out, "--max-steps", "4", "--save-every", "1")
        self.assertEqual(result.returncode, 1, result.stderr)
        message = result.stderr.strip().splitlines()[-1]
        self.assertRegex(message, r"^dserve train: loss is (nan|inf|-inf) at step 1: training stopped; "
                                  r"this run saved nothing before it; .*/out/last \(from an earlier run\) is "
                                  r"untouched\. Lower --lr .* --init weights for NaN/Inf$")
        self.assertEqual(self.snapshot(out), before, "the earlier run's checkpoints are untouched")


if __name__ == "__main__":
    unittest.main()
