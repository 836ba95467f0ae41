"""Eager PyTorch ALBERT (Hugging Face's AlbertModel computation, written
from the maths in shared/goldens/albert/README.md, not from transformers'
code): the baseline our ALBERT encoder is timed against
(`eager_baseline.py --shape albert-base` or `--model ALBERT_DIR`), and a
second, independent check of the goldens (tests/model/reference/
albert_eager_test.py).

Run with Debian's /usr/bin/python3 (torch 1.13; no transformers here)."""
import json
import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "model",
                                "reference"))
from deberta_reference import read_safetensors  # noqa: E402

ALBERT_BASE = {  # albert-base-v2's config.json, with a 2-label classifier
    "model_type": "albert", "architectures": ["AlbertForSequenceClassification"],
    "id2label": {"0": "LABEL_0", "1": "LABEL_1"}, "vocab_size": 30000, "embedding_size": 128,
    "hidden_size": 768, "num_hidden_layers": 12, "num_hidden_groups": 1, "inner_group_num": 1,
    "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu_new",
    "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
}

DEFAULTS = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_hidden_layers": 12,
            "num_hidden_groups": 1, "inner_group_num": 1, "num_attention_heads": 64, "intermediate_size": 16384,
            "hidden_act": "gelu_new", "max_position_embeddings": 512, "type_vocab_size": 2,
            "layer_norm_eps": 1e-12}


def activation(name):
    if name in ("gelu_new", "gelu_fast", "gelu_pytorch_tanh"):
        return lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    return {"gelu": nn.functional.gelu, "relu": torch.relu, "tanh": torch.tanh, "silu": nn.functional.silu,
            "swish": nn.functional.silu}[name]


class Cfg:
    def __init__(self, d):
        self.raw = d
        for k, v in DEFAULTS.items():
            setattr(self, k, d.get(k, v))
        arch = " ".join(d.get("architectures") or [])
        self.head = "qa" if "QuestionAnswering" in arch else "classify"
        self.num_labels = len(d.get("id2label") or {}) or d.get("num_labels", 2)
        self.position_biased_input = True  # absolute positions


class AlbertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c.hidden_size, c.intermediate_size
        self.heads, self.d, self.eps = c.num_attention_heads, H // c.num_attention_heads, c.layer_norm_eps
        self.query, self.key, self.value, self.dense = (nn.Linear(H, H) for _ in range(4))
        self.attention_norm = nn.LayerNorm(H, eps=self.eps)
        self.ffn, self.ffn_output = nn.Linear(H, I), nn.Linear(I, H)
        self.output_norm = nn.LayerNorm(H, eps=self.eps)
        self.act = activation(c.hidden_act)

    def forward(self, h, key_bias):
        B, L, H = h.shape

        def heads(x):
            return x.view(B, L, self.heads, self.d).transpose(1, 2)
        q, k, v = heads(self.query(h)), heads(self.key(h)), heads(self.value(h))
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.d) + key_bias, dim=-1)
        ctx = (p @ v).transpose(1, 2).reshape(B, L, H)
        a = self.attention_norm(h + self.dense(ctx))
        return self.output_norm(self.ffn_output(self.act(self.ffn(a))) + a)


class AlbertEager(nn.Module):
    def __init__(self, config_dict):
        super().__init__()
        c = self.c = Cfg(config_dict)
        E, H = c.embedding_size, c.hidden_size
        self.word = nn.Embedding(c.vocab_size, E)
        self.position = nn.Embedding(c.max_position_embeddings, E)
        self.token_type = nn.Embedding(c.type_vocab_size, E)
        self.embedding_norm = nn.LayerNorm(E, eps=c.layer_norm_eps)
        self.mapping_in = nn.Linear(E, H)
        self.groups = nn.ModuleList(nn.ModuleList(AlbertLayer(c) for _ in range(c.inner_group_num))
                                    for _ in range(c.num_hidden_groups))
        if c.head == "classify":
            self.pooler, self.classifier = nn.Linear(H, H), nn.Linear(H, c.num_labels)
        else:
            self.qa_outputs = nn.Linear(H, 2)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None):
        c = self.c
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(input_ids.shape[1])
        x = self.word(input_ids) + self.token_type(token_type_ids) + self.position(positions)[None]
        h = self.mapping_in(self.embedding_norm(x))
        dtype = h.dtype
        key_bias = ((1 - attention_mask).to(dtype) * torch.finfo(dtype).min)[:, None, None, :]
        for i in range(c.num_hidden_layers):
            for layer in self.groups[int(i / (c.num_hidden_layers / c.num_hidden_groups))]:
                h = layer(h, key_bias)
        out = {"last_hidden_state": h}
        if c.head == "classify":
            out["logits"] = self.classifier(torch.tanh(self.pooler(h[:, 0])))
        else:
            lg = self.qa_outputs(h)
            out["start_logits"], out["end_logits"] = lg[..., 0], lg[..., 1]
        return out

    def init_random(self, seed=0):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "norm" in name:
                    p.fill_(1.0 if name.endswith("weight") else 0.0)
                else:
                    p.normal_(0.0, 0.02, generator=g)
        return self


def hf_names(model):
    """Our parameter name -> Hugging Face state_dict name."""
    names = {"word.weight": "albert.embeddings.word_embeddings.weight",
             "position.weight": "albert.embeddings.position_embeddings.weight",
             "token_type.weight": "albert.embeddings.token_type_embeddings.weight",
             "embedding_norm.weight": "albert.embeddings.LayerNorm.weight",
             "embedding_norm.bias": "albert.embeddings.LayerNorm.bias",
             "mapping_in.weight": "albert.encoder.embedding_hidden_mapping_in.weight",
             "mapping_in.bias": "albert.encoder.embedding_hidden_mapping_in.bias",
             "pooler.weight": "albert.pooler.weight", "pooler.bias": "albert.pooler.bias",
             "classifier.weight": "classifier.weight", "classifier.bias": "classifier.bias",
             "qa_outputs.weight": "qa_outputs.weight", "qa_outputs.bias": "qa_outputs.bias"}
    layer = {"query": "attention.query", "key": "attention.key", "value": "attention.value",
             "dense": "attention.dense", "attention_norm": "attention.LayerNorm", "ffn": "ffn",
             "ffn_output": "ffn_output", "output_norm": "full_layer_layer_norm"}
    for name, _ in model.named_parameters():
        if name.startswith("groups."):
            _, g, j, module, kind = name.split(".")
            names[name] = "albert.encoder.albert_layer_groups.%s.albert_layers.%s.%s.%s" % (g, j, layer[module], kind)
    return names


def load_checkpoint(model_dir, dtype=torch.float32):
    with open(os.path.join(model_dir, "config.json")) as f:
        model = AlbertEager(json.load(f))
    tensors, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    state = {}
    for ours, theirs in hf_names(model).items():
        for candidate in (theirs, theirs[len("albert."):] if theirs.startswith("albert.") else None):
            if candidate in tensors:
                state[ours] = tensors[candidate]
                break
    missing = sorted(set(dict(model.named_parameters())) - set(state))
    if missing:
        raise ValueError("%s: missing weights for %s" % (model_dir, missing))
    model.load_state_dict(state)
    return model.to(dtype).eval()
