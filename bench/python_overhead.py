"""The Python binding's cost per query against the CLI's throughput mode (bench/RESULTS.md,
section 5.1).

    python bench/python_overhead.py IDX QUERIES.npy [--cli build-test/chimera] [-k 10]

Times index.search(all queries) in one process (warm: the first call's session set-up
excluded, as a server would see it), takes the library's own time for the same call
(Index.last_profile["seconds"]), and runs `chimera search` on the same index, queries,
k and threads (its "throughput mode: Ns" line). The binding's overhead is the Python
wall time less the library's time; it covers argument checks, the copy of the queries
into the library and the result arrays.
"""
import argparse
import re
import os
import subprocess
import tempfile
import time

import numpy as np

import chimera

ap = argparse.ArgumentParser()
ap.add_argument("index")
ap.add_argument("queries")
ap.add_argument("--cli", default="build-test/chimera")
ap.add_argument("-k", type=int, default=10)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--repeat", type=int, default=15)
a = ap.parse_args()

q = np.load(a.queries)
ix = chimera.Index.open(a.index, backend="cpu")
ix.search(q, k=a.k, threads=a.threads)
walls, libs = [], []
for _ in range(a.repeat):
    t = time.perf_counter()
    ix.search(q, k=a.k, threads=a.threads)
    walls.append(time.perf_counter() - t)
    libs.append(ix.last_profile["seconds"])
cli = []
# A real file for the run: the CLI writes a temporary file and renames it into place, so
# --out must never name a device such as /dev/null (it would be replaced).
run_path = os.path.join(tempfile.mkdtemp(), "run.trec")
for _ in range(5):
    out = subprocess.run([a.cli, "search", a.index, "--queries", a.queries, "-k", str(a.k),
                          "--threads", str(a.threads), "--backend", "cpu", "--out", run_path],
                         capture_output=True, text=True, check=True).stdout
    cli.append(float(re.search(r"throughput mode: ([0-9.]+)s", out).group(1)))
w, lib, c, n = np.median(walls), np.median(libs), np.median(cli), len(q)
print(f"| all {n} x {q.shape[1]} in one call | {a.k} | {n / c:.0f} | {n / w:.0f} | {n / lib:.0f} | "
      f"{(w - lib) / n * 1e6:.1f} | {100 * (w - lib) / w:.2f}% |")
# One query per call (a server answering requests): the per-call cost shows in full.
w1 = l1 = 0.0
for i in range(n):
    t = time.perf_counter()
    ix.search(q[i:i + 1], k=a.k, threads=a.threads)
    w1 += time.perf_counter() - t
    l1 += ix.last_profile["seconds"]
print(f"| one query per call, {n} calls | {a.k} | | {n / w1:.0f} | {n / l1:.0f} | "
      f"{(w1 - l1) / n * 1e6:.1f} | {100 * (w1 - l1) / w1:.2f}% |")
