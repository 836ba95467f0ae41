#!/usr/bin/python3
"""Prints what a newcomer can try against the quickstart's server: the
try-it page and metrics URLs, then one curl, one dserve-client and one
grpcurl call per task, built from deploy/demo/examples.json (texts from the
demo data's test split). Every call is one line, so it can be copied, and
tests/deploy/quickstart_test.py runs the curl and dserve-client lines
against the server and checks the answers.

    print_calls.py --examples FILE --grpc HOST:PORT --http HOST:PORT [--metrics HOST:PORT]
"""
import argparse
import json
import shlex
import sys


def calls(ex, grpc, http, client="build/bin/dserve-client"):
    c, a, r = ex["classify"], ex["answer"], ex["rerank"]
    q = shlex.quote
    post = "curl -s http://%s%%s -H 'content-type: application/json' -d %%s" % http
    body = lambda obj: q(json.dumps(obj, ensure_ascii=False))  # noqa: E731
    out = [
        ("classify", "curl", post % ("/v1/classify", body({"model": c["model"], "texts": [c["text"]], "top_k": 3}))),
        ("answer", "curl", post % ("/v1/answer", body({"model": a["model"], "inputs": {
            "question": a["question"], "context": a["context"]}, "parameters": {"handle_impossible_answer": True}}))),
        ("rerank", "curl", post % ("/v1/rerank", body({"model": r["model"], "query": r["query"],
                                                      "documents": r["documents"], "top_n": 3}))),
        ("classify", "dserve-client", "%s --target %s classify --model %s --top-k 3 %s" % (
            client, grpc, c["model"], q(c["text"]))),
        ("answer", "dserve-client", "%s --target %s answer --model %s --question %s --context %s" % (
            client, grpc, a["model"], q(a["question"]), q(a["context"]))),
        ("rerank", "dserve-client", "%s --target %s rerank --model %s --query %s %s" % (
            client, grpc, r["model"], q(r["query"]), " ".join(q(d) for d in r["documents"]))),
        ("classify", "grpcurl", "grpcurl -plaintext -d %s %s dserve.v1.Inference/Classify" % (
            body({"model": c["model"], "texts": [c["text"]]}), grpc)),
    ]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", required=True)
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--metrics", default="")
    ap.add_argument("--client", default="build/bin/dserve-client")
    args = ap.parse_args()
    with open(args.examples, encoding="utf-8") as f:
        ex = json.load(f)
    print("== dserve: serving classify, answer and rerank (gRPC %s, HTTP %s)" % (args.grpc, args.http))
    print("   try-it page: http://%s/" % args.http)
    if args.metrics:
        print("   metrics:     http://%s/metrics" % args.metrics)
    print("   API docs:    docs/api.md; every flag: docs/serving.md; Ctrl-C drains and stops")
    print("   note: the demo models are 4-layer toys trained on the generated demo data "
          "(deploy/demo/README.md); serve your own with --model NAME=DIR")
    tool = None
    for task, kind, line in calls(ex, args.grpc, args.http, args.client):
        if kind != tool:
            tool = kind
            print("-- %s (%s):" % (kind, {"curl": "HTTP/JSON", "dserve-client": "gRPC, our CLI",
                                          "grpcurl": "gRPC, server reflection"}[kind]))
        print(line)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
