"""Filtered search: QPS and Recall@10 against selectivity (bench/RESULTS.md, section 5.3).

    python3 bench/bench_filter.py --chimera build/chimera --work /tmp/filter \
        [--docs 20000 --dim 128 --seed 1 --queries 200] [--threads 2] [--reps 3] \
        [--plot bench/results/filter.png]

On a `chimera gen` corpus (ids are row numbers) it builds one index, then for each
selectivity (100%, 50%, 10%, 1%, 0.1%, 0.01% of the documents) draws a random set of
allowed ids (seeded), searches with `chimera search --subset` at default parameters,
and measures Recall@10 against exact search over the allowed documents only (`chimera
exact` over the corpus sliced to them, with --ids) and QPS (best of --reps runs, each
alternated with an unfiltered search, so QPS is also given as a ratio to it). It also
checks that every result is allowed and that every query has min(10, allowed) results.
Queries are the corpus's 32-token queries cut to 4-16 tokens (variable length).
Needs python3 with numpy (matplotlib for --plot).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def qps_of(out):
    m = re.search(r"([0-9.]+) queries/s", out)
    return float(m.group(1))


def read_run(path, nq, k):
    ids = -np.ones((nq, k), dtype=np.int64)
    for line in open(path):
        q, _, d, rank, *_ = line.split()
        ids[int(q), int(rank) - 1] = int(d)
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chimera", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--plot")
    ap.add_argument("--json")
    a = ap.parse_args()
    C, W, k = a.chimera, a.work, 10
    os.makedirs(W, exist_ok=True)
    run([C, "gen", "--out", f"{W}/c", "--docs", str(a.docs), "--dim", str(a.dim), "--seed",
         str(a.seed), "--queries", str(a.queries)])
    tok = np.load(f"{W}/c/tokens.npy", mmap_mode="r")
    lens = np.load(f"{W}/c/doclens.npy").astype(np.int64)
    off = np.concatenate([[0], np.cumsum(lens)])
    q = np.load(f"{W}/c/queries.npy")
    rng = np.random.default_rng(a.seed)
    ql = rng.integers(4, 17, size=q.shape[0]).astype(np.int64)
    np.save(f"{W}/q.npy", np.concatenate([q[i, :ql[i]] for i in range(q.shape[0])]))
    np.save(f"{W}/ql.npy", ql)
    Q = ["--queries", f"{W}/q.npy", "--qlens", f"{W}/ql.npy"]
    t0 = time.time()
    run([C, "build", "--tokens", f"{W}/c/tokens.npy", "--doclens", f"{W}/c/doclens.npy",
         "--out", f"{W}/idx", "--threads", str(a.threads)])
    print(f"build {time.time() - t0:.1f}s", flush=True)
    D, nq = len(lens), q.shape[0]
    rows = []
    for sel in [1.0, 0.5, 0.1, 0.01, 0.001, 0.0001]:
        allowed = np.sort(rng.choice(D, size=max(1, int(round(sel * D))), replace=False))
        np.savetxt(f"{W}/sub.txt", allowed, fmt="%d")
        # exact over the allowed documents only
        np.save(f"{W}/st.npy", np.concatenate([tok[off[d]:off[d + 1]] for d in allowed]))
        np.save(f"{W}/sl.npy", lens[allowed])
        np.save(f"{W}/si.npy", allowed.astype(np.int64))
        run([C, "exact", "--tokens", f"{W}/st.npy", "--doclens", f"{W}/sl.npy", "--ids",
             f"{W}/si.npy", *Q, "-k", str(k), "--out", f"{W}/truth.tsv"])
        truth = read_run(f"{W}/truth.tsv", nq, k)
        best, best_base = 0.0, 0.0
        for _ in range(a.reps):
            out = run([C, "search", f"{W}/idx", *Q, "-k", str(k), "--threads", str(a.threads),
                       *([] if sel == 1.0 else ["--subset", f"{W}/sub.txt"]), "--out",
                       f"{W}/run.tsv"])
            best = max(best, qps_of(out))
            base = run([C, "search", f"{W}/idx", *Q, "-k", str(k), "--threads", str(a.threads)])
            best_base = max(best_base, qps_of(base))
        ids = read_run(f"{W}/run.tsv", nq, k)
        ok = np.isin(ids[ids >= 0], allowed).all()
        want = min(k, len(allowed))
        full = ((ids >= 0).sum(axis=1) == want).all()
        hits = sum(len(set(ids[i][ids[i] >= 0]) & set(truth[i][truth[i] >= 0])) for i in range(nq))
        recall = hits / sum(min(k, (truth[i] >= 0).sum()) for i in range(nq))
        row = dict(selectivity=sel, allowed=int(len(allowed)), recall=round(recall, 4),
                   qps=round(best, 1), qps_unfiltered=round(best_base, 1),
                   ratio=round(best / best_base, 2), all_allowed=bool(ok), min_k_results=bool(full))
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| selectivity | allowed | Recall@10 (vs exact over them) | QPS | QPS / unfiltered |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {100 * r['selectivity']:g}% | {r['allowed']:,} | {r['recall']:.4f} | "
              f"{r['qps']:.0f} | {r['ratio']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if a.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.5))
        x = [100 * r["selectivity"] for r in rows]
        ax.semilogx(x, [r["qps"] for r in rows], "o-", label="QPS (filtered)")
        ax.axhline(rows[0]["qps"], ls=":", c="gray", label="QPS (no filter)")
        ax.set_xlabel("allowed documents (% of the corpus)")
        ax.set_ylabel("queries / s")
        ax2 = ax.twinx()
        ax2.semilogx(x, [r["recall"] for r in rows], "s--", c="C1", label="Recall@10")
        ax2.set_ylim(0.8, 1.0)
        ax2.set_ylabel("Recall@10 vs filtered exact")
        fig.legend(loc="lower left", fontsize=8)
        ax.set_title(f"Filtered search, {D:,} documents, d={a.dim}, 4-16 token queries")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=120)


if __name__ == "__main__":
    main()
