"""A Chimera index behind PyLate's retrieval: ``chimera.pylate.Chimera``.

PyLate (https://github.com/lightonai/pylate) encodes text with ColBERT models and hands
the token embeddings to an index object. Its retriever, ``pylate.retrieve.ColBERT``,
passes the queries straight to an end-to-end index (PLAID's kind: the class attribute
``is_end_to_end_index = True`` in PyLate 1.6; earlier versions treat any index that is
not Voyager that way): it calls ``index(queries_embeddings=..., k=k, subset=subset)`` and
returns what that gives, a list per query of ``{"id": document_id, "score": float}``
best first. This class implements that interface, and the rest of PyLate's index
interface, over ``chimera.Index``:

    is_end_to_end_index = True
    add_documents(documents_ids, documents_embeddings, **kwargs) -> self
    remove_documents(documents_ids) -> self
    __call__(queries_embeddings, k=10, subset=None) -> list[list[dict]]
    get_documents_embeddings(documents_ids: list[list[id]]) -> list[list[array]]

Based on reading PyLate's sources (not copied): ``pylate/indexes/base.py`` (the abstract
interface), ``pylate/indexes/plaid.py`` and ``pylate/indexes/fast_plaid.py`` (argument
shapes, result format, ``index_folder``/``index_name``/``override``),
``pylate/retrieve/colbert.py`` and, in PyLate 1.6, ``pylate/retrieve/base.py`` (how the
retriever calls an index). Checked against PyLate 1.6.0's ``retrieve.ColBERT``.

How it stores documents: the Chimera index is named by int64 keys that this adapter
assigns (PyLate's ids may be strings) and maps to PyLate's ids in ``docs.json``, beside
the embeddings it keeps for ``get_documents_embeddings`` and rebuilds (one ``emb-*.npy``
file per ``add_documents`` call, float16 by default, half the size of float32):

- ``add_documents`` builds the index on the first call and afterwards adds to it with
  ``chimera.add`` (the new tokens assigned to the existing centroids and appended: no
  rebuild). The centroids come from the first documents, so when the documents added
  since the last build come to outnumber (in tokens) the ones it was built from, or
  the library reports that they fit the centroids badly (``recluster_advised``), the
  index is rebuilt from the kept embeddings: growing an index batch by batch costs
  about two builds of its final size in all, not one per batch.
- ``remove_documents`` deletes with ``chimera.delete`` (no rebuild) and compacts the
  index (``chimera.compact``, and the kept embeddings with it) once more than a fifth of
  it is deleted documents.
- Each change is committed to the index first, then to ``docs.json``. Should a process
  die in between, opening the folder again reconciles the two: documents the index no
  longer holds are forgotten, and documents only the index holds (an interrupted add)
  are skipped by searches and deleted by the next change.
- A folder written by an earlier version (``ids.json``, one ``embeddings.npy``) opens
  as it is and is converted at its first change.

``subset`` (restricting the search to some documents), as PyLate's retriever passes it:
a list of document ids for every query, or a list of such lists, one per query (the
shapes of PyLate's ``FastPlaid`` index). Ids the adapter does not hold are ignored, as
there; an empty list allows nothing (no results). The ids are mapped to the index's keys
and searched with ``chimera.Index.search(subset=...)``, whose filter acts inside the
pipeline: each query gets min(k, allowed) results, however few documents are allowed.

Importing this module imports numpy and chimera only. PyLate and torch are never
imported: torch tensors are accepted duck-typed (anything with ``.detach()`` is moved to
the CPU and converted, anything else goes through ``numpy.asarray``).

Usage::

    from pylate import models, retrieve
    from chimera.pylate import Chimera

    model = models.ColBERT(model_name_or_path="lightonai/GTE-ModernColBERT-v1")
    index = Chimera(index_folder="pylate-index", index_name="chimera", override=True)
    index.add_documents(documents_ids=ids,
                        documents_embeddings=model.encode(docs, is_query=False))
    retriever = retrieve.ColBERT(index=index)
    results = retriever.retrieve(model.encode(queries, is_query=True), k=10)
"""

import json as _json
import os as _os
import shutil as _shutil

import numpy as _np

import chimera as _chimera

__all__ = ["Chimera"]

# Rebuild when the documents added since the last build hold more tokens than it did:
# the centroids, trained on the built ones, then describe less than half of the index.
# Rebuilding at each doubling keeps the total build work within about twice one build
# of the final index, however it was grown.
_REBUILD_GROWTH = 1.0
# Compact (index and kept embeddings) once deleted documents are more than this
# fraction of the index: the library's own advice (chimera.h, chimera_index_compact).
_COMPACT_DELETED = 0.2


def _to_numpy(x):
    if hasattr(x, "detach"):          # a torch tensor, without importing torch
        x = x.detach().cpu()
        if str(getattr(x, "dtype", "")) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return _np.asarray(x)


def _as_list(embeddings, what):
    """A batch of (n_i, d) matrices: a list of them, a [batch, n, d] array, or a single
    (n, d) matrix (a batch of one)."""
    if isinstance(embeddings, (list, tuple)):
        mats = [_to_numpy(e) for e in embeddings]
    else:
        a = _to_numpy(embeddings)
        if a.ndim == 2:
            mats = [a]
        elif a.ndim == 3:
            mats = list(a)
        else:
            raise ValueError(f"{what}: expected (n, d), [batch, n, d] or a list of (n, d) "
                             f"arrays, got shape {a.shape}")
    for i, m in enumerate(mats):
        if m.ndim != 2:
            raise ValueError(f"{what}[{i}]: expected an (n, d) array, got shape {m.shape}")
    return mats


class Chimera:
    """PyLate index backed by Chimera (see the module docstring).

    Parameters
    ----------
    index_folder, index_name
        The index lives in ``index_folder/index_name/``: Chimera's index directory
        ``index``, ``docs.json`` (PyLate's document ids, each with the index's key for it
        and where its embeddings are kept) and the kept embeddings ``emb-*.npy``.
    override
        Start empty, deleting an index already there; otherwise an existing one is opened.
    bits, threads, seed, n_clusters
        Passed to ``chimera.Index.build``.
    recall, params
        Passed to ``chimera.Index.search`` (a tuned recall target or explicit params).
    store_dtype
        dtype of the kept embeddings, ``"float16"`` (default) or ``"float32"``.
    """

    # PyLate's retriever hands queries to __call__ and returns its ranked results as they are
    is_end_to_end_index = True

    def __init__(self, index_folder="indexes", index_name="chimera", override=False, *,
                 bits=4, threads=None, seed=0, n_clusters=None, recall=None, params=None,
                 store_dtype="float16"):
        self.path = _os.path.join(index_folder, index_name)
        self.bits, self.threads, self.seed, self.n_clusters = bits, threads, seed, n_clusters
        self.recall, self.params = recall, params
        self.store_dtype = _np.dtype(store_dtype)
        if self.store_dtype not in (_np.float16, _np.float32):
            raise ValueError("store_dtype must be float16 or float32")
        self._index = None
        self._docs = {}      # _key(PyLate id) -> [PyLate id, key, chunk file, row, n_tokens]
        self._pid = {}       # key -> PyLate id
        self._next_key = 0
        self._legacy = False
        if override and _os.path.exists(self.path):
            _shutil.rmtree(self.path)
        _os.makedirs(self.path, exist_ok=True)
        self._load()
        # reconcile with the index (a change interrupted between its two commits): forget
        # documents it no longer holds (all of them when a removal of everything deleted
        # it); ones only it holds are skipped by searches and swept by the next change
        held = set()
        if self._docs and _os.path.isdir(self._file("index")):
            self._index = _chimera.Index.open(self._file("index"))
            held = set(self._index.ids().tolist())
        for k in [k for k, d in self._docs.items() if d[1] not in held]:
            del self._pid[self._docs.pop(k)[1]]
        if not self._docs and self._index is not None:
            self._index.close()
            self._index = None

    def _file(self, name):
        return _os.path.join(self.path, name)

    def __len__(self):
        return len(self._docs)

    # -- the table of documents ----------------------------------------------------------

    def _load(self):
        if _os.path.exists(self._file("docs.json")):
            with open(self._file("docs.json")) as f:
                t = _json.load(f)
            self._next_key = int(t["next_key"])
            rows = t["docs"]
        elif _os.path.exists(self._file("ids.json")):
            # written by an earlier version: one embeddings.npy in row order, the index's
            # ids the rows
            with open(self._file("ids.json")) as f:
                ids = _json.load(f)
            lens = (_np.load(self._file("doclens.npy")) if ids
                    else _np.zeros(0, dtype=_np.int64))
            offs = _np.concatenate([[0], _np.cumsum(lens)]).tolist()
            rows = [[pid, r, "embeddings.npy", offs[r], int(lens[r])]
                    for r, pid in enumerate(ids)]
            self._next_key = len(ids)
            self._legacy = True
        else:
            rows = []
        for pid, key, chunk, row, n in rows:
            self._docs[_key(pid)] = [pid, int(key), chunk, int(row), int(n)]
            self._pid[int(key)] = pid

    def _save(self):
        """Commits the table (atomically: written aside, then renamed), then removes
        the kept embeddings no document uses any more."""
        tmp = self._file("docs.json.tmp")
        with open(tmp, "w") as f:
            _json.dump({"format": 1, "next_key": self._next_key,
                        "docs": list(self._docs.values())}, f)
        _os.replace(tmp, self._file("docs.json"))
        if self._legacy:
            for name in ("ids.json", "doclens.npy"):
                if _os.path.exists(self._file(name)):
                    _os.remove(self._file(name))
            self._legacy = False
        used = {d[2] for d in self._docs.values()}
        for name in _os.listdir(self.path):
            if ((name.startswith("emb-") or name == "embeddings.npy") and name.endswith(".npy")
                    and name not in used):
                _os.remove(self._file(name))

    def _write_chunk(self, name, tokens):
        tmp = self._file(name[:-len(".npy")] + ".tmp.npy")
        _np.save(tmp, _np.ascontiguousarray(tokens, dtype=self.store_dtype))
        _os.replace(tmp, self._file(name))

    def _embeddings(self, docs):
        """The kept embeddings of table entries `docs`, float32, one array each."""
        chunks = {}
        out = []
        for _, _, chunk, row, n in docs:
            if chunk not in chunks:
                chunks[chunk] = _np.load(self._file(chunk), mmap_mode="r")
            out.append(_np.asarray(chunks[chunk][row:row + n], dtype=_np.float32))
        return out

    # -- changes -------------------------------------------------------------------------

    def _sweep(self):
        """Deletes index documents the table does not name (an interrupted add)."""
        if self._index is None:
            return
        orphans = _np.setdiff1d(self._index.ids(), _np.fromiter(self._pid, _np.int64))
        if orphans.size:
            _chimera.delete(self._index.path, orphans, missing_ok=True)
            self._index.refresh()

    def _rebuild(self):
        """Builds the index afresh from the kept embeddings (same keys) and keeps them
        as one file."""
        docs = list(self._docs.values())
        mats = self._embeddings(docs)
        tokens = _np.concatenate(mats, axis=0)
        keys = _np.array([d[1] for d in docs], dtype=_np.int64)
        # the build swaps its result in atomically; the open handle keeps the old one
        # mapped until closed, and stays usable should the build fail
        new = _chimera.Index.build(
            self._file("index"), tokens=tokens, doclens=[len(m) for m in mats], ids=keys,
            bits=self.bits, threads=self.threads, seed=self.seed, n_clusters=self.n_clusters)
        new._corpus = None           # Index.build keeps it for tune(); not needed here
        if self._index is not None:
            self._index.close()
        self._index = new
        self._repack(docs, mats)

    def _repack(self, docs, mats):
        """Keeps the embeddings of `docs` (their arrays `mats`) as one file and commits
        the table."""
        name = f"emb-{self._next_key}.npy"
        self._write_chunk(name, _np.concatenate(mats, axis=0))
        row = 0
        for d, m in zip(docs, mats):
            d[2], d[3] = name, row
            row += len(m)
        self._next_key += 1          # the file name is never used again
        self._save()

    def _clear(self):
        if self._index is not None:
            self._index.close()
            self._index = None
        if _os.path.isdir(self._file("index")):
            _shutil.rmtree(self._file("index"))
        self._docs.clear()
        self._pid.clear()
        self._save()

    # -- PyLate's index interface --------------------------------------------------------

    def add_documents(self, documents_ids, documents_embeddings, **kwargs):
        """Add documents (ids: a list, or one id; embeddings: one (n_i, d) matrix per
        document). The first call builds the index; later ones add to it (see the module
        docstring for when it is rebuilt instead)."""
        if isinstance(documents_ids, (str, int)):
            documents_ids = [documents_ids]
        documents_ids = [_plain(i) for i in documents_ids]
        mats = _as_list(documents_embeddings, "documents_embeddings")
        if len(mats) != len(documents_ids):
            raise ValueError(f"{len(documents_ids)} ids for {len(mats)} documents")
        if not mats:
            return self
        keys = [_key(i) for i in documents_ids]
        if len(set(keys)) != len(keys):
            raise ValueError("documents_ids must be unique")
        for i, k in zip(documents_ids, keys):
            if k in self._docs:
                raise ValueError(f"documents_ids must be unique: {i!r} is already in the index")
        dims = {m.shape[1] for m in mats}
        if len(dims) > 1:
            raise ValueError(f"documents_embeddings: dimensions {sorted(dims)} differ")
        if self._index is not None and self._index.dim != mats[0].shape[1]:
            raise ValueError(f"the index holds {self._index.dim}-d embeddings, these are "
                             f"{mats[0].shape[1]}-d")
        tokens = _np.concatenate([_np.asarray(m, dtype=_np.float32) for m in mats], axis=0)
        lens = _np.array([len(m) for m in mats], dtype=_np.int64)
        first = self._next_key
        ids = _np.arange(first, first + len(mats), dtype=_np.int64)
        chunk = f"emb-{first}.npy"
        self._write_chunk(chunk, tokens)
        try:
            if self._index is None:
                self._index = _chimera.Index.build(
                    self._file("index"), tokens=tokens, doclens=lens, ids=ids, bits=self.bits,
                    threads=self.threads, seed=self.seed, n_clusters=self.n_clusters)
                self._index._corpus = None
            else:
                self._sweep()
                _chimera.add(self._index.path, tokens=tokens, doclens=lens, ids=ids)
                self._index.refresh()
        except BaseException:
            _os.remove(self._file(chunk))
            raise
        self._next_key = first + len(mats)
        row = 0
        for pid, key, n in zip(documents_ids, ids.tolist(), lens.tolist()):
            self._docs[_key(pid)] = [pid, key, chunk, row, n]
            self._pid[key] = pid
            row += n
        self._save()
        info = self._index.info
        appended = info["appended_tokens"]
        if info["recluster_advised"] or appended > _REBUILD_GROWTH * (info["n_tokens"] - appended):
            self._rebuild()
        return self

    def remove_documents(self, documents_ids):
        """Remove documents by id (unknown ids are ignored); deletes them from the index,
        which is compacted once a fifth of it is deleted documents."""
        drop = {_key(_plain(i)) for i in documents_ids}
        gone = [self._docs[k] for k in drop if k in self._docs]
        if not gone:
            return self
        if len(gone) == len(self._docs):
            self._clear()
            return self
        self._sweep()
        keys = _np.array([d[1] for d in gone], dtype=_np.int64)
        rep = _chimera.delete(self._index.path, keys, missing_ok=True)
        for d in gone:
            del self._docs[_key(d[0])]
            del self._pid[d[1]]
        self._index.refresh()
        if rep["n_deleted"] > _COMPACT_DELETED * rep["n_docs"]:
            _chimera.compact(self._index.path)
            self._index.refresh()
            docs = list(self._docs.values())
            self._repack(docs, self._embeddings(docs))
        else:
            self._save()
        return self

    def __call__(self, queries_embeddings, k=10, subset=None):
        """Top-k documents per query: a list per query of {"id", "score"}, best first.

        subset: the documents a query may return: a list of ids for every query, or a
        list of lists, one per query (None for a query: no restriction). Unknown ids are
        ignored."""
        if self._index is None:
            raise ValueError("the index is empty: add documents before querying")
        queries = [_np.ascontiguousarray(q, dtype=_np.float32)
                   for q in _as_list(queries_embeddings, "queries_embeddings")]
        if not queries:
            return []
        scores, keys = self._index.search(queries, k=int(k), recall=self.recall,
                                          params=self.params, threads=self.threads,
                                          subset=self._subset(subset, len(queries)))
        pid = self._pid
        return [[{"id": pid[c], "score": float(s)}
                 for s, c in zip(srow.tolist(), crow.tolist()) if c in pid]
                for srow, crow in zip(scores, keys)]

    def _keys(self, ids):
        """The index's keys (int64) of the PyLate ids `ids` that the adapter holds."""
        docs = self._docs
        keys = [docs[k][1] for k in (_key(_plain(i)) for i in ids) if k in docs]
        return _np.array(keys, dtype=_np.int64)

    def _subset(self, subset, nq):
        """PyLate's subset as chimera.Index.search's: keys for every query, or a list of
        nq (None entries kept: no filter for that query)."""
        if subset is None:
            return None
        if isinstance(subset, (str, int, _np.integer)):
            subset = [subset]                   # one id, as add_documents allows
        elif isinstance(subset, _np.ndarray):
            subset = subset.tolist()
        else:
            subset = list(subset)
        # a list of lists, one per query, as PyLate's FastPlaid index tells them apart
        if subset and (subset[0] is None or isinstance(subset[0], (list, tuple, _np.ndarray))):
            if len(subset) != nq:
                raise ValueError(f"subset: {len(subset)} per-query lists for {nq} queries")
            out, seen = [], {}
            for s in subset:                    # one list given for many queries: mapped once
                if s is not None and id(s) not in seen:
                    seen[id(s)] = self._keys(s.tolist() if isinstance(s, _np.ndarray) else s)
                out.append(None if s is None else seen[id(s)])
            return out
        return self._keys(subset)

    def get_documents_embeddings(self, documents_ids):
        """The kept embeddings (float32 (n_i, d) arrays) of ``documents_ids``, a list of
        lists of ids, in the same nesting. Raises KeyError on an unknown id."""
        return [self._embeddings([self._docs[_key(_plain(i))] for i in group])
                for group in documents_ids]


def _plain(i):
    """A JSON-storable id: numpy integers become int."""
    if isinstance(i, _np.integer):
        return int(i)
    return i


def _key(i):
    # ids round-trip through JSON: keep "1" and 1 distinct, as PyLate's dict lookups do
    return (type(i).__name__, i)
