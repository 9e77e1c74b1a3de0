#!/usr/bin/env bash
# One-command GPU check on a CUDA machine (sized for an H100/H200 with 16 cores):
#   scripts/gpu-check.sh                  build there, then check (below)
#   scripts/gpu-check.sh --bundle DIR     on a machine WITHOUT a GPU but with the project's
#                                         dependencies and the CUDA toolkit: build for
#                                         sm_90 and put the test and CLI binaries, with
#                                         the shared libraries the GPU machine may lack
#                                         (OpenBLAS, cJSON, xxHash, SQLite), into DIR
#   scripts/gpu-check.sh --prebuilt DIR   on the GPU machine: check with DIR's binaries
#                                         (its own CUDA runtime and cuBLAS)
#   ... --sanitize                        compute-sanitizer (memcheck with leak check,
#                                         synccheck, initcheck, racecheck) on test_cuda
#                                         instead of the search table
# The check: the GPU tests (test_cuda_link, test_cuda: CUDA against the CPU backend and
# a host model of the GPU's arithmetic, test_api), then a ~10^7-token synthetic corpus,
# its index and exact top-100 truth, CPU vs CUDA search at two settings evaluated against
# the truth, and a table last: backend, params, Recall@100, QPS, p50/p99 latency, bytes
# up/down per query. Every step has its own timeout and the whole run a deadline; logs go
# to $WORK (default build-gpu/gpu-check, or DIR/gpu-check). Set CHECK_DOCS /
# CHECK_QUERIES to resize, CHECK_SECONDS for the deadline.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." >/dev/null && pwd)
BUILD=$ROOT/build-gpu
MODE=build PREBUILT= SANITIZE=0
while (( $# )); do
    case $1 in
    --bundle | --prebuilt)
        if (( $# < 2 )); then echo "$1 needs a directory" >&2; exit 2; fi
        MODE=${1#--} PREBUILT=$2
        shift 2 ;;
    --sanitize) SANITIZE=1; shift ;;
    *) echo "usage: $0 [--bundle DIR | --prebuilt DIR] [--sanitize]" >&2; exit 2 ;;
    esac
done
TESTS=(test_cuda_link test_cuda test_api)

if [[ $MODE == bundle ]]; then
    # Release with line info, so compute-sanitizer's reports name source lines. The
    # service and MPI front ends are left out: the check uses neither.
    cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCHIMERA_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo -DCHIMERA_SERVER=OFF \
        -DCHIMERA_MPI=OFF >/dev/null
    cmake --build "$BUILD" -j "$(nproc)" --target chimera "${TESTS[@]}"
    mkdir -p "$PREBUILT/bin" "$PREBUILT/lib"
    cp "$BUILD/chimera" "$PREBUILT/bin/"
    for t in "${TESTS[@]}"; do cp "$BUILD/tests/$t" "$PREBUILT/bin/"; done
    strip --strip-debug "$PREBUILT"/bin/* # host debug info: no debugger there; symbols stay
    # Every shared object but the C and C++ runtimes (any Linux has newer ones) and
    # CUDA's own (the GPU machine's must match its driver).
    for b in "$PREBUILT"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u |
        grep -v -E '/(libc|libm|libmvec|libdl|libpthread|librt|libresolv|libutil|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt)\.so' |
        while read -r lib; do cp -L "$lib" "$PREBUILT/lib/"; done
    echo "bundle in $PREBUILT: $(du -sh "$PREBUILT" | cut -f1) ($(ls "$PREBUILT/lib" | tr '\n' ' '))"
    echo "on the GPU machine: scripts/gpu-check.sh --prebuilt $PREBUILT [--sanitize]"
    exit 0
fi

if [[ $MODE == prebuilt ]]; then
    PREBUILT=$(cd "$PREBUILT" >/dev/null && pwd)
    BIN=$PREBUILT/bin
    WORK=${WORK:-$PREBUILT/gpu-check}
    export LD_LIBRARY_PATH=$PREBUILT/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    for b in "$BIN"/*; do
        missing=$(ldd "$b" | grep "not found" || true)
        if [[ -n $missing ]]; then
            echo "missing shared libraries for $b:" >&2
            echo "$missing" >&2
            exit 1
        fi
    done
else
    BIN=$BUILD/tests
    WORK=${WORK:-$BUILD/gpu-check}
fi
export PATH=$PATH:/usr/local/cuda/bin
DOCS=${CHECK_DOCS:-120000}     # x ~83 tokens (16..150) = ~10^7 tokens
QUERIES=${CHECK_QUERIES:-500}
JOBS=${JOBS:-$(nproc)}
# within a 10-minute command: the sanitizers take ~5 minutes on an H100 (racecheck ~4),
# the table ~6 at 10^7 tokens
CHECK_SECONDS=${CHECK_SECONDS:-560}
DEADLINE=$(( $(date +%s) + CHECK_SECONDS ))

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
    if (( rc != 0 )); then grep -v "^cuda worker" "$WORK/$name.log" | tail -n 30 || true; fi
    return $rc
}

mkdir -p "$WORK"
export CHIMERA_CUDA_PROFILE=1 # the CUDA backend prints per-stage device times at exit
log "gpu-check in $ROOT, work dir $WORK"
nvidia-smi --query-gpu=name,memory.total,memory.used,clocks.sm --format=csv,noheader || true

if [[ $MODE == build ]]; then
    step configure 60 cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DCHIMERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-lineinfo
    step build 150 cmake --build "$BUILD" -j "$JOBS"
    CLI=$BUILD/chimera
else
    CLI=$BIN/chimera
fi
TEST_RC=0
for t in "${TESTS[@]}"; do
    step "$t" 120 "$BIN/$t" || TEST_RC=$?
    grep -E "devices:|device:|skipped|passed" "$WORK/$t.log" || true
done

if (( SANITIZE )); then
    # racecheck is the slow one (~4 min for test_cuda on an H100): last.
    SAN_RC=0
    step memcheck 120 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
        "$BIN/test_cuda" || SAN_RC=$?
    step synccheck 90 compute-sanitizer --tool synccheck --error-exitcode 9 "$BIN/test_cuda" ||
        SAN_RC=$?
    step initcheck 90 compute-sanitizer --tool initcheck --error-exitcode 9 "$BIN/test_cuda" ||
        SAN_RC=$?
    step racecheck 330 compute-sanitizer --tool racecheck --print-limit 40 --error-exitcode 9 \
        "$BIN/test_cuda" || SAN_RC=$?
    for t in memcheck synccheck initcheck racecheck; do
        if [[ -f $WORK/$t.log ]]; then
            sum=$(grep -E "SUMMARY" "$WORK/$t.log" | tail -n 1 || true)
            echo "$t: ${sum:-no summary (cut short by its limit, or it did not start)}"
        fi
    done
    if (( TEST_RC != 0 || SAN_RC != 0 )); then
        log "FAILED (tests rc=$TEST_RC, sanitizers rc=$SAN_RC): see $WORK"
        exit 1
    fi
    exit 0
fi

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

# name backend nprobe k_refine k_fullbit CHIMERA_CUDA_SYNC (spin: the runtime's default;
# block: waiting workers sleep, leaving the cores to the host's full-bit scoring)
RUNS=(
    "cpu-a cpu 16 1000 200 spin"
    "cuda-a cuda 16 1000 200 spin"
    "cudabl-a cuda 16 1000 200 block"
    "cpu-b cpu 32 2000 400 spin"
    "cuda-b cuda 32 2000 400 spin"
    "cudabl-b cuda 32 2000 400 block"
)
ROWS=()
for r in "${RUNS[@]}"; do
    read -r name be np kr kf sync <<<"$r"
    rc=0
    step "search-$name" 45 env CHIMERA_CUDA_SYNC="$sync" "$CLI" search "$IDX" \
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
    ROWS+=("$(printf '%-8s %-5s np=%-3s kr=%-5s kf=%-4s %9s %9s %8s %8s %9s %9s' \
        "$name" "$be" "$np" "$kr" "$kf" "${recall:--}" "${qps:--}" "${p50:--}" "${p99:--}" \
        "${up:--}" "${down:--}")")
done

for p in cuda-a cudabl-a cuda-b cudabl-b; do # the CUDA runs' top 100 against the CPU's
    c=cpu-${p#*-}
    if [[ -f $WORK/$p.trec && -f $WORK/$c.trec ]]; then
        echo "$p against $c: $("$CLI" eval --run "$WORK/$p.trec" --truth "$WORK/$c.trec" \
            -k 100 --json | tr -d '\n')"
    fi
done
grep -h "^cuda worker" "$WORK"/search-cuda*.log 2>/dev/null | head -n 4 || true
echo
log "results ($DOCS docs, $QUERIES queries, $(( $(date +%s) - DEADLINE + CHECK_SECONDS ))s)"
printf '%-8s %-5s %-23s %9s %9s %8s %8s %9s %9s\n' run backend params R@100 QPS p50_ms \
    p99_ms KiB_up/q KiB_dn/q
for row in "${ROWS[@]}"; do echo "$row"; done
if (( TEST_RC != 0 )); then log "GPU tests FAILED (rc=$TEST_RC): see $WORK"; exit 1; fi
