"""Shared pieces of the dserve end-to-end tests.

- ServerProcess: starts `dserve serve` on loopback with port 0, parses the
  bound ports from stdout, always kills it (tests call stop() in
  tearDownClass; an atexit hook catches anything left).
- test_models(): servable random-weight checkpoints made by
  tests/data/make_test_models.py in a per-process scratch folder.
- Independent computations: SentencePiece tokenization (python3-
  sentencepiece), `dserve forward` on the ids we build, softmax/sigmoid and
  Hugging Face's SQuAD v2 post-processing re-implemented in Python.
- Prometheus text parsing; wait_until() polls a condition (tests wait for
  an observable state, never for a fixed time and hope).
- WorkerHold: the server's test hook (DSERVE_TEST_HOLD_WORKERS_FILE) that
  keeps workers from running batches while a file exists, so a test can act
  while work is certainly queued or in flight.

Environment (set by tests/e2e/CMakeLists.txt): DSERVE_BIN, DSERVE_E2E_STUBS,
DSERVE_E2E_SCRATCH, DSERVE_SHARED_DIR, DSERVE_SOURCE_DIR, DSERVE_PROMTOOL,
DSERVE_OPENSSL.
"""
import atexit
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

BIN = os.environ["DSERVE_BIN"]
STUBS = os.environ["DSERVE_E2E_STUBS"]
SCRATCH = os.environ["DSERVE_E2E_SCRATCH"]
SHARED = os.environ["DSERVE_SHARED_DIR"]
SOURCE = os.environ["DSERVE_SOURCE_DIR"]
PROMTOOL = os.environ.get("DSERVE_PROMTOOL") or "promtool"
OPENSSL = os.environ.get("DSERVE_OPENSSL") or "openssl"
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
# Sanitizer builds (cmake/DserveSanitize.cmake) set these for tests whose
# expectations are about resources, not results: compute runs TIME_FACTOR
# times slower (TSan), and the allocator keeps up to RSS_SLACK bytes of freed
# memory a plain build would reuse (ASan's quarantine and caches).
TIME_FACTOR = float(os.environ.get("DSERVE_TEST_TIME_FACTOR", "1"))
RSS_SLACK = int(os.environ.get("DSERVE_TEST_RSS_SLACK_MB", "0")) << 20

if not os.path.exists(os.path.join(STUBS, "dserve", "v1", "inference_pb2_grpc.py")):
    sys.exit("e2e: no Python stubs in %s; build them first: ninja e2e" % STUBS)
if not os.access(BIN, os.X_OK):
    sys.exit("e2e: %s is not built; build it first: ninja e2e" % BIN)
sys.path.insert(0, STUBS)
import grpc  # noqa: E402
from dserve.v1 import inference_pb2 as pb  # noqa: E402
from dserve.v1 import inference_pb2_grpc as pb_grpc  # noqa: E402
from dserve_health import health_pb2, health_pb2_grpc  # noqa: E402

CLS, SEP = 1, 2
# Checkpoint facts (tests/data/make_test_models.py, shared/goldens/model).
CLASSIFY_LABELS = ["billing", "refund", "password_reset", "shipping", "other"]
MAX_LENGTH = {"classify": 256, "answer": 128, "rerank": 128}
QA_N_BEST, QA_MAX_ANSWER_TOKENS, QA_DOC_STRIDE, QA_THRESHOLD = 20, 30, 128, 0.0

os.makedirs(SCRATCH, exist_ok=True)


def scratch_dir(prefix):
    return tempfile.mkdtemp(prefix=prefix + "-", dir=SCRATCH)


# ------------------------------------------------------------------ models --

_MODELS_DIR = None


def _models_dir():
    """tests/data/make_test_models.py's output, made once per process."""
    global _MODELS_DIR
    if _MODELS_DIR is None:
        out = scratch_dir("models")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "data", "make_test_models.py"), SHARED, out],
                       check=True, stdout=subprocess.DEVNULL)
        _MODELS_DIR = out
    return _MODELS_DIR


def test_models():
    """{task: checkpoint dir} of the DeBERTa test models: classify, answer, rerank."""
    return {task: os.path.join(_models_dir(), task) for task in ("classify", "answer", "rerank")}


def albert_test_models():
    """{task: checkpoint dir} of the ALBERT test models: classify, answer."""
    return {task: os.path.join(_models_dir(), "albert_" + task) for task in ("classify", "answer")}


_V1_MODELS_DIR = None


def deberta_v1_test_models():
    """{task: checkpoint dir} of the DeBERTa v1 test models (classify, answer,
    rerank) and "tokenizer": their GPT-2 BPE files alone
    (tests/data/make_v1_test_models.py), made once per process."""
    global _V1_MODELS_DIR
    if _V1_MODELS_DIR is None:
        out = scratch_dir("v1models")
        atexit.register(shutil.rmtree, out, True)
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "data", "make_v1_test_models.py"), SHARED, out],
                       check=True, stdout=subprocess.DEVNULL)
        _V1_MODELS_DIR = out
    return {task: os.path.join(_V1_MODELS_DIR, "v1_" + task) for task in ("classify", "answer", "rerank", "tokenizer")}


# ------------------------------------------------------------------ server --

_LIVE = set()


@atexit.register
def _kill_leftovers():
    for server in list(_LIVE):
        server.stop()


class ServerProcess:
    """`dserve serve` on 127.0.0.1 with OS-chosen ports.

    `dtype`: passed as --dtype unless extra_args has --dtype or --config (a
    config file says its own). Default "fp32": the tests compare scores with
    fp32 oracles (`dserve forward`, numpy) at 1e-4, and serve's own default,
    auto (issue 27), may pick bf16 by timing, differently from run to run on
    tiny models. None = serve's default (test_startup.py checks auto)."""

    def __init__(self, models, extra_args=(), name="server", env=None, dtype="fp32"):
        self.models = dict(models)
        self.dtype = dtype
        self.env = None if env is None else dict(os.environ, **env)
        self.extra_args = list(extra_args)
        self.name = name
        self.proc = None
        self.port = None
        self.metrics_port = None
        self.stdout_lines = []
        self._ready = threading.Event()
        self.log_path = None

    @property
    def target(self):
        return "127.0.0.1:%d" % self.port

    def command(self):
        cmd = [BIN, "serve"]
        for name, path in self.models.items():
            cmd += ["--model", "%s=%s" % (name, path)]
        cmd += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"]
        if self.dtype is not None and not {"--dtype", "--config"} & set(self.extra_args):
            cmd += ["--dtype", self.dtype]
        return cmd + self.extra_args

    def start(self, timeout_s=90):
        fd, self.log_path = tempfile.mkstemp(prefix=self.name + "-", suffix=".log", dir=SCRATCH)
        log = os.fdopen(fd, "w")
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log, text=True,
                                     start_new_session=True, env=self.env)
        log.close()
        _LIVE.add(self)
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                code = self.proc.poll()
                self.stop()
                raise RuntimeError("dserve serve did not become ready (exit %s): %s\nstdout: %s\nlog:\n%s" % (
                    code, " ".join(self.command()), "".join(self.stdout_lines), self.log_tail()))
        return self

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.stdout_lines.append(line)
            m = re.match(r"dserve: metrics on port (\d+)", line)
            if m:
                self.metrics_port = int(m.group(1))
            m = re.match(r"dserve: listening on port (\d+)", line)
            if m:
                self.port = int(m.group(1))
                self._ready.set()

    def log_tail(self, n=40):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def terminate(self):
        """SIGTERM (graceful drain)."""
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s):
        return self.proc.wait(timeout=timeout_s)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None and self.proc.poll() is not None and self.proc.stdout is not None:
            self._reader.join(timeout=5)
            if not self._reader.is_alive():
                self.proc.stdout.close()
        _LIVE.discard(self)

    def channel(self, **options):
        opts = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
        opts += list(options.items())
        return grpc.insecure_channel(self.target, options=opts)

    def stub(self, channel=None):
        return pb_grpc.InferenceStub(channel or self.channel())

    def scrape(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=10) as r:
            return r.read().decode("utf-8")

    def metrics(self):
        return parse_prometheus(self.scrape())


def wait_until(what, predicate, timeout_s=20, server=None):
    """Polls `predicate` every 20 ms until it is true; fails naming `what`
    (with the server's log tail) when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s * TIME_FACTOR
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s%s" % (
                timeout_s * TIME_FACTOR, what, "; server log:\n" + server.log_tail() if server else ""))
        time.sleep(0.02)


class WorkerHold:
    """While held, the server's workers take at most one batch each and
    run none (worker_pool.h, test_hold_file). Pass `env()` to ServerProcess."""

    def __init__(self, name):
        self.path = os.path.join(scratch_dir(name + "-hold"), "hold")

    def env(self):
        return {"DSERVE_TEST_HOLD_WORKERS_FILE": self.path}

    def hold(self):
        open(self.path, "w").close()

    def release(self):
        if os.path.exists(self.path):
            os.unlink(self.path)


def wait_ready(channel, timeout_s=10):
    grpc.channel_ready_future(channel).result(timeout=timeout_s)


# ----------------------------------------------------------------- metrics --

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text):
    """[(name, {label: value}, float)] of every sample line."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError("unparsable metrics line: %r" % line)
        labels = dict(_LABEL.findall(m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def metric_value(samples, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`; 0 if none."""
    total = 0.0
    for n, l, v in samples:
        if n == name and all(l.get(k) == str(val) for k, val in labels.items()):
            total += v
    return total


def has_sample(samples, name, **labels):
    return any(n == name and all(l.get(k) == str(val) for k, val in labels.items()) for n, l, _ in samples)


# --------------------------------------------------------------- tokenizer --

_SPM = None


def spm():
    global _SPM
    if _SPM is None:
        import sentencepiece
        _SPM = sentencepiece.SentencePieceProcessor(model_file=os.path.join(test_models()["classify"], "spm.model"))
    return _SPM


def pieces(text):
    """(ids, byte offsets [(begin, end)]) of `text` by libsentencepiece."""
    proto = spm().encode(text, out_type="immutable_proto")
    ids = [p.id for p in proto.pieces]
    assert ids == spm().encode(text)
    return ids, [(p.begin, p.end) for p in proto.pieces]


def single_ids(text):
    return [CLS] + spm().encode(text) + [SEP]


def pair_windows(first, second, max_length, stride):
    """HF-style overflowing windows of (first, second): the first text kept
    whole, the second split into chunks of `room` tokens overlapping by
    `stride` tokens. Each window: ids, type_ids, offsets (byte spans into
    `second` for its tokens, None elsewhere)."""
    a, _ = pieces(first)
    b, b_off = pieces(second)
    room = max_length - 3 - len(a)
    assert room > 0
    windows, start = [], 0
    while True:
        stop = min(start + room, len(b))
        ids = [CLS] + a + [SEP] + b[start:stop] + [SEP]
        types = [0] * (len(a) + 2) + [1] * (stop - start + 1)
        offsets = [None] * (len(a) + 2) + list(b_off[start:stop]) + [None]
        windows.append({"ids": ids, "type_ids": types, "offsets": offsets})
        if stop >= len(b):
            break
        start += room - stride
    return windows


def server_stride(first, max_length, doc_stride=QA_DOC_STRIDE):
    """The overlap dserve uses (Tokenizer windows with clamp_stride: half the room at most)."""
    room = max_length - len(pieces(first)[0]) - 3
    return min(doc_stride, room // 2)


def codepoints(text, byte_offset):
    """Code points of text.encode()[:byte_offset] (at a character boundary)."""
    return len(text.encode("utf-8")[:byte_offset].decode("utf-8"))


# ------------------------------------------------------------ dserve forward --

def forward(model_dir, rows, batch_size=8):
    """Raw head outputs of `dserve forward` for rows {"input_ids", "token_type_ids"?}."""
    payload = "".join(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([BIN, "forward", "--model", model_dir, "--batch-size", str(batch_size)], input=payload,
                         capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("dserve forward failed (%d): %s" % (out.returncode, out.stderr))
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == len(rows), (len(lines), len(rows))
    return lines


def softmax(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.float64(x)))


def classify_oracle(logits, labels=CLASSIFY_LABELS, top_k=0, raw=False):
    scores = np.asarray(logits, dtype=np.float64) if raw else softmax(logits)
    order = sorted(range(len(labels)), key=lambda i: (-np.float32(scores[i]), i))
    if top_k:
        order = order[:top_k]
    return [(labels[i], float(scores[i])) for i in order]


def ranking_mismatch(got, want, tol, n=None):
    """None when the ranked list `got` [(key, score)] is the oracle's ranking
    `want` [(key, score)] (every candidate, best first) cut to `n` (default:
    all): the same keys in the same order, each score within `tol`. The order
    is exact wherever the oracle's scores differ by more than `tol`; two
    keys whose oracle scores are within `tol` of each other are a tie, and
    batch composition or thread count may legitimately swap them (fp32
    results move at ~1e-6). Otherwise returns what differs."""
    n = len(want) if n is None else n
    oracle = dict(want)
    keys = [k for k, _ in got]
    if len(got) != n:
        return "%d results, want %d" % (len(got), n)
    if len(set(keys)) != len(keys):
        return "repeated keys in %s" % keys
    for k, (key, score) in enumerate(got):
        if key not in oracle:
            return "position %d: unknown key %r" % (k, key)
        if abs(score - oracle[key]) > tol:
            return "%r: score %.7f, want %.7f (tolerance %g)" % (key, score, oracle[key], tol)
        if abs(oracle[key] - want[k][1]) > tol:
            return "position %d: %r (oracle score %.7f), want %r (%.7f): order %s, want %s" % (
                k, key, oracle[key], want[k][0], want[k][1], keys, [w for w, _ in want[:n]])
    return None


# ------------------------------------------------- SQuAD v2 post-processing --

_WS = b" \t\n\r\f\v"


def _top(values, k):
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]


def qa_oracle(windows, contexts, n_best=QA_N_BEST, max_answer_tokens=QA_MAX_ANSWER_TOKENS,
              threshold=QA_THRESHOLD, top_k=1):
    """Hugging Face utils_qa.postprocess_qa_predictions (version_2_with_negative)
    over `windows` [{start_logits, end_logits, offsets, context}], then the
    answer list as dserve documents it: whitespace trimmed off the span, empty
    and duplicate spans skipped, code-point offsets."""
    prelim, null = [], None
    for w in windows:
        s = np.asarray(w["start_logits"], dtype=np.float32)
        e = np.asarray(w["end_logits"], dtype=np.float32)
        off = w["offsets"]
        feature_null = np.float32(s[0] + e[0])
        if null is None or null["score"] > feature_null:
            null = {"null": True, "score": feature_null, "start_logit": s[0], "end_logit": e[0]}
        for si in _top(list(s), n_best):
            if off[si] is None:
                continue
            for ei in _top(list(e), n_best):
                if off[ei] is None or ei < si or ei - si + 1 > max_answer_tokens:
                    continue
                begin = off[si][0]
                prelim.append({"null": False, "context": w["context"], "bytes": (begin, max(begin, off[ei][1])),
                               "score": np.float32(s[si] + e[ei]), "start_logit": s[si], "end_logit": e[ei]})
    prelim.append(null)
    preds = sorted(prelim, key=lambda p: -p["score"])[:n_best]  # stable, as HF and dserve
    if not any(p["null"] for p in preds):
        preds.append(null)
    probs = softmax([p["score"] for p in preds])
    for p, prob in zip(preds, probs):
        p["probability"] = float(prob)
    spans = [p for p in preds if not p["null"] and p["bytes"][1] > p["bytes"][0]]
    result = {"no_answer_score": next(p["probability"] for p in preds if p["null"])}
    if not spans:
        result["no_answer"], result["null_score_diff"] = True, float("inf")
    else:
        best = spans[0]
        diff = np.float32(np.float32(null["score"] - best["start_logit"]) - best["end_logit"])
        result["null_score_diff"] = float(diff)
        result["no_answer"] = bool(diff > threshold)
    answers = []
    for p in spans:
        if len(answers) >= max(1, top_k):
            break
        text = contexts[p["context"]]
        raw = text.encode("utf-8")
        b, e = p["bytes"]
        while b < e and raw[b] in _WS:
            b += 1
        while e > b and raw[e - 1] in _WS:
            e -= 1
        if b == e:
            continue
        start, end = codepoints(text, b), codepoints(text, e)
        if any(a["context_index"] == p["context"] and a["start_char"] == start and a["end_char"] == end
               for a in answers):
            continue
        answers.append({"text": raw[b:e].decode("utf-8"), "context_index": p["context"], "start_char": start,
                        "end_char": end, "score": p["probability"], "logit_score": float(p["score"])})
    result["answers"] = answers
    return result


def answer_windows(question, contexts, model_dir, max_length=MAX_LENGTH["answer"]):
    """Windows of every context with their `dserve forward` logits."""
    stride = server_stride(question, max_length)
    windows = []
    for c, context in enumerate(contexts):
        for w in pair_windows(question, context, max_length, stride):
            w["context"] = c
            windows.append(w)
    outs = forward(model_dir, [{"input_ids": w["ids"], "token_type_ids": w["type_ids"]} for w in windows])
    for w, o in zip(windows, outs):
        w["start_logits"], w["end_logits"] = o["start_logits"], o["end_logits"]
        assert len(w["start_logits"]) == len(w["ids"])
    return windows


# ------------------------------------------------------------ raw requests --

def invalid_utf8_request(message, field_setter, placeholder="PLACEHOLDER\u00e9XY"):
    """Serialized `message` with the bytes of `placeholder` (set through
    `field_setter`) replaced by invalid UTF-8 of the same length."""
    field_setter(message, placeholder)
    data = message.SerializeToString()
    raw = placeholder.encode("utf-8")
    assert data.count(raw) == 1
    bad = b"ab\xff\xfe\xc3(" + b"z" * (len(raw) - 6)
    assert len(bad) == len(raw)
    return data.replace(raw, bad)


def raw_call(channel, method, response_class):
    return channel.unary_unary("/dserve.v1.Inference/" + method, request_serializer=lambda b: b,
                               response_deserializer=response_class.FromString)


# --------------------------------------------------------------------- TLS --

def make_certs(folder):
    """CA, a server certificate for localhost/127.0.0.1, a client certificate
    (both signed by the CA), an unrelated CA and a client certificate signed
    by it (other_client), made with the openssl CLI."""
    def run(*args):
        subprocess.run([OPENSSL] + list(args), check=True, cwd=folder, capture_output=True)

    ext = os.path.join(folder, "server.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    cext = os.path.join(folder, "client.ext")
    with open(cext, "w") as f:
        f.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=clientAuth\n")
    for ca in ("ca", "other_ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key", "-out", ca + ".pem",
            "-days", "2", "-subj", "/CN=dserve e2e " + ca)
    for name, extfile, ca in (("server", ext, "ca"), ("client", cext, "ca"), ("other_client", cext, "other_ca")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out", name + ".csr",
            "-subj", "/CN=" + ("localhost" if name == "server" else "dserve-e2e-" + name))
        run("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key", "-CAcreateserial",
            "-out", name + ".pem", "-days", "2", "-extfile", extfile)
    paths = {}
    for name in ("ca", "other_ca", "server", "client", "other_client"):
        paths[name + "_cert"] = os.path.join(folder, name + ".pem")
        paths[name + "_key"] = os.path.join(folder, name + ".key")
    return paths


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()
