#!/usr/bin/env python3
"""Example: the HTTP/JSON API of `dserve serve --http-listen` with plain
python3-requests (no stubs, no gRPC). docs/api.md ("HTTP/JSON API") lists
every route; GET /openapi.json is the machine-readable contract.

    python3 client/python/http_example.py --url http://127.0.0.1:8080 \
        --classify-model intent --answer-model qa --rerank-model rerank

A model flag left empty skips that call. --token-file sends the bearer
token; --tls-ca verifies an https:// URL against that CA.
"""
import argparse
import sys

import requests


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://localhost:8080")
    ap.add_argument("--token-file")
    ap.add_argument("--tls-ca")
    ap.add_argument("--timeout-ms", type=int, default=30000, help="deadline of each call (request-timeout header)")
    ap.add_argument("--classify-model", default="intent")
    ap.add_argument("--answer-model", default="qa")
    ap.add_argument("--rerank-model", default="rerank")
    args = ap.parse_args()

    http = requests.Session()
    http.headers["request-timeout"] = str(args.timeout_ms)
    if args.token_file:
        with open(args.token_file) as f:
            http.headers["authorization"] = "Bearer " + f.readline().strip()
    if args.tls_ca:
        http.verify = args.tls_ca
    url = args.url.rstrip("/")

    def post(path, body):
        r = http.post(url + path, json=body, timeout=args.timeout_ms / 1000 + 5)
        if r.status_code != 200:
            # Every error is {"error": message, "error_type": kind}; 429 and 503 carry Retry-After.
            err = r.json()
            raise RuntimeError("%s -> HTTP %d %s: %s" % (path, r.status_code, err["error_type"], err["error"]))
        return r.json()

    try:
        print("health:", http.get(url + "/health", timeout=10).json())
        for m in http.get(url + "/v1/models", timeout=10).json()["models"]:
            print("model %-10s task=%-8s version=%s labels=%s" % (m["name"], m["task"], m["version"],
                                                                   ",".join(m["labels"])))
        if args.classify_model:
            # The gRPC ClassifyRequest in proto3 JSON.
            out = post("/v1/classify", {"model": args.classify_model, "texts": ["please refund my order"], "top_k": 2})
            for label in out["results"][0]["labels"]:
                print("classify: %-16s %.4f" % (label["label"], label["score"]))
            # The same through the TEI-compatible route (?model= picks the model).
            tei = http.post(url + "/predict", params={"model": args.classify_model},
                            json={"inputs": "please refund my order"}, timeout=30).json()
            print("TEI /predict best:", tei[0])
        if args.answer_model:
            # Hugging Face's question-answering shape.
            a = post("/v1/answer", {"model": args.answer_model,
                                    "inputs": {"question": "How long does shipping take?",
                                               "context": "Orders ship within two days. Shipping takes three to "
                                                          "five business days."},
                                    "parameters": {"handle_impossible_answer": True}})
            print("answer: %r (score %.4f, chars %d..%d, no-answer score %.4f)" % (
                a["answer"], a["score"], a["start"], a["end"], a["no_answer_score"]))
        if args.rerank_model:
            # Cohere's /v1/rerank shape.
            out = post("/v1/rerank", {"model": args.rerank_model, "query": "reset my password",
                                      "documents": ["Open Settings, then Security, to reset your password.",
                                                    "Refunds are paid within five days."],
                                      "top_n": 2, "return_documents": True})
            for r in out["results"]:
                print("rerank: %.4f %s" % (r["relevance_score"], r["document"]["text"]))
    except (requests.RequestException, RuntimeError) as e:
        print("error:", e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
