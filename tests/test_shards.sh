#!/usr/bin/env bash
# Sharded indexes in one process (chimera build --shards N, chimera search DIR): with
# exhaustive parameters the merged results equal those of a single index built with the
# same codebook (build --codebook), which equals a plain build of the corpus (the shards'
# codebook is the one a single build trains); at default parameters the sharded recall
# is within 0.01 of the single index's or above; `chimera info` describes the layout and
# its shards; user ids survive sharding; a rebuild
# makes a new generation and removes the old one's files; a kill -9 at a random moment
# of a rebuild leaves a searchable layout (old or new, never a mix); a corrupted codebook
# is refused by name; a non-empty directory is refused and left as it was; --shards
# larger than the documents and queries of another dimension get clear errors.
set -u
. "$(dirname "$0")/lib.sh"
C=$CHIMERA
"$C" gen --out "$T/c" --docs 1200 --dim 48 --queries 40 --max-len 80 --seed 3 >/dev/null || bad "gen failed"
TOK=$T/c/tokens.npy
LEN=$T/c/doclens.npy
Q=$T/c/queries.npy
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/S" --shards 3 --no-sync >"$T/b.out" 2>"$T/b.err" \
  && ok || bad "build --shards failed: $(cat "$T/b.err")"
[ -f "$T/S/shards.json" ] && [ -d "$T/S/g1-shard-002" ] && [ -f "$T/S/g1-codebook.bin" ] && ok \
  || bad "layout incomplete: $(ls "$T/S")"
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/one" --codebook "$T/S/g1-codebook.bin" \
  --no-sync >/dev/null 2>"$T/e" && ok || bad "build --codebook failed: $(cat "$T/e")"
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/plain" --no-sync >/dev/null 2>"$T/e" \
  && ok || bad "plain build failed: $(cat "$T/e")"
K=$(sed -n 's/.*"n_clusters":[^0-9]*\([0-9]*\).*/\1/p' "$T/S/shards.json")
EX=(-k 10 --nprobe "$K" --k-refine 1200 --k-fullbit 1200 --threads 1)
for ix in S one plain; do
  "$C" search "$T/$ix" --queries "$Q" "${EX[@]}" --out "$T/$ix.ex" >/dev/null 2>"$T/e" \
    || bad "exhaustive search of $ix failed: $(cat "$T/e")"
done
cmp -s "$T/S.ex" "$T/one.ex" && ok || bad "sharded exhaustive results differ from the single index's: $(diff "$T/S.ex" "$T/one.ex" | head -4)"
cmp -s "$T/one.ex" "$T/plain.ex" && ok || bad "build --codebook differs from a plain build"

"$C" info "$T/S" >"$T/info" 2>&1 && [ "$(grep -c '^  shard ' "$T/info")" = 3 ] && \
  grep -q '1200 documents' "$T/info" && ok || bad "info of a sharded index: $(cat "$T/info")"
# info --ids lists every shard's documents; the commands that work on one index say the
# layout is not one, and leave it as it was
"$C" info "$T/S" --ids >"$T/ids.txt" 2>"$T/e" && [ "$(sort -un "$T/ids.txt" | wc -l)" = 1200 ] &&
  ok || bad "info --ids of a sharded index: $(wc -l <"$T/ids.txt") ids, $(cat "$T/e")"
cp "$T/S/shards.json" "$T/layout.before"
for cmd in check compact tune; do
  expect_fail "$cmd of a sharded index" "is a sharded index (shards.json): $cmd works on one index" \
    "$C" $cmd "$T/S"
done
expect_fail "delete from a sharded index" "is a sharded index" "$C" delete "$T/S" --id 1
expect_fail "meta import into a sharded index" "is a sharded index" \
  "$C" meta import "$T/S" --jsonl /dev/null
cmp -s "$T/S/shards.json" "$T/layout.before" && ok || bad "a refused command changed the layout"

# default parameters: recall against exact search
"$C" exact --tokens "$TOK" --doclens "$LEN" --queries "$Q" -k 10 --out "$T/truth" >/dev/null
recall() { "$C" eval --run "$1" --truth "$T/truth" -k 10 | awk '/^Recall@10/ {print $2}'; }
"$C" search "$T/S" --queries "$Q" -k 10 --out "$T/S.def" >/dev/null || bad "default sharded search failed"
"$C" search "$T/one" --queries "$Q" -k 10 --out "$T/one.def" >/dev/null || bad "default search failed"
rs=$(recall "$T/S.def"); r1=$(recall "$T/one.def")
echo "Recall@10 at defaults: sharded $rs, single $r1"
awk -v a="$rs" -v b="$r1" 'BEGIN {exit !(a >= b - 0.01)}' && ok || bad "sharded recall $rs < single $r1 - 0.01"
# a filter: each shard searches shard 0's filtered setting (deeper than the unfiltered
# one when the depths are left to the index), and returns only allowed ids
seq 0 3 1199 >"$T/third.txt"
"$C" search "$T/S" --queries "$Q" -k 10 --subset "$T/third.txt" --profile --out "$T/S.sub" \
  >"$T/sub.out" 2>&1 || bad "sharded search --subset failed: $(cat "$T/sub.out")"
awk '$3 % 3 != 0 {bad++} END {exit bad > 0}' "$T/S.sub" && ok || bad "sharded --subset returned another id"
kf=$(sed -n 's/^search:.* k_fullbit=\([0-9]*\) .*/\1/p' "$T/sub.out")
fkf=$(sed -n 's/.*(with a filter k_refine=[0-9]* k_fullbit=\([0-9]*\)).*/\1/p' "$T/sub.out")
fkr=$(sed -n 's/.*(with a filter k_refine=\([0-9]*\) k_fullbit=[0-9]*).*/\1/p' "$T/sub.out")
[ -n "$kf" ] && [ -n "$fkf" ] && [ "$fkf" -gt "$kf" ] && grep -q "(k_fullbit $fkf)" "$T/sub.out" &&
  ok || bad "sharded --subset: not searched deeper than k_fullbit $kf (filtered $fkf): $(cat "$T/sub.out")"
# ... and that setting is what ran: the same as giving it
"$C" search "$T/S" --queries "$Q" -k 10 --subset "$T/third.txt" --k-refine "$fkr" --k-fullbit "$fkf" \
  --out "$T/S.sub2" >/dev/null 2>&1 && cmp -s "$T/S.sub" "$T/S.sub2" && ok ||
  bad "sharded --subset: the filtered setting k_refine $fkr k_fullbit $fkf given gives other results"

# user ids: every returned id is one of them
python3 - "$T/ids.npy" <<'PY'
import sys, numpy as np
np.save(sys.argv[1], (np.arange(1200, dtype=np.int64) * 7919 + 100003))
PY
"$C" build --tokens "$TOK" --doclens "$LEN" --ids "$T/ids.npy" --out "$T/SI" --shards 2 --no-sync \
  --no-calibrate >/dev/null 2>"$T/e" || bad "build --shards --ids failed: $(cat "$T/e")"
"$C" search "$T/SI" --queries "$Q" -k 5 --out "$T/SI.run" >/dev/null || bad "search with ids failed"
awk '{ if (($3 - 100003) % 7919 != 0) bad = 1 } END { exit bad }' "$T/SI.run" && ok \
  || bad "a sharded search returned an id that is not a user id"

# a rebuild: generation 2, generation 1's files gone
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/S" --shards 2 --no-sync >/dev/null 2>"$T/e" \
  || bad "rebuild failed: $(cat "$T/e")"
grep -q '"generation":[[:space:]]*2' "$T/S/shards.json" && ok || bad "rebuild is not generation 2"
ls "$T/S" | grep -q '^g1-' && bad "generation 1's files left: $(ls "$T/S")" || ok

# kill -9 at a random moment of a rebuild: the layout still searches
for delay in 0.3 0.9 1.6; do
  "$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/S" --shards 3 --no-sync >/dev/null 2>&1 &
  pid=$!
  sleep "$delay"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  "$C" search "$T/S" --queries "$Q" -k 10 --out "$T/after" >/dev/null 2>"$T/e" && ok \
    || bad "after kill -9 at ${delay}s the layout does not search: $(cat "$T/e")"
  [ "$(wc -l <"$T/after")" = 400 ] && ok || bad "after kill -9: $(wc -l <"$T/after") result lines"
done
# and the next build cleans up what the killed one left
"$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/S" --shards 2 --no-sync >/dev/null 2>"$T/e" \
  || bad "build after kills failed: $(cat "$T/e")"
g=$(sed -n 's/.*"generation":[^0-9]*\([0-9]*\).*/\1/p' "$T/S/shards.json")
[ -z "$(ls "$T/S" | grep '^g' | grep -v "^g$g-")" ] && ok || bad "stale files after rebuild: $(ls "$T/S")"

# errors
cp "$T/S/g$g-codebook.bin" "$T/cb.bin"
printf 'x' | dd of="$T/cb.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_fail "damaged codebook" "checksum" "$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/x" --codebook "$T/cb.bin"
[ -e "$T/x" ] && bad "a failed build left $T/x" || ok
mkdir -p "$T/full" && echo keep >"$T/full/notes.txt"
expect_fail "non-empty directory" "not empty" "$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/full" --shards 2
[ "$(cat "$T/full/notes.txt")" = keep ] && [ "$(ls "$T/full")" = notes.txt ] && ok || bad "the refused directory changed"
expect_fail "too many shards" "every shard needs one" "$C" build --tokens "$TOK" --doclens "$LEN" --out "$T/y" --shards 5000
"$C" gen --out "$T/d2" --docs 20 --dim 32 --queries 3 >/dev/null
expect_fail "queries of another dimension" "dimension" "$C" search "$T/S" --queries "$T/d2/queries.npy"
expect_fail "filter on a sharded index" "sharded" "$C" search "$T/S" --queries "$Q" --filter "1 = 1"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
