#!/usr/bin/env python3
"""Recall-throughput plot (as the paper's Figure 7) from `chimera bench` CSV output.

usage: plot_sweep.py bench.csv out.png [more.csv ...]

One panel per k; each system's settings are drawn as points with their Pareto front
(the best QPS reached at each recall) as a line; exact search is the horizontal
reference. QPS is on a log scale. Needs matplotlib (python3 -m pip install matplotlib).
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pareto import front as pareto  # noqa: E402  (same folder)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rows = []
    for path in [sys.argv[1]] + sys.argv[3:]:
        with open(path) as f:
            rows += list(csv.DictReader(f))
    ks = sorted({int(r["k"]) for r in rows})
    fig, axes = plt.subplots(1, len(ks), figsize=(5.5 * len(ks), 4.2), squeeze=False)
    for ax, k in zip(axes[0], ks):
        by_sys = defaultdict(list)
        for r in rows:
            if int(r["k"]) == k and r["recall"] and r["qps"]:
                by_sys[r["system"]].append((float(r["recall"]), float(r["qps"])))
        for name, pts in sorted(by_sys.items()):
            if name == "exact":
                ax.axhline(pts[0][1], color="gray", linestyle="--", label="exact search")
                continue
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.4)
            fr = pareto(pts)
            ax.plot([p[0] for p in fr], [p[1] for p in fr], marker="o", label=name)
        ax.set_yscale("log")
        ax.set_xlabel(f"Recall@{k}")
        ax.set_ylabel("queries / s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)


if __name__ == "__main__":
    main()
