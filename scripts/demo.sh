#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, generate the demo corpus
# (12,500 documents, ~1M tokens of 128-d vectors, 200 queries), build an index, search
# it with the default parameters (k = 10), and compare with exact search: Recall@10 against
# the exact top-k, MRR@10 against the generator's target documents, queries/s of both.
# Usage: scripts/demo.sh [DIR]   (default: demo/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
dir=${1:-demo}
bin=build/chimera
if [ ! -s "$dir/tokens.npy" ]; then
  "$bin" gen --out "$dir" --docs 12500 --queries 200 --dim 128 --seed 1
fi
echo "== index build"
"$bin" build --tokens "$dir/tokens.npy" --doclens "$dir/doclens.npy" --out "$dir/index"
echo "== exact search (the ground truth)"
"$bin" exact --tokens "$dir/tokens.npy" --doclens "$dir/doclens.npy" --queries "$dir/queries.npy" \
  -k 100 --out "$dir/truth.trec" | tee "$dir/exact.log"
echo "== Chimera search, default parameters"
"$bin" search "$dir/index" --queries "$dir/queries.npy" -k 10 --out "$dir/run.trec" --profile \
  | tee "$dir/search.log"
"$bin" eval --run "$dir/run.trec" --truth "$dir/truth.trec" -k 10 --qrels "$dir/qrels.tsv"
exact_qps=$(sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$dir/exact.log" | head -1)
search_qps=$(sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$dir/search.log" | head -1)
awk -v e="$exact_qps" -v s="$search_qps" \
  'BEGIN { if (e > 0) printf "speed-up over exact search: %.1fx (%.1f vs %.1f queries/s)\n", s / e, s, e }'
