"""Metadata filters from Python: chimera.meta_import (JSON Lines, CSV, a list of dicts)
stores one record per document, and Index.search(filter=..., filter_args=...) returns
only documents whose record satisfies the SQL expression: checked against the same
predicate evaluated in Python over the records, at k below and above the number allowed.
add and update bring their documents' records (metadata=, a file or dicts) and delete
removes them, in the same commit; delete(filter=...) deletes exactly the documents whose
records match (and nothing when none does). Malformed records fail naming the line (or the
record), with nothing imported; a filter that tries to be a statement is refused and
leaves the metadata intact; a filter on an index without metadata says to import some;
bad filter arguments raise ValueError before the library is called. No CLI needed."""
import csv as csvmod
import json
import os
import sqlite3
import tempfile

import numpy as np
import pytest

import chimera

DIM = 32
N = 120
LANGS = ("en", "fr", "de")


def _docs(rng, n):
    out = []
    for _ in range(n):
        x = rng.standard_normal((int(rng.integers(4, 12)), DIM)).astype(np.float32)
        out.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return out


def _records(ids, rng):
    return [{"id": int(i), "year": int(2000 + rng.integers(0, 25)),
             "lang": LANGS[int(rng.integers(0, 3))], "score": float(rng.random())}
            for i in ids]


@pytest.fixture()
def meta_index(tmp_path):
    """(path, docs {id: tokens}, records {id: dict}, rng): a fresh index of N documents
    with ids 0..N-1 and their records, not yet imported."""
    rng = np.random.default_rng(5)
    docs = _docs(rng, N)
    path = str(tmp_path / "meta.idx")
    chimera.Index.build(path, docs, threads=2).close()
    recs = _records(range(N), rng)
    return path, dict(enumerate(docs)), {r["id"]: r for r in recs}, rng


def _write_jsonl(path, recs):
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return str(path)


def _queries(docs, ids):
    return [docs[i] for i in ids]


def _check(index, docs, records, expr, args, pred, k=10):
    """Searches with the filter and checks every row against pred over the records:
    only allowed ids, no repeats, min(k, allowed) of them, then -1 padding."""
    allowed = {i for i, r in records.items() if pred(r)}
    qids = list(records)[:6]
    scores, ids = index.search(_queries(docs, qids), k=k, filter=expr, filter_args=args,
                               threads=2)
    want = min(k, len(allowed))
    for row in ids:
        hits = row[row >= 0].tolist()
        assert len(hits) == want and len(set(hits)) == want, (expr, row, want)
        assert set(hits) <= allowed, (expr, set(hits) - allowed)
        assert (row[want:] == -1).all()
    if want == len(allowed):          # k covers every allowed document: exactly those
        for row in ids:
            assert set(row[row >= 0].tolist()) == allowed
    return allowed


def test_import_jsonl_and_filter(meta_index, tmp_path):
    path, docs, records, _ = meta_index
    f = _write_jsonl(tmp_path / "meta.jsonl", records.values())
    rep = chimera.meta_import(path, jsonl=f, no_sync=True)
    assert rep["meta_records"] == N
    assert {"assign_recall", "meta_repaired"} <= set(rep)
    with chimera.Index.open(path) as index:
        allowed = _check(index, docs, records, "year >= ? AND lang = ?", (2012, "en"),
                         lambda r: r["year"] >= 2012 and r["lang"] == "en")
        assert 0 < len(allowed) < N
        _check(index, docs, records, "lang = ?", ["fr"], lambda r: r["lang"] == "fr", k=N)
        _check(index, docs, records, "score < ?", [np.float64(0.05)],
               lambda r: r["score"] < 0.05, k=N)
        _check(index, docs, records, "lower(lang) IN ('de', 'fr') AND year % 2 = 0", (),
               lambda r: r["lang"] in ("de", "fr") and r["year"] % 2 == 0)
        _check(index, docs, records, "id < ?", [np.int32(3)], lambda r: r["id"] < 3)
        # nothing matches: every result is padding
        scores, ids = index.search(_queries(docs, [0]), k=5, filter="year > 3000")
        assert (ids == -1).all() and np.isneginf(scores).all()
        # a query made of a document's tokens finds it when its record is allowed
        i = next(iter(allowed))
        _, ids = index.search(_queries(docs, [i]), k=1, filter="year >= ? AND lang = ?",
                              filter_args=(2012, "en"))
        assert ids[0, 0] == i


def test_import_csv(meta_index, tmp_path):
    path, docs, records, _ = meta_index
    f = tmp_path / "meta.csv"
    with open(f, "w", newline="") as out:
        w = csvmod.DictWriter(out, fieldnames=["id", "year", "lang", "score"])
        w.writeheader()
        w.writerows(records.values())
    rep = chimera.meta_import(path, csv=f, no_sync=True)          # a PathLike
    assert rep["meta_records"] == N
    with chimera.Index.open(path) as index:
        _check(index, docs, records, "year BETWEEN ? AND ? OR lang = ?", (2003, 2006, "de"),
               lambda r: 2003 <= r["year"] <= 2006 or r["lang"] == "de", k=N)
        # typed from the data: year is a number, not text
        _check(index, docs, records, "year + 1 > ?", ["2020"], lambda r: r["year"] + 1 > 2020)


def test_import_records_replaces(meta_index):
    path, docs, records, _ = meta_index
    chimera.meta_import(path, records=list(records.values()), no_sync=True)
    # a second import replaces the metadata: documents it omits match nothing
    half = {i: dict(r, lang="xx") for i, r in records.items() if i % 2 == 0}
    rep = chimera.meta_import(path, records=[dict(r, id=np.int64(r["id"])) for r in half.values()],
                              no_sync=True)
    assert rep["meta_records"] == len(half)
    with chimera.Index.open(path) as index:
        allowed = _check(index, docs, half, "lang = 'xx'", (), lambda r: True, k=N)
        assert allowed == set(half)
        _, ids = index.search(_queries(docs, [1]), k=N, filter="lang = ?", filter_args=["en"])
        assert (ids == -1).all()


def test_add_update_delete_follow(meta_index):
    path, docs, records, rng = meta_index
    chimera.meta_import(path, records=records.values(), no_sync=True)   # any iterable
    index = chimera.Index.open(path)
    # add with metadata as dicts: the new documents become filterable
    new = _docs(rng, 10)
    new_ids = list(range(1000, 1010))
    new_recs = [{"id": i, "year": 2099, "lang": "new"} for i in new_ids]
    rep = chimera.add(path, new, ids=new_ids, metadata=new_recs, no_sync=True)
    assert rep["docs_added"] == 10 and "meta_records" in rep
    assert 0 < rep["assign_recall"] <= 1
    docs.update(zip(new_ids, new))
    records.update({r["id"]: r for r in new_recs})
    assert index.refresh()
    allowed = _check(index, docs, records, "year = ?", [2099], lambda r: r["year"] == 2099, k=20)
    assert allowed == set(new_ids)
    _, ids = index.search(_queries(docs, [1003]), k=1, filter="lang = 'new'")
    assert ids[0, 0] == 1003
    # update with metadata from a JSON Lines file: the new values replace the old
    upd = {"id": 1003, "year": 1999, "lang": "upd"}
    f = _write_jsonl(os.path.join(os.path.dirname(path), "upd.jsonl"), [upd])
    chimera.update(path, [docs[1003]], ids=[1003], metadata=f, no_sync=True)
    records[1003] = upd
    assert index.refresh()
    _check(index, docs, records, "year = ?", [2099], lambda r: r["year"] == 2099, k=20)
    _, ids = index.search(_queries(docs, [1003]), k=3, filter="lang = ?", filter_args=["upd"])
    assert ids[0].tolist() == [1003, -1, -1]
    # delete removes the documents' records in the same commit
    chimera.delete(path, [1000, 1001], no_sync=True)
    for i in (1000, 1001):
        del records[i]
    assert index.refresh()
    allowed = _check(index, docs, records, "year = ?", [2099], lambda r: r["year"] == 2099, k=20)
    assert allowed == set(range(1002, 1010)) - {1003}
    db = sqlite3.connect(f"file:{os.path.join(path, 'meta.sqlite')}?mode=ro", uri=True)
    try:
        have = {i for (i,) in db.execute("SELECT id FROM meta WHERE id >= 1000")}
    finally:
        db.close()
    assert have == set(range(1002, 1010))
    index.close()


def test_delete_by_filter(meta_index):
    path, docs, records, _ = meta_index
    with pytest.raises(ValueError, match="meta import"):       # no metadata yet
        chimera.delete(path, filter="year > 1", no_sync=True)
    chimera.meta_import(path, records=records.values(), no_sync=True)
    index = chimera.Index.open(path)
    gen = index.generation
    for bad in [dict(ids=[1], filter="year > 1"), dict(), dict(ids=[1], filter_args=[1]),
                dict(filter="year > ?"), dict(filter="1); DROP TABLE meta; --"),
                dict(filter="year > ?", filter_args=[True])]:
        with pytest.raises(ValueError):
            chimera.delete(path, no_sync=True, **bad)
    assert chimera.Index.open(path).generation == gen         # refused: nothing committed
    gone = {i for i, r in records.items() if r["year"] >= 2015 and r["lang"] == "en"}
    assert 0 < len(gone) < len(records)
    rep = chimera.delete(path, filter="year >= ? AND lang = ?", filter_args=(2015, "en"),
                         no_sync=True)
    assert rep["docs_deleted"] == len(gone) and rep["ids_missing"] == 0
    assert rep["n_docs"] - rep["n_deleted"] == len(records) - len(gone)
    for i in gone:
        del records[i]
    assert index.refresh()
    _check(index, docs, records, "year >= ?", [0], lambda r: True, k=len(docs))
    rep = chimera.delete(path, filter="lang = ?", filter_args=["none"], no_sync=True)
    assert rep["docs_deleted"] == 0 and rep["generation"] == index.generation   # no commit
    index.close()


def test_bad_records_name_the_line(meta_index, tmp_path, monkeypatch):
    path, docs, records, _ = meta_index
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))     # where records= files go
    chimera.meta_import(path, records=records.values(), no_sync=True)
    gen = chimera.Index.open(path).generation
    good = list(records.values())[:5]
    cases = [
        ('{"id": 9, "year": 2001}\n{"id": 10, "year": }\n', ":2"),          # syntax
        ('{"id": 9}\n{"id": 10}\n{"year": 2001}\n', ":3"),                     # no id
        ('{"id": 9}\n{"id": "ten"}\n', ":2"),                                  # id not an integer
        ('{"id": 9}\n\n{"id": 9}\n', ":3"),                                    # duplicate id
    ]
    for text, where in cases:
        f = tmp_path / "bad.jsonl"
        f.write_text(text)
        with pytest.raises((ValueError, chimera.ChimeraError)) as e:
            chimera.meta_import(path, jsonl=f, no_sync=True)
        assert f"bad.jsonl{where}" in str(e.value), str(e.value)
    # as dicts: the record is named by its position, the temporary file is gone
    with pytest.raises((ValueError, chimera.ChimeraError)) as e:
        chimera.meta_import(path, records=good + [{"year": 2001}], no_sync=True)
    assert "records[5]" in str(e.value) and "chimera-meta-" not in str(e.value)
    with pytest.raises(ValueError, match=r"records\[1\]"):
        chimera.meta_import(path, records=[good[0], {"id": 3, "x": float("nan")}])
    with pytest.raises(ValueError, match=r"records\[0\]: expected a dict"):
        chimera.meta_import(path, records=[[1, 2]])
    with pytest.raises((ValueError, chimera.ChimeraError)) as e:
        chimera.add(path, _docs(np.random.default_rng(1), 2), ids=[500, 501],
                    metadata=[{"id": 500}, {"id": "x"}], no_sync=True)
    assert "metadata[1]" in str(e.value)
    # the temporary files of records= and metadata= are removed on failure too
    assert os.listdir(tmp) == []
    # nothing was imported or added: the metadata and the index are as they were
    with chimera.Index.open(path) as index:
        assert index.generation == gen and len(index) == N
        _check(index, docs, records, "lang = ?", ["en"], lambda r: r["lang"] == "en", k=N)
    # argument errors
    with pytest.raises(ValueError, match="exactly one"):
        chimera.meta_import(path)
    with pytest.raises(ValueError, match="exactly one"):
        chimera.meta_import(path, jsonl="a.jsonl", csv="a.csv")
    with pytest.raises(FileNotFoundError):
        chimera.meta_import(path, jsonl=tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError):
        chimera.add(path, _docs(np.random.default_rng(1), 1), ids=[600],
                    metadata=str(tmp_path / "missing.jsonl"))


def test_injection_refused(meta_index):
    path, docs, records, _ = meta_index
    chimera.meta_import(path, records=records.values(), no_sync=True)
    with chimera.Index.open(path) as index:
        q = _queries(docs, [0, 1])
        for expr in ("1); DROP TABLE meta; --", "1; DELETE FROM meta",
                     "id IN (SELECT name FROM sqlite_master)", "load_extension('x') IS NULL",
                     "year > 0 -- comment", "year >"):
            with pytest.raises((ValueError, chimera.ChimeraError)):
                index.search(q, k=5, filter=expr)
        # bound as a value, the same text is just a string that matches nothing
        _, ids = index.search(q, k=5, filter="lang = ?", filter_args=["1); DROP TABLE meta; --"])
        assert (ids == -1).all()
        # the metadata is intact: a later filter still works
        _check(index, docs, records, "lang = ?", ["de"], lambda r: r["lang"] == "de", k=N)


def test_filter_without_metadata(meta_index):
    path, docs, _, _ = meta_index
    with chimera.Index.open(path) as index:
        with pytest.raises(ValueError) as e:
            index.search(_queries(docs, [0]), k=5, filter="year > 2000")
        msg = str(e.value)
        assert "meta import" in msg or "meta_import" in msg, msg
        # the failed filter left the handle usable
        _, ids = index.search(_queries(docs, [7]), k=1)
        assert ids[0, 0] == 7


def test_filter_arguments(meta_index):
    path, docs, records, _ = meta_index
    chimera.meta_import(path, records=records.values(), no_sync=True)
    with chimera.Index.open(path) as index:
        q = _queries(docs, [0])
        with pytest.raises(ValueError, match="subset or exclude"):
            index.search(q, k=5, filter="year > 0", subset=[1, 2])
        with pytest.raises(ValueError, match="subset or exclude"):
            index.search(q, k=5, filter="year > 0", exclude=[1])
        with pytest.raises(ValueError, match="bool"):
            index.search(q, k=5, filter="year > ?", filter_args=[True])
        with pytest.raises(ValueError, match=r"filter_args\[1\]"):
            index.search(q, k=5, filter="year > ? AND lang = ?", filter_args=[1, None])
        with pytest.raises(ValueError, match="finite"):
            index.search(q, k=5, filter="score < ?", filter_args=[float("nan")])
        with pytest.raises(ValueError, match="without a filter"):
            index.search(q, k=5, filter_args=[1])
        with pytest.raises(ValueError, match="filter_args"):
            index.search(q, k=5, filter="lang = ?", filter_args="en")
        with pytest.raises(ValueError, match="str"):
            index.search(q, k=5, filter=b"year > 0")
        with pytest.raises((ValueError, chimera.ChimeraError)):     # one ? and no value
            index.search(q, k=5, filter="year > ?")
        # the extension checks again when the Python layer is bypassed
        qt, ql = q[0], np.array([len(q[0])], dtype=np.int64)
        ids, scores = np.empty((1, 5), np.int64), np.empty((1, 5), np.float32)
        with pytest.raises(ValueError, match="NUL"):
            index._raw.search(qt, ql, 5, None, None, 1, ids, scores, sql="year > 0\0; x")
        with pytest.raises(ValueError, match="filter_args"):
            index._raw.search(qt, ql, 5, None, None, 1, ids, scores, sql="year > ?",
                              sql_args=[2000])
        with pytest.raises(ValueError, match="subset or exclude"):
            index._raw.search(qt, ql, 5, None, None, 1, ids, scores, sql="year > 0",
                              filter=np.arange(3, dtype=np.int64))
        index._raw.search(qt, ql, 5, None, None, 1, ids, scores, sql="year > ?",
                          sql_args=("2000",))
        assert set(ids[0][ids[0] >= 0].tolist()) <= {i for i, r in records.items()
                                                     if r["year"] > 2000}
