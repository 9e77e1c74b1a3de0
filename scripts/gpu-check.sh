#!/usr/bin/env bash
# One-command GPU check on a CUDA machine (sized for an H200 with 16 cores, <= 6 min):
#   1. configure + build Release for sm_90 into build-gpu
#   2. the GPU tests (ctest -R cuda)
#   3. a ~10^7-token synthetic corpus, its index and exact top-100 truth
#   4. CPU vs CUDA search at two parameter settings, evaluated against the truth
# and a table last: backend, params, Recall@100, QPS, p50/p99 latency, bytes up/down
# per query. Every step has its own timeout and the whole run a deadline; logs go to
# $WORK (default build-gpu/gpu-check). Set CHECK_DOCS / CHECK_QUERIES to resize.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-gpu
WORK=${WORK:-$BUILD/gpu-check}
DOCS=${CHECK_DOCS:-120000}     # x ~83 tokens (16..150) = ~10^7 tokens
QUERIES=${CHECK_QUERIES:-500}
JOBS=${JOBS:-$(nproc)}
DEADLINE=$(( $(date +%s) + ${CHECK_SECONDS:-355} ))

ts() { date +%H:%M:%S; }
log() { echo "[$(ts)] $*"; }
left() { echo $(( DEADLINE - $(date +%s) )); }
# step NAME LIMIT_S CMD...: runs CMD under timeout min(LIMIT_S, time left), logs to WORK.
step() {
    local name=$1 lim=$2
    shift 2
    local l; l=$(left)
    if (( l < lim )); then lim=$l; fi
    if (( lim <= 5 )); then log "$name: no time left"; return 124; fi
    log "$name (limit ${lim}s)"
    local t0; t0=$(date +%s)
    local rc=0
    timeout --kill-after=5 "$lim" "$@" > "$WORK/$name.log" 2>&1 || rc=$?
    log "$name: rc=$rc in $(( $(date +%s) - t0 ))s"
    if (( rc != 0 )); then tail -n 30 "$WORK/$name.log"; fi
    return $rc
}

mkdir -p "$WORK"
export CHIMERA_CUDA_PROFILE=1 # the CUDA backend prints per-stage device times at exit
log "gpu-check in $ROOT, work dir $WORK"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm --format=csv,noheader || true

step configure 60 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DCHIMERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
step build 150 cmake --build "$BUILD" -j "$JOBS"
TEST_RC=0
step tests 60 ctest --test-dir "$BUILD" -R cuda --output-on-failure || TEST_RC=$?
grep -E "skipped|passed|failed|Test #" "$WORK/tests.log" || true

CLI=$BUILD/chimera
DATA=$WORK/data
IDX=$WORK/idx
if [[ ! -f $DATA/queries.npy ]]; then
    step gen 40 "$CLI" gen --out "$DATA" --docs "$DOCS" --queries "$QUERIES" --min-len 16 \
        --max-len 150 --seed 1
fi
if [[ ! -d $IDX ]]; then
    step index 120 "$CLI" build --tokens "$DATA/tokens.npy" --doclens "$DATA/doclens.npy" \
        --out "$IDX" --threads "$JOBS" --no-sync
fi
if [[ ! -f $WORK/truth.trec ]]; then
    step truth 90 "$CLI" exact --tokens "$DATA/tokens.npy" --doclens "$DATA/doclens.npy" \
        --queries "$DATA/queries.npy" -k 100 --out "$WORK/truth.trec" --threads "$JOBS"
fi

# name backend nprobe k_refine k_fullbit
RUNS=(
    "cpu-a cpu 16 1000 200"
    "cuda-a cuda 16 1000 200"
    "cpu-b cpu 32 2000 400"
    "cuda-b cuda 32 2000 400"
)
ROWS=()
for r in "${RUNS[@]}"; do
    read -r name be np kr kf <<<"$r"
    rc=0
    step "search-$name" 45 "$CLI" search "$IDX" \
        --queries "$DATA/queries.npy" -k 100 --out "$WORK/$name.trec" --nprobe "$np" \
        --k-refine "$kr" --k-fullbit "$kf" --chunks 4 --threads "$JOBS" --backend "$be" \
        --profile || rc=$?
    recall=- qps=- p50=- p99=- up=- down=-
    if (( rc == 0 )); then
        line=$(grep -E "queries/s" "$WORK/search-$name.log" | tail -n 1 || true)
        qps=$(sed -nE 's/.* ([0-9.]+) queries\/s.*/\1/p' <<<"$line")
        p50=$(sed -nE 's/.* p50 ([0-9.]+).*/\1/p' <<<"$line")
        p99=$(sed -nE 's/.* p99 ([0-9.]+).*/\1/p' <<<"$line")
        tr=$(grep -E "traffic" "$WORK/search-$name.log" | tail -n 1 || true)
        up=$(sed -nE 's/.*: ([0-9.]+) KiB up.*/\1/p' <<<"$tr")
        down=$(sed -nE 's/.* ([0-9.]+) KiB down.*/\1/p' <<<"$tr")
        if step "eval-$name" 20 "$CLI" eval --run "$WORK/$name.trec" --truth "$WORK/truth.trec" \
            -k 100 --json; then
            recall=$(sed -nE 's/.*"recall@100": ([0-9.]+).*/\1/p' "$WORK/eval-$name.log")
        fi
    fi
    ROWS+=("$(printf '%-7s %-5s np=%-3s kr=%-5s kf=%-4s %9s %9s %8s %8s %9s %9s' \
        "$name" "$be" "$np" "$kr" "$kf" "${recall:--}" "${qps:--}" "${p50:--}" "${p99:--}" \
        "${up:--}" "${down:--}")")
done

grep -h "^cuda worker" "$WORK"/search-cuda-*.log 2>/dev/null | head -n 4 || true
echo
log "results ($DOCS docs, $QUERIES queries, $(( $(date +%s) - DEADLINE + ${CHECK_SECONDS:-355} ))s)"
printf '%-7s %-5s %-23s %9s %9s %8s %8s %9s %9s\n' run backend params R@100 QPS p50_ms \
    p99_ms KiB_up/q KiB_dn/q
for row in "${ROWS[@]}"; do echo "$row"; done
if (( TEST_RC != 0 )); then log "GPU tests FAILED (rc=$TEST_RC): see $WORK/tests.log"; exit 1; fi
