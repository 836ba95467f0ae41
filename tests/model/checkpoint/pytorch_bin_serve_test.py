"""A served pytorch_model.bin twin answers exactly as its safetensors original
(issue 18, done item 3). One `dserve serve` holds the DeBERTa test models
(tests/data/make_test_models.py: goldens + the toy spm.model) and, beside
each, a twin whose only weight file is a pytorch_model.bin that
`torch.save` wrote from the same tensors; every Classify / Rerank / Answer
reply of a twin must equal the original's, scores compared as floats with
==. (Run by ctest with /usr/bin/python3 and the e2e environment.)
"""
import collections
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.join(os.environ["DSERVE_SOURCE_DIR"], "tests", "e2e"))
import e2e_support as e2e  # noqa: E402
import pytorch_bin_test as bins  # noqa: E402
import torch  # noqa: E402

pb = e2e.pb

TEXTS = ["please refund my order", "I forgot my password and cannot log in", "where is my parcel?",
         "my invoice shows the wrong amount", "hello"]
QUERY = "how do I reset my password"
DOCS = ["reset your password from the login page", "refunds take five days", "parcels ship on monday",
        "the password must have eight characters"]
QUESTION = "when do parcels ship?"
CONTEXTS = ["parcels ship on monday and arrive within a week.", "refunds take five days after we receive the item."]


class ServedTwin(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = e2e.scratch_dir("pytorch-bin")
        models = {}
        for task, original in e2e.test_models().items():
            twin = os.path.join(cls.folder, task + "-bin")
            os.makedirs(twin)
            for f in os.listdir(original):
                if f != "model.safetensors":
                    shutil.copyfile(os.path.join(original, f), os.path.join(twin, f))
            sd = bins.load_tensors(os.path.join(original, "model.safetensors"))
            torch.save(sd, os.path.join(twin, "pytorch_model.bin"))
            models[task] = original
            models[task + "-bin"] = twin
        cls.server = e2e.ServerProcess(models, name="pytorch-bin").start()
        cls.stub = cls.server.stub()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.folder, ignore_errors=True)

    def test_twins_are_listed_with_the_same_task_and_labels(self):
        models = {m.name: m for m in self.stub.ListModels(pb.ListModelsRequest()).models}
        for task in ("classify", "answer", "rerank"):
            self.assertEqual(models[task + "-bin"].task, models[task].task)
            self.assertEqual(list(models[task + "-bin"].labels), list(models[task].labels))

    def test_classify_scores_are_identical(self):
        for raw in (False, True):
            want = self.stub.Classify(pb.ClassifyRequest(model="classify", texts=TEXTS, raw_scores=raw))
            got = self.stub.Classify(pb.ClassifyRequest(model="classify-bin", texts=TEXTS, raw_scores=raw))
            self.assertEqual(len(got.results), len(TEXTS))
            for w, g in zip(want.results, got.results):
                self.assertEqual([(l.label, l.score) for l in g.labels], [(l.label, l.score) for l in w.labels])

    def test_rerank_scores_are_identical(self):
        want = self.stub.Rerank(pb.RerankRequest(model="rerank", query=QUERY, documents=DOCS, raw_scores=True))
        got = self.stub.Rerank(pb.RerankRequest(model="rerank-bin", query=QUERY, documents=DOCS, raw_scores=True))
        self.assertEqual([(r.index, r.score) for r in got.results], [(r.index, r.score) for r in want.results])

    def test_answers_are_identical(self):
        want = self.stub.Answer(pb.AnswerRequest(model="answer", question=QUESTION, contexts=CONTEXTS, top_k=3))
        got = self.stub.Answer(pb.AnswerRequest(model="answer-bin", question=QUESTION, contexts=CONTEXTS, top_k=3))
        self.assertEqual(list(got.answers), list(want.answers))
        self.assertGreater(len(want.answers), 0)
        self.assertEqual((got.no_answer, got.no_answer_score), (want.no_answer, want.no_answer_score))


if __name__ == "__main__":
    unittest.main()
