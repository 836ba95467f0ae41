"""Hot reload (`dserve serve --watch`, SIGHUP): a new checkpoint swapped into
a served directory is loaded beside the old one and switched to with zero
failed calls under load; a broken one (every kind in corrupt_checkpoints)
keeps the old version serving and is reported (log + dserve_model_reloads_total);
a checkpoint still being written in place is not loaded until it is
complete; without --watch, SIGHUP checks at once."""
import ctypes
import os
import shutil
import signal
import threading
import time
import unittest

import grpc

import corrupt_checkpoints as cc
import e2e_support as e2e
from e2e_support import pb

POLL_S = 0.2
TEXT = "The parcel never arrived and I want my money back for the order."
REQUEST = pb.ClassifyRequest(model="classify", texts=[TEXT, "reset my password please"])
OTHER = e2e.CLASSIFY_LABELS.index("other")

_libc = ctypes.CDLL(None, use_errno=True)


def swap_in(new_dir, live_dir):
    """Puts new_dir in place of live_dir as our checkpoint writer does
    (model/checkpoint WriteCheckpointDir): renameat2(RENAME_EXCHANGE), then
    the old copy is deleted."""
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    if _libc.renameat2(AT_FDCWD, new_dir.encode(), AT_FDCWD, live_dir.encode(), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2(RENAME_EXCHANGE) %s %s" % (new_dir, live_dir))
    shutil.rmtree(new_dir)


def retrained_copy(src, dst, bias=8.0):
    """src with different weights: the classifier's bias of "other" raised
    by `bias`, so "other" comes first and every score moves."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, cc.SAFETENSORS)
    header, data = cc.read_safetensors(path)
    begin, _ = header["classifier.bias"]["data_offsets"]
    at = begin + 4 * OTHER
    value = ctypes.c_float.from_buffer_copy(data[at:at + 4]).value + bias
    data = data[:at] + bytes(ctypes.c_float(value)) + data[at + 4:]
    cc.write_safetensors(path, header, data)
    return dst


# Scores of one text computed in different batch compositions (row position,
# padding length, batch size) or on another worker differ at ~1e-6: fp32
# GEMMs are blocked and summed in a different order. 1e-4 on probabilities is
# 100x that; the old and the new model differ by far more (checked below),
# so a call can still only match one of them.
# Labels and their order are compared exactly (but for ties within the
# tolerance: e2e.ranking_mismatch).
SCORE_TOL = 1e-4


def outputs(response):
    """Comparable form of a ClassifyResponse: (label, score) per label, per text."""
    return tuple(tuple((l.label, l.score) for l in r.labels) for r in response.results)


def oracle(model_dir):
    """The expected response of `model_dir` for REQUEST: `dserve forward` on
    libsentencepiece's ids, softmax in numpy."""
    rows = [{"input_ids": e2e.single_ids(t)} for t in REQUEST.texts]
    return tuple(tuple((label, float(score)) for label, score in e2e.classify_oracle(out["logits"]))
                 for out in e2e.forward(model_dir, rows))


def mismatch(got, want, tol=SCORE_TOL):
    """None when `got` and `want` have the same labels in the same order per
    text and every score within `tol`; otherwise why not."""
    if len(got) != len(want):
        return "%d texts, want %d" % (len(got), len(want))
    for i, (g, w) in enumerate(zip(got, want)):
        problem = e2e.ranking_mismatch(g, w, tol)
        if problem:
            return "text %d: %s" % (i, problem)
    return None


def assert_close(test, got, want, tol=SCORE_TOL):
    problem = mismatch(got, want, tol)
    test.assertIsNone(problem, "%s\ngot  %s\nwant %s" % (problem, got, want))


class Server:
    """A classify model served from a directory the test may replace."""

    def __init__(self, name, extra_args):
        self.folder = e2e.scratch_dir(name)
        self.live = os.path.join(self.folder, "live")
        shutil.copytree(e2e.test_models()["classify"], self.live)
        self.server = e2e.ServerProcess({"classify": self.live}, extra_args, name=name).start()
        self.channel = self.server.channel()
        self.stub = self.server.stub(self.channel)

    def stop(self):
        self.channel.close()
        self.server.stop()

    def staging(self, name):
        return os.path.join(self.folder, name)

    def version(self):
        models = self.stub.ListModels(pb.ListModelsRequest(), timeout=10).models
        return {m.name: m.version for m in models}["classify"]

    def reloads(self, result):
        return e2e.metric_value(self.server.metrics(), "dserve_model_reloads_total", model="classify", result=result)

    def info_versions(self):
        return [labels["version"] for name, labels, value in self.server.metrics()
                if name == "dserve_model_info" and labels.get("model") == "classify" and value == 1]

    def wait_for(self, what, predicate, timeout_s=20):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s; server log:\n%s" % (what, self.server.log_tail()))

    def log(self):
        with open(self.server.log_path, errors="replace") as f:
            return f.read()


class ReloadUnderLoadTest(unittest.TestCase):
    CLIENTS = 6

    def setUp(self):
        self.s = Server("reload-load", ["--watch=%g" % POLL_S, "--workers", "1", "--max-batch-size", "8"])

    def tearDown(self):
        self.s.stop()

    def test_zero_failed_calls_and_outputs_switch(self):
        s = self.s
        old_version = s.version()
        old_out = outputs(s.stub.Classify(REQUEST, timeout=30))
        assert_close(self, old_out, oracle(s.live))
        new_dir = retrained_copy(s.live, s.staging("retrained"))
        new_expected = oracle(new_dir)
        self.assertNotEqual([r[0][0] for r in new_expected], [r[0][0] for r in old_out])
        # Every text's output differs between the models far beyond the
        # tolerance ("other" gains 8 in logit), so a call matches one model,
        # and with two texts a mix of the two would match neither.
        for old_text, new_text in zip(old_out, new_expected):
            old_scores, new_scores = dict(old_text), dict(new_text)
            self.assertGreater(max(abs(old_scores[l] - new_scores[l]) for l in old_scores), 100 * SCORE_TOL)

        calls, errors, lock = [], [], threading.Lock()
        stop = threading.Event()

        def client():
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    out = outputs(s.stub.Classify(REQUEST, timeout=30))
                    with lock:
                        calls.append((sent, time.monotonic(), out))
                except grpc.RpcError as e:
                    with lock:
                        errors.append((e.code(), e.details()))

        threads = [threading.Thread(target=client) for _ in range(self.CLIENTS)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        swapped_at = time.monotonic()
        swap_in(new_dir, s.live)
        s.wait_for("the new version in ListModels", lambda: s.version() != old_version)
        seen_at = time.monotonic()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join()

        new_version = s.version()
        print("\n%d calls by %d clients, reload seen %.2f s after the swap; %d errors"
              % (len(calls), self.CLIENTS, seen_at - swapped_at, len(errors)))
        self.assertEqual(errors, [])
        self.assertRegex(new_version, r"^[0-9a-f]{16}$")
        before = [out for sent, done, out in calls if done < swapped_at]
        after = [out for sent, done, out in calls if sent > seen_at]
        self.assertGreater(len(before), self.CLIENTS)
        self.assertGreater(len(after), self.CLIENTS)
        for out in before:
            assert_close(self, out, old_out)
        for out in after:
            assert_close(self, out, new_expected)
        # Calls in flight at the switch got one model or the other, never a mix.
        for _, _, out in calls:
            self.assertTrue(mismatch(out, old_out) is None or mismatch(out, new_expected) is None,
                            "neither the old nor the new model's output: %s" % (out,))

        # Metrics: one info series, at the new version; one successful reload;
        # every call OK.
        self.assertEqual(s.info_versions(), [new_version])
        self.assertEqual(s.reloads("ok"), 1)
        self.assertEqual(s.reloads("failed"), 0)
        samples = s.server.metrics()
        codes = {labels["code"] for name, labels, v in samples
                 if name == "dserve_requests_total" and labels.get("model") == "classify" and v > 0}
        self.assertEqual(codes, {"OK"})
        # The old version drained and was freed.
        s.wait_for("the old version to be unloaded",
                   lambda: "version %s unloaded" % old_version in s.log(), timeout_s=10)


class FailedAndPartialReloadTest(unittest.TestCase):
    def setUp(self):
        self.s = Server("reload-fail", ["--watch=%g" % POLL_S])

    def tearDown(self):
        self.s.stop()

    def assert_still_old(self, version, out):
        self.assertEqual(self.s.version(), version)
        self.assertEqual(self.s.info_versions(), [version])
        assert_close(self, outputs(self.s.stub.Classify(REQUEST, timeout=30)), out)

    def test_broken_checkpoints_keep_the_old_version_then_a_good_one_loads(self):
        s = self.s
        good = s.staging("good-copy")
        shutil.copytree(s.live, good)
        version = s.version()
        out = outputs(s.stub.Classify(REQUEST, timeout=30))
        for i, kind in enumerate(cc.VARIANTS):
            with self.subTest(kind=kind):
                d, path, needles = cc.make_variant(kind, parent=s.staging("v%d" % i), src=good)
                swap_in(d, s.live)
                s.wait_for("failed reload %d (%s)" % (i + 1, kind), lambda: s.reloads("failed") == i + 1)
                self.assert_still_old(version, out)
                # The log says why, naming the file (as served: the live path) and the problem.
                line = [l for l in s.log().splitlines() if "reload failed" in l][-1]
                self.assertIn(os.path.join(s.live, os.path.basename(path)), line)
                for needle in needles:
                    self.assertIn(needle, line)
                self.assertIn("version %s keeps serving" % version, line)
        # A broken version is reported once, not on every poll.
        time.sleep(4 * POLL_S)
        self.assertEqual(s.reloads("failed"), len(cc.VARIANTS))
        self.assertEqual(s.reloads("ok"), 0)

        # A good checkpoint after all that loads.
        new_dir = retrained_copy(good, s.staging("retrained"))
        expected = oracle(new_dir)
        swap_in(new_dir, s.live)
        s.wait_for("the good checkpoint", lambda: s.version() != version)
        self.assertEqual(s.reloads("ok"), 1)
        assert_close(self, outputs(s.stub.Classify(REQUEST, timeout=30)), expected)



class PartialWriteTest(unittest.TestCase):
    POLL_S = 1.0  # a writer would have to stall for a whole second between chunks to fool it

    def setUp(self):
        self.s = Server("reload-partial", ["--watch=%g" % self.POLL_S])

    def tearDown(self):
        self.s.stop()

    def test_checkpoint_written_in_place_loads_only_when_complete(self):
        """Weights rewritten in place, slowly (not our writer's swap): every
        poll sees a different file, so nothing half-written is loaded."""
        s = self.s
        version = s.version()
        new_dir = retrained_copy(s.live, s.staging("retrained"))
        expected = oracle(new_dir)
        with open(os.path.join(new_dir, cc.SAFETENSORS), "rb") as f:
            content = f.read()
        chunk = len(content) // 16 + 1
        with open(os.path.join(s.live, cc.SAFETENSORS), "wb") as f:
            for at in range(0, len(content), chunk):
                f.write(content[at:at + chunk])
                f.flush()
                time.sleep(0.1)
                self.assertEqual(s.version(), version)
        s.wait_for("the completed checkpoint", lambda: s.version() != version)
        self.assertEqual(s.reloads("failed"), 0)
        self.assertEqual(s.reloads("ok"), 1)
        assert_close(self, outputs(s.stub.Classify(REQUEST, timeout=30)), expected)


class SighupTest(unittest.TestCase):
    def setUp(self):
        self.s = Server("reload-hup", [])  # no --watch: no polling

    def tearDown(self):
        self.s.stop()

    def test_sighup_reloads_at_once(self):
        s = self.s
        version = s.version()
        new_dir = retrained_copy(s.live, s.staging("retrained"))
        expected = oracle(new_dir)
        swap_in(new_dir, s.live)
        time.sleep(1.0)
        self.assertEqual(s.version(), version, "without --watch nothing is polled")
        s.server.proc.send_signal(signal.SIGHUP)
        s.wait_for("the SIGHUP reload", lambda: s.version() != version, timeout_s=10)
        self.assertTrue(s.server.running())
        self.assertEqual(s.reloads("ok"), 1)
        assert_close(self, outputs(s.stub.Classify(REQUEST, timeout=30)), expected)
        # A second SIGHUP with nothing new changes nothing.
        new_version = s.version()
        s.server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        self.assertEqual(s.version(), new_version)
        self.assertEqual(s.reloads("ok"), 1)


if __name__ == "__main__":
    unittest.main()
