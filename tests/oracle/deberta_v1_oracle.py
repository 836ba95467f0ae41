"""DeBERTa v1 for the exact-loss oracle (issue 26): Hugging Face's
`model_type: "deberta"` forward in float32 PyTorch, written from
shared/goldens/deberta_v1/README.md ("The DeBERTa v1 forward, exactly as
Hugging Face computes it"), with DebertaForSequenceClassification's
ContextPooler + classifier, DebertaForQuestionAnswering's qa_outputs and
DebertaForMaskedLM's head (no Enhanced Mask Decoder: HF's v1 classes have
none). Nothing here comes from dserve's C++ code.

Parameter names are those `dserve train --dump-batches` lists for v1: the
tensors dserve's optimizer updates. They are HF's names except for the
fused `in_proj.weight` [3H, H], which dserve trains as the three matrices
`query_proj` / `key_proj` / `value_proj` [H, H] (the same numbers, so the
same AdamW updates element by element). The forward here does what HF does
with in_proj: it builds the fused matrix from them, head by head (rows
3·d·n .. 3·d·n + 3d − 1 = head n's query, key, value rows), multiplies once
and chunks each head's 3d outputs into q, k, v (`in_proj` below). The key
has no bias (v1 has none), `pos_proj` has no bias, `pos_q_proj` has one.
"""

import math

import torch
from torch import nn

F = nn.functional

ACT = {"gelu": lambda x: F.gelu(x), "tanh": torch.tanh, "relu": F.relu}


def pos_att_types(config):
    """README step 1: a list, or a string lower-cased and split on '|'."""
    value = config.get("pos_att_type") or []
    if isinstance(value, str):
        return [p.strip() for p in value.lower().split("|") if p.strip()]
    return [str(p).lower() for p in value]


class Self(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, h = c["hidden_size"], c["num_attention_heads"]
        self.query_proj = nn.Linear(H, H, bias=False)
        self.key_proj = nn.Linear(H, H, bias=False)
        self.value_proj = nn.Linear(H, H, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(H))
        self.v_bias = nn.Parameter(torch.zeros(H))
        types = pos_att_types(c)
        if c.get("relative_attention", False):
            if "c2p" in types:
                self.pos_proj = nn.Linear(H, H, bias=False)
            if "p2c" in types:
                self.pos_q_proj = nn.Linear(H, H)
        if c.get("talking_head", False):
            self.head_logits_proj = nn.Linear(h, h, bias=False)
            self.head_weights_proj = nn.Linear(h, h, bias=False)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden_size"]
        self.self = Self(c)
        self.output = nn.Module()
        self.output.dense = nn.Linear(H, H)
        self.output.LayerNorm = nn.LayerNorm(H, c.get("layer_norm_eps", 1e-7))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, inter = c["hidden_size"], c["intermediate_size"]
        self.attention = Attention(c)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(H, inter)
        self.output = nn.Module()
        self.output.dense = nn.Linear(inter, H)
        self.output.LayerNorm = nn.LayerNorm(H, c.get("layer_norm_eps", 1e-7))


class V1Encoder(nn.Module):
    """DebertaModel (v1): module paths give HF's names under `deberta.`."""

    def __init__(self, c, scale_perturbed=False):
        super().__init__()
        self.c = c
        H, h = c["hidden_size"], c["num_attention_heads"]
        E = c.get("embedding_size") or H
        self.H, self.h, self.d, self.E = H, h, H // h, E
        self.types = pos_att_types(c)
        self.relative = bool(c.get("relative_attention", False))
        max_rel = int(c.get("max_relative_positions", -1))
        self.max_rel = max_rel if max_rel >= 1 else int(c["max_position_embeddings"])
        # README step 1: f = 1 + len(pos_att_type), even without relative attention.
        self.scale = math.sqrt(self.d * (1 if scale_perturbed else 1 + len(self.types)))
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(c["vocab_size"], E)
        self.position_biased_input = bool(c.get("position_biased_input", True))
        if self.position_biased_input:
            self.embeddings.position_embeddings = nn.Embedding(c["max_position_embeddings"], E)
        if int(c.get("type_vocab_size", 0)) > 0:
            self.embeddings.token_type_embeddings = nn.Embedding(c["type_vocab_size"], E)
        if E != H:
            self.embeddings.embed_proj = nn.Linear(E, H, bias=False)
        self.embeddings.LayerNorm = nn.LayerNorm(H, c.get("layer_norm_eps", 1e-7))
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        if self.relative:
            self.encoder.rel_embeddings = nn.Embedding(2 * self.max_rel, H)

    def in_proj(self, at):
        """HF's fused in_proj.weight [3H, H] from the three trained matrices."""
        h, d, H = self.h, self.d, self.H
        parts = [at.query_proj.weight, at.key_proj.weight, at.value_proj.weight]
        return torch.stack([p.view(h, d, H) for p in parts], 1).reshape(3 * H, H)

    def attention(self, x, mask2d, row, at):
        B, L, _ = x.shape
        h, d = self.h, self.d
        t = (x @ self.in_proj(at).t()).view(B, L, h, 3 * d).transpose(1, 2)  # [B, h, L, 3d]
        q, k, v = t.chunk(3, dim=-1)
        q = q + at.q_bias.view(h, 1, d)
        v = v + at.v_bias.view(h, 1, d)
        q = q / self.scale
        scores = q @ k.transpose(-1, -2)
        if self.relative:
            R = self.encoder.rel_embeddings.weight
            idx = row.view(1, 1, L, L).expand(B, h, L, L)
            if hasattr(at, "pos_proj"):
                pk = at.pos_proj(R).view(-1, h, d).transpose(0, 1)  # [h, 2m, d]
                c2p = torch.einsum("bhid,hrd->bhir", q, pk)
                scores = scores + torch.gather(c2p, -1, idx)
            if hasattr(at, "pos_q_proj"):
                pq = at.pos_q_proj(R).view(-1, h, d).transpose(0, 1) / self.scale
                p2c = torch.einsum("bhjd,hrd->bhjr", k, pq)  # [B, h, key j, row]
                # p2c[i, j] = k_j . P_q[row(i, j)]: gather row(i, j) laid out [j, i], transpose.
                scores = scores + torch.gather(p2c, -1, idx.transpose(-1, -2)).transpose(-1, -2)
        if hasattr(at, "head_logits_proj"):
            scores = at.head_logits_proj(scores.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        scores = scores.masked_fill(mask2d.unsqueeze(1) == 0, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, -1)
        if hasattr(at, "head_weights_proj"):
            probs = at.head_weights_proj(probs.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return (probs @ v).transpose(1, 2).reshape(B, L, self.H)

    def forward(self, ids, mask, tt):
        L = ids.shape[1]
        emb = self.embeddings
        x = emb.word_embeddings(ids)
        if self.position_biased_input:
            x = x + emb.position_embeddings.weight[:L].unsqueeze(0)
        if hasattr(emb, "token_type_embeddings"):
            x = x + emb.token_type_embeddings(tt)
        if hasattr(emb, "embed_proj"):
            x = emb.embed_proj(x)
        m = mask.to(x.dtype)
        x = emb.LayerNorm(x) * m.unsqueeze(-1)
        mask2d = m.unsqueeze(2) * m.unsqueeze(1)  # [B, L, L]
        i = torch.arange(L).view(L, 1)
        j = torch.arange(L).view(1, L)
        row = (i - j + self.max_rel).clamp(0, 2 * self.max_rel - 1)
        for layer in self.encoder.layer:
            at = layer.attention
            ctx = self.attention(x, mask2d, row, at.self)
            a = at.output.LayerNorm(at.output.dense(ctx) + x)
            f = ACT[self.c["hidden_act"]](layer.intermediate.dense(a))
            x = layer.output.LayerNorm(layer.output.dense(f) + a)
        return x


def build_heads(model, config, task, sop):
    """The task's HF head on `model` (an nn.Module with .deberta = V1Encoder)."""
    c = config
    H = c["hidden_size"]
    E = c.get("embedding_size") or H
    if task in ("classify", "rerank"):
        num_labels = 1 if task == "rerank" else len(c.get("id2label") or {})
        width = c.get("pooler_hidden_size") or H
        model.pooler = nn.Module()
        model.pooler.dense = nn.Linear(width, width)
        model.pooler_act = ACT[c.get("pooler_hidden_act", "gelu")]
        model.classifier = nn.Linear(width, num_labels)
    elif task == "answer":
        model.qa_outputs = nn.Linear(H, 2)
    elif task == "mlm":
        legacy = bool(c.get("legacy", True))
        width = E if legacy else H
        head = nn.Module()
        head.dense = nn.Linear(H, width)
        head.LayerNorm = nn.LayerNorm(width, c.get("layer_norm_eps", 1e-7))
        head.bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        if legacy:  # LegacyDebertaOnlyMLMHead: cls.predictions.{transform.dense, transform.LayerNorm, bias}
            model.cls = nn.Module()
            model.cls.predictions = nn.Module()
            model.cls.predictions.transform = nn.Module()
            model.cls.predictions.transform.dense = head.dense
            model.cls.predictions.transform.LayerNorm = head.LayerNorm
            model.cls.predictions.bias = head.bias
        else:  # DebertaOnlyMLMHead: lm_predictions.lm_head.{dense, LayerNorm, bias}
            model.lm_predictions = nn.Module()
            model.lm_predictions.lm_head = head
        model.mlm_head = [head]  # a list: not registered twice
        model.mlm_act = ACT[c["hidden_act"]]
        if sop:  # dserve's SOP extension (names dserve_sop.*)
            model.dserve_sop = nn.Module()
            model.dserve_sop.pooler = nn.Module()
            model.dserve_sop.pooler.dense = nn.Linear(H, H)
            model.dserve_sop.classifier = nn.Linear(H, 2)
            model.sop_act = ACT[c.get("pooler_hidden_act", "gelu")]
    else:
        raise ValueError("unknown task %r" % task)


def load_hf_tensors(model, tensors):
    """Loads a v1 checkpoint's HF-named tensors ({name: tensor}; "deberta."
    optional) into `model` (an nn.Module with .deberta and heads), splitting
    each fused in_proj into its heads' query, key and value rows. Returns
    the names of `model`'s parameters that were not in `tensors`."""
    enc = model.deberta
    h, d, H = enc.h, enc.d, enc.H
    params = dict(model.named_parameters())
    loaded = set()
    with torch.no_grad():
        for name, value in tensors.items():
            key = name
            if not key.startswith(("deberta.", "pooler.", "classifier.", "qa_outputs.", "cls.", "lm_predictions.")):
                key = "deberta." + key
            if key.endswith("attention.self.in_proj.weight"):
                per_head = value.view(h, 3, d, H)
                prefix = key[: -len("in_proj.weight")]
                for i, part in enumerate(("query_proj", "key_proj", "value_proj")):
                    params[prefix + part + ".weight"].copy_(per_head[:, i].reshape(H, H))
                    loaded.add(prefix + part + ".weight")
            elif key in params:
                params[key].copy_(value)
                loaded.add(key)
    return sorted(set(params) - loaded)
