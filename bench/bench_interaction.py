#!/usr/bin/env python3
"""Centroid interaction before 1-bit scoring against the pipeline without it, on one
corpus (bench/RESULTS.md, section 5.9).

Three families of settings, each a fixed multiple of k_fullbit, swept over n_probe and
k_fullbit (the grid the build's calibration walks):
    plain  k_refine = 4 k_fullbit, no centroid interaction (the library's ratio)
    ci8x3  k_refine = 8 k_fullbit, k_interaction = 3 k_fullbit
    ci12x3 k_refine = 12 k_fullbit, k_interaction = 3 k_fullbit
For every (n_probe, k_fullbit) the three run one after another, so that all see the same
machine load; each is timed as the best of --reps searches of all queries (the library's
own wall time of the call, after one warm-up search; fewer when a search takes over a
second). Writes one CSV row per setting and
prints, per recall target, each family's fastest setting that reaches it.

    python3 bench/bench_interaction.py --index IDX --corpus DIR -k 100 --out rows.csv

DIR holds queries_flat.npy and qlens.npy (bench/data's layout; `chimera gen` output cut
with variable lengths as in section 7.4) and truth100.npy, the exact top-100 ids per
query (chimera.exact_search). Needs the Python package (pip install .).
"""
import argparse
import csv
import itertools

import numpy as np

import chimera

FAMILIES = {"plain": (4, 0), "ci8x3": (8, 3), "ci12x3": (12, 3)}
TARGETS = (0.90, 0.93, 0.95, 0.96, 0.97, 0.98)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    k = a.k
    qf = np.load(f"{a.corpus}/queries_flat.npy")
    ql = np.load(f"{a.corpus}/qlens.npy")
    queries = np.split(qf, np.cumsum(ql)[:-1])
    truth = np.load(f"{a.corpus}/truth100.npy")[:, :k]
    ix = chimera.Index.open(a.index)
    n_probes = [4, 8, 16, 32] if k <= 10 else [6, 8, 12, 16, 24]
    multiples = [1, 1.5, 2, 3, 4, 6]
    ix.search(queries, k=k, threads=a.threads)  # warm-up: pages in the index
    rows = []
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["family", "n_probe", "k_fullbit", "k_refine", "k_interaction", "recall",
                    "seconds", "scored1_per_query"])
        for n_probe, mult in itertools.product(n_probes, multiples):
            for fam, (per_refine, per_ci) in FAMILIES.items():
                kf = int(k * mult)
                params = {"n_probe": n_probe, "k_fullbit": kf,
                          "k_refine": min(kf * per_refine, len(ix)),
                          "k_interaction": kf * per_ci}
                best = float("inf")
                for _ in range(a.reps):
                    _, ids = ix.search(queries, k=k, params=params, threads=a.threads)
                    best = min(best, ix.last_profile["seconds"])
                    if best > 1.0:  # a slow setting: one more run buys little
                        break
                recall = chimera.recall(ids, truth, k)
                row = (fam, n_probe, kf, params["k_refine"], params["k_interaction"], recall,
                       best, ix.last_profile["n_scored1"] / len(queries))
                w.writerow(row)
                f.flush()
                rows.append(row)
    nq = len(queries)
    print("queries/s of each family's fastest setting reaching Recall@%d (n_probe/k_fullbit)" % k)
    print("family  " + "".join(f"{t:>16}" for t in TARGETS))
    for fam in FAMILIES:
        cells = []
        for t in TARGETS:
            ok = [r for r in rows if r[0] == fam and r[5] >= t]
            if not ok:
                cells.append(f"{'-':>16}")
                continue
            b = min(ok, key=lambda r: r[6])
            cells.append(f"{nq / b[6]:>7.0f} {b[1]:>3}/{b[2]:<4}")
        top = max(r[5] for r in rows if r[0] == fam)
        print(f"{fam:<8}" + "".join(cells) + f"   max {top:.4f}")


if __name__ == "__main__":
    main()
