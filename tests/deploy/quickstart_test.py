#!/usr/bin/python3
"""The quickstart as a newcomer meets it (issue 25): deploy/quickstart.sh
(its install and build steps skipped: this tree is built) serves the
committed demo models with the HTTP door on, and prints the try-it page URL,
the metrics URL and one call per task. This test runs every printed `curl`
and `dserve-client` line as it is printed (through bash, as a user pasting
it would) and checks the answers against deploy/demo/examples.json: the
ticket's intent, the answer span and its character offsets in the context,
and that the reranker scores every passage and puts the relevant one first.
It also checks that the page and metrics
URLs answer, that the page carries the examples, that the examples are
texts of the demo data's test split, and that SIGTERM drains and stops the
quickstart with exit code 0.

Environment (tests/deploy/CMakeLists.txt): DSERVE_BIN, DSERVE_CLIENT_BIN,
DSERVE_SOURCE_DIR.
"""
import html
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SOURCE = os.environ.get("DSERVE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def demo_test_texts(work):
    """Every text of the demo data's test split (tickets, QA, rerank)."""
    data = os.path.join(work, "data")
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "deploy", "demo", "generate_demo_data.py"),
                    "--out", data, "--seed", "13"], check=True, stdout=subprocess.DEVNULL)
    texts = set()
    with open(os.path.join(data, "tickets_test.jsonl"), encoding="utf-8") as f:
        texts.update(json.loads(line)["text"] for line in f)
    with open(os.path.join(data, "qa_test.json"), encoding="utf-8") as f:
        for art in json.load(f)["data"]:
            for p in art["paragraphs"]:
                texts.add(p["context"])
                texts.update(q["question"] for q in p["qas"])
    with open(os.path.join(data, "rerank_test.jsonl"), encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            texts.update([row["query"], row["passage"]])
    return texts


def main():
    with open(os.path.join(SOURCE, "deploy", "demo", "examples.json"), encoding="utf-8") as f:
        ex = json.load(f)
    failures = []
    work = tempfile.mkdtemp(prefix="dserve-quickstart-")
    texts = demo_test_texts(work)
    shown = [ex["classify"]["text"], ex["answer"]["question"], ex["answer"]["context"], ex["rerank"]["query"]]
    shown += ex["rerank"]["documents"]
    for t in shown:
        if t not in texts:
            failures.append("examples.json: %r is not a text of the demo test split" % t[:60])

    grpc, http, metrics = ("127.0.0.1:%d" % free_port() for _ in range(3))
    env = dict(os.environ, DSERVE_QUICKSTART_SKIP_SETUP="1", DSERVE_LISTEN=grpc, DSERVE_HTTP_LISTEN=http,
               DSERVE_METRICS=metrics, DSERVE_BIN_DIR=os.path.dirname(os.environ["DSERVE_BIN"]))
    log = open(os.path.join(work, "quickstart.log"), "w+")
    proc = subprocess.Popen(["bash", os.path.join(SOURCE, "deploy", "quickstart.sh")], cwd=SOURCE, env=env,
                            stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    lines = []
    try:
        start = time.time()
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("grpcurl "):
                break  # the last printed call
        print("quickstart printed its calls %.1f s after start:" % (time.time() - start))
        print("\n".join(lines))
        failures += check_output(lines, ex, grpc, http, metrics)
    finally:
        proc.send_signal(signal.SIGTERM)  # bash forwards it to the server, which drains
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = "hung"
        if rc != 0:
            log.seek(0)
            failures.append("quickstart exited %s after SIGTERM (want 0); its log:\n%s" % (rc, log.read()[-3000:]))
    for f in failures:
        print("FAIL: " + f)
    return 1 if failures else 0


def run_json(line):
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("%s\nexit %d: %s" % (line, out.returncode, out.stderr))
    return json.loads(out.stdout)


def check_output(lines, ex, grpc, http, metrics):
    failures = []
    need = ["http://%s/" % http, "http://%s/metrics" % metrics]
    for url in need:
        if not any(url in l for l in lines):
            failures.append("the quickstart did not print %s" % url)
    curls = [l for l in lines if l.startswith("curl ")]
    clients = [l for l in lines if re.match(r"\S*dserve-client ", l)]
    grpcurls = [l for l in lines if l.startswith("grpcurl ")]
    if len(curls) != 3 or len(clients) != 3 or len(grpcurls) != 1:
        return failures + ["want 3 curl, 3 dserve-client and 1 grpcurl lines, got %d, %d, %d" % (
            len(curls), len(clients), len(grpcurls))]
    # The page and the metrics answer; the page carries the examples.
    page = urllib.request.urlopen("http://%s/" % http, timeout=10).read().decode("utf-8")
    for t in (ex["classify"]["text"], ex["answer"]["question"], ex["rerank"]["query"]):
        if t not in page and html.escape(t, quote=True) not in page:
            failures.append("the try-it page does not carry the example %r" % t[:50])

    by_path = {re.search(r"http://[^/ ]+(/\S*)", l).group(1): l for l in curls}
    c, a, r = ex["classify"], ex["answer"], ex["rerank"]
    got = run_json(by_path["/v1/classify"])["results"][0]["labels"][0]["label"]
    print("curl classify -> %s" % got)
    if got != c["label"]:
        failures.append("curl classify: top label %s, want %s" % (got, c["label"]))
    got = run_json(by_path["/v1/answer"])
    best = got[0] if isinstance(got, list) else got
    print("curl answer -> %r [%d, %d) score %.3f" % (best["answer"], best["start"], best["end"], best["score"]))
    if best["answer"] != a["answer"] or a["context"][best["start"]:best["end"]] != a["answer"]:
        failures.append("curl answer: %r at [%d, %d), want %r, the context's slice there" % (
            best["answer"], best["start"], best["end"], a["answer"]))
    # Every document once, scores in (0, 1), the relevant one first.
    got = run_json(by_path["/v1/rerank"])["results"]
    print("curl rerank -> %s (relevant: %d)" % ([(x["index"], round(x["relevance_score"], 3)) for x in got],
                                                r["relevant"]))
    if sorted(x["index"] for x in got) != list(range(len(r["documents"]))) or \
            not all(0.0 < x["relevance_score"] < 1.0 for x in got) or got[0]["index"] != r["relevant"]:
        failures.append("curl rerank: %s, want document %d first" % (got, r["relevant"]))

    # The dserve-client lines, with --json added after the binary for parsing
    # (the printed line itself is what a user runs; its text output is checked too).
    for line in clients:
        task = shlex.split(line)[3]
        text = subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)
        if text.returncode != 0:
            failures.append("%s\nexit %d: %s" % (line, text.returncode, text.stderr))
            continue
        binary, rest = line.split(" ", 1)
        got = run_json("%s --json %s" % (binary, rest))
        if task == "classify":
            ok = got["results"][0]["labels"][0]["label"] == c["label"] and c["label"] in text.stdout
        elif task == "answer":
            ok = got["answers"][0]["text"] == a["answer"] and a["answer"] in text.stdout
        else:
            ok = sorted(x.get("index", 0) for x in got["results"]) == list(range(len(r["documents"]))) and \
                got["results"][0].get("index", 0) == r["relevant"]
        print("dserve-client %s -> %s" % (task, "as expected" if ok else text.stdout.strip()[:200]))
        if not ok:
            failures.append("dserve-client %s: %s" % (task, text.stdout.strip()[:300]))
    # The calls above show on the printed metrics URL.
    scraped = urllib.request.urlopen("http://%s/metrics" % metrics, timeout=10).read().decode()
    if not re.search(r'dserve_requests_total\{[^}]*model="answer"', scraped):
        failures.append("the metrics URL does not count the answer calls in dserve_requests_total")
    return failures


if __name__ == "__main__":
    sys.exit(main())
