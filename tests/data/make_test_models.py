#!/usr/bin/env python3
"""Creates small servable checkpoints for the end-to-end tests.

Each is a Hugging Face directory: the random-weight golden checkpoints of
shared/goldens/model (config.json + model.safetensors, whose outputs
Hugging Face produced) plus the toy SentencePiece model of
shared/goldens/tokenizer as spm.model. Their vocabularies (1000-1200) cover
the tokenizer's 300 pieces.

ALBERT ones (the second model family) are shared/goldens/albert's
checkpoints (vocabulary 900) plus an ALBERT-recipe SentencePiece model
(`<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3, `[MASK]` 4; google-research/albert's
spm_train flags) trained here with Debian's spm_train on the lowercased
tokenizer corpus, as spiece.model with a tokenizer_config.json that sets
AlbertTokenizer's flags.

usage: make_test_models.py SHARED_DIR OUT_DIR
writes OUT_DIR/{classify,answer,rerank,albert_classify,albert_answer}
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

MODELS = {
    "classify": "cls_factorized",
    "answer": "qa_c2p_only",
    "rerank": "rerank_p2c_nonorm",
}


ALBERT_MODELS = {
    "albert_classify": "albert_cls",
    "albert_answer": "albert_qa",
}
ALBERT_SPM_FLAGS = ["--pad_id=0", "--unk_id=1", "--eos_id=-1", "--bos_id=-1",
                    "--control_symbols=[CLS],[SEP],[MASK]", "--model_type=unigram", "--vocab_size=400",
                    "--hard_vocab_limit=false", "--character_coverage=1.0", "--num_threads=1",
                    "--split_by_number=false"]


def train_albert_spm(shared, out_dir):
    """spiece.model in `out_dir`, from the lowercased tokenizer corpus."""
    with open(os.path.join(shared, "goldens", "tokenizer", "corpus.txt"), encoding="utf-8") as f:
        text = f.read().lower()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(text)
        prefix = os.path.join(tmp, "spiece")
        subprocess.run(["spm_train", "--input=" + corpus, "--model_prefix=" + prefix] + ALBERT_SPM_FLAGS,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.copyfile(prefix + ".model", os.path.join(out_dir, "spiece.model"))


def copy_golden(src, dst):
    """A golden checkpoint's config.json and weights into `dst`."""
    os.makedirs(dst, exist_ok=True)
    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    shared, out = sys.argv[1], sys.argv[2]
    spm = os.path.join(shared, "goldens", "tokenizer", "spm.model")
    for name, golden in MODELS.items():
        dst = os.path.join(out, name)
        copy_golden(os.path.join(shared, "goldens", "model", golden), dst)
        shutil.copyfile(spm, os.path.join(dst, "spm.model"))
    albert_spm = None  # trained once, shared by the ALBERT models
    for name, golden in ALBERT_MODELS.items():
        dst = os.path.join(out, name)
        copy_golden(os.path.join(shared, "goldens", "albert", golden), dst)
        if albert_spm is None:
            train_albert_spm(shared, dst)
            albert_spm = os.path.join(dst, "spiece.model")
        else:
            shutil.copyfile(albert_spm, os.path.join(dst, "spiece.model"))
        with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "AlbertTokenizer", "do_lower_case": True, "remove_space": True,
                       "keep_accents": False}, f)
    print(out)


if __name__ == "__main__":
    main()
