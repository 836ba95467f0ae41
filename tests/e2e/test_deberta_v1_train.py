"""Fine-tuning DeBERTa v1 (issue 26, training): `dserve train --init V1_DIR`
for classify, answer and rerank writes a Hugging Face `model_type: "deberta"`
directory that

- has exactly the v1 tensor names and shapes of the checkpoint it started
  from (the fused, per-head-interleaved in_proj, q_bias, v_bias, pos_proj
  without bias, pos_q_proj; no key bias, no v2 names), config.json with
  model_type "deberta" and the Deberta* architecture, and the BPE tokenizer
  files (vocab.json, merges.txt, tokenizer_config.json) byte for byte;
- an independent reader loads to `dserve forward`'s logits within 1e-4: a
  float64 numpy DeBERTa v1 forward written from
  shared/goldens/deberta_v1/README.md, reading only config.json and
  model.safetensors of the written directory (checked first against the
  goldens, so the reader itself is right);
- with a vanishing learning rate (1e-30: every update is below float32's
  resolution) holds the input's tensors bit for bit, which proves that the
  re-interleaving on save inverts the split on load;
- trained on a learnable toy set, the loss goes down and the weights move.
--task mlm on v1 is refused, naming the family and the task."""
import json
import os
import struct
import subprocess
import unittest

import numpy as np

import e2e_support as e2e

TOL = 1e-4
INTENTS = {"ENTAILMENT": ["the cat sat on the mat", "a dog runs in the park", "birds fly over the sea"],
           "CONTRADICTION": ["nothing is true here", "no, never, not at all", "wrong wrong wrong"],
           "NEUTRAL": ["maybe tomorrow", "perhaps it will rain", "who knows what happens"]}
PREFIXES = ["", "Well, ", "Hey: ", "So "]
QA = [("When does the miller open the doors?",
       "A river runs past the old mill, and the MILLER still opens the doors every morning at six.", "at six"),
      ("Who opens the doors?",
       "A river runs past the old mill, and the MILLER still opens the doors every morning at six.", "the MILLER"),
      ("What runs past the mill?", "A river runs past the old mill, and the miller sleeps.", "A river")]
RERANK = [{"query": "refund my order", "positive": "Refunds are paid back to the card within five days.",
           "negatives": ["Parcels ship from our warehouse in Lyon.", "Opening hours are nine to five."]},
          {"query": "where is my parcel", "positive": "Track a parcel with the link in your shipping e-mail.",
           "negatives": ["Invoices are sent at the end of the month.", "We accept cards and cash."]}]


# ------------------------------------------------ independent v1 reader --

def read_safetensors(path):
    """{name: float64 array} of an F32 safetensors file, and its header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        assert spec["dtype"] == "F32", (name, spec["dtype"])
        begin, end = spec["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(spec["shape"])
    return tensors, {k: v for k, v in header.items() if k != "__metadata__"}


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


ACT = {"gelu": gelu, "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0)}


class V1Reference:
    """DeBERTa v1 as README.md's "The DeBERTa v1 forward" writes it, float64."""

    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.c = json.load(f)
        raw, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
        self.w = {k[len("deberta."):] if k.startswith("deberta.") else k: v.astype(np.float64) for k, v in raw.items()}

    def forward(self, ids, token_types):
        c, w = self.c, self.w
        H, h = c["hidden_size"], c["num_attention_heads"]
        d = H // h
        eps = c.get("layer_norm_eps", 1e-7)
        pat = c.get("pos_att_type") or []
        if isinstance(pat, str):
            pat = [p.strip() for p in pat.lower().split("|")]
        rel = c.get("relative_attention", False)
        max_rel = c.get("max_relative_positions", -1)
        if max_rel < 1:
            max_rel = c["max_position_embeddings"]
        s = np.sqrt(d * (1 + len(pat)))
        L = len(ids)
        x = w["embeddings.word_embeddings.weight"][ids]
        if c.get("position_biased_input", True):
            x = x + w["embeddings.position_embeddings.weight"][:L]
        if c.get("type_vocab_size", 0) > 0:
            x = x + w["embeddings.token_type_embeddings.weight"][token_types]
        if "embeddings.embed_proj.weight" in w:
            x = x @ w["embeddings.embed_proj.weight"].T
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        i = np.arange(L)[:, None]
        j = np.arange(L)[None, :]
        row = np.clip(i - j + max_rel, 0, 2 * max_rel - 1)
        for n in range(c["num_hidden_layers"]):
            p = "encoder.layer.%d." % n
            t = (x @ w[p + "attention.self.in_proj.weight"].T).reshape(L, h, 3 * d)
            q = t[:, :, :d] + w[p + "attention.self.q_bias"].reshape(h, d)
            k = t[:, :, d:2 * d]
            v = t[:, :, 2 * d:] + w[p + "attention.self.v_bias"].reshape(h, d)
            q, k, v = (a.transpose(1, 0, 2) for a in (q, k, v))  # [h, L, d]
            q = q / s
            scores = q @ k.transpose(0, 2, 1)
            if rel:
                R = w["encoder.rel_embeddings.weight"]
                if "c2p" in pat:
                    pk = (R @ w[p + "attention.self.pos_proj.weight"].T).reshape(-1, h, d).transpose(1, 0, 2)
                    scores = scores + np.einsum("hid,hijd->hij", q, pk[:, row, :])
                if "p2c" in pat:
                    pq = (R @ w[p + "attention.self.pos_q_proj.weight"].T + w[p + "attention.self.pos_q_proj.bias"])
                    pq = pq.reshape(-1, h, d).transpose(1, 0, 2) / s
                    scores = scores + np.einsum("hjd,hijd->hij", k, pq[:, row, :])
            scores = scores - scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs = probs / probs.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(1, 0, 2).reshape(L, H)
            a = layer_norm(ctx @ w[p + "attention.output.dense.weight"].T + w[p + "attention.output.dense.bias"] + x,
                           w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps)
            f = ACT[c["hidden_act"]](a @ w[p + "intermediate.dense.weight"].T + w[p + "intermediate.dense.bias"])
            x = layer_norm(f @ w[p + "output.dense.weight"].T + w[p + "output.dense.bias"] + a,
                           w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        if "qa_outputs.weight" in w:
            out = x @ w["qa_outputs.weight"].T + w["qa_outputs.bias"]
            return {"start_logits": out[:, 0], "end_logits": out[:, 1]}
        pooled = ACT[c.get("pooler_hidden_act", "gelu")](x[0] @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
        return {"logits": pooled @ w["classifier.weight"].T + w["classifier.bias"]}


# ------------------------------------------------------------- helpers --

def pos_att_type(config):
    value = config.get("pos_att_type") or []
    return [p.strip() for p in value.lower().split("|")] if isinstance(value, str) else value


def losses(out):
    with open(os.path.join(out, "metrics.csv")) as f:
        rows = [line.strip().split(",") for line in f][1:]
    return [float(r[2]) for r in rows]


def run_train(task, init, data, out, *extra):
    cmd = [e2e.BIN, "train", "--task", task, "--init", init, "--train", data, "--out", out, "--batch-size", "8",
           "--threads", "2", "--seed", "5", "--max-length", "48"] + list(extra)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def train(task, init, data, out, *extra):
    result = run_train(task, init, data, out, *extra)
    if result.returncode != 0:
        raise AssertionError("dserve train %s failed (%d):\n%s" % (task, result.returncode, result.stderr))
    return result.stderr


def forward(model_dir, rows):
    payload = "".join(json.dumps(r) + "\n" for r in rows)
    out = subprocess.run([e2e.BIN, "forward", "--model", model_dir, "--batch-size", "3"],
                         input=payload, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("dserve forward failed (%d): %s" % (out.returncode, out.stderr))
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


class DebertaV1FineTuneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = e2e.scratch_dir("v1-train")
        cls.init = e2e.deberta_v1_test_models()
        classify_data = os.path.join(cls.folder, "classify.jsonl")
        with open(classify_data, "w") as f:
            for prefix in PREFIXES:
                for label, texts in INTENTS.items():
                    for text in texts:
                        f.write(json.dumps({"text": prefix + text, "label": label}) + "\n")
        squad = {"version": "v2.0", "data": [{"title": "t", "paragraphs": []}]}
        for i, (question, context, answer) in enumerate(QA * 3):
            squad["data"][0]["paragraphs"].append({"context": context, "qas": [{
                "id": "q%d" % i, "question": question, "is_impossible": False,
                "answers": [{"text": answer, "answer_start": context.index(answer)}]}]})
        squad_data = os.path.join(cls.folder, "squad.json")
        with open(squad_data, "w") as f:
            json.dump(squad, f)
        rerank_data = os.path.join(cls.folder, "rerank.jsonl")
        with open(rerank_data, "w") as f:
            for _ in range(4):
                for row in RERANK:
                    f.write(json.dumps({"query": row["query"], "passage": row["positive"], "label": 1}) + "\n")
                    for negative in row["negatives"]:
                        f.write(json.dumps({"query": row["query"], "passage": negative, "label": 0}) + "\n")
        cls.data = {"classify": classify_data, "answer": squad_data, "rerank": rerank_data}
        cls.tasks = ("classify", "answer", "rerank")
        cls.out, cls.frozen = {}, {}
        for task in cls.tasks:
            cls.out[task] = os.path.join(cls.folder, task)
            train(task, cls.init[task], cls.data[task], cls.out[task], "--lr", "2e-3", "--epochs", "6")
            # lr 1e-30: every AdamW update (and decay) rounds away in float32.
            cls.frozen[task] = os.path.join(cls.folder, task + "-frozen")
            train(task, cls.init[task], cls.data[task], cls.frozen[task], "--lr", "1e-30", "--max-steps", "2")

    def rows(self, model_dir, seed):
        with open(os.path.join(model_dir, "config.json")) as f:
            config = json.load(f)
        rng = np.random.default_rng(seed)
        rows = []
        for length in (5, 17, 40):  # 40 > qa_clamped's max_relative_positions 16: clamped distances
            ids = [1] + [int(t) for t in rng.integers(4, config["vocab_size"], length - 2)] + [2]
            types = [0] * (length // 2) + [1] * (length - length // 2)
            rows.append({"input_ids": ids, "token_type_ids": types})
        return rows

    def assert_reader_agrees(self, model_dir):
        ref = V1Reference(model_dir)
        rows = self.rows(model_dir, 7)
        for row, got in zip(rows, forward(model_dir, rows)):
            want = ref.forward(np.array(row["input_ids"]), np.array(row["token_type_ids"]))
            self.assertEqual(set(want), set(k for k in got if k != "last_hidden_state"))
            for key, value in want.items():
                np.testing.assert_allclose(np.array(got[key]), value, atol=TOL, rtol=TOL, err_msg=model_dir + " " + key)

    def test_reader_reproduces_the_goldens(self):
        # The reader is right before it judges anything: HF's outputs.
        for name in ("cls_mnli", "qa_clamped", "rerank_c2p_factorized"):
            folder = os.path.join(e2e.SHARED, "goldens", "deberta_v1", name)
            with open(os.path.join(folder, "golden.json")) as f:
                golden = json.load(f)
            ref = V1Reference(folder)
            for case in golden["cases"][:4]:
                got = ref.forward(np.array(case["input_ids"]), np.array(case["token_type_ids"]))
                for key, value in got.items():
                    np.testing.assert_allclose(value, np.array(case[key]), atol=1e-5, err_msg=name + " " + key)

    def test_written_directories_have_the_v1_names_and_shapes(self):
        for task in self.tasks:
            for out in (self.out[task], self.frozen[task]):
                best = os.path.join(out, "best")
                _, want = read_safetensors(os.path.join(self.init[task], "model.safetensors"))
                _, got = read_safetensors(os.path.join(best, "model.safetensors"))
                self.assertEqual({k: v["shape"] for k, v in got.items()}, {k: v["shape"] for k, v in want.items()},
                                 best)
                for name in got:
                    self.assertNotIn("query_proj", name)
                    self.assertNotIn("key_proj", name)
                    self.assertNotIn("pos_proj.bias", name)
                    self.assertFalse(name.endswith("k_bias"), name)
                with open(os.path.join(best, "config.json")) as f:
                    config = json.load(f)
                with open(os.path.join(self.init[task], "config.json")) as f:
                    source = json.load(f)
                self.assertEqual(config["model_type"], "deberta")
                self.assertEqual(config["architectures"],
                                 ["DebertaForQuestionAnswering" if task == "answer" else "DebertaForSequenceClassification"])
                for field in ("max_relative_positions", "position_biased_input", "relative_attention",
                              "layer_norm_eps", "hidden_size", "type_vocab_size"):
                    self.assertEqual(config.get(field), source.get(field), field)
                # HF: getattr(config, "embedding_size", hidden_size); the writer spells the default out.
                self.assertEqual(config.get("embedding_size") or config["hidden_size"],
                                 source.get("embedding_size") or source["hidden_size"])
                # The writer lists pos_att_type (HF's DebertaConfig reads a list or a "c2p|p2c" string alike).
                self.assertEqual(pos_att_type(config), pos_att_type(source))
                for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
                    with open(os.path.join(best, name), "rb") as a, open(os.path.join(self.init[task], name), "rb") as b:
                        self.assertEqual(a.read(), b.read(), name)

    def test_vanishing_lr_keeps_every_tensor_bit_for_bit(self):
        for task in self.tasks:
            want, _ = read_safetensors(os.path.join(self.init[task], "model.safetensors"))
            got, _ = read_safetensors(os.path.join(self.frozen[task], "best", "model.safetensors"))
            self.assertEqual(set(got), set(want))
            for name, value in want.items():
                self.assertTrue(np.array_equal(got[name].view(np.uint32), value.view(np.uint32)), (task, name))

    def test_independent_reader_matches_forward_on_the_written_checkpoints(self):
        for task in self.tasks:
            self.assert_reader_agrees(os.path.join(self.out[task], "best"))

    def test_training_learns(self):
        for task in self.tasks:
            curve = losses(self.out[task])
            self.assertGreaterEqual(len(curve), 6, task)
            k = max(2, len(curve) // 4)
            self.assertLess(np.mean(curve[-k:]), np.mean(curve[:k]), (task, curve))
            # ... and the weights moved, in_proj among them.
            want, _ = read_safetensors(os.path.join(self.init[task], "model.safetensors"))
            got, _ = read_safetensors(os.path.join(self.out[task], "best", "model.safetensors"))
            name = "deberta.encoder.layer.0.attention.self.in_proj.weight"
            self.assertGreater(np.abs(got[name] - want[name]).max(), 1e-4, task)
        # The classifier kept the checkpoint's labels (and head) and fits them.
        with open(os.path.join(self.out["classify"], "best", "config.json")) as f:
            labels = set(json.load(f)["id2label"].values())
        self.assertEqual(labels, set(INTENTS))

    def test_resume_continues_a_v1_run(self):
        # The trainer state holds v1's names too: a resumed run reloads it.
        out = os.path.join(self.folder, "resume")
        train("rerank", self.init["rerank"], self.data["rerank"], out, "--lr", "1e-3", "--max-steps", "2",
              "--save-every", "1")
        train("rerank", self.init["rerank"], self.data["rerank"], out, "--lr", "1e-3", "--max-steps", "4",
              "--save-every", "1", "--resume")
        self.assertEqual(len(losses(out)), 4)
        self.assert_reader_agrees(os.path.join(out, "best"))

    def test_mlm_is_refused_naming_v1(self):
        text = os.path.join(self.folder, "text.txt")
        with open(text, "w") as f:
            f.write("some text for masked language modelling\n")
        result = run_train("mlm", self.init["classify"], text, os.path.join(self.folder, "mlm"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn('model_type "deberta"', result.stderr)
        self.assertIn("--task mlm is not supported", result.stderr)


if __name__ == "__main__":
    unittest.main()
