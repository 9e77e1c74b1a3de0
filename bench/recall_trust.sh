#!/usr/bin/env bash
# Calibrated defaults and held-out tuning on corpora the calibration was not designed on
# (bench/RESULTS.md section 5.6): generated corpora of several dimensions, document
# lengths and structures (flat to strongly clustered), each searched with its own
# generated queries, which resemble real queries more than the build's pseudo-queries.
# For each corpus: build (with the calibration: its seconds, share of the build and the
# settings it chose), exact top-100 of the queries, Recall@10
# and @100 of a search without parameters (the index's calibrated defaults) and with the
# library's fixed defaults, then `chimera tune` on the queries (exact truth computed by
# tune itself, a held-out half) for Recall@10 >= 0.95, and the tuned profile's recall on
# the held-out-style check. Prints one table row per corpus.
# Usage: bench/recall_trust.sh [WORKDIR] [CHIMERA] [REGEX]
#   (default /tmp/recall_trust, build/chimera; REGEX selects corpora by name)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/recall_trust}
C=${2:-build/chimera}
only=${3:-.}
mkdir -p "$W"
source bench/corpora.sh
qps() { sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' "$1" | head -1; }
printf "%-18s %9s %12s | %-14s %-14s | %-22s %-22s | %-22s %-22s | %-9s %-24s %s\n" corpus \
  tokens "cal s (%)" "cal k=10" "cal k=100" "default R@10 (QPS)" "default R@100 (QPS)" \
  "fixed R@10 (QPS)" "fixed R@100 (QPS)" "assign" "tuned R@10 held-out" "[95% CI]"
for line in "${corpora[@]}"; do
  set -- $line
  name=$1; shift
  [[ $name =~ $only ]] || continue
  d=$W/$name
  [ -s "$d/tokens.npy" ] || "$C" gen --out "$d" --queries 200 "$@" >/dev/null
  "$C" build --tokens "$d/tokens.npy" --doclens "$d/doclens.npy" --out "$d/idx" --no-sync >"$d/build.log"
  [ -s "$d/truth.trec" ] || "$C" exact --tokens "$d/tokens.npy" --doclens "$d/doclens.npy" \
    --queries "$d/queries.npy" -k 100 --out "$d/truth.trec" >/dev/null
  "$C" search "$d/idx" --queries "$d/queries.npy" -k 10 --out "$d/r10.trec" >"$d/s10.log"
  "$C" search "$d/idx" --queries "$d/queries.npy" -k 100 --out "$d/r100.trec" >"$d/s100.log"
  "$C" search "$d/idx" --queries "$d/queries.npy" -k 10 --nprobe 8 --k-refine 160 --k-fullbit 40 \
    --chunks 4 --out "$d/f10.trec" >"$d/f10.log"
  "$C" search "$d/idx" --queries "$d/queries.npy" -k 100 --nprobe 16 --k-refine 1600 \
    --k-fullbit 400 --chunks 4 --out "$d/f100.trec" >"$d/f100.log"
  "$C" tune "$d/idx" --queries "$d/queries.npy" -k 10 --target-recall 0.95 --no-save >"$d/tune.log"
  tokens=$(sed -n 's/^built [^:]*: \([0-9]*\) tokens.*/\1/p' "$d/build.log")
  assign=$(sed -n 's/.*assignment recall \([0-9.]*\).*/\1/p' "$d/build.log")
  cal=$(awk '/^time:/ { for (i = 2; i <= NF; i++) { if ($i == "calibrate") c = $(i+1); if ($i == "total") t = $(i+1) } }
             END { gsub("s", "", c); gsub("s", "", t); if (t > 0) printf "%.2f (%.1f)", c, 100 * c / t }' "$d/build.log")
  # the calibrated n_probe/k_refine/k_fullbit per k, as the build reports them
  calk() { grep -o "k=$1 .*--chunks" "$d/build.log" | head -1 | awk '{ print $3 "/" $5 "/" $7 }'; }
  held=$(sed -n 's/^held-out Recall@10 \([0-9.]*\), 95% interval \(\[[0-9.]*, [0-9.]*\]\).*/\1 \2/p' "$d/tune.log")
  printf "%-18s %9s %12s | %-14s %-14s | %-22s %-22s | %-22s %-22s | %-9s %-24s\n" "$name" \
    "$tokens" "$cal" "$(calk 10)" "$(calk 100)" \
    "$(recall "$d/r10.trec" "$d/truth.trec" 10) ($(qps "$d/s10.log"))" \
    "$(recall "$d/r100.trec" "$d/truth.trec" 100) ($(qps "$d/s100.log"))" \
    "$(recall "$d/f10.trec" "$d/truth.trec" 10) ($(qps "$d/f10.log"))" \
    "$(recall "$d/f100.trec" "$d/truth.trec" 100) ($(qps "$d/f100.log"))" \
    "$assign" "$held"
done
