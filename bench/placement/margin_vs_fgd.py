#!/usr/bin/env python3
"""Per-step margin of frag-aware over fgd from gpuslice-replay CSVs.

  margin_vs_fgd.py results/default.csv results/gpuspec33.csv > results/margin_vs_fgd.txt

For each CSV (one trace): the mean over seeds of the GPU allocation ratio (%)
of fgd and frag-aware at every step, their difference, and in how many seeds
frag-aware allocated less than fgd at that step. Reads the per-seed rows; the
"mean" rows of the CSV are ignored.
"""
import csv
import os
import sys
from collections import defaultdict


def margins(path):
    ratio = defaultdict(dict)  # (policy, step) -> seed -> alloc_ratio
    for row in csv.DictReader(open(path)):
        if row["seed"] == "mean":
            continue
        ratio[(row["policy"], float(row["arrived_pct"]))][row["seed"]] = float(row["alloc_ratio"])
    steps = sorted({step for (policy, step) in ratio if policy == "fgd"})
    out = []
    for step in steps:
        fgd, ours = ratio[("fgd", step)], ratio[("frag-aware", step)]
        seeds = sorted(set(fgd) & set(ours))
        if not seeds:
            sys.exit(f"{path}: no seed has both fgd and frag-aware at {step}%")
        mean_fgd = 100 * sum(fgd[s] for s in seeds) / len(seeds)
        mean_ours = 100 * sum(ours[s] for s in seeds) / len(seeds)
        behind = sum(ours[s] < fgd[s] for s in seeds)
        out.append((step, mean_fgd, mean_ours, mean_ours - mean_fgd, behind, len(seeds)))
    return out


def main(paths):
    if not paths:
        sys.exit(__doc__)
    for i, path in enumerate(paths):
        rows = margins(path)
        if i == 0:
            print(f"frag-aware minus fgd, GPU allocation ratio (percentage points), "
                  f"mean of {rows[0][5]} seeds, by arrived demand")
        print()
        print(os.path.splitext(os.path.basename(path))[0])
        print("  step      fgd     ours  margin seeds behind")
        for step, fgd, ours, margin, behind, _ in rows:
            print(f"{step:5.0f}%  {fgd:7.2f}  {ours:7.2f}  {margin:+6.2f} {behind}")
        print(f"min margin {min(r[3] for r in rows):+.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
