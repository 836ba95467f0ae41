#!/usr/bin/python3
"""Checks deploy/demo/generate_demo_data.py: determinism, the ticket slices,
SQuAD v2 spans, rerank groups, split hygiene, stats.json.

    test_demo_data.py --generator PATH --work DIR
(registered with ctest; standard library only, a few seconds).
"""
import argparse
import collections
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

ARGS = None
SPLITS = ["train", "dev", "test"]
FILES = (["manuals.txt", "mlm_train.txt", "mlm_train_pairs.txt", "mlm_dev.txt", "stats.json"]
         + [f"tickets_{s}.jsonl" for s in SPLITS] + [f"qa_{s}.json" for s in SPLITS]
         + [f"rerank_{s}.jsonl" for s in SPLITS] + ["rerank_train_first.jsonl", "rerank_dev_first.jsonl"])
HARD_TAGS = ["negation", "swapped_roles", "word_order"]
# One sentence: ends in . ! or ?, and no sentence end followed by a capital inside.
ONE_SENTENCE = re.compile(r"^(?!.*[.!?] [A-Z]).*[.!?]$")


def generate(out, seed=13, scale=None):
    if os.path.isdir(out):
        shutil.rmtree(out)
    cmd = ["/usr/bin/python3", ARGS.generator, "--out", out, "--seed", str(seed)]
    if scale is not None:
        cmd += ["--scale", str(scale)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def norm(text):
    return " ".join(text.lower().split())


def bag(text):
    return sorted(re.findall(r"[a-z0-9$€£]+", text.lower()))


class DemoData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = generate(os.path.join(ARGS.work, "seed13_a"))
        cls.b = generate(os.path.join(ARGS.work, "seed13_b"))
        cls.c = generate(os.path.join(ARGS.work, "seed14"), seed=14)
        cls.tickets = {s: read_jsonl(os.path.join(cls.a, f"tickets_{s}.jsonl")) for s in SPLITS}
        cls.qa = {}
        for s in SPLITS:
            with open(os.path.join(cls.a, f"qa_{s}.json"), encoding="utf-8") as f:
                cls.qa[s] = json.load(f)
        cls.rerank = {s: read_jsonl(os.path.join(cls.a, f"rerank_{s}.jsonl")) for s in SPLITS}
        with open(os.path.join(cls.a, "stats.json"), encoding="utf-8") as f:
            cls.stats = json.load(f)

    # ---- determinism
    def test_same_seed_gives_identical_files(self):
        for name in FILES:
            self.assertTrue(filecmp.cmp(os.path.join(self.a, name), os.path.join(self.b, name),
                                        shallow=False), name)

    def test_other_seed_gives_other_files(self):
        for name in ["tickets_train.jsonl", "tickets_test.jsonl", "rerank_train.jsonl", "qa_train.json"]:
            self.assertFalse(filecmp.cmp(os.path.join(self.a, name), os.path.join(self.c, name),
                                         shallow=False), name)

    # ---- tickets
    def test_ticket_schema_and_sizes(self):
        self.assertEqual([len(self.tickets[s]) for s in SPLITS], [2400, 300, 300])
        intents = set(self.stats["intents"])
        tags = set(self.stats["tags"])
        for s in SPLITS:
            for t in self.tickets[s]:
                self.assertEqual(set(t), {"text", "label", "tags"})
                self.assertIsInstance(t["text"], str)
                self.assertTrue(t["text"].strip())
                self.assertIn(t["label"], intents)
                self.assertIsInstance(t["tags"], list)
                self.assertTrue(set(t["tags"]) <= tags, t)

    def test_at_least_eight_intents_in_every_split(self):
        self.assertGreaterEqual(len(self.stats["intents"]), 8)
        for s in SPLITS:
            labels = collections.Counter(t["label"] for t in self.tickets[s])
            self.assertGreaterEqual(len(labels), 8, s)
            self.assertEqual(set(labels), set(self.stats["intents"]), s)

    def test_every_tag_in_every_split(self):
        for s in SPLITS:
            counts = collections.Counter(tag for t in self.tickets[s] for tag in t["tags"])
            for tag in HARD_TAGS + ["noisy"]:
                self.assertGreater(counts[tag], 0, (s, tag))
            self.assertGreater(sum(not t["tags"] for t in self.tickets[s]), len(self.tickets[s]) // 2)

    def test_no_duplicates_within_or_across_splits(self):
        seen = {}
        for s in SPLITS:
            for t in self.tickets[s]:
                k = norm(t["text"])
                self.assertNotIn(k, seen, f"{t['text']!r} in {s} and {seen.get(k)}")
                seen[k] = s

    def test_negation_slice_spans_labels(self):
        for s in SPLITS:
            neg = [t for t in self.tickets[s] if "negation" in t["tags"]]
            self.assertGreaterEqual(len({t["label"] for t in neg}), 4, s)

    def test_word_order_pairs_share_words_and_differ_in_label(self):
        # Every clean word_order ticket has a partner in its split with the
        # same words and another label.
        for s in SPLITS:
            wo = [t for t in self.tickets[s] if t["tags"] == ["word_order"]]
            self.assertTrue(wo, s)
            by_bag = collections.defaultdict(set)
            for t in wo:
                by_bag[tuple(bag(t["text"]))].add(t["label"])
            for t in wo:
                self.assertGreaterEqual(len(by_bag[tuple(bag(t["text"]))]), 2, t["text"])

    def test_swapped_role_pairs_stay_together(self):
        for s in SPLITS:
            sr = [t for t in self.tickets[s] if "swapped_roles" in t["tags"]]
            self.assertEqual(len(sr) % 2, 0, s)
            self.assertGreaterEqual(len({t["label"] for t in sr}), 4, s)

    # ---- QA
    def test_squad_v2_structure_and_spans(self):
        ids = set()
        for s in SPLITS:
            d = self.qa[s]
            self.assertEqual(d["version"], "v2.0")
            for art in d["data"]:
                self.assertIsInstance(art["title"], str)
                for para in art["paragraphs"]:
                    c = para["context"]
                    for qa in para["qas"]:
                        self.assertNotIn(qa["id"], ids)
                        ids.add(qa["id"])
                        self.assertTrue(qa["question"].endswith("?"), qa["question"])
                        self.assertEqual(qa["is_impossible"], not qa["answers"], qa["id"])
                        for a in qa["answers"]:
                            st = a["answer_start"]
                            self.assertEqual(c[st:st + len(a["text"])], a["text"], qa["id"])
                            self.assertTrue(a["text"].strip())

    def test_unanswerable_fraction(self):
        total = imp = 0
        for s in SPLITS:
            qs = [qa for art in self.qa[s]["data"] for p in art["paragraphs"] for qa in p["qas"]]
            n_imp = sum(q["is_impossible"] for q in qs)
            self.assertGreaterEqual(n_imp / len(qs), 0.30, s)
            self.assertGreater(len(qs) - n_imp, 0, s)
            total += len(qs)
            imp += n_imp
        self.assertGreaterEqual(imp / total, 0.30)
        self.assertAlmostEqual(self.stats["qa"]["all"]["unanswerable_fraction"], round(imp / total, 4))

    def test_product_sheets_are_learnable_and_split_by_product(self):
        # Issue 18 defect 12: enough answerable questions to learn QA (the
        # manuals alone give 89), unanswerable ones asking for an attribute
        # the sheet does not state, and no product in two splits.
        answerable = {}
        products = {}
        for s in SPLITS:
            answerable[s] = 0
            products[s] = set()
            sheets = [p for art in self.qa[s]["data"] if art["title"].endswith("product sheets")
                      for p in art["paragraphs"]]
            self.assertEqual(len(sheets), self.stats["qa"][s]["product_sheets"], s)
            for p in sheets:
                name = re.match(r"The (.+?) is an? ", p["context"]).group(1)
                products[s].add(name)
                stated = set()
                asked_absent = set()
                for qa in p["qas"]:
                    self.assertIn(name, qa["question"])
                    attr = qa["id"].rsplit("-", 1)[1]
                    if qa["is_impossible"]:
                        asked_absent.add(attr)
                    else:
                        stated.add(attr)
                        answerable[s] += 1
                self.assertEqual(len(stated), 5, p["context"])
                self.assertEqual(len(asked_absent), 3, p["context"])
                self.assertFalse(stated & asked_absent, p["context"])
        self.assertGreaterEqual(answerable["train"], 1500)
        self.assertGreaterEqual(answerable["test"], 200)
        self.assertFalse(products["train"] & products["test"])
        self.assertFalse(products["train"] & products["dev"])
        self.assertFalse(products["dev"] & products["test"])

    def test_qa_contexts_do_not_cross_splits(self):
        where = {}
        for s in SPLITS:
            for art in self.qa[s]["data"]:
                for p in art["paragraphs"]:
                    self.assertNotIn(p["context"], where)
                    where[p["context"]] = s

    # ---- rerank
    def test_rerank_groups(self):
        with open(os.path.join(self.a, "manuals.txt"), encoding="utf-8") as f:
            docs = f.read().strip().split("\n\n")
        manual_of = {}
        for i, d in enumerate(docs):
            for line in d.split("\n")[1:]:
                manual_of[line] = i
        sheet_split = {p["context"]: s for s in SPLITS for art in self.qa[s]["data"]
                       if art["title"].endswith("product sheets") for p in art["paragraphs"]}
        manual_split = {p["context"]: s for s in SPLITS for art in self.qa[s]["data"]
                        if not art["title"].endswith("product sheets") for p in art["paragraphs"]}
        queries_by_split = {}
        sheet_groups = {}
        extra_sheets = set()
        extra_groups = 0
        sentences = set()
        sentence_names = set()
        sentence_groups = 0
        for s in SPLITS:
            rows = self.rerank[s]
            self.assertTrue(rows, s)
            groups = []
            for r in rows:
                self.assertEqual(set(r), {"query", "passage", "label"})
                self.assertIn(r["label"], (0, 1))
                if s == "train" and r["passage"] not in manual_of and r["passage"] not in sheet_split:
                    if ONE_SENTENCE.match(r["passage"]):
                        # product_sheets.make_sentence_rerank_groups: one sentence of a sheet.
                        sentences.add(r["passage"])
                    else:
                        # product_sheets.make_rerank_training_sheets: sheets of their own.
                        self.assertRegex(r["passage"], r"^The .+? is an? .+ from \w+\.", r["passage"][:60])
                        extra_sheets.add(r["passage"])
                else:
                    self.assertTrue(r["passage"] in manual_of or r["passage"] in sheet_split, r["passage"][:60])
                if groups and groups[-1][0]["query"] == r["query"]:
                    groups[-1].append(r)
                else:
                    groups.append([r])
            queries = [g[0]["query"] for g in groups]
            self.assertEqual(len(queries), len(set(queries)), f"{s}: a query's lines are not contiguous")
            sheet_groups[s] = 0
            for g in groups:
                pos = [r for r in g if r["label"] == 1]
                self.assertEqual(len(pos), 1, g[0]["query"])
                if pos[0]["passage"] in sentences:
                    # Sentences of one sheet: every candidate is one, the
                    # asked product is the only one they name, and the intro
                    # sentence (which names it) is a negative where present.
                    sentence_groups += 1
                    self.assertEqual(len(g), 6, g[0]["query"])
                    self.assertEqual(len({r["passage"] for r in g}), len(g), "repeated passage")
                    for r in g:
                        self.assertIn(r["passage"], sentences, g[0]["query"])
                        m = re.match(r"^The (.+?) is an? [a-z -]+ from \w+\.$", r["passage"])
                        if m:
                            intro = m.group(1)
                            self.assertIn(intro, g[0]["query"])
                            self.assertEqual(r["label"], 0)
                            sentence_names.add(intro)
                    continue
                if pos[0]["passage"] in extra_sheets:
                    # The extra training groups: the product's name in the
                    # query and the positive only, every passage an extra sheet.
                    extra_groups += 1
                    name = re.match(r"The (.+?) is an? ", pos[0]["passage"]).group(1)
                    self.assertIn(name, g[0]["query"])
                    for r in g:
                        self.assertIn(r["passage"], extra_sheets)
                        if r["label"] == 0:
                            self.assertNotIn("The %s is " % name, r["passage"])
                    self.assertEqual(len({r["passage"] for r in g}), len(g), "repeated passage")
                    continue
                if pos[0]["passage"] in sheet_split:
                    # A product sheet's question: the product's name is in the
                    # query and the positive only; hard negatives state the
                    # asked attribute too; every passage from the query's split.
                    sheet_groups[s] += 1
                    name = re.match(r"The (.+?) is an? ", pos[0]["passage"]).group(1)
                    self.assertIn(name, g[0]["query"])
                    for r in g:
                        self.assertEqual(sheet_split[r["passage"]], s)
                        if r["label"] == 0:
                            self.assertNotIn("The %s is " % name, r["passage"])
                    self.assertEqual(len({r["passage"] for r in g}), len(g), "repeated passage")
                    continue
                if s == "train":
                    # Training negatives are training paragraphs: an eval
                    # paragraph seen only as irrelevant is learnt as such.
                    for r in g:
                        self.assertEqual(manual_split[r["passage"]], "train", r["passage"][:60])
                home = manual_of[pos[0]["passage"]]
                negs = [manual_of[r["passage"]] for r in g if r["label"] == 0]
                self.assertGreaterEqual(sum(m == home for m in negs), 1, "no hard negative")
                self.assertGreaterEqual(sum(m != home for m in negs), 1, "no easy negative")
                self.assertEqual(len({r["passage"] for r in g}), len(g), "repeated passage")
            queries_by_split[s] = set(queries)
            self.assertGreaterEqual(sheet_groups[s], 80 if s != "train" else 600, s)
        self.assertFalse(queries_by_split["train"] & queries_by_split["test"])
        self.assertFalse(queries_by_split["train"] & queries_by_split["dev"])
        # The extra training sheets (issue 25): over a thousand groups, and no
        # product of theirs is one of a dev or test sheet.
        self.assertGreaterEqual(extra_groups, 3000)
        held_out = {re.match(r"The (.+?) is an? ", c).group(1) for c, sp in sheet_split.items() if sp != "train"}
        extra_names = {re.match(r"The (.+?) is an? ", c).group(1) for c in extra_sheets}
        self.assertFalse(held_out & extra_names)
        # The sentence groups (issue 25, sixth round): their products are in
        # no sheet of any split and in no extra training sheet.
        self.assertGreaterEqual(sentence_groups, 1000)
        self.assertGreater(len(sentence_names), 200)
        all_sheet_names = {re.match(r"The (.+?) is an? ", c).group(1) for c in sheet_split} | extra_names
        self.assertFalse(sentence_names & all_sheet_names)

    def sentence_queries(self):
        """The queries of the training groups whose candidates are sentences."""
        by_query = collections.defaultdict(list)
        for r in self.rerank["train"]:
            by_query[r["query"]].append(r["passage"])
        return {q for q, ps in by_query.items() if all(ONE_SENTENCE.match(p) for p in ps)}

    def test_first_sentence_rerank_files(self):
        # The reranker's first stage: the same rows, each passage cut to its
        # first whole sentence (a prefix of the passage, ending in . ! or ?).
        # The training file's groups of sentences (make_sentence_rerank_groups)
        # are not in the first-sentence file; every other group is, with its
        # rows in the same order.
        for s in ("train", "dev"):
            first = read_jsonl(os.path.join(self.a, f"rerank_{s}_first.jsonl"))
            skip = self.sentence_queries() if s == "train" else set()
            self.assertEqual(bool(skip), s == "train")
            full_rows = collections.defaultdict(list)
            for r in self.rerank[s]:
                if r["query"] not in skip:
                    full_rows[r["query"]].append(r)
            short_rows = collections.defaultdict(list)
            for r in first:
                short_rows[r["query"]].append(r)
            self.assertEqual(set(full_rows), set(short_rows), s)
            pairs = [(f, r) for q in full_rows for f, r in zip(full_rows[q], short_rows[q])]
            self.assertEqual(len(pairs), len(first), s)
            cut = 0
            for full, short in pairs:
                self.assertEqual((full["query"], full["label"]), (short["query"], short["label"]))
                self.assertTrue(full["passage"].startswith(short["passage"]), short["passage"][:60])
                self.assertRegex(short["passage"], r"[.!?]$")
                rest = full["passage"][len(short["passage"]):]
                self.assertTrue(rest == "" or rest[0].isspace(), rest[:20])
                cut += len(short["passage"]) < len(full["passage"])
            self.assertGreater(cut, len(first) // 2, s)
        self.assertFalse(os.path.exists(os.path.join(self.a, "rerank_test_first.jsonl")))

    # ---- corpora
    def test_manuals_and_mlm_corpora(self):
        with open(os.path.join(self.a, "manuals.txt"), encoding="utf-8") as f:
            docs = f.read().strip().split("\n\n")
        self.assertGreaterEqual(len(docs), 4)
        n_par = sum(len(d.split("\n")) - 1 for d in docs)
        self.assertTrue(20 <= n_par <= 40, n_par)
        with open(os.path.join(self.a, "mlm_train.txt"), encoding="utf-8") as f:
            mlm_train = f.read()
        with open(os.path.join(self.a, "mlm_dev.txt"), encoding="utf-8") as f:
            mlm_dev = f.read()
        self.assertNotIn("\n\n\n", mlm_train)
        train_lines = set(mlm_train.splitlines())
        for t in self.tickets["test"]:
            self.assertNotIn(t["text"], train_lines)
        for t in self.tickets["train"][:50]:
            self.assertIn(t["text"], train_lines)
        for t in self.tickets["dev"][:20]:
            self.assertIn(t["text"], mlm_dev)
        with open(os.path.join(self.a, "mlm_train_pairs.txt"), encoding="utf-8") as f:
            pairs = f.read()
        self.assertTrue(pairs.startswith(mlm_train.rstrip("\n") + "\n\n"))
        pair_lines = set(pairs.splitlines())
        skip = self.sentence_queries()
        kept = [r for r in self.rerank["train"] if r["query"] not in skip]
        for g in kept[:60]:
            if g["label"] == 1:
                self.assertIn(g["query"], pair_lines)
                self.assertIn(g["passage"], pair_lines)
        for art in self.qa["test"]["data"]:
            for p in art["paragraphs"]:
                self.assertNotIn(p["context"], train_lines)
                self.assertNotIn(p["context"], pair_lines)
                self.assertNotIn(p["context"], mlm_dev)

    def test_stats_match_files(self):
        for s in SPLITS:
            c = self.stats["classify"][s]
            self.assertEqual(c["count"], len(self.tickets[s]))
            self.assertEqual(sum(c["intents"].values()), len(self.tickets[s]))
            for tag in HARD_TAGS:
                self.assertEqual(c["tags"][tag], sum(tag in t["tags"] for t in self.tickets[s]))
            self.assertEqual(self.stats["rerank"][s]["pairs"], len(self.rerank[s]))
            self.assertEqual(self.stats["rerank"][s]["positives"], self.stats["rerank"][s]["queries"])

    def test_small_scale_keeps_every_slice(self):
        out = generate(os.path.join(ARGS.work, "scale0.1"), scale=0.1)
        for s, n in zip(SPLITS, [240, 30, 30]):
            rows = read_jsonl(os.path.join(out, f"tickets_{s}.jsonl"))
            self.assertEqual(len(rows), n)
            tags = {tag for t in rows for tag in t["tags"]}
            self.assertTrue(set(HARD_TAGS) <= tags, (s, tags))

    def test_bad_arguments_fail(self):
        r = subprocess.run(["/usr/bin/python3", ARGS.generator], capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--out", r.stderr)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--generator", required=True)
    ap.add_argument("--work", required=True)
    ARGS, rest = ap.parse_known_args()
    os.makedirs(ARGS.work, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
