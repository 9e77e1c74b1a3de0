"""A client for ``chimera serve``: search and change served indexes over HTTP.

The arrays are those of :class:`chimera.Index` (queries ``[nq, m, d]`` or a list of
``(m_i, d)`` arrays; documents a list of ``(n_i, d)`` arrays, or ``tokens`` with
``doclens``), sent as base64 (float32, or float16 when that is what you pass: half the
bytes), and results come back as the same numpy arrays :meth:`chimera.Index.search`
returns. Only the standard library's ``http.client`` is used, so numpy stays the
package's one dependency::

    import chimera
    client = chimera.Client("http://127.0.0.1:8080")            # api_key="..." if set
    scores, ids = client.search("docs", queries, k=10)          # [nq, k] each, ids -1 padded
    client.add("docs", [doc0, doc1], ids=[17, 18], metadata=[{"year": 2021}, None])
    client.delete("docs", ids=[17])
    client.delete("docs", filter="year < ?", filter_args=[2000])

A write returns once the server has committed it durably (its answer carries the new
generation); searches sent after that see it. Errors the server answers raise
:class:`ServerError` with its status, code and message, except 503 BUSY, which is sent
again after its Retry-After up to ``busy_retries`` times: the server gives it before
doing anything (the writer lock is held elsewhere, other large bodies are being parsed),
or, from a chimera-mpi service whose shards stalled, to every request from then on, so
a retry never applies a write twice.

Threads: one Client may be shared by threads; each thread keeps its own keep-alive
connection.
"""

import base64 as _base64
import http.client as _http
import json as _json
import threading as _threading
import time as _time
import urllib.parse as _urlparse

import numpy as _np

__all__ = ["Client", "ServerError"]


class ServerError(Exception):
    """An error answer of the server: ``status`` (HTTP), ``code`` (stable, e.g.
    ``DIMENSION_MISMATCH``), ``message``, ``details`` (a dict or None) and
    ``retry_after`` (seconds the answer asked to wait before trying again; 1 without)."""

    def __init__(self, status, code, message, details=None, retry_after=1.0):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details
        self.retry_after = retry_after


def _b64(tokens):
    """{"base64", "dtype", "shape"} of a 2-d float array (float16 kept, else float32)."""
    dt = _np.float16 if tokens.dtype == _np.float16 else _np.float32
    a = _np.ascontiguousarray(tokens, dtype=dt)
    return {"base64": _base64.b64encode(a.tobytes()).decode("ascii"),
            "dtype": "float16" if dt is _np.float16 else "float32", "shape": list(a.shape)}


def _keep_half(x, flat):
    """The package's helpers return float32; send float16 input as float16 again."""
    if isinstance(x, _np.ndarray):
        return flat.astype(_np.float16) if x.dtype == _np.float16 else flat
    if isinstance(x, (list, tuple)) and x and all(getattr(a, "dtype", None) == _np.float16 for a in x):
        return flat.astype(_np.float16)
    return flat


def _ids_list(ids, name):
    arr = _np.asarray(ids)
    if arr.size == 0:
        return []
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: expected a 1-d array-like of integer ids")
    return [int(i) for i in arr]


def _json_safe(x):
    """numpy scalars in metadata as plain Python values."""
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, _np.generic):
        return x.item()
    return x


class Client:
    """A connection to ``chimera serve`` at ``url`` (``http://host:port``).

    api_key: sent as ``Authorization: Bearer KEY`` (the server's --api-key-file).
    timeout: seconds to wait for an answer (writes wait for their commit).
    busy_retries: how many times a request answered 503 BUSY is sent again, each after
        the answer's Retry-After (at most 10 s); writes too (see above). 0: raise
        ServerError at once.
    """

    def __init__(self, url="http://127.0.0.1:8080", api_key=None, timeout=60.0, busy_retries=3):
        u = _urlparse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme != "http":
            raise ValueError(f"url: only http:// is supported, got {url!r}")
        self.url = url
        self._host, self._port = u.hostname or "127.0.0.1", u.port or 80
        self._prefix = u.path.rstrip("/")
        self._key = api_key
        self._timeout = timeout
        if int(busy_retries) < 0:
            raise ValueError(f"busy_retries: {busy_retries} < 0")
        self._busy_retries = int(busy_retries)
        self._local = _threading.local()
        self.last_profile = None

    def __repr__(self):
        return f"chimera.Client({self.url!r})"

    # -- plumbing ---------------------------------------------------------------------

    def _conn(self, fresh=False):
        c = getattr(self._local, "conn", None)
        if c is None or fresh:
            if c is not None:
                c.close()
            c = self._local.conn = _http.HTTPConnection(self._host, self._port, timeout=self._timeout)
        return c

    def _request(self, method, path, body=None, retry=True):
        """Sends one request, returns the parsed JSON answer (or the text); raises
        ServerError for an error status. A request on a kept-alive connection that the
        server had closed meanwhile is sent again on a new one when `retry` (reads and
        searches: they change nothing). A 503 BUSY is sent again after its Retry-After,
        busy_retries times at most."""
        for attempt in range(self._busy_retries + 1):
            try:
                return self._request_once(method, path, body, retry)
            except ServerError as e:
                if e.status != 503 or e.code != "BUSY" or attempt == self._busy_retries:
                    raise
                _time.sleep(e.retry_after)

    def _request_once(self, method, path, body, retry):
        headers = {"Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = None
        if body is not None:
            data = _json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        c = self._conn(fresh=not retry)
        try:
            c.request(method, self._prefix + path, body=data, headers=headers)
            r = c.getresponse()
        except (_http.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not retry:
                raise
            c = self._conn(fresh=True)
            c.request(method, self._prefix + path, body=data, headers=headers)
            r = c.getresponse()
        text = r.read()
        if r.getheader("Connection", "").lower() == "close":
            self._conn(fresh=True)
        ctype = r.getheader("Content-Type", "")
        out = _json.loads(text) if ctype.startswith("application/json") and text else text.decode()
        if r.status >= 400:
            if isinstance(out, dict):
                e = ServerError(r.status, out.get("code", "?"), out.get("message", ""), out.get("details"))
            else:
                e = ServerError(r.status, "HTTP", str(out)[:200])
            try:
                wait = float(r.getheader("Retry-After", "1"))
            except ValueError:  # an HTTP date, which chimera serve never sends
                wait = 1.0
            e.retry_after = min(wait, 10.0) if wait >= 0 else 1.0  # NaN fails >= 0
            raise e
        return out

    def close(self):
        """Closes this thread's connection (others close when their threads end)."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
            self._local.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- reads ------------------------------------------------------------------------

    def health(self):
        """{"status": "ok", "version": ..., ...}."""
        return self._request("GET", "/health")

    def indexes(self):
        """The served indexes: a list of {"name", "dim", "n_docs", "generation"}."""
        return self._request("GET", "/indexes")["indexes"]

    def info(self, index):
        """The index's description (what ``chimera info`` prints, as a dict)."""
        return self._request("GET", f"/indexes/{_urlparse.quote(index, safe='')}")

    def metrics(self):
        """The Prometheus text of /metrics."""
        return self._request("GET", "/metrics")

    def search(self, index, queries, k=10, *, recall=None, params=None, subset=None, exclude=None,
               filter=None, filter_args=None, profile=False):
        """Top-k documents for each query, as :meth:`chimera.Index.search`.

        queries: a [nq, m, d] array, or a list of (m_i, d) arrays (float32 or float16).
        recall, params, subset (one list of ids, or one per query), exclude, filter and
        filter_args: as :meth:`chimera.Index.search`, evaluated by the server.
        profile: ask for per-stage times; they are kept in ``self.last_profile``.

        Returns (scores float32 [nq, k], ids int64 [nq, k]), best first, padded with
        -inf / -1 where fewer than k documents qualify.
        """
        from . import _queries  # the package's own shape checks
        flat, lens = _queries(queries)
        flat = _keep_half(queries, flat)
        body = {"queries": dict(_b64(flat), lengths=lens.tolist()), "k": int(k)}
        if recall is not None:
            body["recall"] = float(recall)
        if params:
            body["params"] = dict(params)
        if subset is not None:
            if isinstance(subset, (list, tuple)) and subset and _np.ndim(subset[0]) >= 1:
                body["subset"] = [_ids_list(s, "subset") for s in subset]
            else:
                body["subset"] = _ids_list(subset, "subset")
        if exclude is not None:
            body["exclude"] = _ids_list(exclude, "exclude")
        if filter is not None:
            body["filter"] = filter
            body["filter_args"] = [a if isinstance(a, (str, int, float)) else str(a)
                                   for a in (filter_args or ())]
        if profile:
            body["profile"] = True
        out = self._request("POST", f"/indexes/{_urlparse.quote(index, safe='')}/search", body)
        nq = len(lens)
        ids = _np.full((nq, int(k)), -1, dtype=_np.int64)
        scores = _np.full((nq, int(k)), -_np.inf, dtype=_np.float32)
        for i, r in enumerate(out["results"]):
            n = len(r["ids"])
            ids[i, :n] = r["ids"]
            scores[i, :n] = r["scores"]
        self.last_profile = out.get("profile")
        return scores, ids

    # -- writes -------------------------------------------------------------------------

    def _documents(self, documents, tokens, doclens, ids, metadata):
        from . import _corpus
        tok, lens, idarr = _corpus(documents, tokens, doclens, ids)
        if idarr is None:
            raise ValueError("ids: required, one per document")
        tok = _keep_half(documents if documents is not None else tokens, tok)
        body = {"ids": [int(i) for i in idarr], "embeddings": _b64(tok), "lengths": lens.tolist()}
        if metadata is not None:
            metadata = list(metadata)
            if len(metadata) != len(lens):
                raise ValueError(f"metadata: {len(metadata)} records for {len(lens)} documents")
            body["metadata"] = [None if m is None else _json_safe(dict(m)) for m in metadata]
        return body

    def add(self, index, documents=None, *, tokens=None, doclens=None, ids, metadata=None):
        """Adds documents with new ids (as :func:`chimera.add`); metadata: one dict (or
        None) per document. Returns the server's report once the commit is durable:
        {"status": "committed", "generation", "docs_added", ...}."""
        body = self._documents(documents, tokens, doclens, ids, metadata)
        return self._request("POST", f"/indexes/{_urlparse.quote(index, safe='')}/documents", body, retry=False)

    def update(self, index, documents=None, *, tokens=None, doclens=None, ids, metadata=None,
               missing_ok=False):
        """Replaces documents, keeping their ids (as :func:`chimera.update`)."""
        body = self._documents(documents, tokens, doclens, ids, metadata)
        if missing_ok:
            body["missing_ok"] = True
        return self._request("PUT", f"/indexes/{_urlparse.quote(index, safe='')}/documents", body, retry=False)

    def delete(self, index, ids=None, *, filter=None, filter_args=None, missing_ok=False):
        """Deletes documents by id, or those whose metadata satisfies ``filter`` (an SQL
        expression with ``?`` bound to filter_args). Returns the server's report
        ({"docs_deleted", "generation", ...})."""
        if (ids is None) == (filter is None):
            raise ValueError("give ids or filter")
        body = {"ids": _ids_list(ids, "ids")} if ids is not None else \
            {"filter": filter, "filter_args": list(filter_args or ())}
        if missing_ok:
            body["missing_ok"] = True
        return self._request("DELETE", f"/indexes/{_urlparse.quote(index, safe='')}/documents", body,
                             retry=False)
