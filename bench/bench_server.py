#!/usr/bin/env python3
"""bench_server.py: `chimera serve` under concurrent clients against the CLI's batched
search, side by side in one run (bench/RESULTS.md, section 5.4).

  1. The corpus: the demo corpus of scripts/demo.sh (12,500 documents, ~1M tokens of
     128-d vectors, 200 queries x 32 tokens; `chimera gen --seed 1`) and its index, made
     under --work unless they are there.
  2. The server: `chimera serve --index bench=IDX --search-threads T --quiet`, and for
     each client count C in --clients, wrk (Debian's, with bench_server.lua) with C
     connections, each one client sending one query per request and waiting for the
     answer: QPS, p50 and p99 latency. Without wrk a Python load generator (threads
     over http.client) does the same.
  3. The CLI's throughput mode, `chimera search IDX --queries Q -k K` (all queries in
     one batched call, --threads T), run just before each server run: each row is
     --rounds alternations of the two, reported as medians, so that a machine whose load
     changes (a shared one) skews both sides alike.
  4. With --windows W1,W2,...: the same at each --batch-window-us, to tune the window.
Prints a Markdown table (and, with --out, appends it to that file). Loopback only;
every run is bounded in time."""

import argparse
import base64
import http.client
import json
import os
import re
import resource
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
    """(best queries/s, CPU ms per query of that process: its whole run, the index
    open and its 8 warm-up queries included)."""
    best, cpu = 0.0, 0.0
    nq = np.load(queries, mmap_mode="r").shape[0]
    for _ in range(runs):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = sh(chimera, "search", idx, "--queries", queries, "-k", k, "--threads", threads)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        qps = float(re.search(r"([0-9.]+) queries/s", out).group(1))
        if qps > best:
            best = qps
            cpu = 1e3 * (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / nq
    return best, cpu


def proc_cpu(pid):
    """CPU seconds (user + system) of a running process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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
    ap.add_argument("--cli-runs", type=int, default=1, help="CLI runs per round (best taken)")
    ap.add_argument("--rounds", type=int, default=3, help="CLI/server alternations per row (medians reported)")
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
    # On a shared machine the load changes during the run: each row alternates CLI and
    # server runs, and each server run's ratio is against the CLI run just before it.
    windows = [int(w) for w in a.windows.split(",")] if a.windows else [a.window_us]
    wrk_v = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split()[1] if use_wrk else ""
    lines.append(f"Each row: {a.rounds} rounds of the CLI (`chimera search` throughput mode, the "
                 f"{len(body_list)} queries in one call, {a.threads} threads) then the server for {a.seconds} s "
                 f"({'wrk ' + wrk_v if use_wrk else 'Python threads'}: each connection one client with one query "
                 f"in flight), after a 2 s warm-up; medians of the rounds (server / CLI: median of the "
                 f"per-round ratios, and their range); k = {a.k}; server --search-threads {a.threads} "
                 f"--threads {a.http_threads}. CPU ms/query: the server process's user + system time "
                 f"over the queries it searched (HTTP, JSON and batching included; wrk's not), and the "
                 f"CLI process's over its queries (its index open and warm-up included): a measure of "
                 f"work that the machine's other load does not change as much as QPS.")
    lines.append("")
    lines.append("| window µs | clients | server QPS | CLI QPS | server / CLI | p50 ms | p99 ms | p99 / p50 | "
                 "mean batch | server CPU ms/query | CLI CPU ms/query | errors |")
    lines.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for w in windows:
        srv = Server(a.chimera, idx, a.threads, w, a.http_threads)
        try:
            for c in clients:
                if use_wrk:
                    run_wrk(srv.port, c, 2, body_file)
                else:
                    run_python(srv.port, c, 2, body_list)
                # --rounds alternations of one CLI run and one server run; medians
                rounds = []
                for _ in range(a.rounds):
                    cli, cli_cpu = cli_qps(a.chimera, idx, queries, a.k, a.threads, a.cli_runs)
                    m0, c0 = metrics(srv.port), proc_cpu(srv.p.pid)
                    r = run_wrk(srv.port, c, a.seconds, body_file) if use_wrk else \
                        run_python(srv.port, c, a.seconds, body_list)
                    m1, c1 = metrics(srv.port), proc_cpu(srv.p.pid)
                    batches = m1["batches"] - m0["batches"]
                    r["batch"] = (m1["queries"] - m0["queries"]) / batches if batches else 0
                    r["cpu"] = 1e3 * (c1 - c0) / max(1, m1["queries"] - m0["queries"])
                    r["cli_cpu"] = cli_cpu
                    r["cli"] = cli
                    r["ratio"] = r["qps"] / cli
                    rounds.append(r)
                med = {key: float(np.median([x[key] for x in rounds])) for key in rounds[0]}
                errors = sum(x["errors"] for x in rounds)
                row = (f"| {w} | {c} | {med['qps']:.1f} | {med['cli']:.1f} | {med['ratio']:.2f} "
                       f"({min(x['ratio'] for x in rounds):.2f}-{max(x['ratio'] for x in rounds):.2f}) | "
                       f"{med['p50']:.1f} | {med['p99']:.1f} | {med['p99'] / med['p50']:.2f} | {med['batch']:.1f} | "
                       f"{med['cpu']:.2f} | {med['cli_cpu']:.2f} | {errors} |")
                print(row, file=sys.stderr, flush=True)
                lines.append(row)
        finally:
            srv.stop()
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
