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

--task mlm (continued masked-LM pretraining, DebertaForMaskedLM, no Enhanced
Mask Decoder) from a checkpoint without an MLM head draws the head fresh and
writes it under HF's legacy names (cls.predictions.transform.dense,
.transform.LayerNorm, .bias, and the tied .decoder.weight = the word
embeddings, .decoder.bias = .bias), architectures DebertaForMaskedLM; the
reader (with DebertaForMaskedLM's head) reproduces dserve's MLM loss on the
masked batches of a run from the written directory, whose vanishing-lr
re-save is bit for bit the same; a head under the newer
lm_predictions.lm_head.* names is loaded from there; the loss falls."""
import json
import os
import shutil
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
MLM_TEXT = ["The old mill opens its doors every morning at six.",
            "A river runs past the village and the children throw flat stones.",
            "The miller has been there for two hundred years.",
            "In the afternoon the light on the water turns golden."]
MLM_HEAD = ["cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
            "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
            "cls.predictions.bias", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias"]
RERANK = [{"query": "refund my order", "positive": "Refunds are paid back to the card within five days.",
           "negatives": ["Parcels ship from our warehouse in Lyon.", "Opening hours are nine to five."]},
          {"query": "where is my parcel", "positive": "Track a parcel with the link in your shipping e-mail.",
           "negatives": ["Invoices are sent at the end of the month.", "We accept cards and cash."]}]


# ------------------------------------------------ independent v1 reader --

def read_safetensors(path, with_metadata=False):
    """{name: array} of an F32 (I64: --dump-batches) safetensors file, and its header."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        assert spec["dtype"] in ("F32", "I64"), (name, spec["dtype"])
        begin, end = spec["data_offsets"]
        dtype = "<f4" if spec["dtype"] == "F32" else "<i8"
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(spec["shape"])
    if with_metadata:
        return tensors, header.get("__metadata__", {})
    return tensors, {k: v for k, v in header.items() if k != "__metadata__"}


def write_safetensors(path, tensors):
    """F32 safetensors, tensors in sorted-name order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        blob = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


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
        x = self.encode(ids, token_types)
        w, c = self.w, self.c
        if "qa_outputs.weight" in w:
            out = x @ w["qa_outputs.weight"].T + w["qa_outputs.bias"]
            return {"start_logits": out[:, 0], "end_logits": out[:, 1]}
        pooled = ACT[c.get("pooler_hidden_act", "gelu")](x[0] @ w["pooler.dense.weight"].T + w["pooler.dense.bias"])
        return {"logits": pooled @ w["classifier.weight"].T + w["classifier.bias"]}

    def mlm_logits(self, ids, token_types):
        """DebertaForMaskedLM (no EMD): LN(act(dense(H_N))) · E_wordᵀ + bias, [L, V];
        the head under cls.predictions.* (legacy) or lm_predictions.lm_head.*."""
        x = self.encode(ids, token_types)
        w, c = self.w, self.c
        if "cls.predictions.bias" in w:
            dense, norm, bias = "cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", \
                "cls.predictions.bias"
        else:
            dense, norm, bias = "lm_predictions.lm_head.dense", "lm_predictions.lm_head.LayerNorm", \
                "lm_predictions.lm_head.bias"
        y = ACT[c["hidden_act"]](x @ w[dense + ".weight"].T + w[dense + ".bias"])
        y = layer_norm(y, w[norm + ".weight"], w[norm + ".bias"], c.get("layer_norm_eps", 1e-7))
        return y @ w["embeddings.word_embeddings.weight"].T + w[bias]

    def encode(self, ids, token_types):
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
        return x


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
        mlm_data = os.path.join(cls.folder, "text.txt")
        with open(mlm_data, "w") as f:
            for _ in range(6):
                f.write("".join(line + "\n" for line in MLM_TEXT) + "\n")
        cls.data = {"classify": classify_data, "answer": squad_data, "rerank": rerank_data, "mlm": mlm_data}
        cls.tasks = ("classify", "answer", "rerank")
        cls.out, cls.frozen = {}, {}
        for task in cls.tasks:
            cls.out[task] = os.path.join(cls.folder, task)
            train(task, cls.init[task], cls.data[task], cls.out[task], "--lr", "2e-3", "--epochs", "6")
            # lr 1e-30: every AdamW update (and decay) rounds away in float32.
            cls.frozen[task] = os.path.join(cls.folder, task + "-frozen")
            train(task, cls.init[task], cls.data[task], cls.frozen[task], "--lr", "1e-30", "--max-steps", "2")
        # MLM from the v1 classifier (the released configs' form: no absolute positions, "c2p|p2c"), which
        # has no MLM head; then a vanishing-lr run from what it wrote (its dropout set to 0 in config.json,
        # so that the training loss is the model's), dumping its masked batches.
        cls.out["mlm"] = os.path.join(cls.folder, "mlm")
        cls.mlm_log = train("mlm", cls.init["classify"], mlm_data, cls.out["mlm"], "--lr", "2e-3", "--epochs", "6")
        no_dropout = os.path.join(cls.folder, "mlm-no-dropout")
        shutil.copytree(os.path.join(cls.out["mlm"], "best"), no_dropout)
        with open(os.path.join(no_dropout, "config.json")) as f:
            config = json.load(f)
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "pooler_dropout", "cls_dropout"):
            if key in config:
                config[key] = 0.0
        with open(os.path.join(no_dropout, "config.json"), "w") as f:
            json.dump(config, f)
        cls.frozen["mlm"] = os.path.join(cls.folder, "mlm-frozen")
        cls.mlm_dump = os.path.join(cls.folder, "mlm-dump")
        cls.mlm_frozen_log = train("mlm", no_dropout, mlm_data, cls.frozen["mlm"],
                                   "--lr", "1e-30", "--max-steps", "3", "--dump-batches", cls.mlm_dump)

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

    def test_mlm_writes_a_v1_masked_lm_under_hf_names(self):
        self.assertIn("MLM head initialised", self.mlm_log)  # the classifier has no MLM head
        self.assertIn("no Enhanced Mask Decoder", self.mlm_log)
        best = os.path.join(self.out["mlm"], "best")
        want, _ = read_safetensors(os.path.join(self.init["classify"], "model.safetensors"))
        got, shapes = read_safetensors(os.path.join(best, "model.safetensors"))
        encoder = {k for k in want if k.startswith("deberta.")}
        self.assertEqual(set(got), encoder | set(MLM_HEAD))
        for name in encoder:
            self.assertEqual(shapes[name]["shape"], list(want[name].shape), name)
        H, V = 64, 1000
        self.assertEqual(shapes["cls.predictions.transform.dense.weight"]["shape"], [H, H])
        self.assertEqual(shapes["cls.predictions.bias"]["shape"], [V])
        # The decoder is tied: HF's state_dict holds the word embeddings and the bias under its names too.
        self.assertTrue(np.array_equal(got["cls.predictions.decoder.weight"],
                                       got["deberta.embeddings.word_embeddings.weight"]))
        self.assertTrue(np.array_equal(got["cls.predictions.decoder.bias"], got["cls.predictions.bias"]))
        with open(os.path.join(best, "config.json")) as f:
            config = json.load(f)
        self.assertEqual(config["model_type"], "deberta")
        self.assertEqual(config["architectures"], ["DebertaForMaskedLM"])
        self.assertTrue(config.get("legacy", True))
        self.assertFalse(config["dserve"]["training"]["emd"])
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            with open(os.path.join(best, name), "rb") as a, open(os.path.join(self.init["classify"], name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_reader_reproduces_dserves_mlm_loss_on_the_written_directory(self):
        # A run from the written directory loads its head (nothing initialised); at lr 1e-30 its weights
        # stay those of the directory, so every dumped step's loss is that directory's MLM loss on the
        # step's masked batches: mean cross-entropy of the reader's logits over the targets.
        self.assertNotIn("initialised", self.mlm_frozen_log)
        ref = V1Reference(os.path.join(self.out["mlm"], "best"))
        steps = sorted(f for f in os.listdir(self.mlm_dump) if f.startswith("step_"))
        self.assertEqual(len(steps), 3)
        worst = 0.0
        for step in steps:
            tensors, meta = read_safetensors(os.path.join(self.mlm_dump, step), with_metadata=True)
            info = json.loads(meta["dserve"])
            total, count = 0.0, 0
            for m in range(info["micro_batches"]):
                ids, mask, labels = (tensors["m%d.%s" % (m, k)] for k in ("input_ids", "attention_mask", "labels"))
                for row in range(ids.shape[0]):
                    n = int(mask[row].sum())
                    logits = ref.mlm_logits(ids[row, :n], np.zeros(n, dtype=np.int64))
                    for i in np.nonzero(labels[row, :n] >= 0)[0]:
                        z = logits[i] - logits[i].max()
                        total -= z[labels[row, i]] - np.log(np.exp(z).sum())
                        count += 1
            self.assertEqual(count, info["targets"], step)
            self.assertGreater(count, 0)
            self.assertAlmostEqual(total / count, info["loss"], delta=TOL, msg=step)
            worst = max(worst, abs(total / count - info["loss"]))
        print("\nv1 MLM: reader vs dserve loss over %d dumped steps: max |diff| %.3g" % (len(steps), worst))
        # ... and re-saved bit for bit: the head round-trips under its names.
        want, _ = read_safetensors(os.path.join(self.out["mlm"], "best", "model.safetensors"))
        got, _ = read_safetensors(os.path.join(self.frozen["mlm"], "best", "model.safetensors"))
        self.assertEqual(set(got), set(want))
        for name, value in want.items():
            self.assertTrue(np.array_equal(got[name].view(np.uint32), value.view(np.uint32)), name)

    def test_mlm_head_under_the_newer_lm_predictions_names_is_loaded(self):
        # transformers' non-legacy DebertaForMaskedLM (and Microsoft's files) name the head
        # lm_predictions.lm_head.{dense, LayerNorm, bias}; such a checkpoint (config legacy true) is read
        # from those names and written under cls.predictions.*, values unchanged at lr 1e-30.
        source = os.path.join(self.out["mlm"], "best")
        renamed = os.path.join(self.folder, "mlm-lm-predictions")
        os.makedirs(renamed, exist_ok=True)
        for name in os.listdir(source):
            if name != "model.safetensors":
                with open(os.path.join(source, name), "rb") as a, open(os.path.join(renamed, name), "wb") as b:
                    b.write(a.read())
        tensors, _ = read_safetensors(os.path.join(source, "model.safetensors"))
        newer = {k: v for k, v in tensors.items() if not k.startswith("cls.")}
        for old, new in (("cls.predictions.transform.dense", "lm_predictions.lm_head.dense"),
                         ("cls.predictions.transform.LayerNorm", "lm_predictions.lm_head.LayerNorm")):
            for part in ("weight", "bias"):
                newer[new + "." + part] = tensors[old + "." + part]
        newer["lm_predictions.lm_head.bias"] = tensors["cls.predictions.bias"]
        write_safetensors(os.path.join(renamed, "model.safetensors"), newer)
        out = os.path.join(self.folder, "mlm-from-lm-predictions")
        log = train("mlm", renamed, self.data["mlm"], out, "--lr", "1e-30", "--max-steps", "1")
        self.assertNotIn("initialised", log)
        got, _ = read_safetensors(os.path.join(out, "best", "model.safetensors"))
        self.assertEqual(set(got), set(tensors))
        for name, value in tensors.items():
            self.assertTrue(np.array_equal(got[name].view(np.uint32), value.view(np.uint32)), name)

    def test_mlm_training_learns(self):
        curve = losses(self.out["mlm"])
        self.assertGreaterEqual(len(curve), 6)
        k = max(2, len(curve) // 4)
        self.assertLess(np.mean(curve[-k:]), np.mean(curve[:k]) - 0.5, curve)
        want, _ = read_safetensors(os.path.join(self.init["classify"], "model.safetensors"))
        got, _ = read_safetensors(os.path.join(self.out["mlm"], "best", "model.safetensors"))
        name = "deberta.encoder.layer.1.attention.self.in_proj.weight"
        self.assertGreater(np.abs(got[name] - want[name]).max(), 1e-4)


if __name__ == "__main__":
    unittest.main()
