"""The HTTP/JSON front door (issue 17): every route called with
python3-requests and curl against `dserve serve --http-listen`, results equal
to the gRPC path's for the same inputs (the same request path computes both:
scores are compared as float32, exactly), each error status, auth, TLS,
429 with Retry-After and the drain. Every response is validated against the
checked-in server/doors/http/openapi.json, and the last test checks that every
route of the document was validated at least once.
"""
import os
import threading
import time
import unittest

import numpy as np
import requests

import e2e_support as e2e
import http_support as hs
from e2e_support import pb, health_pb2, health_pb2_grpc

OPENAPI = hs.OpenApi()

TEXTS = [
    "I was charged twice for my order, please refund me.",
    "How do I reset my password?",
    "Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u6771\u4eac and an emoji \U0001F642!",
]
QUESTION = "When does the miller open the doors?"
CONTEXT = "A river runs past the old mill, and the miller still opens the doors every morning at six."
QUERY = "where can I buy fresh bread"
DOCUMENTS = [
    "The baker next door sells bread, rolls, and small cakes with honey on top.",
    "Engineers measure things carefully before they build anything.",
    "On market days the square fills with stalls selling apples, pears, cheese, and fresh fish.",
    "\u00dcber caf\u00e9s: fresh croissants every morning \u2615",
]
TOKEN = "http-e2e-token"


def f32(x):
    return np.float32(x)


class HttpRoutesTest(unittest.TestCase):
    """One server with the three test models; --http-listen equals
    --metrics-listen, so /metrics is served by the same HTTP server."""

    @classmethod
    def setUpClass(cls):
        cls.models = e2e.test_models()
        cls.server = hs.HttpServerProcess(cls.models, ["--workers", "1", "--max-message-bytes", str(1 << 20)],
                                          name="http").start()
        cls.channel = cls.server.channel()
        cls.stub = cls.server.stub(cls.channel)
        cls.http = hs.session()
        cls.versions = {m.name: m.version for m in cls.stub.ListModels(pb.ListModelsRequest(), timeout=10).models}

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def call(self, method, path, body=None, status=200, headers=None, raw=None, params=None):
        r = self.http.request(method, self.server.url(path), json=body, data=raw, headers=headers, params=params,
                              timeout=60)
        self.assertEqual(r.status_code, status, r.text[:1000])
        OPENAPI.validate(path, method, r)
        if path not in ("/health", "/openapi.json", "/", "/metrics") and status != 413:
            self.assertTrue(r.headers.get("x-request-id"), "every API response carries x-request-id")
        return r

    # ----------------------------------------------------------- classify --

    def grpc_classify(self, texts, **kw):
        return self.stub.Classify(pb.ClassifyRequest(model="classify", texts=texts, **kw), timeout=30)

    def test_tei_predict_equals_grpc(self):
        want = self.grpc_classify(TEXTS[:1])
        r = self.call("POST", "/predict", {"inputs": TEXTS[0]})
        got = r.json()
        self.assertEqual([(l["label"], f32(l["score"])) for l in got],
                         [(l.label, f32(l.score)) for l in want.results[0].labels])
        self.assertEqual(r.headers["x-dserve-model-version"], self.versions["classify"])
        # A list of inputs: a list of lists; raw scores like gRPC's raw_scores.
        want = self.grpc_classify(TEXTS, raw_scores=True)
        got = self.call("POST", "/predict", {"inputs": TEXTS, "raw_scores": True}).json()
        self.assertEqual(len(got), len(TEXTS))
        for g, w in zip(got, want.results):
            self.assertEqual([(l["label"], f32(l["score"])) for l in g], [(l.label, f32(l.score)) for l in w.labels])
        # ?model= names the model (the only classify model is the default).
        self.call("POST", "/predict", {"inputs": "x"}, params={"model": "classify"})

    def test_v1_classify_is_the_grpc_message_in_proto3_json(self):
        want = self.grpc_classify(TEXTS, top_k=2)
        got = self.call("POST", "/v1/classify", {"model": "classify", "texts": TEXTS, "top_k": 2}).json()
        self.assertEqual(got["model"], "classify")
        self.assertEqual(got["model_version"], self.versions["classify"])
        self.assertEqual(len(got["results"]), len(TEXTS))
        for g, w in zip(got["results"], want.results):
            self.assertEqual([(l["label"], f32(l["score"])) for l in g["labels"]],
                             [(l.label, f32(l.score)) for l in w.labels])
            self.assertEqual((g["tokens"], g["truncated"]), (w.tokens, w.truncated))
        self.assertEqual(int(got["usage"]["tokens"]), want.usage.tokens)
        # lowerCamelCase names too, and the gRPC method path.
        got2 = self.call("POST", "/dserve.v1.Inference/Classify",
                         {"model": "classify", "texts": TEXTS[:1], "topK": 1, "rawScores": True}).json()
        want2 = self.grpc_classify(TEXTS[:1], top_k=1, raw_scores=True)
        self.assertEqual(f32(got2["results"][0]["labels"][0]["score"]), f32(want2.results[0].labels[0].score))

    # ------------------------------------------------------------- rerank --

    def grpc_rerank(self, **kw):
        return self.stub.Rerank(pb.RerankRequest(model="rerank", query=QUERY, documents=DOCUMENTS, **kw), timeout=30)

    def test_tei_rerank_equals_grpc(self):
        want = self.grpc_rerank(return_documents=True)
        got = self.call("POST", "/rerank", {"query": QUERY, "texts": DOCUMENTS, "return_text": True}).json()
        self.assertEqual([(g["index"], f32(g["score"]), g["text"]) for g in got],
                         [(w.index, f32(w.score), w.document) for w in want.results])
        got = self.call("POST", "/rerank", {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True}).json()
        want = self.grpc_rerank(raw_scores=True)
        self.assertEqual([(g["index"], f32(g["score"])) for g in got], [(w.index, f32(w.score)) for w in want.results])
        self.assertNotIn("text", got[0])

    def test_cohere_rerank_equals_grpc(self):
        want = self.grpc_rerank(top_n=2, return_documents=True)
        docs = [DOCUMENTS[0], {"text": DOCUMENTS[1]}] + DOCUMENTS[2:]
        r = self.call("POST", "/v1/rerank", {"model": "rerank", "query": QUERY, "documents": docs, "top_n": 2,
                                             "return_documents": True})
        got = r.json()
        self.assertEqual(got["id"], r.headers["x-request-id"])
        self.assertEqual([(g["index"], f32(g["relevance_score"]), g["document"]["text"]) for g in got["results"]],
                         [(w.index, f32(w.score), w.document) for w in want.results])
        self.assertEqual(got["usage"]["total_tokens"], want.usage.tokens)
        # The proto3 route: the gRPC message field for field.
        got = self.call("POST", "/dserve.v1.Inference/Rerank",
                        {"model": "rerank", "query": QUERY, "documents": DOCUMENTS, "top_n": 2,
                         "return_documents": True}).json()
        self.assertEqual([(g["index"], f32(g["score"]), g["document"], g["chunk_end_char"]) for g in got["results"]],
                         [(w.index, f32(w.score), w.document, w.chunk_end_char) for w in want.results])

    # ------------------------------------------------------------- answer --

    def test_hf_answer_equals_grpc(self):
        want = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=[CONTEXT], top_k=3),
                                timeout=30)
        self.assertGreater(len(want.answers), 0)
        got = self.call("POST", "/v1/answer", {"model": "answer",
                                               "inputs": {"question": QUESTION, "context": CONTEXT}}).json()
        best = want.answers[0]
        self.assertEqual((got["answer"], got["start"], got["end"], f32(got["score"])),
                         (best.text, best.start_char, best.end_char, f32(best.score)))
        self.assertEqual(CONTEXT[got["start"]:got["end"]], got["answer"])
        self.assertEqual(f32(got["no_answer_score"]), f32(want.no_answer_score))
        spans = self.call("POST", "/v1/answer", {"model": "answer",
                                                 "inputs": {"question": QUESTION, "context": CONTEXT},
                                                 "parameters": {"top_k": 3}}).json()
        self.assertEqual([(s["answer"], f32(s["score"])) for s in spans], [(a.text, f32(a.score)) for a in want.answers])
        # handle_impossible_answer: with a threshold that forces "no answer",
        # the empty answer comes first, as Hugging Face returns it.
        forced = self.call("POST", "/v1/answer", {
            "model": "answer", "inputs": {"question": QUESTION, "context": CONTEXT},
            "parameters": {"handle_impossible_answer": True, "null_score_diff_threshold": -1e9}}).json()
        self.assertEqual((forced["answer"], forced["start"], forced["end"]), ("", 0, 0))
        # The proto3 route.
        got = self.call("POST", "/dserve.v1.Inference/Answer",
                        {"model": "answer", "question": QUESTION, "contexts": [CONTEXT], "top_k": 3}).json()
        self.assertEqual([(a["text"], a["start_char"], f32(a["score"])) for a in got["answers"]],
                         [(a.text, a.start_char, f32(a.score)) for a in want.answers])
        self.assertEqual(got["no_answer"], want.no_answer)

    # --------------------------------------------------- info, tokenize --

    def test_models_info_health(self):
        want = self.stub.ListModels(pb.ListModelsRequest(), timeout=10)
        for path, method in (("/v1/models", "GET"), ("/dserve.v1.Inference/ListModels", "POST")):
            got = self.call(method, path, {} if method == "POST" else None).json()
            self.assertEqual([(m["name"], m["task"], m["labels"], m["version"], m["max_length"]) for m in got["models"]],
                             [(m.name, m.task, list(m.labels), m.version, m.max_length) for m in want.models])
        info = self.call("GET", "/info", params={"model": "classify"}).json()
        self.assertEqual((info["model_id"], info["model_sha"], info["task"]), ("classify", self.versions["classify"],
                                                                               "classify"))
        self.assertEqual(list(info["model_type"]["classifier"]["id2label"].values()), e2e.CLASSIFY_LABELS)
        self.assertEqual(info["max_input_length"], e2e.MAX_LENGTH["classify"])
        # Three models and no --http-default-model: /info must be told which.
        r = self.call("GET", "/info", status=422)
        self.assertIn("?model=NAME", r.json()["error"])
        self.assertEqual(self.call("GET", "/health").json(), {"status": "serving"})
        head = requests.head(self.server.url("/health"), timeout=10)
        self.assertEqual((head.status_code, head.text), (200, ""))

    def tokenize_count(self, **labels):
        return e2e.metric_value(self.server.metrics(), "dserve_requests_total", task="tokenize", protocol="http",
                                **labels)

    def test_tokenize_equals_sentencepiece(self):
        text = TEXTS[2]
        ok0 = self.tokenize_count(model="classify", code="OK")
        got = self.call("POST", "/tokenize", {"inputs": text}, params={"model": "classify"}).json()
        self.assertEqual(len(got), 1)
        ids = [t["id"] for t in got[0]]
        self.assertEqual(ids, e2e.single_ids(text))
        self.assertTrue(got[0][0]["special"])
        raw = text.encode("utf-8")
        for t in got[0]:
            if not t["special"]:
                self.assertEqual(raw[t["start"]:t["stop"]].decode("utf-8"), t["text"])
        plain = self.call("POST", "/tokenize", {"inputs": [text, "a"], "add_special_tokens": False},
                          params={"model": "classify"}).json()
        self.assertEqual([t["id"] for t in plain[0]], e2e.single_ids(text)[1:-1])
        self.assertEqual(len(plain), 2)
        # Decided and counted by the request path (RequestPath::Tokenize), like the model calls.
        self.assertEqual(self.tokenize_count(model="classify", code="OK") - ok0, 2)
        bad0 = self.tokenize_count(model="classify", code="INVALID_ARGUMENT")
        r = self.call("POST", "/tokenize", {"inputs": ["a"] * 300}, status=422, params={"model": "classify"})
        self.assertIn("--max-texts-per-request (256)", r.json()["error"])
        self.assertEqual(self.tokenize_count(model="classify", code="INVALID_ARGUMENT") - bad0, 1)
        nf0 = self.tokenize_count(model="", code="NOT_FOUND")
        self.call("POST", "/tokenize", {"inputs": "a"}, status=404, params={"model": "nope"})
        self.assertEqual(self.tokenize_count(model="", code="NOT_FOUND") - nf0, 1)

    # ------------------------------------------------------------- errors --

    def test_errors_have_the_documented_status_and_shape(self):
        cases = [
            ("POST", "/v1/classify", None, b"{not json", 400, "validation"),
            ("POST", "/predict", None, b"{\"inputs\": \"\xff\xfe\"}", 400, "validation"),  # not UTF-8
            ("POST", "/v1/classify", {"model": "classify", "textz": ["a"]}, None, 400, "validation"),
            ("POST", "/v1/classify", {"model": "classify", "texts": [""]}, None, 422, "validation"),
            ("POST", "/v1/classify", {"model": "classify", "texts": ["a"] * 300}, None, 422, "validation"),
            ("POST", "/v1/classify", {"model": "nope", "texts": ["a"]}, None, 404, "not_found"),
            ("POST", "/v1/classify", {"model": "answer", "texts": ["a"]}, None, 400, "validation"),
            ("POST", "/predict", {"inputs": "a"}, None, 404, "not_found"),  # ?model=nope below
            ("POST", "/v1/classify", None, b"{\"model\": \"classify\", \"texts\": [\"" + b"a" * (1 << 20) + b"\"]}",
             413, "payload_too_large"),
        ]
        for method, path, body, raw, status, error_type in cases:
            with self.subTest(path=path, status=status, body=str(body)[:80]):
                params = {"model": "nope"} if status == 404 and path == "/predict" else None
                r = self.call(method, path, body, status=status, raw=raw, params=params)
                self.assertEqual(r.json()["error_type"], error_type)
                self.assertTrue(r.json()["error"])
        # The message names the limit, as gRPC's does.
        r = self.call("POST", "/v1/classify", {"model": "classify", "texts": ["a"] * 300}, status=422)
        self.assertIn("256", r.json()["error"])
        # A deadline that has already passed (request-timeout header or timeout_ms).
        for kw in ({"headers": {"request-timeout": "0.001"}}, {"body_extra": {"timeout_ms": 0.001}}):
            body = dict({"model": "classify", "texts": ["a"]}, **kw.get("body_extra", {}))
            r = self.call("POST", "/v1/classify", body, status=504, headers=kw.get("headers"))
            self.assertEqual(r.json()["error_type"], "timeout")
        r = self.call("POST", "/v1/classify", {"model": "classify", "texts": ["a"]}, status=400,
                      headers={"request-timeout": "soon"})
        self.assertIn("request-timeout", r.json()["error"])
        # Unknown route and wrong method, counted like every refused call.
        unrouted = lambda code: e2e.metric_value(self.server.metrics(), "dserve_requests_total", model="",
                                                 task="unknown_route", code=code, protocol="http")
        nf0, na0 = unrouted("NOT_FOUND"), unrouted("UNIMPLEMENTED")
        r = requests.get(self.server.url("/nope"), timeout=10)
        self.assertEqual((r.status_code, r.json()["error_type"]), (404, "not_found"))
        self.assertTrue(r.headers.get("x-request-id"))
        r = requests.post(self.server.url("/v2/nope"), json={}, timeout=10)
        self.assertEqual(r.status_code, 404)
        r = requests.get(self.server.url("/predict"), timeout=10)
        self.assertEqual(r.status_code, 405)
        self.assertEqual((unrouted("NOT_FOUND") - nf0, unrouted("UNIMPLEMENTED") - na0), (2, 1))
        # x-request-id is echoed when the client sends one.
        r = self.call("POST", "/predict", {"inputs": "a"}, headers={"x-request-id": "my-id-17"})
        self.assertEqual(r.headers["x-request-id"], "my-id-17")

    # ------------------------------------------------ curl, TEI and Cohere --

    def test_tei_and_cohere_client_requests_unchanged(self):
        # As TEI's README shows them.
        status, body = hs.curl([self.server.url("/predict"), "-X", "POST", "-d", '{"inputs":"I like you."}',
                                "-H", "Content-Type: application/json"])
        self.assertEqual(status, 200, body)
        want = self.grpc_classify(["I like you."])
        self.assertEqual([l["label"] for l in __import__("json").loads(body)], [l.label for l in want.results[0].labels])
        status, body = hs.curl([self.server.url("/rerank"), "-X", "POST", "-d",
                                '{"query":"What is Deep Learning?", "texts": ["Deep Learning is not...", '
                                '"Deep learning is..."]}', "-H", "Content-Type: application/json"])
        self.assertEqual(status, 200, body)
        self.assertEqual(sorted(r["index"] for r in __import__("json").loads(body)), [0, 1])
        # As Cohere's API reference shows it (the model name is ours).
        status, body = hs.curl([self.server.url("/v1/rerank"), "--request", "POST",
                                "--header", "accept: application/json", "--header", "content-type: application/json",
                                "--header", "Authorization: bearer unused-without-auth",
                                "--data", '{"model": "rerank", "query": "What is the capital of the United States?", '
                                '"top_n": 3, "documents": ["Carson City is the capital city of the American state '
                                'of Nevada.", "Washington, D.C. is the capital of the United States.", '
                                '"Capital punishment has existed in the United States since before it was a country."]}'])
        self.assertEqual(status, 200, body)
        results = __import__("json").loads(body)["results"]
        self.assertEqual(len(results), 3)
        self.assertGreaterEqual(results[0]["relevance_score"], results[1]["relevance_score"])
        # Hugging Face's question-answering request.
        status, body = hs.curl([self.server.url("/v1/answer"), "-X", "POST", "-H", "Content-Type: application/json",
                                "-d", '{"model": "answer", "inputs": {"question": "What is my name?", '
                                '"context": "My name is Clara and I live in Berkeley."}}'])
        self.assertEqual(status, 200, body)
        self.assertEqual(set(__import__("json").loads(body)), {"answer", "score", "start", "end", "no_answer_score"})

    def test_every_other_route_through_curl(self):
        """The routes the test above does not send through curl, each once through the curl CLI as a user
        would type it, with the answer checked against gRPC's."""
        json = __import__("json")

        def post(path, doc):
            return hs.curl([self.server.url(path), "-X", "POST", "-H", "Content-Type: application/json",
                            "-d", json.dumps(doc)])

        def get(path):
            return hs.curl([self.server.url(path)])

        want = self.grpc_classify(["where is my parcel"])
        for path in ("/v1/classify", "/dserve.v1.Inference/Classify"):
            status, body = post(path, {"model": "classify", "texts": ["where is my parcel"]})
            self.assertEqual(status, 200, body)
            self.assertEqual([l["label"] for l in json.loads(body)["results"][0]["labels"]],
                             [l.label for l in want.results[0].labels], path)
        status, body = post("/dserve.v1.Inference/Rerank", {"model": "rerank", "query": "refund",
                                                              "documents": ["a refund", "a parcel", "a password"]})
        self.assertEqual(status, 200, body)
        want_rr = self.stub.Rerank(pb.RerankRequest(model="rerank", query="refund",
                                                    documents=["a refund", "a parcel", "a password"]), timeout=30)
        self.assertEqual([r["index"] for r in json.loads(body)["results"]], [r.index for r in want_rr.results])
        status, body = post("/dserve.v1.Inference/Answer", {"model": "answer", "question": "What is my name?",
                                                              "contexts": ["My name is Clara and I live in Berkeley."]})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["model"], "answer")
        names = [m.name for m in self.stub.ListModels(pb.ListModelsRequest(), timeout=10).models]
        for path, send in (("/v1/models", get), ("/dserve.v1.Inference/ListModels", lambda p: post(p, {}))):
            status, body = send(path)
            self.assertEqual(status, 200, body)
            self.assertEqual([m["name"] for m in json.loads(body)["models"]], names, path)
        status, body = post("/tokenize?model=classify", {"inputs": "hello world"})
        self.assertEqual(status, 200, body)
        self.assertEqual([t["id"] for t in json.loads(body)[0]], e2e.single_ids("hello world"))
        status, body = get("/info?model=classify")
        self.assertEqual((status, json.loads(body)["model_id"]), (200, "classify"), body)
        status, body = get("/health")
        self.assertEqual(status, 200, body)
        status, body = get("/openapi.json")
        self.assertEqual((status, json.loads(body)), (200, OPENAPI.doc))
        status, body = get("/")
        self.assertEqual(status, 200)
        self.assertIn("<title>dserve: try it</title>", body)
        status, body = get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn("dserve_requests_total", body)

    # ------------------------------------------------- assets and metrics --

    def test_openapi_page_and_metrics_on_the_same_port(self):
        got = self.call("GET", "/openapi.json").json()
        self.assertEqual(got, OPENAPI.doc, "the served document is the checked-in one")
        page = self.call("GET", "/")
        self.assertIn("<title>dserve: try it</title>", page.text)
        self.assertNotIn("http://", page.text.replace("http://127", ""), "no external assets")
        self.call("POST", "/predict", {"inputs": "count me"})
        self.assertEqual(self.server.metrics_port, self.server.http_port)
        scrape = self.call("GET", "/metrics")
        samples = e2e.parse_prometheus(scrape.text)
        self.assertTrue(any(n == "dserve_requests_total" and l.get("protocol") == "http" for n, l, _ in samples),
                        "dserve_requests_total{protocol=\"http\"} after an HTTP call")
        head = requests.head(self.server.url("/metrics"), timeout=10)
        self.assertEqual((head.status_code, head.text), (200, ""))
        # Concurrent scrapes on keep-alive connections.
        ok = []

        def scrape_many():
            s = requests.Session()
            for _ in range(10):
                ok.append(s.get(self.server.url("/metrics"), timeout=10).status_code == 200)
        threads = [threading.Thread(target=scrape_many) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(ok, [True] * 80)


class HttpAuthTlsTest(unittest.TestCase):
    """Bearer token and TLS apply to the HTTP door; health stays open."""

    @classmethod
    def setUpClass(cls):
        folder = e2e.scratch_dir("http-auth")
        cls.certs = e2e.make_certs(folder)
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.server = hs.HttpServerProcess(
            {"classify": e2e.test_models()["classify"]},
            ["--auth-token-file", token_file, "--tls-cert", cls.certs["server_cert"], "--tls-key",
             cls.certs["server_key"]], name="http-auth").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def get(self, method, path, status, headers=None, body=None):
        r = requests.request(method, self.server.url(path, "https"), json=body, headers=headers,
                             verify=self.certs["ca_cert"], timeout=30)
        self.assertEqual(r.status_code, status, r.text)
        OPENAPI.validate(path, method, r)
        return r

    def test_token_required_except_health(self):
        body = {"model": "classify", "texts": ["refund please"]}
        r = self.get("POST", "/v1/classify", 401, body=body)
        self.assertEqual(r.json()["error_type"], "unauthorized")
        self.assertEqual(r.headers["www-authenticate"], "Bearer")
        self.get("POST", "/v1/classify", 401, headers={"authorization": "Bearer wrong"}, body=body)
        self.get("GET", "/v1/models", 401)
        self.get("POST", "/predict", 401, body={"inputs": "a"})
        got = self.get("POST", "/v1/classify", 200, headers={"authorization": "Bearer " + TOKEN}, body=body).json()
        self.assertEqual(len(got["results"][0]["labels"]), len(e2e.CLASSIFY_LABELS))
        self.get("GET", "/health", 200)
        self.get("GET", "/openapi.json", 200)

    def test_plaintext_refused_on_the_tls_port(self):
        with self.assertRaises(requests.exceptions.ConnectionError):
            requests.get(self.server.url("/health"), timeout=10)
        with self.assertRaises(requests.exceptions.SSLError):
            requests.get(self.server.url("/health", "https"), timeout=10)  # not our CA: refused


class HttpOverloadDrainTest(unittest.TestCase):
    """429 with Retry-After when the queue is full, and SIGTERM: new HTTP
    calls get 503 while the accepted ones finish. The worker is held
    (e2e.WorkerHold), so calls are certainly queued when it matters."""

    def setUp(self):
        self.hold = e2e.WorkerHold("http-drain")
        self.server = hs.HttpServerProcess(
            {"classify": e2e.test_models()["classify"]},
            ["--workers", "1", "--max-batch-size", "4", "--max-queue-items", "4", "--drain-timeout-s", "30"],
            name="http-drain", env=self.hold.env()).start()

    def tearDown(self):
        self.hold.release()
        self.server.stop()

    def post(self, texts, results, index):
        r = requests.post(self.server.url("/v1/classify"), json={"model": "classify", "texts": texts}, timeout=120)
        results[index] = r

    def queued(self):
        return e2e.metric_value(self.server.metrics(), "dserve_queue_items", model="classify")

    def test_queue_full_429_then_drain_503(self):
        self.assertEqual(requests.post(self.server.url("/predict"), json={"inputs": "warm"}, timeout=60).status_code,
                         200)
        batches = lambda: e2e.metric_value(self.server.metrics(), "dserve_batch_size_count", model="classify")
        before = batches()
        self.hold.hold()
        results = [None] * 2
        first = threading.Thread(target=self.post, args=(["a"] * 4, results, 0))
        first.start()
        # The worker takes the first request as one batch and holds it.
        e2e.wait_until("the held worker to take the first request",
                       lambda: batches() == before + 1 and self.queued() == 0, server=self.server)
        second = threading.Thread(target=self.post, args=(["b"] * 4, results, 1))
        second.start()
        e2e.wait_until("the second request queued", lambda: self.queued() == 4, server=self.server)
        r = requests.post(self.server.url("/v1/classify"), json={"model": "classify", "texts": ["c"]}, timeout=30)
        self.assertEqual(r.status_code, 429, r.text)
        self.assertEqual(r.headers["retry-after"], "1")
        self.assertEqual(r.json()["error_type"], "overloaded")
        OPENAPI.validate("/v1/classify", "POST", r)

        self.server.terminate()
        e2e.wait_until("/health to say 503 after SIGTERM", lambda: requests.get(
            self.server.url("/health"), timeout=5).status_code == 503, server=self.server)
        r = requests.get(self.server.url("/health"), timeout=5)
        OPENAPI.validate("/health", "GET", r)
        self.assertEqual(r.json(), {"status": "draining"})
        r = requests.post(self.server.url("/predict"), json={"inputs": "late"}, timeout=30)
        self.assertEqual((r.status_code, r.json()["error_type"]), (503, "unhealthy"))
        self.assertEqual(r.headers["retry-after"], "1")
        OPENAPI.validate("/predict", "POST", r)
        self.assertTrue(first.is_alive() and second.is_alive(), "the worker is held: accepted calls still wait")

        self.hold.release()
        first.join(60)
        second.join(60)
        self.assertEqual([r.status_code for r in results], [200, 200])
        for r, n in zip(results, (4, 4)):
            self.assertEqual(len(r.json()["results"]), n)
            OPENAPI.validate("/v1/classify", "POST", r)
        self.assertEqual(self.server.wait(40), 0, self.server.log_tail())


class ZzOpenApiCoverageTest(unittest.TestCase):
    """Runs last (unittest sorts classes by name): every route of
    openapi.json had a real response validated above."""

    def test_every_route_validated(self):
        validated = {(p, m) for p, m, s in OPENAPI.checked if s == 200}
        # /metrics is text; / is HTML: both were fetched and content-checked.
        missing = sorted(OPENAPI.routes() - validated)
        self.assertEqual(missing, [], "routes of openapi.json with no validated 200 response")


if __name__ == "__main__":
    unittest.main()
