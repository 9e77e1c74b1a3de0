#!/usr/bin/env bash
# Runs the libFuzzer index-open target (tests/fuzz_open.c) for a bounded time,
# FUZZ_SECONDS (default 60), from seeds it builds itself (small indexes). A crash, a
# sanitizer report, a leak or an error without a message fails the test and leaves the
# input in $TEST_TMP/crashes/; replay it with `fuzz_open_replay FILE` or `fuzz_open FILE`.
set -euo pipefail
fuzzer=$1
work=${TEST_TMP:-$(mktemp -d)}
rm -rf "$work" && mkdir -p "$work/seeds" "$work/corpus" "$work/crashes"
# Every input is written out as files: a memory file system, where there is one, makes
# that several times faster than a disk.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
"$fuzzer" -seeds="$work/seeds"
dict=()
[ -n "${SRC:-}" ] && [ -f "$SRC/tests/fuzz_open.dict" ] && dict=(-dict="$SRC/tests/fuzz_open.dict")
if ! "$fuzzer" -max_total_time="${FUZZ_SECONDS:-60}" -timeout=30 -rss_limit_mb=3072 \
     -artifact_prefix="$work/crashes/" -print_final_stats=1 "${dict[@]}" \
     "$work/corpus" "$work/seeds" 2>"$work/log"; then
  tail -n 60 "$work/log" >&2
  echo "fuzz_open: failed; inputs in $work/crashes/" >&2
  exit 1
fi
grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done)" "$work/log" || true
echo "fuzz_open: no crash in ${FUZZ_SECONDS:-60}s"
