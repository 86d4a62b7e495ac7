#!/usr/bin/env python3
"""Where a profiled step's time outside any op goes: the gaps between consecutive events of a
titan trace (profiling.enable_profiling; iteration_N/rankR_trace.json), summed per pair of
(previous event, next event) with the layer index folded (layers.3/matmul_fwd -> L/matmul_fwd).
The pair names the model code between two ops (forward.c: a zeroing before an accumulating
backward op, the bf16 activation store, ...).

usage: python3 bench/trace_gaps.py TRACE.json [TOP]"""
import collections
import json
import re
import sys


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 16
    with open(path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    ops = sorted((e for e in events if e.get("ph") == "X" and not e["name"].startswith("ProfilerStep")),
                 key=lambda e: e["ts"])
    kind = lambda n: re.sub(r"layers\.\d+", "L", n)
    total, count = collections.defaultdict(float), collections.Counter()
    for a, b in zip(ops, ops[1:]):
        gap = b["ts"] - (a["ts"] + a["dur"])  # microseconds
        if gap > 0:
            k = (kind(a["name"]), kind(b["name"]))
            total[k] += gap
            count[k] += 1
    print("time between events: %.1f ms" % (sum(total.values()) / 1e3))
    for k, v in sorted(total.items(), key=lambda x: -x[1])[:top]:
        print("%9.1f ms %5d x  %s -> %s" % (v / 1e3, count[k], k[0], k[1]))


if __name__ == "__main__":
    main()
