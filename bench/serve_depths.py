"""A served index answers shallow searches, one deep one, then shallow ones again: the
shallow searches' rate before and after the deep one (bench/RESULTS.md section 5.26).

    python3 bench/serve_depths.py CHIMERA IDX Q_flat.npy Q_lens.npy

CHIMERA is the binary to serve with (port 18431), IDX an index, Q_* at least 200 queries
(flat tokens and per-query lengths). Each round sends the 200 queries in one request,
k = 10 at 16 / 100 / 100; the deep request is k = 100 at 32 / 1000 / 1000. Before
0.11.0 the server's engine, once sized for the deep request, probed every later shallow
query by brute force."""
import json, subprocess, sys, time, urllib.request
import numpy as np

binary, idx, qflat, qlens = sys.argv[1:5]
flat, lens = np.load(qflat), np.load(qlens)
off = np.concatenate([[0], np.cumsum(lens)])
qs = [flat[off[i]:off[i + 1]].tolist() for i in range(200)]
srv = subprocess.Popen([binary, "serve", "--index", f"real={idx}", "--port", "18431", "--quiet",
                        "--search-threads", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    for _ in range(100):
        try:
            urllib.request.urlopen("http://127.0.0.1:18431/health", timeout=1)
            break
        except Exception:
            time.sleep(0.2)

    def search(k, params, profile=False):
        body = json.dumps({"queries": qs, "k": k, "params": params, "profile": profile}).encode()
        req = urllib.request.Request("http://127.0.0.1:18431/indexes/real/search", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        r = json.load(urllib.request.urlopen(req, timeout=600))
        return time.perf_counter() - t0, r

    shallow = {"n_probe": 16, "k_refine": 100, "k_fullbit": 100}
    deep = {"n_probe": 32, "k_refine": 1000, "k_fullbit": 1000}
    def rounds(tag):
        ts = [search(10, shallow)[0] for _ in range(5)]
        _, r = search(10, shallow, profile=True)
        p = r.get("profile", {})
        print(f"{tag}: shallow 200 queries, median {np.median(ts):.3f} s "
              f"({200 / np.median(ts):.0f} queries/s); probes walked per token {p.get('n_walked', '-')}")
    rounds("before the deep search")
    t, _ = search(100, deep)
    print(f"deep search (k=100, 32/1000/1000): {t:.3f} s")
    rounds("after the deep search")
finally:
    srv.terminate()
    srv.wait()
