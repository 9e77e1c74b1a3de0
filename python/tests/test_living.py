"""The living index from Python: chimera.add, delete, update and compact change an index
directory in place, and an open Index sees each change only after refresh().

Each test builds its own small index of random unit tokens (documents share nothing, so
a query made of one document's tokens has that document as its clear best match, score
= its token count) and checks, after every commit: search finds what was added, never
returns what was deleted, returns the new version of what was updated; compaction keeps
the id set and the results; bad input raises a clear exception and leaves the index as
it was (generation, ids, files). No CLI needed."""
import _thread
import os
import threading
import time

import numpy as np
import pytest

import chimera

DIM = 64


def _docs(rng, n, dim=DIM, lo=6, hi=30):
    out = []
    for _ in range(n):
        x = rng.standard_normal((int(rng.integers(lo, hi)), dim)).astype(np.float32)
        out.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return out


@pytest.fixture()
def living(tmp_path):
    """(path, rng, {id: tokens}) for a fresh index of 300 documents with ids 0..299."""
    rng = np.random.default_rng(11)
    base = _docs(rng, 300)
    path = str(tmp_path / "living.idx")
    chimera.Index.build(path, base, threads=2).close()
    return path, rng, dict(enumerate(base))


def _top1(index, doc):
    """(id, score) of the best hit for a query made of the document's own tokens."""
    scores, ids = index.search([doc], k=1, threads=2)
    return int(ids[0, 0]), float(scores[0, 0])


def _files(path):
    return {f: os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path))}


def _assert_found(index, docs, ids):
    for i in ids:
        got, score = _top1(index, docs[i])
        assert got == i, f"query of document {i}: top hit {got}"
        assert score == pytest.approx(len(docs[i]), rel=0.02)   # its own tokens: ~1 each


def test_add_in_commits(living):
    path, rng, docs = living
    index = chimera.Index.open(path)
    assert index.generation == 1 and len(index) == 300
    next_id = 1000
    for commit in range(3):
        new = _docs(rng, 15)
        ids = np.arange(next_id, next_id + 15)
        if commit == 1:   # the tokens + doclens form, in float16
            rep = chimera.add(path, tokens=np.concatenate(new).astype(np.float16),
                              doclens=[len(d) for d in new], ids=ids, no_sync=True)
            new = [d.astype(np.float16).astype(np.float32) for d in new]
        else:
            rep = chimera.add(path, new, ids=ids, no_sync=True)
        docs.update(zip(ids.tolist(), new))
        next_id += 15
        assert rep["docs_added"] == 15 and rep["tokens_added"] == sum(map(len, new))
        assert rep["docs_deleted"] == 0 and rep["generation"] == commit + 2
        assert rep["n_docs"] == len(docs) and rep["n_segments"] == commit + 2
        assert rep["drift_below"] is not None and 0 <= rep["drift_below"] <= 1
        assert index.generation == commit + 1          # not yet refreshed
        assert index.refresh() is True
        assert index.generation == commit + 2 and len(index) == len(docs)
        _assert_found(index, docs, ids[::4])
    _assert_found(index, docs, [0, 150, 299])          # the built ones too
    assert sorted(index.ids().tolist()) == sorted(docs)
    info = index.info
    assert info["n_segments"] == 4 and info["appended_docs"] == 45
    assert info["appended_tokens"] == sum(len(docs[i]) for i in range(1000, 1045))
    assert info["n_deleted"] == 0 and info["n_deletion_lists"] == 0
    assert info["drift_tokens"] == info["appended_tokens"]
    assert isinstance(info["recluster_advised"], bool) and info["assign_sim_p10"] > 0
    index.check()
    index.close()


def test_delete_never_comes_back(living):
    path, rng, docs = living
    new = _docs(rng, 20)
    chimera.add(path, new, ids=np.arange(500, 520), no_sync=True)
    docs.update(zip(range(500, 520), new))
    index = chimera.Index.open(path)
    gone = [3, 77, 299, 500, 511]
    rep = chimera.delete(path, np.array(gone), no_sync=True)
    assert rep["docs_deleted"] == len(gone) and rep["n_deleted"] == len(gone)
    assert 3 in index.ids()                            # the old view still has them
    assert index.refresh()
    live = set(docs) - set(gone)
    assert set(index.ids().tolist()) == live and len(index) == len(live)
    wide = {"k_refine": 2000, "k_fullbit": 500, "n_probe": 64}
    for view in (index, chimera.Index.open(path)):     # refreshed, and opened afresh
        _, ids = view.search([docs[i] for i in gone], k=50, params=wide, threads=2)
        assert not np.isin(ids, gone).any()
        _assert_found(view, docs, [4, 298, 501, 519])
    # deleted ids are no longer in the index: deleting them again is an error...
    with pytest.raises(ValueError, match="not in the index"):
        chimera.delete(path, [77])
    # ...unless missing_ok, which skips them (and commits nothing when none was found)
    rep = chimera.delete(path, [77, 78, 78], missing_ok=True, no_sync=True)
    assert rep["docs_deleted"] == 1 and rep["ids_missing"] == 1
    rep = chimera.delete(path, 77, missing_ok=True, no_sync=True)
    assert rep["docs_deleted"] == 0 and rep["generation"] == index.info["generation"]
    index.refresh()
    assert 78 not in index.ids() and index.info["n_deleted"] == len(gone) + 1
    index.check()


def test_update_returns_new_version(living):
    path, rng, docs = living
    index = chimera.Index.open(path)
    old = {i: docs[i] for i in (10, 20)}
    new = _docs(rng, 2, lo=12, hi=13)                  # 12 tokens each
    rep = chimera.update(path, new, ids=[10, 20], no_sync=True)
    assert rep["docs_added"] == 2 and rep["docs_deleted"] == 2 and rep["ids_missing"] == 0
    assert rep["n_deleted"] == 2 and rep["n_docs"] == 302   # old versions, until compact
    docs.update({10: new[0], 20: new[1]})
    index.refresh()
    assert len(index) == 300 and sorted(index.ids().tolist()) == sorted(docs)
    # the new version's own tokens find it, with the new version's score (12 tokens)
    for i in (10, 20):
        got, score = _top1(index, docs[i])
        assert got == i and score == pytest.approx(12, rel=0.02)
    # a query of the old version's tokens: the id's score is now the new version's,
    # far below the old self-match; compare with exact search over the live corpus
    live_ids = np.array(sorted(docs))
    live_docs = [docs[i] for i in live_ids]
    for i in (10, 20):
        es, ei = chimera.exact_search(live_docs, [old[i]], k=300, ids=live_ids)
        exact = float(es[0][ei[0] == i][0])
        assert exact < 0.6 * len(old[i])
        s, ids = index.search([old[i]], k=300, params={"k_refine": 2000, "k_fullbit": 300,
                                                        "n_probe": 64}, threads=2)
        assert (ids[0] == i).sum() == 1
        assert float(s[0][ids[0] == i][0]) == pytest.approx(exact, abs=0.1 * len(old[i]))
    # missing_ok: an id not in the index is added
    extra = _docs(rng, 1)
    rep = chimera.update(path, extra, ids=[777], missing_ok=True, no_sync=True)
    assert rep["docs_added"] == 1 and rep["ids_missing"] == 1 and rep["docs_deleted"] == 0
    index.refresh()
    assert _top1(index, extra[0])[0] == 777
    index.check()


def test_compact_keeps_ids_and_results(living):
    path, rng, docs = living
    new = _docs(rng, 30)
    for c in range(3):
        chimera.add(path, new[c * 10:(c + 1) * 10], ids=np.arange(400 + c * 10, 410 + c * 10),
                    no_sync=True)
    docs.update(zip(range(400, 430), new))
    chimera.delete(path, list(range(0, 300, 7)) + [401, 425], no_sync=True)
    index = chimera.Index.open(path)
    before_ids = index.ids()
    queries = [docs[i] for i in (1, 2, 150, 400, 429)]
    before = index.search(queries, k=10, threads=2)
    info = index.info
    assert info["n_segments"] == 4 and info["n_deleted"] == 45
    seen = []
    rep = chimera.compact(path, no_sync=True, progress=lambda ph, f: seen.append(f))
    assert rep["merged"] and rep["docs_deleted"] == 45 and rep["n_deleted"] == 0
    assert rep["n_segments"] == 1 and rep["n_docs"] == len(before_ids)
    assert seen and all(0 <= f <= 1 for f in seen)
    assert index.generation == info["generation"]      # this handle: the old view
    assert index.refresh() and index.generation == rep["generation"]
    assert sorted(index.ids().tolist()) == sorted(before_ids.tolist())
    after = index.search(queries, k=10, threads=2)
    np.testing.assert_array_equal(after[1][:, 0], before[1][:, 0])
    np.testing.assert_array_equal(after[1][:, 0], [1, 2, 150, 400, 429])
    np.testing.assert_allclose(after[0][:, 0], before[0][:, 0], rtol=1e-5)
    info = index.info
    assert info["n_segments"] == 1 and info["n_deleted"] == 0 and info["n_deletion_lists"] == 0
    index.check()
    # already compact: nothing written, generation unchanged
    rep = chimera.compact(path, no_sync=True)
    assert not rep["merged"] and rep["generation"] == index.generation
    assert index.refresh() is False


def test_compact_recluster_keeps_ids_metadata_and_results(living):
    """compact(recluster=True), what info["recluster_advised"] asks for: new centroids
    over every live document, the same ids, documents still found, metadata kept."""
    path, rng, docs = living
    new = _docs(rng, 40)
    chimera.add(path, new, ids=np.arange(500, 540), no_sync=True)
    docs.update(zip(range(500, 540), new))
    chimera.delete(path, [3, 4, 510], no_sync=True)
    chimera.meta_import(path, records=[{"id": i, "half": int(i >= 150)} for i in docs],
                        no_sync=True)
    index = chimera.Index.open(path)
    before_ids = sorted(index.ids().tolist())
    gen = index.generation
    rep = chimera.compact(path, recluster=True, n_clusters=48, threads=2, seed=3, no_sync=True)
    assert rep["merged"] and rep["n_deleted"] == 0 and rep["n_segments"] == 1
    assert index.refresh() and index.generation > gen
    assert sorted(index.ids().tolist()) == before_ids
    assert index.info["n_clusters"] == 48
    _assert_found(index, docs, [0, 1, 150, 299, 500, 539])
    _, ids = index.search([docs[150], docs[1]], k=5, threads=2, filter="half = ?",
                          filter_args=(1,))
    assert ids[0, 0] == 150 and all(i < 0 or i >= 150 for i in ids[1])
    index.check()


def test_bad_inputs_leave_index_unchanged(living, tmp_path):
    path, rng, docs = living
    chimera.add(path, _docs(rng, 5), ids=np.arange(900, 905), no_sync=True)
    index = chimera.Index.open(path)
    gen, ids, files = index.generation, index.ids(), _files(path)
    good = _docs(rng, 2)
    nan = [good[0].copy(), good[1]]
    nan[0][3, 5] = np.nan
    cases = [
        (lambda: chimera.add(path, [d[:, :32].copy() for d in good], ids=[950, 951]),
         ValueError, "dimension 32"),
        (lambda: chimera.add(path, nan, ids=[950, 951]), ValueError, "NaN"),
        (lambda: chimera.add(path, good, ids=[950, 950]), ValueError, "more than once"),
        (lambda: chimera.add(path, good, ids=[950, 7]), ValueError, "id 7 .*already in the index"),
        (lambda: chimera.add(path, good, ids=[950, 902]), ValueError, "already in the index"),
        (lambda: chimera.add(path, good, ids=[950, -1]), ValueError, "negative"),
        (lambda: chimera.add(path, good, ids=None), ValueError, "ids: required"),
        (lambda: chimera.add(path, good, ids=[950]), ValueError, "ids"),
        (lambda: chimera.add(path, [d.astype(np.float64) for d in good], ids=[950, 951]),
         ValueError, "float32"),
        (lambda: chimera.add(path, [good[0], good[1][:0]], ids=[950, 951]), ValueError,
         "no tokens"),
        (lambda: chimera.update(path, good, ids=[5, 4242]), ValueError,
         "id 4242 .*not in the index"),
        (lambda: chimera.update(path, nan, ids=[5, 6]), ValueError, "NaN"),
        (lambda: chimera.delete(path, [1, 2, 4242]), ValueError, "id 4242 .*not in the index"),
        (lambda: chimera.delete(path, [1, -3]), ValueError, "negative"),
        (lambda: chimera.delete(path, [1.0, 2.0]), ValueError, "integers"),
        (lambda: chimera.delete(path, [[1, 2]]), ValueError, "1-d"),
        (lambda: chimera.add(tmp_path / "nowhere.idx", good, ids=[950, 951]),
         FileNotFoundError, "no index directory"),
        (lambda: chimera.compact(tmp_path / "nowhere.idx"), FileNotFoundError, "no index"),
    ]
    for call, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            call()
        assert index.info["generation"] == gen, msg
    assert _files(path) == files                       # nothing left behind either
    assert index.refresh() is False and index.generation == gen
    np.testing.assert_array_equal(index.ids(), ids)
    index.check()


def test_all_deleted(living):
    path, _, docs = living
    index = chimera.Index.open(path)
    chimera.delete(path, np.arange(300), no_sync=True)
    assert index.refresh() and len(index) == 0 and index.ids().shape == (0,)
    gen = index.generation
    with pytest.raises(ValueError, match="deleted"):
        index.search([docs[0]], k=3)
    with pytest.raises(ValueError, match="deleted"):
        chimera.compact(path, no_sync=True)
    assert index.refresh() is False and index.generation == gen
    # a document added afterwards is all there is to find
    chimera.add(path, [docs[0]], ids=[12345], no_sync=True)
    index.refresh()
    s, i = index.search([docs[0]], k=3)
    assert i[0].tolist() == [12345, -1, -1]


def test_refresh_semantics(living):
    path, rng, docs = living
    early = chimera.Index.open(path)
    new = _docs(rng, 3)
    rep = chimera.add(path, new, ids=[600, 601, 602], no_sync=True)
    # the handle opened before the add does not see it...
    assert early.generation == 1 and len(early) == 300 and 600 not in early.ids()
    assert _top1(early, new[1])[0] != 601
    assert early.info["generation"] == rep["generation"] == 2   # info reads the disk
    # ...a handle opened after does, and so does the early one once refreshed
    late = chimera.Index.open(path)
    assert late.generation == 2 and _top1(late, new[1])[0] == 601
    assert late.refresh() is False
    assert early.refresh() is True and early.refresh() is False
    assert early.generation == 2 and _top1(early, new[1])[0] == 601
    # several changes, one refresh: straight to the newest
    chimera.delete(path, [601], no_sync=True)
    chimera.add(path, _docs(rng, 1), ids=[603], no_sync=True)
    assert early.refresh() is True and early.generation == 4
    assert 601 not in early.ids() and 603 in early.ids()
    early.close()
    with pytest.raises(ValueError, match="closed"):
        early.refresh()
    with pytest.raises(ValueError, match="closed"):
        early.ids()
    late.close()


def test_refresh_while_searching(living):
    """Threads search one handle while the main thread adds and refreshes it: every
    search succeeds, and each returns a document that existed in some generation."""
    path, rng, docs = living
    index = chimera.Index.open(path)
    queries = [docs[i] for i in range(0, 300, 30)]
    stop, errors, results = threading.Event(), [], []

    def searcher():
        try:
            while not stop.is_set():
                results.append(index.search(queries, k=5, threads=1)[1][:, 0])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=searcher) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for c in range(5):
            chimera.add(path, _docs(rng, 4), ids=np.arange(700 + 4 * c, 704 + 4 * c),
                        no_sync=True)
            assert index.refresh()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert results and all((r == np.arange(0, 300, 30)).all() for r in results)
    assert index.generation == 6 and len(index) == 320
    index.close()


def test_ctrl_c_during_a_change(living):
    """Ctrl-C during a compact (sent from its progress callback, on the library's thread)
    raises KeyboardInterrupt promptly, and the index is whole: either as it was (the
    cancel reached the compact before its commit) or compacted (it was committing; the
    Ctrl-C is checked every 50 ms, and a small compact may finish first). That a cancel
    leaves the files untouched is test_update.c's."""
    path, _, docs = living
    chimera.delete(path, list(range(0, 300, 3)), no_sync=True)
    gen = chimera.Index.open(path).generation
    fired = []

    def progress(phase, fraction):
        if not fired:
            fired.append(phase)
            _thread.interrupt_main()

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        chimera.compact(path, no_sync=True, progress=progress)
        time.sleep(5)   # the interrupt was lost: fail below on the time, not hang
    assert fired and time.monotonic() - t0 < 3
    with chimera.Index.open(path) as index:
        assert (index.generation, index.info["n_deleted"]) in ((gen, 100), (gen + 1, 0))
        assert len(index) == 200
        index.check()
        assert _top1(index, docs[1])[0] == 1


def test_lock_timeout(living):
    """Another writer holds the index's lock (an flock on IDX.lock, as the library's
    writers take it): a change waits lock_timeout seconds, then raises ChimeraError
    (CHIMERA_ERR_BUSY) and changes nothing; once the lock is free it goes through."""
    import fcntl
    path, rng, _ = living
    new = _docs(rng, 1)
    with open(path + ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        for timeout, at_least in ((0, 0.0), (0.3, 0.25)):
            t0 = time.monotonic()
            with pytest.raises(chimera.ChimeraError, match="another process"):
                chimera.add(path, new, ids=[800], no_sync=True, lock_timeout=timeout)
            assert at_least <= time.monotonic() - t0 < 5
        fcntl.flock(held, fcntl.LOCK_UN)
    assert chimera.Index.open(path).generation == 1
    assert chimera.add(path, new, ids=[800], no_sync=True, lock_timeout=0)["generation"] == 2
