#!/usr/bin/env python3
"""bench_server.py: `chimera serve` under concurrent clients against the CLI's batched
search, side by side in one run (bench/RESULTS.md, section 5.4).

  1. The corpus: the demo corpus of scripts/demo.sh (12,500 documents, ~1M tokens of
     128-d vectors, 200 queries x 32 tokens; `chimera gen --seed 1`) and its index, made
     under --work unless they are there.
  2. The CLI's throughput mode: `chimera search IDX --queries Q -k K` (all queries in one
     batched call, --threads T), best of --cli-runs runs.
  3. The server: `chimera serve --index bench=IDX --search-threads T --quiet`, and for
     each client count C in --clients, wrk (Debian's, with bench_server.lua) with C
     connections, each one client sending one query per request and waiting for the
     answer, for --seconds seconds after a warm-up: QPS, p50 and p99 latency. Without wrk
     a Python load generator (threads over http.client) does the same.
  4. With --windows W1,W2,...: the same at each --batch-window-us, to tune the window.
Prints a Markdown table (and, with --out, appends it to that file). Loopback only;
every run is bounded in time."""

import argparse
import base64
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, **kw):
    return subprocess.run(list(map(str, args)), check=True, capture_output=True, text=True, **kw).stdout


def ensure_corpus(chimera, work):
    c, idx = os.path.join(work, "corpus"), os.path.join(work, "index")
    if not os.path.exists(os.path.join(c, "queries.npy")):
        print("generating the demo corpus ...", file=sys.stderr, flush=True)
        sh(chimera, "gen", "--out", c, "--docs", 12500, "--queries", 200, "--dim", 128, "--seed", 1)
    if not os.path.isdir(idx):
        print("building the index ...", file=sys.stderr, flush=True)
        sh(chimera, "build", "--tokens", f"{c}/tokens.npy", "--doclens", f"{c}/doclens.npy", "--out", idx)
    return c, idx


def cli_qps(chimera, idx, queries, k, threads, runs):
    best = 0.0
    for _ in range(runs):
        out = sh(chimera, "search", idx, "--queries", queries, "-k", k, "--threads", threads)
        best = max(best, float(re.search(r"([0-9.]+) queries/s", out).group(1)))
    return best


class Server:
    def __init__(self, chimera, idx, threads, window_us, http_threads):
        self.p = subprocess.Popen([chimera, "serve", "--index", f"bench={idx}", "--port", "0", "--quiet",
                                   "--search-threads", str(threads), "--threads", str(http_threads),
                                   "--batch-window-us", str(window_us)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.search(r":(\d+) \(", line)
        if not m:
            raise RuntimeError(f"chimera serve did not start: {line!r} {self.p.stderr.read()}")
        self.port = int(m.group(1))

    def stop(self):
        self.p.terminate()
        self.p.wait(60)


def bodies(queries, k):
    q = np.load(queries).astype(np.float32)
    out = []
    for i in range(q.shape[0]):
        out.append(json.dumps({"queries": {"base64": base64.b64encode(q[i:i + 1].tobytes()).decode(),
                                           "dtype": "float32", "shape": [1, *q.shape[1:]]}, "k": k}))
    return out


def run_wrk(port, clients, seconds, body_file):
    threads = min(clients, 2)
    out = sh("wrk", "-t", threads, "-c", clients, "-d", f"{seconds}s", "--timeout", "30s",
             "-s", os.path.join(ROOT, "bench", "bench_server.lua"), f"http://127.0.0.1:{port}/indexes/bench/search",
             "--", body_file)
    m = re.search(r"RESULT requests=(\d+) duration_us=(\d+) p50_us=(\d+) p99_us=(\d+) non2xx=(\d+) "
                  r"socket_errors=(\d+)", out)
    if not m:
        raise RuntimeError(f"wrk: {out}")
    n, dur, p50, p99, bad, err = map(int, m.groups())
    return {"qps": n / (dur / 1e6), "p50": p50 / 1e3, "p99": p99 / 1e3, "errors": bad + err, "n": n}


def run_python(port, clients, seconds, body_list):
    """The fallback load generator: one thread and one keep-alive connection per client."""
    lat, errors, stop = [], [0], time.time() + seconds
    lock = threading.Lock()

    def client(c):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine, i = [], c
        while time.time() < stop:
            t0 = time.perf_counter()
            conn.request("POST", "/indexes/bench/search", body=body_list[i % len(body_list)],
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            mine.append(time.perf_counter() - t0)
            if r.status != 200:
                errors[0] += 1
            i += clients
        with lock:
            lat.extend(mine)
    t0 = time.time()
    ts = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    el = time.time() - t0
    lat.sort()
    return {"qps": len(lat) / el, "p50": 1e3 * lat[len(lat) // 2], "p99": 1e3 * lat[int(0.99 * (len(lat) - 1))],
            "errors": errors[0], "n": len(lat)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chimera", default=os.path.join(ROOT, "build", "chimera"))
    ap.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "server"))
    ap.add_argument("--clients", default="1,8,32,128")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="search threads, CLI and server")
    ap.add_argument("--http-threads", type=int, default=2)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--window-us", type=int, default=1000)
    ap.add_argument("--windows", default="", help="comma list of batch windows (µs) to compare")
    ap.add_argument("--cli-runs", type=int, default=3)
    ap.add_argument("--python-load", action="store_true", help="the Python load generator even if wrk is there")
    ap.add_argument("--out", help="append the tables to this file")
    a = ap.parse_args()
    corpus, idx = ensure_corpus(a.chimera, a.work)
    queries = os.path.join(corpus, "queries.npy")
    body_list = bodies(queries, a.k)
    body_file = os.path.join(a.work, "bodies.jsonl")
    with open(body_file, "w") as f:
        f.write("\n".join(body_list) + "\n")
    use_wrk = shutil.which("wrk") and not a.python_load
    clients = [int(c) for c in a.clients.split(",")]
    lines = []
    # The CLI is measured before and after the server's rows, and the ratios use the
    # mean: on a shared machine the load may change during the run.
    cli_before = cli_qps(a.chimera, idx, queries, a.k, a.threads, a.cli_runs)
    cli = cli_before
    windows = [int(w) for w in a.windows.split(",")] if a.windows else [a.window_us]
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()[1] if use_wrk else ""
    lines.append(f"load: {'wrk ' + wrk_v if use_wrk else 'Python threads'}, "
                 f"{a.seconds} s per row after a 2 s warm-up; k = {a.k}; server --search-threads {a.threads} "
                 f"--threads {a.http_threads}")
    lines.append("")
    lines.append("| window µs | clients | QPS | x CLI | p50 ms | p99 ms | p99/p50 | mean batch | errors |")
    lines.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in windows:
        srv = Server(a.chimera, idx, a.threads, w, a.http_threads)
        try:
            for c in clients:
                warm = run_wrk(srv.port, c, 2, body_file) if use_wrk else run_python(srv.port, c, 2, body_list)
                del warm
                m0 = metrics(srv.port)
                r = run_wrk(srv.port, c, a.seconds, body_file) if use_wrk else \
                    run_python(srv.port, c, a.seconds, body_list)
                m1 = metrics(srv.port)
                batches = m1["batches"] - m0["batches"]
                mean_batch = (m1["queries"] - m0["queries"]) / batches if batches else 0
                row = (f"| {w} | {c} | {r['qps']:.1f} | {r['qps'] / cli:.2f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                       f"{r['p99'] / r['p50']:.2f} | {mean_batch:.1f} | {r['errors']} |")
                print(row, file=sys.stderr, flush=True)
                lines.append(row)
        finally:
            srv.stop()
    cli_after = cli_qps(a.chimera, idx, queries, a.k, a.threads, a.cli_runs)
    cli = (cli_before + cli_after) / 2
    for i, l in enumerate(lines):   # the ratios against the mean of both CLI runs
        m = re.match(r"(\| \d+ \| \d+ \| )([0-9.]+)( \| )[0-9.]+( \|.*)", l)
        if m:
            lines[i] = f"{m.group(1)}{m.group(2)}{m.group(3)}{float(m.group(2)) / cli:.2f}{m.group(4)}"
    lines[:0] = [f"CLI throughput mode (`chimera search`, {len(body_list)} queries in one call, "
                 f"{a.threads} threads, best of {a.cli_runs}): **{cli_before:.1f} queries/s before the "
                 f"server's rows, {cli_after:.1f} after** (x CLI below: against their mean, {cli:.1f})", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    t = c.getresponse().read().decode()
    c.close()
    return {"batches": int(re.search(r"^chimera_search_batches_total (\d+)", t, re.M).group(1)),
            "queries": int(re.search(r"^chimera_queries_total (\d+)", t, re.M).group(1))}


if __name__ == "__main__":
    main()
