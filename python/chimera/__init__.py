"""Chimera: multi-vector (ColBERT-style, late-interaction) retrieval from Python.

A corpus is a set of documents, each a matrix of token vectors (n_i, d); a query is a
matrix (m, d). A document's score is its Chamfer (MaxSim) similarity to the query: the sum
over query tokens of the best inner product with any document token. Chimera indexes the
corpus (fine-grained IVF over every token, RaBitQ codes) and searches it in three stages;
:func:`exact_search` is the brute-force reference.

Quick start::

    import numpy as np, chimera
    docs = [np.random.rand(30, 128).astype(np.float32) for _ in range(1000)]
    index = chimera.Index.build("my.idx", documents=docs)
    queries = np.random.rand(5, 32, 128).astype(np.float32)
    scores, ids = index.search(queries, k=10)        # both (5, 10); ids -1 past the hits

Arrays: float32 or float16 (converted to float32: the library computes in float32),
C-contiguous (a non-contiguous array raises ValueError; ``np.ascontiguousarray`` makes one).
A float32 C-contiguous token matrix is read in place, never copied; a list of per-document
arrays is concatenated once by this package (the library takes one matrix).

Threads: an opened :class:`Index` may be searched from any number of Python threads at
once; the GIL is released while the library works.

Changing an index: :func:`add`, :func:`delete`, :func:`update` and :func:`compact` work
on an index directory (not on an open :class:`Index`), each one atomic commit: on success
the change is on disk, on any error the index is as it was. An open :class:`Index` keeps
seeing the generation it opened until :meth:`Index.refresh`::

    chimera.add("my.idx", new_docs, ids=np.arange(1000, 1000 + len(new_docs)))
    chimera.delete("my.idx", [3, 17])
    index.refresh()                                  # True: it now sees both changes

Search filters: ``index.search(queries, k, subset=ids)`` returns only documents whose ids
are listed (one list for every query, or a list of lists, one per query), and
``exclude=ids`` never returns the listed ones. The filter acts inside the pipeline, so a
query still gets min(k, allowed) results however few documents are allowed.

Metadata filters: :func:`meta_import` stores one record per document (JSON Lines, CSV,
or a list of dicts) in the index, :func:`add` and :func:`update` bring the new
documents' records (``metadata=``), :func:`delete` removes theirs, and
``index.search(q, k, filter="year >= ? AND lang = ?", filter_args=(2020, "en"))``
returns only documents whose record satisfies the SQL expression::

    chimera.meta_import("my.idx", records=[{"id": 0, "year": 2021, "lang": "en"}, ...])
    index.refresh()
    scores, ids = index.search(queries, k=10, filter="year >= ?", filter_args=[2020])
"""

import collections.abc as _abc
import contextlib as _contextlib
import errno as _errno
import json as _json
import math as _math
import os as _os
import re as _re
import sys as _sys
import tempfile as _tempfile

import numpy as _np

from . import _chimera
from ._chimera import ChimeraError, CorruptIndexError

__all__ = ["Index", "add", "delete", "update", "compact", "meta_import", "exact_search",
           "recall", "runtime_info", "ChimeraError", "CorruptIndexError", "Client", "ServerError",
           "ShardedIndex",
           "__version__"]

__version__ = _chimera.version

_FLOATS = (_np.dtype(_np.float32), _np.dtype(_np.float16))


# ----------------------------------------------------------------------------------------
# Input shaping
# ----------------------------------------------------------------------------------------

def _array(x, name, ndim):
    """x as a float32 C-contiguous array of `ndim` dimensions (no copy when it is one)."""
    if not isinstance(x, _np.ndarray):
        raise ValueError(f"{name}: expected a numpy array, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise ValueError(f"{name}: dtype {x.dtype} is not float32 or float16 "
                         f"(convert with .astype(np.float32))")
    if x.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {x.shape}")
    if not x.flags.c_contiguous:
        raise ValueError(f"{name}: the array is not C-contiguous "
                         f"(np.ascontiguousarray makes a copy that is)")
    if x.dtype != _np.float32:
        x = x.astype(_np.float32)
    return x


def _matrices(seq, name):
    """A list of (n_i, d) arrays as one float32 matrix [sum n_i, d] and lengths (int64)."""
    if isinstance(seq, _np.ndarray):
        raise ValueError(f"{name}: expected a list of 2-d arrays or one 3-d array")
    seq = list(seq)
    if not seq:
        raise ValueError(f"{name}: the list is empty")
    dim = None
    for i, x in enumerate(seq):
        if not isinstance(x, _np.ndarray):
            raise ValueError(f"{name}[{i}]: expected a numpy array, got {type(x).__name__}")
        if x.dtype not in _FLOATS:
            raise ValueError(f"{name}[{i}]: dtype {x.dtype} is not float32 or float16")
        if x.ndim != 2:
            raise ValueError(f"{name}[{i}]: expected (n, d), got shape {x.shape}")
        if not x.flags.c_contiguous:
            raise ValueError(f"{name}[{i}]: the array is not C-contiguous")
        if x.shape[0] == 0:
            raise ValueError(f"{name}[{i}]: has no tokens")
        if dim is None:
            dim = x.shape[1]
        elif x.shape[1] != dim:
            raise ValueError(f"{name}[{i}]: dimension {x.shape[1]}, but {name}[0] has {dim}")
    lens = _np.fromiter((x.shape[0] for x in seq), dtype=_np.int64, count=len(seq))
    return _np.concatenate(seq, axis=0, dtype=_np.float32), lens


def _ids(ids, n, name="ids"):
    if ids is None:
        return None
    ids = _np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integers, got dtype {ids.dtype}")
    if ids.ndim != 1 or ids.shape[0] != n:
        raise ValueError(f"{name}: expected {n} ids (one per document), got shape {ids.shape}")
    return _np.ascontiguousarray(ids, dtype=_np.int64)


def _corpus(documents, tokens, doclens, ids):
    """(tokens float32 [n_tokens, d], doclens int64 [n_docs], ids int64 or None)."""
    if documents is not None:
        if tokens is not None or doclens is not None:
            raise ValueError("give documents= or tokens= with doclens=, not both")
        if isinstance(documents, _np.ndarray):
            x = _array(documents, "documents", 3)      # [n_docs, L, d]: every doc L tokens
            n, length, d = x.shape
            if n == 0 or length == 0:
                raise ValueError(f"documents: shape {x.shape} holds no tokens")
            tok, lens = x.reshape(n * length, d), _np.full(n, length, dtype=_np.int64)
        else:
            tok, lens = _matrices(documents, "documents")
    else:
        if tokens is None or doclens is None:
            raise ValueError("give documents= (a list of (n_i, d) arrays) or tokens= and doclens=")
        tok = _array(tokens, "tokens", 2)
        lens = _np.asarray(doclens)
        if lens.dtype.kind not in "iu" or lens.ndim != 1:
            raise ValueError(f"doclens: expected a 1-d integer array, got {lens.dtype} {lens.shape}")
        lens = _np.ascontiguousarray(lens, dtype=_np.int64)
        if lens.size == 0:
            raise ValueError("doclens: no documents")
        if int(lens.sum()) != tok.shape[0]:
            raise ValueError(f"doclens: lengths sum to {int(lens.sum())}, tokens has {tok.shape[0]} rows")
    return tok, lens, _ids(ids, lens.shape[0])


def _queries(queries):
    """(tokens float32 [total, d], qlens int64 [nq])."""
    if isinstance(queries, _np.ndarray):
        q = _array(queries, "queries", 3)
        nq, m, d = q.shape
        if nq == 0 or m == 0:
            raise ValueError(f"queries: shape {q.shape} holds no tokens")
        return q.reshape(nq * m, d), _np.full(nq, m, dtype=_np.int64)
    return _matrices(queries, "queries")


def _filter_ids(x, name):
    """x (a 1-d array-like of ids) as a C-contiguous int64 array of ids >= 0."""
    try:
        arr = _np.asarray(x)
    except (ValueError, TypeError) as e:       # ragged nesting, odd objects
        raise ValueError(f"{name}: expected a 1-d array of integer ids ({e})") from None
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-d array of ids, got shape {arr.shape}")
    if arr.size == 0:
        return _np.empty(0, dtype=_np.int64)   # [] is float64 to numpy: no ids at all
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected integer ids, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and int(arr.max()) > 2**63 - 1:
        raise ValueError(f"{name}: id {int(arr.max())} does not fit in int64")
    arr = _np.ascontiguousarray(arr, dtype=_np.int64)
    if int(arr.min()) < 0:
        i = int(_np.argmax(arr < 0))
        raise ValueError(f"{name}: id {int(arr[i])} (entry {i}) is negative; ids are >= 0")
    return arr


def _filters(subset, exclude, nq):
    """The raw search's filter arguments for subset= and exclude= (see Index.search)."""
    if subset is not None and exclude is not None:
        raise ValueError("subset and exclude: give one or the other, not both "
                         "(to exclude ids from a subset, leave them out of it)")
    if exclude is not None:
        return {"filter": _filter_ids(exclude, "exclude"), "exclude": True}
    if subset is None:
        return {}
    # A list whose first entry is None or itself a sequence of ids: one subset per query
    # (PyLate's list-of-lists form); anything else is one subset for every query.
    if (isinstance(subset, (list, tuple)) and len(subset) > 0
            and (subset[0] is None or _np.ndim(subset[0]) >= 1)):
        if len(subset) != nq:
            raise ValueError(f"subset: {len(subset)} per-query subsets for {nq} queries")
        arrays, where, seen = [], _np.full(nq, -1, dtype=_np.int64), {}
        for q, s in enumerate(subset):
            if s is None:
                continue
            at = seen.get(id(s))                # one array listed for many queries: once
            if at is None:
                at = seen[id(s)] = len(arrays)
                arrays.append(_filter_ids(s, f"subset[{q}]"))
            where[q] = at
        return {"query_filters": arrays, "query_filter_of": where}
    return {"filter": _filter_ids(subset, "subset")}


def _threads(threads):
    if threads is None:
        return 0
    threads = int(threads)
    if threads < 1:
        raise ValueError(f"threads: {threads} (give None for one per CPU, or a count >= 1)")
    return threads


def _k(k):
    k = int(k)
    if k < 1:
        raise ValueError(f"k: {k} (must be at least 1)")
    return k


def _outputs(nq, k):
    return _np.empty((nq, k), dtype=_np.int64), _np.empty((nq, k), dtype=_np.float32)


def _progress(progress):
    """A (phase, fraction) callable for progress=True (tqdm when installed), or None."""
    if progress is None or progress is False:
        return None
    if callable(progress):
        return progress
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    state = {"phase": None, "bar": None}

    def report(phase, fraction):
        if phase != state["phase"]:
            if state["bar"] is not None:
                state["bar"].close()
            state["phase"] = phase
            state["bar"] = tqdm(total=100, desc=phase, leave=False) if tqdm else None
        pct = int(round(100 * fraction))
        if state["bar"] is not None:
            state["bar"].update(pct - state["bar"].n)
            if fraction >= 1:
                state["bar"].close()
                state["bar"], state["phase"] = None, None
        else:
            print(f"\rchimera: {phase} {pct:3d}%", end="\n" if fraction >= 1 else "",
                  file=_sys.stderr, flush=True)
    return report


def _missing(path, what):
    raise FileNotFoundError(_errno.ENOENT, f"{what}: {_os.strerror(_errno.ENOENT)}", path)


def _index_dir(path):
    path = _os.fspath(path)
    if not _os.path.isdir(path):
        _missing(path, "no index directory")
    return path


def _lock_timeout(seconds):
    """The library's lock_timeout_ms: 0 its default (30 s), < 0 no wait."""
    if seconds is None:
        return 0
    seconds = float(seconds)
    if seconds != seconds:
        raise ValueError("lock_timeout: NaN")
    if seconds <= 0:
        return -1
    return int(min(_math.ceil(seconds * 1000), 2**31 - 1))


def _sql_args(filter, filter_args):
    """filter_args as a list of str for the library (which binds one written as a number
    as a number): str, int and float values (numpy's included), never bool."""
    if filter is None:
        if filter_args is not None and not (isinstance(filter_args, _abc.Sized)
                                            and len(filter_args) == 0):
            raise ValueError("filter_args: given without a filter")
        return {}
    if not isinstance(filter, str):
        raise ValueError(f"filter: expected an SQL expression (str), got {type(filter).__name__}")
    if filter_args is None:
        filter_args = ()
    if isinstance(filter_args, (str, bytes)) or not isinstance(filter_args, _abc.Iterable):
        raise ValueError("filter_args: expected a sequence of str, int or float values, "
                         f"got {type(filter_args).__name__}")
    out = []
    for i, a in enumerate(filter_args):
        if isinstance(a, (bool, _np.bool_)):
            raise ValueError(f"filter_args[{i}]: a bool is ambiguous in SQL; give 1 or 0")
        if isinstance(a, (float, _np.floating)):
            if not _math.isfinite(a):
                raise ValueError(f"filter_args[{i}]: {a} is not a finite number")
        elif not isinstance(a, (str, int, _np.integer)):
            raise ValueError(f"filter_args[{i}]: expected a str, int or float, "
                             f"got {type(a).__name__}")
        out.append(str(a))
    return {"sql": filter, "sql_args": out}


def _json_value(x):
    """json.dumps's default= for numpy values in metadata records."""
    if isinstance(x, _np.generic):
        return x.item()
    if isinstance(x, _np.ndarray):
        return x.tolist()
    raise TypeError(f"a {type(x).__name__} is not a JSON value")


@_contextlib.contextmanager
def _records_file(records, name):
    """Yields the path of a temporary JSON Lines file holding `records` (dicts, one a
    line), removed afterwards. The library's errors name the file's lines; they are
    raised again, of the same type, naming the records instead (line n is
    `name`[n - 1])."""
    if isinstance(records, (str, bytes, _abc.Mapping)) or not isinstance(records, _abc.Iterable):
        raise ValueError(f"{name}: expected a list of dicts, got {type(records).__name__}")
    fd, tmp = _tempfile.mkstemp(prefix="chimera-meta-", suffix=".jsonl")
    try:
        with open(fd, "w", encoding="utf-8") as f:
            for i, rec in enumerate(records):
                if not isinstance(rec, _abc.Mapping):
                    raise ValueError(f"{name}[{i}]: expected a dict, got {type(rec).__name__}")
                try:
                    line = _json.dumps(dict(rec), default=_json_value, allow_nan=False)
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{name}[{i}]: {e}") from None
                f.write(line)
                f.write("\n")
        try:
            yield tmp
        except (ValueError, OSError, ChimeraError) as e:
            # meta import names the file, add and update the records as "metadata"
            msg = str(e)
            new = _re.sub("(?:" + _re.escape(tmp) + r"|^metadata):(\d+)",
                          lambda m: f"{name}[{int(m.group(1)) - 1}]", msg).replace(tmp, name)
            if new == msg:
                raise
            raise type(e)(new) from None
    finally:
        try:
            _os.unlink(tmp)
        except FileNotFoundError:
            pass


def _metadata_file(metadata, name="metadata"):
    """A context yielding the library's metadata path: `metadata` itself (a JSON Lines
    file), a temporary file of its records (a list of dicts), or None."""
    if metadata is None:
        return _contextlib.nullcontext(None)
    if isinstance(metadata, (str, bytes, _os.PathLike)):
        path = _os.fsdecode(metadata)
        if not _os.path.isfile(path):
            _missing(path, "no metadata file")
        return _contextlib.nullcontext(path)
    return _records_file(metadata, name)


# ----------------------------------------------------------------------------------------
# Index
# ----------------------------------------------------------------------------------------

class Index:
    """An opened Chimera index (a directory on disk, memory-mapped).

    Make one with :meth:`Index.build` or :meth:`Index.open`. Searching is thread-safe:
    any number of Python threads may call :meth:`search` on one index at once. Close it
    with :meth:`close` or a ``with`` block (or let it be garbage-collected).

    A handle sees the index as it was when opened (one generation) while :func:`add`,
    :func:`delete`, :func:`update` and :func:`compact` change the directory;
    :meth:`refresh` moves it to the newest.
    """

    def __init__(self, path, backend="auto", verify=False):
        """Open the index at `path`; same as :meth:`Index.open`."""
        path = _os.fspath(path)
        if not _os.path.isdir(path):
            _missing(path, "no index directory")
        self._path = path
        self._raw = _chimera.RawIndex(path, backend=backend, verify=bool(verify))
        self._corpus = None

    # -- life cycle --------------------------------------------------------------------

    @classmethod
    def open(cls, path, backend="auto", verify=False):
        """Open (memory-map) the index at `path`.

        backend: "auto" (CUDA when a device is usable, else CPU), "cpu" or "cuda".
        verify: recompute every section's checksum first (reads all the data once).

        Raises FileNotFoundError (no such directory), CorruptIndexError (damaged, or an
        unsupported format version), OSError, MemoryError.
        """
        return cls(path, backend=backend, verify=verify)

    @classmethod
    def build(cls, path, documents=None, *, tokens=None, doclens=None, ids=None, bits=4,
              threads=None, seed=0, n_clusters=None, progress=False, backend="auto",
              rerank=None, calibrate=True):
        """Build an index of a corpus into directory `path`, then open it.

        The corpus is either ``documents``, a list of (n_i, d) arrays (or one
        [n_docs, L, d] array), or ``tokens`` [n_tokens, d] with ``doclens`` [n_docs]
        (documents are consecutive runs of rows). float32 or float16; tokens should be
        L2-normalised, as ColBERT-style encoders emit them.

        ids: optional user ids (int64, one per document, unique, >= 0); by default a
            document's id is its position.
        bits: bits per dimension of the full-precision codes, 1..8.
        threads: worker threads (None: one per CPU).
        seed: every random step derives from it (same input and seed, same index).
        n_clusters: IVF clusters (None: about one per 100 tokens).
        progress: True for a progress bar (tqdm when installed, else lines on stderr),
            or a callable(phase, fraction), called from worker threads.
        rerank: None, or "f16", "bf16" or "f32": also store the original vectors in
            that type (host-only, 2 or 4 bytes per dimension), so that
            ``search(..., rerank_depth=N)`` can re-score its top N exactly.
        calibrate: choose the index's own default search parameters for k = 10 and 100
            (Recall@k >= 0.95 on held-out pseudo-queries, where the bits allow it), used
            by every search that leaves them unset; False skips it (scratch indexes).
            ``build_report["calibrated"]`` lists them (k, n_probe, k_refine,
            k_fullbit, chunks, recall, recall_low, reached).

        The build writes beside `path` and swaps the result in only when complete, so an
        existing index at `path` survives a failed build. The GIL is released meanwhile.
        Ctrl-C (SIGINT) stops the build (the signal is seen within 50 ms, the build
        stops at its next progress point) and raises KeyboardInterrupt; the temporary
        directory is removed and an index previously at `path` is left as it was.
        Raises ValueError (shapes, dtypes, NaN/Inf, empty documents, duplicate ids),
        FileNotFoundError (the parent directory is missing), OSError, MemoryError.
        """
        path = _os.fspath(path)
        parent = _os.path.dirname(_os.path.abspath(path))
        if not _os.path.isdir(parent):
            _missing(parent, "no such directory")
        tok, lens, uids = _corpus(documents, tokens, doclens, ids)
        report = _chimera.build(path, tok, lens, uids, bits=int(bits), threads=_threads(threads),
                                seed=int(seed), n_clusters=int(n_clusters or 0),
                                progress=_progress(progress),
                                rerank="none" if rerank is None else str(rerank),
                                calibrate=bool(calibrate))
        index = cls(path, backend=backend)
        index._corpus = (tok, lens, uids)
        index.build_report = report
        return index

    def close(self):
        """Unmap the index. Raises RuntimeError while another thread is searching it."""
        self._raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._raw.closed else f"{self._raw.n_docs} documents, dim {self._raw.dim}"
        return f"chimera.Index({self._path!r}: {state})"

    # -- properties ----------------------------------------------------------------------

    @property
    def path(self):
        """The index directory."""
        return self._path

    @property
    def n_docs(self):
        """Number of documents a search can return (deleted ones excluded), in the
        generation this handle sees."""
        return self._raw.n_docs

    def __len__(self):
        return self._raw.n_docs

    @property
    def generation(self):
        """The generation this handle sees: 1 for a new index, + 1 per change committed
        since (:func:`add`, :func:`delete`, :func:`update`, :func:`compact`, a rebuild).
        Fixed at open; :meth:`refresh` moves it to the newest."""
        return self._raw.generation

    def ids(self):
        """The ids a search can return (deleted documents excluded), as an int64 array in
        the index's order: the build's documents, then each add's."""
        out = _np.empty(self._raw.n_docs, dtype=_np.int64)
        while True:
            n = self._raw.ids(out)
            if n == out.shape[0]:
                return out
            out = _np.empty(n, dtype=_np.int64)   # a refresh came in between: again

    def refresh(self):
        """Move this handle to the newest committed generation of its directory (after
        :func:`add`, :func:`delete`, :func:`update`, :func:`compact` or a rebuild, by this
        process or another). Until then the handle keeps the generation it opened, so a
        series of searches sees one consistent index.

        Safe to call while other threads search this index: searches already running
        finish on the generation they started with, later ones use the new one.
        Returns True when the handle moved, False when it already saw the newest. On
        error (CorruptIndexError, OSError, MemoryError) it keeps its generation.
        """
        changed = self._raw.refresh()
        if changed:
            self._corpus = None      # no longer the corpus of what this handle searches
        return changed

    @property
    def dim(self):
        """Token dimension."""
        return self._raw.dim

    @property
    def info(self):
        """The index's manifest as a dict (what ``chimera info IDX`` prints): dimension,
        bits, clusters, documents, tokens, posting-list statistics, sections and sizes,
        build times, generation, and the state of changes since the build (n_deleted,
        n_segments, n_deletion_lists, appended_docs, appended_tokens, assign_sim_p10,
        drift_tokens, drift_below, recluster_advised; see :func:`add`). n_docs and
        n_tokens there include deleted documents. Read from disk at each access: the
        newest generation, which may be ahead of this handle's until :meth:`refresh`."""
        return _chimera.info(self._path)

    def default_params(self, k=10, filtered=False):
        """The setting a search with this k and no `params` uses: a dict of n_probe,
        k_refine, k_fullbit, chunks, and "calibrated" (True: the index's own, chosen at
        build for Recall@k >= 0.95; False: the library's fixed defaults). filtered: the
        deeper setting a query with a filter (subset, exclude, filter) is given."""
        return self._raw.params_default(_k(k), bool(filtered))

    # -- search --------------------------------------------------------------------------

    def search(self, queries, k=10, recall=None, params=None, threads=None, latency=False,
               subset=None, exclude=None, filter=None, filter_args=(), rerank_depth=None):
        """Top-k documents for each query.

        queries: a [nq, m, d] array, or a list of (m_i, d) arrays; float32 or float16.
        k: results per query.
        recall: use the profile that :meth:`tune` stored for this k and the smallest
            target >= recall (ValueError if there is none); params given win field by
            field, and with a filter the profile's depths deepen as the calibrated
            defaults' do (it was tuned without one).
        params: dict overriding pipeline settings: n_probe, k_refine, k_fullbit, chunks,
            rerank_depth, k_interaction (ints), impute ("probe", "zero", "min"), probe ("auto", "brute",
            "graph"), impute_scale (the probe floor's scale, a float in (0, 1]). Unset ones take the index's calibrated defaults for k (or the
            library's, for an index built without calibration), or the profile's with
            recall=.
        threads: worker threads for this call (None: one per CPU). Give concurrent
            callers a share each (threads=1 for one search per Python thread).
        latency: one query at a time with all threads, instead of queries spread over
            the threads.
        subset: the ids that may be returned: a 1-d array-like of ids for every query,
            or a list of nq of them, one per query (a None entry: no filter for that
            query). Ids the index does not hold are ignored; duplicates are allowed.
        exclude: ids never returned (a 1-d array-like, for every query). Give subset or
            exclude, not both.
        filter: an SQL expression over the documents' metadata (:func:`meta_import`),
            e.g. ``"year >= ? AND lang = ?"``: only documents whose record satisfies it
            are returned (for every query). An expression, never a statement: it runs
            read-only over the metadata table with built-in functions only (lower,
            like, abs, coalesce, json_extract, ...), no ``;`` or comments, stopped after
            2 s. Not with subset or exclude.
        filter_args: values bound to the expression's ``?`` in order: str, int or float
            (sent as str(); one written as a number is bound as a number; bools are
            refused). Pass user input here, never into the expression.
        rerank_depth: re-score the top max(k, rerank_depth) documents by exact Chamfer
            over the vectors the index stores (``build(..., rerank="f16")``) and return
            the best k with their exact scores (the same as params["rerank_depth"]);
            ValueError on an index without stored vectors. None or 0: off.

        Filters act inside the pipeline: a disallowed document never takes an allowed
        one's place, and a selective filter switches to scoring the allowed documents
        directly, so each query gets min(k, allowed) results at any selectivity (an
        empty subset: every id -1).

        Returns (scores float32 [nq, k], ids int64 [nq, k]), best first; ids are the
        user ids, padded with -1 (score -inf) where fewer than k documents qualify.
        Raises ValueError (shapes, dtypes, NaN/Inf, dimension mismatch; filter ids that
        are not integers, negative or not 1-d, subset with exclude, per-query subsets
        not one per query; an SQL filter with a syntax error or a refused operation,
        named, or on an index without metadata; filter with subset or exclude),
        CorruptIndexError, MemoryError, ChimeraError (CHIMERA_ERR_CANCELLED: the filter
        ran past its time limit; CHIMERA_ERR_CONFLICT: the metadata is behind the index
        after an interrupted change, which the next change repairs).
        """
        k = _k(k)
        qt, ql = _queries(queries)
        if qt.shape[1] != self._raw.dim:
            raise ValueError(f"queries: dimension {qt.shape[1]}, the index's is {self._raw.dim}")
        if filter is not None and (subset is not None or exclude is not None):
            raise ValueError("filter: an SQL filter cannot be combined with subset or exclude "
                             "(express those ids in the SQL, e.g. id IN (...))")
        filters = _filters(subset, exclude, ql.shape[0])
        filters.update(_sql_args(filter, filter_args))
        ids, scores = _outputs(ql.shape[0], k)
        if params is not None:
            params = dict(params)
        if rerank_depth:
            params = dict(params or {})
            params["rerank_depth"] = int(rerank_depth)
        self.last_profile = self._raw.search(qt, ql, k, params, recall, _threads(threads),
                                             ids, scores, bool(latency), **filters)
        return scores, ids

    def tune(self, queries, k=10, target_recall=0.95, truth=None, documents=None, *,
             tokens=None, doclens=None, ids=None, threads=None, save=False, heldout=None,
             seed=0):
        """Find the fastest search setting that reaches Recall@k >= target_recall.

        On the CPU, a walk along the frontier of the fewest documents that hold the
        target at each n_probe, in the form without a 1-bit pass (k_refine = k_fullbit),
        chosen by a model of the search's cost (as ``chimera tune``); on a GPU, the
        paper's backward procedure (generous n_probe and k_refine, raise k_fullbit
        until the target is met, then shrink k_refine, then n_probe). Recall is measured
        against `truth`, the exact top-k ids [nq, >= k]; when it is not given it is
        computed by :func:`exact_search` over the corpus: ``documents`` (or tokens and
        doclens, ids), or, for an index made by :meth:`build` in this process, the corpus
        it was built from (until :meth:`refresh` moves it to a changed index).

        save: when the target is reached, store the result in the index as the profile
            for (k, target_recall), for ``search(recall=...)`` on this handle (refreshed
            after the save) and ``chimera search --recall``; other open handles see it
            after their :meth:`refresh`.
        heldout: a fraction in (0, 1) of the queries (at least 20 queries in all) to hold
            out, as ``chimera tune`` does: the setting is tuned on the rest, checked on
            them, and reached only when the lower bound of the 95% interval of its
            held-out recall meets the target (the tuning target rises until it does).
            The split is drawn with `seed`. None: tune and measure on all the queries
            (a point estimate with no margin).

        Returns a dict: params (the setting), recall and qps measured with it, reached
        (False: the target was out of reach and params is the closest), points (every
        setting tried), saved (whether it was stored); with heldout, also "heldout": a
        dict of n_tune, n_heldout, recall, low, high (the 95% interval), need (held-out
        queries an interval of half-width (1 - target) / 2 would take; more than
        n_heldout: too few queries for the target) and tune_target.
        """
        k = _k(k)
        if not 0 < target_recall <= 1:
            raise ValueError(f"target_recall: {target_recall} is not in (0, 1]")
        qt, ql = _queries(queries)
        if truth is None:
            if documents is not None or tokens is not None:
                corpus = _corpus(documents, tokens, doclens, ids)
            elif self._corpus is not None:
                corpus = self._corpus
            else:
                raise ValueError("tune: give truth= (exact top-k ids) or the corpus "
                                 "(documents=, or tokens= and doclens=)")
            truth = _exact(corpus, qt, ql, k, _threads(threads))[1]
        else:
            truth = _np.asarray(truth)
            if truth.dtype.kind not in "iu" or truth.ndim != 2:
                raise ValueError(f"truth: expected a 2-d integer array, got {truth.dtype} {truth.shape}")
            truth = _np.ascontiguousarray(truth, dtype=_np.int64)
        if heldout is not None and not 0 < heldout < 1:
            raise ValueError(f"heldout: {heldout} is not a fraction in (0, 1)")
        res = self._raw.tune(qt, ql, truth, k, float(target_recall), _threads(threads),
                             heldout=float(heldout or 0), seed=int(seed))
        raw = res.pop("_raw")
        res["saved"] = bool(save and res["reached"])
        if res["saved"]:
            gen = self._raw.generation
            _chimera.profile_save(self._path, k, float(target_recall), raw)
            # this handle searches with the profile from now on; a profile changes no
            # document, so the corpus stays this handle's unless another writer
            # committed too (the generation moved by more than the save). The profile
            # is saved whatever the refresh does: one that fails keeps the handle's
            # generation, as refresh() says, and a later refresh() finds the profile.
            try:
                moved = self._raw.refresh()
            except (OSError, MemoryError, ChimeraError):
                moved = False
            if moved and self._raw.generation != gen + 1:
                self._corpus = None
        return res

    def check(self):
        """The deep consistency check (``chimera check``): every checksum, posting list,
        code, factor and graph edge. Returns None; raises CorruptIndexError naming the
        damaged section."""
        self._raw.check()


# ----------------------------------------------------------------------------------------
# Changing an index
# ----------------------------------------------------------------------------------------

def _change_corpus(documents, tokens, doclens, ids):
    tok, lens, uids = _corpus(documents, tokens, doclens, ids)
    if uids is None:
        raise ValueError("ids: required (int64, one per document, >= 0): a document's id is "
                         "its name in the index for life")
    return tok, lens, uids


def add(path, documents=None, *, tokens=None, doclens=None, ids, metadata=None,
        no_sync=False, lock_timeout=None):
    """Add documents to the index at `path` without rebuilding it.

    The documents are given as to :meth:`Index.build` (``documents``, or ``tokens`` with
    ``doclens``; float32 or float16, the index's dimension) with their ``ids``
    (required: int64, one per document, >= 0, unique and none already in the index).
    Their tokens are assigned to the index's centroids and quantized with its settings,
    and written as a new segment that searches treat exactly as built documents.

    The centroids stay those trained at the build: when the added documents differ from
    the built ones, they fit them worse (report ``drift_below`` well above 0.1), and
    once many have been added ``info["recluster_advised"]`` turns True: then
    ``compact(path, recluster=True)`` retrains them over every live document.

    Each call is one atomic commit under the index's writer lock (shared with builds and
    other processes): when it returns the change is on disk (fsynced unless no_sync);
    on any error the index is exactly as it was, its generation unchanged. Open
    :class:`Index` handles keep their view until :meth:`Index.refresh`.

    metadata: the documents' metadata records for SQL filters (see :func:`meta_import`),
        stored in the same commit: a path to a JSON Lines file (one ``{"id": ..., ...}``
        object a line), or a list of dicts (written to a temporary JSON Lines file with
        json.dumps; numpy values allowed, NaN not). A malformed record fails the change
        naming its line (``file:3``) or its position (``metadata[2]``).
    no_sync: skip fsyncs (scratch indexes, tests): still atomic, but a power loss may
        lose the change.
    lock_timeout: seconds to wait for another writer of the index (None: the library's
        30 s; 0: not at all); ChimeraError (CHIMERA_ERR_BUSY) past it.

    The GIL is released meanwhile. Ctrl-C cancels the change before its commit (the index
    is then as it was) and raises KeyboardInterrupt; a change already committing
    completes first.

    Returns a report dict: docs_added, tokens_added, docs_deleted, ids_missing,
    generation (the index's after the call), seconds, assign_seconds, encode_seconds,
    write_seconds, drift_below (fraction of the added tokens whose similarity to their
    centroid is below the build's 10th percentile: about 0.1 when the new documents
    resemble the built ones; None when unknown or nothing was added), merged (appended
    segments or deletion lists were merged; compact: the index was rewritten), n_docs
    and n_deleted (of the index after the call; n_docs counts the deleted ones too),
    n_segments, peak_rss_bytes, assign_recall (the fraction of added tokens given their
    exact nearest centroid, on a sample; 0 when nothing was added), meta_records
    (metadata records imported or upserted), meta_repaired (metadata changes replayed
    because an earlier change was interrupted between the index's commit and the
    metadata database's).

    Raises ValueError (shapes, dtypes, NaN/Inf, empty documents, missing or duplicate
    ids, an id already in the index, another dimension than the index's),
    FileNotFoundError (no index at path), CorruptIndexError, OSError (a full disk: the
    index is unchanged), MemoryError, ChimeraError.
    """
    path = _index_dir(path)
    tok, lens, uids = _change_corpus(documents, tokens, doclens, ids)
    with _metadata_file(metadata) as meta:
        return _chimera.add(path, tok, lens, uids, no_sync=bool(no_sync),
                            lock_timeout_ms=_lock_timeout(lock_timeout), metadata=meta)


def update(path, documents=None, *, tokens=None, doclens=None, ids, missing_ok=False,
           metadata=None, no_sync=False, lock_timeout=None):
    """Replace documents of the index at `path`: each id's old version is deleted and
    the new one (given as to :func:`add`) appended, all in one commit, so a search sees
    either every old version or every new one. The ids keep naming the documents.

    missing_ok: an id not in the index is added instead of raising ValueError (counted
        in the report's ids_missing).
    metadata: the new versions' metadata records (upserted), as for :func:`add`.
    no_sync, lock_timeout, atomicity, Ctrl-C and the report: as :func:`add`.

    Raises as :func:`add`; ValueError names an id that is not in the index.
    """
    path = _index_dir(path)
    tok, lens, uids = _change_corpus(documents, tokens, doclens, ids)
    with _metadata_file(metadata) as meta:
        return _chimera.update(path, tok, lens, uids, missing_ok=bool(missing_ok),
                               no_sync=bool(no_sync),
                               lock_timeout_ms=_lock_timeout(lock_timeout), metadata=meta)


def delete(path, ids=None, *, filter=None, filter_args=(), missing_ok=False, no_sync=False,
           lock_timeout=None):
    """Delete the documents with these ids (an int or a 1-d integer array-like; an id
    listed twice counts once) from the index at `path`, or, with ``filter``, those whose
    metadata (:func:`meta_import`) satisfies an SQL expression, ``?`` bound to
    filter_args as in :meth:`Index.search`. Costs O(len(ids)): the documents are marked
    deleted, never returned by a search of a handle opened or refreshed afterwards, and
    their space is reclaimed by :func:`compact`.

    A filter is evaluated under the index's writer lock, on the records of the state the
    delete commits against: a document another writer changes meanwhile is judged by
    what it is at the commit. Matching records of ids not in the index are kept and
    counted in the report's ids_missing. The filter runs for at most 2 s.
    missing_ok: ids not in the index are skipped (counted in the report's ids_missing)
        instead of raising ValueError. Nothing is committed when none was found.
    The documents' metadata records are removed in the same commit.
    no_sync, lock_timeout, atomicity, Ctrl-C and the report: as :func:`add`.

    Raises ValueError (neither or both of ids and filter; a negative id; an id not in
    the index, named, unless missing_ok; a refused filter; an index without metadata),
    FileNotFoundError, CorruptIndexError, OSError, MemoryError, ChimeraError.
    """
    path = _index_dir(path)
    if (ids is None) == (filter is None):
        raise ValueError("give ids or filter")
    if filter is not None:
        return _chimera.delete(path, None, missing_ok=bool(missing_ok), no_sync=bool(no_sync),
                               lock_timeout_ms=_lock_timeout(lock_timeout),
                               **_sql_args(filter, filter_args))
    _sql_args(None, filter_args)  # filter_args without a filter
    arr = _np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"ids: expected integers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"ids: expected a 1-d array of ids, got shape {arr.shape}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > 2**63 - 1:
        raise ValueError(f"ids: {int(arr.max())} does not fit in int64")
    arr = _np.ascontiguousarray(arr, dtype=_np.int64)
    return _chimera.delete(path, arr, missing_ok=bool(missing_ok), no_sync=bool(no_sync),
                           lock_timeout_ms=_lock_timeout(lock_timeout))


def compact(path, *, recluster=False, n_clusters=None, threads=None, seed=0, no_sync=False,
            lock_timeout=None, progress=False):
    """Rewrite the index at `path` as one segment without its deleted documents (ids
    kept, nothing re-quantized, so search results are unchanged). Written beside the
    index and swapped in like a build. Worth it when more than about 20% of the
    documents are deleted (``info["n_deleted"]``) or after many small adds. An index
    with one segment and nothing deleted is left as it is (report ``merged`` False,
    generation unchanged).

    recluster: True to retrain the centroids over the live documents and rebuild the
        index from their stored vectors (``build(..., rerank=...)``) or else from tokens
        reconstructed from their full-bit codes, calibrating its default search
        parameters again; ids and metadata are kept. What ``info["recluster_advised"]``
        asks for once added documents fit the build's centroids badly. n_clusters
        (None: the build's default for the live tokens), threads and seed as for
        :meth:`Index.build`.

    progress: True for a progress bar, or a callable(phase, fraction), as for
        :meth:`Index.build`.
    no_sync, lock_timeout, atomicity, Ctrl-C and the report: as :func:`add`.

    Raises ValueError (CHIMERA_ERR_EMPTY: every document is deleted), FileNotFoundError,
    CorruptIndexError, OSError, MemoryError, ChimeraError.
    """
    path = _index_dir(path)
    return _chimera.compact(path, no_sync=bool(no_sync),
                            lock_timeout_ms=_lock_timeout(lock_timeout),
                            progress=_progress(progress), recluster=bool(recluster),
                            n_clusters=int(n_clusters or 0), n_threads=_threads(threads),
                            seed=int(seed))


def meta_import(path, *, jsonl=None, csv=None, records=None, no_sync=False,
                lock_timeout=None):
    """Import document metadata for SQL filters (``Index.search(filter=...)``) into the
    index at `path`: one record per document, keyed by its id. Give exactly one of

    jsonl: a JSON Lines file, one object a line: ``{"id": 7, "year": 2021, "lang": "en"}``.
    csv: a CSV file whose header row names the fields, one of them ``id`` (an empty
        field is NULL; a field written as a JSON number is a number, anything else text).
    records: a list of dicts, written to a temporary JSON Lines file with json.dumps
        (numpy values allowed, NaN not) and removed afterwards.

    Columns are typed from the data (INTEGER, REAL or TEXT). The records replace the
    metadata the index had, in IDX/meta.sqlite, in one commit with the index (its
    generation moves on; open handles see the new metadata at their next filtered
    search). Afterwards :func:`add` and :func:`update` bring their documents' records
    (``metadata=``) and :func:`delete` removes theirs.

    no_sync, lock_timeout, Ctrl-C: as :func:`add`. Returns the report dict of
    :func:`add`, with meta_records the number of records imported.

    Raises ValueError naming the first malformed record (``file:line``, or
    ``records[i]`` for records=; a syntax error, no id or a non-integer one, a duplicate
    id, a field whose type conflicts) with nothing imported, FileNotFoundError (no index
    or no such file), CorruptIndexError, OSError, MemoryError, ChimeraError
    (CHIMERA_ERR_BUSY past lock_timeout).
    """
    path = _index_dir(path)
    given = [n for n, v in (("jsonl", jsonl), ("csv", csv), ("records", records))
             if v is not None]
    if len(given) != 1:
        raise ValueError("meta_import: give exactly one of jsonl= (a JSON Lines file), "
                         "csv= (a CSV file) or records= (a list of dicts)"
                         + (f"; got {', '.join(given)}" if given else ""))
    opts = {"no_sync": bool(no_sync), "lock_timeout_ms": _lock_timeout(lock_timeout)}
    if records is not None:
        with _records_file(records, "records") as tmp:
            return _chimera.meta_import(path, tmp, csv=False, **opts)
    file = _os.fsdecode(jsonl if jsonl is not None else csv)
    if not _os.path.isfile(file):
        _missing(file, "no metadata file")
    return _chimera.meta_import(path, file, csv=csv is not None, **opts)


# ----------------------------------------------------------------------------------------
# Functions
# ----------------------------------------------------------------------------------------

def _exact(corpus, qt, ql, k, threads):
    tok, lens, uids = corpus
    if qt.shape[1] != tok.shape[1]:
        raise ValueError(f"queries: dimension {qt.shape[1]}, the documents' is {tok.shape[1]}")
    ids, scores = _outputs(ql.shape[0], k)
    _chimera.exact_search(tok, lens, uids, qt, ql, k, threads, ids, scores)
    return scores, ids


def exact_search(documents, queries, k=10, *, ids=None, threads=None):
    """Exact Chamfer top-k by brute force: the ground truth recall is measured against.

    documents: a list of (n_i, d) arrays, one [n_docs, L, d] array, or a tuple
        (tokens [n_tokens, d], doclens [n_docs]).
    queries: a [nq, m, d] array or a list of (m_i, d) arrays.
    ids: optional user ids of the documents (default: their positions).

    Returns (scores float32 [nq, k], ids int64 [nq, k]), best first (ties to the earlier
    document), -1 / -inf padding. The GIL is released meanwhile; Ctrl-C stops the
    search and raises KeyboardInterrupt.
    """
    k = _k(k)
    if isinstance(documents, tuple):
        if len(documents) != 2:
            raise ValueError("documents: a tuple must be (tokens, doclens)")
        corpus = _corpus(None, documents[0], documents[1], ids)
    else:
        corpus = _corpus(documents, None, None, ids)
    qt, ql = _queries(queries)
    return _exact(corpus, qt, ql, k, _threads(threads))


def recall(run_ids, truth_ids, k):
    """Recall@k of result ids [nq, >= k] against exact ids [nq, >= k]: per query,
    |top-k(run) ∩ top-k(truth)| / k, averaged (-1 entries are padding)."""
    run = _np.ascontiguousarray(run_ids, dtype=_np.int64)
    truth = _np.ascontiguousarray(truth_ids, dtype=_np.int64)
    return _chimera.recall(run, truth, _k(k))


def runtime_info():
    """This build and machine: library version, SIMD level, BLAS, CPUs, CUDA."""
    return _chimera.runtime_info()


# The HTTP client of `chimera serve` (stdlib http.client; numpy arrays in and out).
from .client import Client, ServerError  # noqa: E402  (uses the helpers above)
# A sharded index (chimera build --shards N, chimera-mpi build), searched as one.
from .shards import ShardedIndex  # noqa: E402  (uses Index)
