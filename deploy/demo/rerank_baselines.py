#!/usr/bin/python3
"""MRR@10 of the trivial rankers on a rerank JSONL file (DESIGN.md section 4:
{"query", "passage", "label"} rows, one contiguous group per query), the
yardsticks a demo reranker is read against (deploy/demo/README.md):

  random        the expected MRR@10 of a uniformly random order;
  bag_of_words  score = how many distinct query words the passage contains;
  idf_bag_of_words  the same, each word weighted by its IDF over the file's
                distinct passages.

Words are lower-cased runs of letters and digits. Ties are broken by
expectation (a positive tied with t others at rank r scores the mean of
1/r .. 1/(r+t), each cut at 10), so no baseline gains from input order.

    rerank_baselines.py FILE [--json]
"""
import argparse
import json
import math
import re
import sys

WORD = re.compile(r"[^\W_]+", re.UNICODE)


def words(text):
    return set(w.lower() for w in WORD.findall(text))


def groups(path):
    out, last = [], None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if row["query"] != last:
                out.append([])
                last = row["query"]
            out[-1].append(row)
    return out


def expected_rr(scores, labels, k=10):
    """Mean reciprocal rank (cut at k) of the best positive, ties by expectation."""
    best = None
    for s, l in zip(scores, labels):
        if l > 0:
            higher = sum(1 for t in scores if t > s)
            tied = sum(1 for t in scores if t == s) - 1
            ranks = range(higher + 1, higher + tied + 2)
            rr = sum(1.0 / r if r <= k else 0.0 for r in ranks) / len(ranks)
            best = rr if best is None else max(best, rr)
    return best


def baselines(path):
    gs = [g for g in groups(path) if any(r["label"] > 0 for r in g)]
    passages = {r["passage"] for g in gs for r in g}
    df = {}
    for p in passages:
        for w in words(p):
            df[w] = df.get(w, 0) + 1
    n = len(passages)
    idf = {w: math.log((n + 1) / (c + 0.5)) for w, c in df.items()}
    out = {"groups": len(gs)}
    rankers = {
        "random": lambda q, p: 0.0,
        "bag_of_words": lambda q, p: float(len(q & words(p))),
        "idf_bag_of_words": lambda q, p: sum(idf.get(w, 0.0) for w in q & words(p)),
    }
    for name, score in rankers.items():
        total = 0.0
        for g in gs:
            q = words(g[0]["query"])
            total += expected_rr([score(q, r["passage"]) for r in g], [r["label"] for r in g])
        out[name] = total / len(gs)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    b = baselines(args.file)
    if args.json:
        print(json.dumps(b))
    else:
        print("%d groups: MRR@10 random %.4f, bag-of-words %.4f, IDF bag-of-words %.4f" % (
            b["groups"], b["random"], b["bag_of_words"], b["idf_bag_of_words"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
