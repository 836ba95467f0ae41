#!/usr/bin/python3
"""Exact-loss oracle (issue 18): an independent PyTorch training loop that
replays a `dserve train --dump-batches DIR` run and compares the loss of
every optimizer step.

Independent of dserve's C++ code: the encoder is bench/eager/eager_baseline.py
(HF's DebertaV2 computation written in Python, checked against HF goldens by
reference.eager), the heads, losses, weight-decay groups, learning-rate
schedule and optimizer are written here from Hugging Face's definitions
(DebertaV2ForSequenceClassification / ForQuestionAnswering / ForMaskedLM,
Trainer's AdamW groups and get_linear_schedule_with_warmup) and DeBERTa's
Enhanced Mask Decoder, and torch.optim.AdamW does the update. What comes
from the dump: the initial weights, the batches (ids, masks, targets, and
for rerank which rows are chunks of which pair and which pairs form a
query's list), the run's hyperparameters and dserve's loss per step. The
normalisation of each step's loss (units, masked tokens) is recounted here
from the batches and must equal what dserve used.

DeBERTa v1 (`model_type: "deberta"`, issue 26): deberta_v1_oracle.py's
float32 v1 forward written from shared/goldens/deberta_v1/README.md, with
HF's Deberta* heads; v1 MLM has no EMD (DebertaForMaskedLM reads H_N).

Objectives, as dserve trains them (docs/training.md):
  classify  cross-entropy over [CLS] -> ContextPooler -> classifier, mean
            over the step's examples (multi-label: BCE, mean over labels
            and examples)
  answer    (CE(start) + CE(end)) / 2 per feature, padding positions
            masked out of the softmax (-1e9: dserve's choice, so a
            feature's loss does not depend on the batch's padding; HF
            leaves padding logits in), mean over the step's features
  rerank    one logit per chunk (1-label classifier head); a pair's score
            is the max over its chunks; pointwise: BCE-with-logits, mean
            over pairs; listwise: per query -sum(t * log_softmax(scores)) /
            positives (0 for a query without positives), mean over queries
  mlm       with the EMD (position_biased_input false): z = E_pos[:L]
            (through embed_proj when embedding_size != hidden_size),
            q0 = z + H_{N-1}, q_t = Layer_N(keys/values H_{N-1}, queries
            q_{t-1}) twice; q2 feeds the legacy MLM head (dense -> act ->
            LayerNorm -> word_embeddingsᵀ + bias); CE mean over the step's
            masked tokens (+ SOP mean over its rows with --objective sop)

Dropout is not modelled: run dserve with every dropout probability 0
(the oracle refuses a config that has any).

usage: oracle.py DUMP_DIR [--tolerance 1e-4] [--steps N] [--perturb KIND] [--json]
Exit 0 when every step's |loss - dserve loss| <= tolerance, 1 otherwise.
--perturb (to show that the check can fail): lr (x1.1), decay_all (weight
decay on every tensor), no_emd (MLM head on H_N), micro_mean (each
micro-batch's own mean, averaged: the grad-accumulation bug of issue 18
defect 1), no_clip, v1_scale (DeBERTa v1: sqrt(d) instead of
sqrt(d (1 + len(pos_att_type)))).
"""

import argparse
import glob
import json
import math
import os
import re
import sys

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "eager"))
sys.path.insert(0, os.path.join(HERE, "..", "model", "reference"))
import albert_eager  # noqa: E402
import deberta_v1_oracle as v1  # noqa: E402
import eager_baseline as eager  # noqa: E402
from deberta_reference import act, read_safetensors  # noqa: E402

F = nn.functional


DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "pooler_dropout", "classifier_dropout_prob")


def refuse_dropout(config):
    for key in DROPOUT_KEYS:
        if float(config.get(key, 0) or 0) != 0:
            raise ValueError("the oracle runs without dropout: config %s = %s (train with 0)" % (key, config[key]))


class TaskLosses:
    """The classify / answer / rerank objectives over a family's logits
    (cls_logits [B, C] and qa_logits [B, L, 2], supplied by the model)."""

    def loss_sum(self, m, listwise=False, perturb=None):
        """The micro-batch's loss terms summed (what the step's count divides)."""
        ids, mask = m["input_ids"], m["attention_mask"]
        tt = m.get("token_type_ids", torch.zeros_like(ids))
        if self.task == "mlm":
            return self.mlm_loss_sum(m, ids, mask, tt, perturb)
        if self.task == "answer":
            logits = self.qa_logits(ids, mask, tt)
            pad = mask == 0
            start = logits[..., 0].masked_fill(pad, -1e9)
            end = logits[..., 1].masked_fill(pad, -1e9)
            return (F.cross_entropy(start, m["start_positions"], reduction="sum")
                    + F.cross_entropy(end, m["end_positions"], reduction="sum")) / 2
        logits = self.cls_logits(ids, mask, tt)
        if self.task == "classify":
            y = m["labels"]
            if y.dim() == 2:  # multi-label
                return F.binary_cross_entropy_with_logits(logits, y, reduction="none").mean(1).sum()
            # --class-weights: sum_i w(y_i) CE_i (None: unweighted)
            return F.cross_entropy(logits, y, weight=getattr(self, "class_weights", None), reduction="sum")
        # rerank: max over each pair's chunks
        chunk = logits[:, 0]
        pair = m["chunk_pair"]
        n_pairs = m["targets"].shape[0]
        scores = torch.stack([chunk[pair == p].max() for p in range(n_pairs)])
        t = m["targets"]
        if not listwise:
            return F.binary_cross_entropy_with_logits(scores, t, reduction="sum")
        total = scores.sum() * 0
        unit = m["pair_unit"]
        for u in unit.unique(sorted=True).tolist():
            sel = unit == u
            pos = t[sel].sum()
            if pos > 0:
                total = total - (torch.log_softmax(scores[sel], 0) * t[sel]).sum() / pos
        return total

    def no_decay_names(self):
        """Hugging Face Trainer's rule: LayerNorm parameters and biases are not decayed."""
        ln = set()
        for mod in self.modules():
            if isinstance(mod, nn.LayerNorm):
                ln.update(id(p) for p in mod.parameters())
        return {n for n, p in self.dump_names().items() if id(p) in ln or "bias" in n}


class AlbertOracle(nn.Module, TaskLosses):
    """bench/eager/albert_eager.py's AlbertModel + head (AlbertForSequenceClassification:
    tanh pooler -> classifier; AlbertForQuestionAnswering: qa_outputs), HF names."""

    def __init__(self, config, task):
        super().__init__()
        refuse_dropout(config)
        if task == "mlm":
            raise ValueError("dserve does not pretrain ALBERT")
        self.task = task
        self.m = albert_eager.AlbertEager(config)

    def dump_names(self):
        names = albert_eager.hf_names(self.m)
        return {names[n]: p for n, p in self.m.named_parameters()}

    def cls_logits(self, ids, mask, tt):
        return self.m(ids, mask, tt)["logits"]

    def qa_logits(self, ids, mask, tt):
        out = self.m(ids, mask, tt)
        return torch.stack([out["start_logits"], out["end_logits"]], -1)


class V1OracleModel(nn.Module, TaskLosses):
    """DeBERTa v1 (deberta_v1_oracle.py: HF's v1 forward from
    shared/goldens/deberta_v1/README.md) + the task's Deberta* head; no EMD
    for MLM (DebertaForMaskedLM has none). perturb "v1_scale": scores
    scaled by sqrt(d) instead of sqrt(d (1 + len(pos_att_type)))."""

    def __init__(self, config, task, sop, perturb=None):
        super().__init__()
        refuse_dropout(config)
        if float(config.get("cls_dropout", 0) or 0) != 0:
            raise ValueError("the oracle runs without dropout: config cls_dropout = %s" % config["cls_dropout"])
        self.task = task
        self.deberta = v1.V1Encoder(config, scale_perturbed=perturb == "v1_scale")
        v1.build_heads(self, config, task, sop)

    def dump_names(self):
        return dict(self.named_parameters())

    def cls_logits(self, ids, mask, tt):
        h = self.deberta(ids, mask, tt)
        return self.classifier(self.pooler_act(self.pooler.dense(h[:, 0])))

    def qa_logits(self, ids, mask, tt):
        return self.qa_outputs(self.deberta(ids, mask, tt))

    def mlm_loss_sum(self, m, ids, mask, tt, perturb):
        h = self.deberta(ids, mask, tt)
        labels = m["labels"]
        sel = labels >= 0
        head = self.mlm_head[0]
        x = head.LayerNorm(self.mlm_act(head.dense(h[sel])))
        logits = x @ self.deberta.embeddings.word_embeddings.weight.t() + head.bias
        mlm = F.cross_entropy(logits, labels[sel], reduction="sum")
        sop = None
        if "sop_labels" in m and hasattr(self, "dserve_sop"):
            y = m["sop_labels"]
            valid = y >= 0
            pooled = self.sop_act(self.dserve_sop.pooler.dense(h[:, 0]))
            sop = F.cross_entropy(self.dserve_sop.classifier(pooled)[valid], y[valid], reduction="sum")
        return mlm, sop


class OracleModel(nn.Module, TaskLosses):
    """DeBERTa encoder + the task's head, parameters under HF's names."""

    def __init__(self, config, task, emd, sop):
        super().__init__()
        c = self.c = eager.Cfg(config)
        self.task = task
        refuse_dropout(config)
        self.deberta = nn.Module()
        self.deberta.embeddings = eager.Embeddings(c)
        self.deberta.encoder = eager.Encoder(c)
        self.use_emd = False
        if task in ("classify", "rerank"):
            num_labels = 1 if task == "rerank" else len(config.get("id2label") or {})
            self.pooler = eager.Pooler(c)
            self.classifier = nn.Linear(c.pooler_hidden_size, num_labels)
        elif task == "answer":
            self.qa_outputs = nn.Linear(c.hidden_size, 2)
        elif task == "mlm":
            self.legacy = bool(config.get("legacy", True))
            E, H, V = c.embedding_size, c.hidden_size, c.vocab_size
            head = nn.Module()
            width = E if self.legacy else H
            head.dense = nn.Linear(H, width)
            head.LayerNorm = nn.LayerNorm(width, c.layer_norm_eps)
            head.bias = nn.Parameter(torch.zeros(V))
            if self.legacy:
                self.cls = nn.Module()
                self.cls.predictions = nn.Module()
                self.cls.predictions.transform = nn.Module()
                self.cls.predictions.transform.dense = head.dense
                self.cls.predictions.transform.LayerNorm = head.LayerNorm
                self.cls.predictions.bias = head.bias
            else:
                self.lm_predictions = nn.Module()
                self.lm_predictions.lm_head = head
            self.head = head
            self.head_act = act(c.hidden_act)
            self.use_emd = emd and not c.position_biased_input
            if not c.position_biased_input:
                # The EMD's absolute position table (dserve keeps it under the
                # HF embeddings name even when the input has no positions).
                self.emd_positions = nn.Parameter(torch.zeros(c.max_position_embeddings, E))
            if sop:
                self.sop_pooler = nn.Linear(H, H)
                self.sop_classifier = nn.Linear(H, 2)
                self.sop_act = act(c.pooler_hidden_act)
        else:
            raise ValueError("unknown task %r" % task)

    # -- names ---------------------------------------------------------------
    def dump_names(self):
        """{dserve dump name: parameter}."""
        out = {}
        for name, p in self.named_parameters():
            if name.startswith("head.") or name in ("emd_positions",):
                continue
            if name.startswith("sop_"):
                name = "dserve_sop." + {"sop_pooler": "pooler.dense", "sop_classifier": "classifier"}[
                    name.split(".")[0]] + "." + name.split(".")[1]
            out[name] = p
        if hasattr(self, "emd_positions"):
            out["deberta.embeddings.position_embeddings.weight"] = self.emd_positions
        return out

    # -- forward -------------------------------------------------------------
    def encode(self, ids, mask, tt, all_layers=False):
        x = self.deberta.embeddings(ids, tt, mask)
        return self.deberta.encoder(x, mask, all_layers)

    def cls_logits(self, ids, mask, tt):
        return self.classifier(self.pooler(self.encode(ids, mask, tt)))

    def qa_logits(self, ids, mask, tt):
        return self.qa_outputs(self.encode(ids, mask, tt))

    def mlm_loss_sum(self, m, ids, mask, tt, perturb):
        states = self.encode(ids, mask, tt, all_layers=True)
        dec = states[-1]
        if self.use_emd and perturb != "no_emd":
            L = ids.shape[1]
            kv = states[-2]
            z = self.emd_positions[:L]
            proj = self.deberta.embeddings.embed_proj
            if proj is not None:
                z = proj(z)
            q = kv + z.unsqueeze(0)
            enc = self.deberta.encoder
            att_mask, rel_pos, rel_emb = enc.attention_inputs(mask, L)
            last = enc.layer[-1]
            for _ in range(2):
                q = last(kv, att_mask, rel_pos, rel_emb, query_states=q)
            dec = q
        labels = m["labels"]
        sel = labels >= 0
        x = dec[sel]
        x = self.head.LayerNorm(self.head_act(self.head.dense(x)))
        logits = x @ self.deberta.embeddings.word_embeddings.weight.t() + self.head.bias
        mlm = F.cross_entropy(logits, labels[sel], reduction="sum")
        sop = None
        if "sop_labels" in m and hasattr(self, "sop_pooler"):
            y = m["sop_labels"]
            valid = y >= 0
            pooled = self.sop_act(self.sop_pooler(states[-1][:, 0]))
            sop = F.cross_entropy(self.sop_classifier(pooled)[valid], y[valid], reduction="sum")
        return mlm, sop


class Bf16Autocast:
    """`dserve train --bf16`'s precision policy, independently: torch.autocast
    ("cpu", bfloat16) for the forward (matmuls in bf16, fp32 master weights),
    LayerNorm in fp32 (torch 1.13's CPU autocast would hand it a bf16 input
    and fp32 weights, which it refuses), losses on fp32 logits (the task
    losses already cast)."""

    def __enter__(self):
        self._layer_norm = nn.functional.layer_norm
        original = self._layer_norm

        def layer_norm_fp32(x, shape, weight=None, bias=None, eps=1e-5):
            return original(x.float(), shape, weight, bias, eps)

        nn.functional.layer_norm = layer_norm_fp32
        self._autocast = torch.autocast("cpu", dtype=torch.bfloat16)
        self._autocast.__enter__()
        return self

    def __exit__(self, *exc):
        self._autocast.__exit__(*exc)
        nn.functional.layer_norm = self._layer_norm
        return False


class NoAutocast:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def cosine_schedule(warmup, total):
    """transformers.get_cosine_schedule_with_warmup's multiplier (num_cycles 0.5)."""
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        progress = float(step - warmup) / float(max(1, total - warmup))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 2.0 * 0.5 * progress)))
    return f


def layer_lr_multipliers(names, num_layers, decay):
    """Layer-wise lr decay as in the DeBERTa/ELECTRA fine-tuning recipes: a head
    tensor (not under deberta.) keeps lr, deberta.encoder.layer.i gets
    decay ** (L - i), the rest of deberta. (embeddings, rel_embeddings, the
    encoder's LayerNorm/conv) decay ** (L + 1)."""
    out = {}
    for n in names:
        m = re.match(r"deberta\.encoder\.layer\.(\d+)\.", n)
        if m:
            out[n] = decay ** (num_layers - int(m.group(1)))
        elif n.startswith("deberta."):
            out[n] = decay ** (num_layers + 1)
        else:
            out[n] = 1.0
    return out


def linear_schedule(warmup, total):
    """transformers.get_linear_schedule_with_warmup's multiplier."""
    def f(step):
        if step < warmup:
            return float(step) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return f


def units_of(task, listwise, m):
    """What a non-MLM micro-batch contributes to its step's normaliser."""
    if task == "rerank" and listwise:
        return int(m["pair_unit"].unique().numel())  # queries
    if task == "rerank":
        return int(m["targets"].shape[0])  # pairs (not chunks)
    return int(m["input_ids"].shape[0])  # examples / features


def read_step(path):
    tensors, meta = read_safetensors(path)
    info = json.loads(meta["dserve"])
    micros = []
    for i in range(info["micro_batches"]):
        prefix = "m%d." % i
        micros.append({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
    return info, micros


def step_files(dump_dir, world_size):
    """[[path of rank 0, rank 1, ...] per step], steps in order."""
    by_step = {}
    for path in glob.glob(os.path.join(dump_dir, "step_*.safetensors")):
        parts = os.path.basename(path).split(".")
        step = int(parts[0][len("step_"):])
        rank = int(parts[1][len("rank"):]) if len(parts) == 3 else 0
        by_step.setdefault(step, {})[rank] = path
    out = []
    for step in sorted(by_step):
        if sorted(by_step[step]) != list(range(world_size)):
            raise SystemExit("step %d: files of ranks %s, expected %d ranks" % (step, sorted(by_step[step]), world_size))
        out.append([by_step[step][r] for r in range(world_size)])
    return out


def read_global_step(paths):
    """A step's info (rank 0's; every rank's must agree on the step's loss and counts) and every rank's micro-batches."""
    info, micros = None, []
    for path in paths:
        i, m = read_step(path)
        if info is None:
            info = i
        elif any(i.get(k) != info.get(k) for k in ("step", "loss", "units", "targets", "sop_examples")):
            raise SystemExit("%s: rank %s disagrees with rank 0: %s vs %s" % (path, i.get("rank"), i, info))
        micros += m
    return info, micros


def micro_objective(model, task, run, m, micro_count, count, sop_count, perturb):
    """One micro-batch's share of the step's loss (over the step's normaliser)."""
    if task == "mlm":
        mlm, sopl = model.loss_sum(m, perturb=perturb)
        if perturb == "micro_mean":
            n = int((m["labels"] >= 0).sum())
            obj = mlm / max(1, n) / micro_count
        else:
            obj = mlm / count if count > 0 else mlm * 0
        if sopl is not None and sop_count > 0:
            obj = obj + sopl / sop_count
        return obj
    s = model.loss_sum(m, listwise=run.get("listwise", False), perturb=perturb)
    if perturb == "micro_mean":
        return s / units_of(task, run.get("listwise"), m) / micro_count
    return s / count


def replay(dump_dir, tolerance=1e-4, steps=None, perturb=None, log=print):
    with open(os.path.join(dump_dir, "run.json")) as f:
        run = json.load(f)
    task = run["task"]
    opt_cfg = run["optimizer"]
    sop = run.get("objective") == "sop"
    if run["config"].get("model_type") == "albert":
        model = AlbertOracle(run["config"], task)
    elif run["config"].get("model_type") == "deberta":
        if run.get("emd", False):
            raise SystemExit("DeBERTa v1 has no Enhanced Mask Decoder, yet the dump says emd: true")
        model = V1OracleModel(run["config"], task, sop=sop, perturb=perturb)
    else:
        model = OracleModel(run["config"], task, emd=run.get("emd", True), sop=sop)
    params = model.dump_names()
    if run.get("class_weights") is not None and perturb != "unweighted":
        model.class_weights = torch.tensor(run["class_weights"], dtype=torch.float32)

    # Initial weights: exactly the tensors dserve trains.
    init, _ = read_safetensors(os.path.join(dump_dir, "initial.safetensors"))
    if set(init) != set(params) or set(run["params"]) != set(params):
        raise SystemExit("parameter sets differ: only in dserve %s, only in the oracle %s" % (
            sorted(set(init) - set(params)), sorted(set(params) - set(init))))
    with torch.no_grad():
        for name, p in params.items():
            if tuple(p.shape) != tuple(init[name].shape):
                raise SystemExit("%s: shape %s in the oracle, %s in the dump" % (
                    name, tuple(p.shape), tuple(init[name].shape)))
            p.copy_(init[name].to(torch.float32))

    # AdamW groups (HF Trainer), schedule, clipping.
    no_decay = model.no_decay_names()
    if perturb == "decay_all":
        no_decay = set()
    elif no_decay != set(run["no_decay"]):
        raise SystemExit("weight-decay groups differ: no decay only in dserve %s, only in the oracle %s" % (
            sorted(set(run["no_decay"]) - no_decay), sorted(no_decay - set(run["no_decay"]))))
    order = run["params"]
    lr = opt_cfg["lr"] * (1.1 if perturb == "lr" else 1.0)
    # --layer-lr-decay: each tensor's lr multiplier, recomputed from the names.
    decay = float(opt_cfg.get("layer_lr_decay", 1.0))
    mult = layer_lr_multipliers(order, int(run["config"]["num_hidden_layers"]), decay)
    if "lr_multipliers" in run:
        theirs = run["lr_multipliers"]
        wrong = sorted(n for n in order if abs(theirs.get(n, float("nan")) - mult[n]) > 1e-12 * max(1.0, mult[n])
                       or not math.isfinite(theirs.get(n, float("nan"))))
        if wrong or set(theirs) != set(order):
            raise SystemExit("lr multipliers differ: %s" % ", ".join(
                "%s dserve %s oracle %s" % (n, theirs.get(n), mult.get(n)) for n in wrong[:8]))
    if perturb == "llrd_off":
        mult = {n: 1.0 for n in order}
    groups = []
    for wd in (True, False):
        for f in sorted(set(mult.values()), reverse=True):
            ps = [params[n] for n in order if (n not in no_decay) == wd and mult[n] == f]
            if ps:
                groups.append({"params": ps, "weight_decay": opt_cfg["weight_decay"] if wd else 0.0,
                               "lr": lr * f, "mult": f})
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=tuple(opt_cfg["betas"]), eps=opt_cfg["eps"])
    total = int(opt_cfg["total_steps"])
    warmup = math.ceil(total * float(opt_cfg["warmup_ratio"]))  # TrainingArguments.get_warmup_steps
    if warmup != opt_cfg["warmup_steps"]:
        log("warning: dserve warms up for %d steps, HF's ceil(%g x %d) = %d" % (
            opt_cfg["warmup_steps"], opt_cfg["warmup_ratio"], total, warmup))
    schedule = {"linear": linear_schedule, "cosine": cosine_schedule}[opt_cfg.get("lr_schedule", "linear")]
    if perturb == "schedule":  # the other one
        schedule = cosine_schedule if schedule is linear_schedule else linear_schedule
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(warmup, total))
    clip = 0.0 if perturb == "no_clip" else float(opt_cfg["max_grad_norm"])
    model.train()

    files = step_files(dump_dir, int(run.get("world_size", 1)))
    if steps is not None:
        files = files[:steps]
    if not files:
        raise SystemExit("%s: no step_*.safetensors" % dump_dir)
    rows = []
    all_params = [params[n] for n in order]
    for k, path in enumerate(files, start=1):
        info, micros = read_global_step(path)
        if info["step"] != k:
            raise SystemExit("%s: step %s, expected %d" % (path, info["step"], k))
        optimizer.zero_grad(set_to_none=False)
        # The step's normalisation, recounted from the batches.
        if task == "mlm":
            count = sum(int((m["labels"] >= 0).sum()) for m in micros)
            sop_count = sum(int((m["sop_labels"] >= 0).sum()) for m in micros if "sop_labels" in m) if sop else 0
            if count != info["targets"] or (sop and sop_count != info["sop_examples"]):
                raise SystemExit("step %d: %d masked targets / %d SOP rows, dserve divided by %s / %s" % (
                    k, count, sop_count, info["targets"], info.get("sop_examples")))
        else:
            count = sum(units_of(task, run.get("listwise"), m) for m in micros)
            if count != info["units"]:
                raise SystemExit("step %d: %d units in the batches, dserve divided by %s" % (k, count, info["units"]))
        loss = 0.0
        for m in micros:
            # --bf16: the forward under the same precision policy (a perturbed
            # oracle "fp32" leaves it out, and must be caught).
            with (Bf16Autocast() if run.get("bf16") and perturb != "fp32" else NoAutocast()):
                obj = micro_objective(model, task, run, m, len(micros), count,
                                      sop_count if task == "mlm" else 0, perturb)
            obj.backward()
            loss += float(obj)
        for p in all_params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        norm = torch.norm(torch.stack([p.grad.detach().norm(2) for p in all_params]), 2).item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(all_params, clip)
        step_lr = optimizer.param_groups[0]["lr"] / optimizer.param_groups[0]["mult"]
        optimizer.step()
        scheduler.step()
        diff = abs(loss - info["loss"])
        rows.append({"step": k, "dserve_loss": info["loss"], "oracle_loss": loss, "abs_diff": diff,
                     "dserve_lr": info["lr"], "oracle_lr": step_lr, "dserve_grad_norm": info["grad_norm"],
                     "oracle_grad_norm": norm})
        log("step %2d  dserve %.7f  oracle %.7f  |diff| %.2e  lr %.3g/%.3g  grad_norm %.5f/%.5f" % (
            k, info["loss"], loss, diff, info["lr"], step_lr, info["grad_norm"], norm))
    worst = max(r["abs_diff"] for r in rows)
    return {"task": task, "steps": len(rows), "max_abs_diff": worst, "tolerance": tolerance,
            "ok": worst <= tolerance, "rows": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump_dir")
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--perturb", choices=["lr", "decay_all", "no_emd", "micro_mean", "no_clip", "schedule",
                                                "llrd_off", "v1_scale"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object at the end")
    a = ap.parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    result = replay(a.dump_dir, a.tolerance, a.steps, a.perturb)
    print("%s: max |loss diff| %.3g over %d steps (tolerance %g): %s" % (
        result["task"], result["max_abs_diff"], result["steps"], a.tolerance, "OK" if result["ok"] else "MISMATCH"))
    if a.json:
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
