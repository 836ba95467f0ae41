#!/usr/bin/env python3
"""Creates servable DeBERTa v1 checkpoints for the end-to-end tests.

Each is a Hugging Face `model_type: "deberta"` directory: a random-weight
golden checkpoint of shared/goldens/deberta_v1 (config.json +
model.safetensors, whose outputs Hugging Face's Deberta* classes produced)
plus GPT-2 byte-level BPE tokenizer files (vocab.json, merges.txt,
tokenizer_config.json) as DebertaTokenizer saves them.

The golden tokenizer (shared/goldens/deberta_v1/tokenizer) has 8261 ids, more
than the checkpoints' vocab_size of 1000, so a server must refuse it with
these weights. The tokenizer written here is that one cut down to fit: its
256 byte tokens plus the results of GPT-2's first 739 merges (merges.txt's
first 739 lines, every part of which is a byte or an earlier result), with
the special ids of the golden vocabulary ([PAD] 0, [CLS] 1, [SEP] 2, [UNK] 3)
and [MASK] as the last id, 999. The other tokens keep the golden
vocabulary's relative order (a shuffle, unrelated to merge ranks) and are
numbered from 4. Every BPE result is in the vocabulary, so [UNK] never occurs.

usage: make_v1_test_models.py SHARED_DIR OUT_DIR
writes OUT_DIR/{v1_classify,v1_answer,v1_rerank} and OUT_DIR/v1_tokenizer
"""
import json
import os
import shutil
import sys

MODELS = {
    "v1_classify": "cls_mnli",
    "v1_answer": "qa_clamped",
    "v1_rerank": "rerank_c2p_factorized",
}
VOCAB_SIZE = 1000
SPECIALS = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3}


def restricted_tokenizer(golden_dir, out_dir):
    """The golden tokenizer cut to VOCAB_SIZE ids (see above), in `out_dir`."""
    with open(os.path.join(golden_dir, "vocab.json"), encoding="utf-8") as f:
        golden = json.load(f)
    with open(os.path.join(golden_dir, "merges.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    header, merges = lines[0], [m for m in lines[1:] if m]
    for token, i in SPECIALS.items():
        assert golden[token] == i, (token, golden[token])
    n_merges = VOCAB_SIZE - len(SPECIALS) - 1 - 256
    # The 256 byte tokens: the single-character tokens of the golden vocab.
    kept = {t for t in golden if len(t) == 1}
    assert len(kept) == 256, len(kept)
    for line in merges[:n_merges]:
        left, right = line.split()
        assert left in kept and right in kept, line
        kept.add(left + right)
    assert len(kept) == 256 + n_merges, "a merge result repeats"
    vocab = dict(SPECIALS)
    for token in sorted(kept, key=lambda t: golden[t]):
        vocab[token] = len(vocab)
    vocab["[MASK]"] = len(vocab)
    assert len(vocab) == VOCAB_SIZE and max(vocab.values()) == VOCAB_SIZE - 1
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(header + "\n" + "".join(m + "\n" for m in merges[:n_merges]))
    shutil.copyfile(os.path.join(golden_dir, "tokenizer_config.json"), os.path.join(out_dir, "tokenizer_config.json"))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    shared, out = sys.argv[1], sys.argv[2]
    golden = os.path.join(shared, "goldens", "deberta_v1")
    tokenizer = os.path.join(out, "v1_tokenizer")
    restricted_tokenizer(os.path.join(golden, "tokenizer"), tokenizer)
    for name, src in MODELS.items():
        dst = os.path.join(out, name)
        os.makedirs(dst, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(golden, src, f), os.path.join(dst, f))
        for f in os.listdir(tokenizer):
            shutil.copyfile(os.path.join(tokenizer, f), os.path.join(dst, f))
    print(out)


if __name__ == "__main__":
    main()
