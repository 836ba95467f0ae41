#!/usr/bin/python3
"""Independent oracle for dserve's extractive-QA decode (DecodeAnswer).

Re-implements Hugging Face `postprocess_qa_predictions` (examples/pytorch/
question-answering/utils_qa.py, version_2_with_negative=True) for ONE example
whose features (windows) may come from several contexts, following
shared/REFERENCE-deberta.md section 10. Like HF it works in Python str
character (= code point) offsets and numpy float32 logits; the cases it writes
give the C++ side UTF-8 *byte* offsets, so the byte -> code point conversion is
checked too.

Additions that are dserve's, implemented here from their specification:
  * max_answer_chars: a span longer than this many code points is dropped
    with the other invalid pairs (0 = no limit);
  * answers: the non-null spans with non-empty text of the n-best list, in
    order, deduplicated by (context_index, start_char, end_char), first top_k
    (0 means 1).
Where HF's behaviour is undefined (it inserts a placeholder "empty"
prediction, or raises IndexError because no span with text is in the n-best
list) the case is marked hf_defined=false; dserve then reports no_answer with
the probabilities of the real list.

Usage: qa_oracle.py OUT.json [--cases N] [--seed S]
"""
import argparse
import json
import random

import numpy as np

CHAR_POOL = (list("abcdefghijklmnopqrstuvwxyz") + [" "] * 6 + list(".,?!") +
             list("éüñçàßΩ") + ["e\u0301"] +  # combining accent: 2 code points
             list("中文字日本語") + ["😀", "🎉", "👍"])


def hf_postprocess(contexts, features, n_best_size, max_answer_length,
                   max_answer_chars, null_score_diff_threshold, top_k):
    """HF postprocess_qa_predictions for one example. Offsets are char offsets."""
    min_null_prediction = None
    prelim_predictions = []
    for feature in features:
        start_logits = feature["start_logits"]  # np.float32 arrays
        end_logits = feature["end_logits"]
        offset_mapping = feature["offset_mapping"]
        ci = feature["context_index"]

        feature_null_score = start_logits[0] + end_logits[0]
        if min_null_prediction is None or min_null_prediction["score"] > feature_null_score:
            min_null_prediction = {
                "offsets": (0, 0), "score": feature_null_score, "context_index": -1,
                "start_logit": start_logits[0], "end_logit": end_logits[0],
            }

        start_indexes = np.argsort(start_logits)[-1: -n_best_size - 1: -1].tolist()
        end_indexes = np.argsort(end_logits)[-1: -n_best_size - 1: -1].tolist()
        for start_index in start_indexes:
            for end_index in end_indexes:
                if (start_index >= len(offset_mapping) or end_index >= len(offset_mapping)
                        or offset_mapping[start_index] is None
                        or len(offset_mapping[start_index]) < 2
                        or offset_mapping[end_index] is None
                        or len(offset_mapping[end_index]) < 2):
                    continue
                if end_index < start_index or end_index - start_index + 1 > max_answer_length:
                    continue
                offsets = (offset_mapping[start_index][0], offset_mapping[end_index][1])
                if max_answer_chars > 0 and offsets[1] - offsets[0] > max_answer_chars:
                    continue  # dserve's addition
                prelim_predictions.append({
                    "offsets": offsets,
                    "score": start_logits[start_index] + end_logits[end_index],
                    "start_logit": start_logits[start_index],
                    "end_logit": end_logits[end_index],
                    "context_index": ci,
                })
    prelim_predictions.append(min_null_prediction)
    null_score = min_null_prediction["score"]

    predictions = sorted(prelim_predictions, key=lambda x: x["score"], reverse=True)[:n_best_size]
    if not any(p["offsets"] == (0, 0) for p in predictions):
        predictions.append(min_null_prediction)
    for pred in predictions:
        offsets = pred["offsets"]
        ctx = contexts[pred["context_index"]] if pred["context_index"] >= 0 else ""
        pred["text"] = ctx[offsets[0]: offsets[1]]
        pred["is_null"] = pred is min_null_prediction

    # The real n-best list with its probabilities (HF's, when HF is defined).
    real_probs = softmax32([p["score"] for p in predictions])

    hf_defined = True
    hf = list(predictions)
    if len(hf) == 0 or (len(hf) == 1 and hf[0]["text"] == ""):
        hf_defined = False  # HF would insert {"text": "empty", "score": 0.0}
    best = None
    if hf_defined:
        i = 0
        while i < len(hf) and hf[i]["text"] == "":
            i += 1
        if i == len(hf):
            hf_defined = False  # HF raises IndexError
        else:
            best = hf[i]

    if hf_defined:
        score_diff = null_score - best["start_logit"] - best["end_logit"]  # float32 ops
        no_answer = bool(score_diff > null_score_diff_threshold)
        prediction_text = "" if no_answer else best["text"]
        diff_out = float(score_diff)
        best_text = best["text"]
    else:
        no_answer, prediction_text, diff_out, best_text = True, "", None, ""

    n_best = []
    for p, prob in zip(predictions, real_probs):
        n_best.append({
            "is_null": p["is_null"],
            "context_index": max(p["context_index"], 0),
            "start_char": p["offsets"][0], "end_char": p["offsets"][1],
            "text": p["text"],
            "logit_score": float(p["score"]), "probability": float(prob),
        })
    answers = []
    seen = set()
    for entry in n_best:
        if len(answers) >= max(top_k, 1):
            break
        if entry["is_null"] or entry["text"] == "":
            continue
        # dserve trims the whitespace a "\u2581word" piece carries (ASCII set).
        text = entry["text"]
        lead = len(text) - len(text.lstrip(" \t\n\r\f\v"))
        trimmed = text.strip(" \t\n\r\f\v")
        if trimmed == "":
            continue
        entry = dict(entry, text=trimmed, start_char=entry["start_char"] + lead,
                     end_char=entry["start_char"] + lead + len(trimmed))
        key = (entry["context_index"], entry["start_char"], entry["end_char"])
        if key in seen:
            continue
        seen.add(key)
        answers.append(entry)
    null_prob = [e["probability"] for e in n_best if e["is_null"]]
    assert len(null_prob) == 1
    return {
        "hf_defined": hf_defined,
        "prediction_text": prediction_text,  # HF's final answer ("" = no answer)
        "best_non_null_text": best_text,
        "no_answer": no_answer,
        "null_score": float(null_score),
        "null_score_diff": diff_out,
        "no_answer_score": null_prob[0],
        "n_best": n_best,
        "answers": answers,
    }


def softmax32(scores):
    scores = np.array(scores, dtype=np.float32)
    exp_scores = np.exp(scores - np.max(scores))
    return exp_scores / exp_scores.sum()


def random_context(rng):
    n = rng.randint(5, 40)
    return "".join(rng.choice(CHAR_POOL) for _ in range(n))


def tokenize(rng, context):
    """Random contiguous pieces of 1-4 chars; a few empty pieces (never at 0)."""
    spans = []
    c = 0
    while c < len(context):
        if c > 0 and rng.random() < 0.05:
            spans.append((c, c))
        n = rng.randint(1, 4)
        spans.append((c, min(c + n, len(context))))
        c += n
    return spans


def windows_for(rng, context_spans, capacity, overlap):
    """Token ranges [a, b) of the context covered by each window."""
    out = []
    a = 0
    while True:
        b = min(a + capacity, len(context_spans))
        out.append((a, b))
        if b == len(context_spans):
            return out
        a = b - overlap


def byte_offset(text, char_offset):
    return len(text[:char_offset].encode("utf-8"))


def make_case(rng, nrng, case_id, all_none=False, null_boost=None, n_best=None):
    contexts = [random_context(rng) for _ in range(rng.choice([1, 1, 2, 3]))]
    q_len = rng.randint(1, 5)
    features = []
    for ci, ctx in enumerate(contexts):
        spans = tokenize(rng, ctx)
        # Overlapping windows see similar logits for the same context token
        # (as a real model gives), so the same span can win in two windows.
        base_start = nrng.standard_normal(len(spans)) * 3
        base_end = nrng.standard_normal(len(spans)) * 3
        capacity = rng.randint(3, 12)
        overlap = rng.randint(0, capacity - 1)
        for a, b in windows_for(rng, spans, capacity, overlap):
            offsets = [None] * (q_len + 2)  # [CLS] question [SEP]
            for s in spans[a:b]:
                none = all_none or rng.random() < 0.07
                offsets.append(None if none else s)
            offsets.append(None)  # [SEP]
            n = len(offsets)
            # Question and special tokens usually score low, as in a trained model.
            penalty = rng.choice([0, 4, 4, 4])
            start = nrng.standard_normal(n) * 3 - penalty
            end = nrng.standard_normal(n) * 3 - penalty
            start[q_len + 2:n - 1] = base_start[a:b] + nrng.standard_normal(b - a) * 0.5
            end[q_len + 2:n - 1] = base_end[a:b] + nrng.standard_normal(b - a) * 0.5
            boost = null_boost if null_boost is not None else rng.choice([0, 3, 6])
            start[0] = nrng.standard_normal() * 3 + boost
            end[0] = nrng.standard_normal() * 3 + boost
            features.append({"context_index": ci, "offset_mapping": offsets,
                             "start_logits": start.astype(np.float32),
                             "end_logits": end.astype(np.float32)})
    options = {
        "n_best": n_best if n_best is not None else rng.choice([20, 20, 20, 20, 20, 1, 2, 3, 5, 10]),
        "max_answer_tokens": rng.choice([30, 30, 1, 2, 3, 5]),
        "max_answer_chars": rng.choice([0, 0, 0, 2, 4, 8]),
        "null_score_diff_threshold": float(np.float32(
            rng.choice([0.0, 0.0, round(rng.uniform(-6, 6), 3)]))),
        "top_k": rng.randint(0, 5),
    }
    expected = hf_postprocess(contexts, features, options["n_best"], options["max_answer_tokens"],
                              options["max_answer_chars"], options["null_score_diff_threshold"],
                              options["top_k"])
    windows = []
    for f in features:
        ctx = contexts[f["context_index"]]
        windows.append({
            "context_index": f["context_index"],
            "start_logits": [float(x) for x in f["start_logits"]],
            "end_logits": [float(x) for x in f["end_logits"]],
            "offsets": [None if o is None else [byte_offset(ctx, o[0]), byte_offset(ctx, o[1])]
                        for o in f["offset_mapping"]],
        })
    return {"id": case_id, "contexts": contexts, "windows": windows, "options": options,
            "expected": expected}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=20240607)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nrng = np.random.default_rng(args.seed)
    cases = [make_case(rng, nrng, i) for i in range(args.cases)]
    # Targeted corners: no valid offsets at all (HF placeholder), n_best = 1
    # with a dominant null (HF placeholder), and a weak null.
    cases.append(make_case(rng, nrng, len(cases), all_none=True))
    cases.append(make_case(rng, nrng, len(cases), null_boost=50, n_best=1))
    cases.append(make_case(rng, nrng, len(cases), null_boost=-50))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
