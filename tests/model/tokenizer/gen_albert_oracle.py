#!/usr/bin/python3
"""Trains ALBERT-recipe SentencePiece models with Debian's spm_train and
writes the oracle that the C++ text-rules tests (text_rules_test.cc) compare
against: libsentencepiece (python3-sentencepiece) plus an independent Python
implementation of Hugging Face's AlbertTokenizer text rules.

Run with Debian's /usr/bin/python3. Usage:
    gen_albert_oracle.py OUT_DIR [--corpus EXTRA.txt]

Writes into OUT_DIR:
  strings.jsonl            one {"text": s} per test string (>= 5000, deterministic)
  MODEL/spiece.model       one directory per trained model
  MODEL__FLAGS/            one directory per (model, flag set): spiece.model,
                           tokenizer_config.json unless the flags are the
                           defaults, and oracle.jsonl: per string
                           {"ids", "pieces", "pre"} ("pre": preprocess_text's
                           output, whole-string NFKD)
  configs.txt              the MODEL__FLAGS names
  py_unicode.jsonl         per code point with a non-trivial property, what
                           Python says (gen_unicode_tables.py --dump)
  stats.json               how often the interesting rules fired
  DONE                     written last
Everything is deterministic (fixed seeds, num_threads=1).
"""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import unicodedata

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "model", "tokenizer"))
import gen_spm_oracle  # noqa: E402  (the DeBERTa oracle's string generator)
import gen_unicode_tables  # noqa: E402

SPIECE_UNDERLINE = "\u2581"
NUM_GENERAL = 3000   # strings from gen_spm_oracle.make_string
NUM_ALBERT = 3500    # strings aimed at the text rules

ALBERT_RECIPE = ["--pad_id=0", "--unk_id=1", "--eos_id=-1", "--bos_id=-1",
                 "--control_symbols=[CLS],[SEP],[MASK]"]

# name -> extra spm_train flags (all unigram)
MODELS = [
    ("albert_u1000", ["--vocab_size=1000", "--character_coverage=0.995"]),
    ("albert_u2500_num", ["--vocab_size=2500", "--character_coverage=0.9995",
                          "--split_by_number=false"]),
    ("albert_u800_bytefb", ["--vocab_size=800", "--character_coverage=0.98",
                            "--byte_fallback=true", "--split_by_number=false"]),
    ("albert_u4000_identity", ["--vocab_size=4000", "--character_coverage=0.9995",
                               "--normalization_rule_name=identity", "--split_by_number=false",
                               "--split_by_unicode_script=false"]),
]

# name -> tokenizer_config.json content (None: no file, the defaults)
FLAG_SETS = [
    ("default", None),
    ("accents_cased", {"keep_accents": True, "do_lower_case": False,
                       "tokenizer_class": "AlbertTokenizer", "model_max_length": 512}),
    ("spaces_kept", {"remove_space": False, "do_lower_case": True, "sp_model_kwargs": {}}),
    ("all_off", {"remove_space": False, "keep_accents": True, "do_lower_case": False}),
]


class Rules:
    def __init__(self, config):
        config = config or {}
        self.do_lower_case = config.get("do_lower_case", True)
        self.remove_space = config.get("remove_space", True)
        self.keep_accents = config.get("keep_accents", False)


# ---------------------------------------------------------------------------
# The reference: transformers' PreTrainedTokenizer.tokenize (lower-casing
# with do_lower_case, one character at a time) and AlbertTokenizer's
# preprocess_text and _tokenize, written from their source.

def lower_each_character(text):
    # tokenize(): re.sub(r"(SPECIALS)|(.+?)", lambda m: m.groups()[0] or
    # m.groups()[1].lower(), text); no special tokens are split here.
    return re.sub(r"(.+?)", lambda m: m.group(1).lower(), text)


def preprocess_text(inputs, rules):
    if rules.remove_space:
        outputs = " ".join(inputs.strip().split())
    else:
        outputs = inputs
    outputs = outputs.replace("``", '"').replace("''", '"')
    if not rules.keep_accents:
        outputs = unicodedata.normalize("NFKD", outputs)
        outputs = "".join([c for c in outputs if not unicodedata.combining(c)])
    if rules.do_lower_case:
        outputs = outputs.lower()
    return outputs


def albert_tokenize(sp, text, rules):
    if rules.do_lower_case:
        text = lower_each_character(text)
    text = preprocess_text(text, rules)
    pieces = sp.encode(text, out_type=str)
    new_pieces = []
    for piece in pieces:
        if len(piece) > 1 and piece[-1] == str(",") and piece[-2].isdigit():
            cur_pieces = sp.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
            if piece[0] != SPIECE_UNDERLINE and cur_pieces[0][0] == SPIECE_UNDERLINE:
                if len(cur_pieces[0]) == 1:
                    cur_pieces = cur_pieces[1:]
                else:
                    cur_pieces[0] = cur_pieces[0][1:]
            cur_pieces.append(piece[-1])
            new_pieces.extend(cur_pieces)
        else:
            new_pieces.append(piece)
    return text, new_pieces


# ---------------------------------------------------------------------------
# Test strings.

NUMBERS = ["1,000,", "3,", "12,345,678", "1,000", "2,5", "0,", "99,", "1,2,3,", "７,", "١٢,",
           "²,", "①,", "10,000,000,", "4,00", "5 ,", "6,,", "x1,", "ab2,c", "1，", "８，"]
QUOTES = ["``", "''", '"', "'", "`", "```", "'''", "`` ''", "``x''", "'`", "`'", "‘’", "“”"]
SPACES = [" ", "  ", "   ", "\t", "\t\t", " \t ", "\n", "\r\n", "\u00a0", "\u3000", "\u2003",
          "\u2009", "\u202f", "\u1680", "\u0085", "\u001c", "\u000b", "\u000c", "\u2028", " \u00a0 "]
ACCENTED = ["Café", "café", "Cafe\u0301", "naïve", "NAÏVE", "Über", "ÉCOLE", "façade", "Ångström",
            "piñata", "Dvořák", "Łódź", "São Paulo", "crème brûlée", "Ærø", "Straße", "STRASSE",
            "Œuvre", "ǅemal", "Ǆ", "a\u0323\u0301", "a\u0301\u0323", "e\u0327\u0301",
            "o\u0308\u0304\u0323", "\u1ea1\u0301", "\u0301start", "x\u0345y", "\u0f73"]
LIGATURES = ["ﬁ", "ﬂ", "ﬀ", "ﬃ", "ﬄ", "ﬅ", "ﬆ", "ﬁnance", "oﬀice", "Ĳ", "ĳ", "ǈ", "ŉ", "™",
             "℡", "½", "²", "㎏", "㍻", "①", "Ⅻ", "ⅷ", "…", "‥", "ﹰ", "ﷺ"]
FULLWIDTH = ["ＡＢＣ", "ａｂｃ", "１２３", "！？", "（ｘ）", "ｶﾞｷﾞ", "Ｈｅｌｌｏ，　ｗｏｒｌｄ"]
TURKISH_GREEK = ["İstanbul", "İ", "ISTANBUL", "ıi", "Iİıi", "ΟΔΟΣ", "ΣΑΣ", "Σ", "ΑΣ.",
                 "ΟΔΥΣΣΕΥΣ", "σς", "Σοφία", "ΣΟΦΟΣ,", "α\U0001d6ba", "Α\U0001d6ba ",
                 "\U0001d6ba\U0001d6ba", "x\U0001d6ba.y", "A\U0001d6ba'", "\U0001d6c3",
                 "ΌΣΟ", "ἈΣ", "αΣ\u0301"]
MIXED = ["Hello World", "THE QUICK BROWN FOX", "iPhone", "McDonald's", "don't", "it's",
         "rock 'n' roll", "e-mail", "U.S.A.", "Dr. Smith", "[CLS]", "[MASK]", "<unk>", "<pad>",
         "▁", "▁▁x", "x▁", "Hangul 한국어 각", "日本語", "Ｆｕｌｌ", "😀👍🏽", "\u200bzw\u200d",
         "\u00ad", "ǲ", "ﬃx"]


def albert_word(r):
    roll = r.random()
    if roll < 0.25:
        return gen_spm_oracle.rand_word(r)
    if roll < 0.4:
        return r.choice(NUMBERS) if r.random() < 0.5 else "%s,%03d," % (
            r.randint(1, 999), r.randint(0, 999))
    pool = r.choice([QUOTES, ACCENTED, LIGATURES, FULLWIDTH, TURKISH_GREEK, MIXED])
    w = r.choice(pool)
    if r.random() < 0.2:
        w = w.upper() if r.random() < 0.5 else w.title()
    return w


def albert_string(r, i):
    if i == 0:
        return ""
    n = r.randint(1, 14)
    out = []
    for _ in range(n):
        out.append(albert_word(r))
        roll = r.random()
        if roll < 0.55:
            out.append(" ")
        elif roll < 0.85:
            out.append(r.choice(SPACES))
        elif roll < 0.92:
            out.append(r.choice(QUOTES))
    s = "".join(out)
    roll = r.random()
    if roll < 0.15:
        s = r.choice(SPACES) + s
    elif roll < 0.25:
        s = unicodedata.normalize(r.choice(["NFC", "NFD", "NFKC", "NFKD"]), s)
    return s


def make_strings():
    r1 = random.Random(20250101)
    r2 = random.Random(20250102)
    strings = [albert_string(r2, i) for i in range(NUM_ALBERT)]
    strings += [gen_spm_oracle.make_string(r1, i) for i in range(1, NUM_GENERAL + 1)]
    return strings


def training_lines(extra):
    lines = gen_spm_oracle.training_corpus(extra)
    r = random.Random(4321)
    for i in range(1500):
        s = albert_string(r, 1 + i).replace("\n", " ").replace("\r", " ")
        if s.strip():
            lines.append(s)
    # ALBERT's vocabulary was learnt on preprocessed text; give it both.
    defaults = Rules(None)
    lowered = [preprocess_text(lower_each_character(l), defaults) for l in lines]
    numbers = ["%d,%03d, %d, and %d,%03d,%03d," % (r.randint(1, 99), r.randint(0, 999),
                                                   r.randint(0, 9), r.randint(1, 9),
                                                   r.randint(0, 999), r.randint(0, 999))
               for _ in range(400)]
    return [l for l in lines + lowered + numbers if l.strip()]


# ---------------------------------------------------------------------------

def check_nfkd_claim(strings, stats):
    """Per-code-point NFKD + dropping combining characters equals whole-string
    NFKD + dropping: canonical reordering only moves combining characters.
    Counts the strings where reordering did happen (so the claim is tested)."""
    reordered = 0
    for s in strings:
        whole = unicodedata.normalize("NFKD", s)
        per_cp = "".join(unicodedata.normalize("NFKD", c) for c in s)
        if whole != per_cp:
            reordered += 1
        drop = lambda t: "".join(c for c in t if not unicodedata.combining(c))  # noqa: E731
        assert drop(whole) == drop(per_cp), repr(s)
    stats["nfkd_reordered_strings"] = reordered
    assert reordered > 0, "no test string exercises canonical reordering"


def train(name, flags, corpus_path, out):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    prefix = os.path.join(d, "spiece")
    cmd = ["spm_train", "--input=" + corpus_path, "--model_prefix=" + prefix,
           "--model_type=unigram", "--num_threads=1",
           "--hard_vocab_limit=false", "--minloglevel=2", "--seed_sentencepiece_size=30000",
           "--shuffle_input_sentence=false"] + ALBERT_RECIPE + flags
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.remove(prefix + ".vocab")
    return prefix + ".model"


def write_config_oracle(model_path, model_name, flag_name, config, strings, out, stats):
    name = model_name + "__" + flag_name
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(model_path, os.path.join(d, "spiece.model"))
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
    sp = spm.SentencePieceProcessor(model_file=model_path)
    rules = Rules(config)
    resplit = 0
    with open(os.path.join(d, "oracle.jsonl"), "w", encoding="utf-8") as f:
        for s in strings:
            pre, pieces = albert_tokenize(sp, s, rules)
            ids = [sp.PieceToId(p) for p in pieces]
            if any(len(p) > 1 and p[-1] == "," and p[-2].isdigit()
                   for p in sp.encode(pre, out_type=str)):
                resplit += 1
            f.write(json.dumps({"ids": ids, "pieces": pieces, "pre": pre},
                               ensure_ascii=False) + "\n")
    stats["digit_comma_strings"][name] = resplit
    return name


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    extra = sys.argv[sys.argv.index("--corpus") + 1] if "--corpus" in sys.argv else None
    os.makedirs(out, exist_ok=True)
    done = os.path.join(out, "DONE")
    if os.path.exists(done):
        os.remove(done)

    strings = make_strings()
    with open(os.path.join(out, "strings.jsonl"), "w", encoding="utf-8") as f:
        for s in strings:
            f.write(json.dumps({"text": s}, ensure_ascii=False) + "\n")
    stats = {"strings": len(strings), "digit_comma_strings": {}}
    check_nfkd_claim(strings, stats)

    corpus_path = os.path.join(out, "train_corpus.txt")
    with open(corpus_path, "w", encoding="utf-8") as f:
        for line in training_lines(extra):
            f.write(line + "\n")

    configs = []
    for model_name, flags in MODELS:
        model_path = train(model_name, flags, corpus_path, out)
        for flag_name, config in FLAG_SETS:
            configs.append(write_config_oracle(model_path, model_name, flag_name, config,
                                               strings, out, stats))
    assert max(stats["digit_comma_strings"].values()) >= 50, stats

    gen_unicode_tables.dump(os.path.join(out, "py_unicode.jsonl"))
    with open(os.path.join(out, "stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    with open(os.path.join(out, "configs.txt"), "w") as f:
        f.write("\n".join(configs) + "\n")
    with open(done, "w") as f:
        f.write("ok\n")
    print("wrote %d strings x %d configs (%d models) to %s" % (
        len(strings), len(configs), len(MODELS), out))


if __name__ == "__main__":
    main()
