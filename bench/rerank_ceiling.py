#!/usr/bin/env python3
"""The recall ceiling of each element type of the exact re-rank tier (bench/RESULTS.md,
section 5.17): every document of a corpus scored by exact Chamfer with its vectors
rounded as the index stores them (f16, bf16) and the query as the tier scores it (float32;
for bf16 also rounded to bfloat16), ranked, and compared with the float32 ranking
(Recall@10 and @100 against exact search). This is the recall a re-rank of every document
would reach: what the rounding alone costs, before candidate generation costs anything.

    python3 bench/rerank_ceiling.py DIR     # DIR: tokens.npy, doclens.npy, and
                                            # queries.npy [n, m, d] or queries_flat.npy
                                            # + qlens.npy (bench/data's layout)
numpy only; one float32 score matrix [queries x documents] per type.
"""
import os
import sys

import numpy as np


def load(d):
    t = np.load(os.path.join(d, "tokens.npy")).astype(np.float32)
    lens = np.load(os.path.join(d, "doclens.npy")).astype(np.int64)
    flat = os.path.join(d, "queries_flat.npy")
    if os.path.exists(flat):
        q, ql = np.load(flat).astype(np.float32), np.load(os.path.join(d, "qlens.npy"))
    else:
        q3 = np.load(os.path.join(d, "queries.npy")).astype(np.float32)
        q, ql = q3.reshape(-1, q3.shape[2]), np.full(q3.shape[0], q3.shape[1])
    return t, lens, q, ql.astype(np.int64)


def to_bf16(x):
    """float32 rounded to the nearest bfloat16 (ties to even), as core/f16.h rounds."""
    u = x.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def to_f16(x):
    return x.astype(np.float16).astype(np.float32)


def chamfer(t, lens, q, ql, block=1000):
    """[n_queries, n_docs] exact Chamfer scores."""
    off = np.concatenate([[0], np.cumsum(lens)[:-1]])
    qoff = np.concatenate([[0], np.cumsum(ql)[:-1]])
    rows = [np.maximum.reduceat(q[b:b + block] @ t.T, off, axis=1)
            for b in range(0, len(q), block)]
    return np.add.reduceat(np.concatenate(rows), qoff, axis=0)


def recall(s0, s, k):
    top0 = np.argsort(-s0, axis=1)[:, :k]
    top = np.argsort(-s, axis=1)[:, :k]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(top0, top)]))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    t, lens, q, ql = load(sys.argv[1])
    print(f"{sys.argv[1]}: {len(lens)} documents, {len(t)} tokens, d = {t.shape[1]}, "
          f"{len(ql)} queries (mean {ql.mean():.1f} tokens)")
    s0 = chamfer(t, lens, q, ql)
    for name, tt, qq in (("f16 vectors, float32 query", to_f16(t), q),
                         ("bf16 vectors, float32 query", to_bf16(t), q),
                         ("bf16 vectors, bf16 query (the tier)", to_bf16(t), to_bf16(q))):
        s = chamfer(tt, lens, qq, ql)
        print(f"{name:38s} Recall@10 {recall(s0, s, 10):.4f}  Recall@100 "
              f"{recall(s0, s, 100):.4f}  largest score change {np.abs(s - s0).max():.2e}",
              flush=True)


if __name__ == "__main__":
    main()
