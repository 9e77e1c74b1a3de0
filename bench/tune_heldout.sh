#!/usr/bin/env bash
# `chimera tune` against queries it never saw, on generated corpora of several dimensions,
# document lengths and structures (bench/recall_trust.sh's seven), for one or more
# chimera binaries side by side (bench/RESULTS.md section 5.27).
#
# Per corpus: 600 generated queries cut to 4-32 tokens (a seeded draw per query, as real
# queries vary), split into T (the first 300: the only queries `tune` sees; it holds out
# half of them itself) and H (the last 300: never seen by any tune). Per binary and k in
# {10, 100}: `chimera tune --target-recall 0.95` on T (exact truth computed by tune), then
# the setting it picked searched on H against exact search's top 100: its Recall@k and
# queries/s (the median of three rounds, the picks alternated within each round, every
# search by the first binary, so that only the settings differ).
# Every search runs on THREADS threads (default 2). Prints one row per corpus, k and
# binary: the pick, tune's own held-out mean and lower bound, tune's seconds, and H's
# recall and speed.
# Usage: bench/tune_heldout.sh WORKDIR CHIMERA [CHIMERA...]   (REGEX=... selects corpora)
set -euo pipefail
cd "$(dirname "$0")/.."
W=$1
shift
BINS=("$@")
THREADS=${THREADS:-2}
only=${REGEX:-.}
mkdir -p "$W"
source bench/corpora.sh
C=${BINS[0]}
printf "%-16s %4s %-4s %-24s %-16s %6s | %-8s %9s\n" corpus k bin "pick" "tune held-out" "tune s" \
  "H R@k" "H q/s"
for line in "${corpora[@]}"; do
  set -- $line
  name=$1
  shift
  [[ $name =~ $only ]] || continue
  d=$W/$name
  if [ ! -s "$d/H_truth.trec" ]; then
    "$C" gen --out "$d" --queries 600 "$@" >/dev/null
    python3 - "$d" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
q = np.load(f"{d}/queries.npy")
lens = np.random.default_rng(7).integers(4, min(32, q.shape[1]) + 1, size=q.shape[0])
for part, rows in (("T", range(0, 300)), ("H", range(300, 600))):
    np.save(f"{d}/{part}_flat.npy", np.concatenate([q[i, :lens[i]] for i in rows]).astype(np.float32))
    np.save(f"{d}/{part}_lens.npy", lens[list(rows)].astype(np.int64))
PY
    "$C" build --tokens "$d/tokens.npy" --doclens "$d/doclens.npy" --out "$d/idx" --no-sync \
      >"$d/build.log"
    "$C" exact --tokens "$d/tokens.npy" --doclens "$d/doclens.npy" --queries "$d/H_flat.npy" \
      --qlens "$d/H_lens.npy" -k 100 --threads "$THREADS" --out "$d/H_truth.trec" >/dev/null
  fi
  for k in 10 100; do
    declare -A pick=() held=() secs=() rates=()
    for b in "${!BINS[@]}"; do
      log=$d/tune_${k}_$b.log
      t0=$(date +%s.%N)
      "${BINS[$b]}" tune "$d/idx" --queries "$d/T_flat.npy" --qlens "$d/T_lens.npy" -k $k \
        --target-recall 0.95 --threads "$THREADS" --no-save >"$log" || true # no pick: below
      secs[$b]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
      pick[$b]=$(sed -n 's/.* at \(--nprobe .*\), [0-9.]* queries\/s$/\1/p' "$log")
      held[$b]=$(sed -n 's/^held-out Recall@[0-9]* \([0-9.]*\), 95% interval \[\([0-9.]*\),.*/\1 \2/p' "$log")
      rates[$b]=""
    done
    for round in 1 2 3; do
      for b in "${!BINS[@]}"; do
        [ -n "${pick[$b]}" ] || continue
        q=$("$C" search "$d/idx" --queries "$d/H_flat.npy" --qlens "$d/H_lens.npy" -k $k \
          ${pick[$b]} --threads "$THREADS" --out "$d/H_${k}_$b.trec" 2>&1 |
          sed -n 's/.* \([0-9.]*\) queries\/s.*/\1/p' | head -1)
        rates[$b]="${rates[$b]} $q"
      done
    done
    for b in "${!BINS[@]}"; do
      if [ -z "${pick[$b]}" ]; then
        printf "%-16s %4s %-4s %s\n" "$name" $k "#$b" "no pick (see $d/tune_${k}_$b.log)"
        continue
      fi
      short=$(echo "${pick[$b]}" | awk '{ print $2 "/" $4 "/" $6 }')
      med=$(echo ${rates[$b]} | tr ' ' '\n' | sort -g | sed -n 2p)
      printf "%-16s %4s %-4s %-24s %-16s %6.1f | %-8s %9s\n" "$name" $k "#$b" "$short" \
        "${held[$b]}" "${secs[$b]}" "$(recall "$d/H_${k}_$b.trec" "$d/H_truth.trec" $k)" "$med"
    done
    unset pick held secs rates
  done
done
