"""Bad inputs raise the named Python exceptions, with the library's message where it
found the problem, and never crash the interpreter."""
import os
import shutil

import numpy as np
import pytest

import chimera


def test_bad_queries(index, corpus):
    _, _, q = corpus
    cases = [
        (q[0], "dimensions"),                          # wrong ndim
        (q.astype(np.float64), "float32"),             # wrong dtype
        (q.astype(np.int32), "float32"),
        (q[:, ::2, :], "contiguous"),                  # non-contiguous
        (np.asfortranarray(q), "contiguous"),
        (q[:, :, :32].copy(), "dimension"),            # dimension mismatch
        ([], "empty"),                                 # empty list
        ([q[0], q[1][:, :32].copy()], "dimension"),    # ragged dimensions
        ([q[0], "x"], "numpy array"),
        (q[:0], "no tokens"),
        ([q[0][:0]], "no tokens"),
        ("queries", "numpy array"),
    ]
    for bad, msg in cases:
        with pytest.raises(ValueError, match=msg):
            index.search(bad, k=10)
    nan = q.copy()
    nan[3, 2, 1] = np.nan
    with pytest.raises(ValueError):
        index.search(nan, k=10)
    inf = q.copy()
    inf[0, 0, 0] = np.inf
    with pytest.raises(ValueError):
        index.search(inf, k=10)
    for k in (0, -3):
        with pytest.raises(ValueError, match="k"):
            index.search(q, k=k)
    with pytest.raises(ValueError, match="unknown key"):
        index.search(q, k=10, params={"nprobe": 3})
    with pytest.raises(ValueError, match="impute"):
        index.search(q, k=10, params={"impute": "never"})
    for bad in (1.5, -0.25, float("nan")):
        with pytest.raises(ValueError, match="impute_scale"):
            index.search(q, k=10, params={"impute_scale": bad})
    with pytest.raises(ValueError, match="impute_scale"):
        index.search(q, k=10, params={"impute_scale": "half"})
    # in range: the floor moves, the search runs (the scale's effect: tests/test_search.c)
    s, i = index.search(q, k=10, params={"impute_scale": 0.5})
    assert s.shape == i.shape and (i >= 0).all()
    with pytest.raises(ValueError, match="threads"):
        index.search(q, k=10, threads=0)
    with pytest.raises(ValueError, match="recall"):
        index.search(q, k=10, recall=1.5)


def test_bad_corpus(corpus, tmp_path):
    tokens, lens, q = corpus
    build = lambda **kw: chimera.Index.build(tmp_path / "bad.idx", threads=2, **kw)
    with pytest.raises(ValueError, match="ids"):
        build(tokens=tokens, doclens=lens, ids=np.arange(len(lens) - 1))
    with pytest.raises(ValueError):
        build(tokens=tokens, doclens=lens, ids=np.zeros(len(lens), dtype=np.int64))  # duplicates
    with pytest.raises(ValueError, match="sum"):
        build(tokens=tokens, doclens=lens[:-1])
    with pytest.raises(ValueError, match="empty"):
        build(documents=[])
    with pytest.raises(ValueError, match="no tokens"):
        build(documents=[tokens[:5], tokens[:0]])
    with pytest.raises(ValueError, match="dimensions"):
        build(tokens=tokens.reshape(-1), doclens=lens)
    with pytest.raises(ValueError, match="float32"):
        build(tokens=tokens.astype(np.float64), doclens=lens)
    with pytest.raises(ValueError, match="contiguous"):
        build(tokens=tokens[:, ::2], doclens=lens)
    with pytest.raises(ValueError, match="not both"):
        build(documents=[tokens], tokens=tokens, doclens=lens)
    with pytest.raises(ValueError, match="bits"):
        build(tokens=tokens, doclens=lens, bits=9)
    bad = tokens.copy()
    bad[17, 3] = np.nan
    with pytest.raises(ValueError):
        build(tokens=bad, doclens=lens)
    with pytest.raises(ValueError):
        chimera.exact_search((bad, lens), q, k=3)
    assert not os.path.exists(tmp_path / "bad.idx")
    with pytest.raises(FileNotFoundError):
        chimera.Index.build(tmp_path / "no" / "such" / "x.idx", tokens=tokens, doclens=lens)
    with pytest.raises(ValueError, match="dimension"):
        chimera.exact_search((tokens, lens), q[:, :, :32].copy(), k=3)
    with pytest.raises(ValueError):
        chimera.recall(np.zeros((3, 5)), np.zeros((4, 5)), 5)


def test_open_errors(index, tmp_path):
    with pytest.raises(FileNotFoundError):
        chimera.Index.open(tmp_path / "missing.idx")
    with pytest.raises(ValueError, match="backend"):
        chimera.Index.open(index.path, backend="tpu")
    empty = tmp_path / "empty.idx"
    empty.mkdir()
    with pytest.raises((chimera.CorruptIndexError, OSError)):
        chimera.Index.open(empty)
    # Damage a section: open or check reports CorruptIndexError naming it.
    broken = tmp_path / "broken.idx"
    shutil.copytree(index.path, broken)
    victim = max((p for p in broken.iterdir() if p.name != "manifest.json"),
                 key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(chimera.CorruptIndexError):
        chimera.Index.open(broken, verify=True)
    assert issubclass(chimera.CorruptIndexError, chimera.ChimeraError)
    assert issubclass(chimera.ChimeraError, RuntimeError)
