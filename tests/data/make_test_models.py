#!/usr/bin/env python3
"""Creates small servable checkpoints for the end-to-end tests.

Each is a Hugging Face directory: the random-weight golden checkpoints of
shared/goldens/model (config.json + model.safetensors, whose outputs
Hugging Face produced) plus the toy SentencePiece model of
shared/goldens/tokenizer as spm.model. Their vocabularies (1000-1200) cover
the tokenizer's 300 pieces.

usage: make_test_models.py SHARED_DIR OUT_DIR
writes OUT_DIR/{classify,answer,rerank}
"""
import os
import shutil
import sys

MODELS = {
    "classify": "cls_factorized",
    "answer": "qa_c2p_only",
    "rerank": "rerank_p2c_nonorm",
}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    shared, out = sys.argv[1], sys.argv[2]
    spm = os.path.join(shared, "goldens", "tokenizer", "spm.model")
    for name, golden in MODELS.items():
        src = os.path.join(shared, "goldens", "model", golden)
        dst = os.path.join(out, name)
        os.makedirs(dst, exist_ok=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
        shutil.copyfile(spm, os.path.join(dst, "spm.model"))
    print(out)


if __name__ == "__main__":
    main()
