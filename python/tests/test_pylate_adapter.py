"""chimera.pylate.Chimera, PyLate's index interface over chimera.Index, exercised with
numpy inputs: neither PyLate nor torch is needed (or imported)."""
import sys

import numpy as np
import pytest

from chimera.pylate import Chimera


def _docs(corpus, n):
    tokens, doclens, queries = corpus
    offs = np.concatenate([[0], np.cumsum(doclens)])
    return [tokens[offs[i]:offs[i + 1]] for i in range(n)], queries


def test_import_is_light():
    assert "torch" not in sys.modules and "pylate" not in sys.modules
    assert Chimera.is_end_to_end_index is True    # PyLate's retriever: results as they are


def test_add_search_get_remove(tmp_path, corpus):
    docs, queries = _docs(corpus, 120)
    ids = [f"doc-{i}" for i in range(len(docs))]
    index = Chimera(index_folder=str(tmp_path), index_name="ix", override=True,
                    store_dtype="float32", threads=2)
    with pytest.raises(ValueError, match="empty"):
        index(queries[:1], k=3)
    assert index.add_documents(ids[:80], docs[:80]) is index
    index.add_documents(ids[80:], tuple(docs[80:]))  # added to the index (chimera.add)
    assert len(index) == 120

    res = index(queries[:4], k=5)                 # [nq, m, d] array
    assert len(res) == 4 and all(len(r) == 5 for r in res)
    assert all(set(h) == {"id", "score"} for r in res for h in r)
    assert all(r[0]["score"] >= r[-1]["score"] for r in res)
    assert res[0][0]["id"] in ids
    # the ids come from the exact ranking's rows: compare with brute force
    import chimera
    exact = chimera.exact_search(docs, queries[:4], k=1)[1][:, 0]
    top = [r[0]["id"] for r in res]
    assert sum(t == ids[e] for t, e in zip(top, exact)) >= 3

    single = index(queries[0], k=2)               # one (m, d) query
    assert len(single) == 1 and len(single[0]) == 2
    assert index(list(queries[:2]), k=2)[1] == index(queries[1:2], k=2)[0]

    got = index.get_documents_embeddings([["doc-3"], ["doc-100", "doc-0"]])
    np.testing.assert_array_equal(got[0][0], docs[3])
    np.testing.assert_array_equal(got[1][1], docs[0])
    assert [h["id"] for h in index(queries[:1], k=2, subset=["doc-1"])[0]] == ["doc-1"]

    best = res[0][0]["id"]
    index.remove_documents([best, "no-such-id"])
    assert len(index) == 119
    assert all(h["id"] != best for h in index(queries[:1], k=10)[0])

    # reopened from disk (override=False), same answers
    again = Chimera(index_folder=str(tmp_path), index_name="ix", threads=2)
    assert len(again) == 119
    assert again(queries[:3], k=5) == index(queries[:3], k=5)


def test_integer_ids_and_errors(tmp_path, corpus):
    docs, queries = _docs(corpus, 40)
    index = Chimera(index_folder=str(tmp_path), index_name="ints", override=True)
    index.add_documents(np.arange(40), docs)      # numpy ids, as range() from PyLate's docs
    hit = index(queries[:1], k=1)[0][0]
    assert isinstance(hit["id"], int)
    with pytest.raises(ValueError, match="unique"):
        index.add_documents([0], docs[:1])
    with pytest.raises(ValueError, match="ids for"):
        index.add_documents([100, 101], docs[:1])
    with pytest.raises(ValueError, match="-d"):
        index.add_documents([200], [np.ones((3, 8), np.float32)])
    index.remove_documents(list(range(40)))
    assert len(index) == 0
    with pytest.raises(ValueError, match="empty"):
        index(queries[:1], k=1)


def _names(path):
    import os
    return sorted(n for n in os.listdir(path) if n.endswith(".npy") or n.endswith(".json"))


def test_changes_without_rebuild(tmp_path, corpus):
    """add_documents appends with chimera.add and remove_documents deletes with
    chimera.delete (the index's segments and deletions show it); a large removal
    compacts; a batch larger than what the index was built from rebuilds it."""
    docs, queries = _docs(corpus, 400)
    ids = [f"d{i}" for i in range(400)]
    index = Chimera(index_folder=str(tmp_path), index_name="ix", override=True, threads=2)
    index.add_documents(ids[:250], docs[:250])          # > 3,200 tokens: 64 clusters
    index.add_documents(ids[250:280], docs[250:280])
    index.add_documents(ids[280:300], docs[280:300])
    info = index._index.info
    assert info["n_clusters"] == 64
    assert info["n_segments"] == 3 and info["generation"] == 3      # built once, added twice
    assert len(index) == 300
    for i in (5, 260, 299):                   # each found by a query of its own tokens
        assert index(docs[i], k=1)[0][0]["id"] == ids[i]
    got = index.get_documents_embeddings([[ids[3], ids[270], ids[290]]])[0]
    for g, i in zip(got, (3, 270, 290)):
        np.testing.assert_allclose(g, docs[i], atol=1e-3)            # kept as float16

    index.remove_documents(ids[:10])           # 10 of 300: deleted, not compacted
    info = index._index.info
    assert info["n_deleted"] == 10 and info["n_segments"] == 3 and len(index) == 290
    assert all(h["id"] not in ids[:10] for q in index(queries, k=20) for h in q)
    index.remove_documents(ids[10:70])         # 70 of 300 > a fifth: compacted
    info = index._index.info
    assert info["n_deleted"] == 0 and info["n_segments"] == 1 and len(index) == 230
    assert len([n for n in _names(index.path) if n.startswith("emb-")]) == 1
    np.testing.assert_allclose(index.get_documents_embeddings([[ids[270]]])[0][0], docs[270],
                               atol=1e-3)
    assert index(docs[295], k=1)[0][0]["id"] == ids[295]

    gen = info["generation"]
    more = [np.ascontiguousarray(d[:, ::-1]) for d in docs[:300]]  # new documents, same dim
    index.add_documents([f"n{i}" for i in range(300)], more)     # outgrows the 230 built
    info = index._index.info
    assert info["n_segments"] == 1 and info["appended_docs"] == 0 and info["n_docs"] == 530
    assert info["generation"] == gen + 2       # the add, then the rebuild
    assert index(more[7], k=1)[0][0]["id"] == "n7"
    assert index(docs[295], k=1)[0][0]["id"] == ids[295]
    index._index.check()

    again = Chimera(index_folder=str(tmp_path), index_name="ix", threads=2)
    assert len(again) == 530 and again(queries[:3], k=5) == index(queries[:3], k=5)


def test_interrupted_change_is_reconciled(tmp_path, corpus):
    """A change that reached the index but not docs.json (the process died between the
    two commits): a reopened adapter skips what only the index holds and forgets what
    the index no longer holds; its next change deletes the strays."""
    import chimera
    docs, _ = _docs(corpus, 60)
    index = Chimera(index_folder=str(tmp_path), index_name="ix", override=True, threads=2)
    index.add_documents(list(range(50)), docs[:50])
    path = index._index.path
    key_of = {pid: key for key, pid in index._pid.items()}
    chimera.add(path, docs[50:52], ids=[9000, 9001])        # an add docs.json never saw
    chimera.delete(path, [key_of[7]])                       # a removal it never saw
    again = Chimera(index_folder=str(tmp_path), index_name="ix", threads=2)
    assert len(again) == 49
    assert all(h["id"] != 7 for h in again(docs[7], k=5)[0])
    assert [h["id"] for h in again(docs[50], k=3)[0]] != []   # the stray is skipped...
    assert 9000 not in {h["id"] for h in again(docs[50], k=3)[0]}
    again.add_documents([100], docs[55:56])
    assert not {9000, 9001} & set(again._index.ids().tolist())   # ...and swept
    assert again(docs[55], k=1)[0][0]["id"] == 100


def test_folder_of_earlier_version(tmp_path, corpus):
    """ids.json + embeddings.npy + doclens.npy and an index named by rows (what the
    adapter wrote before it used chimera.add) open as they are and are converted at
    the first change."""
    import json
    import chimera
    docs, _ = _docs(corpus, 40)
    folder = tmp_path / "old"
    folder.mkdir()
    ids = [f"p{i}" for i in range(30)]
    tokens = np.concatenate(docs[:30])
    lens = np.array([len(d) for d in docs[:30]], dtype=np.int64)
    chimera.Index.build(folder / "index", tokens=tokens, doclens=lens, threads=2).close()
    np.save(folder / "embeddings.npy", tokens.astype(np.float16))
    np.save(folder / "doclens.npy", lens)
    (folder / "ids.json").write_text(json.dumps(ids))
    index = Chimera(index_folder=str(tmp_path), index_name="old", threads=2)
    assert len(index) == 30 and index(docs[12], k=1)[0][0]["id"] == "p12"
    index.add_documents(["q0", "q1"], docs[30:32])
    index.remove_documents(["p3"])
    assert _names(folder) == ["docs.json", "emb-30.npy", "embeddings.npy"]
    again = Chimera(index_folder=str(tmp_path), index_name="old", threads=2)
    assert len(again) == 31 and again(docs[31], k=1)[0][0]["id"] == "q1"
    assert again(docs[12], k=1)[0][0]["id"] == "p12"
    got = again.get_documents_embeddings([["p29", "q0"]])[0]
    np.testing.assert_allclose(got[0], docs[29], atol=1e-3)
    np.testing.assert_allclose(got[1], docs[30], atol=1e-3)


def test_subset(tmp_path, corpus):
    """PyLate's subset: one list of ids for every query, or a list of lists, one per
    query; ids the adapter does not hold are ignored; results are the allowed documents
    only, min(k, allowed) of them, and a query made of a document's own tokens finds it
    within any subset that holds it."""
    docs, queries = _docs(corpus, 150)
    ids = [f"doc-{i}" for i in range(len(docs))]
    index = Chimera(index_folder=str(tmp_path), index_name="ix", override=True, threads=2)
    index.add_documents(ids[:100], docs[:100])
    index.add_documents(ids[100:], docs[100:])     # keys from a second batch too
    rng = np.random.default_rng(9)

    for size in (1, 4, 30):
        allowed = [ids[i] for i in rng.choice(len(ids), size, replace=False)]
        res = index(queries, k=10, subset=allowed + ["no-such-id"])
        assert len(res) == len(queries)
        for r in res:
            assert len(r) == min(10, size) and {h["id"] for h in r} <= set(allowed)
            assert all(a["score"] >= b["score"] for a, b in zip(r, r[1:]))
        probe = [docs[int(a[4:])] for a in allowed[:5]]   # each its own document's tokens
        assert [r[0]["id"] for r in index(probe, k=3, subset=allowed)] == allowed[:5]

    # per query: each query its own list (PyLate's list of lists); None: no restriction
    rows = rng.choice(len(ids), 6, replace=False)
    per = [[ids[r]] + [ids[j] for j in rng.choice(len(ids), 10)] for r in rows]
    res = index([docs[r] for r in rows], k=5, subset=per)
    assert [r[0]["id"] for r in res] == [ids[r] for r in rows]
    assert all({h["id"] for h in r} <= set(p) for r, p in zip(res, per))
    res = index([docs[r] for r in rows[:2]], k=5, subset=[None, [ids[rows[0]]]])
    assert res[0][0]["id"] == ids[rows[0]] and len(res[0]) == 5
    assert [h["id"] for h in res[1]] == [ids[rows[0]]]
    shared = [ids[r] for r in rows]
    assert (index(queries[:3], k=4, subset=[shared] * 3)
            == index(queries[:3], k=4, subset=shared))
    with pytest.raises(ValueError, match="per-query"):
        index(queries[:3], k=4, subset=[shared, shared])

    # nothing allowed: no results (an empty list, or only unknown ids)
    assert index(queries[:2], k=5, subset=[]) == [[], []]
    assert index(queries[:2], k=5, subset=["nope"]) == [[], []]
    assert index(queries[:2], k=5, subset=[[], ["nope"]]) == [[], []]

    # removed documents are unknown ids; integer (and numpy integer) ids map as well
    index.remove_documents([shared[0]])
    assert index(docs[rows[0]], k=3, subset=shared[:1]) == [[]]
    ints = Chimera(index_folder=str(tmp_path), index_name="ints", override=True, threads=2)
    ints.add_documents(list(range(40)), docs[:40])
    assert ints(docs[7], k=2, subset=np.array([7, 9]))[0][0]["id"] == 7
    assert ints(docs[7], k=2, subset=[np.int64(9), 3])[0][0]["id"] in (9, 3)
    assert ints(docs[7], k=2, subset=["7"]) == [[]]      # "7" is not 7, as in PyLate
