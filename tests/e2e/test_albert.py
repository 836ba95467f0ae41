"""The second model family served beside the first: one `dserve serve` with
a Hugging Face ALBERT classifier, an ALBERT QA model and a DeBERTa
classifier (tests/data/make_test_models.py: the random-weight goldens of
shared/goldens/albert with an ALBERT-recipe spiece.model).

Oracle for ALBERT classify: ids from libsentencepiece (python3-sentencepiece)
and an independent Python implementation of Hugging Face AlbertTokenizer's
text rules (tests/model/tokenizer/gen_albert_oracle.py), run through
`dserve forward` (which matches Hugging Face's AlbertForSequenceClassification
on the goldens), softmax in numpy. Scores within 1e-4 (another batch
composition moves fp32 results at ~1e-6), rankings exact but for ties
within that (e2e.ranking_mismatch)."""
import json
import os
import sys
import unittest

import e2e_support as e2e
from e2e_support import pb

sys.path.insert(0, os.path.join(e2e.SOURCE, "tests", "model", "tokenizer"))
import gen_albert_oracle as albert_oracle  # noqa: E402

TOL = 1e-4
ALBERT_LABELS = ["billing", "refund", "shipping", "other"]
ALBERT_CLS, ALBERT_SEP = 2, 3
# Exercise every text rule: case, accents (NFKD), ligatures, `` and '',
# whitespace runs, a digit followed by a comma, full-width characters.
TEXTS = [
    "The parcel never arrived and I want my MONEY back.",
    "  Café   crème\tbrûlée,   naïve façade  ",
    "``Refund'' of 1,000, dollars, please: order 3,",
    "ﬁnance oﬃce ＲＥＦＵＮＤ ２０２４",
    "İstanbul ΣΟΦΟΣ Ångström Dvořák",
    "a",
]
QUESTION = "When does the Miller open the doors?"
CONTEXTS = [
    "A river runs past the old mill, and the MILLER still opens the doors every morning at six.",
    "Le café ouvre à 9h; the Bäckerei opens at 1,000 past… never mind: at seven.",
]


class AlbertBesideDebertaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        albert = e2e.albert_test_models()
        cls.dirs = {"albert": albert["classify"], "albert_qa": albert["answer"],
                    "deberta": e2e.test_models()["classify"]}
        cls.server = e2e.ServerProcess(cls.dirs, ["--workers", "1"], name="albert").start()
        cls.channel = cls.server.channel()
        cls.stub = cls.server.stub(cls.channel)
        import sentencepiece
        cls.sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(cls.dirs["albert"], "spiece.model"))
        with open(os.path.join(cls.dirs["albert"], "tokenizer_config.json")) as f:
            cls.rules = albert_oracle.Rules(json.load(f))

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def albert_ids(self, text):
        _, pieces = albert_oracle.albert_tokenize(self.sp, text, self.rules)
        return [ALBERT_CLS] + [self.sp.piece_to_id(p) for p in pieces] + [ALBERT_SEP]

    def test_list_models_shows_each_family(self):
        models = {m.name: m for m in self.stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
        self.assertEqual((models["albert"].model_type, models["albert"].architecture, models["albert"].task),
                         ("albert", "AlbertForSequenceClassification", "classify"))
        self.assertEqual(list(models["albert"].labels), ALBERT_LABELS)
        self.assertEqual(models["albert"].max_length, 128)
        self.assertEqual((models["albert_qa"].model_type, models["albert_qa"].architecture, models["albert_qa"].task),
                         ("albert", "AlbertForQuestionAnswering", "answer"))
        self.assertEqual((models["deberta"].model_type, models["deberta"].architecture),
                         ("deberta-v2", "DebertaV2ForSequenceClassification"))

    def test_albert_classify_matches_forward_on_oracle_ids(self):
        rows = [{"input_ids": self.albert_ids(t)} for t in TEXTS]
        logits = [o["logits"] for o in e2e.forward(self.dirs["albert"], rows)]
        resp = self.stub.Classify(pb.ClassifyRequest(model="albert", texts=TEXTS), timeout=30)
        self.assertEqual(len(resp.results), len(TEXTS))
        for text, row, result, lg in zip(TEXTS, rows, resp.results, logits):
            with self.subTest(text=text):
                want = e2e.classify_oracle(lg, labels=ALBERT_LABELS)
                self.assertIsNone(e2e.ranking_mismatch([(l.label, l.score) for l in result.labels], want, TOL))
                self.assertEqual(result.tokens, len(row["input_ids"]))
        self.assertEqual(resp.usage.tokens, sum(len(r["input_ids"]) for r in rows))

    def test_deberta_in_the_same_process_is_unchanged(self):
        rows = [{"input_ids": e2e.single_ids(t)} for t in TEXTS]
        logits = [o["logits"] for o in e2e.forward(self.dirs["deberta"], rows)]
        resp = self.stub.Classify(pb.ClassifyRequest(model="deberta", texts=TEXTS), timeout=30)
        for text, result, lg in zip(TEXTS, resp.results, logits):
            with self.subTest(text=text):
                self.assertIsNone(e2e.ranking_mismatch([(l.label, l.score) for l in result.labels],
                                                       e2e.classify_oracle(lg), TOL))

    def test_albert_answers_are_slices_of_the_original_contexts(self):
        resp = self.stub.Answer(pb.AnswerRequest(model="albert_qa", question=QUESTION, contexts=CONTEXTS, top_k=5,
                                                 null_score_diff_threshold=1e9), timeout=30)
        self.assertGreater(len(resp.answers), 0)
        for a in resp.answers:
            context = CONTEXTS[a.context_index]
            self.assertLess(a.start_char, a.end_char)
            self.assertLessEqual(a.end_char, len(context))
            # Offsets point into the user's text, not the lowercased/NFKD one.
            self.assertEqual(a.text, context[a.start_char:a.end_char])
            self.assertEqual(a.text, a.text.strip())
            self.assertGreater(a.score, 0.0)
            self.assertLessEqual(a.score, 1.0)


if __name__ == "__main__":
    unittest.main()
