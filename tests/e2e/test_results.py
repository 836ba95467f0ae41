"""Server results == an independent computation, for every task.

The ids are built in Python with libsentencepiece (so the server's own C++
tokenizer is checked end to end too), run through `dserve forward`, and
decoded in Python (softmax/top-k, sigmoid + sort, Hugging Face SQuAD v2
post-processing). Scores within 1e-4 (the server batches the texts
differently from `dserve forward`, which moves fp32 results at ~1e-6);
labels, texts and offsets equal; rankings equal except between candidates
whose oracle scores tie within 1e-4 (e2e.ranking_mismatch).
"""
import unittest

import e2e_support as e2e
from e2e_support import pb

TOL = 1e-4

CLASSIFY_TEXTS = [
    "I was charged twice for my order, please refund me.",
    "How do I reset my password?",
    "Where is my package? It has not arrived yet.",
    "  leading and   repeated   spaces  ",
    "Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u6771\u4eac and an emoji \U0001F642!",
    "tabs\tand\nnewlines\r\nmixed",
    "a",
]
# Longer than the classify model's 256 tokens.
LONG_TEXT = " ".join(["The miller opens the doors every morning at six and the river runs past the old mill."] * 20)

QUESTION = "When does the miller open the doors?"
CONTEXTS = [
    "A river runs past the old mill, and the miller still opens the doors every morning at six.",
    "The library opens at nine and closes at five, except on Sundays when it stays closed all day.",
]
LONG_CONTEXT = " ".join([
    "People who live in the village say the mill has been there for more than two hundred years.",
    "Nobody remembers who built it, but everyone agrees that the wheel used to be painted red.",
    "The baker next door sells bread, rolls, and small cakes with honey on top.",
    "On market days the square fills with stalls selling apples, pears, cheese, and fresh fish.",
    "A man with a grey beard plays the violin near the fountain and collects coins in his hat.",
    "When it rains, the stones of the square shine like glass and the stalls close early.",
    "Engineers measure things carefully before they build anything that must carry weight.",
    "A bridge needs strong foundations, good materials, and a design that spreads the load.",
    "Gulls circle the boats, hoping for scraps, and shout at each other over every piece of fish.",
    "In the evening the lighthouse turns on and its beam sweeps across the dark water.",
])

QUERY = "where can I buy fresh bread"
DOCUMENTS = [
    "The baker next door sells bread, rolls, and small cakes with honey on top.",
    "Engineers measure things carefully before they build anything.",
    "On market days the square fills with stalls selling apples, pears, cheese, and fresh fish.",
    "Gulls circle the boats.",
    "\u00dcber caf\u00e9s: fresh croissants every morning \u2615",
]


class ResultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.models = e2e.test_models()
        cls.server = e2e.ServerProcess(cls.models, ["--workers", "1"], name="results").start()
        cls.channel = cls.server.channel()
        cls.stub = cls.server.stub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    # ----------------------------------------------------------- classify --

    def assert_ranked(self, labels, want, n=None):
        problem = e2e.ranking_mismatch([(l.label, l.score) for l in labels], want, TOL, n)
        self.assertIsNone(problem)

    def _classify_logits(self, id_rows):
        return [o["logits"] for o in e2e.forward(self.models["classify"], [{"input_ids": r} for r in id_rows])]

    def test_classify_matches_forward(self):
        rows = [e2e.single_ids(t) for t in CLASSIFY_TEXTS]
        logits = self._classify_logits(rows)
        resp = self.stub.Classify(pb.ClassifyRequest(model="classify", texts=CLASSIFY_TEXTS), timeout=30)
        self.assertEqual(resp.model, "classify")
        self.assertEqual(len(resp.results), len(CLASSIFY_TEXTS))
        for i, (result, lg) in enumerate(zip(resp.results, logits)):
            with self.subTest(text=CLASSIFY_TEXTS[i]):
                self.assert_ranked(result.labels, e2e.classify_oracle(lg))
                self.assertAlmostEqual(sum(l.score for l in result.labels), 1.0, delta=1e-5)
                self.assertFalse(result.truncated)
        self.assertEqual(resp.usage.items, len(CLASSIFY_TEXTS))
        self.assertEqual(resp.usage.tokens, sum(len(r) for r in rows))

    def test_classify_top_k_and_raw_scores(self):
        texts = CLASSIFY_TEXTS[:3]
        logits = self._classify_logits([e2e.single_ids(t) for t in texts])
        top2 = self.stub.Classify(pb.ClassifyRequest(model="classify", texts=texts, top_k=2), timeout=30)
        raw = self.stub.Classify(pb.ClassifyRequest(model="classify", texts=texts, raw_scores=True), timeout=30)
        for i, lg in enumerate(logits):
            self.assert_ranked(top2.results[i].labels, e2e.classify_oracle(lg), n=2)
            self.assert_ranked(raw.results[i].labels, e2e.classify_oracle(lg, raw=True))

    def test_classify_truncates_long_text(self):
        ids = e2e.spm().encode(LONG_TEXT)
        self.assertGreater(len(ids) + 2, e2e.MAX_LENGTH["classify"])
        row = [e2e.CLS] + ids[:e2e.MAX_LENGTH["classify"] - 2] + [e2e.SEP]
        [lg] = self._classify_logits([row])
        resp = self.stub.Classify(pb.ClassifyRequest(model="classify", texts=[LONG_TEXT]), timeout=30)
        result = resp.results[0]
        self.assertTrue(result.truncated)
        self.assert_ranked(result.labels, e2e.classify_oracle(lg))
        self.assertEqual(resp.usage.tokens, e2e.MAX_LENGTH["classify"])

    def test_classify_reports_tokens_per_text(self):
        # proto: Classification.tokens = tokens of this text after truncation, specials included.
        texts = CLASSIFY_TEXTS[:3] + [LONG_TEXT]
        want = [len(e2e.single_ids(t)) for t in texts[:3]] + [e2e.MAX_LENGTH["classify"]]
        resp = self.stub.Classify(pb.ClassifyRequest(model="classify", texts=texts), timeout=30)
        self.assertEqual([r.tokens for r in resp.results], want)

    # ------------------------------------------------------------- answer --

    def _check_answer(self, resp, want, contexts):
        self.assertEqual(resp.model, "answer")
        self.assertEqual(resp.no_answer, want["no_answer"])
        self.assertAlmostEqual(resp.no_answer_score, want["no_answer_score"], delta=TOL)
        self.assertAlmostEqual(resp.null_score_diff, want["null_score_diff"], delta=TOL)
        self.assertEqual(len(resp.answers), len(want["answers"]))
        for got, exp in zip(resp.answers, want["answers"]):
            self.assertEqual((got.text, got.context_index, got.start_char, got.end_char),
                             (exp["text"], exp["context_index"], exp["start_char"], exp["end_char"]))
            self.assertAlmostEqual(got.score, exp["score"], delta=TOL)
            self.assertAlmostEqual(got.logit_score, exp["logit_score"], delta=TOL)
            self.assertEqual(got.text, contexts[got.context_index][got.start_char:got.end_char])

    def test_answer_single_context_matches_squad_v2_postprocessing(self):
        for top_k in (1, 3):
            with self.subTest(top_k=top_k):
                windows = e2e.answer_windows(QUESTION, CONTEXTS[:1], self.models["answer"])
                self.assertEqual(len(windows), 1)
                want = e2e.qa_oracle(windows, CONTEXTS[:1], top_k=top_k)
                self.assertGreater(len(want["answers"]), 0)
                resp = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=CONTEXTS[:1],
                                                         top_k=top_k), timeout=30)
                self._check_answer(resp, want, CONTEXTS[:1])
                self.assertEqual(resp.usage.items, 1)
                self.assertEqual(resp.usage.tokens, len(windows[0]["ids"]))

    def test_answer_two_contexts_and_threshold_override(self):
        windows = e2e.answer_windows(QUESTION, CONTEXTS, self.models["answer"])
        self.assertEqual(len(windows), 2)
        want = e2e.qa_oracle(windows, CONTEXTS, top_k=5)
        resp = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=CONTEXTS, top_k=5),
                                timeout=30)
        self._check_answer(resp, want, CONTEXTS)
        # A threshold on the other side of null_score_diff flips no_answer.
        flipped = want["null_score_diff"] - 1.0 if not want["no_answer"] else want["null_score_diff"] + 1.0
        want2 = e2e.qa_oracle(windows, CONTEXTS, top_k=5, threshold=flipped)
        self.assertNotEqual(want2["no_answer"], want["no_answer"])
        resp2 = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=CONTEXTS, top_k=5,
                                                  null_score_diff_threshold=flipped), timeout=30)
        self._check_answer(resp2, want2, CONTEXTS)

    def test_answer_max_answer_tokens(self):
        windows = e2e.answer_windows(QUESTION, CONTEXTS[:1], self.models["answer"])
        want = e2e.qa_oracle(windows, CONTEXTS[:1], top_k=5, max_answer_tokens=2)
        resp = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=CONTEXTS[:1], top_k=5,
                                                 max_answer_tokens=2), timeout=30)
        self._check_answer(resp, want, CONTEXTS[:1])

    def test_answer_long_context_is_windowed(self):
        contexts = [LONG_CONTEXT]
        windows = e2e.answer_windows(QUESTION, contexts, self.models["answer"])
        self.assertGreater(len(windows), 2, "the context must need several 128-token windows")
        resp = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=contexts, top_k=3),
                                timeout=30)
        self.assertEqual(resp.usage.items, len(windows))
        self.assertEqual(resp.usage.tokens, sum(len(w["ids"]) for w in windows))
        self.assertGreater(len(resp.answers), 0)
        for a in resp.answers:
            self.assertEqual(a.context_index, 0)
            self.assertLess(a.start_char, a.end_char)
            self.assertLessEqual(a.end_char, len(LONG_CONTEXT))
            self.assertEqual(a.text, LONG_CONTEXT[a.start_char:a.end_char])
            self.assertEqual(a.text, a.text.strip())
            self.assertLessEqual(len(e2e.spm().encode(a.text)), e2e.QA_MAX_ANSWER_TOKENS + 2)
            self.assertGreater(a.score, 0.0)
            self.assertLessEqual(a.score, 1.0)
        # And the full Hugging Face post-processing over our own windows.
        self._check_answer(resp, e2e.qa_oracle(windows, contexts, top_k=3), contexts)

    # ------------------------------------------------------------- rerank --

    def test_rerank_matches_forward(self):
        rows = [{"input_ids": [e2e.CLS] + e2e.spm().encode(QUERY) + [e2e.SEP] + e2e.spm().encode(d) + [e2e.SEP]}
                for d in DOCUMENTS]
        logits = [o["logits"][0] for o in e2e.forward(self.models["rerank"], rows)]
        scores = [float(e2e.sigmoid(l)) for l in logits]
        order = sorted(range(len(DOCUMENTS)), key=lambda i: (-e2e.np.float32(scores[i]), i))
        resp = self.stub.Rerank(pb.RerankRequest(model="rerank", query=QUERY, documents=DOCUMENTS,
                                                 return_documents=True), timeout=30)
        self.assertEqual(resp.model, "rerank")
        self.assertIsNone(e2e.ranking_mismatch([(r.index, r.score) for r in resp.results],
                                               [(i, scores[i]) for i in order], TOL))
        for r in resp.results:
            self.assertEqual(r.document, DOCUMENTS[r.index])
            self.assertEqual((r.chunk_start_char, r.chunk_end_char), (0, len(DOCUMENTS[r.index])))
        self.assertEqual(resp.usage.items, len(DOCUMENTS))
        self.assertEqual(resp.usage.tokens, sum(len(r["input_ids"]) for r in rows))

        top = self.stub.Rerank(pb.RerankRequest(model="rerank", query=QUERY, documents=DOCUMENTS, top_n=2,
                                                raw_scores=True), timeout=30)
        self.assertIsNone(e2e.ranking_mismatch([(r.index, r.score) for r in top.results],
                                               [(i, logits[i]) for i in order], TOL, n=2))
        for r in top.results:
            self.assertEqual(r.document, "")

    def test_rerank_long_document_scores_best_chunk(self):
        documents = [LONG_CONTEXT, DOCUMENTS[0]]
        stride = e2e.server_stride(QUERY, e2e.MAX_LENGTH["rerank"])
        chunks = e2e.pair_windows(QUERY, LONG_CONTEXT, e2e.MAX_LENGTH["rerank"], stride)
        self.assertGreater(len(chunks), 2)
        short = e2e.pair_windows(QUERY, DOCUMENTS[0], e2e.MAX_LENGTH["rerank"], stride)
        outs = e2e.forward(self.models["rerank"], [{"input_ids": c["ids"]} for c in chunks + short])
        chunk_logits = [o["logits"][0] for o in outs[:len(chunks)]]
        best = max(range(len(chunks)), key=lambda i: (chunk_logits[i], -i))
        want = {0: float(e2e.sigmoid(chunk_logits[best])), 1: float(e2e.sigmoid(outs[-1]["logits"][0]))}
        resp = self.stub.Rerank(pb.RerankRequest(model="rerank", query=QUERY, documents=documents), timeout=30)
        got = {r.index: r for r in resp.results}
        self.assertEqual(sorted(got), [0, 1])
        self.assertAlmostEqual(got[0].score, want[0], delta=TOL)
        self.assertAlmostEqual(got[1].score, want[1], delta=TOL)
        # The long document never scores below its first chunk alone.
        self.assertGreaterEqual(got[0].score + TOL, float(e2e.sigmoid(chunk_logits[0])))
        # The reported chunk is the best one's code-point range.
        offs = [o for o in chunks[best]["offsets"] if o is not None]
        self.assertEqual((got[0].chunk_start_char, got[0].chunk_end_char),
                         (e2e.codepoints(LONG_CONTEXT, offs[0][0]), e2e.codepoints(LONG_CONTEXT, offs[-1][1])))
        self.assertEqual(resp.usage.items, len(chunks) + 1)
        self.assertIsNone(e2e.ranking_mismatch([(r.index, r.score) for r in resp.results],
                                               sorted(want.items(), key=lambda kv: (-kv[1], kv[0])), TOL))

    # --------------------------------------------------------- list models --

    def test_list_models(self):
        resp = self.stub.ListModels(pb.ListModelsRequest(), timeout=10)
        by_name = {m.name: m for m in resp.models}
        self.assertEqual(sorted(by_name), ["answer", "classify", "rerank"])
        for name in ("answer", "classify", "rerank"):
            self.assertEqual(by_name[name].task, name)
            self.assertEqual(by_name[name].max_length, e2e.MAX_LENGTH[name])
            self.assertEqual(by_name[name].dtype, "fp32")
            self.assertEqual(by_name[name].device, "cpu")
            self.assertRegex(by_name[name].version, r"^[0-9a-f]{16}$")
        self.assertEqual(list(by_name["classify"].labels), e2e.CLASSIFY_LABELS)

    def test_every_response_names_the_model_version_that_computed_it(self):
        # Issue 16, defect 7: in the message and as a response header.
        versions = {m.name: m.version for m in self.stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
        calls = {
            "classify": (self.stub.Classify, pb.ClassifyRequest(model="classify", texts=["refund please"])),
            "answer": (self.stub.Answer, pb.AnswerRequest(model="answer", question="Who?", contexts=["Bob runs."])),
            "rerank": (self.stub.Rerank, pb.RerankRequest(model="rerank", query="bread", documents=["fish", "bread"])),
        }
        for name, (method, request) in calls.items():
            with self.subTest(model=name):
                response, call = method.with_call(request, timeout=30)
                self.assertEqual(response.model_version, versions[name])
                headers = dict(call.initial_metadata())
                self.assertEqual(headers.get("x-dserve-model-version"), versions[name])


if __name__ == "__main__":
    unittest.main()
