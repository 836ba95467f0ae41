#!/usr/bin/python3
"""Independent PyTorch reference of the Hugging Face DeBERTa-v2/v3 forward pass.

Written from shared/REFERENCE-deberta.md (no `transformers` import), following
Hugging Face's `modeling_deberta_v2.py` (current main line) formulation step by
step: all 2*span relative rows are projected, the full [L, L] relative index is
built and clamped, and the c2p / p2c scores are taken with torch.gather (p2c with
the negated index, then transposed, exactly as HF does).  The default compute
dtype is float64 so that it can serve as a test oracle for dserve's C++ encoder.

Supported config options (see REFERENCE §1-§7):
  relative_attention on/off; position_buckets > 0 (log buckets, evaluated in
  float32 like HF) or <= 0 (clamped max_relative_positions; max_relative_positions
  < 1 -> max_position_embeddings); pos_att_type any subset of {c2p, p2c} (list or
  legacy "c2p|p2c" string); share_att_key true/false; norm_rel_ebd layer_norm /
  none; position_biased_input; type_vocab_size 0 / >0; embedding_size != hidden
  (embed_proj); hidden_act / pooler_hidden_act / conv_act from HF's ACT2FN names;
  ConvLayer (conv_kernel_size > 0, conv_groups, conv_act); attention_head_size;
  the attention scale sqrt(d * k), k = 1 + #{c2p, p2c} in pos_att_type (HF counts
  them even when relative_attention is false); dserve's
  `"dserve": {"share_layers": true}` (every layer uses encoder.layer.0's weights).
Heads, chosen from `architectures`: DebertaV2ForSequenceClassification
(ContextPooler + classifier), DebertaV2ForQuestionAnswering (qa_outputs); anything
else (or DebertaV2Model) gives last_hidden_state only.

CLI (mirrors `dserve forward`, DESIGN.md §3):
  deberta_reference.py MODEL_DIR [--dtype float64|float32|bf16] [--hidden]
                       [--batch-size N] < in.jsonl > out.jsonl
  stdin lines {"input_ids": [...], "token_type_ids": [...]?}; stdout lines
  {"logits": [...]} or {"start_logits": [...], "end_logits": [...]}, plus
  "last_hidden_state" with --hidden.  By default every line runs alone
  (unpadded, --batch-size 1); with N > 1 lines are right-padded with id 0 and
  masked, like dserve does.
  `deberta_reference.py --self-check [SHARED_DIR]` reproduces the goldens.

Also importable: load_checkpoint(dir) -> (config, weights); DebertaReference.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

# ---------------------------------------------------------------------------
# safetensors (no `safetensors` module here)

_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "BOOL": np.bool_,
}


def read_safetensors(path):
    """Returns ({name: torch.Tensor}, metadata).  BF16 is widened to float32."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[base + begin: base + end]
        shape = info["shape"]
        dt = info["dtype"]
        if dt == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        elif dt in _ST_DTYPES:
            arr = np.frombuffer(raw, dtype=np.dtype(_ST_DTYPES[dt]).newbyteorder("<"))
        else:
            raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
        out[name] = torch.from_numpy(arr.copy().reshape(shape))
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} (float32/float64/float16/bfloat16/int64) atomically."""
    names = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32"}
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            raw = (t.view(torch.int16).numpy().astype("<i2")).tobytes()
        else:
            raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((-len(hbytes)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------
# config

class Config:
    """HF DebertaV2Config defaults + the derived values of REFERENCE §1."""

    def __init__(self, d):
        self.raw = d
        g = d.get
        self.architectures = list(g("architectures") or [])
        self.vocab_size = int(g("vocab_size", 128100))
        self.hidden_size = int(g("hidden_size", 1536))
        self.num_hidden_layers = int(g("num_hidden_layers", 24))
        self.num_attention_heads = int(g("num_attention_heads", 24))
        self.intermediate_size = int(g("intermediate_size", 6144))
        self.hidden_act = g("hidden_act", "gelu")
        self.max_position_embeddings = int(g("max_position_embeddings", 512))
        self.type_vocab_size = int(g("type_vocab_size", 0))
        self.layer_norm_eps = float(g("layer_norm_eps", 1e-7))
        self.relative_attention = bool(g("relative_attention", False))
        self.max_relative_positions = int(g("max_relative_positions", -1))
        self.pad_token_id = int(g("pad_token_id", 0))
        self.position_biased_input = bool(g("position_biased_input", True))
        pat = g("pos_att_type")
        if pat is None:
            pat = []
        elif isinstance(pat, str):
            pat = [x.strip() for x in pat.lower().split("|")]
        self.pos_att_type = list(pat)
        self.pooler_hidden_act = g("pooler_hidden_act", "gelu")
        self.embedding_size = int(g("embedding_size", None) or self.hidden_size)
        self.pooler_hidden_size = int(g("pooler_hidden_size", None) or self.hidden_size)
        self.position_buckets = int(g("position_buckets", -1))
        self.share_att_key = bool(g("share_att_key", False))
        self.norm_rel_ebd = [x.strip() for x in str(g("norm_rel_ebd", "none")).lower().split("|")]
        self.attention_head_size = int(g("attention_head_size", None)
                                       or self.hidden_size // self.num_attention_heads)
        self.conv_kernel_size = int(g("conv_kernel_size", 0))
        self.conv_groups = int(g("conv_groups", 1))
        self.conv_act = g("conv_act", "tanh")
        ds = g("dserve") or {}
        self.share_layers = bool(ds.get("share_layers", False))
        # derived (REFERENCE §1)
        self.max_rel = (self.max_relative_positions if self.max_relative_positions >= 1
                        else self.max_position_embeddings)
        self.span = self.position_buckets if self.position_buckets > 0 else self.max_rel
        self.scale_factor = 1 + int("c2p" in self.pos_att_type) + int("p2c" in self.pos_att_type)
        arch = self.architectures[0] if self.architectures else "DebertaV2Model"
        if arch.endswith("ForSequenceClassification"):
            self.head = "classify"
        elif arch.endswith("ForQuestionAnswering"):
            self.head = "qa"
        else:
            self.head = "none"


# ---------------------------------------------------------------------------
# activations (HF ACT2FN names)

def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


ACT2FN = {
    "gelu": lambda x: torch.nn.functional.gelu(x),
    "gelu_python": lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_new": _gelu_tanh,
    "gelu_fast": lambda x: 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))),
    "gelu_pytorch_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": torch.relu,
    "tanh": torch.tanh,
    "silu": torch.nn.functional.silu,
    "swish": torch.nn.functional.silu,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
    "mish": torch.nn.functional.mish,
}


def act(name):
    if name not in ACT2FN:
        raise ValueError("unknown activation %r" % name)
    return ACT2FN[name]


# ---------------------------------------------------------------------------
# checkpoint

def load_checkpoint(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = Config(json.load(f))
    path = os.path.join(model_dir, "model.safetensors")
    tensors, _ = read_safetensors(path)
    weights = {}
    for name, t in tensors.items():
        if name.startswith("deberta."):
            name = name[len("deberta."):]
        weights[name] = t
    return cfg, weights


# ---------------------------------------------------------------------------
# relative positions (REFERENCE §3, HF build_relative_position)

def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """HF's formula, evaluated in float32 as HF does (default dtype float32)."""
    sign = torch.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid),
                          torch.tensor(mid - 1).type_as(relative_pos),
                          torch.abs(relative_pos))
    log_pos = torch.ceil(
        torch.log(abs_pos.to(torch.float32) / mid)
        / torch.log(torch.tensor((max_position - 1) / mid, dtype=torch.float32))
        * (mid - 1)) + mid
    bucket_pos = torch.where(abs_pos <= mid, relative_pos.to(log_pos.dtype), log_pos * sign)
    return bucket_pos


def build_relative_position(query_size, key_size, bucket_size=-1, max_position=-1):
    q_ids = torch.arange(query_size, dtype=torch.long)
    k_ids = torch.arange(key_size, dtype=torch.long)
    rel = q_ids[:, None] - k_ids[None, :]
    if bucket_size > 0 and max_position > 0:
        rel = make_log_bucket_position(rel, bucket_size, max_position)
    rel = rel.to(torch.long)[:query_size, :]
    return rel.unsqueeze(0)  # [1, Lq, Lk]


# ---------------------------------------------------------------------------
# the model

class DebertaReference:
    """Functional forward over a {HF name without 'deberta.': tensor} dict."""

    def __init__(self, cfg, weights, dtype=torch.float64):
        self.cfg = cfg
        self.dtype = dtype
        self.w = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in weights.items()}

    # -- helpers
    def _lin(self, prefix, x, bias=True):
        y = torch.matmul(x, self.w[prefix + ".weight"].t())
        if bias and (prefix + ".bias") in self.w:
            y = y + self.w[prefix + ".bias"]
        return y

    def _ln(self, prefix, x):
        return torch.nn.functional.layer_norm(
            x, (x.shape[-1],), self.w[prefix + ".weight"], self.w[prefix + ".bias"],
            self.cfg.layer_norm_eps)

    def _layer_prefix(self, i):
        return "encoder.layer.%d" % (0 if self.cfg.share_layers else i)

    # -- REFERENCE §2
    def embeddings(self, input_ids, token_type_ids, mask):
        c, w = self.cfg, self.w
        B, L = input_ids.shape
        x = w["embeddings.word_embeddings.weight"][input_ids]
        if c.position_biased_input:
            pos = torch.arange(L, dtype=torch.long).unsqueeze(0).expand(B, L)
            x = x + w["embeddings.position_embeddings.weight"][pos]
        if c.type_vocab_size > 0:
            x = x + w["embeddings.token_type_embeddings.weight"][token_type_ids]
        if c.embedding_size != c.hidden_size:
            x = self._lin("embeddings.embed_proj", x, bias=False)
        x = self._ln("embeddings.LayerNorm", x)
        return x * mask.unsqueeze(2).to(x.dtype)

    def rel_embeddings(self):
        c = self.cfg
        if not c.relative_attention:
            return None
        r = self.w["encoder.rel_embeddings.weight"]
        if "layer_norm" in c.norm_rel_ebd:
            r = self._ln("encoder.LayerNorm", r)
        return r

    def _heads(self, x):
        # [B, L, h*d] -> [B*h, L, d]  (HF transpose_for_scores)
        B, L, _ = x.shape
        h = self.cfg.num_attention_heads
        return x.view(B, L, h, -1).permute(0, 2, 1, 3).contiguous().view(B * h, L, -1)

    # -- REFERENCE §4
    def attention(self, p, hidden, att_mask, relative_pos, rel_emb):
        c = self.cfg
        h = c.num_attention_heads
        B, L, _ = hidden.shape
        q = self._heads(self._lin(p + ".query_proj", hidden))
        k = self._heads(self._lin(p + ".key_proj", hidden))
        v = self._heads(self._lin(p + ".value_proj", hidden))
        d = q.shape[-1]
        scale = math.sqrt(d * c.scale_factor)
        scores = torch.bmm(q, k.transpose(-1, -2) / scale)
        if c.relative_attention:
            span = c.span
            rel = relative_pos.unsqueeze(1)  # [1, 1, Lq, Lk]
            R = rel_emb[0:span * 2, :].unsqueeze(0)
            if c.share_att_key:
                pos_q = self._heads(self._lin(p + ".query_proj", R)).repeat(B, 1, 1)
                pos_k = self._heads(self._lin(p + ".key_proj", R)).repeat(B, 1, 1)
            else:
                if "c2p" in c.pos_att_type:
                    pos_k = self._heads(self._lin(p + ".pos_key_proj", R)).repeat(B, 1, 1)
                if "p2c" in c.pos_att_type:
                    pos_q = self._heads(self._lin(p + ".pos_query_proj", R)).repeat(B, 1, 1)
            score = 0
            if "c2p" in c.pos_att_type:
                c2p = torch.bmm(q, pos_k.transpose(-1, -2))  # [B*h, Lq, 2span]
                c2p_pos = torch.clamp(rel + span, 0, span * 2 - 1)
                c2p = torch.gather(c2p, dim=-1,
                                   index=c2p_pos.squeeze(0).expand([q.size(0), q.size(1), rel.size(-1)]))
                score = score + c2p / scale
            if "p2c" in c.pos_att_type:
                # query length == key length here, so HF's build_rpos returns relative_pos
                p2c_pos = torch.clamp(-rel + span, 0, span * 2 - 1)
                p2c = torch.bmm(k, pos_q.transpose(-1, -2))  # [B*h, Lk, 2span]
                p2c = torch.gather(p2c, dim=-1,
                                   index=p2c_pos.squeeze(0).expand([q.size(0), k.size(-2), k.size(-2)]))
                score = score + p2c.transpose(-1, -2) / scale
            scores = scores + score
        scores = scores.view(B, h, L, L)
        scores = scores.masked_fill(~att_mask, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.bmm(probs.view(B * h, L, L), v)
        ctx = ctx.view(B, h, L, -1).permute(0, 2, 1, 3).contiguous().view(B, L, -1)
        return ctx, probs

    # -- REFERENCE §5
    def layer(self, i, hidden, att_mask, relative_pos, rel_emb):
        c = self.cfg
        p = self._layer_prefix(i)
        ctx, probs = self.attention(p + ".attention.self", hidden, att_mask, relative_pos, rel_emb)
        attn = self._ln(p + ".attention.output.LayerNorm",
                        self._lin(p + ".attention.output.dense", ctx) + hidden)
        inter = act(c.hidden_act)(self._lin(p + ".intermediate.dense", attn))
        out = self._ln(p + ".output.LayerNorm", self._lin(p + ".output.dense", inter) + attn)
        return out, probs

    def conv(self, hidden, residual, mask):
        c = self.cfg
        k = c.conv_kernel_size
        out = torch.nn.functional.conv1d(hidden.permute(0, 2, 1).contiguous(),
                                         self.w["encoder.conv.conv.weight"],
                                         self.w.get("encoder.conv.conv.bias"),
                                         padding=(k - 1) // 2, groups=c.conv_groups)
        out = out.permute(0, 2, 1).contiguous()
        out = out.masked_fill(~mask.bool().unsqueeze(-1).expand(out.size()), 0)
        out = act(c.conv_act)(out)
        y = self._ln("encoder.conv.LayerNorm", residual + out)
        return y * mask.unsqueeze(2).to(y.dtype)

    def encoder(self, x, mask, trace=None):
        c = self.cfg
        B, L, _ = x.shape
        m = mask.to(torch.long)
        att_mask = (m.unsqueeze(1).unsqueeze(2) * m.unsqueeze(1).unsqueeze(-1)).bool()  # [B,1,L,L]
        relative_pos = None
        if c.relative_attention:
            relative_pos = build_relative_position(L, L, c.position_buckets, c.max_rel)
        rel_emb = self.rel_embeddings()
        if trace is not None:
            trace["relative_pos"] = relative_pos
            trace["rel_embeddings"] = rel_emb
        h = x
        for i in range(c.num_hidden_layers):
            out, probs = self.layer(i, h, att_mask, relative_pos, rel_emb)
            if i == 0 and c.conv_kernel_size > 0:
                out = self.conv(x, out, mask)
            if trace is not None:
                trace["layer%d_output" % i] = out
                if i == 0:
                    trace["layer0_attention_probs"] = probs
            h = out
        return h

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, trace=None):
        input_ids = torch.as_tensor(input_ids, dtype=torch.long)
        if input_ids.dim() == 1:
            input_ids = input_ids.unsqueeze(0)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        attention_mask = torch.as_tensor(attention_mask, dtype=torch.long)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        token_type_ids = torch.as_tensor(token_type_ids, dtype=torch.long)
        with torch.no_grad():
            x = self.embeddings(input_ids, token_type_ids, attention_mask)
            if trace is not None:
                trace["embedding_output"] = x
            hidden = self.encoder(x, attention_mask, trace)
            out = {"last_hidden_state": hidden}
            c = self.cfg
            if c.head == "classify":
                pooled = act(c.pooler_hidden_act)(self._lin("pooler.dense", hidden[:, 0]))
                out["logits"] = self._lin("classifier", pooled)
            elif c.head == "qa":
                lg = self._lin("qa_outputs", hidden)
                out["start_logits"] = lg[..., 0]
                out["end_logits"] = lg[..., 1]
        return out


def load(model_dir, dtype=torch.float64):
    cfg, weights = load_checkpoint(model_dir)
    return DebertaReference(cfg, weights, dtype)


DTYPES = {"float64": torch.float64, "fp64": torch.float64, "float32": torch.float32,
          "fp32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


# ---------------------------------------------------------------------------
# JSONL driver (same contract as `dserve forward`)

def run_lines(model, lines, batch_size=1, hidden=False):
    """lines: list of dicts with input_ids (+ token_type_ids).  Returns list of dicts."""
    results = []
    step = max(1, batch_size)
    for first in range(0, len(lines), step):
        chunk = lines[first:first + step]
        L = max(len(x["input_ids"]) for x in chunk)
        ids = torch.zeros(len(chunk), L, dtype=torch.long)
        tts = torch.zeros(len(chunk), L, dtype=torch.long)
        mask = torch.zeros(len(chunk), L, dtype=torch.long)
        for r, x in enumerate(chunk):
            n = len(x["input_ids"])
            ids[r, :n] = torch.tensor(x["input_ids"], dtype=torch.long)
            if x.get("token_type_ids") is not None:
                tts[r, :n] = torch.tensor(x["token_type_ids"], dtype=torch.long)
            mask[r, :n] = 1
        out = model.forward(ids, mask, tts)
        for r, x in enumerate(chunk):
            n = len(x["input_ids"])
            line = {}
            if "logits" in out:
                line["logits"] = out["logits"][r].double().tolist()
            if "start_logits" in out:
                line["start_logits"] = out["start_logits"][r, :n].double().tolist()
                line["end_logits"] = out["end_logits"][r, :n].double().tolist()
            if hidden or ("logits" not in out and "start_logits" not in out):
                line["last_hidden_state"] = out["last_hidden_state"][r, :n].double().tolist()
            results.append(line)
    return results


# ---------------------------------------------------------------------------
# golden self-check

def _maxdiff(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise AssertionError("shape %s vs %s" % (a.shape, b.shape))
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def self_check(shared_dir, tol=1e-5, verbose=True):
    """Reproduces every golden case (run alone), plus extra cases and the padded
    batch at valid positions.  Returns {model: max |diff|}; raises on failure."""
    root = os.path.join(shared_dir, "goldens", "model")
    report = {}
    for name in sorted(os.listdir(root)):
        gpath = os.path.join(root, name, "golden.json")
        if not os.path.isfile(gpath):
            continue
        with open(gpath) as f:
            g = json.load(f)
        model = load(os.path.join(root, name))
        worst = 0.0
        for case in g["cases"] + g.get("extra_cases", []):
            out = model.forward([case["input_ids"]], None, [case["token_type_ids"]]
                                if "token_type_ids" in case else None)
            for key in ("logits", "start_logits", "end_logits"):
                if key in case:
                    worst = max(worst, _maxdiff(out[key][0], case[key]))
            if "last_hidden_state" in case:
                worst = max(worst, _maxdiff(out["last_hidden_state"][0], case["last_hidden_state"]))
            if "last_hidden_state_row0" in case:
                worst = max(worst, _maxdiff(out["last_hidden_state"][0, 0], case["last_hidden_state_row0"]))
        # the padded batch, valid positions only (diagnostic, same tolerance)
        b = g.get("batch")
        if b:
            mask = torch.tensor(b["attention_mask"])
            out = model.forward(b["input_ids"], mask, b.get("token_type_ids"))
            bworst = 0.0
            if "logits" in b:
                bworst = max(bworst, _maxdiff(out["logits"], b["logits"]))
            for key in ("start_logits", "end_logits"):
                kv = key + "_valid"
                if kv in b:
                    for r, row in enumerate(b[kv]):
                        bworst = max(bworst, _maxdiff(out[key][r, :len(row)], row))
            report[name + ".batch"] = bworst
        report[name] = worst
        if verbose:
            print("golden %-20s cases max|diff| = %.3g   batch(valid) = %.3g"
                  % (name, worst, report.get(name + ".batch", float("nan"))))
        if worst > tol or report.get(name + ".batch", 0.0) > tol:
            raise AssertionError("%s: max |diff| %.3g > %.3g" % (name, max(worst, report.get(name + ".batch", 0.0)), tol))
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--dtype", default="float64", choices=sorted(DTYPES))
    ap.add_argument("--hidden", action="store_true", help="also print last_hidden_state")
    ap.add_argument("--batch-size", type=int, default=1,
                    help="lines per forward (padded and masked); 1 = each alone")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--self-check", metavar="SHARED_DIR", nargs="?", const="",
                    help="reproduce shared/goldens (default: ../../../../shared)")
    a = ap.parse_args(argv)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.self_check is not None:
        shared = a.self_check or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                              "..", "..", "..", "..", "shared")
        self_check(shared)
        print("self-check OK")
        return 0
    if not a.model_dir:
        ap.error("MODEL_DIR is required")
    model = load(a.model_dir, DTYPES[a.dtype])
    lines = []
    for number, text in enumerate(sys.stdin, 1):
        if not text.strip():
            continue
        doc = json.loads(text)
        if "input_ids" not in doc or not doc["input_ids"]:
            sys.stderr.write("deberta_reference: line %d: missing or empty input_ids\n" % number)
            return 1
        lines.append(doc)
    for line in run_lines(model, lines, a.batch_size, a.hidden):
        sys.stdout.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
