#!/usr/bin/env bash
# Calibrated defaults on short queries: bench/corpora.sh's generated corpora, each
# searched with no flags on its 200 generated queries cut to 4-16 tokens
# (numpy default_rng(3)), against exact search, for one or two chimera binaries (a
# baseline build beside this one: their calibrations compared on the same data).
# Prints per corpus and binary the calibration's seconds of the build and, per k, the
# default it stored and its Recall@k (bench/RESULTS.md section 5.35). Both indexes are
# searched by CHIMERA: what differs is the calibration. Paths are taken from the
# repository's root.
# Usage: bench/short_queries.sh [WORKDIR] [CHIMERA] [BASELINE_CHIMERA] [REGEX]
#   (default /tmp/short_queries, build/chimera, none; REGEX selects corpora by name)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/short_queries}
C=${2:-build/chimera}
BASE=${3:-}
only=${4:-.}
mkdir -p "$W"
source bench/corpora.sh
for line in "${corpora[@]}"; do
  set -- $line
  name=$1; shift
  [[ $name =~ $only ]] || continue
  d=$W/$name
  [ -s "$d/tokens.npy" ] || "$C" gen --out "$d" --queries 200 "$@" >/dev/null
  [ -s "$d/q_lens.npy" ] || python3 - "$d" <<'PY'
import sys, numpy as np
d = sys.argv[1]
q = np.load(d + "/queries.npy")
n = q.shape[0]
lens = np.minimum(np.random.default_rng(3).integers(4, 17, size=n), q.shape[1])
np.save(d + "/q_flat.npy", np.concatenate([q[i, :lens[i]] for i in range(n)]).astype(np.float32))
np.save(d + "/q_lens.npy", lens.astype(np.int64))
PY
  [ -s "$d/truth.trec" ] || "$C" exact --tokens "$d/tokens.npy" --doclens "$d/doclens.npy" \
    --queries "$d/q_flat.npy" --qlens "$d/q_lens.npy" -k 100 --out "$d/truth.trec" >/dev/null
  for v in this ${BASE:+baseline}; do
    B=$C
    [ "$v" = baseline ] && B=$BASE
    "$B" build --tokens "$d/tokens.npy" --doclens "$d/doclens.npy" --out "$d/idx.$v" \
      --no-sync >"$d/build.$v.log"
    cal=$(awk '/^time:/ { for (i = 2; i <= NF; i++) { if ($i == "calibrate") c = $(i+1);
                                                     if ($i == "total") t = $(i+1) } }
               END { gsub("s", "", c); gsub("s", "", t); printf "%s of %s s", c, t }' \
          "$d/build.$v.log")
    out="$name $v: calibrate $cal"
    for k in 10 100; do
      "$C" search "$d/idx.$v" --queries "$d/q_flat.npy" --qlens "$d/q_lens.npy" -k $k \
        --out "$d/r$k.$v.trec" >/dev/null
      stored=$(grep -o "k=$k .*--chunks" "$d/build.$v.log" | head -1 |
               awk '{ print $3 "/" $5 "/" $7 }' || true)
      out="$out | k=$k ${stored:-(not calibrated)} Recall@$k $(recall "$d/r$k.$v.trec" "$d/truth.trec" $k)"
    done
    echo "$out"
  done
done
