#!/usr/bin/env bash
# The real corpus end to end, as a user would run it: build with the defaults, search with
# no flags, tune on one half of the real queries, and measure the other half against exact
# search, all in one run (bench/RESULTS.md section 5.25).
#
#   bash bench/real_targets.sh [CORPUS_DIR] [WORK_DIR]
#
# CORPUS_DIR: bench/data's layout (tokens.npy, doclens.npy, queries_flat.npy, qlens.npy;
# default bench/data/out, built by bench/data/make_corpus.py). WORK_DIR (default
# /tmp/real-targets) receives the index, the query halves and the runs.
# Environment: THREADS (2), ROUNDS (3), SEED (5, the split), BUILD_FLAGS (e.g.
# "--bits 8"), EXTRA (more settings to time, "k|flags;k|flags", e.g. a sweep's picks
# made on T), CHIMERA (the binary, default build/chimera).
#
# The queries are split in two halves by a seeded permutation: T (tuning) and H (held
# out). `chimera tune` sees only T (it computes T's exact truth itself and checks its
# pick on a held-out part of T); every recall printed is on H, against H's exact top 100
# from `chimera exact`. Speed: each setting and exact search, same threads, alternated
# ROUNDS times, the median of the CLI's queries/s (its own warm-up queries excluded).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$HERE")"
C="${CHIMERA:-$ROOT/build/chimera}"
D="${1:-$ROOT/bench/data/out}"
W="${2:-/tmp/real-targets}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
SEED="${SEED:-5}"
mkdir -p "$W"
LOG="$W/commands.log" # what the searches, evals and builds print to stderr
: > "$LOG"
trap 'echo "real_targets: a command failed near line $LINENO (its messages: $LOG)" >&2' ERR

for f in tokens.npy doclens.npy queries_flat.npy qlens.npy; do
    [ -f "$D/$f" ] || { echo "real_targets: $D/$f missing (run bench/data/make_corpus.py)" >&2; exit 2; }
done

echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, $(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "== date: $(date -u '+%Y-%m-%d %H:%M UTC'), chimera $("$C" version 2>&1 | head -1), $THREADS threads"

# the two halves, flat [total, dim] with their lengths
python3 - "$D" "$W" "$SEED" <<'EOF'
import sys, numpy as np
d, w, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
flat = np.load(f"{d}/queries_flat.npy"); lens = np.load(f"{d}/qlens.npy").astype(np.int64)
off = np.concatenate([[0], np.cumsum(lens)])
perm = np.random.default_rng(seed).permutation(len(lens))
half = len(lens) // 2
for name, ids in (("T", np.sort(perm[:half])), ("H", np.sort(perm[half:]))):
    np.save(f"{w}/{name}_flat.npy", np.concatenate([flat[off[i]:off[i + 1]] for i in ids]).astype(np.float32))
    np.save(f"{w}/{name}_lens.npy", lens[ids])
    print(f"queries {name}: {len(ids)}, tokens per query mean {lens[ids].mean():.1f}, "
          f"min {lens[ids].min()}, max {lens[ids].max()}")
EOF

# always a fresh index: one left by another corpus or BUILD_FLAGS would be timed instead
rm -rf "$W/idx" "$W/idx.lock"
echo "== build (defaults${BUILD_FLAGS:+, $BUILD_FLAGS})"
# shellcheck disable=SC2086
/usr/bin/time -f "build wall %e s, peak RSS %M KiB" \
    "$C" build --tokens "$D/tokens.npy" --doclens "$D/doclens.npy" --out "$W/idx" \
    --threads "$THREADS" --no-sync ${BUILD_FLAGS:-} 2>&1 | tr '\r' '\n' | tail -2
"$C" info "$W/idx" | sed -n '/^  tokens/p;/^  bits/p;/^  clusters/p;/^  build/p;/^  defaults/,/^  source/p;/^  phases/p'

echo "== exact top-100 of H"
"$C" exact --tokens "$D/tokens.npy" --doclens "$D/doclens.npy" --queries "$W/H_flat.npy" \
    --qlens "$W/H_lens.npy" -k 100 --threads "$THREADS" --out "$W/H_truth.trec" 2>&1 | tail -1

H=(--queries "$W/H_flat.npy" --qlens "$W/H_lens.npy")
recall() { # RUN K -> Recall@K of the run on H
    "$C" eval --run "$1" --truth "$W/H_truth.trec" -k "$2" --json |
        python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['recall@$2'])"
}

echo "== the index's defaults (no flags), held-out recall"
for k in 10 100; do
    "$C" search "$W/idx" "${H[@]}" -k $k --threads "$THREADS" --out "$W/H_default_$k.trec" >/dev/null 2>>"$LOG"
    echo "k=$k defaults: Recall@$k $(recall "$W/H_default_$k.trec" $k)"
done

echo "== chimera tune on T (target 0.95), then --recall 0.95 on H"
for k in 10 100; do
    "$C" tune "$W/idx" --queries "$W/T_flat.npy" --qlens "$W/T_lens.npy" --tokens "$D/tokens.npy" \
        --doclens "$D/doclens.npy" --target-recall 0.95 -k $k --threads "$THREADS" 2>&1 | tail -3
    "$C" search "$W/idx" "${H[@]}" -k $k --recall 0.95 --threads "$THREADS" \
        --out "$W/H_tuned_$k.trec" >/dev/null 2>>"$LOG"
    echo "k=$k tuned profile on H: Recall@$k $(recall "$W/H_tuned_$k.trec" $k)"
done

# Settings timed against exact search: the defaults, the tuned profile, and any given in
# EXTRA as "k|flags;k|flags" (e.g. a hand sweep's pick).
settings=("10|" "100|" "10|--recall 0.95" "100|--recall 0.95")
IFS=';' read -r -a extra <<< "${EXTRA:-}"
for e in "${extra[@]}"; do [ -n "$e" ] && settings+=("$e"); done

echo "== speed on H, alternated $ROUNDS rounds (median queries/s)"
declare -A qps
for ((r = 0; r < ROUNDS; r++)); do
    for s in "${settings[@]}"; do
        k="${s%%|*}"; flags="${s#*|}"
        # shellcheck disable=SC2086
        v=$("$C" search "$W/idx" "${H[@]}" -k "$k" $flags --threads "$THREADS" \
            --out "$W/H_timed.trec" 2>&1 | grep -o '[0-9.]* queries/s' | cut -d' ' -f1)
        qps["$s"]+="$v "
        [ "$r" = 0 ] && qps["$s/recall"]=$(recall "$W/H_timed.trec" "$k")
    done
    v=$("$C" exact --tokens "$D/tokens.npy" --doclens "$D/doclens.npy" "${H[@]}" -k 100 \
        --threads "$THREADS" --out "$W/H_exact_timed.trec" 2>&1 | grep -o '[0-9.]* queries/s' | cut -d' ' -f1)
    qps[exact]+="$v "
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ex=$(echo "${qps[exact]}" | median)
echo "exact search: ${qps[exact]}-> median $ex queries/s"
printf '%-5s %-48s %9s %10s %9s\n' k setting Recall@k "queries/s" "x exact"
for s in "${settings[@]}"; do
    k="${s%%|*}"; flags="${s#*|}"
    m=$(echo "${qps[$s]}" | median)
    printf '%-5s %-48s %9s %10s %8.1fx\n' "$k" "${flags:-(defaults)}" "${qps[$s/recall]}" "$m" \
        "$(python3 -c "print($m / $ex)")"
done
