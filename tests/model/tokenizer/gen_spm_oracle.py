#!/usr/bin/python3
"""Trains small SentencePiece models with Debian's spm_train and writes the
oracle that the C++ tokenizer tests compare against.

Run with Debian's /usr/bin/python3 (python3-sentencepiece). Usage:
    gen_spm_oracle.py OUT_DIR [--corpus EXTRA.txt]

Writes into OUT_DIR:
  strings.jsonl               one {"text": s} per test string (>= 5000, deterministic)
  MODEL/spm.model             one directory per trained model, plus big_vocab:
                              the first model grown to 128,000 pieces
  MODEL/oracle.jsonl          per string: {"ids", "pieces", "offsets"} from
                              libsentencepiece's SentencePieceText (byte offsets,
                              as the C++ API reports them)
  MODEL_hf/tokenizer.json     for the first model: the same model in the
                              Hugging Face layout DebertaV2Converter writes
  models.txt                  the model names
  DONE                        written last; its presence means the set is complete
Everything is deterministic (fixed seeds, num_threads=1).
"""
import base64
import json
import os
import random
import subprocess
import sys
import unicodedata

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2, sentencepiece_pb2

NUM_STRINGS = 6000

DEBERTA_SPECIALS = [
    "--pad_id=0", "--bos_id=1", "--eos_id=2", "--unk_id=3",
    "--pad_piece=[PAD]", "--bos_piece=[CLS]", "--eos_piece=[SEP]", "--unk_piece=[UNK]",
]

# name -> extra spm_train flags
MODELS = [
    ("nmt_nfkc", ["--vocab_size=1000", "--normalization_rule_name=nmt_nfkc"]),
    ("identity_ws", ["--vocab_size=800", "--normalization_rule_name=identity",
                     "--remove_extra_whitespaces=false"]),
    ("bytefb_cf_digits", ["--vocab_size=1200", "--byte_fallback=true",
                          "--normalization_rule_name=nmt_nfkc_cf", "--split_digits=true"]),
    ("user_symbols", ["--vocab_size=900", "--normalization_rule_name=nmt_nfkc",
                      "--user_defined_symbols=[MASK],<br>,@@,http://,ing,日本,☃,\u00e9t\u00e9,ﬁ"]),
    ("ws_suffix", ["--vocab_size=700", "--treat_whitespace_as_suffix=true"]),
    ("nfkc_noprefix", ["--vocab_size=700", "--normalization_rule_name=nfkc",
                       "--add_dummy_prefix=false"]),
]

WORDS = ("the a of to and in is was for on that with as by at from it an be this which or are "
         "have has had not but all were they their one can there been more when who will would "
         "about time people year into only new some could after first also two way well even "
         "because good through where most over many those think back right still house river "
         "window library garden bread stone water answer question context document passage "
         "tokenizer inference server encoder attention relative position embedding").split()

SAMPLES = [
    "日本語のテキストを正しく分割できるか確認します。", "東京は日本の首都です。", "我爱自然语言处理。",
    "中华人民共和国成立于1949年。", "한국어 문장도 포함합니다.", "서울은 대한민국의 수도이다.",
    "Привет, мир! Как дела?", "Съешь же ещё этих мягких французских булок.",
    "Ελληνικά γράμματα: αβγδε.", "مرحبا بالعالم، كيف حالك؟", "שלום עולם, מה שלומך?",
    "हिन्दी में एक वाक्य।", "ภาษาไทยไม่มีช่องว่างระหว่างคำ", "Tiếng Việt có nhiều dấu thanh.",
    "Ça va très bien, merci. À bientôt!", "Straße, Größe, Übung, Ärger.", "El niño comió piña.",
    "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ　１２３", "ﬁnance ﬂow ﬀ ﬃ", "① ② ③ Ⅷ ½ ¼ ™ ℃ № ㍻",
    "e\u0301te\u0301 cafe\u0301 nai\u0308ve", "été café naïve", "Å Å Å", "한국어 한국어",
    "👍🏽 👩‍👩‍👧‍👦 🇯🇵 🇺🇸 ❤️ 🏳️‍🌈 👨🏿‍💻", "zero\u200bwidth\u200cjoin\u200dhere\ufeffbom",
    "tab\there\nnewline\r\ncrlf\u000bvt\u000cff", "control\u0001chars\u0007\u001f\u007fdel",
    "rtl \u202eevil\u202c mark \u200f\u200e", "math 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𝟙𝟚𝟛", "`` quoted '' text",
    "price: $1,234.56 or €99,99 — 50% off!", "email me@example.com http://x.org/a?b=c&d",
    "Z\u0351\u0368a\u0364\u0350l\u0358g\u0367o\u0306 text", "\u3000ideographic\u3000space\u3000",
    "\u00a0nbsp\u00a0\u2009thin\u2003em\u2028ls\u2029ps\u0085nel",
    "surrogate-free astral: 𠀀𠀁𪚥 🀄 🂡", "private use \ue000\uf8ff \U000f0000",
    "noncharacters \ufdd0 \ufffe \uffff", "replacement \ufffd char", "combining only \u0301\u0302",
    "Hangul jamo \u1100\u1161\u11a8 vs 각", "[CLS] [SEP] [MASK] [UNK] <br> @@ ing",
]

SPECIAL_CHARS = (["\u200b", "\u200c", "\u200d", "\ufeff", "\u00ad", "\u0301", "\u0308", "\u0327",
                  "\t", "\n", "\r", "\u000b", "\u000c", "\u0000", "\u0001", "\u001b", "\u007f",
                  "\u0085", "\u00a0", "\u1680", "\u2000", "\u2007", "\u202f", "\u205f", "\u3000",
                  "\u202e", "\u202c", "\u200e", "\u200f", "\u2066", "\u2069", "\ufe0f", "\u20e3",
                  "🏻", "🏿", "\U0001F1EF", "\U0001F1F5", "\U000E0067", "ﬁ", "ﬂ", "ǅ", "ŉ", "ẞ",
                  "İ", "ı", "ς", "Σ", "℡", "㎏", "ｶ", "ﾞ", "ｱ", "ー", "〜", "…", "‥", "“", "”",
                  "‘", "’", "«", "»", "–", "—", "‐", "⁇", "▁", "▁▁", " ▁ "])

WORD_CHARS = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
              "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßœ"
              "αβγδεζηθικλμνξοπρστυφχψω" "абвгдежзийклмнопрстуфхцчшщъыьэюя"
              "日本語中文字漢東京都大学人山川" "あいうえおかきくけこアイウエオ" "가나다라마바사아자차"
              "ابتثجحخدذرزسشصضطظعغفقكلمنهوي" "אבגדהוזחטיכלמנסעפצקרשת" "กขคงจฉชซ"
              ".,;:!?'\"()[]{}<>/\\|@#$%^&*-_+=~`")

EMOJI = ["😀", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧", "🇫🇷", "🇩🇪", "❤️", "✨", "🔥", "🙏🏿", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "☃"]


def rand_word(r):
    if r.random() < 0.6:
        w = r.choice(WORDS)
        roll = r.random()
        if roll < 0.15:
            w = w.capitalize()
        elif roll < 0.2:
            w = w.upper()
        return w
    n = r.randint(1, 12)
    return "".join(r.choice(WORD_CHARS) for _ in range(n))


def rand_sep(r):
    roll = r.random()
    if roll < 0.75:
        return " "
    return r.choice(["  ", "   ", "\t", "\n", " \n ", "\u3000", "\u00a0", "", " \t ", "\r\n"])


def make_string(r, i):
    kind = i % 12
    if i == 0:
        return ""
    if kind == 0:  # plain words
        n = r.randint(1, 25)
        return "".join(rand_word(r) + rand_sep(r) for _ in range(n)).rstrip(" ") if r.random() < 0.7 \
            else "".join(rand_word(r) + rand_sep(r) for _ in range(n))
    if kind == 1:  # curated multilingual samples, perturbed
        s = r.choice(SAMPLES)
        if r.random() < 0.5:
            s = s + rand_sep(r) + r.choice(SAMPLES)
        if r.random() < 0.3:
            s = unicodedata.normalize(r.choice(["NFC", "NFD", "NFKC", "NFKD"]), s)
        return s
    if kind == 2:  # special characters sprinkled into words
        out = []
        for _ in range(r.randint(1, 15)):
            out.append(rand_word(r) if r.random() < 0.6 else r.choice(SPECIAL_CHARS))
            out.append(rand_sep(r) if r.random() < 0.5 else "")
        return "".join(out)
    if kind == 3:  # whitespace-heavy
        out = []
        for _ in range(r.randint(0, 8)):
            out.append(r.choice([" ", "  ", "\t", "\n", "\u3000", "\u00a0", "\u2003", "x", "ab", "é"]))
        return "".join(out)
    if kind == 4:  # digits and numbers
        parts = []
        for _ in range(r.randint(1, 8)):
            roll = r.random()
            if roll < 0.4:
                parts.append(str(r.randint(0, 10 ** r.randint(1, 12))))
            elif roll < 0.6:
                parts.append("%d.%02d" % (r.randint(0, 9999), r.randint(0, 99)))
            elif roll < 0.7:
                parts.append("".join(r.choice("０１２３４５６７８９") for _ in range(r.randint(1, 5))))
            elif roll < 0.8:
                parts.append("".join(r.choice("٠١٢٣٤٥٦٧٨٩") for _ in range(r.randint(1, 4))))
            else:
                parts.append(rand_word(r))
        return " ".join(parts)
    if kind == 5:  # emoji
        return "".join(r.choice(EMOJI) + (rand_sep(r) if r.random() < 0.5 else "")
                       for _ in range(r.randint(1, 8)))
    if kind == 6:  # long words
        return "".join(r.choice(WORD_CHARS[:52]) for _ in range(r.randint(20, 120)))
    if kind == 7:  # random code points from many blocks (unknown chars)
        blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
                  (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
                  (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x2100, 0x22FF), (0x2460, 0x24FF),
                  (0x3000, 0x30FF), (0x3200, 0x33FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00),
                  (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFE6F), (0xFF00, 0xFFEF),
                  (0x1D400, 0x1D7FF), (0x1F300, 0x1F6FF), (0x1F900, 0x1F9FF), (0x20000, 0x2000F),
                  (0xE0000, 0xE007F), (0xF0000, 0xF0010)]
        out = []
        for _ in range(r.randint(1, 20)):
            lo, hi = r.choice(blocks)
            cp = r.randint(lo, hi)
            if 0xD800 <= cp <= 0xDFFF:
                continue
            out.append(chr(cp))
            if r.random() < 0.2:
                out.append(" ")
        return "".join(out)
    if kind == 8:  # composed/decomposed accents
        base = "".join(r.choice("aeiouAEIOUnNcCsSzZ") for _ in range(r.randint(1, 10)))
        marks = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u030c",
                 "\u0323", "\u0331"]
        s = "".join(ch + ("".join(r.choice(marks) for _ in range(r.randint(0, 3)))) for ch in base)
        return unicodedata.normalize(r.choice(["NFC", "NFD", "NFC", "NFKD"]), s) + " " + rand_word(r)
    if kind == 9:  # full-width, ligatures, compatibility forms
        table = "ＡＢＣａｂｃ０１２！？（）ｶﾞﾊﾟｱｲｳ①②⑩ⅠⅡⅫ㈱㍿ﬁﬂﬀﬃﬄﬅﬆ™℠½¾²³ºª"
        out = []
        for _ in range(r.randint(1, 12)):
            out.append(r.choice(table) if r.random() < 0.6 else rand_word(r))
            if r.random() < 0.4:
                out.append(rand_sep(r))
        return "".join(out)
    if kind == 10:  # user-defined symbols and specials in context
        toks = ["[MASK]", "<br>", "@@", "http://", "ing", "日本", "☃", "été", "ﬁ", "[CLS]",
                "[SEP]", "<s>", "</s>", "<unk>", "▁", "<0x41>"]
        out = []
        for _ in range(r.randint(1, 10)):
            out.append(r.choice(toks) if r.random() < 0.5 else rand_word(r))
            if r.random() < 0.5:
                out.append(rand_sep(r))
        return "".join(out)
    # kind 11: mixed bag with leading/trailing whitespace
    s = make_string(r, i - r.randint(1, 11))
    return r.choice(["", " ", "  ", "\t", "\n", "\u3000"]) + s + r.choice(["", " ", "  ", "\n", "\t "])


def training_corpus(extra_path):
    r = random.Random(1234)
    lines = []
    if extra_path and os.path.exists(extra_path):
        with open(extra_path, encoding="utf-8") as f:
            lines.extend(l.rstrip("\n") for l in f if l.strip())
    lines.extend(SAMPLES * 3)
    for _ in range(2500):
        n = r.randint(3, 18)
        lines.append(" ".join(rand_word(r) for _ in range(n)))
    for i in range(800):
        s = make_string(r, 1 + i)
        s = s.replace("\n", " ").replace("\r", " ")
        if s.strip():
            lines.append(s)
    return lines


def spans(proto_bytes):
    t = sentencepiece_pb2.SentencePieceText()
    t.ParseFromString(proto_bytes)
    return ([p.id for p in t.pieces], [p.piece for p in t.pieces],
            [[p.begin, p.end] for p in t.pieces])


def write_hf_tokenizer_json(model_path, out_path):
    """The layout transformers' DebertaV2Converter writes (do_lower_case and
    split_by_punct false): Strip + Precompiled + Replace(' {2,}'), Metaspace."""
    m = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        m.ParseFromString(f.read())
    vocab = [[p.piece, p.score] for p in m.pieces]
    unk_id = next(i for i, p in enumerate(m.pieces) if p.type == 2)
    added = [{"id": i, "content": p.piece, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, p in enumerate(m.pieces) if p.type in (2, 3)]
    added.append({"id": len(m.pieces), "content": "[MASK]", "single_word": False, "lstrip": False,
                  "rstrip": False, "normalized": False, "special": True})
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Precompiled", "precompiled_charsmap":
                base64.b64encode(m.normalizer_spec.precompiled_charsmap).decode("ascii")},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
        "post_processor": None, "decoder": {"type": "Metaspace", "replacement": "\u2581",
                                             "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": unk_id, "vocab": vocab, "byte_fallback": False},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def write_big_vocab_model(base_model_path, out_path, size=128000):
    """A DeBERTa-v3-sized vocabulary: the trained base model plus random
    NORMAL pieces (scores below the trained ones), so that the trie and the
    Viterbi are checked at 128k pieces. libsentencepiece encodes it as usual."""
    m = sentencepiece_model_pb2.ModelProto()
    with open(base_model_path, "rb") as f:
        m.ParseFromString(f.read())
    r = random.Random(77)
    seen = set(p.piece for p in m.pieces)
    alphabet = "abcdefghijklmnopqrstuvwxyzetaoinshrETAOINSHR日本語中文字東京あいうえおабвгдежзé0123"
    while len(m.pieces) < size:
        n = r.randint(2, 12)
        piece = ("\u2581" if r.random() < 0.5 else "") + "".join(r.choice(alphabet) for _ in range(n))
        if piece in seen:
            continue
        seen.add(piece)
        p = m.pieces.add()
        p.piece = piece
        p.score = -r.uniform(8.0, 20.0)
        p.type = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
    with open(out_path, "wb") as f:
        f.write(m.SerializeToString())


def write_oracle(model_path, strings, out_path):
    sp = spm.SentencePieceProcessor(model_file=model_path)
    protos = sp.encode(strings, out_type="serialized_proto")
    with open(out_path, "w", encoding="utf-8") as f:
        for pb in protos:
            ids, pieces, offs = spans(pb)
            f.write(json.dumps({"ids": ids, "pieces": pieces, "offsets": offs},
                               ensure_ascii=False) + "\n")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    extra = None
    if "--corpus" in sys.argv:
        extra = sys.argv[sys.argv.index("--corpus") + 1]
    os.makedirs(out, exist_ok=True)
    done = os.path.join(out, "DONE")
    if os.path.exists(done):
        os.remove(done)

    r = random.Random(20240601)
    strings = [make_string(r, i) for i in range(NUM_STRINGS)]
    with open(os.path.join(out, "strings.jsonl"), "w", encoding="utf-8") as f:
        for s in strings:
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")

    corpus_path = os.path.join(out, "train_corpus.txt")
    with open(corpus_path, "w", encoding="utf-8") as f:
        for line in training_corpus(extra):
            f.write(line + "\n")

    names = []
    for name, flags in MODELS:
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        prefix = os.path.join(d, "spm")
        cmd = ["spm_train", "--input=" + corpus_path, "--model_prefix=" + prefix,
               "--model_type=unigram", "--character_coverage=0.995", "--num_threads=1",
               "--hard_vocab_limit=false", "--minloglevel=2", "--seed_sentencepiece_size=20000",
               "--shuffle_input_sentence=false"] + DEBERTA_SPECIALS + flags
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.remove(prefix + ".vocab")
        write_oracle(prefix + ".model", strings, os.path.join(d, "oracle.jsonl"))
        names.append(name)

    big = os.path.join(out, "big_vocab")
    os.makedirs(big, exist_ok=True)
    write_big_vocab_model(os.path.join(out, MODELS[0][0], "spm.model"), os.path.join(big, "spm.model"))
    write_oracle(os.path.join(big, "spm.model"), strings, os.path.join(big, "oracle.jsonl"))
    names.append("big_vocab")

    hf_dir = os.path.join(out, MODELS[0][0] + "_hf")
    os.makedirs(hf_dir, exist_ok=True)
    write_hf_tokenizer_json(os.path.join(out, MODELS[0][0], "spm.model"),
                            os.path.join(hf_dir, "tokenizer.json"))

    with open(os.path.join(out, "models.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    with open(done, "w") as f:
        f.write("ok\n")
    print("wrote %d strings x %d models to %s" % (len(strings), len(names), out))


if __name__ == "__main__":
    main()
