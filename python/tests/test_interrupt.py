"""Ctrl-C during a long call: a build (with or without progress) or an exact search
interrupted by SIGINT raises KeyboardInterrupt promptly; the index previously at the
build's path still opens, has the same section files byte for byte and searches
identically, and no temporary directory is left beside it."""
import _thread
import os
import pathlib
import threading
import time

import numpy as np
import pytest

import chimera


def _big_corpus(n_docs=2500, d=64, seed=3):
    rng = np.random.default_rng(seed)
    lens = rng.integers(20, 60, n_docs).astype(np.int64)
    tokens = rng.standard_normal((int(lens.sum()), d)).astype(np.float32)
    tokens /= np.linalg.norm(tokens, axis=1, keepdims=True)
    return tokens, lens


def _files(path):
    p = pathlib.Path(path)
    return {f.name: f.read_bytes() for f in sorted(p.iterdir()) if f.is_file()}


def _leftovers(path):
    parent = pathlib.Path(path).parent
    return [n for n in os.listdir(parent) if ".tmp-" in n or ".old-" in n]


@pytest.fixture()
def old_index(corpus, tmp_path):
    """An index at tmp_path/x.idx, its files and its results before the interrupt."""
    tokens, lens, queries = corpus
    path = tmp_path / "x.idx"
    with chimera.Index.build(path, tokens=tokens, doclens=lens, threads=2) as ix:
        scores, ids = ix.search(queries, k=10)
    return path, _files(path), scores, ids


def _check_untouched(old, corpus):
    path, files, scores, ids = old
    assert _files(path) == files
    assert _leftovers(path) == []
    with chimera.Index.open(path) as ix:
        s2, i2 = ix.search(corpus[2], k=10)
    np.testing.assert_array_equal(i2, ids)
    np.testing.assert_array_equal(s2, scores)


def test_interrupt_build_from_progress(corpus, old_index):
    """SIGINT raised while k-means reports progress (from a library worker thread)."""
    tokens, lens = _big_corpus()
    fired, later = [], []

    def progress(phase, fraction):
        if fired:
            later.append(phase)
        elif phase.startswith("kmeans") and fraction > 0:
            fired.append(time.monotonic())
            _thread.interrupt_main()

    with pytest.raises(KeyboardInterrupt):
        chimera.Index.build(old_index[0], tokens=tokens, doclens=lens, threads=2,
                            progress=progress)
    assert fired
    assert time.monotonic() - fired[0] < 5
    assert not any(p.startswith(("encode", "assign")) for p in later), later
    _check_untouched(old_index, corpus)


def _interrupt_when(cond, timeout=30):
    """A thread that calls interrupt_main() once cond() holds (polled every ms)."""
    def run():
        t_end = time.monotonic() + timeout
        while time.monotonic() < t_end:
            if cond():
                _thread.interrupt_main()
                return
            time.sleep(0.001)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_interrupt_build_without_progress(corpus, old_index):
    """progress=False: Ctrl-C still stops the build (the bridge is always installed).
    The interrupt comes as soon as the build's temporary directory exists."""
    tokens, lens = _big_corpus(n_docs=6000)
    path = old_index[0]
    t = _interrupt_when(lambda: bool(_leftovers(path)))
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        chimera.Index.build(path, tokens=tokens, doclens=lens, threads=2, progress=False)
        time.sleep(5)  # the build ended before the interrupt: fail below, not hang
    t.join()
    assert time.monotonic() - t0 < 5
    _check_untouched(old_index, corpus)


def test_interrupt_exact_search():
    tokens, lens = _big_corpus(n_docs=6000)
    rng = np.random.default_rng(5)
    queries = rng.standard_normal((400, 32, 64)).astype(np.float32)
    timer = threading.Timer(0.2, _thread.interrupt_main)
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        chimera.exact_search((tokens, lens), queries, k=10, threads=2)
        time.sleep(5)
    timer.join()
    assert time.monotonic() - t0 < 5
    # and a call afterwards is unaffected
    s, i = chimera.exact_search((tokens[:lens[:50].sum()], lens[:50]), queries[:3], k=5)
    assert i.shape == (3, 5) and (i >= 0).all()
