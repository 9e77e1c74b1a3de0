#!/usr/bin/env python3
"""Cut the first P passages of a corpus built by make_corpus.py, without re-embedding.

    python3 bench/data/slice_corpus.py bench/data/out /tmp/slice10k 10000 [MAXQ]

Keeps the queries whose relevant passage lies in the slice (at most MAXQ, default all),
renumbered 0.., with their qrels restricted to the slice (a relevant passage outside it
could never be retrieved). Writes tokens.npy, doclens.npy, queries.npy, queries_flat.npy,
qlens.npy, qrels.tsv, queries.tsv (when the source has it) and slice.json (the source
query ids, in order). The passages of make_corpus.py are already in a seeded random
order, so the first P are a random sample.
"""
import json
import os
import sys

import numpy as np


def main():
    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    src, dst, P = sys.argv[1], sys.argv[2], int(sys.argv[3])
    maxq = int(sys.argv[4]) if len(sys.argv) == 5 else None
    doclens = np.load(os.path.join(src, "doclens.npy"))
    if not 0 < P <= len(doclens):
        raise SystemExit(f"P = {P}: the corpus has {len(doclens)} passages")
    os.makedirs(dst, exist_ok=True)
    ntok = int(doclens[:P].sum())
    tok = np.load(os.path.join(src, "tokens.npy"), mmap_mode="r")
    np.save(os.path.join(dst, "tokens.npy"), np.ascontiguousarray(tok[:ntok]))
    np.save(os.path.join(dst, "doclens.npy"), doclens[:P].copy())

    qrels = [line.split() for line in open(os.path.join(src, "qrels.tsv")) if line.strip()]
    keep = sorted({int(q) for q, _, d, r in qrels if int(d) < P and int(r) > 0})[:maxq]
    new = {q: i for i, q in enumerate(keep)}
    Q = np.load(os.path.join(src, "queries.npy"))
    ql = np.load(os.path.join(src, "qlens.npy"))
    flat = np.load(os.path.join(src, "queries_flat.npy"))
    off = np.concatenate(([0], np.cumsum(ql)))
    np.save(os.path.join(dst, "queries.npy"), Q[keep])
    np.save(os.path.join(dst, "qlens.npy"), ql[keep])
    np.save(os.path.join(dst, "queries_flat.npy"),
            np.concatenate([flat[off[q]:off[q + 1]] for q in keep]))
    with open(os.path.join(dst, "qrels.tsv"), "w") as f:
        for q, z, d, r in qrels:
            if int(q) in new and int(d) < P:
                f.write(f"{new[int(q)]} {z} {d} {r}\n")
    qt_path = os.path.join(src, "queries.tsv")
    if os.path.exists(qt_path):
        text = {}
        for line in open(qt_path):
            a, b = line.rstrip("\n").split("\t", 1)
            text[int(a)] = b
        with open(os.path.join(dst, "queries.tsv"), "w") as f:
            for q in keep:
                f.write(f"{new[q]}\t{text.get(q, '')}\n")
    with open(os.path.join(dst, "slice.json"), "w") as f:
        json.dump({"source": src, "passages": P, "ntok": ntok, "nq": len(keep),
                   "orig_qids": keep}, f)
    print(f"slice {dst}: {P} passages, {ntok} tokens, {len(keep)} queries, "
          f"{int(ql[keep].sum())} query tokens")


if __name__ == "__main__":
    main()
