#!/usr/bin/env python3
"""Writes a random-weight DeBERTa-v2 classify checkpoint of a chosen size, for
benchmarks only (its outputs mean nothing). Pure Python, no numpy/torch.

It takes the config.json and spm.model of a small classify checkpoint (such as
tests/data/make_test_models.py's OUT/classify) and scales the encoder:

usage: make_random_checkpoint.py SRC_DIR OUT_DIR [--hidden 384] [--layers 6]
                                 [--heads 6] [--intermediate 1536]
"""
import argparse
import array
import json
import os
import random
import shutil
import struct


def tensors(cfg):
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    n_labels = len(cfg["id2label"])
    rel = 2 * cfg["position_buckets"] if cfg.get("position_buckets", -1) > 0 else 2 * cfg["max_position_embeddings"]
    out = {
        "deberta.embeddings.word_embeddings.weight": [v, h],
        "deberta.embeddings.LayerNorm.weight": [h],
        "deberta.embeddings.LayerNorm.bias": [h],
        "deberta.encoder.rel_embeddings.weight": [rel, h],
        "deberta.encoder.LayerNorm.weight": [h],
        "deberta.encoder.LayerNorm.bias": [h],
        "pooler.dense.weight": [h, h],
        "pooler.dense.bias": [h],
        "classifier.weight": [n_labels, h],
        "classifier.bias": [n_labels],
    }
    # The embeddings HF's DebertaV2Embeddings creates beside the word ones
    # (the committed demo classify model has type_vocab_size 2; a loader that
    # finds the config asking for them but no tensor refuses the checkpoint).
    if cfg.get("type_vocab_size", 0) > 0:
        out["deberta.embeddings.token_type_embeddings.weight"] = [cfg["type_vocab_size"], h]
    if cfg.get("position_biased_input", True):
        out["deberta.embeddings.position_embeddings.weight"] = [cfg["max_position_embeddings"], h]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"deberta.encoder.layer.{layer}."
        for proj in ("query_proj", "key_proj", "value_proj"):
            out[p + f"attention.self.{proj}.weight"] = [h, h]
            out[p + f"attention.self.{proj}.bias"] = [h]
        out[p + "attention.output.dense.weight"] = [h, h]
        out[p + "attention.output.dense.bias"] = [h]
        out[p + "attention.output.LayerNorm.weight"] = [h]
        out[p + "attention.output.LayerNorm.bias"] = [h]
        out[p + "intermediate.dense.weight"] = [i, h]
        out[p + "intermediate.dense.bias"] = [i]
        out[p + "output.dense.weight"] = [h, i]
        out[p + "output.dense.bias"] = [h]
        out[p + "output.LayerNorm.weight"] = [h]
        out[p + "output.LayerNorm.bias"] = [h]
    return out


def values(name, count, rng):
    if name.endswith("LayerNorm.weight"):
        return array.array("f", [1.0]) * count
    if name.endswith(".bias"):
        return array.array("f", [0.0]) * count
    # Uniform with std 0.02 (the HF initializer range); cheaper than gauss.
    a = 0.02 * 3 ** 0.5
    return array.array("f", (rng.uniform(-a, a) for _ in range(count)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--intermediate", type=int, default=1536)
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.src, "config.json")))
    cfg.pop("dserve", None)  # the source model's recorded metrics do not describe random weights
    cfg.update(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
               intermediate_size=args.intermediate, embedding_size=args.hidden,
               pooler_hidden_size=args.hidden)
    shapes = tensors(cfg)
    rng = random.Random(0)
    header, blobs, offset = {}, [], 0
    for name, shape in shapes.items():
        count = 1
        for d in shape:
            count *= d
        data = values(name, count, rng).tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    json.dump(cfg, open(os.path.join(args.out, "config.json"), "w"), indent=2)
    shutil.copyfile(os.path.join(args.src, "spm.model"), os.path.join(args.out, "spm.model"))
    print(f"{args.out}: hidden {args.hidden}, {args.layers} layers, {offset / 4e6:.1f}M parameters")


if __name__ == "__main__":
    main()
