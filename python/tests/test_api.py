"""The package's API: results equal the CLI's on the same index and parameters, float16
input equals float32, a list of arrays equals the concatenated matrix, tuning and
profiles, the index's info and check."""
import numpy as np
import pytest

import chimera
from conftest import read_trec, run


def test_search_shapes_and_recall(index, corpus):
    tokens, lens, queries = corpus
    scores, ids = index.search(queries, k=10, threads=2)
    assert scores.shape == ids.shape == (20, 10)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert (np.diff(scores, axis=1) <= 1e-6).all()          # best first
    escores, eids = chimera.exact_search((tokens, lens), queries, k=10, threads=2)
    assert chimera.recall(ids, eids, 10) >= 0.8
    # Padding: more results asked than documents exist.
    s, i = index.search(queries[:2], k=len(lens) + 5, params={"k_refine": 1000, "k_fullbit": 1000})
    assert (i[:, len(lens):] == -1).all() and np.isneginf(s[:, len(lens):]).all()


def test_equals_cli(cli, corpus, tmp_path):
    """The CLI builds an index and searches it; Python searches the same index with the
    same parameters and gets the same run; exact search agrees with `chimera exact`."""
    tokens, lens, queries = corpus
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "doclens.npy", lens)
    np.save(tmp_path / "queries.npy", queries)
    idx = tmp_path / "cli.idx"
    run([cli, "build", "--tokens", tmp_path / "tokens.npy", "--doclens", tmp_path / "doclens.npy",
         "--out", idx, "--threads", "2", "--no-sync"])
    for extra, params in [([], None),
                          (["--nprobe", "8", "--k-refine", "60", "--k-fullbit", "20",
                            "--impute", "zero", "--probe", "brute"],
                           {"n_probe": 8, "k_refine": 60, "k_fullbit": 20, "impute": "zero",
                            "probe": "brute"})]:
        run([cli, "search", idx, "--queries", tmp_path / "queries.npy", "-k", "10", "--threads", "2",
             "--backend", "cpu", "--out", tmp_path / "run.trec"] + extra)
        cli_ids, cli_scores = read_trec(tmp_path / "run.trec", len(queries), 10)
        with chimera.Index.open(idx, backend="cpu") as ix:
            scores, ids = ix.search(queries, k=10, params=params, threads=2)
        np.testing.assert_array_equal(ids, cli_ids)
        np.testing.assert_allclose(scores, cli_scores, rtol=1e-5, atol=1e-5)
    run([cli, "exact", "--tokens", tmp_path / "tokens.npy", "--doclens", tmp_path / "doclens.npy",
         "--queries", tmp_path / "queries.npy", "-k", "10", "--threads", "2", "--out", tmp_path / "exact.trec"])
    cli_ids, cli_scores = read_trec(tmp_path / "exact.trec", len(queries), 10)
    scores, ids = chimera.exact_search((tokens, lens), queries, k=10, threads=2)
    np.testing.assert_array_equal(ids, cli_ids)
    np.testing.assert_allclose(scores, cli_scores, rtol=1e-5, atol=1e-5)


def test_float16_equals_float32_converted(index, corpus):
    tokens, lens, queries = corpus
    q16 = queries.astype(np.float16)
    a = index.search(q16, k=10, threads=2)
    b = index.search(q16.astype(np.float32), k=10, threads=2)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])
    t16 = tokens.astype(np.float16)
    a = chimera.exact_search((t16, lens), q16, k=5)
    b = chimera.exact_search((t16.astype(np.float32), lens), q16.astype(np.float32), k=5)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])


def test_lists_equal_concatenated(index, corpus, tmp_path):
    tokens, lens, queries = corpus
    docs = np.split(tokens, np.cumsum(lens)[:-1])
    a = chimera.exact_search(docs, list(queries), k=10)
    b = chimera.exact_search((tokens, lens), queries, k=10)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])
    # One [n_docs, L, d] array is n_docs documents of L tokens.
    cube = tokens[: 50 * 8].reshape(50, 8, -1)
    a = chimera.exact_search(cube, queries, k=5)
    b = chimera.exact_search(list(cube), queries, k=5)
    np.testing.assert_array_equal(a[1], b[1])
    # Queries of different lengths in a list: each equals its own search.
    ql = [queries[0][:5], queries[1], queries[2][:11]]
    s, i = index.search(ql, k=10, threads=2)
    for r, q in enumerate(ql):
        s1, i1 = index.search(q[None], k=10, threads=2)
        np.testing.assert_array_equal(i[r], i1[0])
        np.testing.assert_array_equal(s[r], s1[0])
    # An index built from the list equals one built from the matrix (same seed).
    with chimera.Index.build(tmp_path / "list.idx", documents=docs, threads=2) as ix:
        np.testing.assert_array_equal(ix.search(queries, k=10, threads=2)[1],
                                      index.search(queries, k=10, threads=2)[1])


def test_user_ids(corpus, tmp_path):
    tokens, lens, queries = corpus
    uids = np.arange(len(lens), dtype=np.int64) * 10 + 1000
    a = chimera.exact_search((tokens, lens), queries, k=5)
    b = chimera.exact_search((tokens, lens), queries, k=5, ids=uids)
    np.testing.assert_array_equal(uids[a[1]], b[1])
    with chimera.Index.build(tmp_path / "ids.idx", tokens=tokens, doclens=lens, ids=uids,
                             threads=2) as ix:
        s, i = ix.search(queries, k=5, threads=2)
        assert np.isin(i, uids).all()


def test_tune_profile_info_check(corpus, tmp_path):
    tokens, lens, queries = corpus
    path = tmp_path / "tune.idx"
    ix = chimera.Index.build(path, tokens=tokens, doclens=lens, threads=2, progress=True)
    res = ix.tune(queries, k=10, target_recall=0.9, threads=2, save=True)
    assert res["reached"] and res["saved"] and res["recall"] >= 0.9
    assert set(res["params"]) == {"n_probe", "k_refine", "k_fullbit", "chunks", "impute", "probe",
                                  "rerank_depth", "k_interaction", "impute_scale"}
    # the floor's scale the tune measured with: the index's calibrated one, in (0, 1]
    assert 0 < res["params"]["impute_scale"] <= 1
    # the saving handle searches by the profile at once, and still knows its corpus
    mine = ix.search(queries, k=10, recall=0.9, threads=2)
    np.testing.assert_array_equal(mine[1], ix.search(queries, k=10, params=res["params"],
                                                     threads=2)[1])
    assert ix.tune(queries, k=10, target_recall=0.9, threads=2)["reached"]
    # With explicit truth, on a reopened handle (the choice among settings that reach the
    # target depends on measured speed, so only the recall is compared).
    truth = chimera.exact_search((tokens, lens), queries, k=10)[1]
    ix2 = chimera.Index.open(path)
    res2 = ix2.tune(queries, k=10, target_recall=0.9, truth=truth, threads=2)
    assert res2["reached"] and res2["recall"] >= 0.9 and not res2["saved"]
    assert chimera.recall(ix2.search(queries, k=10, params=res2["params"])[1], truth, 10) >= 0.9
    with pytest.raises(ValueError, match="truth"):
        ix2.tune(queries, k=10, target_recall=0.9)          # no corpus known, no truth
    a = ix2.search(queries, k=10, recall=0.9, threads=2)
    b = ix2.search(queries, k=10, params=res["params"], threads=2)
    np.testing.assert_array_equal(a[1], b[1])
    # params win over the profile field by field
    c = ix2.search(queries, k=10, recall=0.9, params={"n_probe": 1}, threads=2)
    d = ix2.search(queries, k=10, params={**res["params"], "n_probe": 1}, threads=2)
    np.testing.assert_array_equal(c[1], d[1])
    # the profile was tuned without a filter: with one its depths deepen (as the index's
    # defaults do), where the same depths given explicitly do not; only a profile whose
    # centroid interaction keeps k_fullbit documents has none deeper to re-score
    even = np.arange(0, len(lens), 2)
    ix2.search(queries, k=10, recall=0.9, subset=even, threads=2)
    deep = ix2.last_profile["n_fullbit"]
    ix2.search(queries, k=10, params=res["params"], subset=even, threads=2)
    p = res["params"]
    capped = 0 < p["k_interaction"] < p["k_refine"] and p["k_interaction"] <= p["k_fullbit"]
    assert deep > ix2.last_profile["n_fullbit"] or (capped and deep == ix2.last_profile["n_fullbit"])
    # the probes that ran, per query token and summed over queries: one search's n_probe
    ix2.search(queries, k=10, params={**res["params"], "n_probe": 3}, threads=2)
    assert ix2.last_profile["n_probed"] >= 3 * len(queries)
    # a small index: every probe selected from all centroid scores, none walked
    assert ix2.last_profile["n_walked"] == 0
    ix2.search(queries, k=10, params={**res["params"], "n_probe": 3, "probe": "graph"}, threads=2)
    assert ix2.last_profile["n_walked"] == ix2.last_profile["n_probed"] > 0
    # the filtered defaults are deeper than the unfiltered ones
    flat, deep = ix2.default_params(10), ix2.default_params(10, filtered=True)
    assert deep["k_fullbit"] > flat["k_fullbit"] and deep["calibrated"] == flat["calibrated"]
    with pytest.raises(ValueError, match="profile"):
        ix2.search(queries, k=10, recall=0.999)
    info = ix2.info
    assert info["n_docs"] == len(lens) and info["dim"] == 64 and info["n_tokens"] == len(tokens)
    assert info["bits"] == 4 and info["sections"]
    ix2.check()
    assert len(ix2) == len(lens) and "64" in repr(ix2)
    ix2.close()
    assert "closed" in repr(ix2)
    with pytest.raises(ValueError, match="closed"):
        ix2.search(queries, k=10)
    ix.close()


def test_progress_callable(corpus, tmp_path):
    tokens, lens, _ = corpus
    seen = []
    chimera.Index.build(tmp_path / "p.idx", tokens=tokens, doclens=lens, threads=2,
                        progress=lambda phase, f: seen.append((phase, f))).close()
    assert seen and all(0 <= f <= 1 for _, f in seen)
