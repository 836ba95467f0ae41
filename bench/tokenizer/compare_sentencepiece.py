#!/usr/bin/python3
"""Times our encoder against libsentencepiece on the same strings, same run.

    /usr/bin/python3 compare_sentencepiece.py BENCH_BINARY MODEL_DIR STRINGS.jsonl [REPEATS]

libsentencepiece is timed through Debian's python3-sentencepiece with one
batched call per repeat (sp.encode(list_of_strings, num_threads=1), which
runs the C++ loop over the batch, so Python overhead is one call plus the
conversion of the id lists). Ours: BENCH_BINARY (tokenizer_bench), also one
thread, also ids plus offsets. Both report the median of REPEATS runs.
Prints both results and the ratio ours/libsentencepiece in strings per second.
"""
import json
import os
import platform
import subprocess
import sys
import time

import sentencepiece as spm


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    binary, model_dir, strings_path = sys.argv[1:4]
    repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    strings = []
    with open(strings_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                strings.append(json.loads(line)["text"])
    sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "spm.model"))
    sp.encode(strings, num_threads=1)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sp.encode(strings, num_threads=1)
        times.append(time.perf_counter() - t0)
    times.sort()
    spm_median = times[len(times) // 2]
    nbytes = sum(len(s.encode("utf-8")) for s in strings)

    ours = json.loads(subprocess.run([binary, model_dir, strings_path, str(repeats)], check=True,
                                     capture_output=True, text=True).stdout)
    spm_result = {"median_s": spm_median, "strings_per_s": len(strings) / spm_median,
                  "mb_per_s": nbytes / spm_median / 1e6}
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(json.dumps({"machine": {"nproc": os.cpu_count(), "cpu": cpu or platform.processor()},
                      "model": model_dir, "strings": len(strings), "bytes": nbytes,
                      "repeats": repeats, "ours": ours, "libsentencepiece": spm_result}, indent=1))
    print("throughput ratio ours/libsentencepiece: %.2fx" %
          (ours["strings_per_s"] / spm_result["strings_per_s"]))


if __name__ == "__main__":
    main()
