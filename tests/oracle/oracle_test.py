#!/usr/bin/python3
"""ctest driver of the exact-loss oracle (issue 18): trains a tiny model with
`dserve train --dump-batches` for 20 steps in fp32 with dropout 0, replays
the dump with tests/oracle/oracle.py (an independent PyTorch loop) and
checks that every step's loss agrees within 1e-4. Then replays again with
deliberate perturbations (PERTURBATIONS: another learning rate, other
weight-decay groups, no clipping, per-micro-batch means, no EMD, the other
lr schedule, no layer-wise lr decay) and checks that each is caught, so the
comparison is known to be sharp.

usage: oracle_test.py TASK DSERVE_BINARY SHARED_DIR SCRATCH_DIR
TASK: classify | answer | rerank | rerank_listwise | mlm (the issue's four objectives), classify_multilabel |
      mlm_sop | classify_shared | classify_cosine | classify_llrd | classify_ddp | mlm_ddp (more DeBERTa),
      albert_classify | albert_answer | albert_rerank (the ALBERT family, fine-tuned from --init) |
      classify_bf16 | answer_bf16 | mlm_bf16 (--bf16 against the oracle under the same autocast policy) |
      v1_classify | v1_mlm (DeBERTa v1, issue 26: fine-tuning / continued MLM pretraining from --init; the
      oracle's v1 forward is first checked against shared/goldens/deberta_v1, and the dump's initial
      weights against the --init checkpoint's fused in_proj)
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

STEPS = 20
TOLERANCE = 1e-4
# bf16 runs (--bf16): two bf16 implementations round different intermediate
# tensors (8 mantissa bits, relative step 3.9e-3): our fused QKV and
# relative-table GEMMs and fp32 softmax against the oracle's per-matrix GEMMs,
# scaled keys and bf16 softmax. Over 20 steps their losses drift apart by up
# to ~1.2e-3 (measured: classify 4.1e-4, answer 1.2e-3, mlm 7.3e-4), so the
# run is held to BF16_TOLERANCE, which another learning rate exceeds
# (0.025 / 0.15 / 0.056). That --bf16 changed the forward at all is checked on
# the first steps, while the weights are nearly the same: an oracle without
# autocast must be off by more than BF16_MIN_EFFECT there (measured: 3.2e-5 /
# 1.3e-4 / 5.4e-5; the bf16 oracle is off by 2.4e-7 / 3.8e-6 / 8.3e-5).
BF16_EARLY_STEPS = 3
BF16_MIN_EFFECT = 3e-6
BF16_TOLERANCE = 1e-2

WORDS = ("the old mill opens its doors every morning river runs past village bank children throw flat stones "
         "that skip on water in afternoon light turns golden has been there for two hundred years miller at six "
         "invoice bill charge package delivery parcel password login account refund money return").split()


def words(i, n):
    return " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(n))


def small_config(shared, golden, task, hidden=32, heads=4, layers=2, variant=None):
    with open(os.path.join(shared, "goldens", "model", golden, "config.json")) as f:
        c = json.load(f)
    c.update({"vocab_size": 320, "hidden_size": hidden, "pooler_hidden_size": hidden, "num_attention_heads": heads,
              "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "hidden_dropout_prob": 0.0,
              "attention_probs_dropout_prob": 0.0, "pooler_dropout": 0})
    if "embedding_size" in c:
        c["embedding_size"] = hidden // 2
    for k in ("id2label", "label2id"):
        c.pop(k, None)
    if variant == "shared":
        # ALBERT-style cross-layer sharing (dserve.share_layers) and HF's ConvLayer
        c["dserve"] = {"share_layers": True}
        c.update({"num_hidden_layers": 3, "conv_kernel_size": 3, "conv_act": "gelu"})
    return c


def write_classify(path):
    labels = ["billing", "shipping", "refund"]
    with open(path, "w") as f:
        # 46 = 5 steps of 2 x 4 and a last step of 4 + 2: a step whose micro-batches differ in size
        for i in range(46):
            f.write(json.dumps({"text": words(i, 4 + i % 9) + " " + labels[i % 3], "label": labels[i % 3]}) + "\n")


def write_classify_skewed(path):
    # 30 / 12 / 4 examples: --class-weights balanced weighs refund 7.5x billing
    labels = ["billing"] * 30 + ["shipping"] * 12 + ["refund"] * 4
    with open(path, "w") as f:
        for i, label in enumerate(labels[k] for k in sorted(range(46), key=lambda k: (k * 17) % 46)):
            f.write(json.dumps({"text": words(i, 4 + i % 9) + " " + label, "label": label}) + "\n")


def balanced_weights(path, label_order):
    """scikit-learn's "balanced" N / (K x N_c), rescaled to mean 1 over the examples."""
    with open(path) as f:
        ys = [json.loads(line)["label"] for line in f if line.strip()]
    n, k = len(ys), len(label_order)
    w = {c: n / (k * ys.count(c)) for c in label_order}
    mean = sum(w[y] for y in ys) / n
    return [w[c] / mean for c in label_order]


def write_classify_multilabel(path):
    labels = ["billing", "shipping", "refund"]
    with open(path, "w") as f:
        for i in range(46):
            tags = [labels[i % 3]] + ([labels[(i + 1) % 3]] if i % 4 == 0 else [])
            f.write(json.dumps({"text": words(i, 4 + i % 9) + " " + " ".join(tags), "labels": tags}) + "\n")


def write_answer(path):
    paragraphs = []
    for p in range(6):
        colour = ["red", "green", "blue"][p % 3]
        context = "%s The %s is %s and it costs %d pounds. %s" % (words(p, 10), WORDS[p], colour, 3 + p,
                                                                   words(p + 3, 14))
        qas = [{"id": "q%d_0" % p, "question": "What colour is the %s?" % WORDS[p],
                "answers": [{"text": colour, "answer_start": context.index(" %s and" % colour) + 1}],
                "is_impossible": False},
               {"id": "q%d_1" % p, "question": "How much does it cost?",
                "answers": [{"text": "%d pounds" % (3 + p), "answer_start": context.index("%d pounds" % (3 + p))}],
                "is_impossible": False},
               {"id": "q%d_2" % p, "question": "Who built it?", "answers": [], "is_impossible": True}]
        paragraphs.append({"context": context, "qas": qas})
    with open(path, "w") as f:
        json.dump({"version": "v2.0", "data": [{"title": "toy", "paragraphs": paragraphs}]}, f)


def write_rerank(path):
    with open(path, "w") as f:
        for q in range(8):
            query = words(q, 3)
            for d in range(4):
                # Some passages are long enough to be split into several chunks.
                n = 30 if (q + d) % 3 == 0 else 6 + d
                passage = words(q + 5 * d, n)
                f.write(json.dumps({"query": query, "passage": passage, "label": int(d == q % 4)}) + "\n")


def write_mlm(path):
    with open(path, "w") as f:
        for doc in range(8):
            for line in range(4):
                f.write(words(doc * 4 + line, 6 + (doc + line) % 7).capitalize() + ".\n")
            f.write("\n")


def albert_init(shared, name, work):
    """An ALBERT test checkpoint (tests/data/make_test_models.py: a golden +
    an ALBERT-recipe spiece.model) with every dropout set to 0, in work/init."""
    models = os.path.join(work, "models")  # per test: tests may run in parallel
    if not os.path.exists(os.path.join(models, name, "spiece.model")):
        subprocess.run([sys.executable, os.path.join(HERE, "..", "data", "make_test_models.py"), shared, models],
                       check=True, stdout=subprocess.DEVNULL)
    init = os.path.join(work, "init")
    shutil.copytree(os.path.join(models, name), init)
    with open(os.path.join(init, "config.json")) as f:
        config = json.load(f)
    for key in oracle.DROPOUT_KEYS:
        if key in config:
            config[key] = 0.0
    with open(os.path.join(init, "config.json"), "w") as f:
        json.dump(config, f)
    return init


def v1_init(shared, name, work):
    """A DeBERTa v1 test checkpoint (tests/data/make_v1_test_models.py: a
    shared/goldens/deberta_v1 checkpoint + a BPE tokenizer cut to its
    vocabulary) with every dropout set to 0, in work/init."""
    models = os.path.join(work, "models")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "data", "make_v1_test_models.py"), shared, models],
                   check=True, stdout=subprocess.DEVNULL)
    init = os.path.join(work, "init")
    shutil.copytree(os.path.join(models, name), init)
    with open(os.path.join(init, "config.json")) as f:
        config = json.load(f)
    for key in oracle.DROPOUT_KEYS + ("cls_dropout",):
        if key in config:
            config[key] = 0.0
    with open(os.path.join(init, "config.json"), "w") as f:
        json.dump(config, f)
    return init


def check_v1_oracle_on_goldens(shared):
    """The oracle's v1 forward reproduces HF's outputs (golden.json) before it
    judges dserve: every case of the three v1 goldens, float32, 1e-4."""
    import torch
    root = os.path.join(shared, "goldens", "deberta_v1")
    worst = 0.0
    for name in ("cls_mnli", "qa_clamped", "rerank_c2p_factorized"):
        with open(os.path.join(root, name, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(root, name, "golden.json")) as f:
            golden = json.load(f)
        raw, _ = oracle.read_safetensors(os.path.join(root, name, "model.safetensors"))
        task = "answer" if "qa_outputs.weight" in raw else ("rerank" if len(config["id2label"]) == 1 else "classify")
        model = oracle.V1OracleModel(dict(config, hidden_dropout_prob=0, attention_probs_dropout_prob=0), task, False)
        missing = oracle.v1.load_hf_tensors(model, {k: v.to(torch.float32) for k, v in raw.items()})
        if missing:
            raise AssertionError("%s: the oracle has parameters the golden lacks: %s" % (name, missing))
        with torch.no_grad():
            for case in golden["cases"]:
                ids = torch.tensor([case["input_ids"]])
                mask = torch.tensor([case["attention_mask"]])
                tt = torch.tensor([case["token_type_ids"]])
                if task == "answer":
                    got = model.qa_logits(ids, mask, tt)[0]
                    want = torch.tensor([case["start_logits"], case["end_logits"]]).t()
                else:
                    got, want = model.cls_logits(ids, mask, tt)[0], torch.tensor(case["logits"])
                worst = max(worst, float((got.double() - want.double()).abs().max()))
    print("v1 oracle forward against shared/goldens/deberta_v1 (HF): max |diff| %.3g (tolerance %g)" % (
        worst, TOLERANCE))
    return worst <= TOLERANCE


def check_v1_initial_weights(init, dump):
    """The dump's initial tensors are the --init checkpoint's: each layer's
    query/key/value_proj re-interleaved per head (the oracle's in_proj) equal
    the fused in_proj bit for bit, and every other encoder tensor is equal
    (the task head may have been drawn fresh: another label set)."""
    import torch
    want, _ = oracle.read_safetensors(os.path.join(init, "model.safetensors"))
    got, _ = oracle.read_safetensors(os.path.join(dump, "initial.safetensors"))
    with open(os.path.join(init, "config.json")) as f:
        config = json.load(f)
    H, h = config["hidden_size"], config["num_attention_heads"]
    d = H // h
    problems, compared = [], 0
    for name, value in want.items():
        if not name.startswith("deberta."):
            continue
        if name.endswith("attention.self.in_proj.weight"):
            prefix = name[: -len("in_proj.weight")]
            parts = [got[prefix + p + ".weight"] for p in ("query_proj", "key_proj", "value_proj")]
            value2 = torch.stack([p.view(h, d, H) for p in parts], 1).reshape(3 * H, H)
        elif name in got:
            value2 = got[name]
        else:
            continue
        compared += 1
        if not torch.equal(value2, value):
            problems.append(name)
    print("v1 initial weights: %d checkpoint encoder tensors compared with the dump, %d differ %s" % (
        compared, len(problems), problems[:4]))
    return not problems and compared > 0


TASKS = {
    # task: (golden config, data writer, file name, extra train options)
    "classify": ("cls_factorized", write_classify, "train.jsonl", ["--max-length", "24"]),
    "answer": ("qa_c2p_only", write_answer, "train.json", ["--max-length", "32", "--doc-stride", "12"]),
    "rerank": ("rerank_p2c_nonorm", write_rerank, "train.jsonl", ["--max-length", "24", "--doc-stride", "8"]),
    "rerank_listwise": ("rerank_p2c_nonorm", write_rerank, "train.jsonl",
                        ["--max-length", "24", "--doc-stride", "8", "--listwise", "--batch-size", "2"]),
    "mlm": ("cls_factorized", write_mlm, "train.txt", ["--max-length", "24"]),
    # not among the four objectives of the issue, but trained by dserve too
    "classify_multilabel": ("cls_factorized", write_classify_multilabel, "train.jsonl", ["--max-length", "24"]),
    "mlm_sop": ("cls_factorized", write_mlm, "train.txt", ["--max-length", "24", "--objective", "sop"]),
    "classify_shared": ("cls_factorized", write_classify, "train.jsonl", ["--max-length", "24"]),
    # --class-weights balanced on skewed intents (30 / 12 / 4)
    "classify_weighted": ("cls_factorized", write_classify_skewed, "train.jsonl",
                          ["--max-length", "24", "--class-weights", "balanced"]),
    # --bf16 (CPU autocast): the oracle replays under the same precision
    # policy (oracle.Bf16Autocast); BF16_TOLERANCE below
    "classify_bf16": ("cls_factorized", write_classify, "train.jsonl", ["--max-length", "24", "--bf16"]),
    "answer_bf16": ("qa_c2p_only", write_answer, "train.json",
                    ["--max-length", "32", "--doc-stride", "12", "--bf16"]),
    "mlm_bf16": ("cls_factorized", write_mlm, "train.txt", ["--max-length", "24", "--bf16"]),
    # --lr-schedule cosine (HF get_cosine_schedule_with_warmup)
    "classify_cosine": ("cls_factorized", write_classify, "train.jsonl",
                        ["--max-length", "24", "--lr-schedule", "cosine"]),
    # --layer-lr-decay 0.8 (2 layers: head x1, layer 1 x0.8, layer 0 x0.64, embeddings x0.512)
    "classify_llrd": ("cls_factorized", write_classify, "train.jsonl",
                      ["--max-length", "24", "--layer-lr-decay", "0.8"]),
    # the second family: fine-tuning shared/goldens/albert checkpoints (--init)
    # (lr 2e-3: at 5e-3 albert_answer's fp32 rounding noise grew to 3.6e-5 by step 14, too close to 1e-4)
    "albert_classify": ("albert_classify", write_classify, "train.jsonl", ["--max-length", "24", "--lr", "2e-3"]),
    "albert_classify_bf16": ("albert_classify", write_classify, "train.jsonl",
                             ["--max-length", "24", "--lr", "2e-3", "--bf16"]),
    "albert_answer": ("albert_answer", write_answer, "train.json",
                      ["--max-length", "32", "--doc-stride", "12", "--lr", "2e-3"]),
    "albert_rerank": ("albert_classify", write_rerank, "train.jsonl",
                      ["--max-length", "24", "--doc-stride", "8", "--lr", "2e-3"]),
    # data parallel (2 Gloo ranks): the step is every rank's micro-batches,
    # normalised over all of them (issue 18 defect 1: sum of tokens across ranks)
    "classify_ddp": ("cls_factorized", write_classify, "train.jsonl",
                     ["--max-length", "24", "--nproc", "2", "--threads", "1"]),
    "mlm_ddp": ("cls_factorized", write_mlm, "train.txt", ["--max-length", "24", "--nproc", "2", "--threads", "1"]),
    # DeBERTa v1 (issue 26), from --init: classify on cls_mnli (c2p|p2c string, no absolute positions),
    # MLM on rerank_c2p_factorized (embedding_size 32 < hidden 64: the legacy head's dense is [E, H] and
    # the tied decoder [V, E]; absolute positions; c2p only), its head drawn fresh (no head in the file)
    "v1_classify": ("v1_classify", write_classify, "train.jsonl", ["--max-length", "24"]),
    "v1_mlm": ("v1_rerank", write_mlm, "train.txt", ["--max-length", "24"]),
}


# Deliberate errors each test must notice (oracle.py --perturb): another lr,
# weight decay on LayerNorm and biases too, no gradient clipping, and where
# the data makes them matter the per-micro-batch mean (issue 18 defect 1;
# classify has a step of 4 + 2 examples, mlm micro-batches differ in masked
# tokens) and the MLM head on H_N instead of the EMD.
PERTURBATIONS = {
    "classify": ["lr", "decay_all", "no_clip", "micro_mean"],
    "answer": ["lr", "decay_all", "no_clip"],
    "rerank": ["lr", "decay_all", "no_clip"],
    "rerank_listwise": ["lr", "decay_all", "no_clip"],
    "mlm": ["lr", "decay_all", "no_clip", "micro_mean", "no_emd"],
    "classify_multilabel": ["lr"],
    "mlm_sop": ["lr", "no_emd"],
    "classify_ddp": ["lr", "micro_mean"],
    "classify_shared": ["lr"],
    "classify_cosine": ["lr", "schedule"],
    "classify_llrd": ["lr", "llrd_off"],
    "albert_classify": ["lr", "decay_all"],
    "albert_answer": ["lr"],
    "albert_rerank": ["lr"],
    "mlm_ddp": ["lr", "micro_mean"],
    "classify_weighted": ["lr", "unweighted"],
    "classify_bf16": ["lr"],  # and "fp32" over the first steps (main)
    "albert_classify_bf16": ["lr"],
    "answer_bf16": ["lr"],
    "mlm_bf16": ["lr"],
    "v1_classify": ["lr", "decay_all", "micro_mean", "v1_scale"],
    "v1_mlm": ["lr", "decay_all", "no_clip", "micro_mean", "v1_scale"],
}


def main():
    task, dserve, shared, scratch = sys.argv[1:5]
    golden, writer, data_name, extra = TASKS[task]
    albert = task.startswith("albert_")
    deberta_v1 = task.startswith("v1_")
    dserve_task = task.split("_")[1] if albert or deberta_v1 else task.split("_")[0]
    work = os.path.join(scratch, "oracle_" + task)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if albert:
        if shutil.which("spm_train") is None:
            print("SKIP: no spm_train (Debian sentencepiece) to make the ALBERT tokenizer")
            return 77
        init = albert_init(shared, golden, work)
        model_opts = {"--init": init}
    elif deberta_v1:
        if not check_v1_oracle_on_goldens(shared):
            print("FAIL: the oracle's DeBERTa v1 forward does not reproduce the goldens")
            return 1
        init = v1_init(shared, golden, work)
        model_opts = {"--init": init}
    else:
        config_path = os.path.join(work, "config.json")
        with open(config_path, "w") as f:
            json.dump(small_config(shared, golden, dserve_task, variant=task.split("_")[-1]), f)
        model_opts = {"--config": config_path,
                      "--tokenizer": os.path.join(shared, "goldens", "tokenizer", "spm.model")}
    data = os.path.join(work, data_name)
    writer(data)
    dump = os.path.join(work, "dump")
    opts = dict(model_opts)
    opts.update({"--task": dserve_task, "--train": data, "--out": os.path.join(work, "out"), "--dump-batches": dump, "--max-steps": str(STEPS), "--epochs": "100",
            "--batch-size": "4", "--grad-accum": "2", "--lr": "5e-3", "--weight-decay": "0.1",
            "--warmup-ratio": "0.12", "--max-grad-norm": "0.5", "--seed": "7", "--threads": "2"})
    flags = []
    for i, arg in enumerate(extra):  # the task's own options (override the defaults above)
        if arg.startswith("--") and (i + 1 == len(extra) or extra[i + 1].startswith("--")):
            flags.append(arg)
        elif arg.startswith("--"):
            opts[arg] = extra[i + 1]
    cmd = [dserve, "train"] + [x for kv in opts.items() for x in kv] + flags
    print(" ".join(cmd), flush=True)
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0 and "needs c10d Gloo" in run.stdout:
        print(run.stdout)
        print("SKIP: this build has no distributed training")
        return 77  # ctest SKIP_RETURN_CODE
    if run.returncode != 0:
        print(run.stdout)
        print("dserve train exited with %d" % run.returncode)
        return 1
    with open(os.path.join(dump, "run.json")) as f:
        meta = json.load(f)
    assert meta["optimizer"]["total_steps"] == STEPS, meta["optimizer"]

    tolerance = BF16_TOLERANCE if task.endswith("_bf16") else TOLERANCE
    if deberta_v1 and not check_v1_initial_weights(model_opts["--init"], dump):
        print("FAIL: the dump's initial weights are not the --init checkpoint's")
        return 1
    if task == "classify_weighted":
        # The weights dserve used, against the rule recomputed from the file.
        with open(os.path.join(work, "out", "best", "config.json")) as f:
            order = [v for _, v in sorted((int(k), v) for k, v in json.load(f)["id2label"].items())]
        expected = balanced_weights(data, order)
        print("class weights: dserve %s, expected %s (labels %s)" % (meta["class_weights"], expected, order))
        if any(abs(a - b) > 1e-6 * b for a, b in zip(meta["class_weights"], expected)) or \
                len(meta["class_weights"]) != len(expected):
            print("FAIL: class weights differ")
            return 1
    result = oracle.replay(dump, tolerance)
    print("%s: max |loss diff| %.3g over %d steps (tolerance %g)" % (
        task, result["max_abs_diff"], result["steps"], tolerance), flush=True)
    failures = []
    if result["steps"] != STEPS:
        failures.append("%d steps dumped, expected %d" % (result["steps"], STEPS))
    if not result["ok"]:
        failures.append("losses differ by up to %.3g" % result["max_abs_diff"])
    if task.endswith("_bf16"):
        early = oracle.replay(dump, BF16_TOLERANCE, steps=BF16_EARLY_STEPS, log=lambda *_: None)
        fp32 = oracle.replay(dump, BF16_TOLERANCE, steps=BF16_EARLY_STEPS, perturb="fp32", log=lambda *_: None)
        print("%s: first %d steps: max |loss diff| %.3g against the bf16 oracle, %.3g against an fp32 one "
              "(that one must exceed %g)" % (task, BF16_EARLY_STEPS, early["max_abs_diff"], fp32["max_abs_diff"],
                                            BF16_MIN_EFFECT))
        if fp32["max_abs_diff"] <= BF16_MIN_EFFECT:
            failures.append("the first %d steps match an fp32 oracle: --bf16 did not change the forward" %
                            BF16_EARLY_STEPS)
    # The check must be able to fail: each perturbed oracle is caught.
    for perturb in PERTURBATIONS[task]:
        bad = oracle.replay(dump, tolerance, perturb=perturb, log=lambda *_: None)
        print("%s with --perturb %s: max |loss diff| %.3g (must exceed %g)" % (
            task, perturb, bad["max_abs_diff"], tolerance))
        if bad["ok"]:
            failures.append("the perturbation %s went unnoticed" % perturb)
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
