#!/usr/bin/env python3
"""test_server.py: `chimera serve` driven over real HTTP, end to end.

Proves, against the `chimera` executable named by $CHIMERA (scratch in $TEST_TMP):
  - every endpoint answers as documented (health, indexes, index info, search, documents
    add/update/delete by ids and by filter, metrics, openapi.json), with the API key
    enforced (401 without it or with a wrong one; /health open);
  - search results equal the CLI's (`chimera search`, the library) at the same
    parameters: nested JSON, base64 float32, base64 [total, dim] with lengths, float16,
    explicit params, a tuned recall profile, subset, exclude, per-query subsets, metadata
    filters; and concurrent single-query requests (gathered into batches) give the same
    answers as one batched CLI run;
  - every error case has its status and the {code, message} shape: malformed JSON 400,
    wrong dimension or dtype 422, unknown index 404, body over --max-body 413, a body
    whose parse would take more than --max-parse-memory 413 (numbers or strings; and its
    reservation given back), beside other parses 503 BUSY with Retry-After, k or nq over the limits 422, 401, 404, 405, 415;
  - stalled clients (more than the HTTP threads) do not stop the server answering, and
    are timed out;
  - a fuzz run of FUZZ_REQUESTS (default 3000) malformed requests (random bytes, truncated
    bodies, huge numbers, deep nesting, NaN, wrong content types, mutated JSON) leaves the
    server serving correct results;
  - SIGTERM lets a request in flight finish, then the server exits 0;
  - kill -9 during a stream of acknowledged adds loses none: after a restart every
    acknowledged id is in the index and searchable, and each unacknowledged request is
    all there or not at all;
  - the server's stderr holds no sanitizer report (ASan, UBSan, TSan builds), and its
    exit after SIGTERM is clean (LeakSanitizer runs then).
Only the standard library and numpy."""

import base64
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

CHIMERA = os.environ.get("CHIMERA", "build-test/chimera")
TMP = os.environ.get("TEST_TMP", "/tmp/chimera_test_server")
FUZZ_REQUESTS = int(os.environ.get("FUZZ_REQUESTS", "3000"))
KEY = "s3cret-key-0123"
SANITIZER = re.compile(r"ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer|"
                       r"ERROR: LeakSanitizer|SUMMARY: \w+Sanitizer")
failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"FAIL: {what}", flush=True)
    return cond


def run(*args, **kw):
    r = subprocess.run([CHIMERA, *map(str, args)], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"chimera {' '.join(map(str, args))} failed: {r.stderr}")
    return r.stdout


class Server:
    """A `chimera serve` process on a free port; stderr goes to a file that is checked
    for sanitizer reports when it stops."""

    def __init__(self, indexes, *extra, name="server"):
        self.log = os.path.join(TMP, f"{name}.log")
        self.errf = open(self.log, "ab")
        args = [CHIMERA, "serve", "--port", "0"]
        for n, d in indexes.items():
            args += ["--index", f"{n}={d}"]
        args += list(map(str, extra))
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.errf, text=True)
        line = self.p.stdout.readline()
        m = re.search(r":(\d+) \(", line)
        if not m:
            self.p.kill()
            raise RuntimeError(f"server did not start: {line!r}; log: {open(self.log).read()[-2000:]}")
        self.port = int(m.group(1))

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def stop(self, sig=signal.SIGTERM, timeout=120):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            check(False, "server did not exit after SIGTERM")
        self.errf.close()
        text = open(self.log, errors="replace").read()
        check(not SANITIZER.search(text), f"sanitizer report in {self.log}:\n" + text[-4000:])
        return rc


def call(srv, method, path, body=None, key=KEY, ctype="application/json", conn=None, raw=None):
    """One request; returns (status, parsed JSON or text)."""
    c = conn or srv.conn()
    headers = {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    if data is not None and ctype:
        headers["Content-Type"] = ctype
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    text = r.read().decode("utf-8", "replace")
    if conn is None:
        c.close()
    try:
        return r.status, json.loads(text)
    except ValueError:
        return r.status, text


def is_error(st, body, status, code=None):
    ok = st == status and isinstance(body, dict) and isinstance(body.get("code"), str) and \
        isinstance(body.get("message"), str) and (code is None or body["code"] == code)
    return check(ok, f"expected {status} {code or ''}, got {st} {str(body)[:300]}")


def b64(a, dtype=np.float32):
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode()


def trec(path, nq, k):
    ids = np.full((nq, k), -1, np.int64)
    scores = np.full((nq, k), -np.inf, np.float32)
    for line in open(path):
        q, _, d, rank, s, _ = line.split()
        ids[int(q), int(rank) - 1] = int(d)
        scores[int(q), int(rank) - 1] = float(s)
    return ids, scores


def cli_search(idx, queries_npy, k, *extra, qlens=None):
    out = os.path.join(TMP, "cli.trec")
    args = ["search", idx, "--queries", queries_npy, "-k", k, "--out", out, *extra]
    if qlens:
        args += ["--qlens", qlens]
    run(*args)
    n = len(np.load(qlens)) if qlens else np.load(queries_npy).shape[0]
    return trec(out, n, k)


def same(results, ids, scores, what):
    ok = len(results) == len(ids)
    for i, r in enumerate(results if ok else []):
        n = int((ids[i] >= 0).sum())
        if r["ids"] != ids[i, :n].tolist() or not np.allclose(r["scores"], scores[i, :n], rtol=1e-5, atol=1e-4):
            ok = False
            print(f"  query {i}: server {r['ids']} {r['scores'][:3]} cli {ids[i, :n].tolist()} {scores[i, :3]}")
            break
    return check(ok, f"search results equal the CLI's: {what}")


# ---------------------------------------------------------------------------------------
def setup():
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    corpus = os.path.join(TMP, "c")
    run("gen", "--out", corpus, "--docs", 400, "--queries", 24, "--dim", 64, "--min-len", 8,
        "--max-len", 40, "--query-len", 8, "--seed", 3)
    idx = os.path.join(TMP, "idx")
    run("build", "--tokens", f"{corpus}/tokens.npy", "--doclens", f"{corpus}/doclens.npy", "--out", idx,
        "--no-sync", "--threads", 2)
    with open(os.path.join(TMP, "meta.jsonl"), "w") as f:
        for i in range(400):
            f.write(json.dumps({"id": i, "year": 2000 + i % 25, "lang": "en" if i % 3 else "fr"}) + "\n")
    run("meta", "import", idx, "--jsonl", os.path.join(TMP, "meta.jsonl"))
    # a tuned profile, for "recall" (tune stores it only when the held-out lower bound
    # of 100 pseudo-queries reaches the target: 0.8 does on this corpus)
    run("tune", idx, "--tokens", f"{corpus}/tokens.npy", "--doclens", f"{corpus}/doclens.npy",
        "--target-recall", 0.8, "-k", 10, "--pseudo", 100, "--threads", 2)
    with open(os.path.join(TMP, "key"), "w") as f:
        f.write(KEY + "\n")
    return corpus, idx


def test_endpoints(srv, corpus, idx):
    st, b = call(srv, "GET", "/health", key=None)
    check(st == 200 and b["status"] == "ok", f"/health without a key: {st} {b}")
    is_error(*call(srv, "GET", "/indexes", key=None), 401, "UNAUTHORIZED")
    is_error(*call(srv, "GET", "/indexes", key="wrong"), 401, "UNAUTHORIZED")
    is_error(*call(srv, "GET", "/indexes", key=KEY + "x"), 401, "UNAUTHORIZED")
    is_error(*call(srv, "POST", "/indexes/main/search", {"queries": [[[0.0] * 64]]}, key=None), 401)
    c = srv.conn()
    c.request("GET", "/indexes", headers={"api-key": KEY})
    r = c.getresponse()
    check(r.status == 200, "api-key header accepted")
    r.read()
    c.close()
    st, b = call(srv, "GET", "/indexes")
    check(st == 200 and [x["name"] for x in b["indexes"]] == ["main", "scratch"], f"/indexes: {b}")
    st, b = call(srv, "GET", "/indexes/main")
    check(st == 200 and b["dim"] == 64 and b["n_docs"] == 400 and b["n_tokens"] > 0 and "sections" in b,
          f"/indexes/main: {str(b)[:300]}")
    # a second server on the same port is refused, not given half the connections
    r = subprocess.run([CHIMERA, "serve", "--index", f"main={idx}", "--port", str(srv.port)],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "cannot listen" in r.stderr, f"port in use: {r.returncode} {r.stderr}")
    is_error(*call(srv, "GET", "/indexes/nope"), 404, "INDEX_NOT_FOUND")
    is_error(*call(srv, "POST", "/indexes/nope/search", {"queries": [[[0.0] * 64]]}), 404, "INDEX_NOT_FOUND")
    is_error(*call(srv, "GET", "/nothing/here"), 404, "NOT_FOUND")
    is_error(*call(srv, "GET", "/indexes/main/search"), 405, "METHOD_NOT_ALLOWED")
    is_error(*call(srv, "PATCH", "/indexes/main/documents", {}), 405, "METHOD_NOT_ALLOWED")
    st, text = call(srv, "GET", "/metrics")
    check(st == 200 and "chimera_http_requests_total{endpoint=\"health\"}" in text and
          "chimera_index_generation{index=\"main\"}" in text and "chimera_search_batch_size_bucket" in text,
          "/metrics in Prometheus text")
    st, spec = call(srv, "GET", "/openapi.json")
    check(st == 200 and spec.get("openapi", "").startswith("3.") and
          {"/health", "/indexes", "/indexes/{name}", "/indexes/{name}/search", "/indexes/{name}/documents",
           "/metrics", "/openapi.json"} <= set(spec["paths"]) and
          {"post", "put", "delete"} <= set(spec["paths"]["/indexes/{name}/documents"]), "/openapi.json")


def test_search(srv, corpus, idx):
    qnpy = f"{corpus}/queries.npy"
    q = np.load(qnpy)
    nq = q.shape[0]
    ids, scores = cli_search(idx, qnpy, 10)
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": q.tolist(), "k": 10})
    check(st == 200, f"search nested: {st}") and same(b["results"], ids, scores, "nested JSON")
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": {"base64": b64(q), "dtype": "float32", "shape": list(q.shape)}, "k": 10})
    check(st == 200, f"search base64: {st}") and same(b["results"], ids, scores, "base64 float32")
    # [total, dim] with per-query lengths: queries of different lengths
    lens = np.array([3 + i % 6 for i in range(nq)], np.int64)
    flat = np.concatenate([q[i, :lens[i]] for i in range(nq)])
    np.save(f"{TMP}/flat.npy", flat)
    np.save(f"{TMP}/qlens.npy", lens)
    fids, fscores = cli_search(idx, f"{TMP}/flat.npy", 10, qlens=f"{TMP}/qlens.npy")
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": {"base64": b64(flat), "shape": list(flat.shape), "lengths": lens.tolist()}, "k": 10})
    check(st == 200, f"search lengths: {st} {b if st != 200 else ''}") and \
        same(b["results"], fids, fscores, "base64 with lengths")
    # lengths that do not add up to the shape: refused by name
    for bad in (lens.tolist()[:-1], lens.tolist() + [1]):
        st, b = call(srv, "POST", "/indexes/main/search",
                     {"queries": {"base64": b64(flat), "shape": list(flat.shape), "lengths": bad}, "k": 10})
        is_error(st, b, 422, "INVALID_SHAPE") and \
            check("lengths add up" in b["message"], f"lengths that do not add up: {b}")
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": [flat[lens[:i].sum():lens[:i + 1].sum()].tolist() for i in range(nq)], "k": 10})
    check(st == 200, f"search ragged nested: {st}") and same(b["results"], fids, fscores, "ragged nested arrays")
    # float16: the CLI reads float16 .npy too
    np.save(f"{TMP}/q16.npy", q.astype(np.float16))
    hids, hscores = cli_search(idx, f"{TMP}/q16.npy", 10)
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": {"base64": b64(q, np.float16), "dtype": "float16", "shape": list(q.shape)}, "k": 10})
    check(st == 200, f"search float16: {st}") and same(b["results"], hids, hscores, "base64 float16")
    # explicit parameters
    pids, pscores = cli_search(idx, qnpy, 7, "--nprobe", 16, "--k-refine", 64, "--k-fullbit", 20, "--chunks", 2,
                               "--impute", "min", "--probe", "brute")
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": {"base64": b64(q), "shape": list(q.shape)}, "k": 7,
                  "params": {"n_probe": 16, "k_refine": 64, "k_fullbit": 20, "chunks": 2, "impute": "min",
                             "probe": "brute"}})
    check(st == 200, f"search params: {st}") and same(b["results"], pids, pscores, "explicit params")
    # the probe floor's scale: as the CLI's flag, and refused outside (0, 1]
    cids, cscores = cli_search(idx, qnpy, 7, "--nprobe", 4, "--impute-scale", 0.5)
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": {"base64": b64(q), "shape": list(q.shape)}, "k": 7,
                  "params": {"n_probe": 4, "impute_scale": 0.5}})
    check(st == 200, f"search impute_scale: {st}") and same(b["results"], cids, cscores, "impute_scale 0.5")
    for bad in (0, 1.5, -1, "half"):
        is_error(*call(srv, "POST", "/indexes/main/search",
                       {"queries": q[:1].tolist(), "k": 10, "params": {"impute_scale": bad}}), 422, "INVALID_VALUE")
    # a tuned profile
    rids, rscores = cli_search(idx, qnpy, 10, "--recall", 0.8)
    st, b = call(srv, "POST", "/indexes/main/search",
                 {"queries": {"base64": b64(q), "shape": list(q.shape)}, "k": 10, "recall": 0.8})
    check(st == 200, f"search recall: {st} {b if st != 200 else ''}") and same(b["results"], rids, rscores, "recall 0.8")
    is_error(*call(srv, "POST", "/indexes/main/search", {"queries": q[:1].tolist(), "k": 10, "recall": 0.999}),
             422, "NO_PROFILE")
    # filters: subset, exclude, per-query subsets, SQL filter. Explicit parameters on
    # both sides below; the profile's and the defaults' depths are deepened for a
    # filtered search by the library, on both sides alike:
    subset = list(range(0, 400, 3))
    with open(f"{TMP}/subset.txt", "w") as f:
        f.write("\n".join(map(str, subset)) + "\n")
    rids, rscores = cli_search(idx, qnpy, 10, "--recall", 0.8, "--subset", f"{TMP}/subset.txt")
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": {"base64": b64(q), "shape": list(q.shape)},
                                                         "k": 10, "recall": 0.8, "subset": subset})
    check(st == 200, f"search recall + subset: {st}") and same(b["results"], rids, rscores, "recall 0.8, subset")
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": q[:2].tolist(), "k": 10, "recall": 0.8,
                                                         "profile": True})
    flat = b.get("profile", {}).get("params", {}) if st == 200 else {}
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": q[:2].tolist(), "k": 10, "recall": 0.8,
                                                         "subset": subset, "profile": True})
    deep = b.get("profile", {}).get("params", {}) if st == 200 else {}
    # (a profile whose centroid interaction keeps only k_fullbit documents has no deeper
    # ones to re-score)
    capped = 0 < flat.get("k_interaction", 0) <= flat.get("k_fullbit", 0)
    check(flat.get("k_fullbit", 0) > 0 and (deep.get("k_fullbit", 0) > flat["k_fullbit"] or
                                            (capped and deep.get("k_fullbit") == flat["k_fullbit"])),
          f"profile params, recall 0.8 without and with a filter: {flat} {deep}")
    FP = {"n_probe": 8, "k_refine": 160, "k_fullbit": 40, "chunks": 4}
    FA = ["--nprobe", 8, "--k-refine", 160, "--k-fullbit", 40, "--chunks", 4]
    subset = list(range(0, 400, 3))
    with open(f"{TMP}/subset.txt", "w") as f:
        f.write("\n".join(map(str, subset)) + "\n")
    sids, sscores = cli_search(idx, qnpy, 10, "--subset", f"{TMP}/subset.txt", *FA)
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": {"base64": b64(q), "shape": list(q.shape)},
                                                         "k": 10, "subset": subset, "params": FP})
    check(st == 200, f"search subset: {st}") and same(b["results"], sids, sscores, "subset")
    eids, escores = cli_search(idx, qnpy, 10, "--exclude", f"{TMP}/subset.txt", *FA)
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": {"base64": b64(q), "shape": list(q.shape)},
                                                         "k": 10, "exclude": subset, "params": FP})
    check(st == 200, f"search exclude: {st}") and same(b["results"], eids, escores, "exclude")
    per = [[(7 * i + j) % 400 for j in range(5)] for i in range(nq)]
    with open(f"{TMP}/per.tsv", "w") as f:
        for i, l in enumerate(per):
            for d in l:
                f.write(f"{i} {d}\n")
    qids, qscores = cli_search(idx, qnpy, 10, "--subset-per-query", f"{TMP}/per.tsv", *FA)
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": {"base64": b64(q), "shape": list(q.shape)},
                                                         "k": 10, "subset": per, "params": FP})
    check(st == 200, f"search per-query subset: {st}") and same(b["results"], qids, qscores, "per-query subsets")
    xids, xscores = cli_search(idx, qnpy, 10, "--filter", "year >= ? AND lang = ?", "--filter-args", "2020", "en", *FA)
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": {"base64": b64(q), "shape": list(q.shape)},
                                                         "k": 10, "filter": "year >= ? AND lang = ?",
                                                         "filter_args": [2020, "en"], "params": FP})
    check(st == 200, f"search filter: {st} {b if st != 200 else ''}") and same(b["results"], xids, xscores, "SQL filter")
    is_error(*call(srv, "POST", "/indexes/main/search", {"queries": q[:1].tolist(), "filter": "1); DROP TABLE meta; --"}),
             422, "INVALID_FILTER")
    # the exact re-rank tier: an index built with --rerank f16 (stored vectors), and with
    # ids past 2^53, which a JSON number printed from a double would round
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": q[:1].tolist(), "params": {"rerank_depth": 20}})
    is_error(st, b, 422)  # main stores no vectors
    rr = os.path.join(TMP, "rerank.idx")
    if not os.path.isdir(rr):
        np.save(f"{TMP}/big_ids.npy", (2 ** 60 + 7 * np.arange(len(np.load(f"{corpus}/doclens.npy")))).astype(np.int64))
        run("build", "--tokens", f"{corpus}/tokens.npy", "--doclens", f"{corpus}/doclens.npy", "--out", rr,
            "--no-sync", "--threads", 2, "--rerank", "f16", "--ids", f"{TMP}/big_ids.npy")
    rsrv = Server({"rr": rr}, "--quiet", name="rerank")
    try:
        gids, gscores = cli_search(rr, qnpy, 10, "--rerank-depth", 30)
        st, b = call(rsrv, "POST", "/indexes/rr/search", {"queries": {"base64": b64(q), "shape": list(q.shape)},
                                                          "k": 10, "params": {"rerank_depth": 30}, "profile": True})
        check(st == 200 and b["profile"]["n_reranked"] > 0, f"rerank: {st} {str(b)[:300]}") and \
            check(gids[gids >= 0].min() >= 2 ** 60, f"ids past 2^53 in the CLI's answer: {gids[0]}") and \
            same(b["results"], gids, gscores, "rerank_depth 30, ids past 2^53")
        st, b = call(rsrv, "GET", "/indexes/rr")
        check(st == 200 and b.get("rerank") == "f16", f"info names the rerank tier: {b.get('rerank')}")
    finally:
        check(rsrv.stop() == 0, "rerank server: clean exit")
    # profile: per-stage times
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": q[:2].tolist(), "k": 10, "profile": True})
    p = b.get("profile", {}) if st == 200 else {}
    check(st == 200 and all(x in p for x in ("generate_ms", "refine_ms", "score1_ms", "fullbit_ms", "queue_ms",
                                             "search_ms")) and p["generate_ms"] >= 0,
          f"profile: {st} {p}") and same(b["results"], ids[:2], scores[:2], "profile: true")
    # concurrent clients, one query each: gathered into batches, same answers
    out = [None] * nq
    def one(i):
        out[i] = call(srv, "POST", "/indexes/main/search",
                      {"queries": {"base64": b64(q[i:i + 1]), "shape": [1, *q.shape[1:]]}, "k": 10})
    for _ in range(3):
        ts = [threading.Thread(target=one, args=(i,)) for i in range(nq)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        check(all(o[0] == 200 for o in out), "concurrent searches answered 200")
        same([o[1]["results"][0] for o in out], ids, scores, "concurrent single-query requests")
    # mixed concurrent requests: one with a bad parameter does not fail the others
    bad = [None]
    def badone():
        bad[0] = call(srv, "POST", "/indexes/main/search", {"queries": q[:1].tolist(), "k": 10,
                                                             "subset": [-5]})
    ts = [threading.Thread(target=one, args=(i,)) for i in range(8)] + [threading.Thread(target=badone)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(all(o[0] == 200 for o in out[:8]), "good requests beside a bad one answered 200")
    is_error(*bad[0], 422)
    st, text = call(srv, "GET", "/metrics")
    m = re.search(r"chimera_search_batch_size_sum (\d+)", text)
    m2 = re.search(r"chimera_search_batches_total (\d+)", text)
    check(m and m2 and int(m.group(1)) > int(m2.group(1)), "some batches held more than one query")


def test_errors(srv, limited, corpus):
    q = np.load(f"{corpus}/queries.npy")
    P = "/indexes/main/search"
    is_error(*call(srv, "POST", P, raw="{\"queries\": [[[1, 2"), 400, "BAD_JSON")
    is_error(*call(srv, "POST", P, raw=""), 400, "BAD_JSON")
    is_error(*call(srv, "POST", P, raw="[1, 2]"), 400, "BAD_JSON")
    is_error(*call(srv, "POST", P, raw="{} trailing"), 400, "BAD_JSON")
    is_error(*call(srv, "POST", P, {"k": 3}), 400)
    is_error(*call(srv, "POST", P, {"queries": [[[0.5] * 63]]}), 422, "DIMENSION_MISMATCH")
    is_error(*call(srv, "POST", P, {"queries": {"base64": b64(q[:, :, :32]), "shape": [24, 8, 32]}}), 422,
             "DIMENSION_MISMATCH")
    is_error(*call(srv, "POST", P, {"queries": {"base64": b64(q), "dtype": "float64", "shape": list(q.shape)}}),
             422, "UNSUPPORTED_DTYPE")
    is_error(*call(srv, "POST", P, {"queries": {"base64": b64(q), "dtype": "int8", "shape": list(q.shape)}}),
             422, "UNSUPPORTED_DTYPE")
    is_error(*call(srv, "POST", P, {"queries": {"base64": b64(q)[:-8], "shape": list(q.shape)}}), 422)
    is_error(*call(srv, "POST", P, {"queries": {"base64": "!!!!" * 4, "shape": [1, 1, 64]}}), 422)
    is_error(*call(srv, "POST", P, {"queries": [[["x"] * 64]]}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, raw='{"queries": [[[' + ",".join(["1e400"] * 64) + "]]]}"), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, raw='{"queries": [[[' + ",".join(["NaN"] * 64) + "]]]}"), 400, "BAD_JSON")
    nanq = q[:1].copy()
    nanq[0, 0, 0] = np.nan
    is_error(*call(srv, "POST", P, {"queries": {"base64": b64(nanq), "shape": [1, 8, 64]}}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, {"queries": []}), 422, "EMPTY")
    is_error(*call(srv, "POST", P, {"queries": [[]]}), 422, "EMPTY")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "k": 0}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "k": 1001}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "k": 1e300}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "k": 2.5}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "k": "10"}), 422, "INVALID_VALUE")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "params": {"n_probe": -1}}), 422)
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "params": {"probe": "sideways"}}), 422)
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "subset": [1], "filter": "year > 1"}), 422)
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist(), "profile": "yes"}), 422)
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist()}, ctype="text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")
    is_error(*call(srv, "POST", P, {"queries": q[:1].tolist()}, ctype="application/x-www-form-urlencoded"), 415)
    # the limited server: --max-body 1 (MiB), --max-queries 16, --max-k 20, --max-query-tokens 16
    L = limited
    is_error(*call(L, "POST", P, {"queries": {"base64": b64(q[:1]), "shape": [1, 8, 64]}, "k": 21}), 422)
    is_error(*call(L, "POST", P, {"queries": {"base64": b64(q[:17]), "shape": [17, 8, 64]}, "k": 5}), 422,
             "LIMIT_EXCEEDED")
    is_error(*call(L, "POST", P, {"queries": [q[0].tolist()] * 17, "k": 5}), 422, "LIMIT_EXCEEDED")
    is_error(*call(L, "POST", P, {"queries": {"base64": b64(np.zeros((1, 17, 64))), "shape": [1, 17, 64]}}),
             422, "LIMIT_EXCEEDED")
    # 413: declared too long (answered before the body is sent), and sent too long
    s = socket.create_connection(("127.0.0.1", L.port), timeout=10)
    s.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {3 << 20}\r\n\r\n".encode())
    resp = s.recv(65536).decode("utf-8", "replace")
    s.close()
    check(resp.startswith("HTTP/1.1 413") and '"PAYLOAD_TOO_LARGE"' in resp, f"413 for a declared length: {resp[:200]}")
    st, b = (None, None)
    try:
        st, b = call(L, "POST", P, raw="{\"queries\": \"" + "A" * (2 << 20) + "\"}")
    except (BrokenPipeError, ConnectionResetError):
        st, b = 413, {"code": "PAYLOAD_TOO_LARGE", "message": "(connection closed while sending)"}
    is_error(st, b, 413, "PAYLOAD_TOO_LARGE")
    # a chunked body that grows past the limit
    s = socket.create_connection(("127.0.0.1", L.port), timeout=10)
    s.sendall(f"POST {P} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Transfer-Encoding: chunked\r\n\r\n".encode())
    chunk = b"A" * 65536
    try:
        for _ in range(24):
            s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
        s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    resp = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            resp += d
            if b"}" in resp:
                break
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    check(resp.startswith(b"HTTP/1.1 413"), f"413 for a chunked body: {resp[:200]}")
    # --max-parse-memory 16 (MiB): 400,000 numbers in 0.8 MB would take ~32 MB once parsed
    st, b = call(L, "POST", P, raw='{"queries": [[[' + ",".join(["0"] * 400000) + "]]]}")
    is_error(st, b, 413, "PAYLOAD_TOO_LARGE")
    check("--max-parse-memory" in b.get("message", ""), f"the 413 names --max-parse-memory: {b}")
    # strings cost a copy each: 150,000 empty keys and values in 0.9 MB take ~22 MB
    st, b = call(L, "POST", P, raw='{"x": {' + ",".join(['"":""'] * 150000) + '}, "queries": []}')
    is_error(st, b, 413, "PAYLOAD_TOO_LARGE")
    # one under the budget is parsed (and refused for its shape), again and again: each
    # parse gives back what it reserved
    for i in range(4):
        st, b = call(L, "POST", P, raw='{"queries": [[[' + ",".join(["0"] * 150000) + "]]]}")
        is_error(st, b, 422)
    # bodies that fit the budget one at a time, sent at once: each is parsed (422 for its
    # shape) or told to retry (503 BUSY with Retry-After); rounds until one was told
    big = '{"queries": [[[' + ",".join(["0"] * 150000) + "]]]}"

    def send_big(out):
        c = L.conn(timeout=30)
        c.request("POST", P, body=big, headers={"Authorization": f"Bearer {KEY}",
                                                "Content-Type": "application/json"})
        r = c.getresponse()
        out.append((r.status, r.getheader("Retry-After"), r.read()))
        c.close()

    answers = []
    for _ in range(5):
        ts = [threading.Thread(target=send_big, args=(answers,)) for _ in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if any(a[0] == 503 for a in answers):
            break
    check(any(a[0] == 503 for a in answers), "no body was told to retry: the parse budget "
          "let every one through at once")
    for st, retry, text in answers:
        check(st == 422 or (st == 503 and b'"BUSY"' in text and retry == "1"),
              f"a body beside others: {st} Retry-After={retry} {text[:200]!r}")
    print(f"  parse budget under load: {sum(a[0] == 503 for a in answers)} of {len(answers)} "
          f"told to retry")


def test_slow_clients(srv):
    """More stalled connections than HTTP threads: others are still served, and the
    stalled ones are closed after the idle timeout (--timeout 2)."""
    socks = []
    for i in range(24):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"POST /indexes/main/search HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n" if i % 2
                  else b"GET /hea")
        socks.append(s)
    t0 = time.time()
    st, b = call(srv, "GET", "/health")
    check(st == 200 and time.time() - t0 < 1.0, f"served beside 24 stalled clients in {time.time() - t0:.2f}s")
    time.sleep(3.5)
    closed = 0
    for s in socks:
        try:
            s.settimeout(2)
            closed += s.recv(100) == b"" or True
        except (ConnectionResetError, socket.timeout):
            pass
        s.close()
    check(closed == len(socks), f"stalled clients timed out ({closed}/{len(socks)} closed)")


def test_writes(srv, corpus):
    """add, update and delete on the scratch index; searches see each change at once."""
    rng = np.random.default_rng(5)
    def docs(n, ntok=12):
        d = rng.standard_normal((n, ntok, 64)).astype(np.float32)
        return d / np.linalg.norm(d, axis=2, keepdims=True)
    D = docs(3)
    ids = [1000, 1001, 1002]
    st, b = call(srv, "POST", "/indexes/scratch/documents",
                 {"documents": [{"id": ids[i], "embeddings": D[i].tolist(), "metadata": {"year": 1990, "lang": "de"}}
                                for i in range(3)]})
    check(st == 200 and b["status"] == "committed" and b["docs_added"] == 3 and b["visible"], f"add: {st} {b}")
    gen = b.get("generation", 0)
    st, b = call(srv, "POST", "/indexes/scratch/search", {"queries": D.tolist(), "k": 3})
    check(st == 200 and [r["ids"][0] for r in b["results"]] == ids, f"added documents are found: {b}")
    st, b = call(srv, "POST", "/indexes/scratch/search", {"queries": D[:1].tolist(), "k": 5,
                                                           "filter": "lang = ?", "filter_args": ["de"]})
    check(st == 200 and sorted(b["results"][0]["ids"]) == ids, f"their metadata came with them: {b}")
    is_error(*call(srv, "POST", "/indexes/scratch/documents",
                   {"documents": [{"id": 1000, "embeddings": D[0].tolist()}]}), 422, "WRITE_REJECTED")
    is_error(*call(srv, "POST", "/indexes/scratch/documents",
                   {"documents": [{"id": 1003, "embeddings": D[0][:, :32].tolist()}]}), 422, "DIMENSION_MISMATCH")
    is_error(*call(srv, "POST", "/indexes/scratch/documents", {"documents": [{"id": -1, "embeddings": D[0].tolist()}]}),
             422)
    # 400,000 lengths against a shape of one vector: refused as soon as they pass it
    # (a list walked entry by entry from its head would take minutes), the index unchanged
    st, b = call(srv, "POST", "/indexes/scratch/documents",
                 {"ids": [2100], "embeddings": {"base64": b64(D[0][:1]), "shape": [1, D.shape[2]]},
                  "lengths": [1] * 400000})
    is_error(st, b, 422, "INVALID_SHAPE") and \
        check("lengths add up to more than 1," in b["message"], f"a long lengths list: {b}")
    # columnar base64 add, float16, several documents of different lengths
    E = docs(4, 20)
    lens = [5, 20, 9, 14]
    flat = np.concatenate([E[i, :lens[i]] for i in range(4)])
    st, b = call(srv, "POST", "/indexes/scratch/documents",
                 {"ids": [2000, 2001, 2002, 2003],
                  "embeddings": {"base64": b64(flat, np.float16), "dtype": "float16", "shape": list(flat.shape)},
                  "lengths": lens})
    check(st == 200 and b["generation"] > gen, f"columnar add: {st} {b}")
    st, b = call(srv, "POST", "/indexes/scratch/search",
                 {"queries": [E[i, :lens[i]].tolist() for i in range(4)], "k": 1})
    check(st == 200 and [r["ids"][0] for r in b["results"]] == [2000, 2001, 2002, 2003], f"found: {b}")
    # update: document 1000 takes 2000's vectors
    st, b = call(srv, "PUT", "/indexes/scratch/documents", {"documents": [{"id": 1000, "embeddings": D[2].tolist()}]})
    check(st == 200 and b.get("docs_deleted") == 1, f"update: {st} {b}")
    st, b = call(srv, "POST", "/indexes/scratch/search", {"queries": D[2:3].tolist(), "k": 2})
    check(st == 200 and sorted(b["results"][0]["ids"]) == [1000, 1002], f"updated document found: {b}")
    is_error(*call(srv, "PUT", "/indexes/scratch/documents", {"documents": [{"id": 5555, "embeddings": D[2].tolist()}]}),
             422, "WRITE_REJECTED")
    # delete by ids, then by filter
    st, b = call(srv, "DELETE", "/indexes/scratch/documents", {"ids": [2001]})
    check(st == 200 and b.get("docs_deleted") == 1, f"delete by ids: {st} {b}")
    st, b = call(srv, "POST", "/indexes/scratch/search", {"queries": [E[1, :20].tolist()], "k": 3})
    check(st == 200 and 2001 not in b["results"][0]["ids"], f"deleted document gone: {b}")
    is_error(*call(srv, "DELETE", "/indexes/scratch/documents", {"ids": [987654]}), 422)
    st, b = call(srv, "DELETE", "/indexes/scratch/documents", {"ids": [987654], "missing_ok": True})
    check(st == 200 and b.get("ids_missing") == 1, f"delete missing_ok: {st} {b}")
    st, b = call(srv, "DELETE", "/indexes/scratch/documents", {"filter": "lang = ?", "filter_args": ["de"]})
    # 1000, 1001, 1002: an update keeps the document's record when it brings none
    check(st == 200 and b.get("docs_deleted") == 3, f"delete by filter: {st} {b}")
    st, b = call(srv, "POST", "/indexes/scratch/search", {"queries": D[:3].tolist(), "k": 3,
                                                           "subset": [1001, 1002]})
    check(st == 200 and all(r["ids"] == [] for r in b["results"]), f"filtered deletes gone: {b}")
    st, b = call(srv, "DELETE", "/indexes/scratch/documents", {"filter": "lang = ?", "filter_args": ["xx"]})
    check(st == 200 and b.get("docs_deleted") == 0, f"a filter that matches nothing: {st} {b}")
    is_error(*call(srv, "DELETE", "/indexes/scratch/documents", {}), 400)
    is_error(*call(srv, "DELETE", "/indexes/scratch/documents", {"ids": [1], "filter": "x"}), 400)
    # concurrent adds are group-committed and each answered
    res = []
    def add(i):
        res.append(call(srv, "POST", "/indexes/scratch/documents",
                        {"documents": [{"id": 3000 + i, "embeddings": docs(1, 8)[0].tolist()}]}))
    ts = [threading.Thread(target=add, args=(i,)) for i in range(12)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(len(res) == 12 and all(r[0] == 200 for r in res), f"12 concurrent adds: {[r[0] for r in res]}")
    st, b = call(srv, "GET", "/indexes/scratch")
    check(st == 200 and b["n_docs"] == 400 + 7 - 1 - 3 + 12, f"documents counted: {b.get('n_docs')}")
    # a change another process commits (the CLI) is seen within a couple of seconds
    scratch = os.path.join(TMP, "scratch.idx")
    run("delete", scratch, "--id", 3000)
    for _ in range(50):
        st, b = call(srv, "POST", "/indexes/scratch/search", {"queries": D[:1].tolist(), "k": 3, "subset": [3000]})
        if st == 200 and b["results"][0]["ids"] == []:
            break
        time.sleep(0.1)
    check(st == 200 and b["results"][0]["ids"] == [], f"the CLI's delete is seen by the server: {b}")
    st, text = call(srv, "GET", "/metrics")
    check("chimera_writes_total" in text and re.search(r'chimera_index_generation\{index="scratch"\} (\d+)', text)
          and int(re.search(r'chimera_index_generation\{index="scratch"\} (\d+)', text).group(1)) > 2,
          "metrics count writes and generations")


def fuzz_bodies(rng, q):
    """Malformed and hostile bodies, generated."""
    valid = json.dumps({"queries": q[:2].tolist(), "k": 5})
    kinds = [
        lambda: bytes(rng.integers(0, 256, rng.integers(0, 400), dtype=np.uint8)).decode("latin-1"),
        lambda: valid[:rng.integers(0, len(valid))],
        lambda: "[" * int(rng.integers(500, 5000)) + "]" * int(rng.integers(0, 10)),
        lambda: '{"queries": ' + "[" * int(rng.integers(1, 3000)) + "1" + "]" * int(rng.integers(0, 3000)) + "}",
        lambda: json.dumps({"queries": q[:1].tolist(), "k": float(rng.choice([1e308, -1e308, 2 ** 63, -1, 0.5]))}),
        lambda: '{"queries": [[[' + ",".join(rng.choice(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1e-999"],
                                                          64)) + "]]]}",
        lambda: json.dumps({"queries": {"base64": "A" * int(rng.integers(0, 200)), "shape": [int(x) for x in
                                        rng.integers(-3, 1 << 40, rng.integers(0, 5))],
                                        "dtype": str(rng.choice(["float32", "float16", "x", ""]))}}),
        lambda: json.dumps({"queries": {"base64": b64(q[:1]), "shape": [1, 8, 64], "lengths": [1, 2]}}),
        lambda: json.dumps({"queries": [[[1.0] * int(rng.integers(0, 130))] * int(rng.integers(0, 4))]}),
        lambda: json.dumps({"queries": q[:1].tolist(), "subset": [int(x) for x in rng.integers(-5, 1 << 62, 4)]}),
        lambda: json.dumps({"queries": q[:1].tolist(), "subset": [[1], [2]], "filter_args": [1]}),
        lambda: json.dumps({"queries": q[:1].tolist(), "filter": "".join(rng.choice(list("ab()=?'; -"), 30))}),
        lambda: mutate(valid, rng),
        lambda: json.dumps({"documents": [{"id": int(rng.integers(-2, 10)), "embeddings": [[0.1] * 64]}] *
                           int(rng.integers(0, 3))}) if rng.random() < 0.3 else "{\"documents\": 7}",
        lambda: json.dumps({"ids": [1, 2], "embeddings": {"base64": "AAAA", "shape": [1, 64]}, "lengths": [1]}),
        lambda: "\"" + "\\u0000" * 100 + "\"",
        lambda: "{" + ",".join(f'"k{i}": {i}' for i in range(int(rng.integers(0, 3000)))) + "}",
    ]
    return kinds[int(rng.integers(0, len(kinds)))]()


def mutate(s, rng):
    b = bytearray(s.encode())
    for _ in range(int(rng.integers(1, 8))):
        i = int(rng.integers(0, len(b)))
        op = rng.integers(0, 3)
        if op == 0:
            b[i] = int(rng.integers(0, 256))
        elif op == 1:
            del b[i:i + int(rng.integers(1, 20))]
        else:
            b[i:i] = bytes(rng.integers(0, 256, 5, dtype=np.uint8))
    return b.decode("latin-1")


def test_fuzz(srv, corpus, idx):
    rng = np.random.default_rng(11)
    q = np.load(f"{corpus}/queries.npy")
    paths = ["/indexes/main/search", "/indexes/scratch/documents", "/indexes/main", "/metrics",
             "/indexes/%00/search", "/indexes/" + "x" * 3000, "/health?x=1"]
    methods = ["POST", "POST", "POST", "PUT", "DELETE", "GET", "OPTIONS"]
    ctypes = ["application/json", "application/json", "application/json; charset=utf-8", "text/plain",
              "multipart/form-data; boundary=x", None, "application/x-www-form-urlencoded", "\x01\x02"]
    statuses = {}
    t0 = time.time()
    conn = srv.conn(timeout=30)
    for i in range(FUZZ_REQUESTS):
        kind = i % 10
        try:
            if kind == 0:
                # raw bytes on a socket: random, or a request with a truncated body
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
                if rng.random() < 0.5:
                    s.sendall(bytes(rng.integers(0, 256, int(rng.integers(1, 2000)), dtype=np.uint8)))
                else:
                    body = fuzz_bodies(rng, q).encode("latin-1", "replace")
                    s.sendall(b"POST /indexes/main/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n"
                              % (len(body) + int(rng.integers(1, 100))) + body[:len(body) // 2])
                s.close()
                statuses["raw"] = statuses.get("raw", 0) + 1
                continue
            method = methods[int(rng.integers(0, len(methods)))] if kind == 1 else "POST"
            path = paths[int(rng.integers(0, len(paths)))] if kind in (1, 2) else paths[0]
            ctype = ctypes[int(rng.integers(0, len(ctypes)))] if kind in (1, 3) else "application/json"
            body = fuzz_bodies(rng, q)
            headers = {"Authorization": f"Bearer {KEY}"}
            if ctype:
                headers["Content-Type"] = ctype
            conn.request(method, path, body=body.encode("latin-1", "replace"), headers=headers)
            r = conn.getresponse()
            text = r.read()
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status >= 400 and r.status != 431 and r.status != 414:
                try:
                    e = json.loads(text)
                    ok = isinstance(e.get("code"), str) and isinstance(e.get("message"), str)
                except ValueError:
                    ok = False
                if not check(ok, f"fuzz: error body shape for {r.status}: {text[:200]!r}"):
                    break
            check(r.status < 500 or r.status == 503, f"fuzz: a 5xx answer {r.status}: {text[:300]!r}")
            check(r.status != 503 or r.getheader("Retry-After") == "1",
                  f"fuzz: a 503 without Retry-After: {text[:200]!r}")
            if r.getheader("Connection", "").lower() == "close":
                conn.close()
                conn = srv.conn(timeout=30)
        except (ConnectionError, http.client.HTTPException, socket.timeout) as e:
            statuses["conn"] = statuses.get("conn", 0) + 1
            conn.close()
            conn = srv.conn(timeout=30)
        if srv.p.poll() is not None:
            check(False, f"server died during fuzzing (request {i})")
            return
    conn.close()
    print(f"fuzz: {FUZZ_REQUESTS} requests in {time.time() - t0:.1f}s: {statuses}", flush=True)
    st, b = call(srv, "GET", "/health")
    check(st == 200, "serving after the fuzz run")
    ids, scores = cli_search(idx, f"{corpus}/queries.npy", 10)
    st, b = call(srv, "POST", "/indexes/main/search", {"queries": q.tolist(), "k": 10})
    check(st == 200, "search after fuzz") and same(b["results"], ids, scores, "after the fuzz run")


def test_sigterm(idx, corpus):
    srv = Server({"main": idx}, "--quiet", name="sigterm")
    q = np.load(f"{corpus}/queries.npy")
    big = np.tile(q, (20, 1, 1))
    res = []
    def slow():
        res.append(call(srv, "POST", "/indexes/main/search",
                        {"queries": {"base64": b64(big), "shape": list(big.shape)}, "k": 10,
                         "params": {"n_probe": 64, "k_refine": 400, "k_fullbit": 200}}))
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)
    rc = srv.stop(signal.SIGTERM)
    t.join()
    check(len(res) == 1 and res[0][0] == 200 and len(res[0][1]["results"]) == big.shape[0],
          f"the request in flight at SIGTERM was answered: {res[0][0] if res else None}")
    check(rc == 0, f"exit status after SIGTERM: {rc}")


def ids_in(idx):
    return set(int(x) for x in run("info", idx, "--ids").split())


def test_kill9(corpus, idx):
    """Writers stream adds; kill -9 at a random moment; after a restart every
    acknowledged id is there and searchable, and no request is half there."""
    wdir = os.path.join(TMP, "kill9.idx")
    shutil.rmtree(wdir, ignore_errors=True)
    shutil.copytree(idx, wdir)
    base = ids_in(wdir)
    rng = np.random.default_rng(9)
    next_id = [100000]
    lock = threading.Lock()
    acked, sent = [], []   # lists of id lists
    vecs = {}
    for round_ in range(2):
        srv = Server({"w": wdir}, "--quiet", name=f"kill9-{round_}")
        stop = threading.Event()
        def writer():
            c = srv.conn(timeout=30)
            while not stop.is_set():
                with lock:
                    n = int(rng.integers(1, 4))
                    ids = list(range(next_id[0], next_id[0] + n))
                    next_id[0] += n
                    d = rng.standard_normal((n, 6, 64)).astype(np.float32)
                    d /= np.linalg.norm(d, axis=2, keepdims=True)
                    for i, x in zip(ids, d):
                        vecs[i] = x
                    sent.append(ids)
                try:
                    st, b = call(srv, "POST", "/indexes/w/documents",
                                 {"ids": ids, "embeddings": {"base64": b64(d.reshape(-1, 64)), "shape": [n * 6, 64]},
                                  "lengths": [6] * n}, conn=c)
                except (ConnectionError, http.client.HTTPException, OSError):
                    return
                if st == 200:
                    with lock:
                        acked.append(ids)
                else:
                    check(False, f"add answered {st}: {b}")
                    return
        ts = [threading.Thread(target=writer) for _ in range(4)]
        [t.start() for t in ts]
        time.sleep(float(rng.uniform(1.0, 2.5)))
        srv.p.kill()                      # kill -9
        srv.p.wait()
        stop.set()
        [t.join() for t in ts]
        srv.errf.close()
        log = open(srv.log, errors="replace").read()
        check(not SANITIZER.search(log), f"sanitizer report before kill -9:\n{log[-3000:]}")
    check(len(acked) > 5, f"some adds were acknowledged before the kills ({len(acked)})")
    print(f"kill -9: {len(acked)} of {len(sent)} add requests acknowledged before the kills", flush=True)
    have = ids_in(wdir)
    acked_ids = {i for l in acked for i in l}
    check(acked_ids <= have, f"acknowledged ids lost: {sorted(acked_ids - have)[:10]}")
    acked_set = {tuple(l) for l in acked}
    for l in sent:
        if tuple(l) not in acked_set:
            n = sum(i in have for i in l)
            check(n in (0, len(l)), f"unacknowledged request half present: {l} ({n} of {len(l)})")
    check(have - base <= {i for l in sent for i in l}, "no ids that were never sent")
    # after a restart every acknowledged document is searchable (its own vectors find it)
    srv = Server({"w": wdir}, "--quiet", name="kill9-after")
    sample = sorted(acked_ids)
    sample = [sample[i] for i in np.random.default_rng(1).choice(len(sample), min(40, len(sample)), replace=False)]
    Q = np.stack([vecs[i] for i in sample])
    st, b = call(srv, "POST", "/indexes/w/search", {"queries": {"base64": b64(Q), "shape": list(Q.shape)}, "k": 1,
                                                     "subset": [[i] for i in sample]})
    check(st == 200 and [r["ids"] for r in b["results"]] == [[i] for i in sample],
          "acknowledged documents are searchable after kill -9 and restart")
    st, b = call(srv, "POST", "/indexes/w/search", {"queries": {"base64": b64(Q), "shape": list(Q.shape)}, "k": 1})
    hits = sum(r["ids"][:1] == [i] for r, i in zip(b["results"], sample)) if st == 200 else 0
    check(hits >= 0.9 * len(sample), f"and found by their own vectors: {hits}/{len(sample)}")
    check(srv.stop() == 0, "clean exit after the kill -9 test")


def main():
    corpus, idx = setup()
    scratch = os.path.join(TMP, "scratch.idx")
    shutil.copytree(idx, scratch)
    srv = Server({"main": idx, "scratch": scratch}, "--api-key-file", os.path.join(TMP, "key"), "--threads", 2,
                 "--timeout", 2)
    limited = Server({"main": idx}, "--max-body", 1, "--max-parse-memory", 16, "--max-queries", 16, "--max-k", 20, "--max-query-tokens", 16,
                     "--quiet", name="limited")
    try:
        for name, fn, args in [("endpoints", test_endpoints, (srv, corpus, idx)),
                               ("search", test_search, (srv, corpus, idx)),
                               ("errors", test_errors, (srv, limited, corpus)),
                               ("slow clients", test_slow_clients, (srv,)),
                               ("writes", test_writes, (srv, corpus)),
                               ("fuzz", test_fuzz, (srv, corpus, idx))]:
            t0 = time.time()
            before = failures
            fn(*args)
            print(f"{name}: {'ok' if failures == before else 'FAILED'} ({time.time() - t0:.1f}s)", flush=True)
    finally:
        check(srv.stop() == 0, "main server: clean exit after SIGTERM")
        check(limited.stop() == 0, "limited server: clean exit after SIGTERM")
    for name, fn in [("sigterm", test_sigterm), ("kill -9", test_kill9)]:
        t0 = time.time()
        before = failures
        fn(idx if name == "sigterm" else corpus, corpus if name == "sigterm" else idx)
        print(f"{name}: {'ok' if failures == before else 'FAILED'} ({time.time() - t0:.1f}s)", flush=True)
    log = open(os.path.join(TMP, "server.log"), errors="replace").read()
    check(re.search(r"POST /indexes/main/search 200 [0-9.]+ms", log), "one log line per request")
    print(f"test_server: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
