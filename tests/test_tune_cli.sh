#!/usr/bin/env bash
# Recall you can trust, through the CLI:
#   - a build calibrates the index's default search parameters (info lists them) and a
#     search without --nprobe etc. uses them; on a corpus unlike the default generator's
#     (another dimension, strongly clustered, short documents) they reach Recall@10 and
#     Recall@100 >= 0.95 against exact search, with the corpus's own queries; a second
#     build of the same corpus calibrates the same settings (chosen by counts, not time);
#   - `chimera tune --queries` without --truth computes exact truth from the source the
#     build recorded, reports held-out recall with an interval, stores the profile, and
#     `search --recall` reproduces every tuned field; the stored profile meets its target
#     on queries the tune never saw; with a filter its depths deepen as the defaults do;
#   - `chimera bench` writes its sweep;
#   - a fifth of the documents deleted makes the calibrated defaults stale;
#   - bad inputs get named errors: queries of another dimension, an empty query set, a
#     target of 1.5, too few queries, a source that changed or is gone.
set -u
. "$(dirname "$0")/lib.sh"
C=$CHIMERA
# Recall@K of run $1 against truth $2 over the queries with qid >= $4 (TREC files)
recall_from() {
  awk -v K="$3" -v from="$4" '
    FNR == NR { if ($1 >= from && $4 <= K) t[$1 " " $3] = 1; if ($1 >= from) q[$1] = 1; next }
    $1 >= from && $4 <= K && (($1 " " $3) in t) { hit++ }
    END { n = 0; for (x in q) n++; printf "%.4f\n", n ? hit / (n * K) : 0 }' "$2" "$1"
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

# ---- 1. calibrated defaults on a corpus unlike the generator's default -----------------
"$C" gen --out "$T/cl" --docs 1200 --dim 80 --queries 60 --query-len 16 --min-len 8 \
  --max-len 60 --topic-weight 1.5 --topics 30 --seed 21 >/dev/null || bad "gen (clustered) failed"
"$C" build --tokens "$T/cl/tokens.npy" --doclens "$T/cl/doclens.npy" --out "$T/cl/idx" \
  --no-sync >"$T/build.out" || bad "build (clustered) failed"
grep -q "calibrate" "$T/build.out" && ok || bad "build's time report lacks the calibration: $(cat "$T/build.out")"
grep -q "k=10 .*held-out Recall@10" "$T/build.out" && ok || bad "build does not report the calibrated k=10"
"$C" info "$T/cl/idx" >"$T/info.out"
grep -q "defaults .*k=10 " "$T/info.out" && grep -q "k=100 " "$T/info.out" && ok ||
  bad "info lacks the calibrated defaults: $(grep -A2 defaults "$T/info.out")"
grep -q "source .*recorded" "$T/info.out" && ok || bad "info: the source is not recorded"
"$C" exact --tokens "$T/cl/tokens.npy" --doclens "$T/cl/doclens.npy" --queries "$T/cl/queries.npy" \
  -k 100 --out "$T/cl/truth" >/dev/null || bad "exact failed"
# the choice goes by counts, not by clocks: a second build makes the same one
"$C" build --tokens "$T/cl/tokens.npy" --doclens "$T/cl/doclens.npy" --out "$T/cl/idx2" \
  --no-sync >/dev/null || bad "build (clustered, again) failed"
"$C" info "$T/cl/idx2" >"$T/info2.out"
[ "$(grep -E "k=(10|100) " "$T/info.out")" = "$(grep -E "k=(10|100) " "$T/info2.out")" ] && ok ||
  bad "two builds of one corpus calibrated differently: $(grep -E "k=(10|100) " "$T/info.out" "$T/info2.out")"
for k in 10 100; do
  "$C" search "$T/cl/idx" --queries "$T/cl/queries.npy" -k $k --out "$T/cl/r$k" --profile \
    >"$T/s$k.out" || bad "search -k $k failed"
  grep -q "calibrated defaults" "$T/s$k.out" && ok || bad "search -k $k: not the calibrated defaults"
  r=$(recall_from "$T/cl/r$k" "$T/cl/truth" $k 0)
  ge "$r" 0.95 && ok || bad "calibrated defaults: Recall@$k $r < 0.95 on the clustered d=80 corpus"
done

# ---- 2. tune on the user's queries, truth from the recorded source ----------------------
"$C" gen --out "$T/a" --docs 800 --dim 48 --queries 240 --query-len 16 --seed 5 >/dev/null ||
  bad "gen failed"
"$C" gen --out "$T/a120" --docs 800 --dim 48 --queries 120 --query-len 16 --seed 5 >/dev/null ||
  bad "gen (120 queries) failed"
cmp -s "$T/a/tokens.npy" "$T/a120/tokens.npy" && ok || bad "the same seed gave another corpus"
"$C" build --tokens "$T/a/tokens.npy" --doclens "$T/a/doclens.npy" --out "$T/a/idx" --no-sync \
  >/dev/null || bad "build failed"
"$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" -k 10 --target-recall 0.9 >"$T/tune.out" \
  2>"$T/tune.err" || bad "tune --queries without --truth failed: $(cat "$T/tune.err")"
grep -q "exact truth: 120 queries over the index's source" "$T/tune.out" && ok ||
  bad "tune did not compute the truth from the source: $(head -3 "$T/tune.out")"
grep -q "^held-out Recall@10 .*95% interval \[.*\] on 60 queries" "$T/tune.out" && ok ||
  bad "tune: no held-out interval: $(grep held-out "$T/tune.out")"
grep -q "^stored as the profile for k=10" "$T/tune.out" && ok || bad "tune stored no profile: $(tail -3 "$T/tune.out")"
best=$(sed -n 's/^held-out.* at \(--nprobe [0-9]* --k-refine [0-9]* --k-fullbit [0-9]* --chunks [0-9]*\)[ ,].*/\1/p' "$T/tune.out")
set -- $best
"$C" search "$T/a/idx" --queries "$T/a/queries.npy" -k 10 --recall 0.9 --out "$T/a/prof" \
  >"$T/sr.out" || bad "search --recall failed"
grep -q "n_probe=$2 k_refine=$4 k_fullbit=$6 chunks=$8[ ,]" "$T/sr.out" && ok ||
  bad "search --recall does not reproduce the tuned setting ($best): $(cat "$T/sr.out")"
grep -q "(the profile for k=10, recall 0.900)" "$T/sr.out" && ok ||
  bad "search --recall does not name the profile it used: $(cat "$T/sr.out")"
"$C" info "$T/a/idx" >"$T/infop.out"
grep -q "^  profiles  *k=10   --recall 0.900: $best[ ;]" "$T/infop.out" && ok ||
  bad "info does not list the stored profile ($best): $(grep -A1 profiles "$T/infop.out")"
# the profile on queries 120..239, which the tune never saw
"$C" exact --tokens "$T/a/tokens.npy" --doclens "$T/a/doclens.npy" --queries "$T/a/queries.npy" \
  -k 10 --out "$T/a/truth" >/dev/null || bad "exact failed"
r=$(recall_from "$T/a/prof" "$T/a/truth" 10 120)
ge "$r" 0.9 && ok || bad "the stored profile gives Recall@10 $r < 0.9 on 120 unseen queries"
# impute and probe given beside --recall (a profile stores them too; given, they win)
"$C" search "$T/a/idx" --queries "$T/a/queries.npy" -k 10 --recall 0.9 --impute zero --probe brute \
  >/dev/null && ok || bad "search --recall with --impute/--probe given failed"
# the profile was tuned without a filter: with one, its depths deepen as the index's own
# defaults do (twice k_fullbit), and the line printed says what filtered queries ran
seq 0 2 4000 >"$T/even.txt"
"$C" search "$T/a/idx" --queries "$T/a/queries.npy" -k 10 --recall 0.9 --subset "$T/even.txt" \
  >"$T/srf.out" || bad "search --recall --subset failed"
fkf=$(sed -n 's/.*(with a filter k_refine=[0-9]* k_fullbit=\([0-9]*\)).*/\1/p' "$T/srf.out")
# (not when the profile's centroid interaction keeps only k_fullbit documents: none deeper)
{ grep -q "k_interaction=$6[ ,]" "$T/srf.out" || { [ -n "$fkf" ] && [ "$fkf" -gt "$6" ]; }; } &&
  grep -q "k_fullbit=$6 " "$T/srf.out" && ok ||
  bad "search --recall --subset: filtered queries not deeper than the profile's k_fullbit $6: $(cat "$T/srf.out")"

# ---- 3. bench --------------------------------------------------------------------------
"$C" bench "$T/a/idx" --queries "$T/a120/queries.npy" --tokens "$T/a/tokens.npy" \
  --doclens "$T/a/doclens.npy" -k 10 --csv "$T/bench.csv" --threads 2 >"$T/bench.out" ||
  bad "bench failed: $(tail -3 "$T/bench.out")"
head -1 "$T/bench.csv" | grep -q "^system,k,n_probe,k_refine,k_fullbit,chunks,recall,qps" && ok ||
  bad "bench.csv header: $(head -1 "$T/bench.csv")"
# four n_probe x k_fullbit 20, 40, 80 (k and 2k both floor at 20: one setting, one row)
[ "$(grep -c '^chimera,10,' "$T/bench.csv")" = 12 ] && ok || bad "bench.csv: not 12 chimera rows for k=10"
[ -z "$(cut -d, -f1-6 "$T/bench.csv" | sort | uniq -d)" ] && ok || bad "bench.csv: a setting measured twice"
grep -q '^exact,10,' "$T/bench.csv" && ok || bad "bench.csv: no exact row"
awk -F, 'NR > 1 && ($7 < 0 || $7 > 1) {bad++} END {exit bad > 0}' "$T/bench.csv" && ok ||
  bad "bench.csv: a recall outside [0, 1]"

# ---- 4. bad inputs -----------------------------------------------------------------------
"$C" gen --out "$T/d32" --docs 200 --dim 32 --queries 30 --seed 1 >/dev/null
expect_fail "queries of another dimension" "dimension 32" \
  "$C" tune "$T/a/idx" --queries "$T/d32/queries.npy" -k 10
python3 - "$T/empty.npy" <<'PY'
import sys
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 16, 48), }"
h += " " * (127 - 10 - len(h)) + "\n"
open(sys.argv[1], "wb").write(b"\x93NUMPY\x01\x00" + len(h).to_bytes(2, "little") + h.encode())
PY
expect_fail "an empty query set" "empty\|no quer\|0 queries" \
  "$C" tune "$T/a/idx" --queries "$T/empty.npy" -k 10
expect_fail "target 1.5" "target-recall" "$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" --target-recall 1.5
"$C" gen --out "$T/a12" --docs 800 --dim 48 --queries 12 --query-len 16 --seed 5 >/dev/null
expect_fail "too few queries" "too few" "$C" tune "$T/a/idx" --queries "$T/a12/queries.npy" -k 10
expect_fail "a held-out fraction of 1" "heldout" \
  "$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" --heldout 1
# the source: changed, then gone; --tokens/--doclens then serve
cp "$T/a/tokens.npy" "$T/a/tokens.bak"
touch -d '2001-01-01' "$T/a/tokens.npy"
expect_fail "a source that changed" "changed since the build" \
  "$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" -k 10 --no-save
rm "$T/a/tokens.npy"
expect_fail "a source that is gone" "tokens T.npy --doclens" \
  "$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" -k 10 --no-save
"$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" -k 10 --target-recall 0.9 --no-save \
  --tokens "$T/a/tokens.bak" --doclens "$T/a/doclens.npy" >/dev/null 2>"$T/err" && ok ||
  bad "tune --tokens/--doclens failed: $(cat "$T/err")"

# ---- 5. stale after a fifth of the documents deleted --------------------------------------
seq 0 199 >"$T/del.txt"
"$C" delete "$T/a/idx" --ids "$T/del.txt" --no-sync >/dev/null || bad "delete failed"
"$C" info "$T/a/idx" >"$T/infod.out"
grep -q "defaults .*stale" "$T/infod.out" && ok || bad "info: the defaults are not stale after 200 of 800 deleted"
grep -q "profiles .*k=10 .*stale" "$T/infod.out" && ok || bad "info: the profile is not stale after 200 of 800 deleted"
grep -q "source .*recorded, but documents were added, deleted or updated" "$T/infod.out" && ok ||
  bad "info: the source reads as usable after a delete: $(grep source "$T/infod.out")"
"$C" search "$T/a/idx" --queries "$T/a120/queries.npy" -k 10 --profile | grep -q "library's defaults" &&
  ok || bad "search after the delete does not fall back to the library's defaults"
expect_fail "tune after a delete (source no longer the index)" "added, deleted or updated" \
  "$C" tune "$T/a/idx" --queries "$T/a120/queries.npy" -k 10 --no-save

echo "tune cli: $pass passed, $fail failed"
[ $fail = 0 ]
