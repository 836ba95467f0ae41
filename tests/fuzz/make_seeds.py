#!/usr/bin/python3
"""Regenerates the seed corpora of the fuzzers under tests/fuzz/corpus/.

Seeds are real inputs: the goldens' spm.model and config.json files
(../shared/goldens), SentencePiece models trained here with Debian's
spm_train on the goldens' corpus, a safetensors file holding real tensors of
a golden checkpoint, the goldens' tokenizer strings, and serialized
dserve.v1 requests like the e2e tests send. Files this script does not
write (configs saved by `dserve train`: trained_*.json) are kept.

usage: /usr/bin/python3 tests/fuzz/make_seeds.py [SHARED_DIR]
(needs protoc, spm_train and python3-protobuf; run from anywhere)
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def out_dir(target):
    path = os.path.join(CORPUS, target)
    os.makedirs(path, exist_ok=True)
    return path


def write(target, name, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(out_dir(target), name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------ safetensors --

def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    return data, n, header


def safetensors_bytes(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in order as
    the reference writer does (compact JSON, padded with spaces to 8)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def safetensors_seeds(shared):
    target = "fuzz_safetensors"
    golden = os.path.join(shared, "goldens", "model", "qa_c2p_only", "model.safetensors")
    data, n, header = read_safetensors(golden)
    start = 8 + n

    def raw(name):
        b, e = header[name]["data_offsets"]
        return data[start + b:start + e]

    names = ["qa_outputs.bias", "deberta.embeddings.LayerNorm.weight", "deberta.embeddings.LayerNorm.bias",
             "deberta.encoder.LayerNorm.weight"]
    real = [(name, header[name]["dtype"], header[name]["shape"], raw(name)) for name in names]
    write(target, "golden_subset_f32.safetensors", safetensors_bytes(real, header.get("__metadata__")))
    # The same values in other dtypes (F16 / BF16 by conversion, I64 / U8 /
    # BOOL from the float bits), a scalar and an empty tensor.
    floats = struct.unpack("<64f", raw("deberta.embeddings.LayerNorm.weight"))
    f16 = struct.pack("<64e", *floats)
    bf16 = b"".join(struct.pack("<f", x)[2:] for x in floats)
    mixed = [("w.f16", "F16", [8, 8], f16), ("w.bf16", "BF16", [64], bf16),
             ("ids.i64", "I64", [2, 2], struct.pack("<4q", 0, 1, 2, 128000)),
             ("mask.bool", "BOOL", [4], b"\x01\x00\x01\x01"), ("bytes.u8", "U8", [3], b"abc"),
             ("scalar", "F64", [], struct.pack("<d", 1e-7)), ("empty", "F32", [0, 64], b"")]
    write(target, "dtypes.safetensors", safetensors_bytes(mixed, {"format": "pt", "note": "fuzz seed"}))
    # The whole real header of the golden checkpoint with its data cut short:
    # every tensor entry is parsed, then an offset runs past the end.
    write(target, "golden_header_truncated.safetensors", data[:start + 512])


# ------------------------------------------------------------ config.json --

def config_seeds(shared):
    target = "fuzz_config"
    for golden in ("cls_factorized", "qa_c2p_only", "rerank_p2c_nonorm"):
        shutil.copyfile(os.path.join(shared, "goldens", "model", golden, "config.json"),
                        os.path.join(out_dir(target), "golden_%s.json" % golden))
    with open(os.path.join(shared, "goldens", "model", "qa_c2p_only", "config.json")) as f:
        config = json.load(f)
    # Legacy forms transformers also reads: pos_att_type as "p2c|c2p",
    # num_labels without id2label, conv layers, and a dserve block.
    config.update({"pos_att_type": "p2c|c2p", "num_labels": 3, "conv_kernel_size": 3, "conv_groups": 1,
                   "conv_act": "gelu", "attention_head_size": 16, "cls_dropout": None})
    del config["id2label"]
    del config["label2id"]
    config["dserve"] = {"task": "answer", "max_length": 96,
                        "qa": {"doc_stride": 32, "max_answer_tokens": 20, "n_best": 10,
                               "null_score_diff_threshold": -1.5},
                        "temperature": 1.25, "share_layers": True}
    write(target, "variant_legacy_forms.json", json.dumps(config, indent=2))


# -------------------------------------------------------------- spm.model --

SPM_COMMON = ["--model_type=unigram", "--character_coverage=1.0", "--num_threads=1", "--seed_sentencepiece_size=2000",
              "--pad_id=0", "--bos_id=1", "--eos_id=2", "--unk_id=3", "--pad_piece=[PAD]", "--bos_piece=[CLS]",
              "--eos_piece=[SEP]", "--unk_piece=[UNK]", "--hard_vocab_limit=false"]
# name -> extra flags; small vocabularies keep the seeds small.
SPM_MODELS = [
    ("identity_120", ["--vocab_size=120", "--normalization_rule_name=identity"]),
    ("bytefb_400", ["--vocab_size=400", "--byte_fallback=true", "--normalization_rule_name=identity"]),
    ("user_symbols_ws_suffix_120", ["--vocab_size=120", "--normalization_rule_name=identity",
                                    "--treat_whitespace_as_suffix=true", "--add_dummy_prefix=false",
                                    "--user_defined_symbols=[MASK],<br>,\u00e9t\u00e9"]),
    # A small custom charsmap (a darts-clone trie, as nmt_nfkc's but tiny).
    ("custom_rules_120", ["--vocab_size=120", "--normalization_rule_tsv={rules}"]),
]
# Custom normalization rules: code points in, code points out (hex).
RULES = [("FF21", "41"), ("FF22", "42"), ("FB01", "66 69"), ("A0", "20"), ("200B", ""), ("E9", "65 301"),
         ("2014", "2D 2D")]


def spm_seeds(shared):
    target = "fuzz_spm_model"
    shutil.copyfile(os.path.join(shared, "goldens", "tokenizer", "spm.model"),
                    os.path.join(out_dir(target), "golden_nmt_nfkc_300.model"))
    corpus = os.path.join(shared, "goldens", "tokenizer", "corpus.txt")
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "rules.tsv")
        with open(rules, "w") as f:
            for src, dst in RULES:
                f.write("%s\t%s\n" % (src, dst))
        for name, flags in SPM_MODELS:
            prefix = os.path.join(tmp, name)
            cmd = ["spm_train", "--input=" + corpus, "--model_prefix=" + prefix] + SPM_COMMON
            cmd += [f.format(rules=rules) for f in flags]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            shutil.copyfile(prefix + ".model", os.path.join(out_dir(target), name + ".model"))


# -------------------------------------------------------------- tokenizer --

def golden_strings(shared):
    with open(os.path.join(shared, "goldens", "tokenizer", "spm_golden.json"), encoding="utf-8") as f:
        samples = json.load(f)["samples"]
    return [s["text"] for s in samples if s["text"]]


def tokenizer_seeds(shared):
    """fuzz_tokenizer input: flags, max_length, stride, text; pairs split at 0xFF."""
    target = "fuzz_tokenizer"
    texts = golden_strings(shared)
    with open(os.path.join(shared, "goldens", "tokenizer", "corpus.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    for i, text in enumerate(texts):
        flags = i % 16  # every truncation, pieces and clamp combination
        max_length = [6, 14, 30, 62, 255][i % 5]
        stride = [0, 2, 5, 16][i % 4]
        second = lines[i % len(lines)]
        write(target, "golden_%02d" % i,
              bytes([flags, max_length, stride]) + text.encode() + b"\xff" + second.encode())
    write(target, "paragraph", bytes([1, 40, 8]) + "What does the miller open?".encode() + b"\xff" +
          " ".join(lines[:6]).encode())
    write(target, "invalid_utf8", bytes([5, 20, 3]) + b"caf\xc3 \x80\xed\xa0\x80 ok\xff\xf4\x90\x80\x80")


# --------------------------------------------------------------- requests --

def request_seeds(shared):
    protoc_out = tempfile.mkdtemp()
    subprocess.run(["protoc", "--proto_path=" + os.path.join(ROOT, "proto"), "--python_out=" + protoc_out,
                    "dserve/v1/inference.proto"], check=True)
    sys.path.insert(0, protoc_out)
    from dserve.v1 import inference_pb2 as pb  # noqa: E402
    texts = golden_strings(shared)
    long_text = " ".join(["The baker next door sells bread, rolls, and small cakes with honey on top."] * 4)

    def write_request(target, name, message):
        write(target, name + ".pb", message.SerializeToString())

    t = "fuzz_request_classify"
    write_request(t, "basic", pb.ClassifyRequest(model="classify", texts=["please refund me"]))
    write_request(t, "golden_texts", pb.ClassifyRequest(model="classify", texts=texts[:8], top_k=3))
    write_request(t, "long_no_truncation", pb.ClassifyRequest(model="classify", texts=["ok", long_text],
                                                              truncation=pb.TRUNCATION_NONE, raw_scores=True))
    write_request(t, "long_only_first", pb.ClassifyRequest(model="classify", texts=[long_text],
                                                           truncation=pb.TRUNCATION_ONLY_FIRST))
    write_request(t, "empty_text", pb.ClassifyRequest(model="classify", texts=["fine", ""]))
    # Invalid UTF-8 in texts[1]: serialized valid, then patched as the e2e test does.
    data = bytearray(pb.ClassifyRequest(model="classify", texts=["fine", "caf\u00e9"]).SerializeToString())
    data[data.rindex("\u00e9".encode()) + 1] = 0x28
    write(t, "invalid_utf8.pb", bytes(data))

    t = "fuzz_request_answer"
    write_request(t, "basic", pb.AnswerRequest(model="answer", question="When does the mill open?",
                                               contexts=["The miller still opens the doors every morning at six."]))
    write_request(t, "two_contexts", pb.AnswerRequest(model="answer", question="  Who built the mill?",
                                                      contexts=[long_text, texts[5]], top_k=2,
                                                      max_answer_tokens=10, max_answer_chars=40,
                                                      null_score_diff_threshold=0.5))
    write_request(t, "long_question", pb.AnswerRequest(model="answer", question=long_text, contexts=["c"]))

    t = "fuzz_request_rerank"
    write_request(t, "basic", pb.RerankRequest(model="rerank", query="fresh bread",
                                               documents=["The baker sells bread.", "Children skip stones."]))
    write_request(t, "chunked", pb.RerankRequest(model="rerank", query="honey cakes", documents=[long_text, texts[3]],
                                                 top_n=1, return_documents=True))
    for name, value in (("none", pb.TRUNCATION_NONE), ("longest_first", pb.TRUNCATION_LONGEST_FIRST),
                        ("only_second", pb.TRUNCATION_ONLY_SECOND)):
        write_request(t, "truncation_" + name, pb.RerankRequest(model="rerank", query=texts[9],
                                                                documents=[long_text, "x"], truncation=value))
    shutil.rmtree(protoc_out)


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(ROOT), "shared")
    safetensors_seeds(shared)
    config_seeds(shared)
    spm_seeds(shared)
    tokenizer_seeds(shared)
    request_seeds(shared)
    total = 0
    for dirpath, _, files in os.walk(CORPUS):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    print("seeds in %s: %d bytes" % (CORPUS, total))


if __name__ == "__main__":
    main()
