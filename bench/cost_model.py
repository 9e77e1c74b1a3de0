#!/usr/bin/env python3
"""Measures the per-unit costs of the tuning cost model (src/search/tune.c) and fits them.

For each corpus directory (an index in DIR/idx, its queries in DIR/queries.npy, repeated
five times; or flat DIR/ho_flat.npy with DIR/ho_lens.npy, as they are), runs `chimera
search --profile --threads 1` at four settings that move one count at a time and
derives per corpus:
  probe   ns per (query token x probe): generate's growth from n_probe 4 to 16
  entry   ns per posting entry: refine's growth over the entries it estimated (the
          documents seen grow with them and are in it too)
  pair1   ns per (document token x query token) of 1-bit scoring (8 / 300 / 20)
  pairB   the same at full bits (the covered 8 / 60 / 60: no 1-bit pass)
then fits each as a + b * d over the corpora whose probing scored every centroid (no
centroid-score rows computed one by one). On the others (a graph-probed index) it prints
ns per such row: the time between 8 / 60 / 60 and 8 / 300 / 20 less their documents'
scoring at the fitted pair costs, over the rows between them. Sections 5.19-5.20 of
bench/RESULTS.md.

  python3 bench/cost_model.py build/chimera /data/rt/d64-short-flat /data/rt/d96-clustered ...
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

SETTINGS = [(4, 100, 20), (16, 100, 20), (8, 60, 60), (8, 300, 20)]


def num(pat, text):
    return float(re.search(pat, text).group(1))


def run(chimera, idx, qargs, n_probe, k_refine, k_fullbit):
    out = subprocess.run([chimera, "search", idx, *qargs, "--threads", "1", "--profile",
                          "-k", "10", "--nprobe", str(n_probe), "--k-refine", str(k_refine),
                          "--k-fullbit", str(k_fullbit)],
                         capture_output=True, text=True, check=True).stdout
    return dict(gen=num(r"generate ([\d.]+) ms", out), ref=num(r"refine ([\d.]+) ms", out),
                s1=num(r"1-bit scoring ([\d.]+) ms", out), fb=num(r"full-bit ([\d.]+) ms", out),
                ent=num(r"(\d+) posting entries", out), sc1=num(r"(\d+) 1-bit scored", out),
                nfb=num(r"([\d.]+) full-bit scored", out),
                rows=num(r"(\d+) centroid-score rows", out))


def corpus(chimera, d, tmp):
    name = os.path.basename(d.rstrip("/"))
    if os.path.exists(f"{d}/ho_flat.npy"):
        flat, lens = np.load(f"{d}/ho_flat.npy", mmap_mode="r"), np.load(f"{d}/ho_lens.npy")
        qargs = ["--queries", f"{d}/ho_flat.npy", "--qlens", f"{d}/ho_lens.npy"]
        dim, m = flat.shape[1], float(lens.mean())
    else:
        q = np.load(f"{d}/queries.npy")
        q5 = os.path.join(tmp, f"{name}_q5.npy")
        np.save(q5, np.concatenate([q] * 5))
        qargs = ["--queries", q5]
        dim, m = q.shape[2], float(q.shape[1])
    doc_len = float(np.load(f"{d}/doclens.npy").mean())
    r = {s: run(chimera, f"{d}/idx", qargs, *s) for s in SETTINGS}
    a, b, c, e = (r[s] for s in SETTINGS)
    d_probe = SETTINGS[1][0] - SETTINGS[0][0]
    d_ent = b["ent"] - a["ent"]
    total = lambda x: x["gen"] + x["ref"] + x["s1"] + x["fb"]
    return dict(name=name, d=dim, m=m, L=doc_len,
                probe=(b["gen"] - a["gen"]) * 1e6 / (d_probe * m),
                entry=(b["ref"] - a["ref"]) * 1e6 / d_ent if d_ent > 0 else float("nan"),
                pair1=e["s1"] * 1e6 / (e["sc1"] * doc_len * m),
                pairB=c["fb"] * 1e6 / (c["nfb"] * doc_len * m),
                rows=c["rows"], rows_e=e["rows"], t_c=total(c), t_e=total(e),
                nfb_c=c["nfb"], nfb_e=e["nfb"], sc1_e=e["sc1"],
                raw={str(k): v for k, v in r.items()})


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    chimera, dirs = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        res = [corpus(chimera, d, tmp) for d in dirs]
    print("%-18s %5s %6s %9s %9s %9s %9s %7s %9s" % ("corpus", "d", "m", "probe ns", "entry ns",
                                                    "pair1 ns", "pairB ns", "p1/pB", "rows/q"))
    for x in res:
        print("%-18s %5d %6.1f %9.1f %9.1f %9.3f %9.3f %7.2f %9.0f" % (
            x["name"], x["d"], x["m"], x["probe"], x["entry"], x["pair1"], x["pairB"],
            x["pair1"] / x["pairB"], x["rows"]))
    full = [x for x in res if x["rows"] < 1]  # S in full: no rows one by one
    fit = {}
    if len(full) >= 2:
        d = np.array([x["d"] for x in full], dtype=float)
        for key in ("probe", "entry", "pair1", "pairB"):
            y = np.array([x[key] for x in full])
            ok = np.isfinite(y)
            (a0, a1), *_ = np.linalg.lstsq(np.vstack([np.ones_like(d), d]).T[ok], y[ok], rcond=None)
            fit[key] = (a0, a1)
            print(f"fit {key:6s} ns = {a0:.3f} + {a1:.5f} d   (d = 64: {a0 + 64 * a1:.2f}, "
                  f"256: {a0 + 256 * a1:.2f})")
    for x in res:
        if x["rows"] < 1 or not fit or x["rows_e"] <= x["rows"]:
            continue
        pair = lambda key: fit[key][0] + fit[key][1] * x["d"]
        per_doc = x["L"] * x["m"]  # pairs a document
        scoring = (pair("pair1") * x["sc1_e"] + pair("pairB") * (x["nfb_e"] - x["nfb_c"])) * per_doc
        ns_row = ((x["t_e"] - x["t_c"]) * 1e6 - scoring) / (x["rows_e"] - x["rows"])
        print(f"{x['name']}: {ns_row:.0f} ns a centroid-score row ({ns_row / (x['m'] * x['d']):.3f} "
              f"per query token and dimension)")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
