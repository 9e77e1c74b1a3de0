"""A sharded index from Python: the layout `chimera build --shards N` or `chimera-mpi
build` writes (docs/format.md, "Sharded indexes"), its shards opened as :class:`Index`
objects, searched in turn and their top-k lists merged, as `chimera search DIR` does.
(`chimera-mpi search` and `chimera-mpi serve` run the shards in parallel processes; this
class is for a machine that holds them all.)"""
import json as _json
import os as _os

import numpy as _np

from . import _k


def _fail_manifest(path, why):
    raise ValueError(f"{path}: not a valid shards manifest ({why})")


class ShardedIndex:
    """The shards of a sharded index directory, searched as one index.

    Every shard shares one codebook, so the shards' scores are comparable and the merge
    of their top-k lists is the corpus's top k (with exhaustive parameters, exactly that
    of one index built with the same codebook). Ids are the corpus's. Close it with
    :meth:`close` or a ``with`` block.
    """

    def __init__(self, path, backend="auto", verify=False):
        from . import Index  # the package imports this module at its end

        path = _os.fspath(path)
        manifest = _os.path.join(path, "shards.json")
        if not _os.path.isfile(manifest):
            raise FileNotFoundError(f"{path}: not a sharded index (no shards.json; chimera build "
                                    "--shards N or chimera-mpi build makes one)")
        with open(manifest, "rb") as f:
            try:
                m = _json.loads(f.read())
            except ValueError as e:
                _fail_manifest(manifest, e)
        if not isinstance(m, dict) or m.get("format") != "chimera-shards 1":
            _fail_manifest(manifest, "format is not 'chimera-shards 1'")
        shards = m.get("shards")
        if not isinstance(shards, list) or not shards:
            _fail_manifest(manifest, "no shards listed")
        dirs = []
        for i, e in enumerate(shards):
            d = e.get("dir") if isinstance(e, dict) else None
            if not isinstance(d, str) or not d or d.startswith(".") or "/" in d:
                _fail_manifest(manifest, f"shard {i}'s dir")
            dirs.append(_os.path.join(path, d))
        self._path = path
        self.generation = int(m.get("generation", 0))
        self._shards = []
        try:
            for d in dirs:
                self._shards.append(Index(d, backend=backend, verify=verify))
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, path, backend="auto", verify=False):
        """Open every shard of the sharded index at `path` (see :meth:`Index.open`)."""
        return cls(path, backend=backend, verify=verify)

    def close(self):
        for s in self._shards:
            s.close()
        self._shards = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"ShardedIndex({self._path!r}, {len(self._shards)} shards, {self.n_docs} documents)"

    @property
    def path(self):
        return self._path

    @property
    def shards(self):
        """The shards, as :class:`Index` objects (search one directly for its own tuned
        profiles or metadata filters)."""
        return list(self._shards)

    @property
    def n_docs(self):
        """Documents a search can return, over all shards."""
        return sum(s.n_docs for s in self._shards)

    def __len__(self):
        return self.n_docs

    @property
    def dim(self):
        return self._shards[0].dim

    def refresh(self):
        """Move every shard to its newest generation (see :meth:`Index.refresh`)."""
        return [s.refresh() for s in self._shards]

    def search(self, queries, k=10, params=None, threads=None, latency=False, subset=None,
               exclude=None):
        """Top-k documents for each query over all shards: each shard's top k, merged.

        params: as :meth:`Index.search`; unset ones take shard 0's calibrated defaults
            for k on every shard (as `chimera search DIR` does), so the shards search
            alike; with subset or exclude, shard 0's deeper filtered ones. subset / exclude, threads, latency: as :meth:`Index.search` (ids are
            the corpus's). Metadata filters and tuned profiles are per shard: search a
            shard (:attr:`shards`) for them.

        Returns (scores float32 [nq, k], ids int64 [nq, k]), best first (ties: the
        smaller id first), padded with -1 (score -inf).
        """
        k = _k(k)
        p = self._shards[0].default_params(k, filtered=subset is not None or exclude is not None)
        del p["calibrated"]
        p.update(params or {})
        lists = []
        for s in self._shards:
            if s.n_docs == 0:  # every document of this shard deleted
                continue
            lists.append(s.search(queries, k=k, params=p, threads=threads,
                                  latency=latency, subset=subset, exclude=exclude))
        if not lists:
            raise ValueError(f"{self._path}: every document of every shard is deleted")
        scores = _np.concatenate([sc for sc, _ in lists], axis=1)
        ids = _np.concatenate([i for _, i in lists], axis=1)
        # best first: by score descending, ties by the smaller id; padding (-1) last
        pad = ids < 0
        order = _np.lexsort((_np.where(pad, _np.iinfo(_np.int64).max, ids),
                             -_np.where(pad, -_np.inf, scores.astype(_np.float64)), ), axis=1)
        top = order[:, :k]
        return (_np.take_along_axis(scores, top, axis=1).astype(_np.float32),
                _np.take_along_axis(ids, top, axis=1))
