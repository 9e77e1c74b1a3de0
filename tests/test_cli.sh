#!/usr/bin/env bash
# End to end through the CLI: gen -> exact -> eval gives recall 1.0 of the truth against
# itself and a sensible MRR; exact on float16 tokens matches float32; and bad input
# (wrong query dimension, truncated or corrupt .npy, lengths that do not add up, NaN,
# missing or unknown options) exits non-zero with a message naming the problem, leaves
# no partial output and does not touch an existing output file.
set -u
. "$(dirname "$0")/lib.sh"

"$CHIMERA" gen --out "$T/c" --docs 400 --queries 20 --dim 64 --seed 1 >"$T/gen.out" || bad "gen failed"
for f in tokens.npy doclens.npy queries.npy qrels.tsv; do [ -s "$T/c/$f" ] && ok || bad "gen: $f missing"; done
"$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" \
  -k 50 --out "$T/truth.trec" >"$T/exact.out" || bad "exact failed: $(cat "$T/exact.out")"
[ "$(wc -l <"$T/truth.trec")" -eq 1000 ] && ok || bad "truth should have 20 x 50 lines"
"$CHIMERA" eval --run "$T/truth.trec" --truth "$T/truth.trec" -k 10,50 --qrels "$T/c/qrels.tsv" --json >"$T/eval.json" || bad "eval failed"
grep -q '"recall@10": 1.000000' "$T/eval.json" && grep -q '"recall@50": 1.000000' "$T/eval.json" && ok || bad "recall is not 1: $(cat "$T/eval.json")"
mrr=$(sed -n 's/.*"mrr@10": \([0-9.]*\).*/\1/p' "$T/eval.json")
awk -v m="$mrr" 'BEGIN { exit !(m > 0.2) }' && ok || bad "MRR@10 $mrr is implausibly low"

# a cut-off past a run's depth is flagged: the run of depth 10 against Recall@50, and the
# truth of depth 50 against Recall@80; cut-offs within both depths are not
awk '$4 <= 10' "$T/truth.trec" >"$T/r10.trec"
"$CHIMERA" eval --run "$T/r10.trec" --truth "$T/truth.trec" -k 10 2>"$T/w10.err" >/dev/null
[ ! -s "$T/w10.err" ] && ok || bad "eval warned within the depths: $(cat "$T/w10.err")"
"$CHIMERA" eval --run "$T/r10.trec" --truth "$T/truth.trec" -k 10,50,80 >/dev/null 2>"$T/w.err" || bad "eval failed"
grep -q 'r10.trec holds at most 10 hits a query, so Recall@50 counts the rest as missed' "$T/w.err" &&
  grep -q 'truth.trec holds at most 50 hits a query, so Recall@80 is measured against those only' "$T/w.err" &&
  [ "$(wc -l <"$T/w.err")" -eq 3 ] && ok || bad "eval's depth warnings: $(cat "$T/w.err")"

# determinism: the same seed gives the same files
"$CHIMERA" gen --out "$T/c2" --docs 400 --queries 20 --dim 64 --seed 1 >/dev/null
cmp -s "$T/c/tokens.npy" "$T/c2/tokens.npy" && cmp -s "$T/c/queries.npy" "$T/c2/queries.npy" && ok || bad "gen is not deterministic"

# float16 tokens give the same ranking (up to rounding: check recall@10 >= 0.95)
python3 - "$T" <<'PY' 2>/dev/null && have_np=1 || have_np=0
import sys, numpy as np
t = sys.argv[1]
np.save(t + "/tok16.npy", np.load(t + "/c/tokens.npy").astype(np.float16))
PY
if [ $have_np = 1 ]; then
  "$CHIMERA" exact --tokens "$T/tok16.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" -k 10 --out "$T/t16.trec" >/dev/null || bad "exact on float16 failed"
  "$CHIMERA" eval --run "$T/t16.trec" --truth "$T/truth.trec" -k 10 --json >"$T/e16.json"
  r=$(sed -n 's/.*"recall@10": \([0-9.]*\).*/\1/p' "$T/e16.json")
  awk -v r="$r" 'BEGIN { exit !(r >= 0.95) }' && ok || bad "float16 recall@10 $r"
fi

# bad input
"$CHIMERA" gen --out "$T/d32" --docs 50 --queries 3 --dim 32 >/dev/null
echo "precious" >"$T/keep.trec"
expect_fail "query dimension" "dimension 32, the corpus 64" \
  "$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/d32/queries.npy" -k 5 --out "$T/keep.trec"
[ "$(cat "$T/keep.trec")" = precious ] && ok || bad "existing output was modified"
ls "$T" | grep -q 'tmp-' && bad "temporary file left behind" || ok
head -c 3000 "$T/c/tokens.npy" >"$T/trunc.npy"
expect_fail "truncated tokens" "truncated" \
  "$CHIMERA" exact --tokens "$T/trunc.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec"
[ -e "$T/x.trec" ] && bad "output written despite the error" || ok
printf 'garbage' >"$T/garbage.npy"
expect_fail "not npy" "not a .npy file" \
  "$CHIMERA" exact --tokens "$T/garbage.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec"
expect_fail "doclens mismatch" "document lengths" \
  "$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/d32/doclens.npy" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec"
expect_fail "missing -k" "-k is required" \
  "$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" --out "$T/x.trec"
expect_fail "unknown option" "unknown option" "$CHIMERA" gen --out "$T/y" --bogus 3
expect_fail "bad number" "not a valid value" "$CHIMERA" gen --out "$T/y" --docs many
expect_fail "unknown command" "unknown command" "$CHIMERA" frobnicate
expect_fail "eval malformed" "expected 6 fields" \
  "$CHIMERA" eval --run "$T/c/qrels.tsv" --truth "$T/truth.trec"
if [ $have_np = 1 ]; then
  python3 - "$T" <<'PY'
import sys, numpy as np
t = sys.argv[1]
x = np.load(t + "/c/tokens.npy"); x[77, 5] = np.nan; np.save(t + "/nan.npy", x)
np.save(t + "/fortran.npy", np.asfortranarray(np.load(t + "/c/tokens.npy")[:10]))
PY
  expect_fail "NaN token" "row 77" \
    "$CHIMERA" exact --tokens "$T/nan.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec"
  expect_fail "Fortran order" "Fortran" \
    "$CHIMERA" exact --tokens "$T/fortran.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec"
fi
"$CHIMERA" info >"$T/info.out" && grep -q simd "$T/info.out" && ok || bad "info failed"
# help asked for is the output: on stdout, exit 0 (a mistake's usage goes to stderr)
"$CHIMERA" --help 2>/dev/null | grep -q "^usage: chimera COMMAND" && ok || bad "chimera --help not on stdout"
"$CHIMERA" search --help 2>/dev/null | grep -q -- "--queries" && ok || bad "search --help not on stdout"
"$CHIMERA" meta --help 2>/dev/null | grep -q "^usage: chimera meta import" && ok ||
  bad "meta --help: no usage on stdout"
"$CHIMERA" meta --help >/dev/null 2>&1 && ok || bad "meta --help exits non-zero"
"$CHIMERA" search 2>/dev/null | grep -q usage && bad "a mistake's usage went to stdout" || ok
# --version names the kernel level, and CHIMERA_SIMD caps it whatever this CPU has
"$CHIMERA" --version | grep -Eq '^chimera [0-9.]+ \(simd (scalar|avx2|avx512)\)$' && ok || bad "--version: $("$CHIMERA" --version)"
CHIMERA_SIMD=scalar "$CHIMERA" --version | grep -q '(simd scalar)' && ok || bad "CHIMERA_SIMD=scalar not honoured"

# outputs that are not regular files: a FIFO (as /dev/null or a pipe) is written in place,
# never replaced by a regular file; a symbolic link stays a link and its file is updated
mkfifo "$T/fifo"
cat "$T/fifo" >"$T/fifo.out" &
reader=$!
"$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" \
  -k 50 --out "$T/fifo" >/dev/null 2>"$T/err" || bad "exact into a FIFO failed: $(cat "$T/err")"
if [ -p "$T/fifo" ]; then ok; else bad "the FIFO was replaced by a regular file"; kill $reader 2>/dev/null; fi
wait $reader
cmp -s "$T/fifo.out" "$T/truth.trec" && ok || bad "the run written into a FIFO differs"
echo "old" >"$T/real.trec"
ln -s real.trec "$T/link.trec"
"$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" \
  -k 50 --out "$T/link.trec" >/dev/null || bad "exact into a symlink failed"
[ -L "$T/link.trec" ] && cmp -s "$T/real.trec" "$T/truth.trec" && ok || bad "the symlink was replaced or its file not updated"
mkdir -p "$T/outdir"
expect_fail "output is a directory" "is a directory" \
  "$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" -k 5 --out "$T/outdir"

# a failed gen never removes files it did not write: an impossible size, and a write
# that fails part way (file size limit: the small tokens file completes, the queries
# file does not) leave the files already in --out byte for byte and no temporary files
mkdir -p "$T/keep"
for f in tokens.npy doclens.npy queries.npy qrels.tsv; do echo "precious $f" >"$T/keep/$f"; done
(cd "$T/keep" && sha256sum tokens.npy doclens.npy queries.npy qrels.tsv >"$T/keep.sum")
# (an AddressSanitizer build aborts on such an allocation unless told to return NULL)
expect_fail "gen impossible size" "out of memory" env ASAN_OPTIONS="${ASAN_OPTIONS:-}:allocator_may_return_null=1" \
  "$CHIMERA" gen --out "$T/keep" --docs 2000000000000 --queries 3 --dim 16
(trap '' XFSZ; ulimit -f 2048; exec "$CHIMERA" gen --out "$T/keep" --docs 50 --queries 20000 --dim 16) >/dev/null 2>"$T/err" \
  && bad "gen past the file size limit exited 0" || { grep -q "queries.npy" "$T/err" && ok || bad "gen: no message naming queries.npy: $(cat "$T/err")"; }
(cd "$T/keep" && sha256sum -c --quiet "$T/keep.sum") && ok || bad "a failed gen changed files it did not write"
[ "$(ls "$T/keep" | wc -l)" -eq 4 ] && ok || bad "a failed gen left files behind: $(ls "$T/keep")"
"$CHIMERA" gen --out "$T/keep" --docs 50 --queries 3 --dim 16 >/dev/null && ! grep -q precious "$T/keep/tokens.npy" \
  && [ "$(ls "$T/keep" | wc -l)" -eq 4 ] && ok || bad "gen did not replace the old files"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
