#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, generate the demo corpus
# (12,500 documents, ~1M tokens of 128-d vectors, 200 queries), build an index, search
# it with the default parameters (k = 10), and compare with exact search: Recall@10 against
# the exact top-k, MRR@10 against the generator's target documents (beside exact search's
# own MRR@10, its ceiling), queries/s of both.
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
# MRR and NDCG score the generator's target document of each query, which exact Chamfer
# search itself rarely ranks first (a query shares only some words with its target and
# leans to its topic, which many documents share): exact search's own figures are the
# ceiling to read Chimera's against.
exact_ir=$("$bin" eval --run "$dir/truth.trec" --truth "$dir/truth.trec" -k 10 --qrels "$dir/qrels.tsv" |
  awk '$1 == "MRR@10" { m = $2 } $1 == "NDCG@10" { n = $2 } END { printf "MRR@10 %s, NDCG@10 %s", m, n }')
echo "exact search's own ranking against the same targets: $exact_ir"
echo "(the generator's target document is rarely the exact best match for its query, so"
echo " MRR/NDCG measure the synthetic queries, not retrieval; Chimera's should match exact"
echo " search's, and Recall@10 against exact search is the measure of retrieval quality)"
exact_qps=$(sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$dir/exact.log" | head -1)
search_qps=$(sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$dir/search.log" | head -1)
awk -v e="$exact_qps" -v s="$search_qps" \
  'BEGIN { if (e > 0) printf "speed-up over exact search: %.1fx (%.1f vs %.1f queries/s)\n", s / e, s, e }'
