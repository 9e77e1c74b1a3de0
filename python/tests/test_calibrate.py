"""The build's calibrated default search parameters through the Python package: listed in
the build report, used by a search that sets no parameters (the same results as passing
them explicitly), the same on every build of the same corpus (chosen by counted work, not
by measured time), and skipped with calibrate=False (the library's fixed defaults)."""
import numpy as np

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
