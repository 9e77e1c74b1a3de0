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
    index.add_documents(ids[80:], tuple(docs[80:]))  # rebuilds with old + new documents
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
    with pytest.raises(NotImplementedError, match="filters"):
        index(queries[:1], k=2, subset=["doc-1"])

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
