"""The build's calibrated default search parameters through the Python package: listed in
the build report, used by a search that sets no parameters (the same results as passing
them explicitly), the same on every build of the same corpus (chosen by counted work, not
by measured time), and skipped with calibrate=False (the library's fixed defaults)."""
import numpy as np
import pytest

import chimera


def test_calibrated_defaults(corpus, tmp_path):
    tokens, lens, queries = corpus
    ix = chimera.Index.build(tmp_path / "cal.idx", tokens=tokens, doclens=lens, threads=2)
    cal = ix.build_report["calibrated"]
    assert [c["k"] for c in cal] == [10]  # 400 documents: k = 100 needs 500
    c = cal[0]
    assert c["k_refine"] >= c["k_fullbit"] >= 10 and c["n_probe"] >= 1
    assert 0 <= c["recall_low"] <= c["recall"] <= 1
    assert not c["reached"] or c["recall_low"] >= 0.95
    assert "calibrate" in ix.build_report["phases"]
    s0, i0 = ix.search(queries, k=10, threads=1)
    params = {key: c[key] for key in ("n_probe", "k_refine", "k_fullbit", "chunks")}
    s1, i1 = ix.search(queries, k=10, params=params, threads=1)
    assert np.array_equal(i0, i1) and np.array_equal(s0, s1)
    ix.close()
    again = chimera.Index.build(tmp_path / "cal2.idx", tokens=tokens, doclens=lens, threads=2)
    keys = ("k", "n_probe", "k_refine", "k_fullbit", "chunks", "reached")
    assert [{x: c[x] for x in keys} for c in again.build_report["calibrated"]] == \
        [{x: c[x] for x in keys} for c in cal]
    again.close()


def test_build_without_calibration(corpus, tmp_path):
    tokens, lens, queries = corpus
    ix = chimera.Index.build(tmp_path / "plain.idx", tokens=tokens, doclens=lens, threads=2,
                             calibrate=False)
    assert ix.build_report["calibrated"] == []
    assert "calibrate" not in ix.build_report["phases"]
    s0, i0 = ix.search(queries, k=10, threads=1)
    fixed = {"n_probe": 8, "k_refine": 160, "k_fullbit": 40, "chunks": 4}
    s1, i1 = ix.search(queries, k=10, params=fixed, threads=1)
    assert np.array_equal(i0, i1)
    ix.close()


def test_default_params_are_the_calibrated(corpus, index):
    """Index.default_params(k): the setting a search without params uses."""
    _, _, queries = corpus
    d = index.default_params(10)
    assert d["calibrated"] is True
    c = index.build_report["calibrated"][0]
    assert all(d[key] == c[key] for key in ("n_probe", "k_refine", "k_fullbit", "chunks"))
    params = {key: d[key] for key in ("n_probe", "k_refine", "k_fullbit", "chunks")}
    assert np.array_equal(index.search(queries, k=10, threads=1)[1],
                          index.search(queries, k=10, params=params, threads=1)[1])


def test_tune_heldout(corpus, index):
    """tune(heldout=...): tuned on part of the queries, checked on the rest with a 95%
    interval; reached only when its lower bound meets the target."""
    tokens, lens, _ = corpus
    docs = np.split(tokens, np.cumsum(lens)[:-1])
    rng = np.random.default_rng(3)
    queries = [docs[i][rng.integers(0, len(docs[i]), 12)] for i in rng.integers(0, len(docs), 60)]
    res = index.tune(queries, k=10, target_recall=0.9, heldout=0.5, seed=5)
    h = res["heldout"]
    assert h["n_tune"] + h["n_heldout"] == 60 and h["n_heldout"] >= 20
    assert 0 <= h["low"] <= h["recall"] <= h["high"] <= 1
    assert not res["reached"] or h["low"] >= 0.9
    assert h["tune_target"] >= 0.9
    again = index.tune(queries, k=10, target_recall=0.9, heldout=0.5, seed=5)
    assert again["params"] == res["params"] and again["heldout"]["recall"] == h["recall"]
    assert "heldout" not in index.tune(queries, k=10, target_recall=0.9)
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match="heldout"):
            index.tune(queries, k=10, heldout=bad)
    with pytest.raises(ValueError):
        index.tune(queries[:10], k=10, heldout=0.5)  # too few queries to split
