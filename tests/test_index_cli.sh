#!/usr/bin/env bash
# The index through the CLI, end to end: gen -> build -> info -> check -> search -> eval
# against exact search reaches recall@10 >= 0.9 at the default search parameters on a
# 1500-document corpus; `chimera info IDX` lists every section; a byte flipped in a
# section's payload makes `chimera check` exit non-zero naming that section; a build
# killed with SIGKILL while it runs leaves the index already at its path intact (it
# checks, describes the old corpus and still searches); what killed writers leave (a
# manifest temporary, a temporary directory) does not stop the next build, which removes
# it, and `chimera info` counts the generations; a build into a non-empty
# directory that is not an index is refused and leaves that directory's files as they
# were; a search with queries of another dimension fails naming both dimensions; and a
# NaN in the tokens makes the build fail naming the row, with nothing written; a graph
# degree over 127 or a thread count over 1024 is refused before any work is done.
set -u
. "$(dirname "$0")/lib.sh"
# flip FILE OFFSET: xor one byte with 0x20 in place
flip() {
  python3 - "$1" "$2" <<'PY'
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x20]))
PY
}
SECTIONS=$(index_sections | cut -d'|' -f1)

# gen -> build -> info -> check
"$CHIMERA" gen --out "$T/c" --docs 1500 --dim 64 --queries 30 --seed 1 >/dev/null || bad "gen failed"
t0=$(date +%s%N)
"$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/idx" \
  --no-sync --seed 1 >"$T/build.out" 2>"$T/build.err" || bad "build failed: $(cat "$T/build.err")"
echo "build: $(head -1 "$T/build.out") ($(( ($(date +%s%N) - t0) / 1000000 )) ms)"
"$CHIMERA" info "$T/idx" >"$T/info.out" || bad "info failed"
for s in $SECTIONS; do
  [ "$s" = post_cid ] && continue # only appended segments have sparse lists
  case $s in vectors_*) continue ;; esac # only a build with --rerank stores vectors
  grep -q "^ *$s " "$T/info.out" && ok || bad "info does not list section $s"
done
grep -q "documents *1500" "$T/info.out" && ok || bad "info: document count: $(grep documents "$T/info.out")"
"$CHIMERA" check "$T/idx" >"$T/check.out" 2>&1 && ok || bad "check failed: $(cat "$T/check.out")"

# search -> eval against exact
"$CHIMERA" exact --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --queries "$T/c/queries.npy" \
  -k 10 --out "$T/truth.trec" >/dev/null || bad "exact failed"
"$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 10 --out "$T/run.trec" >"$T/search.out" \
  2>&1 || bad "search failed: $(cat "$T/search.out")"
"$CHIMERA" eval --run "$T/run.trec" --truth "$T/truth.trec" -k 10 --json >"$T/eval.json" || bad "eval failed"
r=$(sed -n 's/.*"recall@10": \([0-9.]*\).*/\1/p' "$T/eval.json")
echo "search at default parameters: recall@10 $r; $(head -1 "$T/search.out")"
awk -v r="$r" 'BEGIN { exit !(r >= 0.9) }' && ok || bad "recall@10 $r < 0.9 at default parameters"

# a flipped payload byte: check exits non-zero naming the section (checksums are verified
# before the structural checks, so the damaged section is what gets named)
for s in c1_codes dB_fact dB_codes doc_off centroids; do
  rm -rf "$T/flip" && cp -r "$T/idx" "$T/flip"
  size=$(stat -c %s "$T/flip/$s.bin")
  flip "$T/flip/$s.bin" $((64 + (size - 64) / 2))
  needle=$s
  expect_fail "check after a flip in $s" "$needle" "$CHIMERA" check "$T/flip"
  grep -q "$T/flip: $T/flip" "$T/err" && bad "check names the index twice: $(cat "$T/err")" || ok
  expect_fail "search --verify after a flip in $s" "$needle" \
    "$CHIMERA" search "$T/flip" --verify --queries "$T/c/queries.npy" -k 10
done
# --verify changes nothing on a healthy index
"$CHIMERA" search "$T/idx" --verify --queries "$T/c/queries.npy" -k 10 --out "$T/run.verify" \
  >/dev/null 2>&1 && cmp -s "$T/run.trec" "$T/run.verify" && ok || bad "search --verify differs"
rm -rf "$T/flip"

# the exact re-rank tier: build --rerank stores the vectors (info shows the section and
# its size), search --rerank-depth re-scores exactly and reaches recall 1 when it sees
# every document, --profile shows the stage; asked of an index without them, a named
# error; a flip in the vectors is found by check and search --verify
"$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/rr" \
  --no-sync --seed 1 --rerank f16 >/dev/null 2>"$T/build.err" || bad "build --rerank failed: $(cat "$T/build.err")"
"$CHIMERA" info "$T/rr" >"$T/info.rr" || bad "info failed"
grep -q "^ *vectors_f16 " "$T/info.rr" && grep -q "re-rank *original vectors stored as f16" "$T/info.rr" &&
  ok || bad "info of a --rerank f16 index: $(grep -E 'vectors|re-rank' "$T/info.rr")"
grep -q "re-rank *none" "$T/info.out" && ok || bad "info of a plain index: $(grep re-rank "$T/info.out")"
"$CHIMERA" search "$T/rr" --queries "$T/c/queries.npy" -k 10 --rerank-depth 1500 --nprobe 1280 \
  --k-refine 1500 --out "$T/run.rr" --profile >"$T/search.rr" 2>&1 || bad "search --rerank-depth failed: $(cat "$T/search.rr")"
grep -q "exact re-rank (per query): .* 1500.0 documents re-scored exactly" "$T/search.rr" && ok ||
  bad "--profile lacks the re-rank stage: $(cat "$T/search.rr")"
"$CHIMERA" eval --run "$T/run.rr" --truth "$T/truth.trec" -k 10 --json >"$T/eval.json" || bad "eval failed"
r=$(sed -n 's/.*"recall@10": \([0-9.]*\).*/\1/p' "$T/eval.json")
awk -v r="$r" 'BEGIN { exit !(r >= 0.999) }' && ok || bad "re-rank of every document: recall@10 $r < 0.999"
expect_fail "search --rerank-depth on an index without vectors" "stores none: rebuild it with --rerank" \
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 10 --rerank-depth 50
expect_fail "build --rerank f8" "--rerank must be none, f16, bf16 or f32" \
  "$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/rr2" --rerank f8
size=$(stat -c %s "$T/rr/vectors_f16.bin")
flip "$T/rr/vectors_f16.bin" $((64 + (size - 64) / 3))
expect_fail "check after a flip in vectors_f16" vectors_f16 "$CHIMERA" check "$T/rr"
expect_fail "search --verify after a flip in vectors_f16" vectors_f16 \
  "$CHIMERA" search "$T/rr" --verify --queries "$T/c/queries.npy" -k 10 --rerank-depth 20
rm -rf "$T/rr"

# a build killed with SIGKILL leaves the index at its path intact
cp "$T/info.out" "$T/info.before"
"$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/idx" \
  --bits 8 --seed 2 --threads 1 >/dev/null 2>&1 &
pid=$!
sleep 3
if kill -0 $pid 2>/dev/null; then
  ls -d "$T"/idx.tmp-* >/dev/null 2>&1 && ok || bad "no temporary directory while the build runs"
  kill -9 $pid
  wait $pid 2>/dev/null
  "$CHIMERA" check "$T/idx" >"$T/check.out" 2>&1 && ok || bad "check after a killed build: $(cat "$T/check.out")"
  "$CHIMERA" info "$T/idx" >"$T/info.after" 2>&1 || bad "info after a killed build failed"
  grep -E "bits|documents|seed" "$T/info.before" >"$T/a"; grep -E "bits|documents|seed" "$T/info.after" >"$T/b"
  cmp -s "$T/a" "$T/b" && ok || bad "the index changed under a killed build: $(diff "$T/a" "$T/b")"
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 10 --out "$T/run2.trec" >/dev/null 2>&1 &&
    cmp -s "$T/run.trec" "$T/run2.trec" && ok || bad "search after a killed build differs"
else
  wait $pid
  bad "the --bits 8 build finished within 3 s: the kill test did not kill a running build"
fi
rm -rf "$T"/idx.tmp-*

# leftovers of killed writers (a tune's manifest temporary inside the index, a build's
# temporary directory) do not stop the next build, which removes them; the generation
# counts the commits
grep -q "generation *1 " "$T/info.out" && ok || bad "info: generation of a new index: $(grep generation "$T/info.out")"
printf '{"magic": "chimera-index", "trunc' >"$T/idx/manifest.json.tmp-Ab12Cd"
mkdir "$T/idx.tmp-Zz9Yy8" && : >"$T/idx.tmp-Zz9Yy8/centroids.bin"
"$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/idx" \
  --no-sync --seed 1 >/dev/null 2>"$T/build.err" && ok || bad "build over a killed tune's leftover: $(cat "$T/build.err")"
[ -e "$T/idx/manifest.json.tmp-Ab12Cd" ] && bad "the manifest temporary is still there" || ok
[ -e "$T/idx.tmp-Zz9Yy8" ] && bad "the killed build's directory is still there" || ok
"$CHIMERA" info "$T/idx" | grep -q "generation *2 " && ok || bad "info: generation after a rebuild"
"$CHIMERA" check "$T/idx" >"$T/check.out" 2>&1 && ok || bad "check after the rebuild: $(cat "$T/check.out")"

# a non-empty directory that is not an index is refused and left alone
mkdir -p "$T/notidx/sub" && echo precious >"$T/notidx/a.txt" && echo keep >"$T/notidx/sub/b"
(cd "$T/notidx" && find . -type f -exec md5sum {} + | sort) >"$T/md5.before"
expect_fail "build into a non-index directory" "$T/notidx" \
  "$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/notidx" --no-sync
(cd "$T/notidx" && find . -type f -exec md5sum {} + | sort) >"$T/md5.after"
cmp -s "$T/md5.before" "$T/md5.after" && ok || bad "the non-index directory was modified"
ls -d "$T"/notidx.* >/dev/null 2>&1 && bad "temporary directory left beside notidx" || ok

# queries of another dimension
"$CHIMERA" gen --out "$T/d32" --docs 20 --queries 3 --dim 32 >/dev/null
expect_fail "search with 32-d queries" "dimension 32, the index 64" \
  "$CHIMERA" search "$T/idx" --queries "$T/d32/queries.npy" -k 5 --out "$T/x.trec"
[ -e "$T/x.trec" ] && bad "a run was written despite the error" || ok

# a NaN token: the build fails naming the row and writes nothing
python3 - "$T" <<'PY'
import struct, sys
t = sys.argv[1]
b = bytearray(open(t + "/c/tokens.npy", "rb").read())
assert b[:6] == b"\x93NUMPY"
hlen = struct.unpack("<H", b[8:10])[0] if b[6] == 1 else struct.unpack("<I", b[8:12])[0]
off = (10 if b[6] == 1 else 12) + hlen
struct.pack_into("<f", b, off + (77 * 64 + 5) * 4, float("nan"))
open(t + "/nan.npy", "wb").write(b)
PY
expect_fail "build with a NaN token" "row 77" \
  "$CHIMERA" build --tokens "$T/nan.npy" --doclens "$T/c/doclens.npy" --out "$T/nanidx" --no-sync
if [ -e "$T/nanidx" ] || ls -d "$T"/nanidx.* >/dev/null 2>&1; then bad "the failed build left files"; else ok; fi

# options checked before any work: a graph degree the graph build cannot take (it fails
# once k-means has run, minutes into a large build) and thread counts beyond the bound
expect_fail "build --graph-degree 200" "graph degree 200, expected 1..127" \
  "$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/degidx" \
  --no-sync --graph-degree 200
if [ -e "$T/degidx" ] || ls -d "$T"/degidx.* >/dev/null 2>&1; then bad "the refused build left files"; else ok; fi
expect_fail "build --threads 100000" "not a thread count" \
  "$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/thridx" \
  --no-sync --threads 100000
expect_fail "search --threads 5000" "at most 1024" \
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec" --threads 5000
"$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 5 --out "$T/x.trec" --threads 1024 \
  >/dev/null 2>&1 && ok || bad "search --threads 1024 (the bound itself) failed"

# a 0 the library would read as "the default" is refused where given, and each refusal
# names the option or field the user set, not a list of every rule
rm -f "$T/x.trec"
for opt in "--nprobe 0" "--k-refine 0" "--k-fullbit 0" "--chunks 0" "--batch 0"; do
  # shellcheck disable=SC2086 # the option and its value are two words
  expect_fail "search $opt" "${opt% 0}: '0' is not a valid value" \
    "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" --out "$T/x.trec" $opt
done
expect_fail "search --impute-scale 0" "--impute-scale 0: expected a value in (0, 1]" \
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" --out "$T/x.trec" --impute-scale 0
expect_fail "search --chunks 1000" "chunks 1000: expected 1..64" \
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" --out "$T/x.trec" --chunks 1000
expect_fail "search -k 100000000" "-k 100000000: expected 1..16777216" \
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" --out "$T/x.trec" -k 100000000
expect_fail "search --k-fullbit 20000000" "k_fullbit 20000000 is too large" \
  "$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" --out "$T/x.trec" --k-fullbit 20000000
[ -e "$T/x.trec" ] && bad "a refused search wrote its run" || ok
: >"$T/none.txt"
"$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" --subset "$T/none.txt" --out "$T/none.trec" \
  >/dev/null 2>"$T/none.err" && [ ! -s "$T/none.trec" ] && grep -q "lists no ids" "$T/none.err" &&
  ok || bad "an empty --subset: no note, or results: $(cat "$T/none.err")"
# a flag the search must move (k <= k_fullbit <= k_refine) is run moved, and said so
"$CHIMERA" search "$T/idx" --queries "$T/c/queries.npy" -k 10 --k-refine 5 --k-fullbit 50 \
  >"$T/moved.out" 2>"$T/moved.err" || bad "search with --k-refine below --k-fullbit failed"
grep -q "note: --k-refine 5 runs as 50 (at least k_fullbit)" "$T/moved.err" &&
  grep -q "k_refine=50 k_fullbit=50" "$T/moved.out" && ok ||
  bad "a moved --k-refine is not said: $(cat "$T/moved.err" "$T/moved.out")"
expect_fail "build --bits 0" "--bits: '0' is not a valid value" \
  "$CHIMERA" build --tokens "$T/c/tokens.npy" --doclens "$T/c/doclens.npy" --out "$T/bits0" --bits 0
expect_fail "gen --docs 0" "--docs: '0' is not a valid value" "$CHIMERA" gen --out "$T/g0" --docs 0
expect_fail "gen --min-len 50 --max-len 10" "min_len 50 is over max_len 10" \
  "$CHIMERA" gen --out "$T/g0" --docs 10 --min-len 50 --max-len 10
ls -d "$T/bits0" "$T/g0" >/dev/null 2>&1 && bad "a refused build or gen left files" || ok
python3 - "$T" <<'PY'
import sys, numpy as np
t = sys.argv[1]
q = np.load(t + "/c/queries.npy")
np.save(t + "/q2d.npy", q.reshape(-1, q.shape[2]))
lens = np.full(q.shape[0], q.shape[1], np.int64); lens[0] = -1; lens[1] += 1
np.save(t + "/qneg.npy", lens)
PY
expect_fail "search with a negative query length" "query 0 has negative length -1" \
  "$CHIMERA" search "$T/idx" --queries "$T/q2d.npy" --qlens "$T/qneg.npy" --out "$T/x.trec"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
