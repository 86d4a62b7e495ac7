#!/usr/bin/env python3
"""Summarise bench/bf16_fidelity.sh's TSV: the per-seed table, then for each pair A-B the
per-seed differences in % of B (mean, standard deviation, standard error, how many positive).

    python3 bench/bf16_fidelity.py runs/bf16_fidelity.tsv [A-B ...]

Default pairs: the layout's effect at each chunk (col-row, col256-row256) and the noise a
last-bit perturbation alone makes (row256-row, col256-col)."""
import csv
import math
import sys

path = sys.argv[1]
pairs = sys.argv[2:] or ["col-row", "col256-row256", "row256-row", "col256-col"]
metrics = ["train_loss", "train_last20", "val_loss"]
runs = {}
for r in csv.DictReader(open(path), delimiter="\t"):
    runs[(int(r["seed"]), r["variant"])] = {m: float(r[m]) for m in metrics}
seeds = sorted({s for s, _ in runs})
variants = list(dict.fromkeys(v for _, v in runs))

print("seed | " + " | ".join(variants) + "   (train_last20 / val_loss)")
for s in seeds:
    cells = []
    for v in variants:
        r = runs.get((s, v))
        cells.append("%.4f / %.4f" % (r["train_last20"], r["val_loss"]) if r else "-")
    print("%4d | %s" % (s, " | ".join(cells)))

def stats(xs):
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else float("nan")
    return n, mean, sd, sd / math.sqrt(n) if n > 1 else float("nan"), sum(x > 0 for x in xs)

print()
print("pair | metric | n | mean % | sd % | sem % | positive")
for p in pairs:
    a, b = p.split("-")
    for m in metrics:
        d = [100.0 * (runs[(s, a)][m] - runs[(s, b)][m]) / runs[(s, b)][m]
             for s in seeds if (s, a) in runs and (s, b) in runs]
        if not d:
            continue
        n, mean, sd, sem, pos = stats(d)
        print("%s | %s | %d | %+.3f | %.3f | %.3f | %d/%d" % (p, m, n, mean, sd, sem, pos, n))
