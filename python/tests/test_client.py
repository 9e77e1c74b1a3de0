"""chimera.Client against a real `chimera serve` (the CLI of CHIMERA_CLI): searches equal
Index.search at the same parameters (float32 and float16, ragged queries, params,
subsets, filters); add, update and delete change what the server finds; errors come back
as ServerError with the server's status and code; API keys are sent; a 503 BUSY is sent
again after its Retry-After (against a stand-in server that answers BUSY on cue)."""
import http.server
import json
import shutil
import subprocess
import threading

import numpy as np
import pytest

import chimera


class _Server:
    def __init__(self, cli, indexes, *extra):
        args = [cli, "serve", "--port", "0", "--quiet", "--threads", "2"]
        for name, path in indexes.items():
            args += ["--index", f"{name}={path}"]
        self.p = subprocess.Popen(args + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        line = self.p.stdout.readline()
        if "listening on" not in line:
            self.p.kill()
            raise RuntimeError(f"chimera serve did not start: {line!r} {self.p.stderr.read()}")
        self.url = line.split("listening on ")[1].split()[0]

    def stop(self):
        self.p.terminate()
        rc = self.p.wait(60)
        err = self.p.stderr.read()
        assert rc == 0, err
        assert "Sanitizer" not in err and "runtime error" not in err, err


@pytest.fixture(scope="module")
def served(cli, index, tmp_path_factory):
    """A server over the session's index ("main", read only) and a copy of it
    ("scratch", for writes), with an API key."""
    scratch = tmp_path_factory.mktemp("served") / "scratch.idx"
    shutil.copytree(index.path, scratch)
    keyfile = tmp_path_factory.mktemp("key") / "key"
    keyfile.write_text("k3y\n")
    srv = _Server(cli, {"main": index.path, "scratch": scratch}, "--api-key-file", str(keyfile))
    yield srv, chimera.Client(srv.url, api_key="k3y"), scratch
    srv.stop()


def test_search_equals_index_search(served, index, corpus):
    srv, client, _ = served
    _, _, queries = corpus
    want_s, want_i = index.search(queries, k=10)
    got_s, got_i = client.search("main", queries, k=10)
    assert got_i.dtype == np.int64 and got_s.dtype == np.float32 and got_i.shape == (len(queries), 10)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-6)
    # float16, ragged lists, explicit parameters
    q16 = queries.astype(np.float16)
    np.testing.assert_array_equal(client.search("main", q16, k=5)[1], index.search(q16, k=5)[1])
    ragged = [queries[i, : 4 + i % 9] for i in range(len(queries))]
    np.testing.assert_array_equal(client.search("main", ragged, k=5)[1], index.search(ragged, k=5)[1])
    p = {"n_probe": 12, "k_refine": 50, "k_fullbit": 20, "chunks": 2, "impute": "zero"}
    np.testing.assert_array_equal(client.search("main", queries, k=7, params=p)[1],
                                  index.search(queries, k=7, params=p)[1])


def test_filters_and_profile(served, index, corpus):
    _, client, _ = served
    _, _, queries = corpus
    subset = np.arange(0, 400, 5)
    np.testing.assert_array_equal(client.search("main", queries, k=10, subset=subset)[1],
                                  index.search(queries, k=10, subset=subset)[1])
    np.testing.assert_array_equal(client.search("main", queries, k=10, exclude=subset)[1],
                                  index.search(queries, k=10, exclude=subset)[1])
    per = [np.arange(i, i + 3) for i in range(len(queries))]
    got = client.search("main", queries, k=10, subset=per)[1]
    np.testing.assert_array_equal(got, index.search(queries, k=10, subset=per)[1])
    assert (got[:, 3:] == -1).all()
    client.search("main", queries[:2], k=3, profile=True)
    assert client.last_profile and client.last_profile["refine_ms"] >= 0
    # every round of probing counted: at least the n_probe that ran (per query token)
    ran = client.last_profile["params"]["n_probe"]
    assert client.last_profile["n_probed"] >= ran
    assert 0 <= client.last_profile["n_walked"] <= client.last_profile["n_probed"]


def test_writes(served, corpus):
    _, client, scratch = served
    rng = np.random.default_rng(3)
    docs = [rng.standard_normal((n, 64)).astype(np.float32) for n in (6, 11)]
    docs = [d / np.linalg.norm(d, axis=1, keepdims=True) for d in docs]
    rep = client.add("scratch", docs, ids=[5000, 5001], metadata=[{"tag": "new"}, None])
    assert rep["status"] == "committed" and rep["docs_added"] == 2
    _, ids = client.search("scratch", docs, k=1)
    assert ids[:, 0].tolist() == [5000, 5001]
    _, ids = client.search("scratch", docs[:1], k=5, filter="tag = ?", filter_args=["new"])
    assert ids[0].tolist() == [5000, -1, -1, -1, -1]
    client.update("scratch", [docs[1].astype(np.float16)], ids=[5000])
    _, ids = client.search("scratch", [docs[1]], k=2)
    assert sorted(ids[0].tolist()) == [5000, 5001]
    assert client.delete("scratch", ids=[5001])["docs_deleted"] == 1
    _, ids = client.search("scratch", [docs[1]], k=2)
    assert 5001 not in ids[0].tolist()
    assert client.info("scratch")["n_docs"] == 401
    with chimera.Index(scratch) as ix:   # what the server committed is on disk
        assert 5000 in ix.ids() and 5001 not in ix.ids()


def test_errors(served, corpus):
    srv, client, _ = served
    _, _, queries = corpus
    with pytest.raises(chimera.ServerError) as e:
        client.search("nope", queries, k=3)
    assert e.value.status == 404 and e.value.code == "INDEX_NOT_FOUND"
    with pytest.raises(chimera.ServerError) as e:
        client.search("main", np.ascontiguousarray(queries[:, :, :32]), k=3)
    assert e.value.status == 422 and e.value.code == "DIMENSION_MISMATCH"
    assert e.value.details == {"expected_dim": 64, "got_dim": 32}
    with pytest.raises(chimera.ServerError) as e:
        client.search("main", queries, k=5000)
    assert e.value.status == 422
    with pytest.raises(chimera.ServerError) as e:
        chimera.Client(srv.url).indexes()
    assert e.value.status == 401 and e.value.code == "UNAUTHORIZED"
    with pytest.raises(chimera.ServerError) as e:
        chimera.Client(srv.url, api_key="wrong").search("main", queries, k=3)
    assert e.value.status == 401
    assert chimera.Client(srv.url).health()["status"] == "ok"   # /health needs no key
    with pytest.raises(ValueError):
        client.delete("main")
    assert [i["name"] for i in client.indexes()] == ["main", "scratch"]
    assert "chimera_queries_total" in client.metrics()


class _BusyHandler(http.server.BaseHTTPRequestHandler):
    """Answers the first `busy` requests 503 with `code`, then 200 {"status": "ok"}."""
    plan = {"busy": 0, "code": "BUSY", "seen": []}

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.plan["seen"].append((self.command, self.rfile.read(n)))
        if self.plan["busy"] > 0:
            self.plan["busy"] -= 1
            status, body = 503, {"code": self.plan["code"], "message": "busy"}
        else:
            status, body = 200, {"status": "ok", "generation": 7}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == 503:
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


def test_busy_is_retried():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BusyHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    plan = _BusyHandler.plan
    try:
        # two BUSY answers, then the answer: a read and a write both get through
        plan.update(busy=2, code="BUSY", seen=[])
        assert chimera.Client(url).health()["status"] == "ok"
        assert len(plan["seen"]) == 3
        plan.update(busy=2, seen=[])
        out = chimera.Client(url).delete("docs", ids=[3, 4])
        assert out["generation"] == 7
        assert [m for m, _ in plan["seen"]] == ["DELETE"] * 3
        assert len({b for _, b in plan["seen"]}) == 1  # the same body each time
        # more BUSY answers than retries: the last one is raised, with its Retry-After
        plan.update(busy=5, seen=[])
        with pytest.raises(chimera.ServerError) as e:
            chimera.Client(url, busy_retries=2).health()
        assert e.value.status == 503 and e.value.code == "BUSY" and e.value.retry_after == 0
        assert len(plan["seen"]) == 3
        plan.update(busy=1, seen=[])
        with pytest.raises(chimera.ServerError):
            chimera.Client(url, busy_retries=0).health()
        assert len(plan["seen"]) == 1
        # another 503 (out of memory) is raised at once
        plan.update(busy=1, code="OUT_OF_MEMORY", seen=[])
        with pytest.raises(chimera.ServerError) as e:
            chimera.Client(url).health()
        assert e.value.code == "OUT_OF_MEMORY" and len(plan["seen"]) == 1
        with pytest.raises(ValueError):
            chimera.Client(url, busy_retries=-1)
    finally:
        srv.shutdown()
        srv.server_close()
