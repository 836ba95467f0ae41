#!/usr/bin/python3
"""Issue 25, ninth round (deploy/demo/README.md): rerank groups from the 48
hand-written training manuals in training_manuals.json (beside this script;
products in no other demo file, 5 paragraphs each, answers marked
[[key|text]] as in generate_demo_data.py's MANUALS), for experiments on
whether the demo reranker learns to match a question with the manual text
that answers it.

    /usr/bin/python3 deploy/demo/experiments/manual_groups.py --out DIR [--hold 8] [--anon-copies 3]

writes, for the first 48 - H manuals (training) and the last H (held out):
  paragraphs_{train,held}.jsonl  query = a question; its paragraph (label 1),
                                 3 other paragraphs of its manual, 2 of other
                                 manuals of the same part (the demo eval shape)
  sentences_{train,held}.jsonl   the sentence holding the answer (label 1), 2
                                 other sentences of its paragraph and 3 of the
                                 manual's other paragraphs
  sentences_train_anon.jsonl     sentences_train plus --anon-copies copies in
                                 which every word of 4+ letters that the query
                                 shares with the positive is replaced, in the
                                 query and every candidate, by a random word of
                                 mlm_train.txt (--corpus): the match can only be
                                 learnt as equality, not memorised per word
Rerank JSONL as DESIGN.md section 4; no query repeats within a file (the
trainer groups rows by query). Deterministic for a --seed.
"""
import argparse
import collections
import json
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from generate_demo_data import parse_paragraph  # noqa: E402 - the demo's own [[key|text]] reader

SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"(])")
STOPWORDS = set("""the and for with that this from your what when which does will into have been there their
about after before until while also than then them they more most must should would could much many some such
only other each every very just over under again once here where long can you are was were not""".split())


def load_manuals(path):
    """[[(plain text, {key: start}, {key: [questions]})] per manual]."""
    with open(path, encoding="utf-8") as f:
        source = json.load(f)
    manuals = []
    for m in source:
        paras = []
        for p in m["paragraphs"]:
            context, spans = parse_paragraph(p["text"])
            if sorted(spans) != sorted(p["qa"]):
                raise ValueError(f"{m['slug']}: answer keys and questions differ")
            paras.append((context, {key: start for key, (start, _) in spans.items()}, p["qa"]))
        manuals.append(paras)
    return manuals


def sentences(text):
    """[(start, end, sentence)] of a paragraph."""
    out, pos = [], 0
    for part in SENTENCE_END_RE.split(text):
        start = text.index(part, pos)
        out.append((start, start + len(part), part))
        pos = start + len(part)
    return out


def group(rng, query, positive, negatives):
    rows = [{"query": query, "passage": positive, "label": 1}]
    rows += [{"query": query, "passage": n, "label": 0} for n in negatives]
    rng.shuffle(rows)
    return rows


def paragraph_groups(rng, manuals, seen):
    groups = []
    for i, m in enumerate(manuals):
        other = [text for k, o in enumerate(manuals) if k != i for text, _, _ in o]
        for j, (text, _, qa) in enumerate(m):
            same = [t for k, (t, _, _) in enumerate(m) if k != j]
            for q in (q for qs in qa.values() for q in qs):
                if q.lower() not in seen:
                    seen.add(q.lower())
                    groups.append(group(rng, q, text, rng.sample(same, 3) + rng.sample(other, 2)))
    return groups


def sentence_groups(rng, manuals, seen):
    groups = []
    for m in manuals:
        split = [sentences(text) for text, _, _ in m]
        for j, (_, spans, qa) in enumerate(m):
            others = [s for k, ss in enumerate(split) if k != j for _, _, s in ss]
            for key, qs in qa.items():
                positive = next(s for a, b, s in split[j] if a <= spans[key] < b)
                same = [s for _, _, s in split[j] if s != positive]
                for q in qs:
                    if q.lower() in seen:
                        continue
                    seen.add(q.lower())
                    negs = rng.sample(same, min(2, len(same)))
                    groups.append(group(rng, q, positive, negs + rng.sample(others, 5 - len(negs))))
    return groups


def anonymised(rng, groups, copies, pool, seen):
    out = []
    for _ in range(copies):
        for g in groups:
            q = g[0]["query"]
            positive = next(r["passage"] for r in g if r["label"] == 1)
            shared = sorted(({w.lower() for w in re.findall(r"[A-Za-z]{4,}", q)} - STOPWORDS)
                            & {w.lower() for w in re.findall(r"[A-Za-z]{4,}", positive)})
            if not shared:
                continue
            mapping = {w: rng.choice(pool) for w in shared}
            word_re = re.compile(r"\b(" + "|".join(map(re.escape, shared)) + r")\b", re.I)
            sub = lambda t: word_re.sub(lambda m: mapping[m.group(1).lower()], t)  # noqa: E731
            if sub(q).lower() in seen:
                continue
            seen.add(sub(q).lower())
            out.append([dict(r, query=sub(q), passage=sub(r["passage"])) for r in g])
    return out


def write(path, groups):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for g in groups:
            for r in g:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--manuals", default=os.path.join(here, "training_manuals.json"))
    ap.add_argument("--hold", type=int, default=8, help="manuals held out (the last H)")
    ap.add_argument("--anon-copies", type=int, default=3)
    ap.add_argument("--corpus", default="build/demo/data/mlm_train.txt",
                    help="replacement words for the anonymised copies (words of 4+ letters)")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()
    manuals = load_manuals(args.manuals)
    if not 0 < args.hold < len(manuals):
        ap.error(f"--hold must be between 1 and {len(manuals) - 1}")
    os.makedirs(args.out, exist_ok=True)
    parts = {"train": manuals[:-args.hold], "held": manuals[-args.hold:]}
    counts = collections.OrderedDict()
    for name, ms in parts.items():
        rng = random.Random(f"{args.seed}/{name}")
        para = paragraph_groups(rng, ms, set())
        sent = sentence_groups(rng, ms, set())
        rng.shuffle(para)
        rng.shuffle(sent)
        write(os.path.join(args.out, f"paragraphs_{name}.jsonl"), para)
        write(os.path.join(args.out, f"sentences_{name}.jsonl"), sent)
        counts[f"paragraphs_{name}"], counts[f"sentences_{name}"] = len(para), len(sent)
        if name == "train" and args.anon_copies:
            with open(args.corpus, encoding="utf-8") as f:
                pool = sorted(set(re.findall(r"[a-z]{4,}", f.read().lower())))
            seen = {g[0]["query"].lower() for g in sent}
            anon = sent + anonymised(rng, sent, args.anon_copies, pool, seen)
            rng.shuffle(anon)
            write(os.path.join(args.out, "sentences_train_anon.jsonl"), anon)
            counts["sentences_train_anon"] = len(anon)
    print(", ".join(f"{k} {v} groups" for k, v in counts.items()))


if __name__ == "__main__":
    main()
