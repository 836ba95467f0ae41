#!/usr/bin/python3
"""dserve's performance harness (issue 7): every row of the target table in
one run on one machine, each with its configuration, measured figures
(medians over repeats), target and PASS/MISS, plus the machine.

usage: bench/run_all.sh [--quick | --tiny] [--out DIR] [--build-dir DIR] [--shared-dir DIR]
                        [--demo-dir DIR] [--server-model DIR] [--rounds N] [--threads N]
                        [--sections encoder,argmax,serve,packing,rss,albert,long,delay,http,oip,int8,v1]
                        [--no-ort] [--ort-dir DIR] [--ort-cache DIR]

Modes: full (default, ~10 min on 2 quiet cores), --quick (~3 min smoke: one
round, short load windows), --tiny (seconds per row on tiny models: checks
that the harness runs end to end; its figures mean nothing; used by CI).

Rows and how they are measured (docs/performance.md, "Harness", says more):
 1 encoder fp32 8x128 vs eager fp32: `dserve bench encoder` (v3-base shape,
   random weights) and bench/eager/eager_baseline.py (Hugging Face's
   computation, written independently) run back to back in each round; the
   eager script runs in fp32 and bf16, each with glibc's default malloc and
   with tuned malloc (MALLOC_MMAP_THRESHOLD_ etc. in its environment); the
   faster eager figure is the baseline. Ratio = eager s / ours s.
 2 the same in bf16, plus argmax of `dserve forward --dtype bf16` against
   fp32 (and Hugging Face's logits) on the classify goldens and on demo texts.
 3 batch 1x128 fp32 latency, ours vs the faster eager fp32.
 4 bf16 model-FLOP utilisation vs the bf16 matmul peak measured in the same
   `dserve bench encoder` process: the fastest of torch.matmul and the
   pre-packed matmul at 2048^3 and the pre-packed one at the forward's FFN shape.
 5,6 bench/serve/serve_bench.sh (server vs bare engine; batching vs bs 1).
 7 padded/real tokens from the server's own dserve_batch_tokens_sum and
   dserve_batch_real_tokens_sum deltas under a mixed-length (8-256 token)
   load, `--packing true` vs `--packing false`.
 8 tokenizer CPU per item (tokenizer_bench, one thread, the same texts) over
   the server's CPU seconds per item (/proc/PID/stat delta over
   dserve_batch_size_sum delta) under that load.
 9 server RSS after a warm load, --workers 2 vs --workers 1, on a
   v3-base-encoder-sized checkpoint; allowance = the 1-worker server's RSS
   growth under the load (its activations), analytic estimate beside it.
10 the second model family: `dserve bench encoder --shape albert-base`
   (albert-base-v2, random weights) vs the eager ALBERT
   (bench/eager/albert_eager.py, tuned malloc), fp32 8x128, back to back in
   each round.
11 encoder fp32 8x128 vs ONNX Runtime (issue 19): the eager module of row 1
   (same random weights) exported by bench/onnx/export_onnx.py
   (torch.onnx.export, opset 17, fixed shapes) and timed by
   bench/onnx/ort_bench.js (onnxruntime-node, CPU EP, graph optimisation
   "all", intra-op threads = --threads) in the same rounds as rows 1-3, right
   after eager; each ORT run first checks its logits and last hidden state
   against eager fp32 on the timed inputs (max abs diff <= 1e-4, else the
   row is an ERROR). Ratio = ORT s / ours s. Rows 1 and 3 show the ORT
   figure beside eager; the bf16 rows show "ORT: n/a" (ORT's CPU EP has no
   bf16 GEMM path; its fp32 figure is this row).
12 batch 1x128 fp32 latency, ours vs ORT, same rounds.
13 long sequences (section "long"): fp32 8x512 ours vs eager (tuned
   malloc), 1x512 beside it, with ORT and the growth of the cost per token
   from 128 to 512 tokens for each engine; rounds of their own.
14 fp32 8x512 ours vs ORT (1x512 beside it), the same rounds.
15 (section "delay") --max-queue-delay-us sweep at 1, 8 and 64 clients.
16 (section "http") HTTP/JSON vs gRPC on one `dserve serve --http-listen`
   (the server model, issue 17): 64 closed-loop keep-alive clients, one
   text per call, the same texts through both doors: gRPC by `dserve-client
   load --concurrency 64 --channels 4`, HTTP by `wrk -c64 -t2` POSTing
   /v1/classify (bench/serve/http_vs_grpc.py's Lua script and texts);
   windows alternate HTTP, gRPC per repeat. Non-200 responses are not
   counted as served. Ratio = HTTP calls/s / gRPC calls/s (medians over
   repeats), target >= 0.8; p99 of both beside it. The load generators run
   on the same machine as the server (wrk is the lighter client).
17 int8 (issue 19): `dserve bench encoder --dtypes fp32,...,int8` in each round of
   row 1 (one process: the dense layers quantized to int8, docs/models.md
   "--dtype"); ratio = our fp32 s / our int8 s within the round, target >= 1.6x.
18 int8 accuracy: argmax of `dserve forward --dtype int8` against fp32 on the
   row-2 data (cls_factorized goldens, against Hugging Face's logits too,
   and the demo classify model on its test tickets, or the fallback),
   target >= 99% agreement on the demo data and every golden argmax kept.
19 (section "oip") Open Inference Protocol gRPC vs dserve.v1 gRPC on one server
   (the server model, issue 28): `dserve-client load --concurrency 64
   --channels 4` with the same texts, `--protocol oip` (ModelInfer, a TEXT
   BYTES tensor) and `--protocol dserve` (Classify), windows alternating
   per repeat. Ratio = OIP calls/s / dserve.v1 calls/s (medians), target
   >= 0.95 (the adapter must cost nothing measurable); p99 of both beside it.
20 (section "long") fp32 1x512 ours vs ORT, the row-14 rounds (issue 27: its own PASS/MISS).
21 (section "encoder") bf16 vs our own fp32 at 8x128, the same `dserve bench` process
   (ratio = fp32 s / bf16 s), target >= 1.3x on machines with avx512_bf16 or
   amx_bf16 (SKIP, "not applicable", elsewhere).
22, 23 (section "int8", issue 27) our `--dtypes int8` vs ONNX Runtime's int8 at
   8x128 and 1x128: ORT runs the row-11 export rewritten by
   bench/onnx/quantize_onnx.py as ORT's own dynamic quantizer writes it
   (per-channel int8 weights, DynamicQuantizeLinear + MatMulInteger + scale
   Mul, bias Add in float; Debian python3-onnx), first checked against ORT's
   fp32 graph on the timed inputs (argmax kept per sequence reported; ERROR when
   the last hidden state's relative L2 error exceeds 0.25). Ratio = ORT s / ours s.
24, 25 (section "v1", issue 26) DeBERTa v1 Base (`dserve bench encoder --shape
   deberta-base`: microsoft/deberta-base's config, random weights in v1's
   layout loaded by model/deberta_v1 onto our encoder) vs eager_baseline.py's
   v1 (HF modeling_deberta.py's computation, tuned malloc) and vs ORT on its
   export (checked against eager within 1e-4), fp32 8x128, back to back in
   each round; targets as rows 1 and 11.
Every report ends with issue 27's target table (rows 11-14, 20-23, 4, 21, 13)
and states the harness's definitions (issue 27, "a fair harness"):
  warm-ups: every engine process runs W untimed forwards before its timed
    ones, W >= 2 in every mode (ORT's output check is the first of its W);
  median: the middle value, the mean of the two middle values for an even
    count, for every engine (dserve bench, eager_baseline.py, ort_bench.js) and
    over rounds;
  ratio: peer s / dserve s within a round (processes back to back), the median
    over rounds of these per-round ratios, in every table and row (the HTTP
    and OIP rows: the median of the per-window ratios);
  spread: the lowest and highest per-round ratio, printed beside each ratio
    (4 rounds at 512 tokens in full mode).
ORT needs `bash bench/onnx/setup.sh` once (npm install of onnxruntime-node
into bench/onnx/node_modules, and python3-onnx for the int8 graph); without it rows 11, 12, 14, 20, 22, 23
and 25 are SKIP with
"ORT: not installed, run bench/onnx/setup.sh" and the ORT columns say so.
Writes OUT/report.md, OUT/report.json and raw outputs under OUT/raw/.
Exit code: 0 when every row was measured (PASS or MISS), 1 when a row failed.
"""
import argparse
import json
import os
import platform
import random
import re
import resource
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
# The same settings dserve applies to itself at start-up (model/util/process.cc).
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
                "MALLOC_TOP_PAD_": str(64 << 20)}
SECTIONS = ("encoder", "argmax", "serve", "packing", "rss", "albert", "long", "delay", "http", "oip", "int8", "v1")
# Row 15 (issue 16): --max-queue-delay-us settings x closed-loop clients.
DELAYS_US = (0, 2000, 10000)
DELAY_CLIENTS = (1, 8, 64)
# Row 16 (issue 17): HTTP vs gRPC at this many closed-loop clients; target ratio.
HTTP_CLIENTS = 64
HTTP_TARGET = 0.8
# Row 19 (issue 28): OIP gRPC vs dserve.v1 gRPC at HTTP_CLIENTS clients; target ratio.
OIP_TARGET = 0.95
ONNX_DIR = os.path.join(REPO, "bench", "onnx")
ORT_NOT_INSTALLED = "ORT: not installed, run bench/onnx/setup.sh"
# ORT's outputs against eager fp32 on the timed inputs (logits and last hidden state).
ORT_MAX_DIFF = 1e-4
# ORT's int8 graph (bench/onnx/quantize_onnx.py) against its fp32 graph: relative L2 error of the last hidden
# state (measured: 2.3% on random v3-base weights, 9% on the tiny cls_factorized golden, whose N(0, 0.2^2)
# weights quantize worse; a wrong rewrite, e.g. scales on the wrong axis, gives ~100%).
ORT_INT8_MAX_REL = 0.25


def cpu_has_int8_dot():
    """Whether this CPU has an int8 dot product: the rule of cpu_kernels.cc's CpuHasInt8Dot, which
    tests/model/cpu_path.py holds for Python (our Int8Linear uses 255 activation levels exactly there). Without
    one, MLAS's u8 x s8 kernels add product pairs in saturating int16, and ORT's quantizer is run with
    reduce_range (7-bit weights) as ORT advises: on the tiny golden at 1x128, on an AVX2-only EPYC, full-range
    weights put ORT's last hidden state 0.308 (relative L2) from its fp32 graph's, 7-bit ones 0.136."""
    sys.path.insert(0, os.path.join(REPO, "tests", "model"))
    import cpu_path  # noqa: E402 - the one Python copy of the rule
    return cpu_path.int8_activation_levels() == 255


# The harness's definitions (issue 27), stated in every report.
DEFINITIONS = ("warm-ups: every engine process (dserve, eager, ORT) runs W untimed forwards before its timed ones "
               "(ORT's output check is the first of its W); median: the middle value, the mean of the two middle "
               "values for an even count, for every engine and over rounds; ratio: peer s / dserve s within a round "
               "(processes back to back), the median over rounds of these per-round ratios (> 1 = dserve faster); "
               "spread: the lowest and highest per-round ratio")

MODES = {
    # rounds: interleaved repeats of every encoder process (ours and eager);
    # *_repeats: timed forwards inside each process (its median is taken);
    # warmup: untimed forwards before them, the same for every engine, >= 2 in
    # every mode (issue 27; with 1, the first dtype of a `dserve bench` process
    # ran ~12% slow: its heap was still growing); long_*: the long-sequence
    # section (its own rounds: 4 in full mode, so the spread of the per-round
    # ratios at 512 is reported beside the ratio).
    # tiny pack_duration 2 s: with 1 s, a run on a machine busy with compilers
    # once saw no call complete in the window (codes {}).
    "full": dict(rounds=3, enc_repeats=5, lat_repeats=10, warmup=3, serve_repeats=3, serve_duration=5,
                 serve_warmup=2, engine_lines=2048, pack_repeats=3, pack_duration=5, pack_warmup=1,
                 tok_repeats=5, rss_requests=64, rss_concurrency=16, long_length=512, long_repeats=3,
                 long_warmup=2, long_rounds=4, delay_duration=5, delay_warmup=1,
                 http_repeats=3, http_duration=10, http_warmup=2),
    "quick": dict(rounds=1, enc_repeats=3, lat_repeats=5, warmup=2, serve_repeats=1, serve_duration=3,
                  serve_warmup=1, engine_lines=512, pack_repeats=1, pack_duration=3, pack_warmup=1,
                  tok_repeats=3, rss_requests=32, rss_concurrency=16, long_length=512, long_repeats=2,
                  long_warmup=2, long_rounds=1, delay_duration=2, delay_warmup=0.5,
                  http_repeats=1, http_duration=3, http_warmup=1),
    "tiny": dict(rounds=1, enc_repeats=1, lat_repeats=1, warmup=2, serve_repeats=1, serve_duration=1,
                 serve_warmup=0.5, engine_lines=64, pack_repeats=1, pack_duration=2, pack_warmup=0.5,
                 tok_repeats=1, rss_requests=16, rss_concurrency=8, long_length=256, long_repeats=1,
                 long_warmup=2, long_rounds=1, delay_duration=1, delay_warmup=0.3,
                 http_repeats=1, http_duration=1, http_warmup=0),
}
LOAD_CLIENTS_MIXED = 64
WORDS = ("the a customer order refund billing password reset shipping parcel late account charge card invoice "
         "delivery address change cancel subscription please help my was not has been could you why when where "
         "how what today yesterday week month double charged wrong item broken missing login email phone number "
         "support ticket status update fast slow again still never").split()


def spread(xs, fmt="{:.2f}"):
    """The spread of per-round ratios: lowest and highest, and how many rounds (issue 27)."""
    xs = list(xs)
    if len(xs) < 2:
        return "n/a, 1 round"
    return f"{fmt.format(min(xs))}-{fmt.format(max(xs))} over {len(xs)} rounds"


def cpu_jiffies():
    """(total, busy) jiffies of the whole machine since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), sum(v) - v[3] - v[4]  # busy = all but idle + iowait


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def log(msg):
    print(f"[run_all {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Failure(Exception):
    pass


class Harness:
    def __init__(self, args):
        self.a = args
        self.mode = "tiny" if args.tiny else "quick" if args.quick else "full"
        self.m = dict(MODES[self.mode])
        # Sanitizer builds (cmake/DserveSanitize.cmake) serve several times
        # slower: the load windows grow so that calls still complete in them.
        slow = float(os.environ.get("DSERVE_TEST_TIME_FACTOR", "1"))
        for k in ("serve_duration", "serve_warmup", "pack_duration", "pack_warmup", "http_duration"):
            self.m[k] *= slow
        if args.rounds:
            self.m["rounds"] = args.rounds
        self.build = os.path.abspath(args.build_dir)
        self.shared = os.path.abspath(args.shared_dir)
        self.out = os.path.abspath(args.out)
        self.raw = os.path.join(self.out, "raw")
        os.makedirs(self.raw, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="dserve_run_all.")
        self.dserve = os.path.join(self.build, "bin", "dserve")
        self.client = os.path.join(self.build, "bin", "dserve-client")
        self.tok_bench = os.path.join(self.build, "bin", "tokenizer_bench")
        for b in (self.dserve, self.client, self.tok_bench):
            if not os.access(b, os.X_OK):
                sys.exit(f"run_all: missing {b} (build dserve, dserve-client and tokenizer_bench: "
                         f"ninja -C {self.build} dserve dserve-client tokenizer_bench)")
        self.threads = args.threads or os.cpu_count()
        # Our binaries tune malloc themselves unless these are set; keep them out of every child's env.
        self.env = {k: v for k, v in os.environ.items() if k not in TUNED_MALLOC}
        self.servers = []
        self.results = {}  # section -> dict
        self.errors = {}   # section -> message
        self.test_models = None
        self.dtypes = [d for d in args.dtypes.split(",") if d]
        self.sections = [x for x in args.sections.split(",") if x]
        self.ort, self.ort_skip = self.ort_status()
        self.ort_exports = {}
        self.last_others = 0.0
        self.warmups = []  # every timed engine process: {"engine", "what", "warmup"} (issue 27: >= 2 each)
        self.others_cpu = []  # other work's CPU share during each timed encoder process (ours, eager, ORT)
        self.ort_errors = {}  # section -> message: an ORT failure there leaves the eager rows standing

    # ------------------------------------------------------------------ helpers
    def run(self, cmd, name, env=None, stdin=None, timeout=900):
        t0 = time.time()
        (j0, b0), c0 = cpu_jiffies(), children_cpu_s()
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env or self.env, timeout=timeout)
        (j1, b1), c1 = cpu_jiffies(), children_cpu_s()
        # Other work's share of the machine's CPU while this process ran (busy jiffies not spent by it): on a
        # shared machine it says which timings were taken beside a compiler (0 = nothing else ran).
        self.last_others = max(0.0, (b1 - b0) - (c1 - c0) * os.sysconf("SC_CLK_TCK")) / max(1, j1 - j0)
        with open(os.path.join(self.raw, name + ".log"), "a") as f:
            f.write(f"$ {' '.join(cmd)}  ({time.time() - t0:.1f} s, rc {p.returncode}, other work "
                    f"{100 * self.last_others:.0f}% of the CPU)\n{p.stdout}\n{p.stderr}\n")
        if p.returncode != 0:
            raise Failure(f"{os.path.basename(cmd[0])} {' '.join(cmd[1:3])} exited {p.returncode}: "
                          f"{p.stderr.strip()[-600:]}")
        return p.stdout

    @staticmethod
    def last_json(text):
        start = text.find("{")
        if start < 0:
            raise Failure(f"no JSON object in output: {text[-300:]}")
        return json.loads(text[start:])

    def test_model_dir(self, task="classify"):
        if self.test_models is None:
            self.test_models = os.path.join(self.work, "test_models")
            subprocess.run([PY, os.path.join(REPO, "tests", "data", "make_test_models.py"), self.shared,
                            self.test_models], check=True, capture_output=True)
        return os.path.join(self.test_models, task)

    # ------------------------------------------------------------------ machine
    def machine(self):
        cpu, flags = "unknown", []
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == "unknown":
                    cpu = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = [x for x in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile",
                                         "amx_bf16", "amx_int8") if x in have]
                    break
        mem = ""
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = f"{int(line.split()[1]) / 1048576:.1f} GiB"
        try:
            torch_version = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                           text=True, timeout=60).stdout.strip()
        except Exception:  # noqa: BLE001 - informational only
            torch_version = "?"
        try:
            commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit += " (+ uncommitted changes)" if dirty else ""
        except Exception:  # noqa: BLE001
            commit = "?"
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        if self.ort:
            try:
                node_v = subprocess.run([self.ort["node"], "--version"], capture_output=True, text=True,
                                        timeout=30).stdout.strip()
            except Exception:  # noqa: BLE001 - informational only
                node_v = "?"
            ort = f"onnxruntime-node {self.ort['version']} (node {node_v})"
        else:
            ort = self.ort_skip

        def cpu_times():
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
            return sum(v), v[3] + v[4]  # total, idle + iowait
        # What other work takes of the cores right now (the load average lags by minutes).
        t0, i0 = cpu_times()
        time.sleep(2)
        t1, i1 = cpu_times()
        busy = 1 - (i1 - i0) / max(1, t1 - t0)
        return {"busy_before_start": busy,"nproc": os.cpu_count(), "cpu": cpu, "flags": ",".join(flags), "memory": mem,
                "kernel": platform.release(), "threads_used": self.threads, "torch_eager": torch_version,
                "commit": commit, "load_average_at_start": load, "ort": ort, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
                "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "(unset)")}

    # ------------------------------------------------------------------ rows 1-4
    def ours(self, batch, dtypes, repeats, round_no, shape=None, length=128, warmup=None):
        shape = shape or self.enc_shape()[0]
        warmup = self.m["warmup"] if warmup is None else warmup
        out = self.run([self.dserve, "bench", "encoder", "--shape", shape, "--batch-size", str(batch), "--length",
                        str(length), "--repeats", str(repeats), "--warmup", str(warmup), "--threads",
                        str(self.threads), "--dtypes", dtypes, "--json"],
                       f"encoder_ours_b{batch}" + ("" if length == 128 else f"_l{length}"))
        r = self.last_json(out)
        r["others_cpu"] = self.last_others
        for d, v in r["dtypes"].items():
            self.warmups.append({"engine": "dserve", "what": f"{shape} {batch}x{length} {d}", "warmup": v["warmup"]})
        log(f"round {round_no}: ours {batch}x{length} " + ", ".join(
            f"{d} {v['median_s']:.4f} s (MFU {100 * v['mfu_vs_matmul']:.1f}%)" for d, v in r["dtypes"].items())
            + f"; other work {100 * self.last_others:.0f}% of the CPU")
        self.others_cpu.append(self.last_others)
        return r

    def eager(self, batch, dtype, malloc, repeats, round_no, shape_arg=None, length=128, warmup=None):
        if shape_arg is None:
            shape_arg = [] if self.mode != "tiny" else ["--model", self.enc_shape()[1]]
        warmup = self.m["warmup"] if warmup is None else warmup
        env = dict(self.env)
        if malloc == "tuned":
            env.update(TUNED_MALLOC)
        out = self.run([PY, os.path.join(REPO, "bench", "eager", "eager_baseline.py"), "--batch", str(batch),
                        "--length", str(length), "--dtype", dtype, "--threads", str(self.threads), "--repeats",
                        str(repeats), "--warmup", str(warmup), "--json", *shape_arg],
                       f"encoder_eager_b{batch}" + ("" if length == 128 else f"_l{length}"), env=env)
        r = self.last_json(out)
        r["others_cpu"] = self.last_others
        self.warmups.append({"engine": "eager", "what": f"{r['model']} {batch}x{length} {dtype}", "warmup": r["warmup"]})
        log(f"round {round_no}: eager {batch}x{length} {dtype} malloc {malloc}: {r['median_s']:.4f} s; other work "
            f"{100 * self.last_others:.0f}% of the CPU")
        self.others_cpu.append(self.last_others)
        return r

    # ------------------------------------------------------------------ ONNX Runtime peer (issue 19)
    def ort_status(self):
        """(info, None) when the ORT peer can run, else (None, the reason every ORT column prints)."""
        if self.a.no_ort:
            return None, "ORT: not run (--no-ort)"
        node = shutil.which("node")
        if not node:
            return None, ORT_NOT_INSTALLED + " (node is not on PATH)"
        pkg = os.path.join(self.a.ort_dir, "node_modules", "onnxruntime-node", "package.json")
        if not os.path.isfile(pkg):
            where = os.path.dirname(pkg)
            where = os.path.relpath(where, REPO) if where.startswith(REPO + os.sep) else where
            return None, f"{ORT_NOT_INSTALLED} (no {where})"
        with open(pkg) as f:
            version = json.load(f).get("version", "?")
        return {"node": node, "version": version, "modules": os.path.dirname(os.path.dirname(pkg))}, None

    def ort_cache_root(self):
        if self.a.ort_cache:
            return os.path.abspath(self.a.ort_cache)
        # Tiny exports take a second: keep them out of the source tree. v3-base ones (~740 MB, ~20 s each) stay.
        return os.path.join(self.work, "onnx") if self.mode == "tiny" else os.path.join(ONNX_DIR, "cache")

    def ort_export(self, batch, length, family="v3", int8=False):
        """The ONNX export of the eager module at batch x length (family "v3": v3-base, tiny: the cls_factorized
        golden; "v1": DeBERTa v1 Base, tiny: the v1 cls_mnli golden). The int8 graph is written beside the fp32
        one when the int8 section runs (one export process for both)."""
        key = (family, batch, length)
        want_int8 = int8 or "int8" in self.sections
        if key not in self.ort_exports or (int8 and not {"int8", "int8_error"} & set(self.ort_exports[key])):
            if self.mode == "tiny":
                model_arg = ["--model", self.enc_shape()[1] if family == "v3" else self.v1_shape()[1]]
            else:
                model_arg = ["--shape", "v3-base" if family == "v3" else "deberta-base"]
            int8_args = []
            if want_int8 and family == "v3":
                int8_args = ["--int8"] + ([] if cpu_has_int8_dot() else ["--int8-reduce-range"])
            r = self.last_json(self.run([PY, os.path.join(ONNX_DIR, "export_onnx.py"), "--batch", str(batch),
                                         "--length", str(length), "--cache-root", self.ort_cache_root(), *model_arg,
                                         *int8_args],
                                        "onnx_export", timeout=1800))
            log(f"onnx export {family} {batch}x{length}: {'reused ' if r['reused'] else ''}{r['dir']} "
                f"({r['onnx_bytes'] / 2**20:.0f} MiB, opset {r['opset']}, {r['shapes']} shapes"
                + (f"; int8: {r['int8']['matmuls_quantized']} MatMuls quantized" if "int8" in r else "") + ")")
            self.ort_exports[key] = r
        return self.ort_exports[key]

    def ort_run(self, batch, length, repeats, warmup, round_no, family="v3", int8=False):
        exp = self.ort_export(batch, length, family, int8)
        if int8 and "int8" not in exp:
            raise Failure(f"ORT int8: {exp.get('int8_error', 'no int8 graph written')}")
        d = exp["dir"]
        env = dict(self.env, NODE_PATH=self.ort["modules"])
        r = self.last_json(self.run([self.ort["node"], os.path.join(ONNX_DIR, "ort_bench.js"), "--dir", d,
                                     "--threads", str(self.threads), "--repeats", str(repeats), "--warmup",
                                     str(warmup), "--json", *(["--int8"] if int8 else [])],
                                    f"encoder_ort_{family}_b{batch}_l{length}" + ("_int8" if int8 else ""), env=env))
        r["others_cpu"] = self.last_others
        self.others_cpu.append(self.last_others)
        self.warmups.append({"engine": "ORT", "what": f"{family} {batch}x{length} {r['dtype']}", "warmup": r["warmup"]})
        if int8:
            v = r["vs_fp32_graph"]
            log(f"round {round_no}: ORT {family} {batch}x{length} int8: {r['median_s']:.4f} s (vs its fp32 graph: "
                f"argmax {v['argmax_agree']}/{v['sequences']}, max |diff| logits {v['max_abs_diff_logits']:.2e}, "
                f"hidden rel L2 {v['hidden_rel_l2']:.2e}); other work {100 * self.last_others:.0f}% of the CPU")
            if not v["hidden_rel_l2"] <= ORT_INT8_MAX_REL:
                raise Failure(f"ORT int8 {batch}x{length}: last hidden state {v['hidden_rel_l2']:.3g} (relative L2) "
                              f"from the fp32 graph's > {ORT_INT8_MAX_REL:g}: the quantized graph is wrong")
            return r
        log(f"round {round_no}: ORT {family} {batch}x{length} fp32: {r['median_s']:.4f} s (max |ORT - eager| logits "
            f"{r['max_abs_diff_logits']:.2e}, hidden {r['max_abs_diff_hidden']:.2e}); other work "
            f"{100 * self.last_others:.0f}% of the CPU")
        bad = [k for k in ("max_abs_diff_logits", "max_abs_diff_hidden") if not r[k] <= ORT_MAX_DIFF]
        if bad:
            raise Failure(f"ORT {batch}x{length} outputs differ from eager fp32: " + ", ".join(
                f"{k[13:]} max |diff| {r[k]:.3g}" for k in bad) + f" > {ORT_MAX_DIFF:g}: its timing is not comparable")
        return r

    def ort_round(self, section, batch, length, repeats, warmup, round_no, family="v3", int8=False):
        """One ORT run inside a round; None when ORT is absent or failed before (the reason is kept)."""
        if self.ort is None or section in self.ort_errors:
            return None
        try:
            return self.ort_run(batch, length, repeats, warmup, round_no, family, int8)
        except (Failure, subprocess.TimeoutExpired, KeyError, ValueError) as e:
            self.ort_errors[section] = str(e).replace("\n", " ")[:800]
            log(f"ORT failed ({section}): {self.ort_errors[section]}")
            return None

    def ours_dtypes(self):
        """Our encoder's dtypes: the eager ones plus int8 (rows 17-18; eager has no int8 peer)."""
        return list(self.dtypes) + ["int8"]

    def enc_shape(self):
        if self.mode == "tiny":  # ours: random weights of the config; eager: the checkpoint itself
            d = os.path.join(self.shared, "goldens", "model", "cls_factorized")
            return os.path.join(d, "config.json"), d
        return "v3-base", None

    def v1_shape(self):
        """DeBERTa v1 (issue 26): ours' --shape, eager's and the export's --model (tiny: the v1 cls_mnli golden,
        its config with random weights for ours), or None for the v1 Base shape."""
        if self.mode == "tiny":
            d = os.path.join(self.shared, "goldens", "deberta_v1", "cls_mnli")
            return os.path.join(d, "config.json"), d
        return "deberta-base", None

    def section_encoder(self):
        m = self.m
        rounds = []
        for r in range(1, m["rounds"] + 1):
            rd = {"ours_8": self.ours(8, ",".join(self.ours_dtypes()), m["enc_repeats"], r), "eager_8": {},
                  "eager_1": {}}
            for dtype in self.dtypes:
                for malloc in ("default", "tuned"):
                    rd["eager_8"][f"{dtype}/{malloc}"] = self.eager(8, dtype, malloc, m["enc_repeats"], r)
            rd["ort_8"] = self.ort_round("encoder", 8, 128, m["enc_repeats"], m["warmup"], r)
            rd["ours_1"] = self.ours(1, "fp32", m["lat_repeats"], r)
            for malloc in ("default", "tuned"):
                rd["eager_1"][f"fp32/{malloc}"] = self.eager(1, "fp32", malloc, m["lat_repeats"], r)
            rd["ort_1"] = self.ort_round("encoder", 1, 128, m["lat_repeats"], m["warmup"], r)
            rounds.append(rd)
        med = statistics.median
        first = rounds[0]["ours_8"]
        res = {"rounds": rounds, "shape": "v3-base" if self.mode != "tiny" else "cls_factorized golden config",
               "gflop_per_forward_8x128": first["gflop_per_forward"],
               "ours_8": {d: {k: med([rd["ours_8"]["dtypes"][d][k] for rd in rounds])
                              for k in ("median_s", "matmul_gflops", "model_gflops", "mfu_vs_matmul")}
                          for d in self.ours_dtypes()},
               "ours_1_fp32_s": med([rd["ours_1"]["dtypes"]["fp32"]["median_s"] for rd in rounds]),
               "eager_8": {k: med([rd["eager_8"][k]["median_s"] for rd in rounds]) for k in rounds[0]["eager_8"]},
               "eager_1": {k: med([rd["eager_1"][k]["median_s"] for rd in rounds]) for k in rounds[0]["eager_1"]}}

        # Ratios within each round (processes run back to back), so a load change between rounds cancels out.
        def best(rd, which, dtype):
            cands = {k.split("/")[1]: v["median_s"] for k, v in rd[which].items() if k.startswith(dtype + "/")}
            env = min(cands, key=cands.get)
            return cands[env], env
        res["ratios"] = {
            "fp32_8": [best(rd, "eager_8", "fp32")[0] / rd["ours_8"]["dtypes"]["fp32"]["median_s"] for rd in rounds],
            "fp32_1": [best(rd, "eager_1", "fp32")[0] / rd["ours_1"]["dtypes"]["fp32"]["median_s"] for rd in rounds],
            # Row 17: int8 against our own fp32, the same process.
            "int8_8": [rd["ours_8"]["dtypes"]["fp32"]["median_s"] / rd["ours_8"]["dtypes"]["int8"]["median_s"]
                       for rd in rounds]}
        res["best_env"] = {"fp32_8": [best(rd, "eager_8", "fp32")[1] for rd in rounds]}
        if "bf16" in self.dtypes:
            res["ratios"]["bf16_8"] = [best(rd, "eager_8", "bf16")[0] / rd["ours_8"]["dtypes"]["bf16"]["median_s"]
                                       for rd in rounds]
            res["ratios"]["mfu_bf16"] = [rd["ours_8"]["dtypes"]["bf16"]["mfu_vs_matmul"] for rd in rounds]
            res["best_env"]["bf16_8"] = [best(rd, "eager_8", "bf16")[1] for rd in rounds]
        res["ort"] = self.ort_summary(rounds, {"8": ("ort_8", lambda rd: rd["ours_8"]["dtypes"]["fp32"]["median_s"]),
                                               "1": ("ort_1", lambda rd: rd["ours_1"]["dtypes"]["fp32"]["median_s"])})
        return res

    def ort_summary(self, rounds, keys):
        """Medians of the ORT runs of a section and its per-round ratios (ORT s / ours s), or None when some
        round has no ORT figure (not installed, or failed: self.ort_skip / self.ort_errors say why)."""
        if any(rd[k] is None for rd in rounds for k, _ in keys.values()):
            return None
        runs = [rd[k] for rd in rounds for k, _ in keys.values()]
        out = {"version": runs[0]["ort_version"], "opset": runs[0]["opset"], "shapes": runs[0]["shapes"],
               "graph_optimization": runs[0]["graph_optimization"], "threads": runs[0]["threads"],
               "max_abs_diff_logits": max(r["max_abs_diff_logits"] for r in runs),
               "max_abs_diff_hidden": max(r["max_abs_diff_hidden"] for r in runs),
               "max_abs_logit": max(r["max_abs_logit"] for r in runs),
               "load_s": statistics.median(r["load_s"] for r in runs)}
        for name, (k, ours) in keys.items():
            out[name + "_s"] = statistics.median(rd[k]["median_s"] for rd in rounds)
            out["ratio_" + name] = [rd[k]["median_s"] / ours(rd) for rd in rounds]
        return out

    # ------------------------------------------------------------------ rows 13-14 (long sequences)
    def section_long(self):
        """fp32 at batch 8 and 1 x the long length (512; tiny: the golden's 256 positions): ours, eager (tuned
        malloc, the faster env in every row-1 round so far) and ORT back to back in each round."""
        m = self.m
        L, reps, warm = m["long_length"], m["long_repeats"], m["long_warmup"]
        rounds = []
        for r in range(1, (self.a.rounds or m["long_rounds"]) + 1):
            rd = {}
            for b in (8, 1):
                rd[f"ours_{b}"] = self.ours(b, "fp32", reps, r, length=L, warmup=warm)["dtypes"]["fp32"]["median_s"]
                rd[f"eager_{b}"] = self.eager(b, "fp32", "tuned", reps, r, length=L, warmup=warm)["median_s"]
                rd[f"ort_{b}"] = self.ort_round("long", b, L, reps, warm, r)
            rounds.append(rd)
        med = statistics.median
        res = {"length": L, "repeats": reps, "warmup": warm, "rounds": rounds,
               "shape": "v3-base" if self.mode != "tiny" else "cls_factorized golden config"}
        for b in (8, 1):
            res[f"ours_{b}_s"] = med(rd[f"ours_{b}"] for rd in rounds)
            res[f"eager_{b}_s"] = med(rd[f"eager_{b}"] for rd in rounds)
            res[f"ratio_eager_{b}"] = [rd[f"eager_{b}"] / rd[f"ours_{b}"] for rd in rounds]
        res["ort"] = self.ort_summary(rounds, {"8": ("ort_8", lambda rd: rd["ours_8"]),
                                               "1": ("ort_1", lambda rd: rd["ours_1"])})
        return res

    # ------------------------------------------------------------------ row 2 (argmax)
    def forward_logits(self, model_dir, id_lines, dtype, name):
        text = "".join(json.dumps({"input_ids": ids}) + "\n" for ids in id_lines)
        out = self.run([self.dserve, "forward", "--model", model_dir, "--batch-size", "8", "--dtype", dtype], name,
                       stdin=text)
        rows = [json.loads(l)["logits"] for l in out.splitlines() if l.strip()]
        if len(rows) != len(id_lines):
            raise Failure(f"dserve forward {model_dir}: {len(rows)} outputs for {len(id_lines)} inputs")
        return rows

    @staticmethod
    def argmax(v):
        return max(range(len(v)), key=v.__getitem__)

    def section_argmax(self):
        res = {}
        gdir = os.path.join(self.shared, "goldens", "model", "cls_factorized")
        with open(os.path.join(gdir, "golden.json")) as f:
            golden = json.load(f)
        cases = golden["cases"] + golden.get("extra_cases", [])
        ids = [c["input_ids"] for c in cases]
        f32 = self.forward_logits(gdir, ids, "fp32", "argmax_goldens")
        b16 = self.forward_logits(gdir, ids, "bf16", "argmax_goldens")
        i8 = self.forward_logits(gdir, ids, "int8", "argmax_goldens")
        hf = [self.argmax(c["logits"]) for c in cases]
        res["goldens"] = {
            "checkpoint": "../shared/goldens/model/cls_factorized (cases + extra_cases)", "n": len(cases),
            "bf16_eq_fp32": sum(self.argmax(a) == self.argmax(b) for a, b in zip(b16, f32)),
            "bf16_eq_hf": sum(self.argmax(a) == h for a, h in zip(b16, hf)),
            "fp32_eq_hf": sum(self.argmax(a) == h for a, h in zip(f32, hf)),
            "int8_eq_fp32": sum(self.argmax(a) == self.argmax(b) for a, b in zip(i8, f32)),
            "int8_eq_hf": sum(self.argmax(a) == h for a, h in zip(i8, hf)),
            "int8_max_abs_diff": max(abs(x - y) for a, b in zip(i8, f32) for x, y in zip(a, b))}
        # Demo data: the demo classify model on its test tickets when deploy/demo has built them; otherwise the
        # golden classify checkpoint (with the toy tokenizer) on demo texts generated here.
        demo = os.path.abspath(self.a.demo_dir)
        model = os.path.join(demo, "models", "classify")
        texts_file = os.path.join(demo, "data", "tickets_test.jsonl")
        if os.path.isfile(os.path.join(model, "model.safetensors")) and os.path.isfile(texts_file):
            what = f"demo classify model {model} on {texts_file}"
        else:
            model = self.test_model_dir("classify")
            gen = os.path.join(self.work, "demo_data")
            self.run([PY, os.path.join(REPO, "deploy", "demo", "generate_demo_data.py"), "--out", gen, "--scale",
                      "0.2"], "argmax_demo")
            texts_file = os.path.join(gen, "tickets_test.jsonl")
            what = ("no demo model built: golden classify checkpoint cls_factorized + toy spm.model on demo "
                    "tickets from deploy/demo/generate_demo_data.py --scale 0.2")
        with open(texts_file) as f:
            items = [json.loads(l) for l in f if l.strip()]
        if self.mode == "tiny":
            items = items[:32]
        tok = self.run([self.dserve, "tokenize", "--model", model], "argmax_demo",
                       stdin="".join(json.dumps({"text": it["text"]}) + "\n" for it in items))
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        max_len = (cfg.get("dserve") or {}).get("max_length") or cfg["max_position_embeddings"]
        ids = []
        for l in tok.splitlines():
            i = json.loads(l)["ids"]
            ids.append(i if len(i) <= max_len else i[:max_len - 1] + [i[-1]])
        f32 = self.forward_logits(model, ids, "fp32", "argmax_demo")
        b16 = self.forward_logits(model, ids, "bf16", "argmax_demo")
        i8 = self.forward_logits(model, ids, "int8", "argmax_demo")
        d = {"what": what, "n": len(ids), "bf16_eq_fp32": sum(self.argmax(a) == self.argmax(b) for a, b in zip(b16, f32)),
             "int8_eq_fp32": sum(self.argmax(a) == self.argmax(b) for a, b in zip(i8, f32)),
             "int8_max_abs_diff": max(abs(x - y) for a, b in zip(i8, f32) for x, y in zip(a, b))}
        labels = cfg.get("id2label") or {}
        if all("label" in it for it in items) and set(it["label"] for it in items) <= set(labels.values()):
            d["accuracy_fp32"] = sum(labels[str(self.argmax(a))] == it["label"] for a, it in zip(f32, items)) / len(items)
            d["accuracy_bf16"] = sum(labels[str(self.argmax(a))] == it["label"] for a, it in zip(b16, items)) / len(items)
            d["accuracy_int8"] = sum(labels[str(self.argmax(a))] == it["label"] for a, it in zip(i8, items)) / len(items)
        res["demo"] = d
        return res

    # ------------------------------------------------------------------ server model and inputs
    def server_model(self):
        if hasattr(self, "_server_model"):
            return self._server_model
        if self.a.server_model:
            r = (os.path.abspath(self.a.server_model), "given with --server-model")
        elif self.mode == "tiny":
            r = (self.test_model_dir("classify"), "tiny test checkpoint (cls_factorized golden: hidden 96, 3 layers, "
                 "toy 300-piece spm)")
        else:
            demo = os.path.join(os.path.abspath(self.a.demo_dir), "models", "classify")
            dst = os.path.join(self.work, "server_model")
            os.makedirs(dst)
            if os.path.isfile(os.path.join(demo, "model.safetensors")):
                for f in ("model.safetensors", "spm.model"):
                    shutil.copyfile(os.path.join(demo, f), os.path.join(dst, f))
                with open(os.path.join(demo, "config.json")) as f:
                    cfg = json.load(f)
                cfg.setdefault("dserve", {})["max_length"] = 256
                with open(os.path.join(dst, "config.json"), "w") as f:
                    json.dump(cfg, f)
                r = (dst, f"demo classify model {demo} (hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
                          f"vocab {cfg['vocab_size']}), copied with dserve.max_length 256")
            else:
                os.rmdir(dst)
                self.run([PY, os.path.join(REPO, "bench", "serve", "make_random_checkpoint.py"),
                          self.test_model_dir("classify"), dst, "--hidden", "128", "--layers", "4", "--heads", "4",
                          "--intermediate", "512"], "server_model")
                r = (dst, "no demo model built: random checkpoint of the demo shape (hidden 128, 4 layers, 4 heads, "
                          "intermediate 512; make_random_checkpoint.py) with the toy 300-piece spm")
        self._server_model = r
        return r

    def make_texts(self, spm_path, path, n, lo, hi, seed):
        import sentencepiece as spm  # Debian python3-sentencepiece
        sp = spm.SentencePieceProcessor(model_file=spm_path)
        rng = random.Random(seed)
        lengths = []
        with open(path, "w") as f:
            for _ in range(n):
                target = rng.randint(lo, hi)
                while True:
                    words = []
                    while True:
                        words.append(rng.choice(WORDS))
                        k = len(sp.encode(" ".join(words))) + 2  # [CLS] ... [SEP]
                        if k >= target:
                            break
                    if k <= min(hi, target + 3):
                        break
                lengths.append(k)
                f.write(json.dumps({"text": " ".join(words)}) + "\n")
        return lengths

    # ------------------------------------------------------------------ server process
    def start_server(self, model_dir, extra, name):
        base = os.path.join(self.raw, f"server_{name}")
        out, err = open(base + ".out", "w"), open(base + ".log", "w")
        cmd = [self.dserve, "serve", "--model", f"classify={model_dir}", "--listen", "127.0.0.1:0",
               "--metrics-listen", "127.0.0.1:0", *shlex.split(self.a.server_args), *extra]
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=self.env)
        self.servers.append(proc)
        deadline = time.time() + 180
        port = mport = hport = None
        want_http = "--http-listen" in extra
        while time.time() < deadline:
            text = open(base + ".out").read()
            p = re.search(r"^dserve: listening on port (\d+)$", text, re.M)
            mp = re.search(r"^dserve: metrics on port (\d+)$", text, re.M)
            hp = re.search(r"^dserve: http on port (\d+)$", text, re.M)
            if p and mp and (hp or not want_http):
                port, mport, hport = int(p.group(1)), int(mp.group(1)), int(hp.group(1)) if hp else None
                break
            if proc.poll() is not None:
                raise Failure(f"server {' '.join(cmd[1:])} exited {proc.returncode}: {open(base + '.log').read()[-600:]}")
            time.sleep(0.1)
        if port is None:
            raise Failure(f"server {name} did not report its ports within 180 s")
        return {"proc": proc, "port": port, "mport": mport, "hport": hport, "name": name}

    def stop_server(self, s):
        s["proc"].terminate()
        try:
            s["proc"].wait(timeout=30)
        except subprocess.TimeoutExpired:
            s["proc"].kill()
            s["proc"].wait()
        self.servers.remove(s["proc"])

    @staticmethod
    def metrics(s):
        text = urllib.request.urlopen(f"http://127.0.0.1:{s['mport']}/metrics", timeout=30).read().decode()
        out = {}
        for m in re.finditer(r'^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$', text, re.M):
            name, labels, value = m.group(1), m.group(2) or "", m.group(3)
            if labels and 'model="' in labels and 'model="classify"' not in labels:
                continue
            out[name] = out.get(name, 0.0) + float(value)
        return out

    @staticmethod
    def cpu_seconds(pid):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    @staticmethod
    def rss_bytes(pid, key="VmRSS"):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise Failure(f"/proc/{pid}/status has no {key}")

    def load(self, s, inputs, concurrency, name, duration=None, warmup=0.0, requests=None, protocol="dserve"):
        cmd = [self.client, "--target", f"127.0.0.1:{s['port']}", "--json", "load", "--model", "classify", "--task",
               "classify", "--input", inputs, "--concurrency", str(concurrency), "--channels", "4",
               "--protocol", protocol]
        cmd += ["--requests", str(requests)] if requests else ["--duration-s", str(duration), "--warmup-s", str(warmup)]
        r = self.last_json(self.run(cmd, name))
        if set(r["codes"]) - {"OK"} or r["ok"] <= 0:
            raise Failure(f"load on {s['name']} failed: codes {r['codes']}")
        return r

    # ------------------------------------------------------------------ rows 5-6
    def section_serve(self):
        model, what = self.server_model()
        m = self.m
        js = os.path.join(self.raw, "serve_bench.json")
        out = self.run(["bash", os.path.join(REPO, "bench", "serve", "serve_bench.sh"), "--build-dir", self.build,
                        "--shared-dir", self.shared, "--model-dir", model, "--repeats", str(m["serve_repeats"]),
                        "--duration-s", str(m["serve_duration"]), "--warmup-s", str(m["serve_warmup"]),
                        "--engine-lines", str(m["engine_lines"]), "--server-args", self.a.server_args,
                        "--json", js], "serve_bench", timeout=1800)
        for line in out.splitlines():
            if line.startswith("repeat") or line.startswith("inputs"):
                log("serve_bench: " + line)
        with open(js) as f:
            r = json.load(f)
        r["model"] = what
        return r

    # ------------------------------------------------------------------ rows 7-8
    def section_packing(self):
        model, what = self.server_model()
        m = self.m
        texts = os.path.join(self.work, "mixed.jsonl")
        lengths = self.make_texts(os.path.join(model, "spm.model"), texts, 256, 8, 256, 7)
        servers = {"packing": self.start_server(model, ["--packing", "true"], "packing_on"),
                   "unsorted": self.start_server(model, ["--packing", "false"], "packing_off")}
        runs = {k: [] for k in servers}
        for r in range(1, m["pack_repeats"] + 1):
            for key, s in servers.items():
                m0, c0 = self.metrics(s), self.cpu_seconds(s["proc"].pid)
                ld = self.load(s, texts, LOAD_CLIENTS_MIXED, f"packing_{key}", m["pack_duration"], m["pack_warmup"])
                m1, c1 = self.metrics(s), self.cpu_seconds(s["proc"].pid)
                d = {k: m1.get(k, 0.0) - m0.get(k, 0.0) for k in
                     ("dserve_batch_tokens_sum", "dserve_batch_real_tokens_sum", "dserve_batch_size_sum",
                      "dserve_batch_size_count")}
                if d["dserve_batch_real_tokens_sum"] <= 0 or d["dserve_batch_size_sum"] <= 0:
                    raise Failure(f"server {key}: no batches counted in /metrics during the load")
                run = {"padded_tokens": d["dserve_batch_tokens_sum"], "real_tokens": d["dserve_batch_real_tokens_sum"],
                       "items": d["dserve_batch_size_sum"], "batches": d["dserve_batch_size_count"],
                       "padded_over_real": d["dserve_batch_tokens_sum"] / d["dserve_batch_real_tokens_sum"],
                       "mean_batch": d["dserve_batch_size_sum"] / max(1.0, d["dserve_batch_size_count"]),
                       "server_cpu_s": c1 - c0, "server_cpu_s_per_item": (c1 - c0) / d["dserve_batch_size_sum"],
                       "items_per_s": ld["items_per_s"]}
                runs[key].append(run)
                log(f"round {r}: {key}: padded/real {run['padded_over_real']:.3f}, mean batch {run['mean_batch']:.1f}, "
                    f"{run['items_per_s']:.1f} items/s, server CPU {1e3 * run['server_cpu_s_per_item']:.3f} ms/item")
        for s in list(servers.values()):
            self.stop_server(s)
        tok = self.last_json(self.run([self.tok_bench, model, texts, str(max(3, m["tok_repeats"]))], "tokenizer"))
        med = statistics.median
        res = {"model": what, "texts": len(lengths), "lengths": [min(lengths), max(lengths)],
               "mean_length": sum(lengths) / len(lengths), "clients": LOAD_CLIENTS_MIXED, "runs": runs,
               "padded_over_real": {k: med([x["padded_over_real"] for x in v]) for k, v in runs.items()},
               "server_cpu_s_per_item": med([x["server_cpu_s_per_item"] for x in runs["packing"]]),
               "tokenizer": tok, "tokenizer_s_per_item": tok["median_s"] / tok["strings"]}
        res["tokenizer_share"] = res["tokenizer_s_per_item"] / res["server_cpu_s_per_item"]
        return res

    # ------------------------------------------------------------------ row 15
    def section_delay(self):
        """Issue 16: what --max-queue-delay-us does to throughput and latency at 1, 8 and 64 closed-loop
        clients (short texts, 16-64 tokens). One server per delay, run in turn so they never compete; the mean
        formed batch comes from /metrics deltas over each load window."""
        model, what = self.server_model()
        m = self.m
        texts = os.path.join(self.work, "delay_texts.jsonl")
        self.make_texts(os.path.join(model, "spm.model"), texts, 256, 16, 64, 11)
        runs = {}
        for delay in DELAYS_US:
            s = self.start_server(model, ["--max-queue-delay-us", str(delay)], f"delay_{delay}")
            try:
                for clients in DELAY_CLIENTS:
                    m0 = self.metrics(s)
                    ld = self.load(s, texts, clients, f"delay_{delay}_c{clients}", m["delay_duration"],
                                   m["delay_warmup"])
                    m1 = self.metrics(s)
                    batches = m1.get("dserve_batch_size_count", 0) - m0.get("dserve_batch_size_count", 0)
                    items = m1.get("dserve_batch_size_sum", 0) - m0.get("dserve_batch_size_sum", 0)
                    run = {"items_per_s": ld["items_per_s"], "p50_ms": ld["latency_ms"]["p50"],
                           "p99_ms": ld["latency_ms"]["p99"], "mean_batch": items / max(1.0, batches)}
                    runs[f"{delay}/{clients}"] = run
                    log(f"delay {delay} us, {clients} clients: {run['items_per_s']:.1f} items/s, p50 "
                        f"{run['p50_ms']:.2f} ms, p99 {run['p99_ms']:.2f} ms, mean batch {run['mean_batch']:.1f}")
            finally:
                self.stop_server(s)
        return {"model": what, "delays_us": list(DELAYS_US), "clients": list(DELAY_CLIENTS), "runs": runs,
                "duration_s": m["delay_duration"]}

    def delay_table(self):
        """Row 15's sweep as a table: one line per (delay, clients)."""
        D = self.results.get("delay")
        if not D:
            return ""
        lines = ["| --max-queue-delay-us | clients | items/s | p50 ms | p99 ms | mean batch | items/s vs delay 0 |",
                 "|---|---|---|---|---|---|---|"]
        for delay in D["delays_us"]:
            for c in D["clients"]:
                r, base = D["runs"][f"{delay}/{c}"], D["runs"][f"{D['delays_us'][0]}/{c}"]
                lines.append(f"| {delay} us | {c} | {r['items_per_s']:.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                             f"{r['mean_batch']:.1f} | {r['items_per_s'] / base['items_per_s']:.2f}x |")
        return (f"Queue delay sweep (row 15; {D['model']}; {D['duration_s']} s closed-loop load per cell):\n\n"
                + "\n".join(lines) + "\n")

    # ------------------------------------------------------------------ row 16
    def section_http(self):
        """Issue 17: HTTP/JSON vs gRPC throughput and p99 at 64 closed-loop clients on one server and model
        (bench/serve/http_vs_grpc.py's method: its texts and wrk Lua script; windows alternate HTTP, gRPC)."""
        import importlib.util
        wrk = shutil.which("wrk")
        if not wrk:
            raise Failure("wrk is not installed (apt-get install wrk; deploy/install-deps.sh lists it)")
        spec = importlib.util.spec_from_file_location("http_vs_grpc", os.path.join(REPO, "bench", "serve",
                                                                                    "http_vs_grpc.py"))
        hvg = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hvg)
        model, what = self.server_model()
        m = self.m
        texts = hvg.make_texts()
        inputs = os.path.join(self.work, "http_texts.jsonl")
        with open(inputs, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
        lua = os.path.join(self.work, "http_classify.lua")
        with open(lua, "w") as f:
            f.write(hvg.LUA % ",".join(json.dumps(json.dumps({"model": "classify", "texts": [t]})) for t in texts))
        extra = ["--http-listen", "127.0.0.1:0", "--http-threads", "128"]
        s = self.start_server(model, extra, "http")
        runs = {"http": [], "grpc": []}
        url = f"http://127.0.0.1:{s['hport']}"
        duration = max(1, round(m["http_duration"]))
        try:
            for r in range(1, m["http_repeats"] + 1):
                if m["http_warmup"] > 0:  # wrk has no warm-up: a short uncounted run first
                    self.run([wrk, f"-c{HTTP_CLIENTS}", "-t2", f"-d{max(1, round(m['http_warmup']))}s", "-s", lua,
                              url], "http_wrk_warmup")
                out = self.run([wrk, f"-c{HTTP_CLIENTS}", "-t2", f"-d{duration}s", "--latency", "-s", lua, url],
                               "http_wrk")
                w = re.search(r"WRK_JSON (\{.*\})", out)
                if not w:
                    raise Failure("wrk printed no WRK_JSON summary: " + out[-600:])
                w = json.loads(w.group(1))
                ok = w["requests"] - w["non200"]
                if ok <= 0:
                    raise Failure(f"HTTP: no 200 response in the window ({w})")
                h = {"calls_per_s": ok / (w["duration_us"] / 1e6), "p50_ms": w["p50_us"] / 1000,
                     "p99_ms": w["p99_us"] / 1000, "non200": w["non200"], "socket_errors": w["errors"]}
                ld = self.load(s, inputs, HTTP_CLIENTS, "http_grpc", duration, m["http_warmup"])
                g = {"calls_per_s": ld["throughput_rps"], "p50_ms": ld["latency_ms"]["p50"],
                     "p99_ms": ld["latency_ms"]["p99"]}
                runs["http"].append(h)
                runs["grpc"].append(g)
                log(f"http round {r}: HTTP {h['calls_per_s']:.1f} calls/s (p50 {h['p50_ms']:.2f} ms, p99 "
                    f"{h['p99_ms']:.2f} ms, non-200 {h['non200']}) | gRPC {g['calls_per_s']:.1f} calls/s (p50 "
                    f"{g['p50_ms']:.2f} ms, p99 {g['p99_ms']:.2f} ms)")
        finally:
            self.stop_server(s)
        med = {door: {k: statistics.median(x[k] for x in v) for k in ("calls_per_s", "p50_ms", "p99_ms")}
               for door, v in runs.items()}
        return {"model": what, "clients": HTTP_CLIENTS, "duration_s": duration, "repeats": m["http_repeats"],
                "runs": runs, "median": med,
                "ratio": statistics.median(h["calls_per_s"] / g["calls_per_s"] for h, g in zip(runs["http"], runs["grpc"]))}

    def section_oip(self):
        """Issue 28: the Open Inference Protocol's gRPC door (ModelInfer) against dserve.v1 Classify, the same
        texts through both at HTTP_CLIENTS closed-loop clients on one server; windows alternate per repeat."""
        import importlib.util
        spec = importlib.util.spec_from_file_location("http_vs_grpc", os.path.join(REPO, "bench", "serve",
                                                                                    "http_vs_grpc.py"))
        hvg = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hvg)
        model, what = self.server_model()
        m = self.m
        inputs = os.path.join(self.work, "oip_texts.jsonl")
        with open(inputs, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in hvg.make_texts())
        s = self.start_server(model, [], "oip")
        runs = {"oip": [], "dserve": []}
        duration = max(1, round(m["http_duration"]))
        try:
            for r in range(1, m["http_repeats"] + 1):
                for door in ("dserve", "oip"):
                    ld = self.load(s, inputs, HTTP_CLIENTS, f"oip_{door}", duration, m["http_warmup"],
                                   protocol=door)
                    runs[door].append({"calls_per_s": ld["throughput_rps"], "p50_ms": ld["latency_ms"]["p50"],
                                       "p99_ms": ld["latency_ms"]["p99"]})
                o, d = runs["oip"][-1], runs["dserve"][-1]
                log(f"oip round {r}: OIP {o['calls_per_s']:.1f} calls/s (p99 {o['p99_ms']:.2f} ms) | dserve.v1 "
                    f"{d['calls_per_s']:.1f} calls/s (p99 {d['p99_ms']:.2f} ms)")
        finally:
            self.stop_server(s)
        med = {door: {k: statistics.median(x[k] for x in v) for k in ("calls_per_s", "p50_ms", "p99_ms")}
               for door, v in runs.items()}
        return {"model": what, "clients": HTTP_CLIENTS, "duration_s": duration, "repeats": m["http_repeats"],
                "runs": runs, "median": med,
                "ratio": statistics.median(o["calls_per_s"] / d["calls_per_s"] for o, d in zip(runs["oip"], runs["dserve"]))}

    # ------------------------------------------------------------------ row 9
    def rss_model(self):
        """A v3-base-encoder-sized classify checkpoint (random weights, torch-written) with the server model's
        tokenizer and vocabulary, so weights dominate the process (tiny mode: a tiny one)."""
        model, what = self.server_model()
        import torch  # Debian python3-torch
        sys.path.insert(0, os.path.join(REPO, "bench", "serve"))
        from make_random_checkpoint import tensors  # the HF tensor names and shapes
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        h, layers, heads, inter = (64, 2, 2, 128) if self.mode == "tiny" else (768, 12, 12, 3072)
        cfg.update(hidden_size=h, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=inter,
                   embedding_size=h, pooler_hidden_size=h)
        dst = os.path.join(self.work, "rss_model")
        os.makedirs(dst, exist_ok=True)
        shapes = tensors(cfg)
        header, offset = {}, 0
        for name, shape in shapes.items():
            n = 4
            for d in shape:
                n *= d
            header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + n]}
            offset += n
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        gen = torch.Generator().manual_seed(0)
        a = 0.02 * 3 ** 0.5
        with open(os.path.join(dst, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for name, shape in shapes.items():
                if name.endswith("LayerNorm.weight"):
                    t = torch.ones(shape)
                elif name.endswith(".bias"):
                    t = torch.zeros(shape)
                else:
                    t = torch.empty(shape).uniform_(-a, a, generator=gen)
                f.write(t.contiguous().numpy().tobytes())
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f)
        shutil.copyfile(os.path.join(model, "spm.model"), os.path.join(dst, "spm.model"))
        params = offset // 4
        return dst, (f"random checkpoint, {'tiny' if self.mode == 'tiny' else 'v3-base'} encoder shape (hidden {h}, {layers} layers, {heads} heads, "
                     f"intermediate {inter}), vocab {cfg['vocab_size']} and spm.model of the server model: "
                     f"{params / 1e6:.1f}M parameters, {offset / 2**20:.0f} MiB fp32")

    def section_rss(self):
        model, what = self.rss_model()
        with open(os.path.join(model, "config.json")) as f:
            cfg = json.load(f)
        m = self.m
        texts = os.path.join(self.work, "rss_texts.jsonl")
        lengths = self.make_texts(os.path.join(model, "spm.model"), texts, 64, 120, 128, 11)
        res = {"model": what, "requests": m["rss_requests"], "concurrency": m["rss_concurrency"],
               "text_tokens": [min(lengths), max(lengths)], "workers": {}}
        for w in (1, 2):
            s = self.start_server(model, ["--workers", str(w)], f"rss_workers{w}")
            time.sleep(0.5)
            idle = self.rss_bytes(s["proc"].pid)
            self.load(s, texts, m["rss_concurrency"], f"rss_workers{w}", requests=m["rss_requests"])
            warm, hwm = self.rss_bytes(s["proc"].pid), self.rss_bytes(s["proc"].pid, "VmHWM")
            mt = self.metrics(s)
            self.stop_server(s)
            res["workers"][w] = {"rss_idle": idle, "rss_warm": warm, "rss_peak": hwm,
                                 "batches": mt.get("dserve_batch_size_count", 0.0),
                                 "mean_batch": mt.get("dserve_batch_size_sum", 0.0) /
                                 max(1.0, mt.get("dserve_batch_size_count", 0.0))}
            log(f"rss: --workers {w}: idle {idle / 2**20:.0f} MiB, after load {warm / 2**20:.0f} MiB "
                f"(peak {hwm / 2**20:.0f} MiB), mean batch {res['workers'][w]['mean_batch']:.1f}")
        w1, w2 = res["workers"][1], res["workers"][2]
        res["ratio"] = w2["rss_warm"] / w1["rss_warm"]
        res["idle_ratio"] = w2["rss_idle"] / w1["rss_idle"]  # loaded, before any request: weights + runtime only
        res["activation_allowance"] = max(0, w1["rss_warm"] - w1["rss_idle"])
        res["bound"] = 1.1 + res["activation_allowance"] / w1["rss_warm"]
        # Analytic: the tensors of one layer's forward alive at once, fp32, at the largest batch the load forms.
        b, l, hdim, heads, inter = (m["rss_concurrency"], max(lengths), cfg["hidden_size"], cfg["num_attention_heads"],
                                    cfg["intermediate_size"])
        res["activation_analytic"] = 4 * (b * l * (6 * hdim + inter) + 4 * b * heads * l * l)
        return res

    # ------------------------------------------------------------------ report
    # ------------------------------------------------------------------ row 10
    def section_albert(self):
        """The second model family: our ALBERT encoder against the eager ALBERT
        (bench/eager/albert_eager.py, tuned malloc as for row 1), fp32 8x128,
        interleaved rounds, ratio within each round. fp32 only: on CPUs
        without AVX-512 a bf16 albert-base forward takes minutes in both."""
        m = self.m
        if self.mode == "tiny":  # the golden checkpoint's config; eager times the checkpoint itself
            d = os.path.join(self.shared, "goldens", "albert", "albert_cls")
            ours_shape, eager_arg, shape = os.path.join(d, "config.json"), ["--model", d], "albert_cls golden config"
        else:
            ours_shape, eager_arg, shape = "albert-base", ["--shape", "albert-base"], "albert-base-v2"
        rounds = []
        for r in range(1, m["rounds"] + 1):
            ours = self.ours(8, "fp32", m["enc_repeats"], r, shape=ours_shape)
            eager = {"fp32": self.eager(8, "fp32", "tuned", m["enc_repeats"], r, shape_arg=eager_arg)}
            rounds.append({"ours": ours, "eager": eager})
        return {"shape": shape, "rounds": rounds,
                "ratio_fp32": [rd["eager"]["fp32"]["median_s"] / rd["ours"]["dtypes"]["fp32"]["median_s"]
                               for rd in rounds],
                "ours_fp32_s": statistics.median(rd["ours"]["dtypes"]["fp32"]["median_s"] for rd in rounds),
                "eager_fp32_s": statistics.median(rd["eager"]["fp32"]["median_s"] for rd in rounds)}

    def section_int8(self):
        """int8 against ONNX Runtime's int8 (issue 27): our `--dtypes int8` (dense layers quantized at load) and
        ORT on the export quantized as its own quantizer does it (bench/onnx/quantize_onnx.py), 8x128 and 1x128,
        back to back in each round; ORT's int8 graph is checked against its fp32 graph first."""
        m = self.m
        rounds = []
        for r in range(1, m["rounds"] + 1):
            rd = {}
            for b, reps in ((8, m["enc_repeats"]), (1, m["lat_repeats"])):
                rd[f"ours_{b}"] = self.ours(b, "int8", reps, r)["dtypes"]["int8"]["median_s"]
                rd[f"ort_{b}"] = self.ort_round("int8", b, 128, reps, m["warmup"], r, int8=True)
            rounds.append(rd)
        med = statistics.median
        res = {"rounds": rounds, "shape": "v3-base" if self.mode != "tiny" else "cls_factorized golden config",
               "warmup": m["warmup"], "repeats": {"8": m["enc_repeats"], "1": m["lat_repeats"]}}
        for b in (8, 1):
            res[f"ours_{b}_s"] = med(rd[f"ours_{b}"] for rd in rounds)
        o = self.ort_summary(rounds, {"8": ("ort_8", lambda rd: rd["ours_8"]),
                                      "1": ("ort_1", lambda rd: rd["ours_1"])})
        if o is not None:
            runs = [rd[k] for rd in rounds for k in ("ort_8", "ort_1")]
            o["argmax_agree"] = sum(x["vs_fp32_graph"]["argmax_agree"] for x in runs)
            o["sequences"] = sum(x["vs_fp32_graph"]["sequences"] for x in runs)
            o["hidden_rel_l2"] = max(x["vs_fp32_graph"]["hidden_rel_l2"] for x in runs)
            o["max_abs_diff_logits_vs_fp32"] = max(x["vs_fp32_graph"]["max_abs_diff_logits"] for x in runs)
            o["quantized"] = self.ort_export(8, 128, "v3", True).get("int8")
        res["ort"] = o
        return res

    def section_v1(self):
        """DeBERTa v1 Base (issue 26): `dserve bench encoder --shape deberta-base` (random v1 weights through the
        v1 family's loader onto our encoder) vs the eager v1 (eager_baseline.py --shape deberta-base, tuned
        malloc) and ORT on its export, fp32 8x128, back to back in each round."""
        m = self.m
        ours_shape, ckpt = self.v1_shape()
        eager_arg = ["--model", ckpt] if ckpt else ["--shape", "deberta-base"]
        rounds = []
        for r in range(1, m["rounds"] + 1):
            rounds.append({
                "ours": self.ours(8, "fp32", m["enc_repeats"], r, shape=ours_shape)["dtypes"]["fp32"]["median_s"],
                "eager": self.eager(8, "fp32", "tuned", m["enc_repeats"], r, shape_arg=eager_arg)["median_s"],
                "ort": self.ort_round("v1", 8, 128, m["enc_repeats"], m["warmup"], r, family="v1")})
        med = statistics.median
        res = {"rounds": rounds, "shape": "deberta-base (v1)" if not ckpt else "v1 cls_mnli golden config",
               "ours_s": med(rd["ours"] for rd in rounds), "eager_s": med(rd["eager"] for rd in rounds),
               "ratio_eager": [rd["eager"] / rd["ours"] for rd in rounds]}
        o = self.ort_summary(rounds, {"8": ("ort", lambda rd: rd["ours"])})
        res["ort"] = o
        return res

    def rows(self, machine):
        E, A, S, P, R = (self.results.get(k) for k in ("encoder", "argmax", "serve", "packing", "rss"))
        rows = []

        def row(n, measure, config, measured, target, ok, section, extra=None, ort=False, skip=None):
            needs = section if isinstance(section, tuple) else (section,)
            failed = [s for s in needs if s in self.errors]
            if failed:
                measured, result = "; ".join(f"ERROR ({s}): {self.errors[s]}" for s in failed), "ERROR"
            elif any(self.results.get(s) is None for s in needs):
                measured, result = "not run (--sections)", "SKIP"
            elif ort and needs[0] in self.ort_errors:  # the ORT peer itself failed (or its check did)
                measured, result = f"ERROR (ORT): {self.ort_errors[needs[0]]}", "ERROR"
            elif ort and self.ort_skip:  # not installed (or --no-ort): said, never faked
                measured, result = self.ort_skip, "SKIP"
            elif skip and skip():
                measured, result = skip(), "SKIP"
            else:
                result = "PASS" if ok() else "MISS"
                measured = measured()
            if callable(config):
                config = config() if result in ("PASS", "MISS") else "-"
            rows.append({"row": n, "measure": measure, "config": config,
                         "measured": measured, "target": target, "result": result,
                         "value": (extra() if extra and result in ("PASS", "MISS") else None)})

        thr = self.threads
        shape = E["shape"] if E else "v3-base"

        def ort_beside(section, key, fmt=lambda x: f"{x:.4f} s"):
            """The ORT figure next to an eager one (rows 1, 3, 13), or why there is none."""
            if section in self.ort_errors:
                return f"; ORT: ERROR ({self.ort_errors[section][:200]})"
            o = (self.results.get(section) or {}).get("ort")
            if o is None:
                return f"; {self.ort_skip or 'ORT: no figure'}"
            return (f"; ONNX Runtime fp32 {fmt(o[key + '_s'])} (ours vs ORT "
                    f"{statistics.median(o['ratio_' + key]):.2f}x)")

        def ort_cfg(o):
            return (f"onnxruntime-node {o['version']} CPU EP, graph optimisation {o['graph_optimization']}, "
                    f"{o['threads']} intra-op threads, opset {o['opset']} export of eager_baseline.py ({o['shapes']} "
                    f"shapes, the same random weights and inputs); ORT vs eager fp32: max |diff| logits "
                    f"{o['max_abs_diff_logits']:.2e} (largest |logit| {o['max_abs_logit']:.3g}), last hidden state "
                    f"{o['max_abs_diff_hidden']:.2e} (limit {ORT_MAX_DIFF:g})")
        reps = (f"{self.m['rounds']} round(s), each process the median of {self.m['enc_repeats']} forwards; ratio = "
                f"median over rounds of the ratio within a round")

        def rounds_txt(key, fmt="{:.2f}"):
            xs = E["ratios"][key]
            return ", ".join(fmt.format(x) for x in xs) + f"; spread {spread(xs, fmt)}"

        def eager_txt(dtype, which="eager_8"):
            if which == "eager_1":
                return ", ".join(f"{k.split('/')[1]} malloc {1e3 * v:.1f} ms" for k, v in E[which].items()
                                 if k.startswith(dtype + "/"))
            return ", ".join(f"{k.split('/')[1]} malloc {v:.4f} s" for k, v in E[which].items()
                             if k.startswith(dtype + "/"))

        def ratio(key):
            return statistics.median(E["ratios"][key])

        def r1():
            o = E["ours_8"]["fp32"]["median_s"]
            return (f"{ratio('fp32_8'):.2f}x (per round: {rounds_txt('fp32_8')}); medians over rounds: ours {o:.4f} s "
                    f"({8 / o:.2f} seq/s), eager fp32 {eager_txt('fp32')}; faster eager env per round: "
                    f"{', '.join(E['best_env']['fp32_8'])}{ort_beside('encoder', '8')}")
        row(1, "encoder fp32 throughput vs eager fp32 (best env), batch 8x128",
            f"{shape}, random weights, {thr} threads, {reps}; `dserve bench encoder` vs eager_baseline.py back to back",
            r1, ">= 1.3x", lambda: ratio("fp32_8") >= 1.3, "encoder", lambda: ratio("fp32_8"))

        def no_bf16():
            return None if "bf16" in self.dtypes else "bf16 not timed (--dtypes fp32)"

        def argmax_same():
            g, d = A["goldens"], A["demo"]
            return g["bf16_eq_fp32"] == g["n"] and g["bf16_eq_hf"] == g["n"] and d["bf16_eq_fp32"] == d["n"]

        def r2():
            o = E["ours_8"]["bf16"]["median_s"]
            g, d = A["goldens"], A["demo"]
            acc = (f" (accuracy fp32 {d['accuracy_fp32']:.3f}, bf16 {d['accuracy_bf16']:.3f})"
                   if "accuracy_fp32" in d else "")
            return (f"{ratio('bf16_8'):.2f}x (per round: {rounds_txt('bf16_8')}); medians over rounds: ours {o:.4f} s "
                    f"({8 / o:.2f} seq/s), eager bf16 {eager_txt('bf16')}; argmax bf16 = fp32 on goldens "
                    f"{g['bf16_eq_fp32']}/{g['n']} (= HF logits {g['bf16_eq_hf']}/{g['n']}), on demo data "
                    f"{d['bf16_eq_fp32']}/{d['n']}{acc}; faster eager env per round: {', '.join(E['best_env']['bf16_8'])}; "
                    f"ORT: n/a in bf16 (ONNX Runtime's x86 CPU EP has no bf16 GEMM path; its fp32 figure is row 11)")
        row(2, "encoder bf16 throughput vs eager bf16, classification argmax unchanged on goldens and demo data",
            lambda: (f"{shape}, 8x128, {thr} threads, {reps}; argmax: `dserve forward --dtype bf16` vs fp32 on the "
                     f"cls_factorized goldens ({A['goldens']['n']} sequences) and {A['demo']['what']}"),
            r2, ">= 1.3x and argmax unchanged", lambda: argmax_same() and ratio("bf16_8") >= 1.3,
            ("encoder", "argmax"), lambda: ratio("bf16_8"), skip=no_bf16)

        def r3():
            o = E["ours_1_fp32_s"]
            return (f"{ratio('fp32_1'):.2f}x faster (per round: {rounds_txt('fp32_1')}); medians over rounds: ours "
                    f"{1e3 * o:.1f} ms, eager fp32 {eager_txt('fp32', 'eager_1')}"
                    f"{ort_beside('encoder', '1', lambda x: f'{1e3 * x:.1f} ms')}")
        row(3, "single-request latency, batch 1x128, fp32, vs eager",
            f"{shape}, {thr} threads, {self.m['rounds']} round(s), each process the median of {self.m['lat_repeats']} "
            f"forwards; ratio = median over rounds of faster eager / ours within a round",
            r3, ">= 1.5x faster", lambda: ratio("fp32_1") >= 1.5, "encoder", lambda: ratio("fp32_1"))

        def r4():
            b = E["ours_8"]["bf16"]
            return (f"{100 * ratio('mfu_bf16'):.1f}% (per round: {rounds_txt('mfu_bf16', '{:.1%}')}); medians: "
                    f"{b['model_gflops']:.1f} model GFLOP/s ({E['gflop_per_forward_8x128']:.1f} GFLOP per forward / "
                    f"{b['median_s']:.4f} s) vs bf16 matmul {b['matmul_gflops']:.1f} GFLOP/s; fp32 "
                    f"{100 * E['ours_8']['fp32']['mfu_vs_matmul']:.1f}% of the fp32 GEMM peak {E['ours_8']['fp32']['matmul_gflops']:.1f}")
        row(4, "bf16 model-FLOP utilisation vs measured bf16 matmul peak",
            f"{shape}, 8x128, {thr} threads; peak = the fastest of our bf16 GEMMs (2048^3 torch.matmul, pre-packed 2048^3, "
            f"pre-packed at the forward's own FFN shape) in the same `dserve bench encoder` process; "
            f"median over rounds",
            r4, ">= 75% (issue 27)", lambda: ratio("mfu_bf16") >= 0.75, "encoder", lambda: ratio("mfu_bf16"),
            skip=no_bf16)

        sm = S["medians"] if S else {}
        srv_cfg = (f"{S['model'] if S else ''}; bench/serve/serve_bench.sh, median of {self.m['serve_repeats']} repeat(s), "
                   f"{self.m['serve_duration']} s window after {self.m['serve_warmup']} s warm-up")
        row(5, "server end to end (64 concurrent clients, ~128-token texts) vs bare engine on the same inputs",
            srv_cfg + "; engine = `dserve forward --batch-size 32` on the same token ids",
            lambda: (f"{sm['ratio_server_vs_engine']:.3f}: server {sm['server_items_per_s']:.1f} items/s, "
                     f"engine {sm['engine_items_per_s']:.1f} items/s"),
            ">= 0.90", lambda: sm["ratio_server_vs_engine"] >= 0.90, "serve", lambda: sm["ratio_server_vs_engine"])
        row(6, "dynamic batching vs --max-batch-size 1, short texts (<= 32 tokens), 32 clients",
            srv_cfg + "; server defaults vs --max-batch-size 1",
            lambda: (f"{sm['ratio_batching']:.2f}x: batched {sm['batched_items_per_s']:.1f} items/s, "
                     f"batch size 1 {sm['batch1_items_per_s']:.1f} items/s; mean formed batch {S['mean_formed_batch']}"),
            ">= 3x", lambda: sm["ratio_batching"] >= 3.0, "serve", lambda: sm["ratio_batching"])

        def pcfg():
            return (f"{P['model']}; {P['texts']} texts of {P['lengths'][0]}-{P['lengths'][1]} tokens (mean "
                    f"{P['mean_length']:.0f}), {P['clients']} clients, {self.m['pack_duration']} s load x "
                    f"{self.m['pack_repeats']} repeat(s) per server; deltas of dserve_batch_tokens_sum / "
                    f"dserve_batch_real_tokens_sum, `--packing true` vs `--packing false`")
        row(7, "padded tokens / real tokens with length-aware packing, mixed lengths 8-256",
            lambda: pcfg() if P else "", lambda: (
                f"{P['padded_over_real']['packing']:.3f} with packing (unsorted: {P['padded_over_real']['unsorted']:.3f}); "
                f"mean batch {statistics.median([x['mean_batch'] for x in P['runs']['packing']]):.1f} / "
                f"{statistics.median([x['mean_batch'] for x in P['runs']['unsorted']]):.1f}"),
            "<= 1.15 (unsorted beside it)", lambda: P["padded_over_real"]["packing"] <= 1.15, "packing",
            lambda: P["padded_over_real"]["packing"])
        row(8, "tokenizer share of end-to-end CPU time",
            lambda: (f"{P['model']}; same mixed texts; tokenizer_bench (1 thread, median of "
                     f"{P['tokenizer']['repeats']}) CPU per item / server process CPU per item (/proc/PID/stat "
                     f"utime+stime over dserve_batch_size_sum) under the row-7 packing load" if P else ""),
            lambda: (f"{100 * P['tokenizer_share']:.2f}%: tokenizer {1e6 * P['tokenizer_s_per_item']:.1f} us/item, "
                     f"server {1e3 * P['server_cpu_s_per_item']:.3f} ms CPU/item"),
            "<= 5%", lambda: P["tokenizer_share"] <= 0.05, "packing", lambda: P["tokenizer_share"])
        mib = 2 ** 20
        row(9, "RSS with 2 workers vs 1 worker",
            lambda: (f"{R['model']}; RSS (VmRSS) after {R['requests']} requests of {R['text_tokens'][0]}-"
                     f"{R['text_tokens'][1]} tokens at concurrency {R['concurrency']}, --workers 2 vs --workers 1; "
                     f"allowance = 1-worker RSS growth under that load; PASS needs both the loaded and the idle "
                     f"figure within bounds" if R else ""),
            lambda: (f"{R['ratio']:.3f}x: {R['workers'][2]['rss_warm'] / mib:.0f} vs {R['workers'][1]['rss_warm'] / mib:.0f} MiB "
                     f"after the load (mean batch {R['workers'][2]['mean_batch']:.1f} vs "
                     f"{R['workers'][1]['mean_batch']:.1f}); idle (loaded, no request yet) "
                     f"{R['workers'][2]['rss_idle'] / mib:.0f} vs {R['workers'][1]['rss_idle'] / mib:.0f} MiB = "
                     f"{R['idle_ratio']:.3f}x (<= 1.1x); "
                     f"allowed {R['bound']:.3f}x = 1.1 + activations {R['activation_allowance'] / mib:.0f} MiB measured "
                     f"(analytic {R['activation_analytic'] / mib:.0f} MiB)"),
            "<= 1.1x + activations", lambda: R["ratio"] <= R["bound"] and R["idle_ratio"] <= 1.1, "rss",
            lambda: R["ratio"])
        AL = self.results.get("albert")
        row(10, "ALBERT encoder fp32 throughput vs eager ALBERT fp32, batch 8x128",
            lambda: (f"{AL['shape']}, random weights, {thr} threads, {self.m['rounds']} round(s); `dserve bench "
                     f"encoder` vs eager_baseline.py (bench/eager/albert_eager.py), tuned malloc" if AL else ""),
            lambda: (f"fp32 {statistics.median(AL['ratio_fp32']):.2f}x (per round: "
                     f"{', '.join(f'{x:.2f}' for x in AL['ratio_fp32'])}; ours {AL['ours_fp32_s']:.4f} s, eager "
                     f"{AL['eager_fp32_s']:.4f} s)"),
            ">= 1.0x", lambda: statistics.median(AL["ratio_fp32"]) >= 1.0, "albert",
            lambda: statistics.median(AL["ratio_fp32"]))

        # Issue 19: ONNX Runtime, the engine a user would pick instead, in the same rounds; long sequences.
        EO = (E or {}).get("ort")
        med = statistics.median

        def per_round(xs):
            return ", ".join(f"{x:.2f}" for x in xs) + f"; spread {spread(xs)}"
        row(11, "encoder fp32 throughput vs ONNX Runtime fp32, batch 8x128",
            lambda: f"{shape}, {thr} threads, {reps}; {ort_cfg(EO)}; run right after eager in each round of row 1",
            lambda: (f"{med(EO['ratio_8']):.2f}x (per round: {per_round(EO['ratio_8'])}); medians over rounds: ours "
                     f"{E['ours_8']['fp32']['median_s']:.4f} s, ORT {EO['8_s']:.4f} s, eager fp32 "
                     f"{min(v for k, v in E['eager_8'].items() if k.startswith('fp32/')):.4f} s (faster env)"),
            ">= 1.2x", lambda: med(EO["ratio_8"]) >= 1.2, "encoder", lambda: med(EO["ratio_8"]), ort=True)
        row(12, "single-request latency, batch 1x128, fp32, vs ONNX Runtime",
            lambda: (f"{shape}, {thr} threads, {self.m['rounds']} round(s), each process the median of "
                     f"{self.m['lat_repeats']} runs; {ort_cfg(EO)}; same rounds as row 3"),
            lambda: (f"{med(EO['ratio_1']):.2f}x faster (per round: {per_round(EO['ratio_1'])}); medians over rounds: "
                     f"ours {1e3 * E['ours_1_fp32_s']:.1f} ms, ORT {1e3 * EO['1_s']:.1f} ms, eager fp32 "
                     f"{1e3 * min(E['eager_1'].values()):.1f} ms (faster env)"),
            ">= 1.2x faster", lambda: med(EO["ratio_1"]) >= 1.2, "encoder", lambda: med(EO["ratio_1"]), ort=True)

        LG = self.results.get("long")
        LO = (LG or {}).get("ort")
        L = LG["length"] if LG else self.m["long_length"]

        def long_cfg():
            return (f"{LG['shape']}, {thr} threads, {len(LG['rounds'])} round(s) of their own: ours, eager (tuned "
                    f"malloc) and ORT back to back at 8x{L} then 1x{L}, each process the median of {LG['repeats']} "
                    f"forwards after {LG['warmup']} warm-up; ratio = median over rounds of the ratio within a round")

        def growth():
            """Cost per token at L over cost per token at 128 (batch 8), per engine: how attention's O(L^2) and
            the c2p/p2c gathers show up. Needs the encoder section of the same run."""
            if not E:
                return ""
            f = L / 128
            parts = [f"ours {LG['ours_8_s'] / E['ours_8']['fp32']['median_s'] / f:.2f}x",
                     f"eager {LG['eager_8_s'] / E['eager_8']['fp32/tuned'] / f:.2f}x"]
            if LO and EO:
                parts.append(f"ORT {LO['8_s'] / EO['8_s'] / f:.2f}x")
            return f"; cost per token 8x{L} over 8x128: " + ", ".join(parts)
        row(13, f"long sequences: encoder fp32 8x{L} vs eager fp32 (1x{L} beside it)",
            lambda: long_cfg(),
            lambda: (f"{med(LG['ratio_eager_8']):.2f}x (per round: {per_round(LG['ratio_eager_8'])}); medians: ours "
                     f"{LG['ours_8_s']:.4f} s, eager {LG['eager_8_s']:.4f} s; 1x{L}: "
                     f"{med(LG['ratio_eager_1']):.2f}x (per round: {per_round(LG['ratio_eager_1'])}; ours {1e3 * LG['ours_1_s']:.1f} ms, eager "
                     f"{1e3 * LG['eager_1_s']:.1f} ms){ort_beside('long', '8')}{growth()}"),
            ">= 3x (issue 27)", lambda: med(LG["ratio_eager_8"]) >= 3.0, "long", lambda: med(LG["ratio_eager_8"]))
        row(14, f"long sequences: encoder fp32 8x{L} vs ONNX Runtime fp32 (1x{L} beside it)",
            lambda: f"{long_cfg()}; {ort_cfg(LO)}",
            lambda: (f"{med(LO['ratio_8']):.2f}x (per round: {per_round(LO['ratio_8'])}); medians: ours "
                     f"{LG['ours_8_s']:.4f} s, ORT {LO['8_s']:.4f} s; 1x{L}: {med(LO['ratio_1']):.2f}x (row 20)"),
            ">= 1.2x", lambda: med(LO["ratio_8"]) >= 1.2, "long", lambda: med(LO["ratio_8"]), ort=True)
        D = self.results.get("delay")

        def delay_measured():
            best = {c: max(D["delays_us"], key=lambda d: D["runs"][f"{d}/{c}"]["items_per_s"]) for c in D["clients"]}
            worst_p99 = {c: D["runs"][f"{max(D['delays_us'])}/{c}"]["p99_ms"] / max(
                1e-9, D["runs"][f"0/{c}"]["p99_ms"]) for c in D["clients"]}
            return ("best throughput at " + ", ".join(f"{c} clients: delay {best[c]} us" for c in D["clients"])
                    + "; p99 at the largest delay vs 0: "
                    + ", ".join(f"{c} clients {worst_p99[c]:.2f}x" for c in D["clients"]) + " (table below)")
        row(15, "queue delay sweep: --max-queue-delay-us 0 / 2000 / 10000 at 1, 8, 64 clients (advice in "
                "docs/operations.md)",
            lambda: f"{D['model']}; texts of 16-64 tokens; {D['duration_s']} s load per cell, one server per delay",
            delay_measured, "measured (informational)", lambda: True, "delay", lambda: 0.0)
        H = self.results.get("http")
        row(16, f"HTTP/JSON vs gRPC: calls/s and p99 at {HTTP_CLIENTS} clients, same server and model (issue 17)",
            lambda: (f"{H['model']}; one text per call; HTTP: wrk -c{H['clients']} -t2 POST /v1/classify, gRPC: "
                     f"dserve-client load --concurrency {H['clients']} --channels 4; {H['repeats']} x "
                     f"{H['duration_s']} s windows, alternating; load generators on the same machine"),
            lambda: (f"HTTP/gRPC {H['ratio']:.2f}x: HTTP {H['median']['http']['calls_per_s']:.1f} calls/s, p99 "
                     f"{H['median']['http']['p99_ms']:.2f} ms; gRPC {H['median']['grpc']['calls_per_s']:.1f} calls/s, "
                     f"p99 {H['median']['grpc']['p99_ms']:.2f} ms (per repeat: "
                     + ", ".join(f"{h['calls_per_s'] / g['calls_per_s']:.2f}" for h, g in
                                 zip(H["runs"]["http"], H["runs"]["grpc"])) + ")"),
            f">= {HTTP_TARGET}x", lambda: H["ratio"] >= HTTP_TARGET, "http", lambda: float(H["ratio"]))

        # Issue 19: int8 dynamic quantization of the dense layers, against our own fp32.
        def r17():
            i, f = E["ours_8"]["int8"], E["ours_8"]["fp32"]
            return (f"{ratio('int8_8'):.2f}x (per round: {rounds_txt('int8_8')}); medians over rounds: int8 "
                    f"{i['median_s']:.4f} s ({8 / i['median_s']:.2f} seq/s), fp32 {f['median_s']:.4f} s; int8 dense "
                    f"GEMM peak (Int8Linear at 2048^3 and at the FFN shape, activation quantization included) "
                    f"{i['matmul_gflops']:.0f} GOP/s vs fp32 GEMM peak {f['matmul_gflops']:.0f} GFLOP/s")
        row(17, "encoder int8 (dynamic quantization of the dense layers) vs our fp32, batch 8x128",
            f"{shape}, random weights, {thr} threads, {reps}; `dserve bench encoder --dtypes ...,int8`, int8 and "
            f"fp32 in the same process",
            r17, ">= 1.6x", lambda: ratio("int8_8") >= 1.6, "encoder", lambda: ratio("int8_8"))

        def int8_agreement():
            return A["demo"]["int8_eq_fp32"] / A["demo"]["n"]

        def r18():
            g, d = A["goldens"], A["demo"]
            acc = (f"; accuracy on its labels fp32 {d['accuracy_fp32']:.3f}, int8 {d['accuracy_int8']:.3f}"
                   if "accuracy_int8" in d else "")
            return (f"{100 * int8_agreement():.2f}% on demo data ({d['int8_eq_fp32']}/{d['n']}, max |int8 - fp32| "
                    f"logit {d['int8_max_abs_diff']:.3g}){acc}; goldens: int8 = fp32 {g['int8_eq_fp32']}/{g['n']} "
                    f"(= HF logits {g['int8_eq_hf']}/{g['n']}, max |int8 - fp32| logit {g['int8_max_abs_diff']:.3g})")
        row(18, "int8 classification argmax agreement with fp32 (demo data; goldens all kept)",
            lambda: (f"`dserve forward --dtype int8` vs `--dtype fp32` on the cls_factorized goldens "
                     f"({A['goldens']['n']} sequences) and {A['demo']['what']}"),
            r18, ">= 99% and every golden argmax kept",
            lambda: int8_agreement() >= 0.99 and A["goldens"]["int8_eq_fp32"] == A["goldens"]["n"]
            and A["goldens"]["int8_eq_hf"] == A["goldens"]["n"], "argmax", int8_agreement)
        O = self.results.get("oip")
        row(19, f"Open Inference Protocol gRPC vs dserve.v1 gRPC: calls/s and p99 at {HTTP_CLIENTS} clients, same "
                "server and model (issue 28)",
            lambda: (f"{O['model']}; one text per call; dserve-client load --concurrency {O['clients']} --channels 4, "
                     f"--protocol oip (ModelInfer, TEXT BYTES tensor) vs --protocol dserve (Classify); "
                     f"{O['repeats']} x {O['duration_s']} s windows, alternating"),
            lambda: (f"OIP/dserve.v1 {O['ratio']:.2f}x: OIP {O['median']['oip']['calls_per_s']:.1f} calls/s, p99 "
                     f"{O['median']['oip']['p99_ms']:.2f} ms; dserve.v1 {O['median']['dserve']['calls_per_s']:.1f} "
                     f"calls/s, p99 {O['median']['dserve']['p99_ms']:.2f} ms (per repeat: "
                     + ", ".join(f"{o['calls_per_s'] / d['calls_per_s']:.2f}" for o, d in
                                 zip(O["runs"]["oip"], O["runs"]["dserve"])) + ")"),
            f">= {OIP_TARGET}x", lambda: O["ratio"] >= OIP_TARGET, "oip", lambda: float(O["ratio"]))

        # Issue 27's targets not covered above (rows 4, 11-14 carry the others).
        row(20, f"long sequences: single request 1x{L} fp32 vs ONNX Runtime fp32",
            lambda: f"{long_cfg()}; {ort_cfg(LO)}",
            lambda: (f"{med(LO['ratio_1']):.2f}x (per round: {per_round(LO['ratio_1'])}); medians: ours "
                     f"{1e3 * LG['ours_1_s']:.1f} ms, ORT {1e3 * LO['1_s']:.1f} ms"),
            ">= 1.2x (issue 27)", lambda: med(LO["ratio_1"]) >= 1.2, "long", lambda: med(LO["ratio_1"]), ort=True)

        def bf16_vs_fp32():
            return [rd["ours_8"]["dtypes"]["fp32"]["median_s"] / rd["ours_8"]["dtypes"]["bf16"]["median_s"]
                    for rd in E["rounds"]]

        def no_bf16_isa():
            if "bf16" not in self.dtypes:
                return "bf16 not timed (--dtypes fp32)"
            if not any(f in machine["flags"].split(",") for f in ("avx512_bf16", "amx_bf16")):
                return "not applicable: no avx512_bf16 / amx_bf16 on this CPU (the target is for machines with it)"
            return None
        row(21, "encoder bf16 vs our own fp32, batch 8x128 (machines with avx512_bf16)",
            lambda: (f"{shape}, {thr} threads, {reps}; bf16 and fp32 in the same `dserve bench encoder` process "
                     f"(row 1's); ratio = our fp32 s / our bf16 s"),
            lambda: (f"{med(bf16_vs_fp32()):.2f}x (per round: {per_round(bf16_vs_fp32())}); medians over rounds: "
                     f"bf16 {E['ours_8']['bf16']['median_s']:.4f} s, fp32 {E['ours_8']['fp32']['median_s']:.4f} s; "
                     f"matmul peaks bf16 {E['ours_8']['bf16']['matmul_gflops']:.0f}, fp32 "
                     f"{E['ours_8']['fp32']['matmul_gflops']:.0f} GFLOP/s"),
            ">= 1.3x (issue 27)", lambda: med(bf16_vs_fp32()) >= 1.3, "encoder", lambda: med(bf16_vs_fp32()),
            skip=no_bf16_isa)

        I8 = self.results.get("int8")
        IO = (I8 or {}).get("ort")

        def int8_cfg():
            q = IO.get("quantized") or {}
            return (f"{I8['shape']}, {thr} threads, {len(I8['rounds'])} round(s): `dserve bench encoder --dtypes int8` "
                    f"(dense layers quantized at load) and ORT back to back at 8x128 then 1x128, each process the "
                    f"median of {I8['repeats']['8']} / {I8['repeats']['1']} forwards after {I8['warmup']} warm-ups; "
                    f"ORT: onnxruntime-node {IO['version']} CPU EP, graph optimisation {IO['graph_optimization']}, "
                    f"{IO['threads']} intra-op threads, the row-11 export rewritten by bench/onnx/quantize_onnx.py "
                    f"(python3-onnx {q.get('onnx_version', '?')}: {q.get('matmuls_quantized', '?')} MatMuls, "
                    f"{q.get('format', '?')}; weights {q.get('weights', '?')}"
                    f"{': 7 bits because this CPU has no VNNI, as ORT advises' if q.get('reduce_range') else ''}"
                    f"; activations "
                    f"{q.get('activations', '?')}), checked against ORT's fp32 graph on the timed inputs: argmax "
                    f"{IO['argmax_agree']}/{IO['sequences']} kept, max |int8 - fp32| logit "
                    f"{IO['max_abs_diff_logits_vs_fp32']:.3g}, last hidden state relative L2 "
                    f"{IO['hidden_rel_l2']:.3g} (limit {ORT_INT8_MAX_REL:g})")
        for n, b in ((22, 8), (23, 1)):
            row(n, f"encoder int8 vs ONNX Runtime int8 (dynamic quantization, its own scheme), batch {b}x128",
                lambda: int8_cfg(),
                lambda b=b: (f"{med(IO['ratio_' + str(b)]):.2f}x (per round: {per_round(IO['ratio_' + str(b)])}); "
                             f"medians: ours int8 {1e3 * I8[f'ours_{b}_s']:.1f} ms, ORT int8 "
                             f"{1e3 * IO[str(b) + '_s']:.1f} ms"),
                ">= 1.2x (issue 27)", lambda b=b: med(IO["ratio_" + str(b)]) >= 1.2, "int8",
                lambda b=b: med(IO["ratio_" + str(b)]), ort=True)

        V = self.results.get("v1")
        VO = (V or {}).get("ort")

        def v1_cfg():
            return (f"{V['shape']}: hidden 768, 12 layers, 12 heads, intermediate 3072, relative span 512, "
                    f"c2p|p2c, random weights in v1's layout loaded through model/deberta_v1 onto our encoder; "
                    f"{thr} threads, {reps}; eager: eager_baseline.py's v1 (HF modeling_deberta.py's "
                    f"computation), tuned malloc" if V and not V["shape"].startswith("v1 cls") else
                    f"{V['shape']}, {thr} threads, {reps}; eager: eager_baseline.py's v1, tuned malloc")
        row(24, "DeBERTa v1 Base (issue 26) encoder fp32 vs eager v1 fp32, batch 8x128",
            lambda: v1_cfg(),
            lambda: (f"{med(V['ratio_eager']):.2f}x (per round: {per_round(V['ratio_eager'])}); medians over rounds: "
                     f"ours {V['ours_s']:.4f} s ({8 / V['ours_s']:.2f} seq/s), eager {V['eager_s']:.4f} s"),
            ">= 1.3x (as row 1)", lambda: med(V["ratio_eager"]) >= 1.3, "v1", lambda: med(V["ratio_eager"]))
        row(25, "DeBERTa v1 Base (issue 26) encoder fp32 vs ONNX Runtime fp32, batch 8x128",
            lambda: f"{v1_cfg()}; {ort_cfg(VO)}",
            lambda: (f"{med(VO['ratio_8']):.2f}x (per round: {per_round(VO['ratio_8'])}); medians over rounds: "
                     f"ours {V['ours_s']:.4f} s, ORT {VO['8_s']:.4f} s"),
            ">= 1.2x (as row 11)", lambda: med(VO["ratio_8"]) >= 1.2, "v1", lambda: med(VO["ratio_8"]), ort=True)
        return rows

    def forward_table(self):
        """The model-forward figures side by side (issue 19): ours / eager / ORT per shape and dtype, medians
        over rounds; ratios = the median of the per-round ratios (peer s / ours s: > 1 means we are faster)."""
        E, LG = self.results.get("encoder"), self.results.get("long")
        I8, V = self.results.get("int8"), self.results.get("v1")
        if not E and not LG and not I8 and not V:
            return ""
        med = statistics.median

        def ratio_cell(xs):
            return f"{med(xs):.2f}x ({spread(xs).replace(' over ', ', ')})"

        def ort_cell(section, res, key):
            if section in self.ort_errors:
                return "ERROR", "ERROR"
            o = res.get("ort") if res else None
            if o is None:
                return "not installed" if self.ort_skip and "not installed" in self.ort_skip else "-", "-"
            return f"{o[key + '_s']:.4f} s", ratio_cell(o["ratio_" + key])
        lines = ["| batch x tokens | dtype | dserve | eager (faster env) | ONNX Runtime | dserve vs eager (spread) | "
                 "dserve vs ORT (spread) |", "|---|---|---|---|---|---|---|"]
        if E:
            best8 = {d: min(v for k, v in E["eager_8"].items() if k.startswith(d + "/")) for d in self.dtypes}
            o8, r8 = ort_cell("encoder", E, "8")
            o1, r1 = ort_cell("encoder", E, "1")
            lines.append(f"| 8x128 | fp32 | {E['ours_8']['fp32']['median_s']:.4f} s | {best8['fp32']:.4f} s | {o8} | "
                         f"{ratio_cell(E['ratios']['fp32_8'])} | {r8} |")
            if "bf16" in E["ours_8"]:
                lines.append(f"| 8x128 | bf16 | {E['ours_8']['bf16']['median_s']:.4f} s | {best8['bf16']:.4f} s | n/a "
                             f"(no bf16 on ORT's CPU EP) | {ratio_cell(E['ratios']['bf16_8'])} | n/a |")
            if "int8" in E["ours_8"]:
                lines.append(f"| 8x128 | int8 (dense layers) | {E['ours_8']['int8']['median_s']:.4f} s | n/a | n/a | "
                             f"n/a (vs our fp32: {ratio_cell(E['ratios']['int8_8'])}) | n/a (int8 peer below) |")
            lines.append(f"| 1x128 | fp32 | {E['ours_1_fp32_s']:.4f} s | {min(E['eager_1'].values()):.4f} s | {o1} | "
                         f"{ratio_cell(E['ratios']['fp32_1'])} | {r1} |")
        if LG:
            L = LG["length"]
            for b in (8, 1):
                o, r = ort_cell("long", LG, str(b))
                lines.append(f"| {b}x{L} | fp32 | {LG[f'ours_{b}_s']:.4f} s | {LG[f'eager_{b}_s']:.4f} s (tuned) | "
                             f"{o} | {ratio_cell(LG[f'ratio_eager_{b}'])} | {r} |")
        if I8:
            for b in (8, 1):
                o, r = ort_cell("int8", I8, str(b))
                lines.append(f"| {b}x128 | int8 vs ORT int8 | {I8[f'ours_{b}_s']:.4f} s | n/a | {o} (int8) | n/a | "
                             f"{r} |")
        if V:
            o, r = ort_cell("v1", V, "8")
            lines.append(f"| 8x128 | fp32, DeBERTa v1 Base | {V['ours_s']:.4f} s | {V['eager_s']:.4f} s (tuned) | {o} | "
                         f"{ratio_cell(V['ratio_eager'])} | {r} |")
        note = f"ORT column: {self.ort_skip}.\n" if self.ort_skip else ""
        if self.others_cpu:
            o = self.others_cpu
            note += (f"Other work's share of the machine's CPU while these processes ran: median "
                     f"{100 * statistics.median(o):.0f}%, max {100 * max(o):.0f}% over {len(o)} processes (0% = "
                     f"nothing else ran; above a few percent the figures are unreliable).\n")
        return ("Model forward side by side (medians over rounds; ratios: peer s / dserve s, the median of the "
                "per-round ratios, > 1 = dserve faster; spread: lowest-highest per-round ratio):\n\n"
                + "\n".join(lines) + "\n\n" + note)

    @staticmethod
    def issue27_table(rows):
        """Issue 27's target table, one line per target, from the rows that measure it."""
        by = {r["row"]: r for r in rows}
        targets = [(12, "fp32 1x128: dserve vs ORT", ">= 1.2x"), (11, "fp32 8x128: dserve vs ORT", ">= 1.2x"),
                   (20, "fp32 1x512: dserve vs ORT", ">= 1.2x"), (14, "fp32 8x512: dserve vs ORT", ">= 1.2x"),
                   (22, "int8 8x128: dserve int8 vs ORT int8", ">= 1.2x"),
                   (23, "int8 1x128: dserve int8 vs ORT int8", ">= 1.2x"),
                   (4, "bf16 8x128: MFU vs measured bf16 matmul peak", ">= 75%"),
                   (21, "bf16 vs our fp32, 8x128 (avx512_bf16 machines)", ">= 1.3x"),
                   (13, "fp32 8x512 vs eager", ">= 3x")]
        lines = ["| issue 27 target | row | measured | target | result |", "|---|---|---|---|---|"]
        for n, what, target in targets:
            r = by.get(n)
            if r is None:
                continue
            v = r["value"]
            if v is None:
                got = r["measured"][:120]
            elif n == 4:
                got = f"{100 * v:.1f}%"
            else:
                got = f"{v:.2f}x"
            m = re.search(r"spread ([^;)]*)", r["measured"]) if v is not None else None
            if m:
                got += f" (spread {m.group(1)})"
            lines.append(f"| {what} | {n} | {got} | {target} | **{r['result']}** |")
        return "Issue 27 targets (" + DEFINITIONS + "):\n\n" + "\n".join(lines) + "\n"

    def report(self, machine, started):
        rows = self.rows(machine)
        elapsed = time.time() - started
        with open("/proc/loadavg") as f:
            machine["load_average_at_end"] = " ".join(f.read().split()[:3])
        head = (f"# dserve performance harness ({self.mode} mode)\n\n"
                f"Command: `bash bench/run_all.sh {' '.join(shlex.quote(a) for a in sys.argv[1:])}`"
                f"  ({elapsed / 60:.1f} min)\n\n"
                f"Machine: nproc {machine['nproc']}, {machine['cpu']}, flags {machine['flags']}, {machine['memory']}, "
                f"Linux {machine['kernel']}; {machine['threads_used']} threads; eager torch {machine['torch_eager']}; "
                f"{machine['ort']}; "
                f"commit {machine['commit']}; {machine['date']}; CPU busy in the 2 s before the start "
                f"{100 * machine['busy_before_start']:.0f}%; load average at start {machine['load_average_at_start']}, "
                f"at end {machine['load_average_at_end']} (figures compare only on an otherwise idle machine); "
                f"OMP_WAIT_POLICY {machine['omp_wait_policy']}, OPENBLAS_CORETYPE {machine['openblas_coretype']}\n\n"
                f"Definitions: {DEFINITIONS}.\n")
        if self.mode == "tiny":
            head += "\nTINY MODE: tiny models; checks that every row runs, the figures mean nothing.\n"
        if machine["busy_before_start"] > 0.25:
            head += (f"\nBUSY MACHINE: other work kept the cores {100 * machine['busy_before_start']:.0f}% busy just "
                     f"before the start: timings and ratios are unreliable (multi-threaded forwards slow down "
                     f"several-fold when a core is taken).\n")
        table = self.forward_table() + ("\n" + self.delay_table() if self.results.get("delay") else "")
        table += "\n" + self.issue27_table(rows)
        md = [head, "| # | measure | configuration | measured | target | result |", "|---|---|---|---|---|---|"]
        for r in rows:
            md.append(f"| {r['row']} | {r['measure']} | {r['config']} | {r['measured']} | {r['target']} | "
                      f"**{r['result']}** |")
        text = "\n".join(md) + "\n" + ("\n" + table if table else "")
        with open(os.path.join(self.out, "report.md"), "w") as f:
            f.write(text)
        with open(os.path.join(self.out, "report.json"), "w") as f:
            json.dump({"mode": self.mode, "elapsed_s": elapsed, "machine": machine, "settings": self.m,
                       "definitions": DEFINITIONS, "warmups": self.warmups,
                       "rows": rows, "sections": self.results, "errors": self.errors,
                       "ort": {"available": self.ort is not None, "version": (self.ort or {}).get("version"),
                               "skip": self.ort_skip, "errors": self.ort_errors}}, f, indent=1, default=str)
        # Console: one block per row.
        print(head)
        for r in rows:
            print(f"[{r['result']}] row {r['row']}: {r['measure']}\n    target:   {r['target']}\n"
                  f"    measured: {r['measured']}\n    config:   {r['config']}\n")
        if table:
            print(table)
        n = {k: sum(r["result"] == k for r in rows) for k in ("PASS", "MISS", "ERROR", "SKIP")}
        print(f"summary: {n['PASS']} PASS, {n['MISS']} MISS, {n['ERROR']} ERROR, {n['SKIP']} not run; "
              f"report in {self.out}/report.md and report.json")
        return 1 if n["ERROR"] else 0

    def cleanup(self):
        for p in list(self.servers):
            p.kill()
            p.wait()
        shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="~3 minute smoke run")
    g.add_argument("--tiny", action="store_true", help="tiny models, seconds per row (CI: runs end to end)")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "perf"), help="report directory (default build/perf)")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--shared-dir", default=os.path.join(REPO, "..", "shared"))
    ap.add_argument("--demo-dir", default=os.path.join(REPO, "build", "demo"),
                    help="deploy/demo/train_demo_models.sh output (models/classify, data/)")
    ap.add_argument("--server-model", help="classify checkpoint for rows 5-8 (default: the demo classify model)")
    ap.add_argument("--server-args", default="",
                    help="extra `dserve serve` flags for every server of rows 5-9, e.g. '--max-padding-ratio 0'")
    ap.add_argument("--rounds", type=int, default=0, help="encoder rounds (default by mode)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads for the encoder rows (default nproc)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="subset of " + ",".join(SECTIONS))
    ap.add_argument("--dtypes", default="fp32,bf16", choices=["fp32,bf16", "fp32"],
                    help="encoder rows' dtypes; fp32 leaves rows 2 and 4 out (SKIP): on a CPU without AVX-512 "
                         "one bf16 v3-base 8x128 forward takes ~4 minutes, ours and eager alike")
    ap.add_argument("--no-ort", action="store_true", help="leave the ONNX Runtime peer out (its rows say so)")
    ap.add_argument("--ort-dir", default=ONNX_DIR,
                    help="folder whose node_modules holds onnxruntime-node (default bench/onnx: bench/onnx/setup.sh)")
    ap.add_argument("--ort-cache", help="folder for the ONNX exports (default bench/onnx/cache; tiny: a temp folder)")
    a = ap.parse_args()
    sections = [s for s in a.sections.split(",") if s]
    for s in sections:
        if s not in SECTIONS:
            ap.error(f"--sections: unknown section '{s}' (one of {', '.join(SECTIONS)})")
    h = Harness(a)
    started = time.time()
    try:
        machine = h.machine()
        log(f"mode {h.mode}, out {h.out}; machine: nproc {machine['nproc']}, {machine['cpu']}, {machine['flags']}; "
            f"{machine['ort']}")
        if "bf16" in h.dtypes and "encoder" in sections and h.mode != "tiny" and not any(
                f in machine["flags"].split(",") for f in ("avx512_bf16", "amx_bf16")):
            log("warning: no avx512_bf16 / amx_bf16 on this CPU: one bf16 v3-base 8x128 forward took ~4 minutes on "
                "an AVX2-only EPYC (ours and eager alike); --dtypes fp32 leaves the bf16 rows 2 and 4 out")
        for s in SECTIONS:
            if s not in sections:
                continue
            log(f"section {s}")
            try:
                h.results[s] = getattr(h, "section_" + s)()
            except Exception as e:  # noqa: BLE001 - one failed section must not hide the other rows
                h.errors[s] = (str(e) if isinstance(e, Failure) else f"{type(e).__name__}: {e}").replace("\n", " ")[:800]
                log(f"section {s} failed: {h.errors[s]}")
        return h.report(machine, started)
    finally:
        h.cleanup()


if __name__ == "__main__":
    sys.exit(main())
