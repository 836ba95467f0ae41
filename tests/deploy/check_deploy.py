#!/usr/bin/env python3
"""Checks the deployment files against the real server.

1. `promtool check config` on deploy/prometheus/prometheus.yml and
   `promtool check rules` on deploy/prometheus/alerts.yml (and the
   Kubernetes scrape config when promtool was built with Kubernetes
   discovery; Debian's is not).
2. Every metric name in the PromQL of the Grafana dashboard, the alert and
   recording rules, and the prometheus-adapter rule is one that
   `dserve serve` exports: the server starts on loopback (port 0) with the
   test checkpoints, gets one ListModels call (so that
   dserve_requests_total has a series), and /metrics is scraped.
   Histograms count with their _bucket/_sum/_count series; `up` comes from
   Prometheus; recording rules defined in alerts.yml count as defined.
3. The Kubernetes manifests and docker-compose.yml parse as YAML (PyYAML
   when present, else a regex check of apiVersion:/kind:), and the k8s
   ones carry what docs/operations.md promises (gRPC probes, headless
   Service, GPU limit, HPA on the adapter's metric).

Environment (tests/deploy/CMakeLists.txt): DSERVE_BIN, DSERVE_CLIENT_BIN,
DSERVE_SHARED_DIR, DSERVE_SOURCE_DIR, DSERVE_PROMTOOL.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

try:
    import yaml  # python3-yaml
except ImportError:  # pragma: no cover - depends on the machine
    yaml = None

SOURCE = os.environ.get("DSERVE_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("DSERVE_BIN") or os.path.join(SOURCE, "build", "bin", "dserve")
CLIENT = os.environ.get("DSERVE_CLIENT_BIN") or os.path.join(SOURCE, "build", "bin", "dserve-client")
SHARED = os.environ.get("DSERVE_SHARED_DIR") or os.path.join(SOURCE, "..", "shared")
PROMTOOL = os.environ.get("DSERVE_PROMTOOL") or shutil.which("promtool") or ""
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
DEPLOY = os.path.join(SOURCE, "deploy")

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg, flush=True)


def ok(msg):
    print("ok: " + msg, flush=True)


# ------------------------------------------------------------- promtool --

def run_promtool():
    if not PROMTOOL or not os.access(PROMTOOL, os.X_OK):
        fail("promtool not found (Debian package prometheus); cannot check the Prometheus files")
        return
    prom = os.path.join(DEPLOY, "prometheus")
    for args in (["check", "config", os.path.join(prom, "prometheus.yml")],
                 ["check", "rules", os.path.join(prom, "alerts.yml")]):
        r = subprocess.run([PROMTOOL] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if r.returncode != 0:
            fail("promtool %s: exit %d\n%s" % (" ".join(args), r.returncode, r.stdout))
        else:
            ok("promtool " + " ".join(args[:2]) + " " + os.path.relpath(args[2], SOURCE))
    k8s = os.path.join(prom, "prometheus-kubernetes.yml")
    r = subprocess.run([PROMTOOL, "check", "config", k8s], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    if r.returncode == 0:
        ok("promtool check config " + os.path.relpath(k8s, SOURCE))
    elif "kubernetes_sd_configs not found" in r.stdout:
        ok("promtool has no Kubernetes discovery (Debian build); %s checked as YAML only"
           % os.path.relpath(k8s, SOURCE))
    else:
        fail("promtool check config %s: exit %d\n%s" % (k8s, r.returncode, r.stdout))


# --------------------------------------------------------- YAML loading --

def load_yaml_docs(path):
    """All documents of a YAML file (PyYAML), or None without PyYAML."""
    with open(path) as f:
        text = f.read()
    if not text.strip():
        fail("%s is empty" % path)
        return []
    if yaml is None:
        return None
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        fail("%s: YAML error: %s" % (path, e))
        return []


# ------------------------------------------------- PromQL metric names --

PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless",
    "inf", "nan", "atan2", "start", "end",
}


def promql_metric_names(expr):
    """Metric (or recording-rule) names an expression selects."""
    e = expr
    e = re.sub(r"<<[^>]*>>", "", e)                      # prometheus-adapter templates
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)              # string literals
    e = re.sub(r"'(?:[^'\\]|\\.)*'", "''", e)
    e = re.sub(r"\{[^{}]*\}", "", e)                       # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                       # range / subquery durations
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "", e)   # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w$.:])([A-Za-z_:][A-Za-z0-9_:]*)", e):
        name = m.group(1)
        rest = e[m.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or an aggregation
        if name.lower() in PROMQL_KEYWORDS:
            continue
        names.add(name)
    return names


def dashboard_exprs(path):
    with open(path) as f:
        dash = json.load(f)
    exprs = []

    def walk_panels(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    exprs.append(("panel '%s'" % p.get("title"), t["expr"]))
            walk_panels(p.get("panels", []))

    walk_panels(dash.get("panels", []))
    for v in dash.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        if v.get("type") == "query" and isinstance(q, str):
            m = re.match(r"\s*label_values\(\s*([^,()]+?)\s*,", q)
            exprs.append(("variable '%s'" % v.get("name"), m.group(1) if m else q))
    return dash, exprs


def alert_exprs(path):
    docs = load_yaml_docs(path)
    exprs, records = [], set()
    if docs is None:  # no PyYAML: take expr: blocks by indentation
        text = open(path).read()
        for m in re.finditer(r"^(\s*)(?:- )?record:\s*(\S+)", text, re.M):
            records.add(m.group(2))
        for m in re.finditer(r"^(\s*)expr:\s*(\|)?(.*)$", text, re.M):
            if m.group(2):
                ind = len(m.group(1))
                block = []
                for line in text[m.end():].split("\n")[1:]:
                    if line.strip() and len(line) - len(line.lstrip()) <= ind:
                        break
                    block.append(line)
                exprs.append(("rule", "\n".join(block)))
            else:
                exprs.append(("rule", m.group(3)))
        return exprs, records
    for doc in docs:
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                if "record" in rule:
                    records.add(rule["record"])
                exprs.append(("rule '%s'" % (rule.get("alert") or rule.get("record")), str(rule["expr"])))
    return exprs, records


def adapter_exprs(path):
    docs = load_yaml_docs(path)
    exprs = []
    if docs is None:
        text = open(path).read()
        for key in ("seriesQuery", "metricsQuery"):
            for m in re.finditer(key + r":\s*(\|)?(.*)$", text, re.M):
                body = m.group(2)
                if m.group(1):
                    body = "\n".join(text[m.end():].split("\n")[1:4])
                exprs.append(("adapter " + key, body.strip().strip("'")))
        return exprs, set()
    names = set()
    for doc in docs:
        config = yaml.safe_load(doc["data"]["config.yaml"])
        for rule in config.get("rules", []):
            exprs.append(("adapter seriesQuery", rule["seriesQuery"]))
            exprs.append(("adapter metricsQuery", rule["metricsQuery"]))
            if "name" in rule and "as" in rule["name"]:
                names.add(rule["name"]["as"])
    return exprs, names


# ------------------------------------------------------ the real server --

def exported_metrics():
    """Names on /metrics of a dserve serving the three test checkpoints."""
    scratch = tempfile.mkdtemp(prefix="dserve-deploy-test-")
    proc = None
    try:
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "data", "make_test_models.py"), SHARED, scratch],
                       check=True, stdout=subprocess.DEVNULL, timeout=60)
        out_path = os.path.join(scratch, "stdout.txt")
        with open(out_path, "w") as out, open(os.path.join(scratch, "stderr.txt"), "w") as err:
            proc = subprocess.Popen(
                [BIN, "serve",
                 "--model", "intents=" + os.path.join(scratch, "classify"),
                 "--model", "qa=" + os.path.join(scratch, "answer"),
                 "--model", "ranker=" + os.path.join(scratch, "rerank"),
                 "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--device", "cpu",
                 "--threads-per-worker", "1"],
                stdout=out, stderr=err, start_new_session=True)
        grpc_port = metrics_port = None
        deadline = time.time() + 60
        while time.time() < deadline and (grpc_port is None or metrics_port is None):
            if proc.poll() is not None:
                raise RuntimeError("dserve serve exited %d: %s" % (
                    proc.returncode, open(os.path.join(scratch, "stderr.txt")).read()[-2000:]))
            text = open(out_path).read()
            m = re.search(r"dserve: metrics on port (\d+)", text)
            metrics_port = int(m.group(1)) if m else None
            m = re.search(r"dserve: listening on port (\d+)", text)
            grpc_port = int(m.group(1)) if m else None
            time.sleep(0.1)
        if grpc_port is None or metrics_port is None:
            raise RuntimeError("dserve serve printed no ports within 60 s")
        # One call, so that the labelled request counter has a series.
        r = subprocess.run([CLIENT, "--target", "127.0.0.1:%d" % grpc_port, "--timeout-ms", "10000", "models"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        if r.returncode != 0:
            fail("dserve-client models: exit %d: %s" % (r.returncode, r.stdout))
        body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=10).read().decode()
    finally:
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    names = set()
    for line in body.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) in ("histogram", "summary"):
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
            continue
        m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)[{ ]", line)
        if m and not line.startswith("#"):
            names.add(m.group(1))
    return names


# ------------------------------------------------------------ manifests --

def check_manifests():
    k8s_files = sorted(glob.glob(os.path.join(DEPLOY, "k8s", "**", "*.yaml"), recursive=True))
    if not k8s_files:
        fail("no deploy/k8s/*.yaml")
    kinds = {}
    for path in k8s_files:
        rel = os.path.relpath(path, SOURCE)
        text = open(path).read()
        if not re.search(r"^apiVersion:\s*\S+", text, re.M) or not re.search(r"^kind:\s*\S+", text, re.M):
            fail("%s: no top-level apiVersion:/kind:" % rel)
            continue
        docs = load_yaml_docs(path)
        if docs is None:
            for m in re.finditer(r"^kind:\s*(\S+)", text, re.M):
                kinds.setdefault(m.group(1), []).append((rel, None))
            continue
        for doc in docs:
            if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
                fail("%s: a document without apiVersion/kind" % rel)
                continue
            kinds.setdefault(doc["kind"], []).append((rel, doc))
        ok("%s parses (%s)" % (rel, ", ".join(d["kind"] for d in docs)))
    for kind in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap",
                 "Kustomization"):
        if kind not in kinds:
            fail("deploy/k8s has no %s" % kind)
    if yaml is not None:
        text = {rel: open(os.path.join(SOURCE, rel)).read() for docs in kinds.values() for rel, _ in docs}
        for rel, doc in kinds.get("Deployment", []):
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if rel.endswith("k8s/deployment.yaml"):
                    for probe in ("readinessProbe", "livenessProbe"):
                        if c.get(probe, {}).get("grpc", {}).get("port") != 5001:
                            fail("%s: %s is not a grpc probe on port 5001" % (rel, probe))
                    env = {e["name"]: e.get("value") for e in c.get("env", [])}
                    if env.get("OMP_WAIT_POLICY") != "PASSIVE":
                        fail("%s: no OMP_WAIT_POLICY=PASSIVE" % rel)
                    if not c.get("resources", {}).get("requests") or not c.get("resources", {}).get("limits"):
                        fail("%s: no resource requests/limits" % rel)
                if "gpu" in rel and "nvidia.com/gpu" not in c.get("resources", {}).get("limits", {}):
                    fail("%s: no nvidia.com/gpu limit" % rel)
        for rel, doc in kinds.get("Service", []):
            if doc["spec"].get("clusterIP") != "None":
                fail("%s: the Service is not headless" % rel)
            if {p["name"] for p in doc["spec"]["ports"]} != {"grpc", "metrics"}:
                fail("%s: expected ports grpc and metrics" % rel)
        _, adapter_names = adapter_exprs(os.path.join(DEPLOY, "k8s", "prometheus-adapter-config.yaml"))
        for rel, doc in kinds.get("HorizontalPodAutoscaler", []):
            for metric in doc["spec"]["metrics"]:
                name = metric.get("pods", {}).get("metric", {}).get("name")
                if name and name not in adapter_names:
                    fail("%s: metric %s is not one the adapter rule serves (%s)" % (rel, name, adapter_names))
        for rel, doc in kinds.get("Kustomization", []):
            base = os.path.dirname(os.path.join(SOURCE, rel))
            for res in doc.get("resources", []) + [p["path"] for p in doc.get("patches", [])]:
                if not os.path.exists(os.path.join(base, res)):
                    fail("%s: resource %s does not exist" % (rel, res))
        del text
    compose = os.path.join(DEPLOY, "docker-compose.yml")
    docs = load_yaml_docs(compose)
    if docs is not None and docs:
        services = docs[0].get("services", {})
        for s in ("dserve", "prometheus", "grafana"):
            if s not in services:
                fail("docker-compose.yml: no service %s" % s)
        for s in services.values():
            for vol in s.get("volumes", []):
                src = vol.split(":")[0]
                if src.startswith("./") and not os.path.exists(os.path.join(DEPLOY, src)):
                    fail("docker-compose.yml: mounts %s, which does not exist" % src)
        ok("docker-compose.yml parses")
    elif docs is None and not re.search(r"^services:", open(compose).read(), re.M):
        fail("docker-compose.yml: no services:")


def main():
    run_promtool()
    check_manifests()

    dash_path = os.path.join(DEPLOY, "grafana", "dserve-dashboard.json")
    try:
        dash, exprs = dashboard_exprs(dash_path)
        ok("dashboard JSON parses: %d panels, %d queries" % (len(dash.get("panels", [])), len(exprs)))
    except (ValueError, OSError) as e:
        fail("%s: %s" % (dash_path, e))
        exprs = []
    rule_exprs, records = alert_exprs(os.path.join(DEPLOY, "prometheus", "alerts.yml"))
    ad_exprs, _ = adapter_exprs(os.path.join(DEPLOY, "k8s", "prometheus-adapter-config.yaml"))
    referenced = {}
    for where, expr in [("dashboard " + w, e) for w, e in exprs] + \
                       [("alerts.yml " + w, e) for w, e in rule_exprs] + \
                       [("prometheus-adapter-config.yaml " + w, e) for w, e in ad_exprs]:
        names = promql_metric_names(expr)
        if not names:
            fail("%s: no metric found in %r" % (where, expr))
        for n in names:
            referenced.setdefault(n, []).append(where)

    exported = exported_metrics()
    ok("server exports %d names" % len(exported))
    allowed = exported | {"up"} | records
    for name, wheres in sorted(referenced.items()):
        if name not in allowed:
            fail("%s (in %s) is not exported by dserve serve" % (name, "; ".join(sorted(set(wheres)))))
    ok("metrics referenced: " + ", ".join(sorted(referenced)))
    for required in ("dserve_requests_total", "dserve_request_duration_seconds_bucket",
                     "dserve_queue_duration_seconds_sum", "dserve_batch_real_tokens_sum", "dserve_batch_tokens_sum",
                     "dserve_tokens_total", "dserve_answer_no_answer_total", "process_cpu_seconds_total",
                     "process_resident_memory_bytes", "dserve_queue_items", "dserve_rejected_total", "up"):
        if required not in referenced:
            fail("no query uses %s" % required)

    if failures:
        print("\n%d failure(s)" % len(failures))
        return 1
    print("\nall deployment checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
