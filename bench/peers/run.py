#!/usr/bin/env python3
"""Peer benchmark harness: every system on the same token vectors and thread count.

    bench/.venv/bin/python bench/peers/run.py --data bench/data/out --threads 2 \
        [--systems xtr-warp,fast-plaid,faiss-ivf-rabitq,...,chimera,chimera-b8] [--grid quick|full]

Reads DATA/tokens.npy [ntok, d] float32, DATA/doclens.npy [ndocs], DATA/queries.npy
[nq, m, d] and, when present, DATA/qlens.npy [nq] (real tokens per query; the rows
after them are padding and are not given to the systems) and DATA/qrels.tsv (TREC
qrels, qid = query row, docid = document row). Writes into --out (default bench/out/peers/):
    truth.trec     exact Chamfer top-k (from `chimera exact`, numpy fallback)
    results.csv    one row per (system, knob setting)
    recall_qps.png recall vs QPS (log), one line per system (its Pareto frontier), and
                   bars of build time, index size and peak RSS per system
    summary.md     QPS at Recall@10 / Recall@100 = 0.90, 0.95, 0.99 per system, build,
                   size, memory, MRR@10, and Chimera's ratio to each peer
    runs/SYSTEM/*.trec, SYSTEM.jsonl, SYSTEM.log

Each peer builds its index and sweeps its knobs in its own subprocess (this file with
--worker SYSTEM), so the peak RSS in the CSV is that system's alone (os.wait4). The
Chimera pipeline is driven through its CLI by run_chimera(); it is skipped with a
message while `chimera search` does not exist.

Timing (Timer; bench/peers/README.md): pinned to the first --threads CPUs, a warm-up
on the first 8 queries, then --reps timed runs of one batched call with all queries;
QPS from the median. Chimera the same inside `chimera search`, one process per run, with
the whole process's wall time beside. Latencies come from a further pass that submits
--lat-nq queries one at a time.
"""

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from statistics import median

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PEERS = ["xtr-warp", "fast-plaid", "faiss-ivf-rabitq", "faiss-ivf-rabitq4",
         "faiss-ivf-rabitq4-fastscan", "muvera"]
# system name -> (bits of the full codes, the exact re-rank tier's vectors or None)
CHIMERAS = {"chimera": (4, None), "chimera-b8": (8, None), "chimera-rerank": (4, "f16")}
ALL_SYSTEMS = PEERS + list(CHIMERAS)
CSV_FIELDS = ["system", "version", "params", "recall@10", "recall@100", "mrr@10", "qps",
              "qps_runs", "reps", "qps_process", "token_frac", "rerank_ms", "lat_mean_ms",
              "lat_p50_ms",
              "lat_p95_ms", "lat_p99_ms", "build_s",
              "index_mb", "peak_rss_mb", "threads", "nq", "ndocs", "ntok", "notes"]


def log(msg):
    print(f"[peers {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------
# knob grids; "quick" for a smoke test, "full" for the real sweep, "lean" for large
# corpora: the settings of "full" that were on or near some system's Pareto front on the
# 10,000-passage slice, to keep a 10^6-token sweep within an hour on two cores
# ---------------------------------------------------------------------------

LEAN = {
    "muvera": [{"n_rerank": n} for n in (200, 1000, 2000, 5000)],
    "chimera": [{"nprobe": p, "k_refine": r, "k_fullbit": f}
                for (p, r, f) in ((2, 400, 100), (4, 400, 100), (4, 1600, 300), (8, 1600, 300),
                                  (16, 1600, 300), (16, 4000, 800), (32, 4000, 800),
                                  # near the front at 10^7 tokens (bench/RESULTS.md 5.13)
                                  (16, 300, 150), (16, 600, 200), (32, 600, 200))],
}
FAISS = ("faiss-ivf-rabitq", "faiss-ivf-rabitq4", "faiss-ivf-rabitq4-fastscan")


def faiss_nlist(ntok):
    """The faiss peers' inverted lists: 4 sqrt(ntok), at least 64 tokens a list."""
    return int(max(16, min(ntok // 64, 4 * math.sqrt(ntok))))


def k_token_grid(ntok, which):
    """Tokens fetched per query token, scaled with the corpus: a fixed share of it, so
    that a sweep of a larger corpus reaches as deep into its candidate lists."""
    # from 5e-6: at 10^7 tokens 2e-5 (199 tokens) already gave Recall@100 0.96, so the
    # sweep must start lower to find a peer's fastest setting at 0.95
    shares = (5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4) if which != "quick" else (5e-5, 2e-4)
    return sorted({max(8, int(round(ntok * f))) for f in shares})


def grid(system, which, ntok=0):
    if system == "chimera-rerank":
        # the exact re-rank tier on the full-bit survivors: rerank_depth = k_fullbit
        return [dict(p, rerank_depth=p["k_fullbit"]) for p in grid("chimera", which) if p]
    if which == "lean" and system in LEAN:
        return LEAN[system]
    if which == "lean" and system in CHIMERAS:
        return LEAN["chimera"]
    if which == "lean":
        which = "full"
    if system == "fast-plaid":
        # n_full_scores keeps n_full_scores / 4 documents for the final scoring, so
        # never below 4,096 (its default) at k = 100; n_ivf_probe on to 256 of its cells,
        # since at 10^7 tokens (32,768 cells) 64 is 0.2% of them
        probes = (2, 4, 8, 16, 32, 64, 128, 256) if which == "full" else (4, 16)
        fulls = (4096, 8192, 16384) if which == "full" else (4096,)
        return [{"n_ivf_probe": p, "n_full_scores": f} for p in probes for f in fulls]
    if system in FAISS:
        probes = (2, 4, 8, 16, 32) if which == "full" else (4, 16)
        # on to 1% of the lists: at 10^7 tokens 32 is 0.25% of them, where recall may
        # still be rising
        while which == "full" and ntok and probes[-1] < 0.01 * faiss_nlist(ntok):
            probes += (2 * probes[-1],)
        return [{"nprobe": p, "k_token": kt} for p in probes
                for kt in k_token_grid(ntok, which)]
    if system == "muvera":
        if which == "full":
            return [{"n_rerank": n} for n in (100, 200, 500, 1000, 2000, 5000)]
        return [{"n_rerank": n} for n in (100, 500)]
    if system in CHIMERAS:
        if which == "full":
            return [{}] + [{"nprobe": p, "k_refine": r, "k_fullbit": f}
                           for p in (2, 4, 8, 16, 32) for (r, f) in ((400, 100), (1600, 300),
                                                                      (4000, 800))]
        return [{}] + [{"nprobe": p, "k_refine": 1000, "k_fullbit": 200} for p in (4, 16)]
    raise ValueError(system)


# ---------------------------------------------------------------------------
# TREC I/O, exact MaxSim, evaluation
# ---------------------------------------------------------------------------

def write_trec(path, results, tag):
    """results: list (per query row) of [(docid, score)] best first."""
    with open(path, "w") as f:
        for qi, res in enumerate(results):
            for r, (d, s) in enumerate(res):
                f.write(f"{qi} Q0 {int(d)} {r + 1} {float(s):.6f} {tag}\n")


def read_trec(path):
    runs = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 6:
                continue
            runs.setdefault(int(p[0]), []).append((int(p[3]), int(p[2]), float(p[4])))
    return {q: [d for _, d, _ in sorted(v)] for q, v in runs.items()}


def read_qrels(path):
    rel = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 4 and int(p[3]) > 0:
                rel.setdefault(int(p[0]), set()).add(int(p[2]))
    return rel


def evaluate(run, truth, qrels, nq):
    out = {}
    for k in (10, 100):
        tot = 0.0
        for q in range(nq):
            t = truth.get(q, [])[:k]
            if not t:
                continue
            got = set(run.get(q, [])[:k])
            tot += len(got.intersection(t)) / len(t)
        out[f"recall@{k}"] = tot / nq
    if qrels:
        mrr = 0.0
        for q in range(nq):
            rel = qrels.get(q, set())
            for i, d in enumerate(run.get(q, [])[:10]):
                if d in rel:
                    mrr += 1.0 / (i + 1)
                    break
        out["mrr@10"] = mrr / nq
    return out


class Corpus:
    def __init__(self, data, load=True):
        import numpy as np
        self.np = np
        self.doclens = np.load(os.path.join(data, "doclens.npy")).astype(np.int64)
        self.offsets = np.zeros(len(self.doclens) + 1, dtype=np.int64)
        np.cumsum(self.doclens, out=self.offsets[1:])
        t = np.load(os.path.join(data, "tokens.npy"), mmap_mode="r")
        self.tokens = np.ascontiguousarray(t, dtype=np.float32) if load else t
        q = np.load(os.path.join(data, "queries.npy"))
        if q.ndim != 3:
            raise SystemExit("queries.npy must be [nq, m, d]")
        self.queries = np.ascontiguousarray(q, dtype=np.float32)
        self.ndocs, self.ntok, self.dim = len(self.doclens), int(self.offsets[-1]), t.shape[1]
        self.nq = q.shape[0]
        lp = os.path.join(data, "qlens.npy")
        # rows past qlens[i] are padding: zeroed here, whatever the file holds (a query
        # set cut from longer queries keeps the cut rows), so that they add 0 to a
        # Chamfer score wherever the whole [nq, m, d] block is used (exact_numpy)
        self.qlens = (np.load(lp).astype(np.int64) if os.path.exists(lp)
                      else np.full(self.nq, q.shape[1], dtype=np.int64))
        for i in range(self.nq):
            self.queries[i, self.qlens[i]:] = 0.0
        self.qlist = [self.queries[i, :self.qlens[i]] for i in range(self.nq)]

    def doc(self, i):
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def maxsim(self, Q, docs):
        """Exact Chamfer scores of query Q [m, d] against documents `docs` (numpy; the
        reference the compiled re-ranker is checked against)."""
        np = self.np
        docs = np.asarray(docs, dtype=np.int64)
        if len(docs) == 0:
            return np.zeros(0, dtype=np.float32)
        return np.array([(self.doc(i) @ Q.T).max(axis=0).sum() for i in docs],
                        dtype=np.float32)


_MAXSIM = []


def maxsim_kernel():
    """A compiled (numba), multi-threaded exact MaxSim over chosen documents: parallel
    over the documents, each one's rows of the token matrix multiplied in place (no
    gather) by the query through BLAS (sgemm), then the max over the document's tokens
    per query token, summed."""
    if _MAXSIM:
        return _MAXSIM[0]
    import numpy as np
    from numba import njit, prange

    @njit(parallel=True, fastmath=True, cache=False)
    def maxsim(T, off, docs, QT, out):
        for c in prange(docs.shape[0]):
            doc = docs[c]
            S = np.dot(T[off[doc]:off[doc + 1]], QT)   # [document tokens, query tokens]
            s = np.float32(0.0)
            for i in range(S.shape[1]):
                best = -np.inf
                for t in range(S.shape[0]):
                    best = max(best, S[t, i])
                s += best
            out[c] = s

    _MAXSIM.append(maxsim)
    return maxsim


class Reranker:
    """Exact MaxSim re-ranking of candidate documents, shared by every re-rank pipeline
    (faiss IVF-RaBitQ, MUVERA): compiled and parallel over documents on the run's
    threads (numba; ~20-24 GFLOP/s per core measured), not an interpreter loop. Counts
    the tokens it scores and the time it takes."""

    def __init__(self, corpus, threads):
        import numba
        import scipy.linalg.cython_blas  # noqa: F401  (the BLAS numba's np.dot calls)
        from threadpoolctl import ThreadpoolController
        numba.set_num_threads(threads)
        # the threads are numba's, one document each: scipy's BLAS (what np.dot calls
        # inside the kernel) runs single-threaded there, or its threads would fight them;
        # faiss's and numpy's own BLAS are left as they are
        for lib in ThreadpoolController().lib_controllers:
            if "scipy.libs" in lib.filepath:
                lib.set_num_threads(1)
        self.c = corpus
        self.np = corpus.np
        self.reset()
        # compile the kernel now, outside any timing
        np = self.np
        self.scores(np.zeros((4, corpus.dim), dtype=np.float32),
                    np.arange(min(2, corpus.ndocs), dtype=np.int64))
        self.reset()

    def reset(self):
        """Zero the counters stats() reports."""
        self.scored_tokens = 0
        self.calls = 0
        self.seconds = 0.0

    def scores(self, Q, docs):
        np = self.np
        QT = np.ascontiguousarray(Q.T, dtype=np.float32)
        out = np.empty(len(docs), dtype=np.float32)
        t0 = time.perf_counter()
        if len(docs):
            maxsim_kernel()(self.c.tokens, self.c.offsets, docs, QT, out)
        self.seconds += time.perf_counter() - t0
        self.scored_tokens += int(self.c.doclens[docs].sum())
        self.calls += 1
        return out

    def rerank(self, Q, docs, k):
        np = self.np
        docs = np.unique(np.asarray(docs, dtype=np.int64))
        docs = docs[docs >= 0]
        s = self.scores(Q, docs)
        top = np.argsort(-s, kind="stable")[:k]
        return [(int(docs[i]), float(s[i])) for i in top]

    def stats(self):
        """Since the last reset, per re-rank: token_frac, the mean share of the corpus's
        tokens scored, and rerank_ms, the time; then reset."""
        n = max(1, self.calls)
        out = {"token_frac": self.scored_tokens / n / self.c.ntok,
               "rerank_ms": self.seconds / n * 1e3}
        self.reset()
        return out

    def gate(self, exact_qps, nq=20, share=0.1, seed=0):
        """The re-ranker's own check, before any sweep: re-ranking a random `share` of
        the documents must beat brute-force exact search per query, and agree with the
        numpy reference. Returns (ms per re-rank, ms per exact query, passed). (The
        pipelines' gate, a setting that re-ranks under 20% of the tokens must beat exact
        search, is checked on the measured rows: summary_table.)"""
        np = self.np
        rng = np.random.default_rng(seed)
        qs = [self.c.qlist[i % self.c.nq] for i in range(nq)]
        sets = [np.sort(rng.choice(self.c.ndocs, max(1, int(share * self.c.ndocs)),
                                   replace=False)) for _ in qs]
        ref = self.c.maxsim(qs[0], sets[0][:200])
        got = self.scores(qs[0], sets[0][:200])
        if not np.allclose(ref, got, rtol=1e-4, atol=1e-4):
            raise SystemExit("re-ranker disagrees with the numpy reference: harness bug")
        for Q, D in zip(qs[:3], sets[:3]):   # compile and warm
            self.scores(Q, D)
        t0 = time.perf_counter()
        for Q, D in zip(qs, sets):
            self.scores(Q, D)
        ms = (time.perf_counter() - t0) / nq * 1e3
        self.reset()
        exact_ms = 1e3 / exact_qps if exact_qps else float("inf")
        return ms, exact_ms, ms < exact_ms


def exact_numpy(corpus, k, qrows=None, qbatch=32, chunk_tokens=1 << 17):
    """Exact Chamfer top-k for the given query rows (all by default)."""
    np = corpus.np
    qrows = np.arange(corpus.nq) if qrows is None else np.asarray(qrows)
    nd = corpus.ndocs
    # document-aligned token chunks
    bounds = [0]
    while bounds[-1] < nd:
        lo = bounds[-1]
        hi = int(np.searchsorted(corpus.offsets, corpus.offsets[lo] + chunk_tokens, "right")) - 1
        bounds.append(max(hi, lo + 1) if hi < nd else nd)
    out = []
    for b0 in range(0, len(qrows), qbatch):
        qs = qrows[b0:b0 + qbatch]
        Q = corpus.queries[qs]                               # [b, m, d]
        b, m, d = Q.shape
        Qf = Q.reshape(b * m, d)
        scores = np.empty((b, nd), dtype=np.float32)
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            t0, t1 = corpus.offsets[lo], corpus.offsets[hi]
            S = Qf @ corpus.tokens[t0:t1].T                  # [b*m, ntok chunk]
            seg = corpus.offsets[lo:hi] - t0
            mx = np.maximum.reduceat(S, seg, axis=1)         # [b*m, docs]
            scores[:, lo:hi] = mx.reshape(b, m, hi - lo).sum(axis=1)
        for i in range(b):
            top = np.argpartition(-scores[i], min(k, nd - 1))[:k]
            top = top[np.argsort(-scores[i][top], kind="stable")]
            out.append([(int(t), float(scores[i][t])) for t in top])
    return out


# ---------------------------------------------------------------------------
# timing helpers (used inside workers)
# ---------------------------------------------------------------------------

def lat_stats(lat_s):
    import numpy as np
    if not lat_s:
        return {}
    a = np.asarray(lat_s) * 1e3
    return {"lat_mean_ms": float(a.mean()), "lat_p50_ms": float(np.percentile(a, 50)),
            "lat_p95_ms": float(np.percentile(a, 95)), "lat_p99_ms": float(np.percentile(a, 99))}


def du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    tot = 0
    for root, _, files in os.walk(path):
        for f in files:
            fp = os.path.join(root, f)
            if not os.path.islink(fp):
                tot += os.path.getsize(fp)
    return tot


class Timer:
    """The one timing protocol every system gets: a warm-up of the first WARM queries
    (one call each), then `reps` timed runs of the whole batch; QPS from the median.
    A setting slower than a third of exact search's QPS is timed once (it cannot be on
    anyone's front: exact search is faster and exact), but still run, so that every
    system's recall is swept as far as its grid goes; a system's sweep stops after
    `budget_s` seconds."""
    WARM = 8

    def __init__(self, args):
        self.reps = max(1, args.reps)
        self.floor = (args.exact_qps or 0.0) / 3.0
        self.budget_s = args.budget_s
        self.t_start = time.perf_counter()

    def skip(self):
        if time.perf_counter() - self.t_start > self.budget_s:
            return f"the sweep's budget of {self.budget_s:.0f}s is spent"
        return None

    def measure(self, nq, batch, warm):
        """-> (results of the last timed run, [wall seconds per run])"""
        warm()
        walls, res = [], None
        for _ in range(self.reps):
            t0 = time.perf_counter()
            res = batch()
            walls.append(time.perf_counter() - t0)
            if nq / walls[-1] < self.floor:
                break
        return res, walls


def sweep(name, version, points, batch_search, one_search, corpus, args, wdir, build_s,
          index_bytes, notes="", extra=None):
    """Run batch_search(params) -> results and one_search(params, qi) for each point,
    timed by Timer; extra(params) -> dict of columns measured during the timed runs."""
    rows = []
    runs = os.path.join(wdir, "runs")
    os.makedirs(runs, exist_ok=True)
    timer = Timer(args)
    for p in points:
        tag = "_".join(f"{k}{v}" for k, v in p.items()) or "default"
        why = timer.skip()
        if why:
            log(f"{name} {p}: skipped ({why})")
            continue
        try:
            res, walls = timer.measure(
                corpus.nq, lambda: batch_search(p),
                lambda: [one_search(p, qi) for qi in range(min(Timer.WARM, corpus.nq))])
            more = extra(p) if extra else {}
            lat = []
            for qi in range(min(args.lat_nq, corpus.nq)):
                t1 = time.perf_counter()
                one_search(p, qi)
                lat.append(time.perf_counter() - t1)
        except Exception as e:  # one bad setting should not lose the others
            log(f"{name} {p}: failed: {e!r}")
            continue
        path = os.path.join(runs, f"{tag}.trec")
        write_trec(path, res, name)
        row = {"system": name, "version": version, "params": json.dumps(p, sort_keys=True),
               "qps": corpus.nq / median(walls), "reps": len(walls),
               "qps_runs": " ".join(f"{corpus.nq / w:.1f}" for w in walls),
               "build_s": build_s, "index_mb": index_bytes / 2**20,
               "threads": args.threads, "nq": corpus.nq, "ndocs": corpus.ndocs,
               "ntok": corpus.ntok, "notes": notes, "run": path}
        row.update(more)
        row.update(lat_stats(lat))
        rows.append(row)
        log(f"{name} {p}: {row['qps']:.1f} QPS (runs {row['qps_runs']}), p50 "
            f"{row.get('lat_p50_ms', float('nan')):.2f} ms")
        with open(os.path.join(wdir, "rows.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
    return rows


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "?"


# ---------------------------------------------------------------------------
# peers (each runs inside its own worker process)
# ---------------------------------------------------------------------------

def reused_build(args, idx):
    """build seconds of an index kept from an earlier run (--reuse-index), else None."""
    bj = os.path.join(idx, "..", "build.json")
    if args.reuse_index and os.path.isdir(idx) and os.path.exists(bj):
        with open(bj) as f:
            b = json.load(f)
        log(f"reusing {idx} (built in {b['build_s']:.0f}s by an earlier run)")
        args.build_hwm = b.get("vm_hwm_bytes", 0)
        return b["build_s"]
    return None


def record_build(idx, build_s):
    with open(os.path.join(idx, "..", "build.json"), "w") as f:
        json.dump({"build_s": build_s}, f)


def xtr_warp_points(meta, k, n_query_tokens, which):
    """xtr-warp's settings: nprobe swept up to 1,024 cells, and with it the knobs its own
    heuristic (xtr_warp.hyperparams.optimize) derives from nprobe: bound (centroids
    scored before pruning), t' (the missing-similarity policy's depth) and max_candidates,
    by the heuristic's formulas, except that t' is not capped at 200,000; each at the
    heuristic's centroid_score_threshold and at 0 (the threshold is tuned to ColBERT's
    score scale)."""
    from xtr_warp.hyperparams import optimize
    heur = optimize(meta, k, n_query_tokens)
    n_emb = meta["num_embeddings"]
    parts = meta.get("num_centroids", meta["num_partitions"])
    density = n_emb / max(1, parts)
    avg_doclen = meta["avg_doclen"]
    probes = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if which != "quick" else (4, 32)
    thresholds = (heur[2], 0.0) if which != "quick" else (heur[2],)
    pts = []
    for thr in thresholds:
        for nprobe in probes:
            if nprobe > parts:
                break
            bound = min(parts, max(nprobe * 8, int(0.05 * parts)))
            cand = max(int(density * nprobe * n_query_tokens), k * 50)
            cand = min(cand, n_emb) // 2
            tp = int(density * nprobe * max(1, n_query_tokens // 2))
            if avg_doclen > 0 and density < 256:
                tp = int(tp * max(0.35, min(120.0 / avg_doclen, 1.0)))
            tp = min(max(tp, 5000), n_emb)
            pts.append({"nprobe": nprobe, "bound": bound, "t_prime": tp,
                        "max_candidates": cand, "centroid_score_threshold": thr})
    return pts, dict(zip(("bound", "nprobe", "centroid_score_threshold", "max_candidates",
                          "t_prime"), heur))


def run_xtr_warp(corpus, args, wdir):
    import torch
    torch.set_num_threads(args.threads)
    from xtr_warp import XTRWarp
    idx = os.path.join(wdir, "index")
    build_s = reused_build(args, idx)
    if build_s is None:
        shutil.rmtree(idx, ignore_errors=True)
        docs = [torch.from_numpy(corpus.doc(i).copy()) for i in range(corpus.ndocs)]
        t0 = time.perf_counter()
        XTRWarp(index=idx).create(docs, device="cpu", show_progress=False, seed=42,
                                  n_samples_kmeans=args.kmeans_docs)
        build_s = time.perf_counter() - t0
        record_build(idx, build_s)
        del docs
    w = XTRWarp(index=idx)
    w.load(device="cpu", mmap=True)
    Ql = [torch.from_numpy(q) for q in corpus.qlist]
    k = args.k
    meta = w._load_metadata() or {}
    # the heuristic sees the padded batch's width, as search() does
    width = max(q.shape[0] for q in corpus.qlist)
    points, heur = xtr_warp_points(meta, k, width, args.grid)
    notes = (f"nbits=4 partitions={meta.get('num_partitions', '?')} "
             f"n_samples_kmeans={args.kmeans_docs or 'heuristic'}; its heuristic for this "
             f"batch: {json.dumps(heur)}")
    points = [heur] + points

    def batch(p):
        res = w.search(Ql, top_k=k, num_threads=args.threads, show_progress=False, **p)
        return [[(d, s) for d, s in r] for r in res]

    def one(p, qi):
        w.search(Ql[qi].unsqueeze(0), top_k=k, num_threads=args.threads, show_progress=False,
                 **p)

    return sweep("xtr-warp", _version("xtr-warp-rs"), points, batch, one, corpus, args, wdir,
                 build_s, du(idx), notes)


def run_fast_plaid(corpus, args, wdir):
    import torch
    torch.set_num_threads(args.threads)
    from fast_plaid import search as fps
    idx = os.path.join(wdir, "index")
    build_s = reused_build(args, idx)
    if build_s is None:
        shutil.rmtree(idx, ignore_errors=True)
        docs = [torch.from_numpy(corpus.doc(i).copy()) for i in range(corpus.ndocs)]
        t0 = time.perf_counter()
        fp = fps.FastPlaid(index=idx, device="cpu")
        fp.create(documents_embeddings=docs, nbits=4, seed=42,
                  n_samples_kmeans=args.kmeans_docs)
        build_s = time.perf_counter() - t0
        record_build(idx, build_s)
        del docs
    fp = fps.FastPlaid(index=idx, device="cpu")
    Ql = [torch.from_numpy(q) for q in corpus.qlist]
    k = args.k

    # A batch runs as its docs say for CPU search: n_processes query shards in parallel
    # (joblib threads), here one per thread, each on one torch thread; a single query
    # gets all the threads inside torch.
    def batch(p):
        torch.set_num_threads(1)
        res = fp.search(Ql, top_k=k, show_progress=False, n_processes=args.threads, **p)
        torch.set_num_threads(args.threads)
        return [[(d, s) for d, s in r] for r in res]

    def one(p, qi):
        fp.search([Ql[qi]], top_k=k, show_progress=False, n_processes=1, **p)

    return sweep("fast-plaid", _version("fast-plaid"), grid("fast-plaid", args.grid), batch,
                 one, corpus, args, wdir, build_s, du(idx),
                 f"nbits=4 n_samples_kmeans={args.kmeans_docs or 'heuristic'}; batch: "
                 f"n_processes={args.threads} x 1 torch thread")


def rerank_gate(rr, args, name):
    """The re-ranker's sanity gate (Reranker.gate), logged and kept in the rows' notes."""
    ms, exact_ms, ok = rr.gate(args.exact_qps)
    msg = (f"re-ranker check: 10% of the documents re-ranked in {ms:.2f} ms per query against "
           f"{exact_ms:.2f} ms per exact query: {'passed' if ok else 'FAILED'}")
    log(f"{name} {msg}")
    if not ok and not args.no_gate:
        raise SystemExit(f"{name}: {msg} (the harness's re-ranker is too slow; "
                         "--no-gate to measure anyway)")
    return msg


def run_faiss_ivf_rabitq(corpus, args, wdir):
    """ColBERTv1 recipe: token-level ANN (IVF + RaBitQ codes) gathers candidate
    documents, which are re-ranked by exact MaxSim over their full-precision tokens.
    Variants: 1-bit codes (faiss-ivf-rabitq), 4-bit extended codes (faiss-ivf-rabitq4),
    and 4-bit codes in FastScan layout (faiss-ivf-rabitq4-fastscan)."""
    import faiss
    np = corpus.np
    name = args.worker
    faiss.omp_set_num_threads(args.threads)
    if not hasattr(faiss, "IndexIVFRaBitQ"):
        raise SystemExit("installed faiss has no IndexIVFRaBitQ")
    ntok, d = corpus.ntok, corpus.dim
    nlist = faiss_nlist(ntok)
    rr = Reranker(corpus, args.threads)
    gate = rerank_gate(rr, args, name)
    t0 = time.perf_counter()
    quant = faiss.IndexFlatIP(d)
    if name == "faiss-ivf-rabitq":
        index = faiss.IndexIVFRaBitQ(quant, d, nlist, faiss.METRIC_INNER_PRODUCT)
        kind = "1-bit RaBitQ"
    elif name == "faiss-ivf-rabitq4":
        index = faiss.IndexIVFRaBitQ(quant, d, nlist, faiss.METRIC_INNER_PRODUCT, True, 4)
        kind = "4-bit extended RaBitQ"
    else:
        index = faiss.IndexIVFRaBitQFastScan(quant, d, nlist, faiss.METRIC_INNER_PRODUCT, 32,
                                             True, 4)
        kind = "4-bit extended RaBitQ, FastScan (bbs 32)"
    rng = np.random.default_rng(0)
    ntrain = min(ntok, 64 * nlist)
    train = corpus.tokens[np.sort(rng.choice(ntok, ntrain, replace=False))]
    index.train(train)
    index.add(corpus.tokens)
    build_s = time.perf_counter() - t0
    ipath = os.path.join(wdir, "index.faiss")
    faiss.write_index(index, ipath)
    tok2doc = np.repeat(np.arange(corpus.ndocs, dtype=np.int64), corpus.doclens)
    Qflat = np.ascontiguousarray(np.concatenate(corpus.qlist))
    qoff = np.concatenate(([0], np.cumsum(corpus.qlens)))
    nq = corpus.nq
    k = args.k

    def batch(p):
        index.nprobe = p["nprobe"]
        _, I = index.search(Qflat, p["k_token"])
        rr.reset()
        out = []
        for q in range(nq):
            Iq = I[qoff[q]:qoff[q + 1]].ravel()
            out.append(rr.rerank(corpus.qlist[q], tok2doc[Iq[Iq >= 0]], k))
        return out

    def one(p, qi):
        index.nprobe = p["nprobe"]
        _, I = index.search(corpus.qlist[qi], p["k_token"])
        I = I.ravel()
        rr.rerank(corpus.qlist[qi], tok2doc[I[I >= 0]], k)

    size = du(ipath) + corpus.tokens.nbytes
    notes = (f"nlist={nlist} {kind} tokens (qb {index.qb}) + exact re-rank over float32 "
             f"tokens; index_mb includes the float32 tokens "
             f"({corpus.tokens.nbytes / 2**20:.0f} MiB); {gate}")
    return sweep(name, _version("faiss-cpu"), grid(name, args.grid, ntok), batch, one, corpus,
                 args, wdir, build_s, size, notes,
                 extra=lambda p: rr.stats())


def run_muvera(corpus, args, wdir):
    """MUVERA: fixed dimensional encodings (FDE) in a faiss HNSW (inner product),
    the top n_rerank documents re-ranked by exact MaxSim."""
    import faiss
    from muvera import Muvera
    np = corpus.np
    faiss.omp_set_num_threads(args.threads)
    R, ksim, dproj = 20, 5, 8
    enc = Muvera(num_repetitions=R, num_simhash_projections=ksim, dimension=corpus.dim,
                 projection_type="ams_sketch", projection_dimension=dproj,
                 fill_empty_partitions=True, seed=42)
    t0 = time.perf_counter()
    D = np.zeros((corpus.ndocs, enc.output_dimension), dtype=np.float32)
    step = 2048
    for s in range(0, corpus.ndocs, step):
        e = min(corpus.ndocs, s + step)
        D[s:e] = enc.encode_documents([corpus.doc(i) for i in range(s, e)])
    t_enc = time.perf_counter() - t0
    index = faiss.IndexHNSWFlat(enc.output_dimension, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 100
    index.add(D)
    build_s = time.perf_counter() - t0
    ipath = os.path.join(wdir, "fde_hnsw.faiss")
    faiss.write_index(index, ipath)
    del D
    k = args.k
    rr = Reranker(corpus, args.threads)
    gate = rerank_gate(rr, args, "muvera")

    def params(p):
        sp = faiss.SearchParametersHNSW()
        sp.efSearch = max(p["n_rerank"], 64)
        return sp

    def batch(p):
        Qf = np.ascontiguousarray(enc.encode_queries(corpus.qlist), dtype=np.float32)
        _, I = index.search(Qf, p["n_rerank"], params=params(p))
        rr.reset()
        return [rr.rerank(corpus.qlist[q], I[q], k) for q in range(corpus.nq)]

    def one(p, qi):
        q = enc.encode_queries(corpus.qlist[qi])
        _, I = index.search(np.asarray(q, dtype=np.float32).reshape(1, -1), p["n_rerank"],
                            params=params(p))
        rr.rerank(corpus.qlist[qi], I[0], k)

    size = du(ipath) + corpus.tokens.nbytes
    notes = (f"FDE R={R} ksim={ksim} dproj={dproj} dim={enc.output_dimension} (encode "
             f"{t_enc:.1f}s) in HNSW M=32 efC=100, efSearch=max(n_rerank,64); exact re-rank; "
             f"index_mb includes float32 tokens; {gate}")
    return sweep("muvera", "muvera-python " + _version("muvera-python"),
                 grid("muvera", args.grid), batch, one, corpus, args, wdir, build_s, size, notes,
                 extra=lambda p: rr.stats())


WORKERS = {"xtr-warp": run_xtr_warp, "fast-plaid": run_fast_plaid,
           "faiss-ivf-rabitq": run_faiss_ivf_rabitq, "faiss-ivf-rabitq4": run_faiss_ivf_rabitq,
           "faiss-ivf-rabitq4-fastscan": run_faiss_ivf_rabitq, "muvera": run_muvera}


def worker_main(args):
    wdir = os.path.join(args.out, "work", args.worker)
    os.makedirs(wdir, exist_ok=True)
    open(os.path.join(wdir, "rows.jsonl"), "w").close()
    if os.path.exists(os.path.join(wdir, "rss.json")):
        os.remove(os.path.join(wdir, "rss.json"))
    if args.worker in FAISS or args.worker == "muvera":
        # faiss's OpenMP threads would otherwise spin after each search call while the
        # re-ranker's threads need the same cores (costing single-query latency several
        # ms); set before faiss loads its OpenMP runtime
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    corpus = Corpus(args.data)
    args.build_hwm = 0
    WORKERS[args.worker](corpus, args, wdir)
    with open(os.path.join(wdir, "rss.json"), "w") as f:
        json.dump({"vm_hwm_bytes": max(vm_hwm(), args.build_hwm)}, f)


def vm_hwm():
    """Peak resident set of this process since its exec (Linux VmHWM), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---------------------------------------------------------------------------
# Chimera, through its CLI
# ---------------------------------------------------------------------------

def find_chimera(explicit):
    for c in (explicit, os.environ.get("CHIMERA"), os.path.join(REPO, "build", "chimera"),
              shutil.which("chimera")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def chimera_help(chimera, cmd):
    """The --help text of `chimera CMD`, or None when the command does not exist."""
    if not chimera:
        return None
    try:
        r = subprocess.run([chimera, cmd, "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30, text=True)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 and "unknown command" not in r.stdout else None


def chimera_has(chimera, cmd):
    return chimera_help(chimera, cmd) is not None


def chimera_query_args(chimera, cmd, data):
    """--queries (and --qlens) for `chimera CMD`: the packed queries with their lengths
    when the data has them and the command takes --qlens, else the [nq, m, d] file."""
    flat, ql = os.path.join(data, "queries_flat.npy"), os.path.join(data, "qlens.npy")
    if os.path.exists(flat) and os.path.exists(ql) and "--qlens" in (
            chimera_help(chimera, cmd) or ""):
        return ["--queries", flat, "--qlens", ql]
    return ["--queries", os.path.join(data, "queries.npy")]


class _Child:
    """Popen whose peak RSS is taken from wait4 (per process, not all children)."""

    def __init__(self, cmd, logf, env=None):
        self.t0 = time.perf_counter()
        self.lf = open(logf, "w")
        self.p = subprocess.Popen(cmd, stdout=self.lf, stderr=subprocess.STDOUT, env=env)

    def wait(self):
        _, status, ru = os.wait4(self.p.pid, 0)
        self.p.returncode = os.waitstatus_to_exitcode(status)
        self.lf.close()
        return self.p.returncode, time.perf_counter() - self.t0, ru.ru_maxrss * 1024


def latency_queries(chimera, data, wdir, n):
    """--queries (and --qlens) arguments for the first n queries, written into wdir."""
    import numpy as np
    args = chimera_query_args(chimera, "search", data)
    if "--qlens" in args:
        ql = np.load(args[3])[:n]
        flat = np.load(args[1], mmap_mode="r")[:int(ql.sum())]
        np.save(os.path.join(wdir, "lat_qlens.npy"), ql)
        np.save(os.path.join(wdir, "lat_queries_flat.npy"), np.ascontiguousarray(flat))
        return ["--queries", os.path.join(wdir, "lat_queries_flat.npy"),
                "--qlens", os.path.join(wdir, "lat_qlens.npy")]
    q = np.load(args[1], mmap_mode="r")[:n]
    np.save(os.path.join(wdir, "lat_queries.npy"), np.ascontiguousarray(q))
    return ["--queries", os.path.join(wdir, "lat_queries.npy")]


def run_chimera(chimera, data, out, args, points, nq, name="chimera", bits=4, rerank=None):
    """Build a Chimera index (`chimera build --bits BITS [--rerank F]`) and sweep
    `chimera search`.

    Returns CSV rows (without quality columns, which the caller adds). Each setting runs
    `chimera search` args.reps times, as a process each: QPS is the median of what the
    CLI reports (its own clock around the batch, after its warm-up of the first 8
    queries: the protocol the peers get in Timer) and qps_process the median of nq over
    the whole process's wall time (start, index load, warm-up, search, writing the run).
    The empty setting {} is the index's own calibrated defaults for k. Latencies come
    from a further `chimera search --latency` pass (one query at a time) over the first
    args.lat_nq queries, as for the peers (0: no such pass)."""
    threads, k, lat_nq = args.threads, args.k, args.lat_nq
    wdir = os.path.join(out, "work", name)
    runs = os.path.join(wdir, "runs")
    os.makedirs(runs, exist_ok=True)
    logf = os.path.join(wdir, "chimera.log")
    open(logf, "w").close()
    idx = os.path.join(wdir, "index")
    shutil.rmtree(idx, ignore_errors=True)
    env = dict(os.environ)
    build = [chimera, "build", "--tokens", os.path.join(data, "tokens.npy"),
             "--doclens", os.path.join(data, "doclens.npy"), "--out", idx,
             "--threads", str(threads), "--bits", str(bits)] + (
             ["--rerank", rerank] if rerank else [])
    rc, build_s, build_rss, txt = _call(build, logf, env)
    if rc != 0:
        log(f"{name} build failed (rc {rc}); see {logf}")
        return []
    lat_args = latency_queries(chimera, data, wdir, min(lat_nq, nq)) if lat_nq > 0 else None
    size = du(idx)
    ver = subprocess.run([chimera, "version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    rows = []
    timer = Timer(args)
    for p in points:
        tag = "_".join(f"{k_}{v}" for k_, v in p.items()) or "defaults"
        why = timer.skip()
        if why:
            log(f"{name} {p}: skipped ({why})")
            continue
        run_path = os.path.join(runs, f"{tag}.trec")
        knobs = ["-k", str(k), "--threads", str(threads)]
        for key, flag in (("nprobe", "--nprobe"), ("k_refine", "--k-refine"),
                          ("k_fullbit", "--k-fullbit"), ("rerank_depth", "--rerank-depth")):
            if key in p:
                knobs += [flag, str(p[key])]
        cmd = [chimera, "search", idx] + chimera_query_args(chimera, "search", data) + knobs + [
               "--out", run_path]
        reported, walls, rss, used = [], [], 0, ""
        for _ in range(timer.reps):
            rc, wall, rss1, txt = _call(cmd, logf, env)
            if rc != 0:
                break
            rss = max(rss, rss1)
            m = re.search(r"([\d.]+)\s*queries/s", txt)
            reported.append(float(m.group(1)) if m else nq / wall)
            walls.append(wall)
            m = re.search(r"(n_probe=\d+ k_refine=\d+ k_fullbit=\d+)", txt)
            used = m.group(1) if m else ""
            if reported[-1] < timer.floor:
                break
        if rc != 0:
            log(f"{name} search {p} failed (rc {rc}); see {logf}")
            continue
        row = {"system": name, "version": ver, "params": json.dumps(p, sort_keys=True),
               "qps": median(reported), "reps": len(reported),
               "qps_runs": " ".join(f"{v:.1f}" for v in reported),
               "qps_process": nq / median(walls), "build_s": build_s, "index_mb": size / 2**20,
               "peak_rss_mb": max(rss, build_rss) / 2**20, "threads": threads, "nq": nq,
               "notes": "qps: chimera search's own clock after its warm-up; qps_process: "
                        "the whole process" + (f"; ran {used}" if used else ""),
               "run": run_path}
        if lat_args:
            # one query at a time (--latency); its per-query latencies
            rc, _, rss2, txt2 = _call([chimera, "search", idx] + lat_args + knobs
                                      + ["--latency"], logf, env)
            if rc == 0:
                txt = txt2
                row["peak_rss_mb"] = max(rss, rss2, build_rss) / 2**20
        m = re.search(r"latency ms mean ([\d.]+) p50 ([\d.]+) p95 ([\d.]+) p99 ([\d.]+)", txt)
        if m:
            for stat, v in zip(("mean", "p50", "p95", "p99"), m.groups()):
                row[f"lat_{stat}_ms"] = float(v)
        rows.append(row)
        log(f"{name} {p}: {row['qps']:.1f} QPS (runs {row['qps_runs']}; whole process "
            f"{row['qps_process']:.1f}) {used}")
    return rows


# Linux keeps a process's ru_maxrss across exec, so a command forked straight from this
# (large) Python process would report at least our own size. The shim is a small process
# that forks the command and reports the command's own peak.
_RSS_SHIM = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, st, ru = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(ru.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(st))
"""


def _call(cmd, logf, env):
    """Run cmd; return (exit code, wall seconds, the command's peak RSS bytes, output)."""
    with open(logf, "a") as lf:
        lf.write("$ " + " ".join(cmd) + "\n")
    rssf = logf + ".rss"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-S", "-c", _RSS_SHIM, rssf] + cmd,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    wall = time.perf_counter() - t0
    with open(logf, "a") as lf:
        lf.write(p.stdout)
    try:
        with open(rssf) as f:
            rss = int(f.read())
    except (OSError, ValueError):
        rss = 0
    return p.returncode, wall, rss, p.stdout


# ---------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------

def get_truth(args, corpus, chimera):
    path = os.path.join(args.out, "truth.trec")
    k = args.k
    src = None
    exact_row = None
    if chimera and chimera_has(chimera, "exact") and not args.numpy_truth:
        cmd = [chimera, "exact", "--tokens", os.path.join(args.data, "tokens.npy"),
               "--doclens", os.path.join(args.data, "doclens.npy"),
               ] + chimera_query_args(chimera, "exact", args.data) + [
               "-k", str(k), "--out", path, "--threads", str(args.threads)]
        log("exact truth: " + " ".join(cmd))
        qpss = []
        for _ in range(max(1, args.reps)):   # exact search is timed like every system
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                break
            m = re.search(r"([\d.]+) queries/s", r.stdout)
            if m:
                qpss.append(float(m.group(1)))
        if r.returncode == 0:
            src = "chimera exact"
            log(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "chimera exact done")
            rss = re.search(r"peak RSS ([\d.]+) MiB", r.stdout)
            if qpss:
                # exact search is a system too: its speed, on the same threads
                exact_row = {"system": "exact", "version": "chimera exact",
                             "params": json.dumps({"k": k}), "qps": median(qpss),
                             "reps": len(qpss), "qps_runs": " ".join(f"{v:.1f}" for v in qpss),
                             "build_s": 0.0, "index_mb": corpus.tokens.nbytes / 2**20,
                             "peak_rss_mb": float(rss.group(1)) if rss else None,
                             "threads": args.threads, "nq": corpus.nq, "run": path,
                             "notes": "blocked sgemm over the float32 tokens (the truth run)"}
        else:
            log(f"chimera exact failed (rc {r.returncode}): {r.stdout[-500:]}; using numpy")
    if src is None:
        log(f"exact truth in numpy ({corpus.nq} queries x {corpus.ntok} tokens)")
        t0 = time.perf_counter()
        write_trec(path, exact_numpy(corpus, k), "exact-numpy")
        log(f"numpy exact took {time.perf_counter() - t0:.1f}s")
        src = "numpy"
    truth = read_trec(path)
    check = {"truth_source": src, "exact_row": exact_row}
    if src == "chimera exact" and args.check_nq > 0:
        # cross-check a sample of queries against the numpy implementation
        rows = list(range(min(args.check_nq, corpus.nq)))
        ref = exact_numpy(corpus, 10, rows)
        agree = sum(len(set(truth[q][:10]) & {d for d, _ in ref[i]}) for i, q in enumerate(rows))
        check["numpy_agreement@10"] = agree / (10 * len(rows))
        log(f"chimera exact vs numpy on {len(rows)} queries: top-10 agreement "
            f"{check['numpy_agreement@10']:.4f}")
    return truth, check


TARGETS = (0.90, 0.95, 0.99)


def summary_table(rows):
    """Markdown: per system, QPS at fixed Recall@10 / Recall@100 on its Pareto front
    (log-linear interpolation, bench/pareto.py), the best recall reached, build time,
    index size, peak RSS, MRR@10, and Chimera's speed ratio at Recall@100 0.90 / 0.95."""
    sys.path.insert(0, os.path.dirname(HERE))
    from pareto import front, qps_at
    systems = []
    for r in rows:
        if r["system"] not in systems:
            systems.append(r["system"])
    stats = {}
    for s in systems:
        rs = [r for r in rows if r["system"] == s and r.get("qps")]
        st = {}
        for metric in ("recall@10", "recall@100"):
            fr = front([(r[metric], r["qps"]) for r in rs if r.get(metric) is not None])
            st[metric] = [qps_at(fr, t) for t in TARGETS]
            st["max " + metric] = max((r[metric] for r in rs if r.get(metric) is not None),
                                      default=None)
        st["build_s"] = max((r.get("build_s") or 0 for r in rs), default=0)
        st["index_mb"] = max((r.get("index_mb") or 0 for r in rs), default=0)
        st["peak_rss_mb"] = max((r.get("peak_rss_mb") or 0 for r in rs), default=0)
        # MRR@10 of the fastest setting with Recall@100 >= 0.95 (else of the best recall)
        ok = [r for r in rs if (r.get("recall@100") or 0) >= 0.95]
        pick = max(ok, key=lambda r: r["qps"]) if ok else max(
            rs, key=lambda r: r.get("recall@100") or 0, default=None)
        st["mrr@10"] = pick.get("mrr@10") if pick else None
        stats[s] = st

    def f(v, fmt="{:.1f}"):
        return "-" if v is None else fmt.format(v)

    head = ("| system | " + " | ".join(f"R@10 {t:.2f}" for t in TARGETS) + " | " +
            " | ".join(f"R@100 {t:.2f}" for t in TARGETS) +
            " | max R@10 / R@100 | build s | index MiB | peak RSS MiB | MRR@10 |")
    out = [head, "|" + " --- |" * (head.count("|") - 1)]
    for s in systems:
        st = stats[s]
        out.append(f"| {s} | " + " | ".join(f(v) for v in st["recall@10"]) + " | " +
                   " | ".join(f(v) for v in st["recall@100"]) +
                   f" | {f(st['max recall@10'], '{:.3f}')} / {f(st['max recall@100'], '{:.3f}')}"
                   f" | {f(st['build_s'])} | {f(st['index_mb'])} | {f(st['peak_rss_mb'], '{:.0f}')}"
                   f" | {f(st['mrr@10'], '{:.3f}')} |")
    exact = [r for r in rows if r["system"] == "exact" and r.get("qps")]
    if exact:
        eq = exact[0]["qps"]
        bad = [r for r in rows if r.get("token_frac") not in (None, "")
               and float(r["token_frac"]) < 0.2 and r["qps"] < eq]
        out.append("")
        out.append(f"Re-rank gate (a setting that re-ranks under 20% of the tokens must beat "
                   f"exact search's {eq:.1f} QPS): " + (
                       "passed by every such setting." if not bad else "FAILED by " +
                       ", ".join(f"{r['system']} {r['params']} ({r['qps']:.1f} QPS, "
                                 f"{float(r['token_frac']):.1%} of the tokens, re-rank "
                                 f"{float(r.get('rerank_ms') or 0):.1f} of "
                                 f"{1e3 / r['qps']:.1f} ms per query)" for r in bad)))
    out.append("")
    out.append("QPS at each recall target; '-': never reached. Chimera / peer at Recall@100 "
               "0.90 and 0.95:")
    out.append("")
    for c in [s for s in systems if s in CHIMERAS]:
        for s in systems:
            if s == c or s in CHIMERAS:
                continue
            ratios = []
            for i in (0, 1):
                a, b = stats[c]["recall@100"][i], stats[s]["recall@100"][i]
                ratios.append(f"{a / b:.1f}x" if a and b else "-")
            out.append(f"- {c} / {s}: {ratios[0]} at 0.90, {ratios[1]} at 0.95")
    return "\n".join(out) + "\n"


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sys.path.insert(0, os.path.dirname(HERE))
    from pareto import front as pareto_front
    fig = plt.figure(figsize=(15, 9))
    gs = fig.add_gridspec(2, 6, height_ratios=(3, 2))
    axes = [fig.add_subplot(gs[0, 0:3]), fig.add_subplot(gs[0, 3:6])]
    for ax, metric in zip(axes, ("recall@10", "recall@100")):
        systems = sorted({r["system"] for r in rows})
        for s in systems:
            pts = sorted([(r[metric], r["qps"]) for r in rows if r["system"] == s
                          and r.get(metric) is not None], key=lambda x: (-x[0], -x[1]))
            if not pts:
                continue
            front = pareto_front(pts)  # best QPS at each recall level
            line, = ax.plot([p[0] for p in front], [p[1] for p in front], "-o", label=s, ms=4)
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=10, alpha=0.35,
                       color=line.get_color())
        ax.set_yscale("log")
        ax.set_xlabel(metric.capitalize() + " (vs exact Chamfer top-k)")
        ax.set_ylabel("queries per second (log)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    # build time, index size and peak memory per system (the largest over its settings)
    systems = sorted({r["system"] for r in rows})
    for i, (key, label) in enumerate((("build_s", "index build (s)"),
                                      ("index_mb", "index size (MiB)"),
                                      ("peak_rss_mb", "peak RSS (MiB)"))):
        ax = fig.add_subplot(gs[1, 2 * i:2 * i + 2])
        vals = [max((r.get(key) or 0) for r in rows if r["system"] == s) for s in systems]
        ax.barh(systems, vals)
        ax.set_xlabel(label)
        for y, v in enumerate(vals):
            ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(REPO, "bench", "data", "out"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out", "peers"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                    help="comma-separated subset of " + ",".join(ALL_SYSTEMS))
    ap.add_argument("--grid", choices=("quick", "full", "lean"), default="full")
    ap.add_argument("-k", type=int, default=100, help="results per query (>= 100)")
    ap.add_argument("--lat-nq", type=int, default=100,
                    help="queries submitted one at a time for the latency pass")
    ap.add_argument("--chimera", help="path of the chimera CLI (default: build/chimera)")
    ap.add_argument("--numpy-truth", action="store_true",
                    help="compute the exact truth in numpy even when chimera exact exists")
    ap.add_argument("--check-nq", type=int, default=20,
                    help="queries cross-checked between chimera exact and numpy")
    ap.add_argument("--reuse-index", action="store_true",
                    help="xtr-warp, fast-plaid: search an index an earlier run of the same "
                         "--out built (its recorded build time is reported)")
    ap.add_argument("--kmeans-docs", type=int, default=None,
                    help="xtr-warp, fast-plaid: documents sampled for k-means (their own "
                         "n_samples_kmeans knob; default: their heuristic, 16 sqrt(120 n) "
                         "documents), to bound a CPU build on a large corpus")
    ap.add_argument("--reps", type=int, default=3,
                    help="timed runs per setting (QPS is their median)")
    ap.add_argument("--budget-s", type=float, default=1200,
                    help="a system's sweep stops after this many seconds")
    ap.add_argument("--no-pin", action="store_true",
                    help="do not pin the run (and its workers) to the first --threads CPUs")
    ap.add_argument("--no-gate", action="store_true",
                    help="measure a re-rank pipeline even when its re-ranker fails the gate")
    ap.add_argument("--exact-qps", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--report", action="store_true",
                    help="only redo the plot and summary.md from OUT/results.csv")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.report:
        return report_only(args.out)

    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "RAYON_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[v] = str(args.threads)
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[:args.threads]
        os.sched_setaffinity(0, cpus)   # inherited by the workers and chimera
    if args.worker:
        return worker_main(args)

    os.makedirs(args.out, exist_ok=True)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for s in systems:
        if s not in ALL_SYSTEMS:
            raise SystemExit(f"unknown system {s!r}; choose from {ALL_SYSTEMS}")
    corpus = Corpus(args.data)
    log(f"data {args.data}: {corpus.ndocs} docs, {corpus.ntok} tokens, dim {corpus.dim}, "
        f"{corpus.nq} queries x {corpus.queries.shape[1]} rows ({corpus.qlens.mean():.1f} "
        f"real tokens on average); threads {args.threads}")
    chimera = find_chimera(args.chimera)
    truth, check = get_truth(args, corpus, chimera)
    qp = os.path.join(args.data, "qrels.tsv")
    qrels = read_qrels(qp) if os.path.exists(qp) else None
    mrr_truth = evaluate(truth, truth, qrels, corpus.nq).get("mrr@10") if qrels else None
    if mrr_truth is not None:
        log(f"MRR@10 of the exact Chamfer ranking itself: {mrr_truth:.4f}")
    exact_row = check.pop("exact_row")
    args.exact_qps = exact_row["qps"] if exact_row else 0.0
    if exact_row:
        log(f"exact search: {exact_row['qps']:.1f} QPS (runs {exact_row['qps_runs']})")
    del corpus.tokens

    rows = []
    if exact_row:
        exact_row.update(evaluate(truth, truth, qrels, corpus.nq))
        for key in ("ndocs", "ntok"):
            exact_row[key] = getattr(corpus, key)
        rows.append(exact_row)
    for s in systems:
        if s in CHIMERAS:
            if not chimera_has(chimera, "search") or not chimera_has(chimera, "build"):
                log(f"{s}: skipped, `chimera build` / `chimera search` not available in "
                    f"{chimera or 'no chimera binary found'}")
                continue
            got = run_chimera(chimera, args.data, args.out, args, grid(s, args.grid),
                              corpus.nq, name=s, bits=CHIMERAS[s][0], rerank=CHIMERAS[s][1])
        else:
            wdir = os.path.join(args.out, "work", s)
            os.makedirs(wdir, exist_ok=True)
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", s, "--data", args.data,
                   "--out", args.out, "--threads", str(args.threads), "--grid", args.grid,
                   "-k", str(args.k), "--lat-nq", str(args.lat_nq), "--reps", str(args.reps),
                   "--budget-s", str(args.budget_s), "--exact-qps", str(args.exact_qps)] + (
                   ["--kmeans-docs", str(args.kmeans_docs)] if args.kmeans_docs else []) + (
                   ["--reuse-index"] if args.reuse_index else []) + (
                   ["--no-gate"] if args.no_gate else []) + (
                   ["--no-pin"] if args.no_pin else [])
            log(f"{s}: starting worker")
            ch = _Child(cmd, os.path.join(wdir, "worker.log"))
            rc, wall, rss = ch.wait()
            got = []
            rp = os.path.join(wdir, "rows.jsonl")
            if os.path.exists(rp):
                with open(rp) as f:
                    got = [json.loads(line) for line in f if line.strip()]
            # wait4's ru_maxrss survives exec on Linux (it may hold the parent's size
            # at fork), so prefer the worker's own VmHWM
            hp = os.path.join(wdir, "rss.json")
            if os.path.exists(hp):
                with open(hp) as f:
                    rss = json.load(f)["vm_hwm_bytes"]
            for r in got:
                r["peak_rss_mb"] = rss / 2**20
            log(f"{s}: worker rc {rc} in {wall:.0f}s, peak RSS {rss / 2**20:.0f} MiB, "
                f"{len(got)} settings" + ("" if rc == 0 else f"; see {wdir}/worker.log"))
        for r in got:
            r.update(evaluate(read_trec(r["run"]), truth, qrels, corpus.nq))
            for key in ("ndocs", "ntok", "nq"):
                r.setdefault(key, getattr(corpus, key))
        rows.extend(got)
        write_csv(rows, os.path.join(args.out, "results.csv"))

    csv_path = os.path.join(args.out, "results.csv")
    write_csv(rows, csv_path)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"data": os.path.abspath(args.data), "ndocs": corpus.ndocs,
                   "ntok": corpus.ntok, "nq": corpus.nq, "threads": args.threads,
                   "grid": args.grid, "reps": args.reps, "pinned": not args.no_pin,
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "cpu": cpu_name(), "mrr@10_exact": mrr_truth, **check}, f, indent=2)
    if rows:
        png = os.path.join(args.out, "recall_qps.png")
        title = (f"{corpus.ndocs} docs, {corpus.ntok} tokens, {corpus.nq} queries, "
                 f"{args.threads} thread(s)")
        plot(rows, png, title)
        md = os.path.join(args.out, "summary.md")
        with open(md, "w") as f:
            f.write(f"{title}\n\n" + summary_table(rows) + "\n")
        print(open(md).read())
        log(f"wrote {csv_path} ({len(rows)} rows), {png} and {md}")
    else:
        log("no results")


def cpu_name():
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "data"))
    from make_corpus import _cpu_name
    return _cpu_name()


def report_only(out):
    """The plot and summary.md again from OUT/results.csv (e.g. after merging runs)."""
    rows = []
    with open(os.path.join(out, "results.csv")) as f:
        for r in csv.DictReader(f):
            for key, v in r.items():
                if key not in ("system", "version", "params", "notes"):
                    try:
                        r[key] = float(v) if v not in ("", None) else None
                    except ValueError:
                        pass
            rows.append(r)
    first = rows[0]
    title = (f"{int(first['ndocs'])} docs, {int(first['ntok'])} tokens, {int(first['nq'])} "
             f"queries, {int(first['threads'])} thread(s)")
    plot(rows, os.path.join(out, "recall_qps.png"), title)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(f"{title}\n\n" + summary_table(rows) + "\n")
    print(open(os.path.join(out, "summary.md")).read())


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v)
                        for k, v in r.items() if k in CSV_FIELDS})


if __name__ == "__main__":
    main()
