"""The exact re-rank tier from Python: Index.build(rerank=...) stores the vectors (info
reports them), search(rerank_depth=N) over every document equals exact_search, the CLI
agrees on the same index, add keeps it exact, and an index without vectors refuses."""
import numpy as np
import pytest

import chimera
from conftest import read_trec, run


def as_stored(x, rerank):
    """x rounded to the element type the index stores, widened back to float32."""
    if rerank == "f16":
        return x.astype(np.float16).astype(np.float32)
    if rerank == "bf16":  # round to nearest even on the top 16 bits
        b = x.view(np.uint32).astype(np.uint64)
        b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
        return b.astype(np.uint32).view(np.float32)
    return x


@pytest.mark.parametrize("rerank", ["f32", "f16", "bf16"])
def test_rerank_equals_exact(corpus, tmp_path, rerank):
    tokens, lens, queries = corpus
    ix = chimera.Index.build(tmp_path / "rr.idx", tokens=tokens, doclens=lens, threads=2,
                             rerank=rerank)
    info = ix.info
    assert info["rerank"] == rerank
    assert info["bytes_rerank"] == tokens.size * (4 if rerank == "f32" else 2)
    n = len(lens)
    every = {"n_probe": info["n_clusters"], "k_refine": n, "k_fullbit": n}
    scores, ids = ix.search(queries, k=10, params=every, rerank_depth=n, threads=2)
    assert ix.last_profile["n_reranked"] == n * len(queries)
    # exact search over the vectors as stored (rounded to the element type), and for
    # bf16 against the query rounded to bfloat16 too, as the tier scores it
    stored = as_stored(tokens, rerank)
    scored = as_stored(queries, rerank) if rerank == "bf16" else queries
    escores, eids = chimera.exact_search((stored, lens), scored, k=10, threads=2)
    assert (ids == eids).mean() >= 0.99
    np.testing.assert_allclose(scores, escores, rtol=2e-6, atol=2e-6)
    # a shallow depth ranks the same candidates exactly: never worse than without it
    _, i0 = ix.search(queries, k=10, threads=2)
    _, i2 = ix.search(queries, k=10, rerank_depth=20, threads=2)
    assert chimera.recall(i2, eids, 10) >= chimera.recall(i0, eids, 10)
    ix.close()


def test_rerank_cli_and_living(cli, corpus, tmp_path):
    tokens, lens, queries = corpus
    half = len(lens) // 2
    cut = int(lens[:half].sum())
    ix = chimera.Index.build(tmp_path / "rr.idx", tokens=tokens[:cut], doclens=lens[:half],
                             ids=np.arange(half), threads=2, rerank="f16")
    path = ix.path
    ix.close()
    chimera.add(path, tokens=tokens[cut:], doclens=lens[half:],
                ids=np.arange(half, len(lens)), no_sync=True)
    chimera.delete(path, [3, 250], no_sync=True)
    live = np.setdiff1d(np.arange(len(lens)), [3, 250])
    with chimera.Index(path) as ix:
        n = ix.info["n_docs"]
        every = {"n_probe": ix.info["n_clusters"], "k_refine": n, "k_fullbit": n}
        scores, ids = ix.search(queries, k=10, params=every, rerank_depth=n, threads=2)
    offs = np.concatenate([[0], np.cumsum(lens)])
    stored = tokens.astype(np.float16).astype(np.float32)
    docs = [stored[offs[d]:offs[d + 1]] for d in live]
    escores, eids = chimera.exact_search(docs, queries, k=10, ids=live, threads=2)
    assert (ids == eids).mean() >= 0.99
    np.testing.assert_allclose(scores, escores, rtol=2e-6, atol=2e-6)
    # the CLI, on the same index and parameters, returns the same run
    np.save(tmp_path / "queries.npy", queries)
    out = run([cli, "search", path, "--queries", tmp_path / "queries.npy", "-k", "10",
               "--nprobe", str(every["n_probe"]), "--k-refine", str(n), "--rerank-depth",
               str(n), "--out", tmp_path / "run.trec", "--profile"])
    assert "exact re-rank (per query)" in out
    cids, cscores = read_trec(tmp_path / "run.trec", len(queries), 10)
    assert (cids == ids).all()
    np.testing.assert_allclose(cscores, scores, rtol=1e-5, atol=1e-5)


def test_rerank_refused_without_vectors(index, corpus):
    _, _, queries = corpus
    assert index.info["rerank"] is None and index.info["bytes_rerank"] == 0
    with pytest.raises(ValueError, match="stores none"):
        index.search(queries, k=10, rerank_depth=50)
    with pytest.raises(ValueError, match="rerank"):
        chimera.Index.build(index.path + ".x", tokens=corpus[0], doclens=corpus[1], rerank="f8")
