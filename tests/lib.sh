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
