#!/usr/bin/python3
"""HTTP/JSON vs gRPC on the same server and model (issue 17, "Done means" 5).

One `dserve serve --http-listen` with one classify model; 64 closed-loop
clients (keep-alive connections) send one text per call, the same texts
through both doors:
  gRPC: `dserve-client load --concurrency 64` (ClassifyRequest)
  HTTP: `wrk -c64 -t2` POST /v1/classify (the same request in proto3 JSON),
        texts cycled by a generated Lua script.
Runs alternate (HTTP, gRPC, HTTP, gRPC, ...) so drift hits both; the report
gives every run, the medians of calls/s and p99, and HTTP/gRPC (target
calls/s ratio >= 0.8). The load generators run on the same machine as the
server, so on a small machine their CPU is part of what is measured (wrk is
lighter than the gRPC client; noted beside the result).

usage: bench/serve/http_vs_grpc.py [--build-dir DIR] [--shared-dir DIR] [--model-dir DIR]
                                   [--repeats N] [--duration-s S] [--warmup-s S] [--clients N]
                                   [--server-args "FLAGS"] [--json FILE]
"""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    p.add_argument("--shared-dir", default=os.path.join(os.path.dirname(REPO), "shared"))
    p.add_argument("--model-dir", help="a classify checkpoint (default: the tiny test model)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--duration-s", type=float, default=10)
    p.add_argument("--warmup-s", type=float, default=2)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--server-args", default="")
    p.add_argument("--json")
    return p.parse_args()


WORDS = ("the a customer order refund billing password reset shipping parcel late account charge card invoice "
         "delivery address change cancel subscription please help my was not has been could you why when where how "
         "what today yesterday week month double charged wrong item broken missing login email phone").split()


def make_texts(n=256, seed=1234):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) for _ in range(n)]


def start_server(dserve, model_dir, extra, work):
    out_path = os.path.join(work, "server.out")
    cmd = [dserve, "serve", "--model", "classify=" + model_dir, "--listen", "127.0.0.1:0", "--metrics-listen",
           "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--http-threads", "128"] + extra
    out = open(out_path, "w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=open(os.path.join(work, "server.log"), "w"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = open(out_path).read()
        grpc_port = re.search(r"dserve: listening on port (\d+)", text)
        http_port = re.search(r"dserve: http on port (\d+)", text)
        if grpc_port and http_port:
            return proc, int(grpc_port.group(1)), int(http_port.group(1))
        if proc.poll() is not None:
            sys.exit("server exited: " + open(os.path.join(work, "server.log")).read()[-3000:])
        time.sleep(0.1)
    proc.kill()
    sys.exit("server did not start")


def grpc_run(client, port, inputs, args, duration):
    out = subprocess.run([client, "--target", "127.0.0.1:%d" % port, "--json", "load", "--model", "classify",
                          "--task", "classify", "--input", inputs, "--concurrency", str(args.clients),
                          "--duration-s", str(duration), "--warmup-s", str(args.warmup_s), "--channels", "4"],
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    return {"calls_per_s": r["throughput_rps"], "p50_ms": r["latency_ms"]["p50"],
            "p99_ms": r["latency_ms"]["p99"], "raw": {k: r[k] for k in r if k != "latency_ms"}}


LUA = r"""
local bodies = {%s}
local n = 0
request = function()
  n = n + 1
  return wrk.format("POST", "/v1/classify", {["Content-Type"] = "application/json"}, bodies[(n %% #bodies) + 1])
end
local non200 = 0
response = function(status, headers, body) if status ~= 200 then non200 = non200 + 1 end end
done = function(summary, latency, requests)
  io.write(string.format("WRK_JSON {\"requests\": %%d, \"duration_us\": %%d, \"p50_us\": %%d, \"p99_us\": %%d, " ..
    "\"errors\": %%d, \"non200\": %%d}\n", summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout, non200))
end
"""


def http_run(wrk, port, lua, args, duration):
    # wrk has no warm-up: a short uncounted run first.
    if args.warmup_s > 0:
        subprocess.run([wrk, "-c%d" % args.clients, "-t2", "-d%ds" % max(1, round(args.warmup_s)), "-s", lua,
                        "http://127.0.0.1:%d" % port], capture_output=True, check=True)
    out = subprocess.run([wrk, "-c%d" % args.clients, "-t2", "-d%ds" % max(1, round(duration)), "--latency",
                          "-s", lua, "http://127.0.0.1:%d" % port], capture_output=True, text=True, check=True)
    m = re.search(r"WRK_JSON (\{.*\})", out.stdout)
    if not m:
        sys.exit("wrk output without a summary:\n" + out.stdout + out.stderr)
    r = json.loads(m.group(1))
    # Non-200 responses and socket errors count against HTTP: they are not calls served.
    ok = r["requests"] - r["non200"]
    return {"calls_per_s": ok / (r["duration_us"] / 1e6), "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
            "raw": r}


def main():
    args = parse_args()
    dserve = os.path.join(args.build_dir, "bin", "dserve")
    client = os.path.join(args.build_dir, "bin", "dserve-client")
    wrk = shutil.which("wrk")
    for need, path in (("dserve", dserve), ("dserve-client", client), ("wrk (apt-get install wrk)", wrk)):
        if not path or not os.path.exists(path):
            sys.exit("http_vs_grpc.py: missing %s" % need)
    work = tempfile.mkdtemp(prefix="dserve_http_vs_grpc.")
    try:
        model_dir, kind = args.model_dir, "custom checkpoint"
        if not model_dir:
            subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tests", "data", "make_test_models.py"),
                            args.shared_dir, os.path.join(work, "models")], check=True, capture_output=True)
            model_dir, kind = os.path.join(work, "models", "classify"), "tiny test checkpoint (make_test_models.py)"
        texts = make_texts()
        inputs = os.path.join(work, "texts.jsonl")
        with open(inputs, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        lua = os.path.join(work, "classify.lua")
        bodies = ",".join(json.dumps(json.dumps({"model": "classify", "texts": [t]})) for t in texts)
        with open(lua, "w") as f:
            f.write(LUA % bodies)
        proc, grpc_port, http_port = start_server(dserve, model_dir, shlex.split(args.server_args), work)
        runs = {"http": [], "grpc": []}
        try:
            for r in range(args.repeats):
                h = http_run(wrk, http_port, lua, args, args.duration_s)
                g = grpc_run(client, grpc_port, inputs, args, args.duration_s)
                runs["http"].append(h)
                runs["grpc"].append(g)
                print("repeat %d: HTTP %.1f calls/s (p50 %.2f ms, p99 %.2f ms) | gRPC %.1f calls/s (p50 %.2f ms, "
                      "p99 %.2f ms)" % (r + 1, h["calls_per_s"], h["p50_ms"], h["p99_ms"], g["calls_per_s"],
                                        g["p50_ms"], g["p99_ms"]), flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
        med = {door: {k: statistics.median(x[k] for x in runs[door]) for k in ("calls_per_s", "p50_ms", "p99_ms")}
               for door in runs}
        ratio = med["http"]["calls_per_s"] / med["grpc"]["calls_per_s"]
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        report = {"model": kind, "clients": args.clients, "duration_s": args.duration_s, "repeats": args.repeats,
                  "server_args": args.server_args, "nproc": os.cpu_count(), "cpu": cpu, "runs": runs, "median": med,
                  "http_over_grpc_calls_per_s": ratio}
        print("machine: %d CPUs, %s; model: %s; %d clients, %.0f s windows" % (
            os.cpu_count(), cpu, kind, args.clients, args.duration_s))
        print("median: HTTP %.1f calls/s, p99 %.2f ms | gRPC %.1f calls/s, p99 %.2f ms | HTTP/gRPC %.2f (target >= 0.8)"
              % (med["http"]["calls_per_s"], med["http"]["p99_ms"], med["grpc"]["calls_per_s"], med["grpc"]["p99_ms"],
                 ratio))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
