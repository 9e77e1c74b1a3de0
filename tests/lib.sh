# Shared by the shell tests: a scratch directory $T, pass/fail counters and helpers.
# Source it after `set -u`; end the test with `finish`.
: "${CHIMERA:?path to the chimera binary}"
T=${TEST_TMP:-$(mktemp -d)}
rm -rf "$T" && mkdir -p "$T"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
# expect_fail DESCRIPTION NEEDLE COMMAND...: non-zero exit and NEEDLE in stderr
expect_fail() {
  local what=$1 needle=$2; shift 2
  if "$@" >"$T/out" 2>"$T/err"; then bad "$what: exited 0"; return; fi
  if grep -q -- "$needle" "$T/err"; then ok; else bad "$what: stderr lacks '$needle': $(cat "$T/err")"; fi
}
# index_sections: one "name|dtype|shape|device-or-host" line per section of the list in
# src/index/sections.h, in its order (tests that name sections take them from there).
index_sections() {
  sed -n 's/^ *X(\([A-Za-z0-9_]*\), *"\([^"]*\)", *"\([^"]*\)", *IX_\(DEVICE\|HOST\),.*/\1|\2|\3|\4/p' \
    "${SRC:?source directory}/src/index/sections.h" | sed 's/|DEVICE$/|device/; s/|HOST$/|host/'
}
# same_run A B: two TREC runs with the same documents for every query and scores equal
# to within float rounding (1e-5 relative). Runs of one index in two processes can differ
# in the last digit: a BLAS may pick another kernel path for buffers placed differently
# in memory (OpenBLAS on AVX-512 CPUs does), which changes the order of a sum.
same_run() {
  python3 - "$1" "$2" <<'PY'
import sys
def load(path):
    run = {}
    for line in open(path):
        q, _, doc, _, score, _ = line.split()
        run.setdefault(q, {})[doc] = float(score)
    return run
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [q for q in a if q not in b or a[q].keys() != b[q].keys() or
       any(abs(s - b[q][d]) > 1e-5 * max(1.0, abs(s)) for d, s in a[q].items())]
bad += [q for q in b if q not in a]
if not a:
    bad = ["(none: the runs are empty)"]
if bad:
    print("query %s differs" % bad[0])
sys.exit(1 if bad else 0)
PY
}
