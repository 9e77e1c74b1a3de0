#!/usr/bin/env python3
"""Splits document scoring's time into a part per document token and a part per
(document token x query token) pair.

The tuning cost model (src/search/tune.c) prices 1-bit and full-bit scoring per document
token. A document token's codes are unpacked once per query whatever the query's length
and the kernels take 16 query tokens a vector, so its time is about a + m b for queries
of m tokens, with a (unpacking, factors, the estimate's epilogue, the token's row of
centroid scores) most of it at the 4-16 tokens of real queries. For each corpus
directory (an index in DIR/idx, its generated queries in DIR/queries.npy [n, m, dim],
its DIR/doclens.npy) this cuts the queries to 4, 8, 16 and 32 tokens (where they have
them), runs `chimera search --profile --threads 1 --probe brute` (every centroid scored:
no centroid-score rows computed one by one inside scoring's time) at a full-bit-only
setting (covered: k_refine = k_fullbit) and a 1-bit one, the least of three runs, and
fits a and b per corpus by least squares over the lengths. Per document token means per
token of the corpus's mean document, as the cost model counts them (the documents scored
may be longer than the mean). Prints them with the index's tokens and centroids
(bench/RESULTS.md section 5.36).

  python3 bench/cost_by_length.py build/chimera DIR...
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

LENGTHS = (4, 8, 16, 32)
FULL = (8, 200, 200)   # covered: no 1-bit pass, every candidate full-bit scored
ONE = (8, 600, 20)     # 1-bit scores 600 documents, full-bit 20
REPEAT = 2             # each run's queries, this many times over
RUNS = 3               # runs of each; the least time counts (the machine is shared)


def num(pat, text):
    return float(re.search(pat, text).group(1))


def run1(chimera, idx, qflat, qlens, setting):
    n_probe, k_refine, k_fullbit = setting
    out = subprocess.run([chimera, "search", idx, "--queries", qflat, "--qlens", qlens,
                          "--threads", "1", "--profile", "-k", "10", "--nprobe", str(n_probe),
                          "--k-refine", str(k_refine), "--k-fullbit", str(k_fullbit),
                          "--probe", "brute"],
                         capture_output=True, text=True, check=True).stdout
    return dict(s1=num(r"1-bit scoring ([\d.]+) ms", out), fb=num(r"full-bit ([\d.]+) ms", out),
                sc1=num(r"(\d+) 1-bit scored", out), nfb=num(r"([\d.]+) full-bit scored", out))


def run(chimera, idx, qflat, qlens, setting):
    rs = [run1(chimera, idx, qflat, qlens, setting) for _ in range(RUNS)]
    return dict(rs[0], s1=min(r["s1"] for r in rs), fb=min(r["fb"] for r in rs))


def corpus(chimera, d, tmp):
    name = os.path.basename(d.rstrip("/"))
    q = np.load(f"{d}/queries.npy")
    if q.ndim != 3:
        sys.exit(f"{d}/queries.npy: want padded queries [n, m, dim], got shape {q.shape}")
    doclens = np.load(f"{d}/doclens.npy", mmap_mode="r")
    doc_len, n_tokens = float(doclens.mean()), int(doclens.sum())
    K = int(num(r"clusters\s+(\d+);", subprocess.run([chimera, "info", f"{d}/idx"],
                                                      capture_output=True, text=True,
                                                      check=True).stdout))
    rows = []
    for m in LENGTHS:
        if m > q.shape[1]:
            continue
        flat = os.path.join(tmp, f"{name}_{m}.npy")
        lens = os.path.join(tmp, f"{name}_{m}_lens.npy")
        np.save(flat, np.concatenate([q[:, :m].reshape(-1, q.shape[2])] * REPEAT)
                .astype(np.float32))
        np.save(lens, np.full(q.shape[0] * REPEAT, m, dtype=np.int64))
        f, o = run(chimera, f"{d}/idx", flat, lens, FULL), run(chimera, f"{d}/idx", flat, lens, ONE)
        # ns per document token: full-bit from the covered run, 1-bit from the other
        rows.append((m, f["fb"] * 1e6 / (f["nfb"] * doc_len), o["s1"] * 1e6 / (o["sc1"] * doc_len)))
    if len(rows) < 2:
        sys.exit(f"{name}: queries of {q.shape[1]} tokens give fewer than two of the lengths "
                 f"{LENGTHS} to fit over")
    ms = np.array([r[0] for r in rows], dtype=float)
    A = np.vstack([np.ones_like(ms), ms]).T
    (fa, fb), *_ = np.linalg.lstsq(A, np.array([r[1] for r in rows]), rcond=None)
    (oa, ob), *_ = np.linalg.lstsq(A, np.array([r[2] for r in rows]), rcond=None)
    return dict(name=name, d=int(q.shape[2]), L=doc_len, N=n_tokens, K=K, rows=rows,
                full=(fa, fb), one=(oa, ob))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    chimera, dirs = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        res = [corpus(chimera, d, tmp) for d in dirs]
    for x in res:
        print("%s (d = %d, %d tokens, %.1f a document, %d centroids)" % (
            x["name"], x["d"], x["N"], x["L"], x["K"]))
        for m, f, o in x["rows"]:
            print("  m = %2d: full-bit %6.2f ns a document token (%5.2f a pair), "
                  "1-bit %6.2f (%5.2f)" % (m, f, f / m, o, o / m))
        print("  fit: full-bit %.2f + %.3f m ns, 1-bit %.2f + %.3f m ns" % (*x["full"], *x["one"]))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
