#!/usr/bin/python3
"""Self time per op of a torch profiler Chrome trace (`dserve bench encoder --profile`).

usage: profile_summary.py TRACE.json [--top 25]
Prints, per op name: calls, total self time (ms) and its share of the traced
wall time. Self time = the op's duration minus that of the ops nested inside
it on the same thread, so aten::linear and the aten::addmm it calls are not
counted twice.
"""
import argparse
import collections
import json


def self_times(events):
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            by_thread[e.get("tid")].append(e)
    totals = collections.defaultdict(lambda: [0, 0.0])
    span = [float("inf"), 0.0]
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack = []  # [end, name, child_time]

        def close(item):
            end, name, child, dur = item
            totals[name][0] += 1
            totals[name][1] += dur - child

        for e in evs:
            ts, dur = float(e["ts"]), float(e["dur"])
            span[0] = min(span[0], ts)
            span[1] = max(span[1], ts + dur)
            while stack and stack[-1][0] <= ts:
                close(stack.pop())
            if stack:
                stack[-1][2] += dur
            stack.append([ts + dur, e["name"], 0.0, dur])
        while stack:
            close(stack.pop())
    return totals, span[1] - span[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    with open(a.trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    totals, wall_us = self_times(events)
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])
    print(f"{a.trace}: traced wall {wall_us / 1e3:.1f} ms")
    print(f"{'op':40s} {'calls':>6s} {'self ms':>10s} {'share':>7s}")
    for name, (calls, us) in rows[: a.top]:
        print(f"{name[:40]:40s} {calls:6d} {us / 1e3:10.2f} {100 * us / wall_us:6.1f}%")


if __name__ == "__main__":
    main()
