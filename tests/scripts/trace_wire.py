"""Compares the collectives of two profiler traces (docs/profiling.md) of the same run, one
with bf16 exchanges and one with fp32 transport (TITAN_BF16_TRANSPORT=float32): the two must
make the same collectives in the same order, each moving the same bytes or exactly half
(an exchange moved in bf16). Prints, for the group: the number of halved collectives
("halved N"), the bytes per halved collective in fp32 ("halved-bytes NAME BYTES x COUNT", one
line per distinct size), the number
left unchanged, both totals, and the order: one letter per collective in trace order, h halved,
= unchanged (which ones are halved, where their sizes follow the routing: the EP returns carry
the rows this rank's experts received); the caller compares them with the model's expectation.

usage: trace_wire.py BF16_TRACE FP32_TRACE GROUP
  GROUP   the collectives' group, e.g. tensor-parallel, expert-parallel
"""
import collections
import json
import sys


def collectives(path, group):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    out = [(e["ts"], e["name"], e["args"]["bytes"]) for e in events
           if e.get("cat") == "collective" and e["args"].get("group") == group
           and not e["name"].endswith(" launch")]  # a posting: its collective is its wait
    return [(name, b) for _, name, b in sorted(out)]


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    b16 = collectives(sys.argv[1], sys.argv[3])
    f32 = collectives(sys.argv[2], sys.argv[3])
    if len(b16) != len(f32) or not b16:
        print(f"FAIL: {len(b16)} collectives with bf16 exchanges, {len(f32)} with fp32")
        sys.exit(1)
    halved = collections.Counter()
    same = 0
    order = ""
    for (n1, x), (n2, y) in zip(b16, f32):
        if n1 != n2:
            print(f"FAIL: {n1} where the fp32 run made {n2}")
            sys.exit(1)
        if x == y:
            same += 1
            order += "="
        elif 2 * x == y:
            halved[(n1, y)] += 1
            order += "h"
        else:
            print(f"FAIL: {n1} moved {x} bytes against {y} in fp32 (neither equal nor half)")
            sys.exit(1)
    print(f"halved {sum(halved.values())}")
    for (name, y), k in sorted(halved.items()):
        print(f"halved-bytes {name} {y} x {k}")
    print(f"unchanged {same}")
    print(f"bytes {sum(b for _, b in b16)} {sum(b for _, b in f32)}")
    print(f"order {order}")


if __name__ == "__main__":
    main()
