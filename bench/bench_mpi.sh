#!/usr/bin/env bash
# Sharded build and search over MPI on one machine (docs/scaling.md): the overhead of
# sharding (ranks over loopback, oversubscribed, each single-threaded), not a speed-up.
#   1. Build: chimera build (one process), chimera build --shards N, and chimera-mpi build
#      on N ranks with the codebook trained by gathering samples to rank 0 and by
#      distributed Lloyd steps (MPI_Allreduce): total and training seconds.
#   2. Search: chimera-mpi search on 1..4 ranks over a 4-shard layout (k = 10 and 100,
#      queries of 8 and 32 tokens, latency and throughput modes): queries/s, latency
#      p50/p99, rank 0's time in broadcast / own shards / waiting / merge, bytes per query;
#      beside chimera search of one index of the corpus at the same parameters.
# Usage: bench/bench_mpi.sh [WORKDIR] [BUILD_DIR]   (default /tmp/bench_mpi, build)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/bench_mpi}
B=${2:-build}
C=$B/chimera
M=$B/chimera-mpi
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi() { local n=$1; shift; mpirun --oversubscribe --allow-run-as-root -n "$n" "$M" "$@"; }
mkdir -p "$W"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, $(mpirun --version | head -1)"
if [ ! -s "$W/c/tokens.npy" ]; then
  "$C" gen --out "$W/c" --docs 12500 --queries 200 --dim 128 --seed 1 >/dev/null
  python3 - "$W/c/queries.npy" "$W/c/q8.npy" <<'PY'
import sys, numpy as np
q = np.load(sys.argv[1]); np.save(sys.argv[2], np.ascontiguousarray(q[:, :8, :]))
PY
fi
TOK=$W/c/tokens.npy
LEN=$W/c/doclens.npy
secs() { sed -n "s/.*$1 \\([0-9.]*\\)s.*/\\1/p" "$2" | head -1; }
echo
echo "## Build (threads: 1 per process)"
echo "| build | processes | total s | codebook s |"
echo "| --- | --- | --- | --- |"
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$W/one" --threads 1 --no-sync >"$W/one.log"
echo "| chimera build | 1 | $(sed -n 's/.*| total \([0-9.]*\)s.*/\1/p' "$W/one.log") | $(secs kmeans "$W/one.log") (k-means) |"
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$W/S4" --shards 4 --threads 1 --no-sync >"$W/s4.log"
echo "| chimera build --shards 4 | 1 | $(sed -n 's/.* in \([0-9.]*\)s, peak.*/\1/p' "$W/s4.log") | $(sed -n 's/.* in \([0-9.]*\)s$/\1/p' "$W/s4.log") |"
for n in 2 4; do
  for tr in gather allreduce; do
    mpi $n build --tokens "$TOK" --doclens "$LEN" --out "$W/M$n-$tr" --threads 1 --no-sync --train $tr >"$W/m$n-$tr.log"
    echo "| chimera-mpi build --train $tr | $n | $(sed -n 's/.* in \([0-9.]*\)s; peak.*/\1/p' "$W/m$n-$tr.log") | $(sed -n 's/.*--train [a-z]*) in \([0-9.]*\)s/\1/p' "$W/m$n-$tr.log") |"
  done
done
"$C" exact --tokens "$TOK" --doclens "$LEN" --queries "$W/c/queries.npy" -k 100 --out "$W/truth" >/dev/null
recall() { "$C" eval --run "$1" --truth "$W/truth" -k "$2" | awk -v k="Recall@$2" '$1 == k { print $2 }'; }
echo
echo "Recall@10 at each layout's defaults (one process searching):"
for ix in one S4 M2-gather M2-allreduce M4-gather M4-allreduce; do
  "$C" search "$W/$ix" --queries "$W/c/queries.npy" -k 10 --out "$W/$ix.run" >/dev/null
  printf '%s %s; ' "$ix" "$(recall "$W/$ix.run" 10)"
done
echo
echo
echo "## Search over the 4 shards of chimera build --shards 4 (threads: 1 per rank)"
echo "| k | query tokens | mode | ranks | q/s | p50 ms | p99 ms | bcast ms | own ms | wait ms | merge ms | bytes/query | Recall@k |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for k in 10 100; do
  for ql in 8 32; do
    Q=$W/c/queries.npy; [ $ql = 8 ] && Q=$W/c/q8.npy
    "$C" exact --tokens "$TOK" --doclens "$LEN" --queries "$Q" -k $k --out "$W/truth.$ql.$k" >/dev/null
    for mode in latency throughput; do
      fl=(); [ $mode = latency ] && fl=(--latency)
      "$C" search "$W/one" --queries "$Q" -k $k --threads 1 "${fl[@]}" --out "$W/one.run" >"$W/one.s"
      r=$("$C" eval --run "$W/one.run" --truth "$W/truth.$ql.$k" -k $k | awk -v x="Recall@$k" '$1 == x {print $2}')
      echo "| $k | $ql | $mode | one index | $(sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$W/one.s") | $(sed -n 's/.* p50 \([0-9.]*\).*/\1/p' "$W/one.s") | $(sed -n 's/.* p99 \([0-9.]*\).*/\1/p' "$W/one.s") | | | | | | $r |"
      for n in 1 2 3 4; do
        mpi $n search "$W/S4" --queries "$Q" -k $k --threads 1 "${fl[@]}" --profile --out "$W/m.run" >"$W/m.s"
        r=$("$C" eval --run "$W/m.run" --truth "$W/truth.$ql.$k" -k $k | awk -v x="Recall@$k" '$1 == x {print $2}')
        p=$(sed -n 's/.*broadcast \([0-9.]*\) ms, own shards \([0-9.]*\) ms, waiting for the other ranks. lists \([0-9.]*\) ms, merge \([0-9.]*\) ms.*/\1 | \2 | \3 | \4/p' "$W/m.s")
        b=$(sed -n 's/.*; \([0-9]*\) bytes in all.*/\1/p' "$W/m.s")
        p50=$(sed -n 's/.* p50 \([0-9.]*\).*/\1/p' "$W/m.s"); p99=$(sed -n 's/.* p99 \([0-9.]*\).*/\1/p' "$W/m.s")
        [ $mode = throughput ] && p50="(batch)" && p99=""
        echo "| $k | $ql | $mode | $n | $(sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$W/m.s") | $p50 | $p99 | $p | $b | $r |"
      done
    done
  done
done
