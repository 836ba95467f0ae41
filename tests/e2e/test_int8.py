"""`dserve serve --dtype int8` (issue 19): one server with a DeBERTa and an
ALBERT classifier (tests/data/make_test_models.py: the random-weight goldens),
their dense layers quantized to int8 at load.

ListModels reports dtype int8 for both. Each Classify result is compared with
`dserve forward --dtype int8` on the same ids, one sequence per batch: int8
quantizes each sequence over its own rows, so the server's batching cannot
change a text's result beyond float32 rounding that int8 rounding may amplify
(probabilities within 0.02, ranking exact but for ties within that). And the
int8 server keeps fp32's top label wherever fp32's top-2 probabilities are at
least 0.1 apart (docs/models.md "--dtype": logits move by a few percent)."""
import json
import os
import subprocess
import sys
import unittest

import e2e_support as e2e
from e2e_support import pb

sys.path.insert(0, os.path.join(e2e.SOURCE, "tests", "model", "tokenizer"))
import gen_albert_oracle as albert_oracle  # noqa: E402

ALBERT_LABELS = ["billing", "refund", "shipping", "other"]
ALBERT_CLS, ALBERT_SEP = 2, 3
TEXTS = [
    "The parcel never arrived and I want my MONEY back.",
    "please reset my password, I cannot log in",
    "double charged on my card yesterday",
    "where is my order",
    "a",
    "cancel my subscription and refund the last invoice because the delivery address was wrong again",
]
SAME_TOL = 0.02
CLEAR_MARGIN = 0.1


def forward(model_dir, rows, dtype):
    payload = "".join(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([e2e.BIN, "forward", "--model", model_dir, "--batch-size", "1", "--dtype", dtype],
                         input=payload, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError("dserve forward --dtype %s failed (%d): %s" % (dtype, out.returncode, out.stderr))
    return [json.loads(l)["logits"] for l in out.stdout.splitlines() if l.strip()]


class Int8ServeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        albert = e2e.albert_test_models()
        cls.dirs = {"albert": albert["classify"], "deberta": e2e.test_models()["classify"]}
        cls.server = e2e.ServerProcess(cls.dirs, ["--dtype", "int8", "--workers", "1"], name="int8").start()
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

    def ids(self, model, text):
        if model == "deberta":
            return e2e.single_ids(text)
        _, pieces = albert_oracle.albert_tokenize(self.sp, text, self.rules)
        return [ALBERT_CLS] + [self.sp.piece_to_id(p) for p in pieces] + [ALBERT_SEP]

    def test_list_models_says_int8(self):
        models = {m.name: m for m in self.stub.ListModels(pb.ListModelsRequest(), timeout=10).models}
        for name in ("albert", "deberta"):
            self.assertEqual(models[name].dtype, "int8", name)

    def test_classify_is_int8_forward_and_keeps_clear_fp32_labels(self):
        for model, labels in (("deberta", e2e.CLASSIFY_LABELS), ("albert", ALBERT_LABELS)):
            rows = [{"input_ids": self.ids(model, t)} for t in TEXTS]
            int8 = forward(self.dirs[model], rows, "int8")
            fp32 = forward(self.dirs[model], rows, "fp32")
            resp = self.stub.Classify(pb.ClassifyRequest(model=model, texts=TEXTS), timeout=60)
            self.assertEqual(len(resp.results), len(TEXTS))
            moved = 0
            for text, result, li, lf in zip(TEXTS, resp.results, int8, fp32):
                with self.subTest(model=model, text=text):
                    got = [(l.label, l.score) for l in result.labels]
                    self.assertIsNone(e2e.ranking_mismatch(got, e2e.classify_oracle(li, labels=labels), SAME_TOL))
                    want = e2e.classify_oracle(lf, labels=labels)
                    if want[0][1] - want[1][1] >= CLEAR_MARGIN:
                        self.assertEqual(got[0][0], want[0][0], f"fp32 {want[:2]}, int8 {got[:2]}")
                    moved += max(abs(a - b) for a, b in zip(li, lf)) > 0
            # The int8 path ran (fp32 would give fp32's logits exactly).
            self.assertGreater(moved, 0, model)


if __name__ == "__main__":
    unittest.main()
