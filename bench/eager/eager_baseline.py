#!/usr/bin/python3
"""Eager-PyTorch baseline of the DeBERTa-v3 encoder, for dserve's benchmarks.

What it is: a torch.nn.Module written the way Hugging Face's
`modeling_deberta_v2.py` (current main line) computes DebertaV2 — the same
maths as tests/model/reference/deberta_reference.py (REFERENCE-deberta.md),
in float32 or bfloat16, eval mode, under torch.inference_mode, batched:
  - the relative-position table (log buckets) is built on every forward;
  - each layer projects all 2*span rows of the (layer-normed) relative table
    with query_proj / key_proj, repeats them over the batch, computes the full
    [L, 2*span] c2p and p2c score matrices and torch.gathers the [L, L] index
    (p2c with the negated index, then transposed), as HF does;
  - scores are K/sqrt(d*k)-scaled, the mask is applied with a
    masked_fill(finfo(dtype).min) on the [B, 1, L, L] pair mask, softmax over
    keys; post-LN layers; no fused attention (eager DeBERTa cannot use SDPA).
So it times what "just run the HF model in PyTorch" costs, without needing
the transformers package.  Module/parameter names are HF's (minus the
"deberta." prefix), so a HF checkpoint's state_dict loads directly.

DeBERTa v1 (issue 26; a config with model_type "deberta", or --shape
deberta-base: microsoft/deberta-base's config, hidden 768, 12 layers, 12
heads, intermediate 3072, vocab 50265, max_relative_positions -1 (-> 512),
pos_att_type "c2p|p2c", no absolute positions) runs V1SelfAttention, written
the way Hugging Face's `modeling_deberta.py` computes DebertaModel: the fused
in_proj (q, k, v interleaved per head, no bias) + q_bias/v_bias, q scaled by
1/sqrt(d * (1 + len(pos_att_type))), the relative table sliced to
min(L, max_rel) rows either side of the centre, pos_proj (c2p, no bias) and
pos_q_proj (p2c), no relative LayerNorm, optional talking heads; the rest
(embeddings, output, FFN, heads) is v2's. Its HF tensor names load directly;
tests/model/reference/deberta_v1_eager_test.py checks it against
shared/goldens/deberta_v1.

Default shape: microsoft/deberta-v3-base (hidden 768, 12 layers, 12 heads,
intermediate 3072, vocab 128100, position_buckets 256, max_relative_positions
-1 (-> 512), pos_att_type [p2c, c2p], norm_rel_ebd layer_norm, share_att_key
true, position_biased_input false) + a 2-label classification head, random
weights (N(0, 0.02), LN gain 1, bias 0: values do not change the timing).

usage:
  eager_baseline.py [--batch 8] [--length 128] [--dtype fp32|bf16] [--threads N]
                    [--repeats 20] [--warmup 3] [--json] [--seed 0]
                    [--shape v3-base|deberta-base|albert-base]
  eager_baseline.py --model DIR ...   (time a real checkpoint dir instead)
Output (--json): one JSON object
  {"dtype", "batch", "length", "threads", "median_s", "times_s", "repeats",
   "warmup", "torch_version", "min_s", "model"}
median_s is the median wall time of one forward (embeddings .. head) over
--repeats timed runs after --warmup untimed ones (statistics.median: the mean
of the two middle values for an even count, as every engine of run_all);
inputs are random ids, no padding.

Allocator: glibc malloc returns large freed blocks to the OS (mmap/munmap,
trim) and faults them back in on the next forward, which can dominate eager
PyTorch on CPU.  The perf harness therefore runs this script twice — once
as is, once with e.g. MALLOC_MMAP_THRESHOLD_=<bytes> MALLOC_TRIM_THRESHOLD_=<bytes>
(large values keep the freed arenas mapped) in the environment — and takes
the faster of the two medians, so the baseline is not handicapped by the
allocator.  This script itself does not set them (they must be in the
environment before the process starts).

Library use (what tests/model/reference/eager_test.py does):
  from eager_baseline import DebertaV2Eager, load_checkpoint
  model = load_checkpoint(DIR, torch.float64)   # config.json + model.safetensors
  out = model(input_ids, attention_mask, token_type_ids)   # dict of tensors
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

V3_BASE = {
    "model_type": "deberta-v2",
    "architectures": ["DebertaV2ForSequenceClassification"],
    "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
    "vocab_size": 128100,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "type_vocab_size": 0,
    "layer_norm_eps": 1e-7,
    "relative_attention": True,
    "max_relative_positions": -1,
    "position_buckets": 256,
    "pos_att_type": ["p2c", "c2p"],
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "pooler_hidden_act": "gelu",
    "pooler_dropout": 0,
    "pad_token_id": 0,
}


# ---------------------------------------------------------------------------
# Config parsing, activations, log buckets and safetensors reading come from
# the float64 reference (tests/model/reference/deberta_reference.py), so both
# read checkpoints the same way; the model below is its own batched module.

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "model",
                                "reference"))
from deberta_reference import Config as Cfg, act, make_log_bucket_position, read_safetensors  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import albert_eager  # noqa: E402

# DeBERTa v1 (Hugging Face model_type "deberta", modeling_deberta.py; issue 26). DebertaConfig's
# defaults, then v1's derived values: no log buckets, no key sharing, no LayerNorm on the relative table,
# no ConvLayer, and the score scale sqrt(d * (1 + len(pos_att_type))) whatever the entries are.
V1_DEFAULTS = {"vocab_size": 50265, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
               "intermediate_size": 3072, "hidden_act": "gelu", "max_position_embeddings": 512,
               "type_vocab_size": 0, "layer_norm_eps": 1e-7, "relative_attention": False,
               "max_relative_positions": -1, "position_biased_input": True, "pooler_hidden_act": "gelu"}

# microsoft/deberta-base's config.json (v1 Base) + a 2-label classification head.
V1_BASE = dict(V1_DEFAULTS, model_type="deberta", architectures=["DebertaForSequenceClassification"],
               id2label={"0": "LABEL_0", "1": "LABEL_1"}, relative_attention=True, pos_att_type="c2p|p2c",
               position_biased_input=False, pad_token_id=0)


def v1_config(d):
    c = Cfg(dict(V1_DEFAULTS, **d))
    c.v1 = True
    c.position_buckets, c.share_att_key, c.norm_rel_ebd, c.conv_kernel_size = -1, False, ["none"], 0
    c.attention_head_size = c.hidden_size // c.num_attention_heads
    c.span = c.max_rel
    c.scale_factor = 1 + len(c.pos_att_type)
    c.talking_head = bool(d.get("talking_head", False))
    return c


def build_relative_position(q_len, k_len, bucket_size, max_position, device):
    rel = (torch.arange(q_len, dtype=torch.long, device=device)[:, None]
           - torch.arange(k_len, dtype=torch.long, device=device)[None, :])
    if bucket_size > 0 and max_position > 0:
        rel = make_log_bucket_position(rel, bucket_size, max_position)
    return rel.to(torch.long).unsqueeze(0)


# ---------------------------------------------------------------------------
# modules (HF names)

class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E, H = c.embedding_size, c.hidden_size
        self.word_embeddings = nn.Embedding(c.vocab_size, E)
        self.position_embeddings = nn.Embedding(c.max_position_embeddings, E) if c.position_biased_input else None
        self.token_type_embeddings = nn.Embedding(c.type_vocab_size, E) if c.type_vocab_size > 0 else None
        self.embed_proj = nn.Linear(E, H, bias=False) if E != H else None
        self.LayerNorm = nn.LayerNorm(H, c.layer_norm_eps)

    def forward(self, ids, tt, mask):
        x = self.word_embeddings(ids)
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(torch.arange(ids.shape[1], device=ids.device)).unsqueeze(0)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(tt)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        x = self.LayerNorm(x)
        return x * mask.unsqueeze(2).to(x.dtype)


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        A = c.num_attention_heads * c.attention_head_size
        self.h = c.num_attention_heads
        self.query_proj = nn.Linear(c.hidden_size, A)
        self.key_proj = nn.Linear(c.hidden_size, A)
        self.value_proj = nn.Linear(c.hidden_size, A)
        if c.relative_attention and not c.share_att_key:
            if "c2p" in c.pos_att_type:
                self.pos_key_proj = nn.Linear(c.hidden_size, A)
            if "p2c" in c.pos_att_type:
                self.pos_query_proj = nn.Linear(c.hidden_size, A)
        self.scale_factor = 1 + int("c2p" in c.pos_att_type) + int("p2c" in c.pos_att_type)

    def split(self, x):
        B, L, _ = x.shape
        return x.view(B, L, self.h, -1).permute(0, 2, 1, 3).contiguous().view(B * self.h, L, -1)

    def forward(self, x, att_mask, rel_pos, rel_emb, query_states=None):
        # query_states (the Enhanced Mask Decoder's queries, as HF's
        # DisentangledSelfAttention takes them): queries from it, keys and
        # values from x.
        c = self.c
        B, L, _ = x.shape
        q = self.split(self.query_proj(x if query_states is None else query_states))
        k = self.split(self.key_proj(x))
        v = self.split(self.value_proj(x))
        scale = torch.sqrt(torch.tensor(q.size(-1), dtype=torch.float) * self.scale_factor).to(q.dtype)
        scores = torch.bmm(q, k.transpose(-1, -2) / scale)
        if c.relative_attention:
            span = c.span
            rel = rel_pos.unsqueeze(1)  # [1, 1, L, L]
            R = rel_emb[0:2 * span, :].unsqueeze(0)
            if c.share_att_key:
                pos_q = self.split(self.query_proj(R)).repeat(B, 1, 1)
                pos_k = self.split(self.key_proj(R)).repeat(B, 1, 1)
            else:
                if "c2p" in c.pos_att_type:
                    pos_k = self.split(self.pos_key_proj(R)).repeat(B, 1, 1)
                if "p2c" in c.pos_att_type:
                    pos_q = self.split(self.pos_query_proj(R)).repeat(B, 1, 1)
            if "c2p" in c.pos_att_type:
                c2p = torch.bmm(q, pos_k.transpose(-1, -2))
                idx = torch.clamp(rel + span, 0, 2 * span - 1).squeeze(0).expand([q.size(0), L, L])
                scores = scores + torch.gather(c2p, dim=-1, index=idx) / scale
            if "p2c" in c.pos_att_type:
                p2c = torch.bmm(k, pos_q.transpose(-1, -2))
                idx = torch.clamp(-rel + span, 0, 2 * span - 1).squeeze(0).expand([q.size(0), L, L])
                scores = scores + torch.gather(p2c, dim=-1, index=idx).transpose(-1, -2) / scale
        scores = scores.view(B, self.h, L, L).masked_fill(~att_mask, torch.finfo(q.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.bmm(probs.view(B * self.h, L, L), v)
        return ctx.view(B, self.h, L, -1).permute(0, 2, 1, 3).contiguous().view(B, L, -1)


class V1SelfAttention(nn.Module):
    """DeBERTa v1's DisentangledSelfAttention as modeling_deberta.py computes it: the fused in_proj (no
    bias, its 3H rows q, k, v interleaved per head) with q_bias / v_bias, q scaled by 1/sqrt(d*f) before
    the products, the relative table sliced to span = min(L, max_rel) rows either side, pos_proj (c2p, no
    bias) and pos_q_proj (p2c, scaled too), optional talking heads."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        H, self.h = c.hidden_size, c.num_attention_heads
        self.d = H // self.h
        self.in_proj = nn.Linear(H, 3 * H, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(H))
        self.v_bias = nn.Parameter(torch.zeros(H))
        if c.relative_attention:
            if "c2p" in c.pos_att_type:
                self.pos_proj = nn.Linear(H, H, bias=False)
            if "p2c" in c.pos_att_type:
                self.pos_q_proj = nn.Linear(H, H)
        if c.talking_head:
            self.head_logits_proj = nn.Linear(self.h, self.h, bias=False)
            self.head_weights_proj = nn.Linear(self.h, self.h, bias=False)

    def heads(self, x):  # [..., n, H] -> [..., h, n, d]
        return x.view(*x.shape[:-1], self.h, self.d).transpose(-2, -3)

    def forward(self, x, att_mask, rel_pos, rel_emb, query_states=None):
        if query_states is not None:
            raise NotImplementedError("v1 eager: no Enhanced Mask Decoder queries")
        c = self.c
        B, L, _ = x.shape
        qkv = self.in_proj(x).view(B, L, self.h, 3 * self.d).transpose(1, 2)  # [B, h, L, 3d]
        q, k, v = qkv.chunk(3, dim=-1)
        q = q + self.heads(self.q_bias.view(1, 1, -1))
        v = v + self.heads(self.v_bias.view(1, 1, -1))
        scale = torch.sqrt(torch.tensor(self.d, dtype=torch.float) * c.scale_factor).to(q.dtype)
        q = q / scale
        scores = torch.matmul(q, k.transpose(-1, -2))
        if c.relative_attention:
            span = min(L, c.max_rel)
            R = rel_emb[c.max_rel - span:c.max_rel + span, :]  # [2 span, H]
            rel = rel_pos.squeeze(0)  # [L, L]: i - j
            if "c2p" in c.pos_att_type:
                pos_k = self.heads(self.pos_proj(R))  # [h, 2 span, d]
                c2p = torch.matmul(q, pos_k.transpose(-1, -2))  # [B, h, L, 2 span]
                idx = torch.clamp(rel + span, 0, 2 * span - 1).expand(B, self.h, L, L)
                scores = scores + torch.gather(c2p, dim=-1, index=idx)
            if "p2c" in c.pos_att_type:
                pos_q = self.heads(self.pos_q_proj(R)) / scale
                p2c = torch.matmul(k, pos_q.transpose(-1, -2))  # [B, h, L (keys), 2 span]
                idx = torch.clamp(-rel + span, 0, 2 * span - 1).expand(B, self.h, L, L)
                scores = scores + torch.gather(p2c, dim=-1, index=idx).transpose(-1, -2)
        if c.talking_head:
            scores = self.head_logits_proj(scores.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        scores = scores.masked_fill(~att_mask, torch.finfo(q.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        if c.talking_head:
            probs = self.head_weights_proj(probs.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        ctx = torch.matmul(probs, v)  # [B, h, L, d]
        return ctx.transpose(1, 2).reshape(B, L, -1)


class DenseLN(nn.Module):
    def __init__(self, n_in, c):
        super().__init__()
        self.dense = nn.Linear(n_in, c.hidden_size)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, c.layer_norm_eps)

    def forward(self, x, residual):
        return self.LayerNorm(self.dense(x) + residual)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        setattr(self, "self", V1SelfAttention(c) if getattr(c, "v1", False) else SelfAttention(c))
        self.output = DenseLN(c.num_attention_heads * c.attention_head_size, c)

    def forward(self, x, att_mask, rel_pos, rel_emb, query_states=None):
        residual = x if query_states is None else query_states
        return self.output(getattr(self, "self")(x, att_mask, rel_pos, rel_emb, query_states), residual)


class Intermediate(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.intermediate_size)
        self.act = act(c.hidden_act)

    def forward(self, x):
        return self.act(self.dense(x))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = DenseLN(c.intermediate_size, c)

    def forward(self, x, att_mask, rel_pos, rel_emb, query_states=None):
        a = self.attention(x, att_mask, rel_pos, rel_emb, query_states)
        return self.output(self.intermediate(a), a)


class ConvLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        k = c.conv_kernel_size
        self.conv = nn.Conv1d(c.hidden_size, c.hidden_size, k, padding=(k - 1) // 2, groups=c.conv_groups)
        self.LayerNorm = nn.LayerNorm(c.hidden_size, c.layer_norm_eps)

    def forward(self, x, residual, mask):
        out = self.conv(x.permute(0, 2, 1).contiguous()).permute(0, 2, 1).contiguous()
        out = out.masked_fill(~mask.bool().unsqueeze(-1).expand(out.size()), 0)
        out = act(self.c.conv_act)(out)
        y = self.LayerNorm(residual + out)
        return y * mask.unsqueeze(2).to(y.dtype)


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.layer = nn.ModuleList([Layer(c) for _ in range(1 if c.share_layers else c.num_hidden_layers)])
        if c.relative_attention:
            self.rel_embeddings = nn.Embedding(2 * c.span, c.hidden_size)
        if "layer_norm" in c.norm_rel_ebd:
            self.LayerNorm = nn.LayerNorm(c.hidden_size, c.layer_norm_eps)
        self.conv = ConvLayer(c) if c.conv_kernel_size > 0 else None

    def attention_inputs(self, mask, L):
        """(pair mask [B, 1, L, L], relative positions, relative table) every layer uses."""
        c = self.c
        m = mask.to(torch.long)
        att_mask = (m.unsqueeze(1).unsqueeze(2) * m.unsqueeze(1).unsqueeze(-1)).bool()
        rel_pos = rel_emb = None
        if c.relative_attention:
            rel_pos = build_relative_position(L, L, c.position_buckets, c.max_rel, mask.device)
            rel_emb = self.rel_embeddings.weight
            if "layer_norm" in c.norm_rel_ebd:
                rel_emb = self.LayerNorm(rel_emb)
        return att_mask, rel_pos, rel_emb

    def forward(self, x, mask, all_layers=False):
        """Last hidden state, or with all_layers [embeddings, layer 1 .. layer N outputs]."""
        c = self.c
        att_mask, rel_pos, rel_emb = self.attention_inputs(mask, x.shape[1])
        h = x
        states = [x]
        for i in range(c.num_hidden_layers):
            out = self.layer[0 if c.share_layers else i](h, att_mask, rel_pos, rel_emb)
            if i == 0 and self.conv is not None:
                out = self.conv(x, out, mask)
            h = out
            states.append(h)
        return states if all_layers else h


class Pooler(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense = nn.Linear(c.hidden_size, c.hidden_size)
        self.act = act(c.pooler_hidden_act)

    def forward(self, h):
        return self.act(self.dense(h[:, 0]))


class DebertaV2Eager(nn.Module):
    """Backbone under .deberta-less names (embeddings.*, encoder.*) + HF heads. A config with model_type
    "deberta" builds DeBERTa v1 (V1SelfAttention, v1's tensor names) instead."""

    def __init__(self, config_dict):
        super().__init__()
        v1 = config_dict.get("model_type") == "deberta"
        c = self.c = v1_config(config_dict) if v1 else Cfg(config_dict)
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)
        if c.head == "classify":
            self.pooler = Pooler(c)
            self.classifier = nn.Linear(c.hidden_size, len(c.raw.get("id2label") or {}) or 2)
        elif c.head == "qa":
            self.qa_outputs = nn.Linear(c.hidden_size, 2)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        h = self.encoder(self.embeddings(input_ids, token_type_ids, attention_mask), attention_mask)
        out = {"last_hidden_state": h}
        if self.c.head == "classify":
            out["logits"] = self.classifier(self.pooler(h))
        elif self.c.head == "qa":
            lg = self.qa_outputs(h)
            out["start_logits"], out["end_logits"] = lg[..., 0], lg[..., 1]
        return out

    def init_random(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "LayerNorm.weight" in name:
                    p.fill_(1.0)
                elif "LayerNorm.bias" in name or name.endswith(("q_bias", "v_bias")):
                    p.zero_()
                else:
                    p.normal_(0.0, 0.02, generator=g)
        return self


# ---------------------------------------------------------------------------
# checkpoint loading (own minimal safetensors reader: no safetensors module here)

def load_checkpoint(model_dir, dtype=torch.float32):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    model = DebertaV2Eager(cfg)
    tensors, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    own = model.state_dict()
    state = {}
    for name, t in tensors.items():
        name = name[len("deberta."):] if name.startswith("deberta.") else name
        if name in own:  # HF ignores lm_predictions.*, mask_predictions.*, unused tables
            state[name] = t
    missing = sorted(set(own) - set(state))
    if missing:
        raise ValueError("%s: missing weights %s" % (model_dir, missing))
    model.load_state_dict(state)
    return model.to(dtype).eval()


def model_type(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f).get("model_type", "deberta-v2")


# ---------------------------------------------------------------------------
# timing

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp64": torch.float64}


def time_forward(model, batch, length, repeats, warmup, seed=0):
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(4, model.c.vocab_size, (batch, length), generator=g)
    ids[:, 0] = 1
    ids[:, -1] = 2
    mask = torch.ones_like(ids)
    times = []
    with torch.inference_mode():
        for _ in range(warmup):
            model(ids, mask)
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(ids, mask)
            times.append(time.perf_counter() - t0)
    return times


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0 = torch default)")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", help="checkpoint dir to time instead of the random v3-base shape "
                                    "(DeBERTa-v2, DeBERTa v1 or ALBERT, by its config.json's model_type)")
    ap.add_argument("--shape", choices=["v3-base", "deberta-base", "albert-base"], default="v3-base",
                    help="random-weight shape when no --model (deberta-base: DeBERTa v1 Base, microsoft/deberta-"
                         "base's config; albert-base: albert_eager.py)")
    ap.add_argument("--json", action="store_true", help="print one JSON object only")
    ap.add_argument("--profile", metavar="FILE",
                    help="after the timing, profile one more forward and write a Chrome trace (read it with "
                         "bench/profile_summary.py FILE, as dserve bench encoder --profile)")
    a = ap.parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dtype = DTYPES[a.dtype]
    torch.manual_seed(a.seed)
    if a.model and model_type(a.model) == "albert":
        model = albert_eager.load_checkpoint(a.model, dtype)
        name = os.path.abspath(a.model)
    elif a.model:
        model = load_checkpoint(a.model, dtype)
        name = os.path.abspath(a.model)
    elif a.shape == "deberta-base":
        model = DebertaV2Eager(V1_BASE).init_random(a.seed).to(dtype).eval()
        name = "deberta-base (v1) shape (random weights, 2-label head)"
    elif a.shape == "albert-base":
        model = albert_eager.AlbertEager(albert_eager.ALBERT_BASE).init_random(a.seed).to(dtype).eval()
        name = "albert-base-v2 shape (random weights, 2-label head)"
    else:
        model = DebertaV2Eager(V3_BASE).init_random(a.seed).to(dtype).eval()
        name = "deberta-v3-base shape (random weights, 2-label head)"
    if not model.c.position_biased_input or a.length <= model.c.max_position_embeddings:
        pass
    else:
        ap.error("--length exceeds max_position_embeddings of a model with absolute positions")
    times = time_forward(model, a.batch, a.length, a.repeats, a.warmup, a.seed)
    if a.profile:
        g = torch.Generator().manual_seed(a.seed + 1)
        ids = torch.randint(4, model.c.vocab_size, (a.batch, a.length), generator=g)
        with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model(ids, torch.ones_like(ids))
        prof.export_chrome_trace(a.profile)
    result = {
        "dtype": a.dtype, "batch": a.batch, "length": a.length,
        "threads": torch.get_num_threads(), "median_s": statistics.median(times), "times_s": times,
        "repeats": a.repeats, "warmup": a.warmup, "torch_version": torch.__version__,
        "min_s": min(times), "model": name,
    }
    if a.json:
        print(json.dumps(result))
    else:
        print("eager %s %s batch %d x length %d, %d threads: median %.4f s (min %.4f) over %d repeats, "
              "%.0f tokens/s" % (name, a.dtype, a.batch, a.length, result["threads"], result["median_s"],
                                 result["min_s"], a.repeats, a.batch * a.length / result["median_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
