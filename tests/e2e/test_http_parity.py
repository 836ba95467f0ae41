"""Field parity of the TEI and Cohere HTTP shapes, and multi-label scores on
every door (issue 28).

Every new field is checked by its value, against the dserve.v1 gRPC answer
for the same input and, where the field changes which tokens the model reads
(pairs, truncation direction, chunk caps), against libsentencepiece ids run
through `dserve forward` (tolerance 1e-4, as test_results.py):
- TEI /predict: raw_scores (logits; softmax of them = the default scores),
  batched texts and batched pairs ([[a, b], ...] = [CLS] a [SEP] b [SEP]),
  truncation_direction;
- TEI /rerank: raw_scores (sigmoid of them = the default scores), return_text,
  truncate, truncation_direction;
- Cohere /v1/rerank: top_n, return_documents, max_chunks_per_doc;
- a multi-label checkpoint (config problem_type multi_label_classification):
  sigmoid of the logits, not softmax, through dserve.v1 gRPC, HTTP (/predict,
  /v1/classify) and TEI gRPC.
"""
import json
import os
import shutil
import unittest

import numpy as np
import requests

import e2e_support as e2e
import http_support as hs
from e2e_support import pb
from tei import tei_pb2 as tpb
from tei import tei_pb2_grpc as tgrpc

SAME = 1e-6
TOL = 1e-4

TEXTS = [
    "I was charged twice for my order, please refund me.",
    "How do I reset my password?",
    "Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u6771\u4eac and an emoji \U0001F642!",
]
PAIRS = [("Where is my package?", "It has not arrived yet."), ("refund please", "my order was broken")]
QUERY = "where can I buy fresh bread"
DOCUMENTS = [
    "The baker next door sells bread, rolls, and small cakes with honey on top.",
    "Engineers measure things carefully before they build anything.",
    "On market days the square fills with stalls selling apples, pears, cheese, and fresh fish.",
    "\u00dcber caf\u00e9s: fresh croissants every morning \u2615",
]
LONG_TEXT = ("please refund my money for the broken order " * 30) + ("how do I reset my password today " * 30)
# Longer than the rerank model's 128 tokens: several chunks, different ends.
LONG_DOC = ("engineers measure things carefully before they build anything " * 12) + \
           ("the baker sells fresh bread and rolls every morning " * 12)


def multi_label_copy(classify_dir):
    """The classify checkpoint with config problem_type multi_label_classification."""
    out = os.path.join(e2e.scratch_dir("multilabel"), "multilabel")
    shutil.copytree(classify_dir, out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["problem_type"] = "multi_label_classification"
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return out


class HttpParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = e2e.test_models()
        cls.multilabel_dir = multi_label_copy(cls.models["classify"])
        served = {"classify": cls.models["classify"], "rerank": cls.models["rerank"], "multilabel": cls.multilabel_dir}
        cls.server = hs.HttpServerProcess(served, ["--workers", "1"], name="parity").start()
        cls.channel = cls.server.channel()
        e2e.wait_ready(cls.channel)
        cls.stub = cls.server.stub(cls.channel)
        cls.http = hs.session()

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def post(self, path, body, status=200, model=None):
        r = self.http.post(self.server.url(path), data=json.dumps(body), params={"model": model} if model else None,
                           timeout=60)
        self.assertEqual(r.status_code, status, r.text[:1000])
        return r.json()

    def classify(self, texts, model="classify", **kw):
        return self.stub.Classify(pb.ClassifyRequest(model=model, texts=texts, **kw), timeout=30)

    def rerank(self, query, documents, **kw):
        return self.stub.Rerank(pb.RerankRequest(model="rerank", query=query, documents=documents, **kw), timeout=30)

    def forward_logits(self, rows, model="classify"):
        return [o["logits"] for o in e2e.forward(self.models[model], [{"input_ids": r} for r in rows])]

    def assert_labels(self, got, want, tol=SAME):
        """/predict's [{label, score}] == v1 LabelScores."""
        self.assertEqual([g["label"] for g in got], [w.label for w in want])
        for g, w in zip(got, want):
            self.assertAlmostEqual(g["score"], w.score, delta=tol)

    # ----------------------------------------------------------- /predict --

    def test_predict_raw_scores_are_logits(self):
        for text in TEXTS:
            raw = self.post("/predict", {"inputs": text, "raw_scores": True}, model="classify")
            prob = self.post("/predict", {"inputs": text}, model="classify")
            self.assert_labels(raw, self.classify([text], raw_scores=True).results[0].labels)
            logits = dict((l["label"], l["score"]) for l in raw)
            soft = dict(zip(logits, e2e.softmax(list(logits.values()))))
            for p in prob:
                self.assertAlmostEqual(p["score"], soft[p["label"]], delta=1e-6)
            self.assertAlmostEqual(sum(p["score"] for p in prob), 1.0, delta=1e-5)
            self.assertGreater(abs(sum(logits.values()) - 1.0), 1e-3)

    def test_predict_batches_texts_and_pairs(self):
        got = self.post("/predict", {"inputs": TEXTS, "raw_scores": True}, model="classify")
        want = self.classify(TEXTS, raw_scores=True)
        self.assertEqual(len(got), len(TEXTS))
        for g, w in zip(got, want.results):
            self.assert_labels(g, w.labels)
        # A batch of pairs: one list of labels per pair, as dserve.v1's text_pairs.
        got = self.post("/predict", {"inputs": [list(p) for p in PAIRS]}, model="classify")
        want = self.classify([a for a, _ in PAIRS], text_pairs=[b for _, b in PAIRS])
        self.assertEqual(len(got), len(PAIRS))
        for g, w in zip(got, want.results):
            self.assert_labels(g, w.labels)
        # Independently: [CLS] a [SEP] b [SEP] from libsentencepiece through `dserve forward`.
        spm = e2e.spm()
        rows = [[e2e.CLS] + spm.encode(a) + [e2e.SEP] + spm.encode(b) + [e2e.SEP] for a, b in PAIRS]
        for g, logits in zip(got, self.forward_logits(rows)):
            oracle = dict(zip(e2e.CLASSIFY_LABELS, e2e.softmax(logits)))
            for l in g:
                self.assertAlmostEqual(l["score"], oracle[l["label"]], delta=TOL)
        # A pair changes the answer (the second text is read).
        single = self.post("/predict", {"inputs": [[PAIRS[0][0]]]}, model="classify")
        self.assert_labels(single[0], self.classify([PAIRS[0][0]]).results[0].labels)
        self.assertNotEqual([l["score"] for l in single[0]], [l["score"] for l in got[0]])
        # Mixed or malformed batches name the element.
        for bad, field in (([["a", "b"], ["c"]], "inputs[1]"), ([["a", "b"], "c"], "inputs[1]"),
                           ([["a", "b", "c"]], "inputs[0]"), (["a", ["b"]], "inputs[1]")):
            err = self.post("/predict", {"inputs": bad}, status=400, model="classify")
            self.assertIn(field, err["error"])

    def test_predict_truncation_direction(self):
        ids = e2e.spm().encode(LONG_TEXT)
        self.assertGreater(len(ids), 254)
        right_logits, left_logits = self.forward_logits([[e2e.CLS] + ids[:254] + [e2e.SEP],
                                                         [e2e.CLS] + ids[-254:] + [e2e.SEP]])
        for direction, logits in (("Right", right_logits), ("right", right_logits), ("Left", left_logits),
                                  ("left", left_logits), (None, right_logits)):
            body = {"inputs": LONG_TEXT, "truncate": True, "raw_scores": True}
            if direction:
                body["truncation_direction"] = direction
            got = dict((l["label"], l["score"]) for l in self.post("/predict", body, model="classify"))
            for label, logit in zip(e2e.CLASSIFY_LABELS, logits):
                self.assertAlmostEqual(got[label], logit, delta=TOL)
        self.assertGreater(max(abs(a - b) for a, b in zip(right_logits, left_logits)), 1e-3)
        self.post("/predict", {"inputs": LONG_TEXT, "truncate": False}, status=422, model="classify")
        err = self.post("/predict", {"inputs": "a", "truncation_direction": "Up"}, status=400, model="classify")
        self.assertIn("truncation_direction", err["error"])

    # ------------------------------------------------------------ /rerank --

    def test_tei_rerank_fields(self):
        raw = self.post("/rerank", {"query": QUERY, "texts": DOCUMENTS, "raw_scores": True})
        plain = self.post("/rerank", {"query": QUERY, "texts": DOCUMENTS})
        want = self.rerank(QUERY, DOCUMENTS, raw_scores=True)
        self.assertEqual([r["index"] for r in raw], [r.index for r in want.results])
        for g, w in zip(raw, want.results):
            self.assertAlmostEqual(g["score"], w.score, delta=SAME)
        logit = {r["index"]: r["score"] for r in raw}
        for p in plain:
            self.assertAlmostEqual(p["score"], float(e2e.sigmoid(logit[p["index"]])), delta=1e-6)
            self.assertNotIn("text", p)
        with_text = self.post("/rerank", {"query": QUERY, "texts": DOCUMENTS, "return_text": True})
        self.assertEqual([r["text"] for r in with_text], [DOCUMENTS[r["index"]] for r in with_text])
        # truncate false refuses a document past 128 tokens; true cuts it, at the
        # end (Right, default) or the start (Left): the query stays whole.
        self.post("/rerank", {"query": QUERY, "texts": [LONG_DOC], "truncate": False}, status=422)
        q, d = e2e.spm().encode(QUERY), e2e.spm().encode(LONG_DOC)
        room = e2e.MAX_LENGTH["rerank"] - 3 - len(q)
        self.assertGreater(len(d), room)
        rows = [[e2e.CLS] + q + [e2e.SEP] + d[:room] + [e2e.SEP], [e2e.CLS] + q + [e2e.SEP] + d[-room:] + [e2e.SEP]]
        right, left = (l[0] for l in self.forward_logits(rows, model="rerank"))
        for direction, logit in ((None, right), ("Right", right), ("Left", left)):
            body = {"query": QUERY, "texts": [LONG_DOC], "truncate": True, "raw_scores": True}
            if direction:
                body["truncation_direction"] = direction
            self.assertAlmostEqual(self.post("/rerank", body)[0]["score"], logit, delta=TOL)
        self.assertGreater(abs(right - left), 1e-3)
        # dserve.v1 says the same, and names the kept chunk (the document's end with Left).
        v1_left = self.rerank(QUERY, [LONG_DOC], raw_scores=True, truncation=pb.TRUNCATION_LONGEST_FIRST,
                              truncation_direction=pb.TRUNCATION_DIRECTION_LEFT)
        self.assertAlmostEqual(v1_left.results[0].score, left, delta=TOL)
        self.assertEqual(v1_left.results[0].chunk_end_char, len(LONG_DOC.rstrip()))
        self.assertGreater(v1_left.results[0].chunk_start_char, 0)

    # ------------------------------------------------------- /v1/rerank --

    def test_cohere_top_n_return_documents_max_chunks(self):
        full = self.post("/v1/rerank", {"model": "rerank", "query": QUERY, "documents": DOCUMENTS})
        self.assertEqual(len(full["results"]), len(DOCUMENTS))
        top = self.post("/v1/rerank", {"model": "rerank", "query": QUERY, "documents": DOCUMENTS, "top_n": 2,
                                       "return_documents": True})
        self.assertEqual(len(top["results"]), 2)
        self.assertEqual([(r["index"], r["relevance_score"]) for r in top["results"]],
                         [(r["index"], r["relevance_score"]) for r in full["results"][:2]])
        self.assertEqual([r["document"]["text"] for r in top["results"]],
                         [DOCUMENTS[r["index"]] for r in top["results"]])
        self.assertTrue(all("document" not in r for r in full["results"]))
        # max_chunks_per_doc: the document's first N chunks only, best of them.
        stride = e2e.server_stride(QUERY, e2e.MAX_LENGTH["rerank"])
        chunks = e2e.pair_windows(QUERY, LONG_DOC, e2e.MAX_LENGTH["rerank"], stride)
        self.assertGreaterEqual(len(chunks), 3)
        scores = [float(e2e.sigmoid(l[0])) for l in self.forward_logits([c["ids"] for c in chunks], model="rerank")]
        tokens = {}
        for n in (1, 2, None):
            body = {"model": "rerank", "query": QUERY, "documents": [LONG_DOC]}
            if n:
                body["max_chunks_per_doc"] = n
            got = self.post("/v1/rerank", body)
            self.assertAlmostEqual(got["results"][0]["relevance_score"], max(scores[:n]), delta=TOL)
            tokens[n] = got["usage"]["total_tokens"]
            self.assertEqual(tokens[n], sum(len(c["ids"]) for c in chunks[:n]))
        self.assertLess(tokens[1], tokens[2])
        self.assertLess(tokens[2], tokens[None])
        err = self.post("/v1/rerank", {"model": "rerank", "query": QUERY, "documents": ["a"], "max_chunks_per_doc": 0},
                        status=400)
        self.assertIn("max_chunks_per_doc", err["error"])
        # dserve.v1's field is the same cap.
        v1 = self.rerank(QUERY, [LONG_DOC], max_chunks_per_document=1)
        self.assertAlmostEqual(v1.results[0].score, scores[0], delta=TOL)

    # -------------------------------------------------------- multi-label --

    def test_multi_label_is_sigmoid_on_every_door(self):
        for text in TEXTS:
            # The multi-label copy has the classify model's weights: its logits.
            logits = {l.label: l.score for l in self.classify([text], raw_scores=True).results[0].labels}
            want = {label: float(e2e.sigmoid(x)) for label, x in logits.items()}
            order = sorted(want, key=lambda label: (-np.float32(want[label]), e2e.CLASSIFY_LABELS.index(label)))
            grpc_v1 = self.classify([text], model="multilabel").results[0].labels
            http_predict = self.post("/predict", {"inputs": text}, model="multilabel")
            http_v1 = self.post("/v1/classify", {"model": "multilabel", "texts": [text]})["results"][0]["labels"]
            tei = tgrpc.PredictStub(self.channel).Predict(tpb.PredictRequest(inputs=text),
                                                          metadata=[("x-dserve-model", "multilabel")], timeout=30)
            tei = [{"label": p.label, "score": p.score} for p in tei.predictions]
            grpc_v1 = [{"label": l.label, "score": l.score} for l in grpc_v1]
            for door, got in (("dserve.v1 gRPC", grpc_v1), ("HTTP /predict", http_predict),
                              ("HTTP /v1/classify", http_v1), ("TEI gRPC", tei)):
                self.assertEqual([g["label"] for g in got], order, door)
                for g in got:
                    self.assertAlmostEqual(g["score"], want[g["label"]], delta=1e-6, msg=door)
                total = sum(g["score"] for g in got)
                self.assertGreater(abs(total - 1.0), 1e-3, "%s: sigmoid scores do not sum to 1 (%f)" % (door, total))
            # raw_scores stay the logits.
            raw = self.post("/predict", {"inputs": text, "raw_scores": True}, model="multilabel")
            for g in raw:
                self.assertAlmostEqual(g["score"], logits[g["label"]], delta=1e-6)


if __name__ == "__main__":
    unittest.main()
