#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, generate the demo corpus
# (10,000 documents, ~0.8M tokens of 128-d vectors, 200 queries), compute the exact
# Chamfer top-100 (the ground truth) and evaluate against it: recall, MRR@10, queries/s.
# Usage: scripts/demo.sh [DIR]   (default: demo/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
dir=${1:-demo}
bin=build/chimera
if [ ! -s "$dir/tokens.npy" ]; then
  "$bin" gen --out "$dir" --docs 10000 --queries 200 --dim 128 --seed 1
fi
echo "== exact search (ground truth)"
"$bin" exact --tokens "$dir/tokens.npy" --doclens "$dir/doclens.npy" --queries "$dir/queries.npy" \
  -k 100 --out "$dir/truth.trec"
echo "== evaluation of the exact run"
"$bin" eval --run "$dir/truth.trec" --truth "$dir/truth.trec" -k 10,100 --qrels "$dir/qrels.tsv"
