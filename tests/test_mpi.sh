#!/usr/bin/env bash
# chimera-mpi over mpirun on one machine (every rank single-threaded, oversubscribed):
# a sharded build with the codebook gathered to rank 0 and one with distributed Lloyd
# steps (MPI_Allreduce) both make searchable layouts; with exhaustive parameters the
# MPI search equals `chimera search` of a single index built with the same codebook (to
# within float rounding: same_run in lib.sh);
# 1, 2, 3 and 4 ranks give the same answers over 3 shards; at default parameters the
# sharded recall is within 0.01 of a single index's or above (0.02 for the codebook of
# distributed Lloyd steps, which start from rank 0's share of the sample); bad inputs fail on every
# rank with one message and a non-zero exit; each rank takes its own entry of
# CUDA_VISIBLE_DEVICES; a stalled rank (SIGSTOP) makes the job
# stop within its --timeout naming what did not complete, and a killed rank stops the
# job; a kill -9 of a sharded rebuild leaves the old layout searchable; chimera-mpi
# serve answers like chimera-mpi search, applies id filters, routes adds (a conflict for
# an id any shard holds), updates and deletes to the right shards, refuses metadata
# filters and recall profiles, stops cleanly on SIGTERM to rank 0, and answers 503 (and
# /health "broken") within --shard-timeout once a shard rank stalls. Every mpirun
# runs under `timeout`, so a hang fails the test instead of blocking it.
set -u
. "$(dirname "$0")/lib.sh"
: "${CHIMERA_MPI:?path to chimera-mpi}" "${MPIEXEC:=mpirun}"
C=$CHIMERA
# Open MPI: root is allowed (CI runs as root), more ranks than cores, no CMA single-copy
# (it needs ptrace, which containers often forbid), no leak reports from MPI's own
# allocations under LeakSanitizer.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
mpi() { local n=$1; shift; timeout 300 "$MPIEXEC" --oversubscribe --allow-run-as-root -n "$n" "$CHIMERA_MPI" "$@"; }
"$C" gen --out "$T/c" --docs 1200 --dim 48 --queries 100 --max-len 80 --seed 5 >/dev/null || bad "gen failed"
TOK=$T/c/tokens.npy
LEN=$T/c/doclens.npy
Q=$T/c/queries.npy
"$C" exact --tokens "$TOK" --doclens "$LEN" --queries "$Q" -k 10 --out "$T/truth" >/dev/null
recall() { "$C" eval --run "$1" --truth "$T/truth" -k 10 | awk '/^Recall@10/ {print $2}'; }

# each rank takes its node-local entry of an operator's CUDA_VISIBLE_DEVICES list
CUDA_VISIBLE_DEVICES=3,5 mpi 2 devices >"$T/dev" 2>"$T/e" || bad "devices failed: $(cat "$T/e")"
grep -q '^rank 0 .*CUDA_VISIBLE_DEVICES=3,' "$T/dev" && grep -q '^rank 1 .*CUDA_VISIBLE_DEVICES=5,' "$T/dev" \
  && ok || bad "ranks did not take their own device: $(cat "$T/dev")"

# builds: gather and allreduce
mpi 3 build --tokens "$TOK" --doclens "$LEN" --out "$T/MG" --threads 1 --no-sync >"$T/mg.out" 2>"$T/e" \
  && ok || bad "mpi build (gather) failed: $(cat "$T/e")"
grep -q '"n_docs":[[:space:]]*1200' "$T/MG/shards.json" && ok || bad "gather layout: $(cat "$T/MG/shards.json")"
mpi 3 build --tokens "$TOK" --doclens "$LEN" --out "$T/MA" --threads 1 --no-sync --train allreduce \
  --train-iters 3 >"$T/ma.out" 2>"$T/e" && ok || bad "mpi build (allreduce) failed: $(cat "$T/e")"
grep -c 'Lloyd step' "$T/ma.out" | grep -q '^3$' && ok || bad "allreduce did not report 3 steps: $(cat "$T/ma.out")"

# exhaustive: equal to the single index on the same codebook
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/one" --codebook "$T/MG/g1-codebook.bin" \
  --no-sync >/dev/null 2>"$T/e" || bad "build --codebook failed: $(cat "$T/e")"
K=$(sed -n 's/.*"n_clusters":[^0-9]*\([0-9]*\).*/\1/p' "$T/MG/shards.json")
EX=(-k 10 --nprobe "$K" --k-refine 1200 --k-fullbit 1200 --threads 1)
mpi 3 search "$T/MG" --queries "$Q" "${EX[@]}" --out "$T/mg.ex" >/dev/null 2>"$T/e" || bad "mpi search failed: $(cat "$T/e")"
"$C" search "$T/one" --queries "$Q" "${EX[@]}" --out "$T/one.ex" >/dev/null || bad "single search failed"
same_run "$T/mg.ex" "$T/one.ex" >"$T/d" && ok || bad "MPI exhaustive results differ from the single index's: $(cat "$T/d"; diff "$T/mg.ex" "$T/one.ex" | head -4)"

# 1..4 ranks over 3 shards: the same answers (default parameters: shard 0's, everywhere)
for n in 1 2 3 4; do
  mpi $n search "$T/MG" --queries "$Q" -k 10 --threads 1 --out "$T/r$n" >/dev/null 2>"$T/e" \
    || bad "search on $n ranks failed: $(cat "$T/e")"
done
for n in 2 3 4; do cmp -s "$T/r1" "$T/r$n" && ok || bad "$n ranks differ from 1 rank"; done
"$C" search "$T/MG" --queries "$Q" -k 10 --threads 1 --out "$T/cli" >/dev/null
same_run "$T/r1" "$T/cli" >"$T/d" && ok || bad "chimera-mpi differs from chimera search of the same layout: $(cat "$T/d")"

# default parameters: recall within 0.01 of a single index of the corpus
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/single" --no-sync >/dev/null
"$C" search "$T/single" --queries "$Q" -k 10 --out "$T/single.run" >/dev/null
r1=$(recall "$T/single.run"); rg=$(recall "$T/r3")
mpi 3 search "$T/MA" --queries "$Q" -k 10 --threads 1 --out "$T/ma.run" >/dev/null 2>&1
ra=$(recall "$T/ma.run")
echo "Recall@10 at defaults: single $r1, MPI gather $rg, MPI allreduce $ra"
awk -v a="$rg" -v b="$r1" 'BEGIN {exit !(a >= b - 0.01)}' && ok || bad "gather recall $rg < $r1 - 0.01"
# distributed Lloyd starts from rank 0's third of the sample: close, not identical
awk -v a="$ra" -v b="$r1" 'BEGIN {exit !(a >= b - 0.02)}' && ok || bad "allreduce recall $ra < $r1 - 0.02"
mpi 2 search "$T/MG" --queries "$Q" -k 10 --threads 1 --latency --profile >"$T/prof" 2>&1 || bad "latency search failed"
grep -q 'network (per query, rank 0)' "$T/prof" && ok || bad "--profile prints no bytes: $(cat "$T/prof")"
# one rank holds every shard: its profile counts what chimera search counts over the layout
# (a setting with a 1-bit pass, so that it is counted too; no row is computed one by one
# on an index this small, whose probing scores every centroid)
PR=(--queries "$Q" -k 10 --nprobe 4 --k-refine 100 --k-fullbit 20 --threads 1 --profile)
mpi 1 search "$T/MG" "${PR[@]}" >"$T/prof1" 2>&1 || bad "profiled search failed: $(cat "$T/prof1")"
"$C" search "$T/MG" "${PR[@]}" >"$T/profc" 2>&1 || bad "profiled chimera search failed"
counts() { # posting entries, touched, refined, 1-bit scored, full-bit scored, rows, probes
  sed -n "s/^$1.* \([0-9.]*\) posting entries.* \([0-9.]*\) documents touched, \([0-9.]*\) refined, \([0-9.]*\) 1-bit scored, \([0-9.]*\) full-bit scored.* \([0-9.]*\) centroid-score rows.* \([0-9.]*\) clusters probed.*/\1 \2 \3 \4 \5 \6 \7/p" "$2"
}
c1=$(counts "rank 0's shards" "$T/prof1"); cc=$(counts candidates "$T/profc")
[ -n "$c1" ] && [ "$c1" = "$cc" ] && awk -v c="$c1" 'BEGIN { split(c, v, " "); exit !(v[4] > 0 && v[7] >= 4) }' \
  && ok || bad "chimera-mpi's profile counts ($c1) differ from chimera search's ($cc)"

# bad inputs: one message, non-zero everywhere
one_message() { # WHAT NEEDLE ARGS...
  local what=$1 needle=$2; shift 2
  if mpi 3 "$@" >"$T/out" 2>"$T/err"; then bad "$what: exited 0"; return; fi
  [ "$(grep -c "^chimera-mpi" "$T/err")" = 1 ] && grep -q -- "$needle" "$T/err" && ok \
    || bad "$what: expected one chimera-mpi message with '$needle': $(cat "$T/err")"
}
"$C" gen --out "$T/d2" --docs 20 --dim 32 --queries 3 >/dev/null
one_message "queries of another dimension" "dimension 32" search "$T/MG" --queries "$T/d2/queries.npy"
one_message "not a sharded index" "not a sharded index" search "$T/nope" --queries "$Q"
one_message "doclens of another corpus" "sum to" build --tokens "$TOK" --doclens "$T/d2/doclens.npy" --out "$T/x"
[ -e "$T/x" ] && bad "a failed build left $T/x" || ok
python3 - "$TOK" "$T/nan.npy" <<'PY'
import sys, numpy as np
t = np.load(sys.argv[1]); t[len(t) - 5, 3] = np.nan; np.save(sys.argv[2], t)
PY
one_message "NaN in the last shard" "NaN" build --tokens "$T/nan.npy" --doclens "$LEN" --out "$T/x"
grep -q "rank 2" "$T/err" && ok || bad "the NaN is not reported by the rank that holds it: $(cat "$T/err")"

# a stalled rank: the job stops within --timeout (+ start-up), naming the wait
python3 - "$Q" "$T/many.npy" <<'PY'
import sys, numpy as np
q = np.load(sys.argv[1]); np.save(sys.argv[2], np.concatenate([q] * 20))
PY
rank_pid() { # RANK [COMMAND]: the pid of that rank of the running chimera-mpi job
  for p in $(pgrep -f "chimera-mpi ${2:-search}"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
for sig in STOP KILL; do
  t0=$(date +%s)
  mpi 3 search "$T/MG" --queries "$T/many.npy" -k 10 --threads 1 --latency --timeout 3 >/dev/null 2>"$T/err.$sig" &
  job=$!
  p=""
  for _ in $(seq 100); do p=$(rank_pid 1); [ -n "$p" ] && break; sleep 0.1; done
  sleep 1
  [ -n "$p" ] && kill -$sig "$p"
  wait $job; rc=$?
  el=$(( $(date +%s) - t0 ))
  [ -n "$p" ] && [ $rc != 0 ] && [ $rc != 124 ] && [ $el -lt 60 ] && ok \
    || bad "SIG$sig of rank 1: rc $rc after ${el}s (pid '$p'): $(head -3 "$T/err.$sig")"
  [ $sig = STOP ] && { grep -q "did not complete within 3 s" "$T/err.$sig" && ok || bad "stall not named: $(cat "$T/err.$sig")"; }
  [ -n "$p" ] && kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null
done

# kill -9 of a rebuild: the old layout still searches
mpi 3 build --tokens "$TOK" --doclens "$LEN" --out "$T/MG" --threads 1 --no-sync >/dev/null 2>&1 &
job=$!
sleep 2
pkill -9 -f "chimera-mpi build" ; wait $job 2>/dev/null
mpi 3 search "$T/MG" --queries "$Q" -k 10 --threads 1 --out "$T/after" >/dev/null 2>"$T/e" && ok \
  || bad "after kill -9 of a rebuild the layout does not search: $(cat "$T/e")"
[ "$(wc -l <"$T/after")" = 1000 ] && ok || bad "after kill -9: $(wc -l <"$T/after") lines"
# serve: the HTTP service over the shards (when built with the server)
if "$CHIMERA_MPI" serve --help >/dev/null 2>&1; then
  serve_start() { # DIR [options]: starts the job, sets $job and $port
    local d=$1; shift
    mpi 3 serve "$d" --port 0 --search-threads 1 --quiet "$@" >"$T/serve.out" 2>"$T/serve.err" &
    job=$!
    port=""
    for _ in $(seq 300); do
      port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$T/serve.out")
      [ -n "$port" ] && break
      sleep 0.1
    done
  }
  # the client side of the checks: one JSON call to the service on $port
  cat >"$T/http_call.py" <<'PY'
import json, os, urllib.request
def call(method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (os.environ["PORT"], path), method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r: return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e: return e.code, json.loads(e.read())
PY
  export PYTHONPATH="$T${PYTHONPATH:+:$PYTHONPATH}"
  serve_start "$T/MG"
  export PORT=$port
  [ -n "$port" ] && ok || bad "serve did not start: $(cat "$T/serve.err")"
  # results equal chimera-mpi search's; filters; add, conflict, update, delete; refusals
  python3 - "$port" "$Q" "$T/mg.ex" "$K" <<'PY' && ok || bad "serve API checks failed"
import sys, numpy as np
from http_call import call
port, qpath, expath, K = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
failed = []
def check(cond, what):
    if not cond: failed.append(what); print("FAIL:", what, file=sys.stderr)
q = np.load(qpath)
FP = {"n_probe": K, "k_refine": 1200, "k_fullbit": 1200}
want = {}
for line in open(expath):
    f = line.split(); want.setdefault(int(f[0]), []).append(int(f[2]))
st, b = call("POST", "/indexes/MG/search", {"queries": q[:8].tolist(), "k": 10, "params": FP})
check(st == 200 and all(b["results"][i]["ids"] == want[i] for i in range(8)), "exhaustive results differ from chimera-mpi search's")
st, b = call("POST", "/indexes/MG/search", {"queries": q[:4].tolist(), "k": 10, "params": FP, "subset": [3, 500, 1100]})
check(st == 200 and all(sorted(r["ids"]) == [3, 500, 1100] for r in b["results"]), "subset filter: %s" % b)
st, b = call("POST", "/indexes/MG/search", {"queries": q[:2].tolist(), "k": 10, "params": FP, "exclude": want[0][:5]})
check(st == 200 and not set(b["results"][0]["ids"]) & set(want[0][:5]), "exclude filter")
st, h = call("GET", "/indexes/MG")
check(st == 200 and h["n_docs"] == 1200 and h["n_shards"] == 3, "index info: %s" % h)
doc = q[0].tolist()
st, b = call("POST", "/indexes/MG/documents", {"documents": [{"id": 9000001, "embeddings": doc}, {"id": 9000002, "embeddings": q[1].tolist()}]})
check(st == 200 and b["n_docs"] == 1202, "add: %s %s" % (st, b))
st, b = call("POST", "/indexes/MG/search", {"queries": q[:1].tolist(), "k": 3})
check(st == 200 and b["results"][0]["ids"][0] == 9000001, "the added document is not found first: %s" % b)
st, b = call("POST", "/indexes/MG/documents", {"documents": [{"id": 9000001, "embeddings": doc}]})
check(st == 409, "adding an id twice: %s %s" % (st, b))
st, b = call("POST", "/indexes/MG/documents", {"documents": [{"id": 17, "embeddings": doc}]})
check(st == 409, "adding an id a shard holds: %s %s" % (st, b))
st, b = call("PUT", "/indexes/MG/documents", {"documents": [{"id": 17, "embeddings": q[2].tolist()}]})
check(st == 200 and b["docs_deleted"] == 1 and b["n_docs"] == 1202, "update: %s %s" % (st, b))
st, b = call("POST", "/indexes/MG/search", {"queries": q[2:3].tolist(), "k": 3, "params": FP})
check(st == 200 and b["results"][0]["ids"][0] == 17, "the updated document is not found first: %s" % b)
st, b = call("DELETE", "/indexes/MG/documents", {"ids": [9000001, 9000002, 17]})
check(st == 200 and b["docs_deleted"] == 3 and b["n_docs"] == 1199, "delete: %s %s" % (st, b))
st, b = call("DELETE", "/indexes/MG/documents", {"ids": [9000001]})
check(st == 422, "deleting a missing id: %s" % st)
st, b = call("DELETE", "/indexes/MG/documents", {"ids": [9000001], "missing_ok": True})
check(st == 200 and b["ids_missing"] == 1, "missing_ok delete: %s %s" % (st, b))
st, b = call("POST", "/indexes/MG/search", {"queries": q[:8].tolist(), "k": 10, "params": FP})
check(st == 200 and all(17 not in r["ids"] and 9000001 not in r["ids"] for r in b["results"]), "deleted ids returned")
st, b = call("POST", "/indexes/MG/search", {"queries": q[:1].tolist(), "k": 3, "filter": "1 = 1"})
check(st == 422 and b["code"] == "UNSUPPORTED", "metadata filter: %s" % b)
st, b = call("POST", "/indexes/MG/search", {"queries": q[:1].tolist(), "k": 3, "recall": 0.9})
check(st == 422, "recall profile: %s" % st)
st, b = call("POST", "/indexes/MG/search", {"queries": np.zeros((1, 2, 7)).tolist(), "k": 3})
check(st == 422, "queries of another dimension: %s" % st)
st, b = call("POST", "/indexes/MG/documents", {"documents": [{"id": 9000003, "embeddings": doc, "metadata": {"a": 1}}]})
check(st == 422, "metadata on a sharded add: %s" % st)
sys.exit(1 if failed else 0)
PY
  # SIGTERM to rank 0: it finishes, tells the shard ranks to stop, everyone exits 0
  r0=$(rank_pid 0 serve)
  [ -n "$r0" ] && kill -TERM $r0
  wait $job && ok || bad "serve did not stop cleanly on SIGTERM: $(cat "$T/serve.err")"
  # a stalled shard rank: requests fail 503 within --shard-timeout, naming the cause
  serve_start "$T/MG" --shard-timeout 3
  export PORT=$port
  r1=$(rank_pid 1 serve)
  [ -n "$r1" ] && kill -STOP $r1
  python3 - "$port" <<'PY' && ok || bad "a stalled shard rank did not fail requests within the timeout"
import sys, time
from http_call import call
t = time.time()
st, b = call("POST", "/indexes/MG/search", {"queries": [[[0.1] * 48]], "k": 3})
el = time.time() - t
ok = st == 503 and b["code"] == "SHARDS_LOST" and "did not finish" in b["message"] and el < 20
st2, b2 = call("DELETE", "/indexes/MG/documents", {"ids": [1]})
st3, h = call("GET", "/health")
# not BUSY, which clients send again: the service stays broken until restarted
ok = ok and st2 == 503 and b2["code"] == "SHARDS_LOST" and st3 == 503 and h["status"] == "broken"
print("stalled rank: %s after %.1fs, then %s; health %s" % (st, el, st2, st3))
sys.exit(0 if ok else 1)
PY
  [ -n "$r1" ] && kill -CONT $r1
  kill -TERM $job 2>/dev/null; wait $job 2>/dev/null
  pkill -9 -f "chimera-mpi serve" 2>/dev/null
fi
echo "$pass passed, $fail failed"
[ $fail = 0 ]
