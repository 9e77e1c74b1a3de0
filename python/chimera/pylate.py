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

Differences, since Chimera has no incremental update yet:

- ``add_documents`` on a non-empty index and ``remove_documents`` rebuild the whole
  index from the embeddings this adapter keeps beside it (``embeddings.npy``, float16 by
  default, half the size of float32), so they cost a full build. Add documents in one
  call when you can.
- ``subset`` (restricting the search to some documents) is not supported: Chimera has no
  search filters yet; passing one raises NotImplementedError.

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
        ``index``, ``ids.json`` (PyLate's document ids in row order) and
        ``embeddings.npy`` + ``doclens.npy`` (kept for rebuilds and
        ``get_documents_embeddings``).
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
        self._ids = []
        if override and _os.path.exists(self.path):
            _shutil.rmtree(self.path)
        _os.makedirs(self.path, exist_ok=True)
        if _os.path.exists(self._file("ids.json")):
            with open(self._file("ids.json")) as f:
                self._ids = _json.load(f)
            if self._ids:
                self._index = _chimera.Index.open(self._file("index"))

    def _file(self, name):
        return _os.path.join(self.path, name)

    def __len__(self):
        return len(self._ids)

    # -- stored embeddings ---------------------------------------------------------------

    def _stored(self):
        if not self._ids:
            return None, _np.zeros(0, dtype=_np.int64)
        return (_np.load(self._file("embeddings.npy"), mmap_mode="r"),
                _np.load(self._file("doclens.npy")))

    def _rebuild(self, ids, tokens, doclens):
        """Build the Chimera index of (tokens, doclens), then commit ids and embeddings."""
        if len(ids) != len(set(map(_key, ids))):
            raise ValueError("documents_ids must be unique")
        if not ids:
            if self._index is not None:
                self._index.close()
                self._index = None
            for name in ("index", "embeddings.npy", "doclens.npy"):
                p = self._file(name)
                if _os.path.isdir(p):
                    _shutil.rmtree(p)
                elif _os.path.exists(p):
                    _os.remove(p)
            self._ids = []
            self._write_ids()
            return
        if self._index is not None:
            self._index.close()
            self._index = None
        stored = _np.ascontiguousarray(tokens, dtype=self.store_dtype)
        tmp = self._file("embeddings.tmp.npy")
        _np.save(tmp, stored)
        self._index = _chimera.Index.build(
            self._file("index"), tokens=_np.ascontiguousarray(tokens, dtype=_np.float32),
            doclens=doclens, bits=self.bits, threads=self.threads, seed=self.seed,
            n_clusters=self.n_clusters)
        _os.replace(tmp, self._file("embeddings.npy"))
        _np.save(self._file("doclens.npy"), _np.asarray(doclens, dtype=_np.int64))
        self._ids = list(ids)
        self._write_ids()

    def _write_ids(self):
        tmp = self._file("ids.json.tmp")
        with open(tmp, "w") as f:
            _json.dump(self._ids, f)
        _os.replace(tmp, self._file("ids.json"))

    # -- PyLate's index interface --------------------------------------------------------

    def add_documents(self, documents_ids, documents_embeddings, **kwargs):
        """Add documents (ids: a list, or one id; embeddings: one (n_i, d) matrix per
        document). On a non-empty index this rebuilds it with the old and new documents."""
        if isinstance(documents_ids, (str, int)):
            documents_ids = [documents_ids]
        documents_ids = [_plain(i) for i in documents_ids]
        mats = _as_list(documents_embeddings, "documents_embeddings")
        if len(mats) != len(documents_ids):
            raise ValueError(f"{len(documents_ids)} ids for {len(mats)} documents")
        if not mats:
            return self
        new_tokens = _np.concatenate(mats, axis=0)
        new_lens = _np.array([len(m) for m in mats], dtype=_np.int64)
        old_tokens, old_lens = self._stored()
        if old_tokens is not None:
            if old_tokens.shape[1] != new_tokens.shape[1]:
                raise ValueError(f"the index holds {old_tokens.shape[1]}-d embeddings, "
                                 f"these are {new_tokens.shape[1]}-d")
            new_tokens = _np.concatenate([_np.asarray(old_tokens, _np.float32),
                                          new_tokens.astype(_np.float32)], axis=0)
            new_lens = _np.concatenate([old_lens, new_lens])
        self._rebuild(self._ids + documents_ids, new_tokens, new_lens)
        return self

    def remove_documents(self, documents_ids):
        """Remove documents by id (unknown ids are ignored); rebuilds the index."""
        drop = {_key(_plain(i)) for i in documents_ids}
        keep = [r for r, i in enumerate(self._ids) if _key(i) not in drop]
        if len(keep) == len(self._ids):
            return self
        tokens, lens = self._stored()
        offs = _np.concatenate([[0], _np.cumsum(lens)])
        parts = [_np.asarray(tokens[offs[r]:offs[r + 1]], _np.float32) for r in keep]
        new_tokens = (_np.concatenate(parts, axis=0) if parts
                      else _np.zeros((0, tokens.shape[1]), _np.float32))
        self._rebuild([self._ids[r] for r in keep], new_tokens, lens[keep])
        return self

    def __call__(self, queries_embeddings, k=10, subset=None):
        """Top-k documents per query: a list per query of {"id", "score"}, best first."""
        if subset is not None:
            raise NotImplementedError("Chimera has no search filters yet: subset is not "
                                      "supported")
        if self._index is None:
            raise ValueError("the index is empty: add documents before querying")
        queries = [_np.ascontiguousarray(q, dtype=_np.float32)
                   for q in _as_list(queries_embeddings, "queries_embeddings")]
        if not queries:
            return []
        scores, rows = self._index.search(queries, k=int(k), recall=self.recall,
                                          params=self.params, threads=self.threads)
        return [[{"id": self._ids[r], "score": float(s)}
                 for s, r in zip(srow, rrow) if r >= 0]
                for srow, rrow in zip(scores, rows)]

    def get_documents_embeddings(self, documents_ids):
        """The kept embeddings (float32 (n_i, d) arrays) of ``documents_ids``, a list of
        lists of ids, in the same nesting. Raises KeyError on an unknown id."""
        tokens, lens = self._stored()
        offs = _np.concatenate([[0], _np.cumsum(lens)])
        row = {_key(i): r for r, i in enumerate(self._ids)}
        out = []
        for group in documents_ids:
            g = []
            for i in group:
                r = row[_key(_plain(i))]
                g.append(_np.asarray(tokens[offs[r]:offs[r + 1]], dtype=_np.float32))
            out.append(g)
        return out


def _plain(i):
    """A JSON-storable id: numpy integers become int."""
    if isinstance(i, _np.integer):
        return int(i)
    return i


def _key(i):
    # ids round-trip through JSON: keep "1" and 1 distinct, as PyLate's dict lookups do
    return (type(i).__name__, i)
