#!/usr/bin/env python3
"""The exact re-rank tier against the plain pipeline, on one corpus (bench/RESULTS.md,
section 5.5).

For k = 10 and k = 100: sweeps the pipeline without re-rank (n_probe, k_refine,
k_fullbit) and with it (n_probe, k_refine, rerank_depth; k_fullbit = rerank_depth), on one
index built with `--rerank f16` (a search without --rerank-depth never reads the vectors,
so it is the plain index's search), measuring Recall@k against `chimera exact` and
queries per CPU second (search()). Prints, per k: the fastest setting without re-rank that reaches 0.95, the best
recall without re-rank at any swept setting, the fastest setting with re-rank that reaches
0.995, and the time ratio of the last to the first. "Fastest": the sweep's 5 fastest
that reach the target, timed again (best of --reps); the two chosen settings are then
timed once more, alternated so that both see the same machine load, best of --reps.

    python3 bench/bench_rerank.py --chimera build/chimera --corpus DIR --work W [--reps 3]

DIR holds tokens.npy, doclens.npy and queries.npy (chimera gen's layout) or
queries_flat.npy + qlens.npy (bench/data's).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys


def run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))}: {r.stderr}")
    return r.stdout


def cpu_run(cmd):
    """(stdout, CPU seconds of the child: user + system)."""
    t0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = run(cmd)
    t1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (t1.ru_utime - t0.ru_utime) + (t1.ru_stime - t0.ru_stime)


def search(a, idx, k, p, out):
    """(queries per second, re-rank ms per query). By default the speed is queries per
    CPU second of the search process, not per wall-clock second: on a shared machine the
    wall clock measures the other jobs as much as the search. The fixed cost (open, the
    engine, the CLI's 8 warm-up queries) is taken out by a second run on the first 8
    queries. --wall: queries/s as the CLI prints it."""
    def cmd(queries, qlens, out):
        c = [a.chimera, "search", idx, "--queries", queries, "-k", k, "--out", out,
             "--threads", a.threads, "--profile", "--nprobe", p["n_probe"], "--k-refine",
             p["k_refine"], "--k-fullbit", p["k_fullbit"]]
        if qlens:
            c += ["--qlens", qlens]
        if p.get("rerank_depth"):
            c += ["--rerank-depth", p["rerank_depth"]]
        return c
    text, cpu = cpu_run(cmd(a.queries, a.qlens, out))
    rr = re.search(r"exact re-rank \(per query\): ([0-9.]+) ms", text)
    rr_ms = float(rr.group(1)) if rr else 0.0
    if not a.cpu:
        return float(re.search(r"([0-9.]+) queries/s", text).group(1)), rr_ms
    _, fixed = cpu_run(cmd(a.queries8, a.qlens8, out + ".8"))
    return (a.nq - 8) / max(cpu - fixed, 1e-9), rr_ms


def recall(a, run_path, k):
    out = run([a.chimera, "eval", "--run", run_path, "--truth", a.truth, "-k", k, "--json"])
    return json.loads(out)[f"recall@{k}"]


def label(p):
    s = f"n_probe {p['n_probe']}, k_refine {p['k_refine']}, k_fullbit {p['k_fullbit']}"
    return s + (f", rerank_depth {p['rerank_depth']}" if p.get("rerank_depth") else "")


def sweep(a, idx, k, grid, tag):
    rows = []
    for i, p in enumerate(grid):
        out = os.path.join(a.work, f"run_{tag}_{k}_{i}.trec")
        qps, rr_ms = search(a, idx, k, p, out)
        rows.append(dict(p, recall=recall(a, out, k), qps=qps, rerank_ms=rr_ms))
        print(f"  k={k} {tag:9s} {label(p):60s} recall {rows[-1]['recall']:.4f} "
              f"{qps:8.1f} q/s, re-rank {rr_ms:.3f} ms", flush=True)
    return rows


def fastest(a, idx, k, rows, target):
    """The fastest setting that reaches target: on a shared machine one run's speed is
    noise, so the 5 fastest in the sweep are timed again, best of --reps, and the best
    of those wins."""
    ok = sorted((r for r in rows if r["recall"] >= target), key=lambda r: -r["qps"])[:5]
    if not ok:
        return None
    for r in ok:
        r["qps"] = max(search(a, idx, k, r, os.path.join(a.work, "f.trec"))[0]
                       for _ in range(a.reps))
    return max(ok, key=lambda r: r["qps"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chimera", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rerank", default="f16")
    ap.add_argument("-k", default="10,100")
    ap.add_argument("--wall", dest="cpu", action="store_false",
                    help="time by the wall clock (queries/s as the CLI prints it) instead of "
                         "queries per CPU second")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    # bench/data's layout: queries_flat.npy + qlens.npy (its queries.npy is the same
    # queries zero-padded, which the CLI takes without lengths); chimera gen's: queries.npy
    flat, ql = os.path.join(a.corpus, "queries_flat.npy"), os.path.join(a.corpus, "qlens.npy")
    if os.path.exists(flat) and os.path.exists(ql):
        a.queries, a.qlens = flat, ql
    else:
        a.queries, a.qlens = os.path.join(a.corpus, "queries.npy"), None
    if a.cpu:  # the first 8 queries, for the fixed cost (search())
        import numpy as np
        q = np.load(a.queries)
        a.queries8, a.qlens8 = os.path.join(a.work, "queries8.npy"), None
        if a.qlens:
            lens = np.load(a.qlens)
            a.nq = len(lens)
            np.save(a.queries8, q[:int(lens[:8].sum())])
            a.qlens8 = os.path.join(a.work, "qlens8.npy")
            np.save(a.qlens8, lens[:8])
        else:
            a.nq = len(q)
            np.save(a.queries8, q[:8])
    tok, lens = os.path.join(a.corpus, "tokens.npy"), os.path.join(a.corpus, "doclens.npy")
    idx = os.path.join(a.work, "idx")
    if not os.path.exists(os.path.join(idx, "manifest.json")):
        print(run([a.chimera, "build", "--tokens", tok, "--doclens", lens, "--out", idx,
                   "--rerank", a.rerank, "--no-sync"]).splitlines()[0], flush=True)
    a.truth = os.path.join(a.work, "truth.trec")
    if not os.path.exists(a.truth):
        cmd = [a.chimera, "exact", "--tokens", tok, "--doclens", lens, "--queries", a.queries,
               "-k", 100, "--out", a.truth]
        run(cmd + (["--qlens", a.qlens] if a.qlens else []))
    info = run([a.chimera, "info", idx])
    total = float(re.search(r"total ([0-9.]+) MiB", info).group(1))
    vec = float(re.search(r"stored as \S+: ([0-9.]+) MiB", info).group(1))
    print(f"index {total:.1f} MiB, of which the stored vectors ({a.rerank}) {vec:.1f} MiB "
          f"({100 * vec / total:.0f}%); without them {total - vec:.1f} MiB", flush=True)

    for k in [int(x) for x in a.k.split(",")]:
        # Grids fine enough near the targets not to overshoot them: a pick well above
        # 0.95 (or 0.995) flatters or penalises the ratio. On real10k the earlier k = 100
        # plain grid picked 32 / 400 / 200 at 0.965 where 24 / 350 / 175 reaches 0.95 at
        # 1.2x its speed, and on a generated d = 96 corpus the k = 10 grid's cheapest
        # setting, 2 / 80 / 20, already gave 0.973 (bench/RESULTS.md section 5.17).
        if k == 10:
            plain = [dict(n_probe=n, k_refine=r, k_fullbit=f)
                     for n in (1, 2, 4, 8, 16, 32) for f in (10, 15, 20, 40, 80)
                     for r in (40, 60, 80, 160, 320) if 2 * f <= r <= 8 * f]
            rer = [dict(n_probe=n, k_refine=r, k_fullbit=d, rerank_depth=d)
                   for n in (4, 8, 16, 32) for r in (80, 120, 160, 320)
                   for d in (15, 20, 40, 80) if 2 * d <= r]
        else:
            plain = [dict(n_probe=n, k_refine=r * f // 2, k_fullbit=f)
                     for n in (8, 16, 20, 24, 32) for f in (100, 150, 175, 200, 300, 400)
                     for r in (3, 4, 8)]
            rer = [dict(n_probe=n, k_refine=r, k_fullbit=d, rerank_depth=d)
                   for n in (24, 32, 40, 48) for r in (400, 500, 600, 700, 800, 1000)
                   for d in (200, 250, 300, 400) if 2 * d <= r]
        p_rows = sweep(a, idx, k, plain, "plain")
        r_rows = sweep(a, idx, k, rer, "rerank")
        base = fastest(a, idx, k, p_rows, 0.95)
        best_plain = max(p_rows, key=lambda r: r["recall"])
        target = fastest(a, idx, k, r_rows, 0.995)
        print(f"k={k}: without re-rank, best recall {best_plain['recall']:.4f} "
              f"({label(best_plain)})")
        if not base or not target:
            print(f"k={k}: 0.95 without re-rank {'reached' if base else 'not reached'}; "
                  f"0.995 with re-rank {'reached' if target else 'not reached'} "
                  f"(best {max(r['recall'] for r in r_rows):.4f})")
            continue
        for name, grid, pick in (("plain", plain, base), ("re-rank", rer, target)):
            edge = [key for key in ("n_probe", "k_refine", "k_fullbit")
                    if pick[key] == min(g[key] for g in grid)]
            if edge:
                print(f"k={k}: note: the {name} pick is at the grid's smallest "
                      f"{', '.join(edge)}: a cheaper setting may reach the target too")
        # the two settings timed again, alternated, best of reps
        tb, tt = [], []
        for i in range(a.reps):
            tb.append(search(a, idx, k, base, os.path.join(a.work, "b.trec"))[0])
            q, rr_ms = search(a, idx, k, target, os.path.join(a.work, "t.trec"))
            tt.append(q)
        qb, qt = max(tb), max(tt)
        print(f"k={k}: 0.95 without re-rank: {label(base)}: Recall@{k} {base['recall']:.4f}, "
              f"{qb:.1f} q/s")
        print(f"k={k}: >= 0.995 with re-rank: {label(target)}: Recall@{k} "
              f"{target['recall']:.4f}, {qt:.1f} q/s, re-rank {rr_ms:.3f} ms/query")
        print(f"k={k}: time ratio (re-rank 0.995 / plain 0.95) {qb / qt:.2f}x", flush=True)


if __name__ == "__main__":
    main()
