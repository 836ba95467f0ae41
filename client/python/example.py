#!/usr/bin/env python3
"""Example: call every dserve RPC through the Python client.

    client/python/generate_stubs.sh            # once
    PYTHONPATH=client/python python3 client/python/example.py --target 127.0.0.1:5001 \
        --classify-model intent --answer-model qa --rerank-model rerank

A model flag left empty skips that call. --token-file and --tls-ca work like
dserve-client's.
"""
import argparse
import sys

from dserve_client import DserveClient, DserveError


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="localhost:5001")
    ap.add_argument("--token-file")
    ap.add_argument("--tls-ca")
    ap.add_argument("--classify-model", default="intent")
    ap.add_argument("--answer-model", default="qa")
    ap.add_argument("--rerank-model", default="rerank")
    args = ap.parse_args()

    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()

    with DserveClient(args.target, token=token, tls_ca=args.tls_ca, timeout=30) as client:
        try:
            print("health:", client.health())
            for m in client.list_models():
                print("model %-10s task=%-8s device=%s dtype=%s max_length=%d labels=%s"
                      % (m.name, m.task, m.device, m.dtype, m.max_length, ",".join(m.labels)))

            if args.classify_model:
                texts = ["please refund my order", "I forgot my password"]
                for text, labels in zip(texts, client.classify(args.classify_model, texts, top_k=3)):
                    print("classify %r: %s" % (text, ", ".join("%s %.3f" % (l.label, l.score) for l in labels)))

            if args.answer_model:
                contexts = ["The café opens at nine in the morning and closes at six."]
                result = client.answer(args.answer_model, "When does the café open?", contexts, top_k=2)
                for a in result.answers:
                    print("answer %r score %.3f (context %d, chars %d-%d)"
                          % (a.text, a.score, a.context_index, a.start_char, a.end_char))
                print("no_answer:", result.no_answer, "(null score %.3f)" % result.no_answer_score)

            if args.rerank_model:
                docs = ["Refunds are issued within five days.", "Our office is in Berlin."]
                for r in client.rerank(args.rerank_model, "how do I get my money back?", docs,
                                       return_documents=True):
                    print("rerank [%d] %.3f %s" % (r.index, r.score, r.document))
        except DserveError as e:
            print("error: %s: %s (request id %s)" % (e.code.name, e.message, e.request_id), file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
