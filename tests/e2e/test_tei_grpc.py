"""TEI's gRPC API (tei.v1) served beside dserve.v1 (issue 28).

The client is generated from a copy of TEI's published tei.proto kept under
tests/ (tests/e2e/proto/tei/tei.proto; tests/e2e/CMakeLists.txt), not from
the server's proto/tei/tei.proto. Results are checked against the dserve.v1
answer for the same input (the same computation: floats within 1e-6, the same
labels and order), and where the mapping could go wrong (pairs, truncation
direction, tokenizer offsets) against an independent computation too:
libsentencepiece ids run through `dserve forward` (tolerance 1e-4, as
test_results.py). Streams, errors, auth, drain and the metrics
(protocol="tei-grpc") are checked on the real binary.
"""
import os
import threading
import unittest

import grpc
import numpy as np

import e2e_support as e2e
from e2e_support import pb
from tei import tei_pb2 as tpb  # noqa: E402  (stubs dir is on sys.path via e2e_support)
from tei import tei_pb2_grpc as tgrpc  # noqa: E402

SAME = 1e-6  # the same computation through two doors
TOL = 1e-4   # against `dserve forward` (other batch shapes)
STREAM_TOL = 1e-5  # stream messages batched together vs one v1 call each
MODEL_KEY = "x-dserve-model"

TEXTS = [
    "I was charged twice for my order, please refund me.",
    "How do I reset my password?",
    "Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u6771\u4eac and an emoji \U0001F642!",
]
PAIR = ("Where is my package?", "It has not arrived yet and I want a refund.")
QUERY = "where can I buy fresh bread"
DOCUMENTS = [
    "The baker next door sells bread, rolls, and small cakes with honey on top.",
    "Engineers measure things carefully before they build anything.",
    "On market days the square fills with stalls selling apples, pears, cheese, and fresh fish.",
    "\u00dcber caf\u00e9s: fresh croissants every morning \u2615",
]
# Longer than the classify model's 256 tokens, with different beginnings and
# ends, so that right and left truncation keep different tokens.
LONG_TEXT = ("please refund my money for the broken order " * 30) + ("how do I reset my password today " * 30)
TOKEN = "tei-e2e-token"


def code_points(text):
    return len(text)


class TeiGrpcTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = e2e.test_models()
        cls.server = e2e.ServerProcess(cls.models, ["--workers", "1", "--max-documents-per-request", "8"],
                                       name="tei").start()
        cls.channel = cls.server.channel()
        e2e.wait_ready(cls.channel)
        cls.v1 = cls.server.stub(cls.channel)
        cls.info = tgrpc.InfoStub(cls.channel)
        cls.predict = tgrpc.PredictStub(cls.channel)
        cls.rerank = tgrpc.RerankStub(cls.channel)
        cls.tokenize = tgrpc.TokenizeStub(cls.channel)
        cls.embed = tgrpc.EmbedStub(cls.channel)
        cls.versions = {m.name: m for m in cls.v1.ListModels(pb.ListModelsRequest(), timeout=10).models}

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def assert_code(self, code, fn, *args, contains=None, **kw):
        with self.assertRaises(grpc.RpcError) as ctx:
            r = fn(*args, timeout=30, **kw)
            if hasattr(r, "__iter__") and not hasattr(r, "ListFields"):
                list(r)
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        if contains:
            self.assertIn(contains, ctx.exception.details())
        return ctx.exception

    def v1_classify(self, texts, **kw):
        return self.v1.Classify(pb.ClassifyRequest(model="classify", texts=texts, **kw), timeout=30)

    def assert_predictions(self, got, want_labels, tol=SAME):
        """`got` PredictResponse equals v1 LabelScores `want_labels` (order and scores)."""
        self.assertEqual([p.label for p in got.predictions], [l.label for l in want_labels])
        for p, l in zip(got.predictions, want_labels):
            self.assertAlmostEqual(p.score, l.score, delta=tol)

    def oracle_scores(self, ids, model="classify"):
        logits = e2e.forward(self.models[model], [{"input_ids": ids}])[0]["logits"]
        return dict(zip(e2e.CLASSIFY_LABELS, e2e.softmax(logits)))

    # --------------------------------------------------------------- Info --

    def test_info_describes_the_chosen_model(self):
        for name, kind in (("classify", tpb.MODEL_TYPE_CLASSIFIER), ("rerank", tpb.MODEL_TYPE_RERANKER)):
            info = self.info.Info(tpb.InfoRequest(), metadata=[(MODEL_KEY, name)], timeout=10)
            m = self.versions[name]
            self.assertEqual((info.model_id, info.model_sha, info.model_type), (name, m.version, kind))
            self.assertEqual(info.max_input_length, m.max_length)
            self.assertEqual(info.model_dtype, m.dtype)
            self.assertEqual(info.max_client_batch_size, 8 if name == "rerank" else 256)
            self.assertGreater(info.max_batch_tokens, 0)
            self.assertTrue(info.HasField("max_batch_requests"))
        # An answer model has no TEI model type; three models of three tasks: name one.
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, self.info.Info, tpb.InfoRequest(),
                         metadata=[(MODEL_KEY, "answer")], contains="answer")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.info.Info, tpb.InfoRequest(), contains=MODEL_KEY)
        self.assert_code(grpc.StatusCode.NOT_FOUND, self.info.Info, tpb.InfoRequest(), metadata=[(MODEL_KEY, "nope")])

    # ------------------------------------------------------------ Predict --

    def test_predict_equals_v1_classify(self):
        for text in TEXTS:
            for raw in (False, True):
                got = self.predict.Predict(tpb.PredictRequest(inputs=text, raw_scores=raw), timeout=30)
                want = self.v1_classify([text], raw_scores=raw)
                self.assert_predictions(got, want.results[0].labels)
                self.assertEqual(got.metadata.compute_tokens, want.usage.tokens)
                self.assertEqual(got.metadata.compute_chars, code_points(text))
                if not raw:
                    self.assertAlmostEqual(sum(p.score for p in got.predictions), 1.0, delta=1e-5)
                else:
                    self.assertGreater(abs(sum(p.score for p in got.predictions) - 1.0), 1e-3)
        # The model named in the metadata; the version in the initial metadata.
        got, call = self.predict.Predict.with_call(tpb.PredictRequest(inputs=TEXTS[0]),
                                                   metadata=[(MODEL_KEY, "classify")], timeout=30)
        self.assertEqual(dict(call.initial_metadata())["x-dserve-model-version"], self.versions["classify"].version)
        self.assertTrue(dict(call.trailing_metadata()).get("x-request-id"))

    def test_predict_pair_is_cls_a_sep_b_sep(self):
        a, b = PAIR
        got = self.predict.PredictPair(tpb.PredictPairRequest(inputs=[a, b]), timeout=30)
        want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=[a], text_pairs=[b]), timeout=30)
        self.assert_predictions(got, want.results[0].labels)
        # Independently: libsentencepiece ids [CLS] a [SEP] b [SEP] through `dserve forward`.
        oracle = self.oracle_scores([e2e.CLS] + e2e.spm().encode(a) + [e2e.SEP] + e2e.spm().encode(b) + [e2e.SEP])
        for p in got.predictions:
            self.assertAlmostEqual(p.score, oracle[p.label], delta=TOL)
        self.assertEqual(got.metadata.compute_chars, len(a) + len(b))
        # One input: Predict's answer; three: refused naming the field.
        one = self.predict.PredictPair(tpb.PredictPairRequest(inputs=[a]), timeout=30)
        self.assert_predictions(one, self.v1_classify([a]).results[0].labels)
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.predict.PredictPair,
                         tpb.PredictPairRequest(inputs=[a, b, a]), contains="inputs")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.predict.PredictPair,
                         tpb.PredictPairRequest(inputs=[]), contains="inputs")

    def test_truncate_and_truncation_direction(self):
        ids = e2e.spm().encode(LONG_TEXT)
        self.assertGreater(len(ids), 254)
        # truncate false: a text longer than the model's 256 tokens is refused.
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.predict.Predict,
                         tpb.PredictRequest(inputs=LONG_TEXT, truncate=False), contains="256")
        right = self.predict.Predict(tpb.PredictRequest(inputs=LONG_TEXT, truncate=True), timeout=30)
        left = self.predict.Predict(tpb.PredictRequest(
            inputs=LONG_TEXT, truncate=True, truncation_direction=tpb.TRUNCATION_DIRECTION_LEFT), timeout=30)
        want_right = self.oracle_scores([e2e.CLS] + ids[:254] + [e2e.SEP])
        want_left = self.oracle_scores([e2e.CLS] + ids[-254:] + [e2e.SEP])
        for got, want in ((right, want_right), (left, want_left)):
            self.assertEqual(got.metadata.compute_tokens, 256)
            for p in got.predictions:
                self.assertAlmostEqual(p.score, want[p.label], delta=TOL)
        self.assertGreater(max(abs(want_right[l] - want_left[l]) for l in want_right), 1e-3,
                           "the two ends of LONG_TEXT must classify differently for this test to mean anything")
        # The same through dserve.v1's truncation_direction.
        v1_left = self.v1_classify([LONG_TEXT], truncation=pb.TRUNCATION_LONGEST_FIRST,
                                   truncation_direction=pb.TRUNCATION_DIRECTION_LEFT)
        self.assert_predictions(left, v1_left.results[0].labels)
        self.assertTrue(v1_left.results[0].truncated)

    # ------------------------------------------------------------- Rerank --

    def v1_rerank(self, query, documents, **kw):
        return self.v1.Rerank(pb.RerankRequest(model="rerank", query=query, documents=documents, **kw), timeout=30)

    def test_rerank_equals_v1_rerank(self):
        for raw in (False, True):
            got = self.rerank.Rerank(tpb.RerankRequest(query=QUERY, texts=DOCUMENTS, raw_scores=raw, return_text=True),
                                     timeout=30)
            want = self.v1_rerank(QUERY, DOCUMENTS, raw_scores=raw, truncation=pb.TRUNCATION_NONE)
            self.assertEqual([r.index for r in got.ranks], [r.index for r in want.results])
            for g, w in zip(got.ranks, want.results):
                self.assertAlmostEqual(g.score, w.score, delta=SAME)
                self.assertEqual(g.text, DOCUMENTS[g.index])
            scores = [r.score for r in got.ranks]
            self.assertEqual(scores, sorted(scores, reverse=True))
            if not raw:
                self.assertTrue(all(0 < s < 1 for s in scores))
            self.assertEqual(got.metadata.compute_tokens, want.usage.tokens)
            self.assertEqual(got.metadata.compute_chars, sum(len(QUERY) + len(d) for d in DOCUMENTS))
        plain = self.rerank.Rerank(tpb.RerankRequest(query=QUERY, texts=DOCUMENTS), timeout=30)
        self.assertFalse(any(r.HasField("text") for r in plain.ranks))

    def test_rerank_stream_ranks_every_message(self):
        msgs = [tpb.RerankStreamRequest(query=QUERY, text=d, return_text=(i == 0)) for i, d in enumerate(DOCUMENTS)]
        got = self.rerank.RerankStream(iter(msgs), timeout=30)
        want = self.rerank.Rerank(tpb.RerankRequest(query=QUERY, texts=DOCUMENTS, return_text=True), timeout=30)
        self.assertEqual([(r.index, r.text) for r in got.ranks], [(r.index, r.text) for r in want.ranks])
        for g, w in zip(got.ranks, want.ranks):
            self.assertAlmostEqual(g.score, w.score, delta=SAME)
        # Two queries in one stream: each text scored against its own query.
        other = "how do engineers build bridges"
        msgs = [tpb.RerankStreamRequest(query=QUERY, text=DOCUMENTS[0], raw_scores=True),
                tpb.RerankStreamRequest(query=other, text=DOCUMENTS[1]),
                tpb.RerankStreamRequest(query=QUERY, text=DOCUMENTS[2])]
        got = self.rerank.RerankStream(iter(msgs), timeout=30)
        a = {r.index: r.score for r in self.v1_rerank(QUERY, [DOCUMENTS[0], DOCUMENTS[2]], raw_scores=True).results}
        b = self.v1_rerank(other, [DOCUMENTS[1]], raw_scores=True).results[0].score
        want = {0: a[0], 1: b, 2: a[1]}
        self.assertEqual(sorted(r.index for r in got.ranks), [0, 1, 2])
        # The two queries' calls run together (batched with each other): STREAM_TOL.
        for r in got.ranks:
            self.assertAlmostEqual(r.score, want[r.index], delta=STREAM_TOL)
        self.assertEqual([r.score for r in got.ranks], sorted((r.score for r in got.ranks), reverse=True))
        # An empty stream, and an empty text, are refused.
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.rerank.RerankStream, iter([]), contains="texts")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.rerank.RerankStream,
                         iter([tpb.RerankStreamRequest(query=QUERY, text="")]), contains="empty")

    # ------------------------------------------------------------ streams --

    def test_predict_streams_answer_in_order(self):
        texts = TEXTS * 3
        got = list(self.predict.PredictStream(iter(tpb.PredictRequest(inputs=t) for t in texts), timeout=60))
        self.assertEqual(len(got), len(texts))
        # A stream's messages are in flight together, so the server batches
        # them (padding moves fp32 results at ~1e-6): STREAM_TOL.
        for g, t in zip(got, texts):
            self.assert_predictions(g, self.v1_classify([t]).results[0].labels, tol=STREAM_TOL)
        pairs = [PAIR, (TEXTS[0], TEXTS[1])]
        got = list(self.predict.PredictPairStream(iter(tpb.PredictPairRequest(inputs=list(p)) for p in pairs),
                                                  timeout=60))
        self.assertEqual(len(got), 2)
        for g, (a, b) in zip(got, pairs):
            want = self.v1.Classify(pb.ClassifyRequest(model="classify", texts=[a], text_pairs=[b]), timeout=30)
            self.assert_predictions(g, want.results[0].labels, tol=STREAM_TOL)
        # The first error ends the stream with its status, after the answers before it.
        seen = []
        with self.assertRaises(grpc.RpcError) as ctx:
            for r in self.predict.PredictStream(iter([tpb.PredictRequest(inputs=TEXTS[0]), tpb.PredictRequest(inputs=""),
                                                      tpb.PredictRequest(inputs=TEXTS[1])]), timeout=30):
                seen.append(r)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("empty", ctx.exception.details())
        self.assertEqual(len(seen), 1)
        self.assert_predictions(seen[0], self.v1_classify([TEXTS[0]]).results[0].labels)

    def test_long_and_cancelled_streams(self):
        # More messages than the server keeps in flight per stream (64): all
        # answered, in order.
        texts = ["text number %d about a refund" % i for i in range(150)]
        md = [(MODEL_KEY, "classify")]
        got = list(self.tokenize.TokenizeStream(iter(tpb.EncodeRequest(inputs=t) for t in texts), metadata=md,
                                                timeout=60))
        self.assertEqual([[t.id for t in r.tokens] for r in got], [e2e.spm().encode(t) for t in texts])
        got = list(self.predict.PredictStream(iter(tpb.PredictRequest(inputs=t) for t in texts[:100]), timeout=120))
        self.assertEqual(len(got), 100)
        for i in (0, 63, 64, 99):
            self.assert_predictions(got[i], self.v1_classify([texts[i]]).results[0].labels, tol=STREAM_TOL)
        # A client that cancels mid-stream: the stream ends CANCELLED and the
        # server keeps serving.
        release = threading.Event()

        def requests():
            for t in texts[:3]:
                yield tpb.PredictRequest(inputs=t)
            release.wait(30)  # the stream stays open until cancelled
        call = self.predict.PredictStream(requests(), timeout=60)
        first = next(call)
        self.assertEqual(len(first.predictions), 5)
        call.cancel()
        release.set()
        with self.assertRaises(grpc.RpcError) as ctx:
            list(call)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.CANCELLED)
        self.assertEqual(len(self.predict.Predict(tpb.PredictRequest(inputs="still serving"), timeout=30).predictions), 5)

    # ----------------------------------------------------------- Tokenize --

    def test_tokenize_offsets_are_the_tokenizers(self):
        md = [(MODEL_KEY, "classify")]
        for text in TEXTS:
            got = self.tokenize.Tokenize(tpb.EncodeRequest(inputs=text, add_special_tokens=True), metadata=md,
                                         timeout=10)
            ids, chars = e2e.pieces(text)
            # libsentencepiece's offsets of a str are code points; TEI's are UTF-8 bytes.
            offsets = [(len(text[:b].encode("utf-8")), len(text[:e].encode("utf-8"))) for b, e in chars]
            self.assertEqual([t.id for t in got.tokens], [e2e.CLS] + ids + [e2e.SEP])
            first, last = got.tokens[0], got.tokens[-1]
            self.assertEqual((first.special, first.text, last.special, last.text), (True, "[CLS]", True, "[SEP]"))
            self.assertFalse(first.HasField("start") or first.HasField("stop"))
            raw = text.encode("utf-8")
            for t, (b, e) in zip(got.tokens[1:-1], offsets):
                self.assertFalse(t.special)
                self.assertEqual((t.start, t.stop), (b, e))
                self.assertEqual(t.text.encode("utf-8"), raw[b:e])
            bare = self.tokenize.Tokenize(tpb.EncodeRequest(inputs=text, add_special_tokens=False), metadata=md,
                                          timeout=10)
            self.assertEqual([t.id for t in bare.tokens], ids)
        streamed = list(self.tokenize.TokenizeStream(
            iter(tpb.EncodeRequest(inputs=t, add_special_tokens=True) for t in TEXTS), metadata=md, timeout=30))
        self.assertEqual([[t.id for t in r.tokens] for r in streamed], [e2e.single_ids(t) for t in TEXTS])
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.tokenize.Tokenize,
                         tpb.EncodeRequest(inputs="x", prompt_name="query"), metadata=md, contains="prompt_name")

    def test_decode_is_sentencepieces(self):
        md = [(MODEL_KEY, "rerank")]
        for text in ("how do i reset my password", "the baker sells bread, rolls and small cakes"):
            ids = e2e.spm().encode(text)
            self.assertNotIn(e2e.spm().unk_id(), ids, "texts of the toy vocabulary only")
            got = self.tokenize.Decode(tpb.DecodeRequest(ids=[e2e.CLS] + ids + [e2e.SEP], skip_special_tokens=True),
                                       metadata=md, timeout=10)
            self.assertEqual(got.text, e2e.spm().decode(ids))
            kept = self.tokenize.Decode(tpb.DecodeRequest(ids=[e2e.CLS] + ids + [e2e.SEP]), metadata=md, timeout=10)
            self.assertEqual(kept.text, "[CLS] " + e2e.spm().decode(ids) + " [SEP]")
        streamed = list(self.tokenize.DecodeStream(iter([tpb.DecodeRequest(ids=e2e.spm().encode("bread"))]),
                                                   metadata=md, timeout=10))
        self.assertEqual([r.text for r in streamed], ["bread"])
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.tokenize.Decode,
                         tpb.DecodeRequest(ids=[5, 10 ** 7]), metadata=md, contains="ids[1]")

    # ------------------------------------------------------------- errors --

    def test_errors(self):
        # Empty text, too many texts, unknown model, a model of another task.
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.predict.Predict, tpb.PredictRequest(inputs=""),
                         contains="empty")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.rerank.Rerank,
                         tpb.RerankRequest(query=QUERY, texts=["a"] * 9), contains="--max-documents-per-request")
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.rerank.Rerank, tpb.RerankRequest(query=QUERY, texts=[]))
        self.assert_code(grpc.StatusCode.NOT_FOUND, self.predict.Predict, tpb.PredictRequest(inputs="a"),
                         metadata=[(MODEL_KEY, "nope")], contains="nope")
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, self.predict.Predict, tpb.PredictRequest(inputs="a"),
                         metadata=[(MODEL_KEY, "rerank")], contains="rerank")
        self.assert_code(grpc.StatusCode.NOT_FOUND, self.tokenize.Tokenize, tpb.EncodeRequest(inputs="a"),
                         metadata=[(MODEL_KEY, "nope")])
        # Embedding: dserve serves none, and says so.
        for call, req in ((self.embed.Embed, tpb.EmbedRequest(inputs="x")),
                          (self.embed.EmbedAll, tpb.EmbedAllRequest(inputs="x")),
                          (self.embed.EmbedSparse, tpb.EmbedSparseRequest(inputs="x"))):
            self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, call, req, contains="not embedding models")
        self.assert_code(grpc.StatusCode.FAILED_PRECONDITION, self.embed.EmbedStream,
                         iter([tpb.EmbedRequest(inputs="x")]), contains="not embedding models")

    def test_metrics_count_the_tei_door(self):
        def count(**labels):
            return e2e.metric_value(self.server.metrics(), "dserve_requests_total", protocol="tei-grpc", **labels)
        ok, bad = count(model="classify", code="OK"), count(model="classify", code="INVALID_ARGUMENT")
        rerank_ok = count(model="rerank", task="rerank", code="OK")
        durations = e2e.metric_value(self.server.metrics(), "dserve_request_duration_seconds_count",
                                     protocol="tei-grpc", model="classify")
        for t in TEXTS:
            self.predict.Predict(tpb.PredictRequest(inputs=t), timeout=30)
        list(self.predict.PredictStream(iter([tpb.PredictRequest(inputs=t) for t in TEXTS]), timeout=30))
        self.assert_code(grpc.StatusCode.INVALID_ARGUMENT, self.predict.Predict, tpb.PredictRequest(inputs=""))
        self.rerank.Rerank(tpb.RerankRequest(query=QUERY, texts=DOCUMENTS), timeout=30)
        self.assertEqual(count(model="classify", code="OK"), ok + 2 * len(TEXTS))
        self.assertEqual(count(model="classify", code="INVALID_ARGUMENT"), bad + 1)
        self.assertEqual(count(model="rerank", task="rerank", code="OK"), rerank_ok + 1)
        self.assertEqual(e2e.metric_value(self.server.metrics(), "dserve_request_duration_seconds_count",
                                          protocol="tei-grpc", model="classify"), durations + 2 * len(TEXTS) + 1)
        # dserve.v1 calls stay under protocol="grpc".
        before = count(model="classify")
        self.v1_classify([TEXTS[0]])
        self.assertEqual(count(model="classify"), before)


class TeiGrpcAuthAndDrainTest(unittest.TestCase):
    """--auth-token-file holds for tei.v1 too; SIGTERM refuses new tei.v1
    calls (UNAVAILABLE) while an accepted one finishes."""

    @classmethod
    def setUpClass(cls):
        folder = e2e.scratch_dir("tei-auth")
        token_file = os.path.join(folder, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.hold = e2e.WorkerHold("tei")
        models = {"classify": e2e.test_models()["classify"]}
        cls.server = e2e.ServerProcess(models, ["--auth-token-file", token_file, "--workers", "1"], name="tei-auth",
                                       env=cls.hold.env()).start()
        cls.channel = cls.server.channel()
        e2e.wait_ready(cls.channel)
        cls.predict = tgrpc.PredictStub(cls.channel)
        cls.md = [("authorization", "Bearer " + TOKEN)]

    @classmethod
    def tearDownClass(cls):
        cls.hold.release()
        cls.channel.close()
        cls.server.stop()

    def test_auth_then_drain(self):
        info = tgrpc.InfoStub(self.channel)
        for call, req in ((self.predict.Predict, tpb.PredictRequest(inputs="a")),
                          (info.Info, tpb.InfoRequest()),
                          (tgrpc.TokenizeStub(self.channel).Tokenize, tpb.EncodeRequest(inputs="a"))):
            for md in ([], [("authorization", "Bearer wrong")]):
                with self.assertRaises(grpc.RpcError) as ctx:
                    call(req, metadata=md, timeout=10)
                self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        with self.assertRaises(grpc.RpcError) as ctx:
            list(self.predict.PredictStream(iter([tpb.PredictRequest(inputs="a")]), timeout=10))
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(info.Info(tpb.InfoRequest(), metadata=self.md, timeout=10).model_id, "classify")
        self.assertEqual(len(self.predict.Predict(tpb.PredictRequest(inputs="a"), metadata=self.md,
                                                  timeout=30).predictions), 5)

        # Drain: a call held in the worker finishes; a new one is refused.
        batches = lambda: e2e.metric_value(self.server.metrics(), "dserve_batch_size_count", model="classify")
        before = batches()
        self.hold.hold()
        result = {}

        def held_call():
            try:
                result["response"] = self.predict.Predict(tpb.PredictRequest(inputs="held"), metadata=self.md,
                                                          timeout=60)
            except grpc.RpcError as e:
                result["error"] = e
        t = threading.Thread(target=held_call)
        t.start()
        e2e.wait_until("the held worker to take the call", lambda: batches() == before + 1, server=self.server)
        self.server.terminate()
        e2e.wait_until("new tei.v1 calls to be refused", lambda: self._refused(), server=self.server)
        self.assertTrue(t.is_alive(), "the accepted call waits for the held worker")
        self.hold.release()
        t.join(60)
        self.assertNotIn("error", result, result.get("error"))
        self.assertEqual(len(result["response"].predictions), 5)
        self.assertEqual(self.server.wait(40), 0, self.server.log_tail())

    def _refused(self):
        try:
            self.predict.Predict(tpb.PredictRequest(inputs="late"), metadata=self.md, timeout=5)
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.UNAVAILABLE
        return False


if __name__ == "__main__":
    unittest.main()
