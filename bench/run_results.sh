#!/usr/bin/env bash
# Reproduces the synthetic-corpus numbers of bench/RESULTS.md in one run, side by side:
# sgemm peak vs exact search, index build, the recall/QPS sweep against exact search,
# QPS at Recall 0.90/0.95/0.99, tuned settings and the per-stage breakdown.
# usage: bench/run_results.sh [DATA_DIR] [OUT_DIR]     (Release build in build/)
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-demo}
out=${2:-bench/out}
bin=build/chimera
mkdir -p "$out"
echo "== $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x$(nproc)"
echo "== sgemm peak vs exact search (in-memory corpus, 12,500 docs, 256 queries)"
build/bench/bench_exact 12500 256
if [ ! -s "$data/tokens.npy" ]; then
  "$bin" gen --out "$data" --docs 12500 --queries 200 --dim 128 --seed 1
fi
[ -s "$data/truth.trec" ] || "$bin" exact --tokens "$data/tokens.npy" --doclens "$data/doclens.npy" \
  --queries "$data/queries.npy" -k 100 --out "$data/truth.trec"
echo "== index build"
"$bin" build --tokens "$data/tokens.npy" --doclens "$data/doclens.npy" --out "$data/index"
"$bin" info "$data/index" | tail -3
echo "== sweep (chimera bench), exact search timed in the same run"
"$bin" bench "$data/index" --queries "$data/queries.npy" --truth "$data/truth.trec" -k 10,100 \
  --tokens "$data/tokens.npy" --doclens "$data/doclens.npy" --csv "$out/sweep.csv"
python3 bench/pareto.py "$out/sweep.csv"
echo "== defaults, with the per-stage profile"
for k in 10 100; do
  "$bin" search "$data/index" --queries "$data/queries.npy" -k $k --out "$out/run$k.trec" --profile
  "$bin" eval --run "$out/run$k.trec" --truth "$data/truth.trec" -k $k
done
echo "== tuned for Recall@k 0.95"
for k in 10 100; do
  "$bin" tune "$data/index" --queries "$data/queries.npy" --truth "$data/truth.trec" -k $k \
    --target-recall 0.95 | tail -2
  "$bin" search "$data/index" --queries "$data/queries.npy" -k $k --recall 0.95 --profile \
    --out "$out/tuned$k.trec"
  "$bin" eval --run "$out/tuned$k.trec" --truth "$data/truth.trec" -k $k
done
