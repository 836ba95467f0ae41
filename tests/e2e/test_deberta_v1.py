"""The third model family served beside the other two (issue 26): one
`dserve serve` with a DeBERTa v1 classifier (MNLI labels), reader and
reranker (tests/data/make_v1_test_models.py: the random-weight goldens of
shared/goldens/deberta_v1 with a GPT-2 byte-level BPE vocabulary cut to
their 1000 ids), a DeBERTa-v2 classifier and an ALBERT classifier, over
gRPC (dserve.v1) and HTTP.

Oracles, independent of the server's code:
- ids and offsets: the Python GPT-2 BPE of tests/model/tokenizer/
  gen_bpe_oracle.py (python3-regex pre-tokenizer, rank-ordered merges,
  Hugging Face's trim_offsets convention), never dserve's tokenizer;
- numbers: `dserve forward` on those ids (which matches Hugging Face's
  Deberta* classes on the goldens, tests/model/deberta_v1), decoded in
  numpy: softmax with the labels of config.json's id2label, sigmoid, and
  Hugging Face's SQuAD v2 post-processing (e2e_support.qa_oracle) over
  windows built here from the oracle's tokens.
Scores within 1e-4 (another batch composition moves fp32 results at
~1e-6); rankings exact but for ties within that (e2e.ranking_mismatch).
Also: `dserve tokenize`/`eval` on a v1 directory, --dtype bf16 and int8
near fp32, hot reload of a v1 model, and the load errors of v1 directories
without their tokenizer files."""
import ctypes
import json
import os
import random
import shutil
import subprocess
import sys
import unittest

import numpy as np

import corrupt_checkpoints as cc
import e2e_support as e2e
import http_support as hs
from e2e_support import pb

sys.path.insert(0, os.path.join(e2e.SOURCE, "tests", "model", "tokenizer"))
import gen_bpe_oracle as bpe_oracle  # noqa: E402
sys.path.insert(0, os.path.join(e2e.SOURCE, "tests", "model"))
import cpu_path  # noqa: E402

TOL = 1e-4
# bf16 keeps 8 bits of mantissa; int8 quantizes the dense layers. On these
# random-weight models, against fp32: probabilities move by <= 0.007 (bf16)
# and 0.023 (int8), reranker logits (spread ~2) by 0.024 and 0.044 (measured
# when this test was written). The top label is kept wherever fp32's top two
# probabilities are CLEAR_MARGIN apart (docs/models.md, "--dtype").
# int8's error grows with the activation step: on a CPU with no int8 dot
# product (activations in 7 bits, cpu_path.int8_activation_levels) the
# reranker logits moved by 0.128 (an AMD EPYC Zen 3, AVX2 only), so int8's
# tolerance is LOW_PRECISION_TOL x 255 / levels.
LOW_PRECISION_TOL = 0.05
CLEAR_MARGIN = 0.1
MAX_LENGTH = 128  # max_position_embeddings of the v1 goldens (no dserve.max_length)

TEXTS = [
    "The parcel never arrived and I want my money back.",
    "Café crème brûlée, naïve façade — déjà vu 👍🏽!",
    "IT'S done; it's DONE, they're here   and we've\tgone\n\nhome.",
    "日本語のテキスト と 中文 字符 😀😀",
    "a",
]
PAIRS = [
    ("A man is playing a guitar on stage.", "Someone performs music."),
    ("The café opened at 9h.", "Le café était fermé 🙁"),
    ("It's raining.", "IT'S SUNNY  outside"),
]
QUESTION = "  When does the miller open the doors?"
CONTEXTS = [
    "A river runs past the old mill, and the miller still opens the doors every morning at six.",
    "Le café ouvre à 9h; the Bäckerei opens at seven 🥐🥨 — naïve guests wait outside.",
]
LONG_CONTEXT = " ".join(
    "Paragraph %d: the miller's café by the river opens at %d o'clock, déjà vu 😀 for every guest." % (i, 5 + i % 4)
    for i in range(14))
QUERY = "where can I buy fresh bread?"
DOCUMENTS = [
    "The bakery on the corner sells fresh bread every morning.",
    "Car insurance premiums rose sharply this year.",
    "Brot und Brötchen gibt es in der Bäckerei 🥖.",
    "Bread? Brot! 🍞 pain, pan…",
    "bread",
]


def labels_of(model_dir):
    """config.json's id2label, in id order."""
    with open(os.path.join(model_dir, "config.json")) as f:
        id2label = json.load(f)["id2label"]
    return [id2label[str(i)] for i in range(len(id2label))]


class Oracle:
    """The Python GPT-2 BPE on the test tokenizer's files, in dserve's layout."""

    def __init__(self, tokenizer_dir):
        self.bpe = bpe_oracle.Gpt2Bpe(tokenizer_dir)
        self.vocab = self.bpe.encoder
        self.cls, self.sep = self.vocab["[CLS]"], self.vocab["[SEP]"]

    def tokens(self, text):
        """ids and UTF-8 byte offsets [(b, e)] of `text` without specials."""
        toks, offs = self.bpe.encode(text, False)
        to_byte = lambda cp: len(text[:cp].encode("utf-8"))  # noqa: E731
        return [self.vocab[t] for t in toks], [(to_byte(s), to_byte(e)) for s, e in offs]

    def single(self, text):
        ids, _ = self.tokens(text)
        return {"input_ids": [self.cls] + ids + [self.sep], "token_type_ids": [0] * (len(ids) + 2)}

    def pair(self, a, b):
        ia, _ = self.tokens(a)
        ib, _ = self.tokens(b)
        return {"input_ids": [self.cls] + ia + [self.sep] + ib + [self.sep],
                "token_type_ids": [0] * (len(ia) + 2) + [1] * (len(ib) + 1)}

    def windows(self, question, context, max_length=MAX_LENGTH, doc_stride=e2e.QA_DOC_STRIDE):
        """HF run_qa features as dserve clamps them: the question
        left-stripped and kept whole, the context in windows of `room`
        tokens overlapping by min(doc_stride, room // 2)."""
        a, _ = self.tokens(question.lstrip())
        b, b_off = self.tokens(context)
        room = max_length - 3 - len(a)
        stride = min(doc_stride, room // 2)
        out, start = [], 0
        while True:
            stop = min(start + room, len(b))
            out.append({"ids": [self.cls] + a + [self.sep] + b[start:stop] + [self.sep],
                        "type_ids": [0] * (len(a) + 2) + [1] * (stop - start + 1),
                        "offsets": [None] * (len(a) + 2) + list(b_off[start:stop]) + [None]})
            if stop >= len(b):
                return out
            start += room - stride


def forward(model_dir, rows, dtype="fp32"):
    payload = "".join(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([e2e.BIN, "forward", "--model", model_dir, "--batch-size", "4", "--dtype", dtype],
                         input=payload, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("dserve forward failed (%d): %s" % (out.returncode, out.stderr))
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def answer_windows(oracle, model_dir, question, contexts):
    windows = []
    for c, context in enumerate(contexts):
        for w in oracle.windows(question, context):
            w["context"] = c
            windows.append(w)
    outs = forward(model_dir, [{"input_ids": w["ids"], "token_type_ids": w["type_ids"]} for w in windows])
    for w, o in zip(windows, outs):
        w["start_logits"], w["end_logits"] = o["start_logits"], o["end_logits"]
    return windows


def served_labels(result):
    return [(l.label, l.score) for l in result.labels]


class DebertaV1BesideOtherFamiliesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        v1 = e2e.deberta_v1_test_models()
        cls.dirs = {"v1_cls": v1["classify"], "v1_qa": v1["answer"], "v1_rerank": v1["rerank"],
                    "deberta": e2e.test_models()["classify"], "albert": e2e.albert_test_models()["classify"]}
        cls.oracle = Oracle(v1["tokenizer"])
        cls.labels = labels_of(v1["classify"])
        cls.server = hs.HttpServerProcess(cls.dirs, ["--workers", "1"], name="v1").start()
        cls.channel = cls.server.channel()
        cls.stub = cls.server.stub(cls.channel)
        cls.http = hs.session()

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def post(self, path, body):
        r = self.http.post(self.server.url(path), data=json.dumps(body), timeout=60)
        self.assertEqual(r.status_code, 200, r.text)
        return r.json()

    # ------------------------------------------------------------ models --

    def test_test_tokenizer_fits_the_checkpoints(self):
        with open(os.path.join(self.dirs["v1_cls"], "vocab.json"), encoding="utf-8") as f:
            vocab = json.load(f)
        with open(os.path.join(self.dirs["v1_cls"], "config.json")) as f:
            vocab_size = json.load(f)["vocab_size"]
        self.assertLess(max(vocab.values()), vocab_size)
        self.assertEqual([vocab[t] for t in ("[PAD]", "[CLS]", "[SEP]", "[UNK]")], [0, 1, 2, 3])

    def test_list_models_shows_each_family(self):
        models = {m.name: m for m in self.stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
        want = {"v1_cls": ("DebertaForSequenceClassification", "classify"),
                "v1_qa": ("DebertaForQuestionAnswering", "answer"),
                "v1_rerank": ("DebertaForSequenceClassification", "rerank")}
        for name, (arch, task) in want.items():
            with self.subTest(model=name):
                self.assertEqual((models[name].model_type, models[name].architecture, models[name].task),
                                 ("deberta", arch, task))
                self.assertEqual(models[name].max_length, MAX_LENGTH)
        self.assertEqual(list(models["v1_cls"].labels), self.labels)
        self.assertEqual(self.labels, ["CONTRADICTION", "NEUTRAL", "ENTAILMENT"])
        self.assertEqual(models["deberta"].model_type, "deberta-v2")
        self.assertEqual(models["albert"].model_type, "albert")

    # --------------------------------------------------------- tokenize --

    def test_tokenize_command_equals_the_python_bpe(self):
        rng = random.Random(26)
        texts = [t for t in bpe_oracle.FIXED if len(t) < 400] + [bpe_oracle.random_text(rng) for _ in range(150)]
        texts = [t for t in texts if t]
        pairs = [(texts[i], texts[-1 - i]) for i in range(20)]
        lines = [{"text": t} for t in texts] + [{"text": a, "text_pair": b} for a, b in pairs]
        out = subprocess.run([e2e.BIN, "tokenize", "--model", self.dirs["v1_cls"]],
                             input="".join(json.dumps(l) + "\n" for l in lines), capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        got = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
        self.assertEqual(len(got), len(lines))
        for line, g in zip(lines, got):
            with self.subTest(line=line):
                ids, pieces, offsets = self.oracle.bpe.encode_layout(line["text"], line.get("text_pair"), False)
                self.assertEqual(g["ids"], ids)
                self.assertEqual(g["pieces"], pieces)
                # dserve: byte offsets into the segment's text; oracle: code points.
                seq = [line["text"]] * (ids.index(self.oracle.sep) + 1) + [line.get("text_pair")] * len(ids)
                want = [[0, 0] if o is None else [len(s[:o[0]].encode()), len(s[:o[1]].encode())]
                        for o, s in zip(offsets, seq)]
                self.assertEqual(g["byte_offsets"], want)

    # ---------------------------------------------------------- classify --

    def test_classify_equals_softmax_of_forward_on_oracle_ids(self):
        rows = [self.oracle.single(t) for t in TEXTS]
        logits = [o["logits"] for o in forward(self.dirs["v1_cls"], rows)]
        resp = self.stub.Classify(pb.ClassifyRequest(model="v1_cls", texts=TEXTS), timeout=30)
        http = self.post("/v1/classify", {"model": "v1_cls", "texts": TEXTS})
        self.assertEqual(len(resp.results), len(TEXTS))
        for text, row, result, h, lg in zip(TEXTS, rows, resp.results, http["results"], logits):
            with self.subTest(text=text):
                want = e2e.classify_oracle(lg, labels=self.labels)
                self.assertIsNone(e2e.ranking_mismatch(served_labels(result), want, TOL))
                self.assertIsNone(e2e.ranking_mismatch([(l["label"], l["score"]) for l in h["labels"]], want, TOL))
                self.assertEqual(result.tokens, len(row["input_ids"]))
        self.assertEqual(resp.usage.tokens, sum(len(r["input_ids"]) for r in rows))
        raw = self.stub.Classify(pb.ClassifyRequest(model="v1_cls", texts=TEXTS[:2], raw_scores=True, top_k=1),
                                 timeout=30)
        for result, lg in zip(raw.results, logits):
            self.assertIsNone(e2e.ranking_mismatch(served_labels(result),
                                                   e2e.classify_oracle(lg, labels=self.labels, raw=True), TOL, n=1))

    def test_classify_pairs_nli(self):
        rows = [self.oracle.pair(a, b) for a, b in PAIRS]
        logits = [o["logits"] for o in forward(self.dirs["v1_cls"], rows)]
        resp = self.stub.Classify(pb.ClassifyRequest(model="v1_cls", texts=[a for a, _ in PAIRS],
                                                     text_pairs=[b for _, b in PAIRS]), timeout=30)
        for pair, row, result, lg in zip(PAIRS, rows, resp.results, logits):
            with self.subTest(pair=pair):
                self.assertIsNone(e2e.ranking_mismatch(served_labels(result),
                                                       e2e.classify_oracle(lg, labels=self.labels), TOL))
                self.assertEqual(result.tokens, len(row["input_ids"]))

    def test_other_families_in_the_same_process_are_unchanged(self):
        rows = [{"input_ids": e2e.single_ids(t)} for t in TEXTS[:3]]
        logits = [o["logits"] for o in e2e.forward(self.dirs["deberta"], rows)]
        resp = self.stub.Classify(pb.ClassifyRequest(model="deberta", texts=TEXTS[:3]), timeout=30)
        for result, lg in zip(resp.results, logits):
            self.assertIsNone(e2e.ranking_mismatch(served_labels(result), e2e.classify_oracle(lg), TOL))
        resp = self.stub.Classify(pb.ClassifyRequest(model="albert", texts=TEXTS[:3]), timeout=30)
        self.assertEqual(len(resp.results), 3)
        for result in resp.results:
            self.assertAlmostEqual(sum(l.score for l in result.labels), 1.0, delta=1e-4)

    # ------------------------------------------------------------ answer --

    def check_answer(self, resp, want, contexts):
        self.assertEqual(resp.no_answer, want["no_answer"])
        self.assertAlmostEqual(resp.no_answer_score, want["no_answer_score"], delta=TOL)
        self.assertEqual(len(resp.answers), len(want["answers"]))
        for got, exp in zip(resp.answers, want["answers"]):
            self.assertEqual((got.text, got.context_index, got.start_char, got.end_char),
                             (exp["text"], exp["context_index"], exp["start_char"], exp["end_char"]))
            self.assertAlmostEqual(got.score, exp["score"], delta=TOL)
            # Code-point offsets that slice the user's own text.
            self.assertEqual(got.text, contexts[got.context_index][got.start_char:got.end_char])

    def test_answer_matches_squad_v2_postprocessing(self):
        windows = answer_windows(self.oracle, self.dirs["v1_qa"], QUESTION, CONTEXTS)
        self.assertEqual(len(windows), 2)
        want = e2e.qa_oracle(windows, CONTEXTS, top_k=5, threshold=1e9)
        self.assertGreater(len(want["answers"]), 1)
        resp = self.stub.Answer(pb.AnswerRequest(model="v1_qa", question=QUESTION, contexts=CONTEXTS, top_k=5,
                                                 null_score_diff_threshold=1e9), timeout=30)
        self.check_answer(resp, want, CONTEXTS)
        self.assertEqual(resp.usage.tokens, sum(len(w["ids"]) for w in windows))
        # The default threshold (0), then one on the other side of null_score_diff.
        want0 = e2e.qa_oracle(windows, CONTEXTS, top_k=5)
        self.check_answer(self.stub.Answer(pb.AnswerRequest(model="v1_qa", question=QUESTION, contexts=CONTEXTS,
                                                            top_k=5), timeout=30), want0, CONTEXTS)
        flipped = want0["null_score_diff"] - 1.0 if not want0["no_answer"] else want0["null_score_diff"] + 1.0
        want2 = e2e.qa_oracle(windows, CONTEXTS, top_k=5, threshold=flipped)
        self.assertNotEqual(want2["no_answer"], want0["no_answer"])
        self.check_answer(self.stub.Answer(pb.AnswerRequest(model="v1_qa", question=QUESTION, contexts=CONTEXTS,
                                                            top_k=5, null_score_diff_threshold=flipped),
                                           timeout=30), want2, CONTEXTS)
        # HTTP: the same answers.
        got = self.post("/dserve.v1.Inference/Answer", {"model": "v1_qa", "question": QUESTION, "contexts": CONTEXTS,
                                                         "top_k": 5, "null_score_diff_threshold": 1e9})
        self.assertEqual([(a["text"], a.get("context_index", 0), a.get("start_char", 0)) for a in got["answers"]],
                         [(a["text"], a["context_index"], a["start_char"]) for a in want["answers"]])
        for a, w in zip(got["answers"], want["answers"]):
            self.assertAlmostEqual(a["score"], w["score"], delta=TOL)

    def test_answer_spans_slice_non_ascii_contexts(self):
        resp = self.stub.Answer(pb.AnswerRequest(model="v1_qa", question=QUESTION, contexts=CONTEXTS[1:], top_k=20,
                                                 null_score_diff_threshold=1e9), timeout=30)
        self.assertGreater(len(resp.answers), 3)
        non_ascii = 0
        for a in resp.answers:
            context = CONTEXTS[1]
            self.assertLess(a.start_char, a.end_char)
            self.assertLessEqual(a.end_char, len(context))
            self.assertEqual(a.text, context[a.start_char:a.end_char])
            self.assertEqual(a.text, a.text.strip())
            non_ascii += any(ord(ch) > 127 for ch in a.text)
        self.assertGreater(non_ascii, 0, "some span must hold accents or emoji")

    def test_long_context_is_windowed(self):
        windows = answer_windows(self.oracle, self.dirs["v1_qa"], QUESTION, [LONG_CONTEXT])
        self.assertGreater(len(windows), 2, "the context must need several 128-token windows")
        resp = self.stub.Answer(pb.AnswerRequest(model="v1_qa", question=QUESTION, contexts=[LONG_CONTEXT], top_k=3,
                                                 null_score_diff_threshold=1e9), timeout=30)
        self.assertEqual(resp.usage.items, len(windows))
        self.assertEqual(resp.usage.tokens, sum(len(w["ids"]) for w in windows))
        self.check_answer(resp, e2e.qa_oracle(windows, [LONG_CONTEXT], top_k=3, threshold=1e9), [LONG_CONTEXT])

    # ------------------------------------------------------------ rerank --

    def test_rerank_scores_are_forward_logits(self):
        rows = [self.oracle.pair(QUERY, d) for d in DOCUMENTS]
        logits = [o["logits"][0] for o in forward(self.dirs["v1_rerank"], rows)]
        raw = self.stub.Rerank(pb.RerankRequest(model="v1_rerank", query=QUERY, documents=DOCUMENTS, raw_scores=True),
                               timeout=30)
        self.assertEqual(sorted(r.index for r in raw.results), list(range(len(DOCUMENTS))))
        by_index = {r.index: r.score for r in raw.results}
        for i, lg in enumerate(logits):  # input order
            self.assertAlmostEqual(by_index[i], lg, delta=TOL, msg="document %d" % i)
        order = sorted(range(len(DOCUMENTS)), key=lambda i: (-np.float32(logits[i]), i))
        self.assertIsNone(e2e.ranking_mismatch([(r.index, r.score) for r in raw.results],
                                               [(i, logits[i]) for i in order], TOL))
        probs = self.stub.Rerank(pb.RerankRequest(model="v1_rerank", query=QUERY, documents=DOCUMENTS), timeout=30)
        self.assertIsNone(e2e.ranking_mismatch([(r.index, r.score) for r in probs.results],
                                               [(i, float(e2e.sigmoid(logits[i]))) for i in order], TOL))
        self.assertEqual(probs.usage.tokens, sum(len(r["input_ids"]) for r in rows))
        got = self.post("/v1/rerank", {"model": "v1_rerank", "query": QUERY, "documents": DOCUMENTS})
        self.assertIsNone(e2e.ranking_mismatch([(r["index"], r["relevance_score"]) for r in got["results"]],
                                               [(i, float(e2e.sigmoid(logits[i]))) for i in order], TOL))

    # -------------------------------------------------------------- eval --

    def test_eval_command_on_a_v1_classifier(self):
        folder = e2e.scratch_dir("v1-eval")
        data = os.path.join(folder, "eval.jsonl")
        rows = [self.oracle.single(t) for t in TEXTS]
        logits = [o["logits"] for o in forward(self.dirs["v1_cls"], rows)]
        gold = [self.labels[i % 3] for i in range(len(TEXTS))]
        with open(data, "w", encoding="utf-8") as f:
            for t, g in zip(TEXTS, gold):
                f.write(json.dumps({"text": t, "label": g}) + "\n")
        out = subprocess.run([e2e.BIN, "eval", "--model", self.dirs["v1_cls"], "--data", data], capture_output=True,
                             text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        metrics = json.loads(out.stdout.strip().splitlines()[-1])
        want = np.mean([self.labels[int(np.argmax(lg))] == g for lg, g in zip(logits, gold)])
        self.assertAlmostEqual(metrics["accuracy"], want, delta=1e-9)


class DebertaV1LowPrecisionTest(unittest.TestCase):
    """--dtype bf16 and int8: the v1 models serve, near fp32's numbers."""

    def check(self, dtype):
        tol = LOW_PRECISION_TOL * (255 / cpu_path.int8_activation_levels() if dtype == "int8" else 1)
        v1 = e2e.deberta_v1_test_models()
        oracle = Oracle(v1["tokenizer"])
        labels = labels_of(v1["classify"])
        server = e2e.ServerProcess({"v1_cls": v1["classify"], "v1_qa": v1["answer"], "v1_rerank": v1["rerank"]},
                                   ["--dtype", dtype, "--workers", "1"], name="v1-" + dtype).start()
        try:
            stub = server.stub()
            models = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
            self.assertEqual(models["v1_cls"].dtype, dtype)
            logits = [o["logits"] for o in forward(v1["classify"], [oracle.single(t) for t in TEXTS])]
            resp = stub.Classify(pb.ClassifyRequest(model="v1_cls", texts=TEXTS), timeout=30)
            for text, result, lg in zip(TEXTS, resp.results, logits):
                want = dict(e2e.classify_oracle(lg, labels=labels))
                got = dict(served_labels(result))
                for label in labels:
                    self.assertAlmostEqual(got[label], want[label], delta=tol, msg=text)
                top2 = sorted(want.values(), reverse=True)[:2]
                if top2[0] - top2[1] >= CLEAR_MARGIN:
                    self.assertEqual(result.labels[0].label, max(want, key=want.get), text)
            rr = [o["logits"][0] for o in forward(v1["rerank"], [oracle.pair(QUERY, d) for d in DOCUMENTS])]
            raw = stub.Rerank(pb.RerankRequest(model="v1_rerank", query=QUERY, documents=DOCUMENTS,
                                               raw_scores=True), timeout=30)
            spread = max(rr) - min(rr)
            for r in raw.results:
                self.assertAlmostEqual(r.score, rr[r.index], delta=tol * max(1.0, spread))
            ans = stub.Answer(pb.AnswerRequest(model="v1_qa", question=QUESTION, contexts=CONTEXTS, top_k=3,
                                               null_score_diff_threshold=1e9), timeout=30)
            self.assertGreater(len(ans.answers), 0)
            for a in ans.answers:
                self.assertEqual(a.text, CONTEXTS[a.context_index][a.start_char:a.end_char])
        finally:
            server.stop()

    def test_bf16(self):
        self.check("bf16")

    def test_int8(self):
        self.check("int8")


def swap_in(new_dir, live_dir):
    """renameat2(RENAME_EXCHANGE), as our checkpoint writer swaps (test_hot_reload.py)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, new_dir.encode(), -100, live_dir.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2 %s %s" % (new_dir, live_dir))
    shutil.rmtree(new_dir)


class DebertaV1HotReloadTest(unittest.TestCase):
    def test_a_new_v1_checkpoint_is_swapped_in(self):
        v1 = e2e.deberta_v1_test_models()
        oracle = Oracle(v1["tokenizer"])
        labels = labels_of(v1["classify"])
        folder = e2e.scratch_dir("v1-reload")
        live = os.path.join(folder, "live")
        shutil.copytree(v1["classify"], live)
        server = e2e.ServerProcess({"v1_cls": live}, ["--watch=0.2", "--workers", "1"], name="v1-reload").start()
        try:
            stub = server.stub()

            def version():
                return {m.name: m.version for m in stub.ListModels(pb.ListModelsRequest(), timeout=10).models}["v1_cls"]

            def served():
                return served_labels(stub.Classify(pb.ClassifyRequest(model="v1_cls", texts=TEXTS[:2]),
                                                   timeout=30).results[1])

            rows = [oracle.single(TEXTS[1])]
            before = e2e.classify_oracle(forward(live, rows)[0]["logits"], labels=labels)
            self.assertIsNone(e2e.ranking_mismatch(served(), before, TOL))
            old = version()
            # A "retrained" copy: the bias of the label that is last now raised by 8.
            staged = os.path.join(folder, "staged")
            shutil.copytree(live, staged)
            path = os.path.join(staged, cc.SAFETENSORS)
            header, data = cc.read_safetensors(path)
            begin, _ = header["classifier.bias"]["data_offsets"]
            at = begin + 4 * labels.index(before[-1][0])
            value = ctypes.c_float.from_buffer_copy(data[at:at + 4]).value + 8.0
            cc.write_safetensors(path, header, data[:at] + bytes(ctypes.c_float(value)) + data[at + 4:])
            after = e2e.classify_oracle(forward(staged, rows)[0]["logits"], labels=labels)
            self.assertEqual(after[0][0], before[-1][0])
            swap_in(staged, live)
            e2e.wait_until("the new v1 version", lambda: version() != old, server=server)
            self.assertIsNone(e2e.ranking_mismatch(served(), after, TOL))
        finally:
            server.stop()


class DebertaV1LoadErrorsTest(unittest.TestCase):
    def serve_error(self, model_dir):
        out = subprocess.run([e2e.BIN, "serve", "--model", "v1=" + model_dir, "--listen", "127.0.0.1:0",
                              "--metrics-listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=120)
        return out.returncode, out.stderr

    def test_missing_merges_names_the_file(self):
        bad = os.path.join(e2e.scratch_dir("v1-nomerges"), "m")
        shutil.copytree(e2e.deberta_v1_test_models()["classify"], bad)
        os.unlink(os.path.join(bad, "merges.txt"))
        code, err = self.serve_error(bad)
        self.assertEqual(code, 2, err)
        self.assertIn(os.path.join(bad, "merges.txt") + " is missing", err)
        self.assertIn("model v1", err)

    def test_no_tokenizer_files_names_what_v1_needs(self):
        bad = os.path.join(e2e.scratch_dir("v1-notok"), "m")
        os.makedirs(bad)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(e2e.deberta_v1_test_models()["classify"], f), os.path.join(bad, f))
        code, err = self.serve_error(bad)
        self.assertEqual(code, 2, err)
        self.assertIn("vocab.json + merges.txt", err)
        # A SentencePiece model is DeBERTa-v2/v3's, never a v1 tokenizer.
        shutil.copyfile(os.path.join(e2e.test_models()["classify"], "spm.model"), os.path.join(bad, "spm.model"))
        code, err = self.serve_error(bad)
        self.assertEqual(code, 2, err)
        self.assertIn("vocab.json + merges.txt", err)

    def tokenize(self, model_dir, texts):
        out = subprocess.run([e2e.BIN, "tokenize", "--model", model_dir],
                             input="".join(json.dumps({"text": t}) + "\n" for t in texts), capture_output=True,
                             text=True, timeout=120)
        return out.returncode, [json.loads(l) for l in out.stdout.splitlines() if l.strip()], out.stderr

    def test_bpe_tokenizer_json_alone_is_read(self):
        v1 = e2e.deberta_v1_test_models()
        folder = os.path.join(e2e.scratch_dir("v1-tokjson"), "m")
        os.makedirs(folder)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(v1["classify"], f), os.path.join(folder, f))
        bpe_oracle.write_tokenizer_json(v1["tokenizer"], os.path.join(folder, "tokenizer.json"))
        code, got, err = self.tokenize(folder, TEXTS)
        self.assertEqual(code, 0, err)
        oracle = Oracle(v1["tokenizer"])
        self.assertEqual([g["ids"] for g in got], [oracle.single(t)["input_ids"] for t in TEXTS])
        # A Unigram tokenizer.json is SentencePiece's, never v1's.
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            json.dump({"version": "1.0", "normalizer": None, "post_processor": None, "decoder": None,
                       "added_tokens": [], "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581",
                                                             "prepend_scheme": "always", "split": True},
                       "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": False,
                                 "vocab": [["<unk>", 0.0], ["[CLS]", 0.0], ["[SEP]", 0.0], ["\u2581a", -1.0]]}}, f)
        code, _, err = self.tokenize(folder, ["a"])
        self.assertEqual(code, 2, err)
        self.assertIn("tokenizer.json: holds a Unigram", err)

    def test_golden_tokenizer_larger_than_the_model_is_refused(self):
        bad = os.path.join(e2e.scratch_dir("v1-bigvocab"), "m")
        shutil.copytree(e2e.deberta_v1_test_models()["classify"], bad)
        for f in ("vocab.json", "merges.txt"):
            shutil.copyfile(os.path.join(e2e.SHARED, "goldens", "deberta_v1", "tokenizer", f), os.path.join(bad, f))
        code, err = self.serve_error(bad)
        self.assertEqual(code, 2, err)
        self.assertIn("vocab_size is 1000", err)

    def test_training_v1_from_fresh_weights_says_it_is_not_supported(self):
        # Training v1 from --init (classify, answer, rerank, mlm) is
        # e2e.deberta_v1_train's; fresh v1 weights (--config) are not drawn.
        folder = e2e.scratch_dir("v1-train")
        data = os.path.join(folder, "train.txt")
        with open(data, "w") as f:
            f.write("a line of text for masked language modelling\n")
        model = e2e.deberta_v1_test_models()["classify"]
        out = subprocess.run([e2e.BIN, "train", "--task", "mlm", "--train", data, "--config",
                              os.path.join(model, "config.json"), "--tokenizer", os.path.join(model, "vocab.json"),
                              "--out", os.path.join(folder, "out")],
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn('model_type "deberta": --config (fresh weights) is not supported for this family', out.stderr)
        self.assertIn("--task mlm", out.stderr)
        self.assertFalse(os.path.exists(os.path.join(folder, "out", "best")))


if __name__ == "__main__":
    unittest.main()
