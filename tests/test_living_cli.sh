#!/usr/bin/env bash
# A living index through the CLI (chimera add, delete, update, compact; docs/format.md,
# "Segments: a living index"), as a user drives it:
# - crash safety: a fixed plan of adds, deletes, updates and compactions on a small index
#   (real fsyncs) in which every operation is killed with SIGKILL at a random moment
#   (between 0 and the operation's measured duration) until it commits; after each kill
#   `chimera check` passes and the generation and live id set (`chimera info --ids`) are
#   exactly those of the plan's prefix before or after the killed operation. At least 50
#   kills must hit a running process (at least one of each kind of operation), at least 5
#   must land before the commit and at least one must leave a partly written change
#   (so the test cannot pass by killing only finished work). After one more
#   successful writer no stray file is left (nothing in the index but manifest.json and
#   the files it lists; no IDX.tmp-* or IDX.old-* beside it);
# - deleted ids never come back in search results (every document's own tokens are
#   searched; live documents find themselves first, deleted ones are never returned),
#   before and after `chimera compact`, which keeps the live id set and passes check;
#   an id deleted and compacted away can be added again;
# - a bad batch is refused whole, with a non-zero exit and a message naming the problem,
#   and leaves the index byte for byte as it was: wrong dimension, NaN, an empty document,
#   an id twice in the batch, an added id already present, an updated id absent,
#   document lengths that do not sum to the token count, a negative or unknown id to
#   delete; --missing-ok skips unknown ids and commits nothing when nothing is left;
# - a full disk (a small tmpfs; where mount is not permitted, a file-size limit, EFBIG)
#   during an add or a compaction fails with a message and leaves the previous
#   generation; with room again the add succeeds.
set -u
. "$(dirname "$0")/lib.sh"
C=$CHIMERA
DIM=32
RANDOM=20240607 # the kill moments vary with timing anyway; the plan and its ids do not

# npy.py i64 OUT V...: a 1-d int64 .npy; npy.py nan IN OUT ROW: IN's float32 matrix with
# a NaN at (ROW, 1). The standard library only (no numpy).
cat >"$T/npy.py" <<'PY'
import struct, sys
def header(b):
    assert b[:6] == b"\x93NUMPY"
    n = struct.unpack("<H", b[8:10])[0] if b[6] == 1 else struct.unpack("<I", b[8:12])[0]
    off = (10 if b[6] == 1 else 12) + n
    return b[:off].decode("latin1"), off
if sys.argv[1] == "i64":
    v = [int(x) for x in sys.argv[3:]]
    h = "{'descr': '<i8', 'fortran_order': False, 'shape': (%d,), }" % len(v)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    open(sys.argv[2], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h))
                                  + h.encode("latin1") + struct.pack("<%dq" % len(v), *v))
elif sys.argv[1] == "nan":
    b = bytearray(open(sys.argv[2], "rb").read())
    h, off = header(b)
    assert "'<f4'" in h
    dim = int(h.split("'shape': (")[1].split(")")[0].split(",")[1])
    struct.pack_into("<f", b, off + (int(sys.argv[4]) * dim + 1) * 4, float("nan"))
    open(sys.argv[3], "wb").write(b)
PY
npy() { python3 "$T/npy.py" "$@"; }
# strays IDX: what a finished writer must not leave: files in IDX that its manifest does
# not list, files it lists that are missing, and IDX.tmp-* / IDX.old-* beside it
strays() {
  python3 - "$1" <<'PY'
import glob, json, os, sys
idx = sys.argv[1]
listed = {s["file"] for s in json.load(open(os.path.join(idx, "manifest.json")))["sections"]}
for f in sorted(os.listdir(idx)):
    if f != "manifest.json" and f not in listed:
        print("stray: " + os.path.join(idx, f))
for f in sorted(listed):
    if not os.path.exists(os.path.join(idx, f)):
        print("missing: " + os.path.join(idx, f))
for d in sorted(glob.glob(idx + ".tmp-*") + glob.glob(idx + ".old-*")):
    print("stray: " + d)
PY
}
gen_of() { "$C" info "$1" 2>/dev/null | awk '$1 == "generation" { print $2; exit }'; }
# layout_of IDX: "SEGMENTS LISTS" (segments, deletion lists) from chimera info
layout_of() { "$C" info "$1" 2>/dev/null | sed -n 's/^ *segments *\([0-9]*\) .*; \([0-9]*\) deletion lists.*/\1 \2/p'; }
ids_of() { "$C" info "$1" --ids 2>/dev/null | sort -n; }
ms() { echo $(( $(date +%s%N) / 1000000 )); }
# corpus NAME DOCS SEED: a batch of DOCS documents in $T/NAME
corpus() { "$C" gen --out "$T/$1" --docs "$2" --dim $DIM --queries 1 --seed "$3" --max-len 80 >/dev/null; }

# ------------------------------------------------------------------------------------
# 1. Crash safety. The plan, round r = 1, 2, ...:
#      add     40 new documents, ids r*1000 .. r*1000+39 (text id file)
#      delete  r*1000+35..39, base ids (r-1)*10..+4, and (r-1)*1000..+4 (odd rounds by
#              --id, even rounds by an int64 .npy)
#      update  30 documents: r*1000 .. r*1000+19 and base ids 10j+5 .. 10j+9 for
#              j = 2r and 2r+1 (mod 30): the halves of the base's blocks of ten that no
#              delete touches, so every round, up to the 30th, updates live ids
#      compact every 5th round (so adds and deletes also hit their 8-segment and
#              8-list merges in between), and every round after the 5th until one
#              has been killed while it ran
#    for at least 5 rounds and until at least 50 kills hit a running process, one of each
#    kind at least (at most 30 rounds). An operation killed 6 times before its commit is
#    then run to its end. The base: 300
#    documents, ids 0..299 (no id file: the row numbers).
t_start=$(ms)
corpus base 300 1
"$C" build --tokens "$T/base/tokens.npy" --doclens "$T/base/doclens.npy" --out "$T/idx" \
  --threads 1 --seed 1 >/dev/null 2>"$T/err" || bad "build failed: $(cat "$T/err")"
seq 0 299 >"$T/exp"
gen=1
[ "$(gen_of "$T/idx")" = 1 ] && ok || bad "a new index is not at generation 1"
declare -A owner # live id -> "batch row" of its current version (for the search checks)
for i in $(seq 0 299); do owner[$i]="base $i"; done

# plan R STEP: sets cmd (the command; IDX stands for the index) and writes $T/after
# (the live ids once it commits); the batches of round R are generated on first use
plan() {
  local r=$1 step=$2 b
  b=$((r * 1000))
  case $step in
  add)
    [ -d "$T/a$r" ] || corpus "a$r" 40 $((100 + r))
    seq $b $((b + 39)) >"$T/a$r.ids"
    cmd=(add IDX --tokens "$T/a$r/tokens.npy" --doclens "$T/a$r/doclens.npy" --ids "$T/a$r.ids")
    sort -n "$T/exp" "$T/a$r.ids" >"$T/after" ;;
  delete)
    { seq $((b + 35)) $((b + 39)); seq $(((r - 1) * 10)) $(((r - 1) * 10 + 4))
      [ $r -gt 1 ] && seq $(((r - 1) * 1000)) $(((r - 1) * 1000 + 4)); } >"$T/d$r.ids"
    if [ $((r % 2)) = 1 ]; then
      cmd=(delete IDX $(sed 's/^/--id /' "$T/d$r.ids"))
    else
      npy i64 "$T/d$r.npy" $(cat "$T/d$r.ids")
      cmd=(delete IDX --ids "$T/d$r.npy")
    fi
    grep -vxF -f "$T/d$r.ids" "$T/exp" >"$T/after" ;;
  update)
    [ -d "$T/u$r" ] || corpus "u$r" 30 $((200 + r))
    { seq $b $((b + 19)); for j in $(((2 * r) % 30)) $(((2 * r + 1) % 30)); do
        seq $((10 * j + 5)) $((10 * j + 9)); done; } >"$T/u$r.ids"
    cmd=(update IDX --tokens "$T/u$r/tokens.npy" --doclens "$T/u$r/doclens.npy" --ids "$T/u$r.ids")
    cp "$T/exp" "$T/after" ;;
  compact)
    cmd=(compact IDX)
    cp "$T/exp" "$T/after" ;;
  esac
}
# committed R STEP: the plan's bookkeeping once the operation has committed
committed() {
  local r=$1 step=$2 i=0 id
  case $step in
  add) for id in $(cat "$T/a$r.ids"); do owner[$id]="a$r $i"; i=$((i + 1)); done ;;
  delete) for id in $(cat "$T/d$r.ids"); do unset "owner[$id]"; done ;;
  update) for id in $(cat "$T/u$r.ids"); do owner[$id]="u$r $i"; i=$((i + 1)); done ;;
  esac
  cp "$T/after" "$T/exp"
  gen=$((gen + 1))
  set -- $(layout_of "$T/idx") 0 0
  [ $1 -gt $max_segs ] && max_segs=$1
  [ $2 -gt $max_lists ] && max_lists=$2
  return 0
}
max_segs=0 max_lists=0
run_op() { "$C" "${cmd[0]}" "$1" "${cmd[@]:2}"; } # run_op IDX: $cmd on IDX

# The duration of each kind of operation: the median of three runs of the plan's round 1,
# each on a fresh copy of the index.
declare -A dur samples
for k in 1 2 3; do
  rm -rf "$T/meas" && cp -a "$T/idx" "$T/meas"
  for step in add delete update compact; do
    plan 1 $step
    t0=$(ms)
    run_op "$T/meas" >/dev/null 2>"$T/err" || bad "measuring $step failed: $(cat "$T/err")"
    samples[$step]+="$(( $(ms) - t0 )) "
  done
done
rm -rf "$T/meas" "$T/meas.lock"
for step in add delete update compact; do
  dur[$step]=$(printf '%s\n' ${samples[$step]} | sort -n | sed -n 2p)
done
echo "operation times (ms, with fsync): add ${dur[add]}, delete ${dur[delete]}, update ${dur[update]}, compact ${dur[compact]}"

kills=0 before=0 after=0 finished=0 stray_seen=0 broken=0 rounds=0
declare -A kill_by_op
r=0
# more rounds until every kind of operation was killed at least once (compactions come
# every 5th round only), but no more than 30
enough() {
  [ $kills -ge 50 ] && [ $r -ge 5 ] || return 1
  local step
  for step in add delete update compact; do [ "${kill_by_op[$step]:-0}" -ge 1 ] || return 1; done
}
while [ $broken = 0 ] && ! enough && [ $r -lt 30 ]; do
  r=$((r + 1))
  steps="add delete update"
  # (after round 5, also every round until a kill has hit a running compaction)
  { [ $((r % 5)) = 0 ] || { [ $r -gt 5 ] && [ "${kill_by_op[compact]:-0}" = 0 ]; }; } && steps+=" compact"
  for step in $steps; do
    plan $r $step
    tries=0
    while :; do
      d=${dur[$step]}
      s=$((RANDOM % (d + 1)))
      # a simple command, so that $! is chimera itself (a function or subshell in the
      # background would be a bash process, and killing it would not stop the writer)
      "$C" "${cmd[0]}" "$T/idx" "${cmd[@]:2}" >"$T/out" 2>"$T/err" &
      pid=$!
      sleep "$((s / 1000)).$(printf %03d $((s % 1000)))"
      kill -9 $pid 2>/dev/null
      wait $pid 2>/dev/null
      rc=$?
      if [ $rc = 137 ]; then
        kills=$((kills + 1)); kill_by_op[$step]=$(( ${kill_by_op[$step]:-0} + 1 ))
      elif [ $rc = 0 ]; then
        finished=$((finished + 1))
      else
        bad "round $r $step exited $rc (not killed): $(cat "$T/err")"; broken=1; break
      fi
      [ -n "$(strays "$T/idx" 2>/dev/null)" ] && stray_seen=$((stray_seen + 1))
      "$C" check "$T/idx" >"$T/check.out" 2>&1 ||
        { bad "check after a kill in round $r $step: $(cat "$T/check.out")"; broken=1; break; }
      g=$(gen_of "$T/idx")
      ids_of "$T/idx" >"$T/now"
      if [ "$g" = $gen ] && cmp -s "$T/now" "$T/exp"; then
        [ $rc = 0 ] && { bad "round $r $step exited 0 but did not commit"; broken=1; break; }
        before=$((before + 1))
      elif [ "$g" = $((gen + 1)) ] && cmp -s "$T/now" "$T/after"; then
        [ $rc = 137 ] && after=$((after + 1))
        committed $r $step
        break
      else
        bad "after a kill in round $r $step: generation $g (expected $gen or $((gen + 1))) and" \
          "ids differing from both prefixes: $(diff "$T/exp" "$T/now" | head -5 | tr '\n' ' ')"
        broken=1; break
      fi
      tries=$((tries + 1))
      if [ $tries -ge 6 ]; then # then let it finish (a kill rarely lands after the commit)
        run_op "$T/idx" >/dev/null 2>"$T/err" || { bad "round $r $step failed: $(cat "$T/err")"; broken=1; break; }
        [ "$(gen_of "$T/idx")" = $((gen + 1)) ] && ids_of "$T/idx" | cmp -s - "$T/after" &&
          committed $r $step || { bad "round $r $step: wrong state after an unkilled run"; broken=1; break; }
        break
      fi
    done
    [ $broken = 0 ] || break
  done
  rounds=$r
done
# The kills above land anywhere in an operation; on a fast machine most land before its
# first write (once 54 kills, none mid-write), and under a sanitizer the exit's leak
# check can take the second half (once 25 of 51 kills after the commit, none mid-write);
# kills at random times spread over the whole add missed its short write as well (once
# 60 of 60). When none left a partly written change, run copies of the next add under a
# watcher that kills it the moment a file its manifest does not list appears (at most 20
# tries: the writer may commit between the sight and the kill); what it left must still
# check as a valid index, and the next writer on it must succeed and clean up.
cat >"$T/killwatch.py" <<'PY'
import glob, json, os, signal, subprocess, sys
idx, cmd = sys.argv[1], sys.argv[2:]
listed = {s["file"] for s in json.load(open(os.path.join(idx, "manifest.json")))["sections"]}
listed.add("manifest.json")
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    while p.poll() is None:
        try:
            names = os.listdir(idx)
        except FileNotFoundError:  # swapped out by a rename: a change under way
            names = [""]
        if any(f not in listed for f in names) or glob.glob(idx + ".tmp-*"):
            p.send_signal(signal.SIGKILL)
            break
finally:
    if p.poll() is None:
        p.kill()
    rc = p.wait()
# 10: killed; 11: it finished first (try again); 12: it failed on its own (any other
# status: this script failed)
sys.exit(10 if rc == -signal.SIGKILL else 11 if rc == 0 else 12)
PY
if [ $broken = 0 ] && [ $stray_seen = 0 ]; then
  plan $((r + 1)) add
  for _ in $(seq 20); do
    rm -rf "$T/sk" "$T/sk".tmp-* "$T/sk".old-* && cp -a "$T/idx" "$T/sk"
    python3 "$T/killwatch.py" "$T/sk" "$C" "${cmd[0]}" "$T/sk" "${cmd[@]:2}"
    case $? in
    10) ;;
    11) continue ;;
    12) bad "the add under the watcher failed on its own"; break ;;
    *) bad "the watcher failed"; break ;;
    esac
    [ -n "$(strays "$T/sk" 2>/dev/null)" ] || continue
    "$C" check "$T/sk" >"$T/check.out" 2>&1 || { bad "check after a mid-write kill: $(cat "$T/check.out")"; break; }
    # a kill after the commit (while a merge's dropped sections were unlinked) leaves
    # unlisted files too, but no partly written change: only one before it counts
    g=$(gen_of "$T/sk")
    ids_of "$T/sk" >"$T/sk.ids"
    if [ "$g" = $((gen + 1)) ] && cmp -s "$T/sk.ids" "$T/after"; then continue; fi
    [ "$g" = $gen ] && cmp -s "$T/sk.ids" "$T/exp" ||
      { bad "after a mid-write kill: generation $g, ids of neither state"; break; }
    stray_seen=$((stray_seen + 1))
    run_op "$T/sk" >/dev/null 2>"$T/err" || bad "the add after a mid-write kill failed: $(cat "$T/err")"
    [ -z "$(strays "$T/sk")" ] || bad "the add after a mid-write kill left: $(strays "$T/sk")"
    break
  done
  rm -rf "$T/sk" "$T/sk".tmp-* "$T/sk".old-*
fi
echo "crash loop: $rounds rounds, $kills kills of a running writer (add ${kill_by_op[add]:-0}," \
  "delete ${kill_by_op[delete]:-0}, update ${kill_by_op[update]:-0}, compact ${kill_by_op[compact]:-0}):" \
  "$before before the commit, $after after it; $finished runs finished before the kill;" \
  "leftovers seen after $stray_seen kills; generation $gen, $(wc -l <"$T/exp") live ids; at most $max_segs" \
  "segments and $max_lists deletion lists ($(( $(ms) - t_start )) ms)"
[ $kills -ge 50 ] && ok || bad "only $kills kills hit a running writer (want >= 50)"
[ $before -ge 5 ] && ok || bad "only $before kills landed before the commit (want >= 5): the kills did not interrupt writers"
# rounds 1-4 append 8 segments (an add and an update each) and 8 deletion lists (a delete
# and an update each); round 5's add and delete find 8 and merge them first
[ $max_segs = 9 ] && ok || bad "at most $max_segs segments (base + 8 appended expected before the merge)"
[ $max_lists = 8 ] && ok || bad "at most $max_lists deletion lists (8 expected before the merge)"
[ $stray_seen -ge 1 ] && ok || bad "no kill left a partly written change behind: the kills did not interrupt writes"
for step in add delete update compact; do
  [ "${kill_by_op[$step]:-0}" -ge 1 ] && ok || bad "no kill hit a running $step"
done

# one more successful writer (a delete, which also leaves a deletion list for the
# searches below) removes whatever the killed ones left
"$C" delete "$T/idx" --id 299 >/dev/null 2>"$T/err" && ok || bad "delete --id 299: $(cat "$T/err")"
unset "owner[299]"; grep -vx 299 "$T/exp" >"$T/after" && committed 0 none
s=$(strays "$T/idx")
[ -z "$s" ] && ok || bad "leftovers after a successful writer: $s"
[ "$(gen_of "$T/idx")" = $gen ] && ok || bad "generation $(gen_of "$T/idx"), expected $gen"
ids_of "$T/idx" | cmp -s - "$T/exp" && ok || bad "the live ids differ from the plan's"

# ------------------------------------------------------------------------------------
# 2. Deleted ids never come back. Every batch's documents are searched by their own
#    tokens (one query per document, --qlens): every returned id must be live (so no
#    deleted or replaced-away id), and a live document whose current version is that
#    row must come first (its own tokens give the largest Chamfer score). The run is
#    TREC: qid Q0 docid rank score tag, ranks 1.. in order, scores non-increasing.
batches="base $(for i in $(seq 1 $rounds); do printf 'a%d u%d ' $i $i; done)"
# search_all IDX LABEL
search_all() {
  local idx=$1 label=$2 b nres=0 nself=0 nwant=0 id
  for b in $batches; do
    [ -d "$T/$b" ] || continue
    "$C" search "$idx" --queries "$T/$b/tokens.npy" --qlens "$T/$b/doclens.npy" -k 10 \
      --out "$T/run.trec" >/dev/null 2>"$T/err" || { bad "$label: search with $b failed: $(cat "$T/err")"; continue; }
    # the rows of batch b that are the current version of a live id: "row id"
    for id in "${!owner[@]}"; do
      set -- ${owner[$id]}
      [ "$1" = "$b" ] && echo "$2 $id"
    done >"$T/self"
    awk -v label="$label $b" -v live="$T/exp" -v self="$T/self" '
      BEGIN { q = "none" # (not uninitialised: that would compare equal to qid 0)
              while ((getline l < live) > 0) alive[l] = 1
              while ((getline l < self) > 0) { split(l, f, " "); want[f[1]] = f[2]; nwant++ } }
      NF != 6 || $2 != "Q0" || $4 !~ /^[0-9]+$/ || $3 !~ /^-?[0-9]+$/ {
        print label ": not a TREC line: " $0; err++; next }
      { if ($1 != q) { q = $1; rank = 0; last = "" }
        if ($4 != ++rank) { print label ": query " q ": rank " $4 " after " rank - 1; err++ }
        if (last != "" && $5 > last + 1e-6) { print label ": query " q ": scores increase"; err++ }
        last = $5; n++
        if (!($3 in alive)) { print label ": query " q " returned id " $3 ", which is not live"; err++ }
        if ($4 == 1 && (q in want) && want[q] == $3) self++ }
      END { printf "%d %d %d %d\n", n, self + 0, nwant + 0, err + 0 }' "$T/run.trec" >"$T/res"
    grep -v '^[0-9]* [0-9]* [0-9]* [0-9]*$' "$T/res" | head -5 | while read -r l; do bad "$l"; done
    set -- $(tail -1 "$T/res")
    [ "$4" = 0 ] && ok || bad "$label: $4 bad results searching with $b"
    nres=$((nres + $1)) nself=$((nself + $2)) nwant=$((nwant + $3))
  done
  echo "$label: $nres results checked; $nself of $nwant live documents found themselves first"
  [ $nres -gt 1000 ] && ok || bad "$label: only $nres results"
  [ $nwant -gt 200 ] && [ $((nself * 100)) -ge $((nwant * 99)) ] && ok ||
    bad "$label: only $nself of $nwant live documents ranked first by their own tokens"
}
search_all "$T/idx" "search, deletion lists"
ndel=$((300 - $(grep -c '^[0-9]\{1,3\}$' "$T/exp")))
[ $ndel -ge 20 ] && ok || bad "only $ndel base documents deleted: the search check is weak"

# compaction keeps the live ids, passes check, leaves nothing behind; search the same
"$C" compact "$T/idx" >"$T/out" 2>"$T/err" && ok || bad "compact failed: $(cat "$T/err")"
gen=$((gen + 1))
"$C" check "$T/idx" >"$T/check.out" 2>&1 && ok || bad "check after compact: $(cat "$T/check.out")"
ids_of "$T/idx" | cmp -s - "$T/exp" && ok || bad "compact changed the live ids"
"$C" info "$T/idx" | grep -q "(none deleted)" && ok || bad "compact left deleted documents: $("$C" info "$T/idx" | grep documents)"
s=$(strays "$T/idx")
[ -z "$s" ] && ok || bad "leftovers after compact: $s"
search_all "$T/idx" "search, compacted"
# a deleted id may be added again: base document 0, as a one-document batch
head_tokens=$(python3 -c "import struct,sys; b=open(sys.argv[1],'rb').read(); n=struct.unpack('<H',b[8:10])[0]; print(struct.unpack('<q', b[10+n:18+n])[0])" "$T/base/doclens.npy")
python3 - "$T/base/tokens.npy" "$T/one.npy" "$head_tokens" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<H", b[8:10])[0]; off = 10 + n
h = b[10:off].decode("latin1"); dim = int(h.split("'shape': (")[1].split(")")[0].split(",")[1])
rows = int(sys.argv[3])
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, dim)
h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
open(sys.argv[2], "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + b[off:off + rows * dim * 4])
PY
npy i64 "$T/one_len.npy" "$head_tokens"; echo 0 >"$T/one.ids"
"$C" add "$T/idx" --tokens "$T/one.npy" --doclens "$T/one_len.npy" --ids "$T/one.ids" >/dev/null 2>"$T/err" &&
  ok || bad "re-adding deleted id 0: $(cat "$T/err")"
{ echo 0; cat "$T/exp"; } | sort -n >"$T/after" && mv "$T/after" "$T/exp"
ids_of "$T/idx" | cmp -s - "$T/exp" && ok || bad "after re-adding id 0, the live ids are not the old ones plus 0"
"$C" search "$T/idx" --queries "$T/one.npy" --qlens "$T/one_len.npy" -k 3 --out "$T/one.trec" >/dev/null 2>&1 &&
  [ "$(awk '$4 == 1 { print $3 }' "$T/one.trec")" = 0 ] && ok || bad "re-added id 0 is not found first: $(cat "$T/one.trec")"

# ------------------------------------------------------------------------------------
# 3. Bad batches: refused whole, a message naming the problem, the index unchanged
#    byte for byte.
cp -a "$T/idx" "$T/bidx" # a living index: segments, no deletion lists yet
BI=$T/bidx
(cd "$BI" && sha256sum -- *) >"$T/sha.before"
corpus good 5 300                                  # 5 good documents
"$C" gen --out "$T/d48" --docs 5 --dim 48 --queries 1 --seed 3 >/dev/null
seq 90000 90004 >"$T/new5.ids"
read -r -a lens < <(python3 -c "import struct,sys; b=open(sys.argv[1],'rb').read(); n=struct.unpack('<H',b[8:10])[0]; print(*struct.unpack('<5q', b[10+n:50+n]))" "$T/good/doclens.npy")
npy nan "$T/good/tokens.npy" "$T/nan.npy" $((lens[0] + lens[1] + 3)) # in document 2
npy i64 "$T/zero.npy" ${lens[0]} ${lens[1]} 0 ${lens[2]} ${lens[3]} ${lens[4]}
seq 90000 90005 >"$T/new6.ids"
npy i64 "$T/short.npy" ${lens[0]} ${lens[1]} ${lens[2]} ${lens[3]} $((lens[4] - 1))
npy i64 "$T/long.npy" ${lens[0]} ${lens[1]} ${lens[2]} ${lens[3]} $((lens[4] + 1))
printf '90000\n90001\n90002\n90001\n90004\n' >"$T/dup.ids"
live1=$(sed -n 1p "$T/exp") live2=$(sed -n 2p "$T/exp")
printf '90000\n90001\n%s\n90003\n90004\n' "$live1" >"$T/present.ids"
printf '%s\n%s\n90002\n%s\n%s\n' "$live1" "$live2" "$(sed -n 3p "$T/exp")" "$(sed -n 4p "$T/exp")" >"$T/absent.ids"
npy i64 "$T/neg.npy" "$live1" -7
G=(--tokens "$T/good/tokens.npy" --doclens "$T/good/doclens.npy")
# a writer given a path with no index says so and leaves nothing there (no lock file)
expect_fail "add to a missing index" "$T/ghost: no such index directory" \
  "$C" add "$T/ghost" "${G[@]}" --ids "$T/new5.ids"
expect_fail "delete from a missing index" "no such index directory" "$C" delete "$T/ghost" --id 1
expect_fail "compact of a missing index" "no such index directory" "$C" compact "$T/ghost"
expect_fail "recluster of a missing index" "no such index directory" \
  "$C" compact "$T/ghost" --recluster
ls -d "$T"/ghost* >/dev/null 2>&1 && bad "a missing index's writers left $(ls -d "$T"/ghost*)" || ok
# missing beside its lock file (a replace between its renames): the writer takes the
# lock, then reports the directory missing (it does not hang or refuse before the lock)
: >"$T/gone.lock"
expect_fail "add to a missing index beside its lock" "$T/gone: no such index directory" \
  "$C" add "$T/gone" "${G[@]}" --ids "$T/new5.ids"
rm -f "$T/gone.lock"
expect_fail "delete --id past 64 bits" "--id needs an integer id" \
  "$C" delete "$BI" --id 99999999999999999999 --missing-ok
expect_fail "add of 48-d documents" "dimension 48, the index $DIM" \
  "$C" add "$BI" --tokens "$T/d48/tokens.npy" --doclens "$T/d48/doclens.npy" --ids "$T/new5.ids"
expect_fail "update of 48-d documents" "dimension 48, the index $DIM" \
  "$C" update "$BI" --tokens "$T/d48/tokens.npy" --doclens "$T/d48/doclens.npy" --ids "$T/absent.ids" --missing-ok
expect_fail "add with a NaN" "row $((lens[0] + lens[1] + 3)) (document 2), column 1 is NaN" \
  "$C" add "$BI" --tokens "$T/nan.npy" --doclens "$T/good/doclens.npy" --ids "$T/new5.ids"
expect_fail "update with a NaN" "is NaN" \
  "$C" update "$BI" --tokens "$T/nan.npy" --doclens "$T/good/doclens.npy" --ids "$T/absent.ids" --missing-ok
expect_fail "add with an empty document" "document 2 is empty" \
  "$C" add "$BI" --tokens "$T/good/tokens.npy" --doclens "$T/zero.npy" --ids "$T/new6.ids"
expect_fail "add with an id twice" "id 90001 appears more than once" "$C" add "$BI" "${G[@]}" --ids "$T/dup.ids"
expect_fail "update with an id twice" "id 90001 appears more than once" \
  "$C" update "$BI" "${G[@]}" --ids "$T/dup.ids" --missing-ok
expect_fail "add of an id already present" "id $live1 (document 2 of the batch) is already in the index" \
  "$C" add "$BI" "${G[@]}" --ids "$T/present.ids"
expect_fail "update of an absent id" "id 90002 (document 2 of the batch) is not in the index" \
  "$C" update "$BI" "${G[@]}" --ids "$T/absent.ids"
expect_fail "add with lengths summing short" "sum to $((lens[0] + lens[1] + lens[2] + lens[3] + lens[4] - 1)) but" \
  "$C" add "$BI" --tokens "$T/good/tokens.npy" --doclens "$T/short.npy" --ids "$T/new5.ids"
expect_fail "add with lengths summing long" "exceed the" \
  "$C" add "$BI" --tokens "$T/good/tokens.npy" --doclens "$T/long.npy" --ids "$T/new5.ids"
expect_fail "add with fewer ids than documents" "4 ids for 5 documents" \
  "$C" add "$BI" "${G[@]}" --ids <(seq 90000 90003)
expect_fail "delete --id -7" "id -7 (entry 1) is negative" "$C" delete "$BI" --id "$live1" --id -7
expect_fail "delete --ids with -7" "id -7 (entry 1) is negative" "$C" delete "$BI" --ids "$T/neg.npy"
expect_fail "delete of an unknown id" "id 424242 (entry 1) is not in the index" \
  "$C" delete "$BI" --id "$live1" --id 424242
expect_fail "delete of a deleted id" "id 1 (entry 0) is not in the index" "$C" delete "$BI" --id 1
expect_fail "delete --missing-ok of a negative id" "negative" "$C" delete "$BI" --id -7 --missing-ok
"$C" delete "$BI" --id 424242 --missing-ok >"$T/out" 2>"$T/err" && ok || bad "delete --missing-ok of an unknown id: $(cat "$T/err")"
(cd "$BI" && sha256sum -- *) >"$T/sha.after"
cmp -s "$T/sha.before" "$T/sha.after" && ok || bad "a refused batch changed the index: $(diff "$T/sha.before" "$T/sha.after" | head)"
[ -z "$(strays "$BI")" ] && ok || bad "a refused batch left files: $(strays "$BI")"
"$C" check "$BI" >/dev/null 2>&1 && ok || bad "check after the refused batches"
# and the good batch is accepted (the refusals were about the batches, not the index)
"$C" add "$BI" "${G[@]}" --ids "$T/new5.ids" >/dev/null 2>"$T/err" && ok || bad "the good batch: $(cat "$T/err")"
"$C" update "$BI" "${G[@]}" --ids "$T/absent.ids" --missing-ok >/dev/null 2>"$T/err" &&
  ok || bad "update --missing-ok: $(cat "$T/err")"
[ "$("$C" info "$BI" --ids | grep -c '^9000[0-4]$')" = 5 ] && ok || bad "the good batch's ids are not all live"
"$C" check "$BI" >/dev/null 2>&1 && ok || bad "check after the good batch"

# ------------------------------------------------------------------------------------
# 4. A full disk during a commit leaves the previous generation.
M=$(mktemp -d)
cleanup() { umount "$M" 2>/dev/null; rm -rf "$M"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP # (so that the EXIT trap unmounts on a ctest timeout too)
if mount -t tmpfs -o size=8m tmpfs "$M" 2>/dev/null; then
  how=tmpfs
  echo "full disk: an 8 MiB tmpfs at $M, filled up to 64 KiB before each change"
else
  how=ulimit
  echo "full disk: tmpfs mount not permitted here; simulating it with a file-size limit (ulimit -f, EFBIG)"
fi
FI=$M/idx
"$C" build --tokens "$T/base/tokens.npy" --doclens "$T/base/doclens.npy" --out "$FI" \
  --threads 1 --seed 1 >/dev/null 2>"$T/err" || bad "build on $how: $(cat "$T/err")"
"$C" delete "$FI" --id 3 >/dev/null 2>&1 || bad "delete on $how"
corpus big 200 400 # a batch of ~1 MiB of sections
seq 50000 50199 >"$T/big.ids"
snapshot() { (cd "$FI" && sha256sum -- *); "$C" info "$FI" | grep generation; ids_of "$FI"; }
snapshot >"$T/full.before"
# full CMD...: run CMD with (nearly) no room left for a new file
full() {
  if [ $how = tmpfs ]; then
    local avail
    avail=$(df --output=avail -B1 "$M" | tail -1)
    dd if=/dev/zero of="$M/filler" bs=4096 count=$(( (avail - 65536) / 4096 )) status=none 2>/dev/null
    "$@"
    local rc=$?
    rm -f "$M/filler"
    return $rc
  else
    (trap '' XFSZ; ulimit -f 64; exec "$@")
  fi
}
needle="No space left on device"; [ $how = ulimit ] && needle="File too large"
expect_fail "add on a full disk ($how)" "$needle" full "$C" add "$FI" --tokens "$T/big/tokens.npy" \
  --doclens "$T/big/doclens.npy" --ids "$T/big.ids"
grep -q "write failed" "$T/err" && ok || bad "add on a full disk: the message does not say what failed: $(cat "$T/err")"
"$C" check "$FI" >"$T/check.out" 2>&1 && ok || bad "check after a full disk: $(cat "$T/check.out")"
snapshot >"$T/full.after"
cmp -s "$T/full.before" "$T/full.after" && ok || bad "a full disk changed the index: $(diff "$T/full.before" "$T/full.after" | head)"
expect_fail "compact on a full disk ($how)" "$needle" full "$C" compact "$FI"
"$C" check "$FI" >"$T/check.out" 2>&1 && ok || bad "check after a compaction on a full disk: $(cat "$T/check.out")"
snapshot >"$T/full.after"
cmp -s "$T/full.before" "$T/full.after" && ok || bad "a full disk compaction changed the index: $(diff "$T/full.before" "$T/full.after" | head)"
# with room again: the add succeeds and leaves nothing behind
"$C" add "$FI" --tokens "$T/big/tokens.npy" --doclens "$T/big/doclens.npy" --ids "$T/big.ids" \
  >/dev/null 2>"$T/err" && ok || bad "add with room again: $(cat "$T/err")"
[ "$(gen_of "$FI")" = 3 ] && ok || bad "generation after the add: $(gen_of "$FI"), expected 3"
{ seq 0 299 | grep -vx 3; seq 50000 50199; } | sort -n | cmp -s - <(ids_of "$FI") && ok || bad "ids after the add"
"$C" check "$FI" >/dev/null 2>&1 && ok || bad "check after the add with room again"
s=$(strays "$FI")
[ -z "$s" ] && ok || bad "leftovers after the add with room again: $s"
"$C" compact "$FI" >/dev/null 2>"$T/err" && ok || bad "compact with room again: $(cat "$T/err")"

echo "$pass passed, $fail failed ($(( ($(ms) - t_start) / 1000 )) s)"
[ $fail = 0 ]
