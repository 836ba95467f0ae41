#!/usr/bin/python3
"""Writes a random-weight DeBERTa-v2/v3 checkpoint for one encoder variant.

usage:
  make_variant_checkpoint.py OUT_DIR --variant NAME [--seed N]
  make_variant_checkpoint.py OUT_DIR --spec '{"hidden_size": 64, ...}' [--seed N]
  make_variant_checkpoint.py --list

The directory gets Hugging Face's layout: config.json (model_type deberta-v2,
`architectures`, every DebertaV2Config field the encoder reads) and
model.safetensors with HF state_dict names ("deberta." prefix + head names),
float32 unless the spec says `"store_dtype": "bf16" | "f16"`.  Weights and biases
are N(0, 0.2^2), LayerNorm gains 1 + N(0, 0.2^2) (as in shared/goldens) so that
mistakes show.  Generation is deterministic: numpy RandomState(seed), tensors
drawn in sorted-name order.

A spec is a dict of config.json overrides on BASE plus these generator-only keys:
  head            "classify" (default) | "qa" | "none"  -> architectures
  num_labels      classify head size (default 3)
  store_dtype     "f32" (default) | "bf16" | "f16"
  extra_tensors   true: also write tensors Hugging Face ignores (v3 hub files
                  carry lm_predictions.*, mask_predictions.* and an unused
                  position_embeddings table)
  share_layers    true: config gets "dserve": {"share_layers": true}; only
                  encoder.layer.0 is stored
VARIANTS below is the matrix variants_test.py runs.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import deberta_reference as ref  # noqa: E402

BASE = {
    "model_type": "deberta-v2",
    "vocab_size": 500,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 128,
    "type_vocab_size": 0,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-7,
    "relative_attention": True,
    "max_relative_positions": -1,
    "pad_token_id": 0,
    "position_biased_input": False,
    "pos_att_type": ["p2c", "c2p"],
    "pooler_dropout": 0,
    "pooler_hidden_act": "gelu",
    "position_buckets": 32,
    "share_att_key": True,
    "norm_rel_ebd": "layer_norm",
    "legacy": True,
    "torch_dtype": "float32",
}

GEN_KEYS = ("head", "num_labels", "store_dtype", "extra_tensors", "share_layers")

# The matrix run by variants_test.py.  Every option of deberta_reference.py is
# covered at least once; hidden 32-96, 2-3 layers so that the whole test stays
# well under 2 minutes on 2 cores.
VARIANTS = {
    # DeBERTa-v3 shape in small; buckets 32 / max_rel 128 (from max_position):
    # sequences up to 150 go past the bucket range and past max_rel.
    # Hub-style extra tensors that HF ignores.
    "v3_like": {"num_labels": 3, "extra_tensors": True},
    # ConvLayer (v2-xlarge style): groups 4, tanh conv_act, legacy "c2p|p2c" string
    "conv_groups_tanh": {"conv_kernel_size": 3, "conv_groups": 4, "conv_act": "tanh",
                         "pos_att_type": "c2p|p2c", "position_buckets": 16,
                         "max_relative_positions": 64, "num_labels": 4},
    # ConvLayer, kernel 5, groups 2, gelu conv_act, relu FFN, 3 layers, hidden 48
    "conv_gelu_relu": {"hidden_size": 48, "num_attention_heads": 4, "intermediate_size": 96,
                       "num_hidden_layers": 3, "conv_kernel_size": 5, "conv_groups": 2,
                       "conv_act": "gelu", "hidden_act": "relu", "num_labels": 2},
    # no relative attention, absolute positions, token types; pos_att_type still
    # [c2p, p2c], so HF's scale is sqrt(3d); norm_rel_ebd layer_norm keeps an
    # (unused) encoder.LayerNorm in the state_dict as HF's does.
    "abs_only_scale3": {"relative_attention": False, "position_biased_input": True,
                        "max_position_embeddings": 160, "type_vocab_size": 2,
                        "pos_att_type": ["c2p", "p2c"], "num_labels": 3},
    # no relative attention, no pos_att_type (scale sqrt(d)), no rel LN (the
    # HF DebertaV2Config defaults)
    "abs_only_plain": {"relative_attention": False, "position_biased_input": True,
                       "max_position_embeddings": 160, "pos_att_type": None,
                       "norm_rel_ebd": "none", "position_buckets": -1, "num_labels": 2,
                       "hidden_act": "tanh"},
    # separate pos_key_proj + pos_query_proj with c2p+p2c, clamped max_rel 24
    # without buckets, silu, QA head
    "unshared_both_qa": {"share_att_key": False, "position_buckets": -1,
                         "max_relative_positions": 24, "hidden_act": "silu", "head": "qa"},
    # p2c only with pos_query_proj, no rel LN, 1 label (reranker)
    "p2c_only_unshared_rerank": {"share_att_key": False, "pos_att_type": ["p2c"],
                                 "norm_rel_ebd": "none", "max_relative_positions": 64,
                                 "num_labels": 1, "pooler_hidden_act": "tanh"},
    # no buckets, max_relative_positions -1 -> max_position_embeddings 64 (span
    # 64, clamped for |rel| >= 64), gelu_new, hidden 96 / 6 heads
    "nobuckets_maxpos_gelu_new": {"position_buckets": -1, "max_relative_positions": -1,
                                  "max_position_embeddings": 64, "hidden_act": "gelu_new",
                                  "hidden_size": 96, "num_attention_heads": 6,
                                  "intermediate_size": 192, "num_labels": 5},
    # factorized embeddings (embedding_size 32 < hidden 64, embed_proj), token
    # types, absolute + relative positions, c2p only with pos_key_proj, QA head
    "embproj_tokentypes_qa": {"embedding_size": 32, "type_vocab_size": 2,
                              "position_biased_input": True, "max_position_embeddings": 192,
                              "pos_att_type": ["c2p"], "share_att_key": False,
                              "position_buckets": -1, "max_relative_positions": 48,
                              "hidden_act": "relu", "head": "qa"},
    # ALBERT-style sharing (dserve extension), 3 layers, weights stored as bf16
    "share_layers_bf16": {"share_layers": True, "num_hidden_layers": 3, "num_labels": 2,
                          "store_dtype": "bf16"},
    # attention_head_size 12 != hidden/heads (all_head_size 48 != hidden 32),
    # c2p only shared, buckets 8 / max_rel 20, weights stored as f16
    "head_size_f16": {"hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64,
                      "attention_head_size": 12, "pos_att_type": ["c2p"],
                      "position_buckets": 8, "max_relative_positions": 20,
                      "num_labels": 3, "store_dtype": "f16"},
    # QA head on the v3 shape, 3 layers, gelu_new
    "v3_qa": {"head": "qa", "num_hidden_layers": 3, "hidden_act": "gelu_new"},
}


def make_config(spec):
    cfg = dict(BASE)
    for k, v in spec.items():
        if k not in GEN_KEYS:
            cfg[k] = v
    head = spec.get("head", "classify")
    if head == "classify":
        n = int(spec.get("num_labels", 3))
        cfg["architectures"] = ["DebertaV2ForSequenceClassification"]
        cfg["id2label"] = {str(i): "LABEL_%d" % i for i in range(n)}
        cfg["label2id"] = {"LABEL_%d" % i: i for i in range(n)}
    elif head == "qa":
        cfg["architectures"] = ["DebertaV2ForQuestionAnswering"]
    elif head == "none":
        cfg["architectures"] = ["DebertaV2Model"]
    else:
        raise ValueError("head must be classify, qa or none: %r" % head)
    cfg["pooler_hidden_size"] = cfg["hidden_size"]
    if cfg.get("embedding_size") is None:
        cfg["embedding_size"] = cfg["hidden_size"]
    if spec.get("share_layers"):
        cfg["dserve"] = {"share_layers": True}
    if spec.get("store_dtype") in ("bf16", "f16"):
        cfg["torch_dtype"] = {"bf16": "bfloat16", "f16": "float16"}[spec["store_dtype"]]
    return cfg


def state_dict_shapes(cfg_dict, extra_tensors=False):
    """{HF name: shape} for a DebertaV2For* model with this config.json."""
    c = ref.Config(cfg_dict)
    H, E, I = c.hidden_size, c.embedding_size, c.intermediate_size
    A = c.num_attention_heads * c.attention_head_size
    bare = c.head == "none"
    p = "" if bare else "deberta."
    s = {}
    s[p + "embeddings.word_embeddings.weight"] = [c.vocab_size, E]
    if c.position_biased_input or extra_tensors:
        s[p + "embeddings.position_embeddings.weight"] = [c.max_position_embeddings, E]
    if c.type_vocab_size > 0:
        s[p + "embeddings.token_type_embeddings.weight"] = [c.type_vocab_size, E]
    if E != H:
        s[p + "embeddings.embed_proj.weight"] = [H, E]
    s[p + "embeddings.LayerNorm.weight"] = [H]
    s[p + "embeddings.LayerNorm.bias"] = [H]
    layers = 1 if c.share_layers else c.num_hidden_layers
    for i in range(layers):
        lp = p + "encoder.layer.%d." % i
        for proj in ("query_proj", "key_proj", "value_proj"):
            s[lp + "attention.self.%s.weight" % proj] = [A, H]
            s[lp + "attention.self.%s.bias" % proj] = [A]
        if c.relative_attention and not c.share_att_key:
            if "c2p" in c.pos_att_type:
                s[lp + "attention.self.pos_key_proj.weight"] = [A, H]
                s[lp + "attention.self.pos_key_proj.bias"] = [A]
            if "p2c" in c.pos_att_type:
                s[lp + "attention.self.pos_query_proj.weight"] = [A, H]
                s[lp + "attention.self.pos_query_proj.bias"] = [A]
        s[lp + "attention.output.dense.weight"] = [H, A]
        s[lp + "attention.output.dense.bias"] = [H]
        s[lp + "attention.output.LayerNorm.weight"] = [H]
        s[lp + "attention.output.LayerNorm.bias"] = [H]
        s[lp + "intermediate.dense.weight"] = [I, H]
        s[lp + "intermediate.dense.bias"] = [I]
        s[lp + "output.dense.weight"] = [H, I]
        s[lp + "output.dense.bias"] = [H]
        s[lp + "output.LayerNorm.weight"] = [H]
        s[lp + "output.LayerNorm.bias"] = [H]
    if c.relative_attention:
        s[p + "encoder.rel_embeddings.weight"] = [2 * c.span, H]
    if "layer_norm" in c.norm_rel_ebd:  # HF creates it even without relative attention
        s[p + "encoder.LayerNorm.weight"] = [H]
        s[p + "encoder.LayerNorm.bias"] = [H]
    if c.conv_kernel_size > 0:
        s[p + "encoder.conv.conv.weight"] = [H, H // c.conv_groups, c.conv_kernel_size]
        s[p + "encoder.conv.conv.bias"] = [H]
        s[p + "encoder.conv.LayerNorm.weight"] = [H]
        s[p + "encoder.conv.LayerNorm.bias"] = [H]
    if c.head == "classify":
        n = len(cfg_dict.get("id2label") or {}) or 2
        s["pooler.dense.weight"] = [H, H]
        s["pooler.dense.bias"] = [H]
        s["classifier.weight"] = [n, H]
        s["classifier.bias"] = [n]
    elif c.head == "qa":
        s["qa_outputs.weight"] = [2, H]
        s["qa_outputs.bias"] = [2]
    if extra_tensors:  # what v3 hub files also carry; HF ignores them
        s["lm_predictions.lm_head.dense.weight"] = [H, H]
        s["lm_predictions.lm_head.dense.bias"] = [H]
        s["lm_predictions.lm_head.LayerNorm.weight"] = [H]
        s["lm_predictions.lm_head.LayerNorm.bias"] = [H]
        s["lm_predictions.lm_head.bias"] = [c.vocab_size]
        s["mask_predictions.dense.weight"] = [H, H]
        s["mask_predictions.dense.bias"] = [H]
        s["mask_predictions.LayerNorm.weight"] = [H]
        s["mask_predictions.LayerNorm.bias"] = [H]
        s["mask_predictions.classifier.weight"] = [1, H]
        s["mask_predictions.classifier.bias"] = [1]
    return s


def random_weights(shapes, seed):
    rs = np.random.RandomState(seed)
    out = {}
    for name in sorted(shapes):
        shape = shapes[name]
        a = rs.normal(0.0, 0.2, size=shape)
        if "LayerNorm.weight" in name:
            a = a + 1.0
        out[name] = torch.from_numpy(a.astype(np.float32))
    return out


def write_checkpoint(out_dir, spec, seed=0):
    """Writes config.json + model.safetensors into out_dir (replaced atomically)."""
    cfg = make_config(spec)
    shapes = state_dict_shapes(cfg, bool(spec.get("extra_tensors")))
    weights = random_weights(shapes, seed)
    store = spec.get("store_dtype", "f32")
    if store == "bf16":
        weights = {k: v.to(torch.bfloat16) for k, v in weights.items()}
    elif store == "f16":
        weights = {k: v.to(torch.float16) for k, v in weights.items()}
    elif store != "f32":
        raise ValueError("store_dtype must be f32, bf16 or f16")
    out_dir = os.path.abspath(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-ckpt-", dir=parent)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    ref.write_safetensors(os.path.join(tmp, "model.safetensors"), weights, {"format": "pt"})
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?")
    ap.add_argument("--variant", choices=sorted(VARIANTS))
    ap.add_argument("--spec", help="JSON object of config overrides + generator keys")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args(argv)
    if a.list:
        for name in VARIANTS:
            print(name, json.dumps(VARIANTS[name]))
        return 0
    if not a.out_dir or (a.variant is None) == (a.spec is None):
        ap.error("give OUT_DIR and exactly one of --variant / --spec")
    spec = VARIANTS[a.variant] if a.variant else json.loads(a.spec)
    write_checkpoint(a.out_dir, spec, a.seed)
    print(a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
