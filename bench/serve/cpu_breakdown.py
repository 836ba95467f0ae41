#!/usr/bin/env python3
"""Where a loaded server's CPU goes: CPU seconds per served item, by thread
group, for `dserve serve` under `dserve-client load`, plus the load client's.

    /usr/bin/python3 bench/serve/cpu_breakdown.py --model-dir DIR --input TEXTS.jsonl \\
        [--server-args "--max-batch-size 1"] [--concurrency 32] [--duration-s 10] [--build-dir build]

The server's threads are grouped by name (/proc/PID/task/TID/comm): `dsw-*`
are the batch workers (forward passes), `nexting_thread` gRPC's callback
threads (our RPC handlers run there: parsing, validation, tokenizing,
decoding), other gRPC threads, and the unnamed ones that carry the
process's name: OpenMP's intra-op threads and the main thread. The figures are utime+stime deltas
over the load window, divided by the items the server counted in
`dserve_batch_size_sum`: the profile that says whether a row of
`bench/run_all.sh` is bound by the forward, the RPC layer or the client.
"""
import argparse
import collections
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """{tid: (comm, cpu seconds)} of every thread of `pid`."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        out[tid] = (comm, (int(fields[11]) + int(fields[12])) / TICK)
    return out


def group(comm, process_comm):
    if comm.startswith("dsw-"):
        return "workers (dsw-*: forward passes)"
    if comm == process_comm:  # "exe" after the OMP_WAIT_POLICY re-exec through /proc/self/exe
        return "unnamed threads (OpenMP intra-op, main)"
    if comm == "nexting_thread":
        return "gRPC callback threads (nexting_thread: RPC handlers, tokenizing)"
    if comm.startswith(("grpc", "default-execu", "resolver-exec", "timer_manager", "global-executo")):
        return "gRPC threads"
    return "other: " + re.sub(r"\d+$", "N", comm)


def items_served(mport):
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=30).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(r"^dserve_batch_size_sum\{[^}]*\} (\S+)$", text, re.M))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    ap.add_argument("--model-dir", required=True, help="classify checkpoint")
    ap.add_argument("--input", required=True, help="JSONL texts for dserve-client load")
    ap.add_argument("--server-args", default="", help="extra dserve serve flags")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--duration-s", type=float, default=10)
    ap.add_argument("--warmup-s", type=float, default=2)
    a = ap.parse_args()
    bindir = os.path.join(os.path.abspath(a.build_dir), "bin")
    log = tempfile.NamedTemporaryFile("w+", prefix="cpu_breakdown.", suffix=".log", delete=False)
    out = tempfile.NamedTemporaryFile("w+", prefix="cpu_breakdown.", suffix=".out", delete=False)
    server = subprocess.Popen([os.path.join(bindir, "dserve"), "serve", "--model", f"classify={a.model_dir}",
                               "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                               *shlex.split(a.server_args)], stdout=out, stderr=log)
    try:
        port = mport = None
        deadline = time.time() + 180
        while time.time() < deadline and port is None:
            text = open(out.name).read()
            p = re.search(r"^dserve: listening on port (\d+)$", text, re.M)
            mp = re.search(r"^dserve: metrics on port (\d+)$", text, re.M)
            if p and mp:
                port, mport = int(p.group(1)), int(mp.group(1))
            elif server.poll() is not None:
                sys.exit(f"cpu_breakdown: the server exited {server.returncode}: {open(log.name).read()[-600:]}")
            else:
                time.sleep(0.1)
        if port is None:
            sys.exit("cpu_breakdown: the server did not report its ports within 180 s")
        load = [os.path.join(bindir, "dserve-client"), "--target", f"127.0.0.1:{port}", "--json", "load",
                "--model", "classify", "--task", "classify", "--input", a.input, "--concurrency",
                str(a.concurrency), "--channels", "4"]
        # Warm-up, then the measured window: server threads and items before/after, client CPU from its rusage.
        subprocess.run(load + ["--duration-s", str(a.warmup_s)], capture_output=True, check=True)
        before, items0 = thread_cpu(server.pid), items_served(mport)
        usage0 = os.times()
        r = subprocess.run(load + ["--duration-s", str(a.duration_s)], capture_output=True, text=True, check=True)
        usage1 = os.times()
        after, items1 = thread_cpu(server.pid), items_served(mport)
        client_cpu = (usage1.children_user - usage0.children_user) + (usage1.children_system - usage0.children_system)
        items = items1 - items0
        if items <= 0:
            sys.exit("cpu_breakdown: the server counted no items in the window")
        groups = collections.Counter()
        with open(f"/proc/{server.pid}/comm") as f:
            process_comm = f.read().strip()
        for tid, (comm, cpu) in after.items():
            groups[group(comm, process_comm)] += cpu - before.get(tid, (comm, 0.0))[1]
        result = json.loads(r.stdout.strip().splitlines()[-1])
        total = sum(groups.values()) + client_cpu
        print(f"server flags: {a.server_args or '(defaults)'}; {a.concurrency} clients, {a.duration_s:.0f} s: "
              f"{items:.0f} items, {result.get('items_per_s', items / a.duration_s):.1f} items/s; "
              f"{os.cpu_count()} cores")
        print(f"{'thread group':45s} {'CPU s':>8s} {'ms/item':>9s} {'share':>7s}")
        for name, cpu in [g for g in groups.most_common() if g[1] > 0] + [("load client (dserve-client)", client_cpu)]:
            print(f"{name:45s} {cpu:8.2f} {1e3 * cpu / items:9.3f} {100 * cpu / total:6.1f}%")
        print(f"{'total':45s} {total:8.2f} {1e3 * total / items:9.3f}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        for f in (log, out):
            os.unlink(f.name)


if __name__ == "__main__":
    main()
