"""The Python client (client/python/dserve_client) against a real `dserve serve`.

Environment (set by tests/client/python/CMakeLists.txt): DSERVE_BIN,
DSERVE_PYTHON_STUBS, DSERVE_PYCLIENT_SCRATCH, DSERVE_SHARED_DIR,
DSERVE_SOURCE_DIR, PYTHONPATH (client/python).
"""
import atexit
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BIN = os.environ["DSERVE_BIN"]
SCRATCH = os.environ["DSERVE_PYCLIENT_SCRATCH"]
SHARED = os.environ["DSERVE_SHARED_DIR"]
SOURCE = os.environ["DSERVE_SOURCE_DIR"]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
if not os.access(BIN, os.X_OK):
    sys.exit("python client test: %s is not built; build it first: ninja python_client" % BIN)

sys.path.insert(0, os.path.join(SOURCE, "client", "python"))
import grpc  # noqa: E402

from dserve_client import DserveClient, DserveError  # noqa: E402

CLASSIFY_LABELS = ["billing", "refund", "password_reset", "shipping", "other"]
TOKEN = "s3cret-python-client-token"

os.makedirs(SCRATCH, exist_ok=True)
_MODELS = None


def scratch_dir(prefix):
    return tempfile.mkdtemp(prefix=prefix + "-", dir=SCRATCH)


def test_models():
    """{task: checkpoint dir}, made once per process by tests/data/make_test_models.py."""
    global _MODELS
    if _MODELS is None:
        out = scratch_dir("models")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "data", "make_test_models.py"), SHARED, out],
                       check=True, stdout=subprocess.DEVNULL)
        _MODELS = {task: os.path.join(out, task) for task in ("classify", "answer", "rerank")}
    return _MODELS


class Server:
    """`dserve serve` on 127.0.0.1 with OS-chosen ports."""

    def __init__(self, models, extra_args=()):
        self.cmd = [BIN, "serve"]
        for name, path in models.items():
            self.cmd += ["--model", "%s=%s" % (name, path)]
        self.cmd += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"] + list(extra_args)
        self.proc = None
        self.port = None
        self.metrics_port = None
        self.lines = []
        self._ready = threading.Event()

    @property
    def target(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout_s=90):
        self.log = tempfile.NamedTemporaryFile("w+", prefix="server-", suffix=".log", dir=SCRATCH, delete=False)
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                code = self.proc.poll()
                self.stop()
                self.log.seek(0)
                raise RuntimeError("dserve serve did not become ready (exit %s): %s\n%s" % (
                    code, " ".join(self.cmd), self.log.read()[-4000:]))
        return self

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.match(r"dserve: metrics on port (\d+)", line)
            if m:
                self.metrics_port = int(m.group(1))
            m = re.match(r"dserve: listening on port (\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._ready.set()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.poll() is not None and self._ready.is_set():
            # Start-up failures carry the log in their exception; keep no logs otherwise.
            self.log.close()
            try:
                os.unlink(self.log.name)
            except OSError:
                pass


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = test_models()
        cls.server = Server(cls.models)
        cls.addClassCleanup(cls.server.stop)
        cls.server.start()
        cls.client = DserveClient(cls.server.target, timeout=30)
        cls.addClassCleanup(cls.client.close)

    def test_classify(self):
        texts = ["please refund my order", "I forgot my password", "où est mon colis ?"]
        results = self.client.classify("classify", texts)
        self.assertEqual(len(results), len(texts))
        for labels in results:
            self.assertEqual(sorted(l.label for l in labels), sorted(CLASSIFY_LABELS))
            self.assertAlmostEqual(sum(l.score for l in labels), 1.0, places=4)
            scores = [l.score for l in labels]
            self.assertEqual(scores, sorted(scores, reverse=True))
            self.assertTrue(all(0.0 <= s <= 1.0 for s in scores))

    def test_classify_top_k_and_raw_scores(self):
        full = self.client.classify("classify", ["please refund my order"])[0]
        top2 = self.client.classify("classify", "please refund my order", top_k=2)[0]
        self.assertEqual([l.label for l in top2], [l.label for l in full[:2]])
        raw = self.client.classify("classify", ["please refund my order"], raw_scores=True)[0]
        self.assertEqual(len(raw), len(CLASSIFY_LABELS))
        # Softmax of the (temperature-scaled) logits gives back the probabilities.
        z = sum(math.exp(l.score) for l in raw)
        probs = {l.label: math.exp(l.score) / z for l in raw}
        for l in full:
            self.assertAlmostEqual(probs[l.label], l.score, places=4)

    def test_answer(self):
        contexts = ["The café opens at nine in the morning and closes at six.",
                    "Ünïcödé text: the parcel was shipped to Zürich on Monday."]
        result = self.client.answer("answer", "When does the café open?", contexts, top_k=3)
        self.assertEqual(result.model, "answer")
        self.assertGreaterEqual(len(result.answers), 1)
        self.assertLessEqual(len(result.answers), 3)
        self.assertGreater(result.tokens, 0)
        self.assertTrue(0.0 <= result.no_answer_score <= 1.0)
        scores = [a.score for a in result.answers]
        self.assertEqual(scores, sorted(scores, reverse=True))
        for a in result.answers:
            self.assertLess(a.context_index, len(contexts))
            self.assertLessEqual(a.start_char, a.end_char)
            self.assertEqual(a.text, contexts[a.context_index][a.start_char:a.end_char])

    def test_answer_threshold_override(self):
        # A huge threshold can never be exceeded: always an answer; a very
        # negative one is always exceeded: always "no answer".
        ctx = ["The café opens at nine in the morning."]
        self.assertFalse(self.client.answer("answer", "When?", ctx, null_score_diff_threshold=1e9).no_answer)
        self.assertTrue(self.client.answer("answer", "When?", ctx, null_score_diff_threshold=-1e9).no_answer)

    def test_rerank(self):
        docs = ["Refunds are issued within five days.", "Our office is in Berlin.",
                "To reset your password, click 'forgot password'.", "Shipping is free over 50 euros."]
        ranked = self.client.rerank("rerank", "how do I get my money back?", docs)
        self.assertEqual(sorted(r.index for r in ranked), list(range(len(docs))))
        scores = [r.score for r in ranked]
        self.assertEqual(scores, sorted(scores, reverse=True))
        self.assertTrue(all(0.0 <= s <= 1.0 for s in scores))
        self.assertTrue(all(r.document == "" for r in ranked))
        top = self.client.rerank("rerank", "how do I get my money back?", docs, top_n=2, return_documents=True)
        self.assertEqual([r.index for r in top], [r.index for r in ranked[:2]])
        for r in top:
            self.assertEqual(r.document, docs[r.index])

    def test_list_models(self):
        models = {m.name: m for m in self.client.list_models()}
        self.assertEqual(set(models), {"classify", "answer", "rerank"})
        for name, m in models.items():
            self.assertEqual(m.task, name)
            self.assertGreater(m.max_length, 0)
        self.assertEqual(models["classify"].labels, CLASSIFY_LABELS)

    def test_health(self):
        self.assertEqual(self.client.health(), "SERVING")
        self.assertEqual(self.client.health("dserve.v1.Inference"), "SERVING")

    def test_unknown_model(self):
        with self.assertRaises(DserveError) as ctx:
            self.client.classify("no-such-model", ["hello"])
        self.assertEqual(ctx.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("no-such-model", ctx.exception.message)
        self.assertTrue(ctx.exception.request_id)

    def test_wrong_task(self):
        with self.assertRaises(DserveError) as ctx:
            self.client.classify("rerank", ["hello"])
        self.assertEqual(ctx.exception.code, grpc.StatusCode.FAILED_PRECONDITION)

    def test_invalid_argument_is_not_retried(self):
        client = DserveClient(self.server.target, timeout=30, max_attempts=5, initial_backoff=5.0)
        self.addCleanup(client.close)
        start = time.monotonic()
        with self.assertRaises(DserveError) as ctx:
            client.classify("classify", [""])
        self.assertEqual(ctx.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertLess(time.monotonic() - start, 4.0)


    def test_message_too_large_is_not_retried(self):
        # Over the server's 4 MiB --max-message-bytes: gRPC answers
        # RESOURCE_EXHAUSTED "Received message larger than max", which no
        # retry can cure (issue 16).
        client = DserveClient(self.server.target, timeout=30, max_attempts=5, initial_backoff=5.0)
        self.addCleanup(client.close)
        start = time.monotonic()
        with self.assertRaises(DserveError) as ctx:
            client.classify("classify", ["x" * (5 << 20)])
        self.assertEqual(ctx.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED, ctx.exception)
        self.assertIn("larger than max", str(ctx.exception))
        self.assertLess(time.monotonic() - start, 4.0)


def ok_requests(server, model):
    """dserve_requests_total{model, code="OK"} of `server`, summed over tasks."""
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % server.metrics_port, timeout=10) as r:
        text = r.read().decode("utf-8")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("dserve_requests_total{") and 'model="%s"' % model in line and 'code="OK"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


class DefaultLoadBalancingTest(unittest.TestCase):
    """Issue 16, defect 4: with no lb_policy the client balances round_robin
    (DEFAULT_SERVICE_CONFIG), so a target that resolves to several replicas
    (a headless Service's DNS name; here an ipv4: list) spreads the calls.
    Before, the default was gRPC's pick_first: every call went to one."""

    def test_default_policy_spreads_calls(self):
        servers = []
        for _ in range(2):
            server = Server({"intent": test_models()["classify"]}, ["--workers", "1"])
            self.addCleanup(server.stop)
            servers.append(server.start())
        target = "ipv4:" + ",".join(s.target for s in servers)
        with DserveClient(target, timeout=30) as client:
            # READY once one replica is; the other may still be connecting.
            deadline = time.monotonic() + 10
            while min(ok_requests(s, "intent") for s in servers) == 0 and time.monotonic() < deadline:
                client.classify("intent", ["where is my parcel"])
            before = [ok_requests(s, "intent") for s in servers]
            for _ in range(20):
                client.classify("intent", ["where is my parcel"])
            served = [ok_requests(s, "intent") - b for s, b in zip(servers, before)]
        self.assertEqual(sum(served), 20)
        self.assertGreaterEqual(min(served), 5, "calls per replica: %s" % served)


class UnreachableTest(unittest.TestCase):
    def test_unavailable_is_retried_then_raised(self):
        # A port nobody listens on: UNAVAILABLE on every attempt.
        with DserveClient("127.0.0.1:1", timeout=2, max_attempts=3, initial_backoff=0.2) as client:
            start = time.monotonic()
            with self.assertRaises(DserveError) as ctx:
                client.list_models()
            self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAVAILABLE)
            self.assertGreaterEqual(time.monotonic() - start, 0.2)  # two backoffs of >= 0.1 s each


class TokenAuthTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        folder = scratch_dir("auth")
        cls.addClassCleanup(shutil.rmtree, folder, True)
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.server = Server({"classify": test_models()["classify"]}, ["--auth-token-file", token_file])
        cls.addClassCleanup(cls.server.stop)
        cls.server.start()

    def test_missing_token(self):
        with DserveClient(self.server.target, max_attempts=1) as client:
            with self.assertRaises(DserveError) as ctx:
                client.classify("classify", ["please refund my order"])
            self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_wrong_token(self):
        with DserveClient(self.server.target, token="wrong", max_attempts=1) as client:
            with self.assertRaises(DserveError) as ctx:
                client.list_models()
            self.assertEqual(ctx.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_right_token(self):
        with DserveClient(self.server.target, token=TOKEN, timeout=30) as client:
            labels = client.classify("classify", ["please refund my order"])[0]
            self.assertEqual(len(labels), len(CLASSIFY_LABELS))
            self.assertEqual([m.name for m in client.list_models()], ["classify"])
            self.assertEqual(client.health(), "SERVING")


if __name__ == "__main__":
    unittest.main()
