#!/usr/bin/python3
"""Independent GPT-2 byte-level BPE oracle for the C++ BPE tokenizer.

    /usr/bin/python3 gen_bpe_oracle.py OUT_DIR --vocab-dir DIR [--count N]

Written from the published algorithm (GPT-2's encoder.py: bytes_to_unicode,
the pre-tokenizer pattern run with the `regex` module, rank-ordered merges)
and the offset convention of Hugging Face's ByteLevel post-processor
(trim_offsets). It shares no code with the C++ side. DIR holds vocab.json
and merges.txt (the DeBERTa v1 golden vocabulary).

Writes into OUT_DIR:
  strings.jsonl          {"text", "text_pair"?, "ids", "tokens", "offsets"}
                         with DeBERTa v1's layout ([CLS] A [SEP] B [SEP]);
                         offsets in code points, null for specials;
                         add_prefix_space false
  strings_prefix.jsonl   the same texts with add_prefix_space true (the slow
                         tokenizer's rule: a space before a text that does
                         not start with a str.isspace() character)
  plain/                 vocab.json, merges.txt, tokenizer_config.json
  prefix/                the same with add_prefix_space true
  json/tokenizer.json    the same model as a tokenizers BPE + ByteLevel file
  regex_classes.json     {"version", "ranges": [[lo, hi, class]...]}: how
                         the regex module classes every code point
                         (1 \\p{L}, 2 \\p{N}, 3 \\s; others are 0)
  DONE
"""
import argparse
import json
import os
import random
import shutil

import regex

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class Gpt2Bpe:
    def __init__(self, vocab_dir):
        with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(os.path.join(vocab_dir, "merges.txt"), encoding="utf-8") as f:
            lines = f.read().split("\n")[1:-1]
        self.ranks = {tuple(line.split()): i for i, line in enumerate(lines)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        """GPT-2's loop: merge every occurrence of the lowest-ranked pair."""
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            best, best_rank = None, None
            for pair in zip(word, word[1:]):
                r = self.ranks.get(pair)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = pair, r
            if best is None:
                break
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == best[0] and word[i + 1] == best[1]:
                    merged.append(best[0] + best[1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        self.cache[token] = word
        return word

    def encode(self, text, add_prefix_space):
        """Tokens and code-point offsets [start, end) into `text`."""
        prefixed = add_prefix_space and len(text) > 0 and not text[0].isspace()
        work = " " + text if prefixed else text
        data = work.encode("utf-8")
        # The character (of `text`) holding each byte of `work`; the added
        # space stands for the first character, as tokenizers' prepend aligns it.
        owner = []
        for ci, ch in enumerate(work):
            owner.extend([ci - 1 if prefixed else ci] * len(ch.encode("utf-8")))
        if prefixed:
            owner[0] = 0
        tokens, offsets = [], []
        pos = 0
        for chunk in PATTERN.findall(work):
            mapped = "".join(self.byte_encoder[b] for b in chunk.encode("utf-8"))
            for tok in self.bpe(mapped):
                n = len(tok)  # one symbol per byte
                b0, b1 = pos, pos + n
                pos = b1
                start, end = owner[b0], owner[b1 - 1] + 1
                # tokenizers' process_offsets (ByteLevel trim_offsets)
                lead = len(tok) - len(tok.lstrip("Ġ"))
                trail = len(tok) - len(tok.rstrip("Ġ"))
                if lead and add_prefix_space and lead == 1 and (len(tokens) == 0 or start == 0):
                    lead = 0
                if lead:
                    start = min(start + lead, end)
                if trail and end >= trail:
                    end = max(end - trail, start)
                tokens.append(tok)
                offsets.append([start, end])
        assert pos == len(data)
        return tokens, offsets

    def encode_layout(self, text, pair, add_prefix_space):
        tokens = ["[CLS]"]
        offsets = [None]
        a_tok, a_off = self.encode(text, add_prefix_space)
        tokens += a_tok + ["[SEP]"]
        offsets += a_off + [None]
        if pair is not None:
            b_tok, b_off = self.encode(pair, add_prefix_space)
            tokens += b_tok + ["[SEP]"]
            offsets += b_off + [None]
        ids = [self.encoder[t] for t in tokens]
        return ids, tokens, offsets


FIXED = [
    "", " ", "  ", "   ", "\t", "\n", "\r\n", " \n ", "a", "Hello world", " Hello world",
    "Hello  world", "Hello   world", "Hello\tworld", "Hello\n\nworld", "Hello \tworld", "Hello\t world",
    "a  b", "a \u00a0b", "a\u3000b", "a\u2003 b", "x\x0by\x0cz", "a\x1cb\x1fc", "a\x85b\u2028c",
    "it's", "IT'S", "It's", "we're", "WE'RE", "they've", "I'm", "you'll", "he'd", "don't",
    "'s", "''s", "'", "' s", " 's", "'S", "'re'", "rock'n'roll", "it\u2019s", "o'clock", "'ll've",
    "123", " 123", "3.14159", "1,000,000", "\u0663\u0664\u0665", "x\u00b2+y\u00b2", "\u00bd cup", "\u216b",
    "!!!", "...", "?!", " --", "()[]{}", "@#$%^&*", "\u2014", "\u00ab\u00bb", "a...b", " ...",
    "caf\u00e9", "cafe\u0301", "na\u00efve", "\u00c6r\u00f8sk\u00f8bing", "e\u0301\u0301", " \u0301", "a \u0301b",
    "\U0001f44d", " \U0001f44d", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1eb\U0001f1f7",
    "\U0001f44d\U0001f3fd", "1\ufe0f\u20e3", "I \u2764\ufe0f NY",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\u4e2d\u6587 \u5b57\u7b26", "\ud55c\uad6d\uc5b4",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u05e2\u05d1\u05e8\u05d9\u05ea", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u044f\u0437\u044b\u043a", "\x00\x07\x7f",
    "a" * 1500, "supercalifragilistic" * 40, "\u00e9" * 300, "\U0001f600" * 100,
    "trailing space ", "trailing spaces   ", "\ttabbed", "  leading", "\u00a0nbsp lead",
]

POOL = [
    "the", "The", "THE", "quick", "Brown", "fox", "jumps", "over", "lazy", "dog", "DeBERTa",
    "RoBERTa", "tokenizer", "internationalization", "it's", "IT'S", "we're", "They'LL", "I'M", "y'all",
    "can't", "won't", "'s", "'d", "'", "\u2019", "12", "2024", "3.5", "42nd", "\u0663", "\u00bd", "\u2160",
    ",", ".", "!", "?", "...", "--", "\"", "(", ")", "#", "$", "%", "&&", "||", "=>", "<br>", "\\n",
    "caf\u00e9", "cafe\u0301", "\u0301", "\u00fcber", "Stra\u00dfe", "\u00e7a", "\u0141\u00f3d\u017a",
    "\U0001f44d", "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f1ef\U0001f1f5", "\U0001f44b\U0001f3fe",
    "\u2764\ufe0f", "#\ufe0f\u20e3", "\u65e5\u672c", "\u8a9e", "\u6f22\u5b57", "\u3072\u3089\u304c\u306a",
    "\u30ab\u30bf\u30ab\u30ca", "\ud55c\uae00", "\u0645\u0631\u062d\u0628\u0627", "\u0634\u064f\u0643\u0652\u0631\u064b\u0627",
    "\u05e9\u05dc\u05d5\u05dd", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u03b1\u03b2\u03b3", "\u0416\u0438\u0437\u043d\u044c", "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",
    "x\u0332", "\x00", "\x1b[0m", "\u200b", "\ufeff", "\U00010348", "\U0001d54f", "\U00031350",
]
SEPS = [" ", " ", " ", " ", "", "", "  ", "   ", "\t", "\n", "\r\n", " \n", "\n ", "\u00a0", "\u3000",
        " \t ", "\x0b", "\x1c", "\x85", "\u2029", "    "]


def random_text(rng):
    parts = []
    for _ in range(rng.randint(1, 14)):
        parts.append(rng.choice(POOL))
        parts.append(rng.choice(SEPS))
    if rng.random() < 0.5:
        parts.pop()
    if rng.random() < 0.05:
        parts.insert(rng.randrange(len(parts) + 1), "".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(50, 400))))
    if rng.random() < 0.1:
        parts.insert(0, rng.choice(SEPS))
    return "".join(parts)


def regex_classes():
    letter, number, space = regex.compile(r"\p{L}"), regex.compile(r"\p{N}"), regex.compile(r"\s")
    ranges = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        cls = 1 if letter.match(ch) else 2 if number.match(ch) else 3 if space.match(ch) else 0
        if cls == 0:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == cls:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, cls])
    return {"version": regex.__version__, "ranges": ranges}


def write_tokenizer_json(vocab_dir, path):
    with open(os.path.join(vocab_dir, "vocab.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(vocab_dir, "merges.txt"), encoding="utf-8") as f:
        merges = f.read().split("\n")[1:-1]
    specials = [t for t in vocab if t.startswith("[") and t.endswith("]")]
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": t == "[MASK]",
                          "rstrip": False, "normalized": False, "special": True} for t in specials],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [], "special_tokens": {}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--vocab-dir", required=True)
    ap.add_argument("--count", type=int, default=3000)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    done = os.path.join(args.out, "DONE")
    if os.path.exists(done):
        os.remove(done)

    bpe = Gpt2Bpe(args.vocab_dir)
    # The oracle checks itself on Hugging Face's goldens when they are there.
    golden = os.path.join(args.vocab_dir, "tokens.jsonl")
    if os.path.exists(golden):
        with open(golden, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                ids, tokens, offsets = bpe.encode_layout(row["text"], row.get("text_pair"), False)
                assert (ids, tokens, offsets) == (row["ids"], row["tokens"], row["offsets"]), row["id"]
    rng = random.Random(20261203)
    rows = [(t, None) for t in FIXED]
    while len(rows) < args.count:
        text = random_text(rng)
        pair = random_text(rng) if rng.random() < 0.15 else None
        rows.append((text, pair))
    rows.append(("What's the capital?", "Paris is the capital of France. \U0001f1eb\U0001f1f7"))
    rows.append(("", "context only"))
    rows.append(("question only", ""))

    for name, prefix in (("strings.jsonl", False), ("strings_prefix.jsonl", True)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8") as f:
            for text, pair in rows:
                ids, tokens, offsets = bpe.encode_layout(text, pair, prefix)
                row = {"text": text, "ids": ids, "tokens": tokens, "offsets": offsets}
                if pair is not None:
                    row["text_pair"] = pair
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    for sub, prefix in (("plain", False), ("prefix", True)):
        d = os.path.join(args.out, sub)
        os.makedirs(d, exist_ok=True)
        for name in ("vocab.json", "merges.txt"):
            shutil.copyfile(os.path.join(args.vocab_dir, name), os.path.join(d, name))
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "DebertaTokenizer", "add_prefix_space": prefix,
                       "cls_token": "[CLS]", "sep_token": "[SEP]", "unk_token": "[UNK]",
                       "pad_token": "[PAD]", "mask_token": {"content": "[MASK]", "lstrip": True}}, f)
    os.makedirs(os.path.join(args.out, "json"), exist_ok=True)
    write_tokenizer_json(args.vocab_dir, os.path.join(args.out, "json", "tokenizer.json"))

    with open(os.path.join(args.out, "regex_classes.json"), "w", encoding="utf-8") as f:
        json.dump(regex_classes(), f)
    with open(done, "w") as f:
        f.write("%d\n" % len(rows))


if __name__ == "__main__":
    main()
