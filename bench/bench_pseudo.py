#!/usr/bin/env python3
"""Pseudo-queries against a corpus's own queries: Recall@k of one index at the same
settings for both (bench/RESULTS.md, section 5.6).

The build's calibration tunes on pseudo-queries (chimera_corpus_sample_queries) and how
hard they are, next to the queries users send, decides how far its defaults overshoot.
The generator is re-implemented here with its knobs exposed, so that variants can be
compared before one is built into the library; each variant is

    p,noise_min,noise_max,len_min,len_max

p: the share of a query's tokens drawn from its target document (the rest from other
random documents), noise: the range of the per-query perturbation's relative norm, len:
the range of query lengths. The library's generator is 0.95,0.4,0.8,4,32.

    python3 bench/bench_pseudo.py --index IDX --corpus DIR [--nq 200] VARIANT ...

DIR holds tokens.npy, doclens.npy, queries_flat.npy, qlens.npy and truth100.npy (the
exact top-100 ids of its queries; the layout of bench_interaction.py). The truth of the
pseudo-queries is computed with chimera.exact_search. Needs the Python package.
"""
import argparse
import time

import numpy as np

import chimera

SETTINGS = {10: [(2, 40, 10), (4, 80, 20), (8, 160, 40), (16, 320, 80), (4, 160, 40),
                 (16, 160, 40)],
            100: [(4, 400, 100), (8, 800, 200), (16, 1600, 400), (32, 1600, 400),
                  (8, 1600, 400)]}


def pseudo_queries(tok, lens, variant, n, seed):
    """n pseudo-queries of the variant (the library's algorithm, in numpy)."""
    p, nmin, nmax, lmin, lmax = variant
    off = np.concatenate([[0], np.cumsum(lens)])
    nonempty = np.nonzero(lens > 0)[0]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        doc = rng.choice(nonempty)
        m = int(rng.integers(lmin, lmax + 1))
        noise = nmin + (nmax - nmin) * rng.random()
        rows = []
        for _ in range(m):
            src = doc if rng.random() < p else rng.choice(nonempty)
            v = np.asarray(tok[off[src] + rng.integers(0, lens[src])], dtype=np.float64)
            norm = np.linalg.norm(v)
            o = v + noise * norm / np.sqrt(v.size) * rng.standard_normal(v.size)
            rows.append((o * norm / np.linalg.norm(o)).astype(np.float32))
        out.append(np.stack(rows))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--nq", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    d = a.corpus
    tok = np.load(f"{d}/tokens.npy", mmap_mode="r")
    lens = np.load(f"{d}/doclens.npy").astype(np.int64)
    flat = np.load(f"{d}/queries_flat.npy").astype(np.float32)
    ql = np.load(f"{d}/qlens.npy").astype(np.int64)
    qoff = np.concatenate([[0], np.cumsum(ql)])
    sets = {"real": ([np.ascontiguousarray(flat[qoff[i]:qoff[i + 1]]) for i in range(ql.size)],
                     np.load(f"{d}/truth100.npy"))}
    corpus = (np.asarray(tok, dtype=np.float32), lens)
    for v in a.variants:
        f = v.split(",")
        qs = pseudo_queries(tok, lens, (float(f[0]), float(f[1]), float(f[2]), int(f[3]),
                                        int(f[4])), a.nq, a.seed)
        t0 = time.time()
        _, truth = chimera.exact_search(corpus, qs, k=100)
        print(f"# {v}: {a.nq} pseudo-queries, exact truth in {time.time() - t0:.1f} s",
              flush=True)
        sets[v] = (qs, truth)
    ix = chimera.Index.open(a.index)
    print("k\tn_probe/k_refine/k_fullbit\t" + "\t".join(sets), flush=True)
    for k, settings in SETTINGS.items():
        for s in settings:
            row = []
            for qs, truth in sets.values():
                _, ids = ix.search(qs, k=k, params={"n_probe": s[0], "k_refine": s[1],
                                                    "k_fullbit": s[2]})
                row.append(chimera.recall(ids, truth, k))
            print(f"{k}\t{s[0]}/{s[1]}/{s[2]}\t" + "\t".join(f"{r:.4f}" for r in row),
                  flush=True)


if __name__ == "__main__":
    main()
