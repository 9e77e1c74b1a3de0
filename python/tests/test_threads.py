"""Several Python threads search one index at once (the GIL is released in the
library) and every result equals the sequential one; close() refuses while a search
runs."""
import threading

import numpy as np

import chimera


def test_eight_threads_equal_sequential(index, corpus):
    _, _, queries = corpus
    rng = np.random.default_rng(3)
    jobs = [(queries[rng.integers(0, len(queries), 5)], int(rng.integers(1, 20)),
             [None, {"n_probe": 4}, {"k_refine": 50, "k_fullbit": 30}][j % 3]) for j in range(32)]
    want = [index.search(q, k=k, params=p, threads=1) for q, k, p in jobs]
    got = [None] * len(jobs)
    errors = []
    start = threading.Barrier(8)

    def worker(t):
        try:
            start.wait()
            for j in range(t, len(jobs), 8):
                q, k, p = jobs[j]
                got[j] = index.search(q, k=k, params=p, threads=1)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for (ws, wi), (gs, gi) in zip(want, got):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gs, ws)


def test_exact_search_threads(corpus):
    tokens, lens, queries = corpus
    want = chimera.exact_search((tokens, lens), queries, k=7, threads=1)
    got = [None] * 8

    def worker(t):
        got[t] = chimera.exact_search((tokens, lens), queries, k=7, threads=1)

    ths = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    for g in got:
        np.testing.assert_array_equal(g[1], want[1])
