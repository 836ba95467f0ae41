#!/usr/bin/python3
"""Byte-level BPE (DeBERTa v1) against our Unigram (DeBERTa-v2/v3, ALBERT)
tokenizer on the same strings, same run, same binary.

    /usr/bin/python3 compare_bpe_unigram.py BENCH_BINARY BPE_DIR STRINGS.jsonl UNIGRAM_DIR... [--repeats N] [--rounds R]

BENCH_BINARY is tokenizer_bench (one thread, ids + byte offsets through
Tokenizer::EncodeRaw, median of N repeats after a warm-up pass). BPE is
timed twice: with its word cache (the steady state of a server, which sees
the same words again) and with no cache (every word merged from scratch).
The runs are interleaved in R rounds (default 5: BPE cached, BPE
uncached, each Unigram model, again) so that a busy machine slows all of
them alike; each ratio is the median of the R per-round ratios. Prints one
JSON object and the ratios BPE/Unigram in strings per second (above 1: BPE
is faster).
"""
import statistics
import json
import os
import platform
import subprocess
import sys


def run(binary, model_dir, strings, repeats, *extra):
    out = subprocess.run([binary, model_dir, strings, str(repeats), *extra], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    args = sys.argv[1:]
    opts = {"--repeats": 5, "--rounds": 5}
    for name in opts:
        if name in args:
            i = args.index(name)
            opts[name] = int(args[i + 1])
            del args[i:i + 2]
    repeats, rounds = opts["--repeats"], opts["--rounds"]
    if len(args) < 4:
        sys.exit(__doc__)
    binary, bpe_dir, strings = args[:3]
    unigram_dirs = args[3:]
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    runs = []
    for _ in range(rounds):
        one = {"cached": run(binary, bpe_dir, strings, repeats),
               "uncached": run(binary, bpe_dir, strings, repeats, "--bpe-cache-capacity=0")}
        for d in unigram_dirs:
            one[d] = run(binary, d, strings, repeats)
        runs.append(one)
    ratios = {}
    for d in unigram_dirs:
        for mode in ("cached", "uncached"):
            per_round = [r[mode]["strings_per_s"] / r[d]["strings_per_s"] for r in runs]
            ratios["bpe_%s/%s" % (mode, os.path.basename(d.rstrip("/")))] = {
                "median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}
    result = {"machine": {"nproc": os.cpu_count(), "cpu": cpu or platform.processor(),
                          "loadavg": os.getloadavg()},
              "strings": strings, "repeats": repeats, "rounds": rounds, "bpe_dir": bpe_dir,
              "last_round": runs[-1], "ratios": ratios}
    print(json.dumps(result, indent=1))
    for name, r in ratios.items():
        print("throughput ratio %s: median %.2fx (min %.2fx, max %.2fx over %d rounds)" %
              (name, r["median"], r["min"], r["max"], rounds))


if __name__ == "__main__":
    main()
