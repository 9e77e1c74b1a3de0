"""A living index: add, delete and compact against one full build (bench/RESULTS.md,
section 5.2).

    python3 bench/bench_living.py --chimera build/chimera --work /tmp/living \
        [--docs 20000 --dim 128 --seed 1 --queries 200] [--threads 2] [--reps 2] \
        [--commits 10] [--search-reps 3] [--json out.json]

    # the peer (xtr-warp-rs) on its own, smaller corpus, Chimera run on the same data:
    python3 bench/bench_living.py --chimera build/chimera --work /tmp/living-peer \
        --docs 3000 --dim 128 --seed 5 --reps 1 --peer-python VENV/bin/python

Reproduce section 5.2: build the CLI (`cmake -S . -B build -DCHIMERA_CUDA=OFF && cmake
--build build -j2`), then run the commands printed at the top of that section. Needs
python3 with numpy; the peer needs a virtualenv with `pip install xtr-warp-rs` (it pulls
torch 2.11), given as --peer-python.

What it does, on a corpus from `chimera gen` (ids are row numbers):

- split: base = the first 2/3 of the documents; additions = the rest (+50% of the base),
  cut into --commits equal `chimera add` commits;
- deletions: three `chimera delete` commits of 1 document, 100 documents and 20% of all
  documents, disjoint, drawn at random (seeded) from all documents;
- ground truth: `chimera exact -k 10` over the live documents of each state (the base;
  everything; everything less the deleted), with --ids, so deleted documents are never
  in the truth;
- per repetition: builds the base and a full single build of everything (order
  alternated between repetitions), times every add, delete and compact, and searches
  five states with default parameters: (1) the base, (2) after the additions, (3) the
  full build over the same documents as (2), (4) after the deletions, (5) after
  compaction. Every state's search alternates with a search of (3) in the same moment,
  so its QPS is also given as a ratio to (3) measured side by side;
- queries: the corpus's 32-token queries, and the same queries cut to 4..16 tokens
  (variable length, given as [total, dim] with --qlens).

Times are the CLI's own (`time:` lines: the library call, loading excluded), plus each
process's wall and CPU seconds (user + sys, from wait4), so that one-thread work (add,
delete, compact) and two-thread work (build) can also be compared per CPU-second.
All commits use the CLI's defaults (fsync on). Prints markdown tables; --json writes
all raw numbers.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

K = 10


# ---------------------------------------------------------------------------- helpers

def run(cmd, env=None):
    """run a command; return (stdout+stderr text, wall s, cpu s)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = p.stdout.read().decode()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.stderr.write(out)
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    return out, wall, ru.ru_utime + ru.ru_stime


def grab(pat, text, cast=float):
    m = re.search(pat, text)
    if not m:
        raise SystemExit(f"no match for {pat!r} in:\n{text}")
    return cast(m.group(1))


def count_deleted(run_path, deleted):
    """how many results of a TREC run are ids in `deleted`."""
    with open(run_path) as f:
        return sum(int(line.split()[2]) in deleted for line in f if line.strip())


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rng_stats(xs):
    xs = list(xs)
    return {"mean": float(np.mean(xs)), "min": float(np.min(xs)), "max": float(np.max(xs)),
            "n": len(xs)}


# ---------------------------------------------------------------------------- data

class Corpus:
    """a `chimera gen` corpus and the slices this benchmark writes from it."""

    def __init__(self, a, d):
        self.dir = d
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(os.path.join(d, "tokens.npy")):
            run([a.chimera, "gen", "--out", d, "--docs", str(a.docs), "--dim", str(a.dim),
                 "--seed", str(a.seed), "--queries", str(a.queries)])
        self.tok = np.load(os.path.join(d, "tokens.npy"), mmap_mode="r")
        self.lens = np.load(os.path.join(d, "doclens.npy")).astype(np.int64)
        self.off = np.concatenate([[0], np.cumsum(self.lens)])
        self.n = len(self.lens)
        self.nb = (2 * self.n) // 3
        self.queries = os.path.join(d, "queries.npy")
        # short queries: each of the 32-token queries cut to 4..16 tokens (seeded)
        q = np.load(self.queries)
        ql = np.random.default_rng(a.seed + 7).integers(4, 17, size=len(q)).astype(np.int64)
        self.short = os.path.join(d, "short_flat.npy")
        self.short_lens = os.path.join(d, "short_qlens.npy")
        np.save(self.short, np.concatenate([q[i, :ql[i]] for i in range(len(q))]))
        np.save(self.short_lens, ql)
        self.nq = len(q)
        # deletions: 1, 100 and n/5 documents, disjoint, from all documents
        perm = np.random.default_rng(a.seed + 11).permutation(self.n)
        n20 = self.n // 5
        self.deletes = [np.sort(perm[:1]), np.sort(perm[1:101]), np.sort(perm[101:101 + n20])]
        self.deleted = set(np.concatenate(self.deletes).tolist())
        self.live_after = np.setdiff1d(np.arange(self.n), np.concatenate(self.deletes))

    def ntok(self, rows):
        return int(self.lens[rows].sum())

    def write_slice(self, name, rows):
        """tokens, doclens, ids of the documents `rows` (increasing) -> paths."""
        rows = np.asarray(rows, dtype=np.int64)
        base = os.path.join(self.dir, name)
        t, l, i = base + "_tokens.npy", base + "_doclens.npy", base + "_ids.npy"
        if not os.path.exists(i):
            contiguous = len(rows) and rows[-1] - rows[0] + 1 == len(rows)
            if contiguous:
                tok = self.tok[self.off[rows[0]]:self.off[rows[-1] + 1]]
            else:
                tok = np.concatenate([self.tok[self.off[r]:self.off[r + 1]] for r in rows])
            np.save(t, np.ascontiguousarray(tok))
            np.save(l, self.lens[rows])
            np.save(i, rows)
        return t, l, i

    def ids_file(self, name, ids):
        p = os.path.join(self.dir, name + ".npy")
        np.save(p, np.asarray(ids, dtype=np.int64))
        return p


# ---------------------------------------------------------------------------- chimera

class Bench:
    def __init__(self, a, c, work):
        self.a, self.c, self.work = a, c, work
        self.th = str(a.threads)
        self.returned_deleted = 0
        self.qsets = {
            "32-token": ["--queries", c.queries],
            "4-16-token": ["--queries", c.short, "--qlens", c.short_lens],
        }

    def exact(self, name, rows):
        """truth runs for both query sets over the documents `rows`."""
        t, l, i = self.c.write_slice(name, rows)
        out = {}
        for qn, qa in self.qsets.items():
            p = os.path.join(self.c.dir, f"truth_{name}_{qn}.trec")
            if not os.path.exists(p):
                o, w, _ = run([self.a.chimera, "exact", "--tokens", t, "--doclens", l, "--ids", i,
                               *qa, "-k", str(K), "--out", p, "--threads", self.th])
                log(f"exact {name} {qn}: {w:.1f}s")
            out[qn] = p
        return out

    def build(self, name, rows):
        t, l, i = self.c.write_slice(name, rows)
        idx = os.path.join(self.work, name + ".idx")
        o, w, cpu = run([self.a.chimera, "build", "--tokens", t, "--doclens", l, "--ids", i,
                         "--out", idx, "--threads", self.th])
        s = grab(r"total ([\d.]+)s", o)
        ntok = self.c.ntok(rows)
        r = {"docs": len(rows), "tokens": ntok, "s": s, "wall_s": w, "cpu_s": cpu,
             "tok_per_s": ntok / s, "tok_per_cpu_s": ntok / cpu,
             "clusters": grab(r"tokens, (\d+) clusters", o, int)}
        log(f"build {name}: {ntok} tokens {s:.1f}s ({r['tok_per_s']:.0f} tok/s)")
        return idx, r

    def add(self, idx, name, rows):
        t, l, i = self.c.write_slice(name, rows)
        o, w, cpu = run([self.a.chimera, "add", idx, "--tokens", t, "--doclens", l, "--ids", i])
        s = grab(r"time: ([\d.]+)s", o)
        ntok = self.c.ntok(rows)
        return {"docs": len(rows), "tokens": ntok, "s": s, "wall_s": w, "cpu_s": cpu,
                "tok_per_s": ntok / s, "tok_per_cpu_s": ntok / cpu,
                "cli_tok_per_s": grab(r"(\d+) tokens/s", o), "merged": "merged" in o,
                "out": o.strip().splitlines()}

    def delete(self, idx, name, ids):
        p = self.c.ids_file(name, ids)
        o, w, cpu = run([self.a.chimera, "delete", idx, "--ids", p])
        return {"ids": len(ids), "ms": 1e3 * grab(r"time: ([\d.]+)s", o), "wall_ms": 1e3 * w,
                "out": o.strip().splitlines()}

    def compact(self, idx):
        o, w, cpu = run([self.a.chimera, "compact", idx])
        return {"s": grab(r"time: ([\d.]+)s", o), "wall_s": w, "cpu_s": cpu,
                "out": o.strip().splitlines()}

    def search(self, idx, qn, truth, tag):
        run_p = os.path.join(self.work, f"run_{tag}_{qn}.trec")
        o, _, _ = run([self.a.chimera, "search", idx, *self.qsets[qn], "-k", str(K),
                       "--out", run_p, "--threads", self.th])
        qps = grab(r"([\d.]+) queries/s", o)
        if tag in ("4_deleted", "5_compacted"):
            self.returned_deleted += count_deleted(run_p, self.c.deleted)
        e, _, _ = run([self.a.chimera, "eval", "--run", run_p, "--truth", truth, "-k", str(K),
                       "--json"])
        return qps, json.loads(e)[f"recall@{K}"]

    def search_state(self, state, idx, truth, ref_idx, ref_truth):
        """QPS and recall of `idx`, each search alternated with one of the full build."""
        res = {}
        for qn in self.qsets:
            q, qr, rec = [], [], None
            for _ in range(self.a.search_reps):
                qps, rec = self.search(idx, qn, truth[qn], state)
                q.append(qps)
                if ref_idx is not None:
                    rq, _ = self.search(ref_idx, qn, ref_truth[qn], "ref")
                    qr.append(rq)
            res[qn] = {"qps": q, "ref_qps": qr, "recall": rec,
                       "ratio_to_full": [x / y for x, y in zip(q, qr)] if qr else []}
            log(f"search {state} {qn}: recall {rec:.4f} qps {q}"
                + (f" (full build {qr})" if qr else ""))
        return res

    def info(self, idx):
        o, _, _ = run([self.a.chimera, "info", idx])
        return o

    def rep(self, r):
        c, a = self.c, self.a
        base_rows = np.arange(c.nb)
        all_rows = np.arange(c.n)
        full_first = r % 2 == 1
        out = {}
        if full_first:
            full_idx, out["build_full"] = self.build("all", all_rows)
        living, out["build_base"] = self.build("base", base_rows)
        if not full_first:
            full_idx, out["build_full"] = self.build("all", all_rows)
        truth = {"base": self.exact("base", base_rows), "all": self.exact("all", all_rows),
                 "live": self.exact("live", c.live_after)}
        st = {}
        st["1_base"] = self.search_state("1_base", living, truth["base"], full_idx, truth["all"])
        cuts = np.array_split(np.arange(c.nb, c.n), a.commits)
        adds = []
        for j, rows in enumerate(cuts):
            adds.append(self.add(living, f"add{j}", rows))
            log(f"add {j}: {adds[-1]['tokens']} tokens {adds[-1]['s']:.3f}s "
                f"({adds[-1]['tok_per_s']:.0f} tok/s){' merged' if adds[-1]['merged'] else ''}")
        out["adds"] = adds
        out["info_after_adds"] = self.info(living)
        st["2_added"] = self.search_state("2_added", living, truth["all"], full_idx, truth["all"])
        st["3_full"] = self.search_state("3_full", full_idx, truth["all"], None, None)
        dels = []
        for name, ids in zip(("del_1", "del_100", "del_20pct"), c.deletes):
            dels.append(self.delete(living, name, ids))
            log(f"delete {len(ids)}: {dels[-1]['ms']:.1f} ms")
        out["deletes"] = dels
        st["4_deleted"] = self.search_state("4_deleted", living, truth["live"], full_idx,
                                            truth["all"])
        out["compact"] = self.compact(living)
        log(f"compact: {out['compact']['s']:.2f}s")
        st["5_compacted"] = self.search_state("5_compacted", living, truth["live"], full_idx,
                                              truth["all"])
        out["info_after_compact"] = self.info(living)
        run([a.chimera, "check", living])
        out["states"] = st
        # results that are deleted ids, over every search of states 4 and 5 (must be 0)
        out["returned_deleted"] = self.returned_deleted
        return out


# ---------------------------------------------------------------------------- xtr-warp

PEER_SRC = r'''
import json, sys, time, os
import numpy as np
import torch
cfg = json.load(open(sys.argv[1]))
torch.set_num_threads(cfg["threads"])
from xtr_warp import XTRWarp
tok = np.load(cfg["tokens"], mmap_mode="r")
lens = np.load(cfg["doclens"]).astype(np.int64)
off = np.concatenate([[0], np.cumsum(lens)])
def docs(rows):
    return [torch.from_numpy(np.array(tok[off[r]:off[r + 1]])) for r in rows]
def queries(name):
    q = cfg["queries"][name]
    if "qlens" in q:
        flat, ql = np.load(q["flat"]), np.load(q["qlens"])
        o = np.concatenate([[0], np.cumsum(ql)])
        return [torch.from_numpy(flat[o[i]:o[i + 1]]) for i in range(len(ql))]
    return [torch.from_numpy(x) for x in np.load(q["flat"])]
Q = {n: queries(n) for n in cfg["queries"]}
res = {"adds": [], "deletes": [], "states": {}}
w = XTRWarp(index=cfg["index"])
t0 = time.perf_counter()
w.create(docs(range(cfg["nb"])), device="cpu", show_progress=False, seed=42)
res["build_base_s"] = time.perf_counter() - t0
w.load(device="cpu", mmap=True)
def search(state):
    out = {}
    for n, q in Q.items():
        qps = []
        for _ in range(cfg["search_reps"]):
            t = time.perf_counter()
            r = w.search(q, top_k=cfg["k"], num_threads=cfg["threads"], show_progress=False)
            qps.append(len(q) / (time.perf_counter() - t))
        p = os.path.join(cfg["work"], f"xtr_{state}_{n}.trec")
        with open(p, "w") as f:
            for qi, hits in enumerate(r):
                for rank, (d, s) in enumerate(hits, 1):
                    f.write(f"{qi} Q0 {int(d)} {rank} {float(s):.6f} xtr\n")
        out[n] = {"qps": qps, "run": p}
    res["states"][state] = out
search("1_base")
for rows in cfg["adds"]:
    t = time.perf_counter()
    ids = w.add(docs(rows))
    s = time.perf_counter() - t
    ids = [int(x) for x in ids]
    res["adds"].append({"docs": len(rows), "tokens": int(lens[rows].sum()), "s": s,
                        "ids_match": ids == list(rows)})
search("2_added")
for ids in cfg["deletes"]:
    t = time.perf_counter()
    w.delete(passage_ids=ids)
    res["deletes"].append({"ids": len(ids), "ms": 1e3 * (time.perf_counter() - t)})
search("4_deleted")
t = time.perf_counter()
w.compact()
res["compact_s"] = time.perf_counter() - t
search("5_compacted")
json.dump(res, open(cfg["out"], "w"))
'''


def run_peer(a, c, work, truth):
    """xtr-warp-rs: create the base, add, delete, compact on the same splits, in --peer-python."""
    cfg = {"threads": a.threads, "tokens": os.path.join(c.dir, "tokens.npy"),
           "doclens": os.path.join(c.dir, "doclens.npy"), "nb": int(c.nb), "k": K,
           "index": os.path.join(work, "xtr.idx"), "work": work,
           "search_reps": a.search_reps, "out": os.path.join(work, "xtr.json"),
           "adds": [x.tolist() for x in np.array_split(np.arange(c.nb, c.n), a.commits)],
           "deletes": [x.tolist() for x in c.deletes],
           "queries": {"32-token": {"flat": c.queries},
                       "4-16-token": {"flat": c.short, "qlens": c.short_lens}}}
    shutil.rmtree(cfg["index"], ignore_errors=True)
    cp, sp = os.path.join(work, "xtr_cfg.json"), os.path.join(work, "xtr_worker.py")
    with open(cp, "w") as f:
        json.dump(cfg, f)
    with open(sp, "w") as f:
        f.write(PEER_SRC)
    env = dict(os.environ)
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "RAYON_NUM_THREADS"):
        env[v] = str(a.threads)
    o, w, cpu = run([a.peer_python, sp, cp], env=env)
    with open(cfg["out"]) as f:
        res = json.load(f)
    res["wall_s"], res["cpu_s"] = w, cpu
    tmap = {"1_base": truth["base"], "2_added": truth["all"], "4_deleted": truth["live"],
            "5_compacted": truth["live"]}
    for state, per in res["states"].items():
        for qn, r in per.items():
            e, _, _ = run([a.chimera, "eval", "--run", r["run"], "--truth", tmap[state][qn],
                           "-k", str(K), "--json"])
            r["recall"] = json.loads(e)[f"recall@{K}"]
            if state in ("4_deleted", "5_compacted"):
                r["returned_deleted"] = count_deleted(r["run"], c.deleted)
    for x in res["adds"]:
        x["tok_per_s"] = x["tokens"] / x["s"]
    res["build_base_tok_per_s"] = c.ntok(np.arange(c.nb)) / res["build_base_s"]
    res["version"] = subprocess.run([a.peer_python, "-c", "import importlib.metadata as m;"
                                     "print(m.version('xtr-warp-rs'), m.version('torch'))"],
                                    capture_output=True, text=True).stdout.strip()
    return res


# ---------------------------------------------------------------------------- report

def report(a, c, reps, peer):
    P = print
    P(f"\ncorpus: chimera gen --docs {a.docs} --dim {a.dim} --seed {a.seed} --queries "
      f"{a.queries}: {c.n} docs, {c.off[-1]} tokens; base {c.nb} docs "
      f"{c.ntok(np.arange(c.nb))} tokens; additions {c.n - c.nb} docs in {a.commits} commits; "
      f"threads {a.threads}; {len(reps)} repetitions\n")
    P("| | docs | tokens | seconds | tokens/s | tokens per CPU-second |")
    P("| --- | ---: | ---: | ---: | ---: | ---: |")
    for key, label in (("build_base", "build, base"), ("build_full", "build, everything")):
        b = [r[key] for r in reps]
        P(f"| {label} | {b[0]['docs']} | {b[0]['tokens']} | "
          + " / ".join(f"{x['s']:.1f}" for x in b) + " | "
          + " / ".join(f"{x['tok_per_s']:,.0f}" for x in b) + " | "
          + " / ".join(f"{x['tok_per_cpu_s']:,.0f}" for x in b) + " |")
    for i, r in enumerate(reps):
        ad = r["adds"]
        tps = [x["tok_per_s"] for x in ad]
        cps = [x["tok_per_cpu_s"] for x in ad]
        ratio = [t / r["build_full"]["tok_per_s"] for t in tps]
        cratio = [t / r["build_full"]["tok_per_cpu_s"] for t in cps]
        P(f"| add, rep {i + 1}: {len(ad)} commits | {sum(x['docs'] for x in ad)} | "
          f"{sum(x['tokens'] for x in ad)} | {sum(x['s'] for x in ad):.2f} total | "
          f"mean {np.mean(tps):,.0f} (range {min(tps):,.0f}-{max(tps):,.0f}); "
          f"{np.mean(ratio):.2f}x the full build ({min(ratio):.2f}-{max(ratio):.2f}) | "
          f"mean {np.mean(cps):,.0f}; {np.mean(cratio):.2f}x the full build |")
        merged = [j + 1 for j, x in enumerate(ad) if x["merged"]]
        if merged:
            P(f"|   (commits that merged appended segments: {merged}) | | | | "
              + ", ".join(f"{ad[j - 1]['tok_per_s']:,.0f}" for j in merged) + " | |")
    P("\n| delete commit | ids | ms (library) | ms (process wall) |")
    P("| --- | ---: | ---: | ---: |")
    for j, name in enumerate(("1 document", "100 documents", "20% of the documents")):
        d = [r["deletes"][j] for r in reps]
        P(f"| {name} | {d[0]['ids']} | " + " / ".join(f"{x['ms']:.1f}" for x in d) + " | "
          + " / ".join(f"{x['wall_ms']:.0f}" for x in d) + " |")
    P("| compact (s) | | " + " / ".join(f"{r['compact']['s'] * 1e3:.0f}" for r in reps)
      + " | " + " / ".join(f"{r['compact']['wall_s'] * 1e3:.0f}" for r in reps) + " |")
    P("\nresults that are deleted ids, states 4-5, all searches: "
      + " / ".join(str(r["returned_deleted"]) for r in reps))
    P("\n| state | live docs | queries | Recall@10 | QPS (all searches) | QPS / full build, "
      "side by side |")
    P("| --- | ---: | --- | ---: | --- | --- |")
    live = {"1_base": c.nb, "2_added": c.n, "3_full": c.n, "4_deleted": len(c.live_after),
            "5_compacted": len(c.live_after)}
    for s in ("1_base", "2_added", "3_full", "4_deleted", "5_compacted"):
        for qn in ("32-token", "4-16-token"):
            rs = [r["states"][s][qn] for r in reps]
            rec = sorted({round(x["recall"], 4) for x in rs})
            q = [v for x in rs for v in x["qps"]]
            ra = [v for x in rs for v in x["ratio_to_full"]]
            P(f"| {s} | {live[s]} | {qn} | {' / '.join(f'{v:.4f}' for v in rec)} | "
              f"{np.median(q):.0f} ({min(q):.0f}-{max(q):.0f}) | "
              + (f"{np.median(ra):.2f} ({min(ra):.2f}-{max(ra):.2f})" if ra else "1")
              + " |")
    if peer:
        P(f"\nxtr-warp-rs {peer['version']} (same splits, threads {a.threads}): "
          f"create base {peer['build_base_s']:.1f}s "
          f"({peer['build_base_tok_per_s']:,.0f} tok/s)")
        tps = [x["tok_per_s"] for x in peer["adds"]]
        P(f"  add: {sum(x['s'] for x in peer['adds']):.1f}s total, mean {np.mean(tps):,.0f} "
          f"tok/s (range {min(tps):,.0f}-{max(tps):,.0f}); ids as rows: "
          f"{all(x['ids_match'] for x in peer['adds'])}")
        P("  delete ms: " + ", ".join(f"{x['ids']}: {x['ms']:.1f}" for x in peer["deletes"])
          + f"; compact {peer['compact_s']:.2f}s")
        for s, per in peer["states"].items():
            for qn, r in per.items():
                P(f"  {s} {qn}: Recall@10 {r['recall']:.4f} QPS "
                  + " / ".join(f"{v:.0f}" for v in r["qps"])
                  + (f"; deleted ids returned {r['returned_deleted']}"
                     if "returned_deleted" in r else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chimera", default="build/chimera")
    ap.add_argument("--work", required=True, help="scratch directory (corpus, indexes, runs)")
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--commits", type=int, default=10)
    ap.add_argument("--search-reps", type=int, default=3)
    ap.add_argument("--peer-python", help="python of a venv with xtr-warp-rs: run the peer")
    ap.add_argument("--json", help="write all raw numbers here")
    a = ap.parse_args()
    a.chimera = os.path.abspath(a.chimera)
    os.makedirs(a.work, exist_ok=True)
    c = Corpus(a, os.path.join(a.work, f"corpus_{a.docs}_{a.dim}_{a.seed}"))
    log(f"corpus {c.n} docs {c.off[-1]} tokens")
    reps = []
    for r in range(a.reps):
        w = os.path.join(a.work, f"rep{r}")
        shutil.rmtree(w, ignore_errors=True)
        os.makedirs(w)
        reps.append(Bench(a, c, w).rep(r))
    peer = None
    if a.peer_python:
        b = Bench(a, c, a.work)
        truth = {"base": b.exact("base", np.arange(c.nb)), "all": b.exact("all", np.arange(c.n)),
                 "live": b.exact("live", c.live_after)}
        peer = run_peer(a, c, a.work, truth)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "reps": reps, "peer": peer}, f, indent=1)
    report(a, c, reps, peer)


if __name__ == "__main__":
    main()
