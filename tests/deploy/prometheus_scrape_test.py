#!/usr/bin/env python3
"""A real Prometheus server (Debian's `prometheus`) scrapes a running
`dserve serve` and dserve_requests_total is read back through the query API.

Environment: DSERVE_BIN, DSERVE_CLIENT_BIN, DSERVE_SHARED_DIR,
DSERVE_SOURCE_DIR, DSERVE_PROMETHEUS (path of the prometheus binary).
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

BIN = os.environ["DSERVE_BIN"]
CLIENT = os.environ["DSERVE_CLIENT_BIN"]
SHARED = os.environ["DSERVE_SHARED_DIR"]
SOURCE = os.environ["DSERVE_SOURCE_DIR"]
PROMETHEUS = os.environ.get("DSERVE_PROMETHEUS") or "prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pattern, path, proc, timeout_s=60):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("process exited %d" % proc.returncode)
        m = re.search(pattern, open(path).read())
        if m:
            return int(m.group(1))
        time.sleep(0.1)
    raise RuntimeError("no %r within %ds" % (pattern, timeout_s))


def query(port, promql):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": promql}))
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def main():
    scratch = tempfile.mkdtemp(prefix="dserve-prometheus-test-")
    procs = []
    try:
        subprocess.run([sys.executable, os.path.join(SOURCE, "tests", "data", "make_test_models.py"), SHARED, scratch],
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        out = os.path.join(scratch, "dserve.out")
        with open(out, "w") as o, open(os.path.join(scratch, "dserve.err"), "w") as e:
            dserve = subprocess.Popen([BIN, "serve", "--model", "intents=" + os.path.join(scratch, "classify"),
                                       "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
                                      stdout=o, stderr=e, start_new_session=True)
        procs.append(dserve)
        grpc_port = wait_for(r"dserve: listening on port (\d+)", out, dserve)
        metrics_port = wait_for(r"dserve: metrics on port (\d+)", out, dserve)

        config = os.path.join(scratch, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: dserve\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % metrics_port)
        prom_port = free_port()
        prom_log = os.path.join(scratch, "prometheus.log")
        with open(prom_log, "w") as log:
            prom = subprocess.Popen([PROMETHEUS, "--config.file=" + config,
                                     "--storage.tsdb.path=" + os.path.join(scratch, "tsdb"),
                                     "--web.listen-address=127.0.0.1:%d" % prom_port],
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(prom)

        # Traffic: 5 classify calls.
        for i in range(5):
            r = subprocess.run([CLIENT, "--target", "127.0.0.1:%d" % grpc_port, "--timeout-ms", "10000",
                                "classify", "--model", "intents", "call %d" % i],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr

        promql = 'sum(dserve_requests_total{job="dserve",model="intents",code="OK"})'
        deadline = time.time() + 60
        value = None
        while time.time() < deadline:
            try:
                result = query(prom_port, promql)
                if result:
                    value = float(result[0]["value"][1])
                    if value >= 5:
                        break
            except OSError:
                pass  # Prometheus still starting
            time.sleep(0.5)
        if value is None or value < 5:
            print("FAIL: Prometheus did not report 5 OK classify requests (last value %s)\n%s" % (
                value, open(prom_log).read()[-3000:]))
            return 1
        up = query(prom_port, 'up{job="dserve"}')
        assert up and float(up[0]["value"][1]) == 1.0, up
        print("ok: Prometheus scraped dserve: %s = %g, up = 1" % (promql, value))
        print("1 passed, 0 failed")
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
