#!/usr/bin/env bash
# Search filters through the CLI: `chimera search --subset` returns only the listed ids
# (every result checked, k of them while the set has k), `--exclude` never returns the
# listed ids (and, without --k-fullbit, re-scores more than the default k_fullbit: twice
# it, as the library does for a filtered query, or every allowed document; an explicit
# one is kept), `--subset-per-query` gives
# each query its own set (a query with no line
# returns nothing), and bad use fails before searching with a message: two filters at
# once, a malformed per-query line (named by its line number), a query number out of
# range, a negative id.
set -u
. "$(dirname "$0")/lib.sh"
"$CHIMERA" gen --out "$T/c" --docs 800 --dim 32 --queries 20 --seed 3 >/dev/null || bad "gen failed"
"$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/idx" \
  --no-sync >/dev/null || bad "build failed"
S=("$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 10 --threads 1)

# --subset: ids that are multiples of 7 (ids are rows)
seq 0 7 799 >"$T/sub.txt"
"${S[@]}" --subset "$T/sub.txt" --out "$T/r1" >/dev/null && ok || bad "search --subset failed"
n=$(wc -l <"$T/r1")
[ "$n" = 200 ] && ok || bad "--subset: $n result lines, expected 20 queries x 10"
awk '$3 % 7 != 0 {bad++} END {exit bad > 0}' "$T/r1" && ok || bad "--subset returned an id outside the set"

# a set smaller than k: exactly its live members
printf '5\n9\n' >"$T/two.txt"
"${S[@]}" --subset "$T/two.txt" --out "$T/r2" >/dev/null && ok || bad "search --subset (2 ids) failed"
[ "$(awk '{print $1}' "$T/r2" | sort | uniq -c | awk '$1 != 2' | wc -l)" = 0 ] && ok ||
  bad "--subset of 2 ids: not exactly 2 results per query"
awk '$3 != 5 && $3 != 9 {bad++} END {exit bad > 0}' "$T/r2" && ok || bad "--subset of 2 ids: another id returned"

# --exclude: never the even ids
seq 0 2 799 >"$T/even.txt"
"${S[@]}" --exclude "$T/even.txt" --out "$T/r3" >/dev/null && ok || bad "search --exclude failed"
[ "$(wc -l <"$T/r3")" = 200 ] && ok || bad "--exclude: not 10 results per query"
awk '$3 % 2 == 0 {bad++} END {exit bad > 0}' "$T/r3" && ok || bad "--exclude returned an excluded id"

# a filtered search without --k-fullbit re-scores twice the default (the library's deeper
# defaults for filtered queries reach the CLI's searches too), and --profile says so
prof=$("${S[@]}" --exclude "$T/even.txt" --profile 2>&1)
fb=$(printf '%s\n' "$prof" | sed -n 's/.* \([0-9.]*\) full-bit scored (k_fullbit \([0-9]*\)).*/\1 \2/p')
def=$(printf '%s\n' "$prof" | sed -n 's/^search:.* k_fullbit=\([0-9]*\) .*/\1/p')
awk -v fb="$fb" -v d="$def" 'BEGIN { split(fb, a, " "); exit !(a[1] + 0 > d + 0 && a[2] + 0 > d + 0 && d > 0) }' && ok ||
  bad "--exclude without --k-fullbit: full-bit scored per query / filtered k_fullbit: $fb, default $def"
# an explicit --k-fullbit is the user's own, filter or not
prof=$("${S[@]}" --exclude "$T/even.txt" --k-fullbit 30 --k-refine 120 --profile 2>&1)
printf '%s\n' "$prof" | grep -q ' 30.0 full-bit scored (k_fullbit 30)' && ok ||
  bad "--exclude with --k-fullbit 30: $(printf '%s\n' "$prof" | grep candidates)"

# --subset-per-query: query q may return ids q, q + 20, q + 40, ...; query 19 gets no line
for q in $(seq 0 18); do seq "$q" 20 799 | sed "s/^/$q /"; done >"$T/pq.txt"
"${S[@]}" --subset-per-query "$T/pq.txt" --out "$T/r4" >/dev/null && ok || bad "search --subset-per-query failed"
awk '$3 % 20 != $1 {bad++} END {exit bad > 0}' "$T/r4" && ok || bad "--subset-per-query: a result outside its query's set"
[ "$(awk '$1 == 19' "$T/r4" | wc -l)" = 0 ] && ok || bad "--subset-per-query: a query without lines got results"
[ "$(awk '$1 == 3' "$T/r4" | wc -l)" = 10 ] && ok || bad "--subset-per-query: query 3 lacks 10 results"

# mistakes
expect_error() { # WHAT CODE NEEDLE CMD...
  local what=$1 code=$2 needle=$3
  shift 3
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  [ $rc = "$code" ] && grep -q -- "$needle" "$T/err" && ok ||
    bad "$what: exit $rc (want $code), stderr: $(cat "$T/err")"
}
expect_error "two filters" 2 "alternatives" "${S[@]}" --subset "$T/sub.txt" --exclude "$T/even.txt"
printf '0 5\n1 x\n' >"$T/badline.txt"
expect_error "malformed per-query line" 1 "badline.txt:2" "${S[@]}" --subset-per-query "$T/badline.txt"
printf '20 5\n' >"$T/range.txt"
expect_error "query number out of range" 1 "range.txt:1" "${S[@]}" --subset-per-query "$T/range.txt"
printf '5\n-3\n' >"$T/neg.txt"
expect_error "negative id" 1 "negative" "${S[@]}" --subset "$T/neg.txt"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
