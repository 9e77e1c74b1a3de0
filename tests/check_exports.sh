#!/usr/bin/env bash
# The API boundary, checked on the built libraries:
#  1. the shared library's dynamic symbols are exactly the functions include/chimera.h
#     declares (nothing internal leaks, nothing declared is missing), and every function
#     the header declares is marked CHIMERA_API;
#  2. every non-static symbol of the static library carries a prefix of its module, as
#     listed in docs/architecture.md ("Symbol prefixes"), so a helper that forgot
#     `static` or a prefix shows up here by name.
# Usage: check_exports.sh libchimera.so libchimera.a SOURCE_DIR
set -u
so=$1 ar=$2 root=$3
hdr=$root/include/chimera.h
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0

# Declarations in the header, comments removed: each statement that names chimera_x( is
# a function declaration (the one function-pointer typedef names chimera_progress_fn)).
gcc -fpreprocessed -dD -E -P "$hdr" 2>/dev/null | tr '\n' ' ' | tr ';' '\n' >"$tmp/decls"
grep -oE '\bchimera_[a-z0-9_]+[[:space:]]*\(' "$tmp/decls" | tr -d '( ' | sort -u >"$tmp/header"
grep -E '\bchimera_[a-z0-9_]+[[:space:]]*\(' "$tmp/decls" | grep -v 'CHIMERA_API' |
  grep -oE '\bchimera_[a-z0-9_]+[[:space:]]*\(' | tr -d '( ' | sort -u >"$tmp/unmarked"
if [ -s "$tmp/unmarked" ]; then
  echo "declared in chimera.h without CHIMERA_API:"; sed 's/^/  /' "$tmp/unmarked"; bad=1
fi

nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sed 's/@.*//' |
  sort -u >"$tmp/exported"
if ! diff -u "$tmp/header" "$tmp/exported" >"$tmp/diff"; then
  echo "exported symbols differ from chimera.h (- declared only, + exported only):"
  grep '^[-+][^-+]' "$tmp/diff" | sed 's/^/  /'
  bad=1
fi
echo "exports: $(wc -l <"$tmp/exported") symbols exported, $(wc -l <"$tmp/header") functions declared"

# Module prefixes: the table in docs/architecture.md, rows "| `module/` | `prefix_` |".
declare -A prefixes=()
while IFS='|' read -r _ mod pre _; do
  mod=$(echo "$mod" | tr -d ' `'); mod=${mod%/}
  pre=$(echo "$pre" | grep -oE '`[a-z0-9_]+_`' | head -1 | tr -d '`')
  [ -n "$mod" ] && [ -n "$pre" ] && prefixes[$mod]=$pre
done < <(sed -n '/^## Symbol prefixes/,/^## /p' "$root/docs/architecture.md" | grep '^| `')
if [ ${#prefixes[@]} = 0 ]; then
  echo "docs/architecture.md has no \"Symbol prefixes\" table"; bad=1
fi
# Archive members are named after their source file; find the module from the source.
nm -A -g --defined-only "$ar" 2>/dev/null |
  awk '$(NF-1) ~ /^[TDBRVW]$/ {n = split($1, a, ":"); sub(/\.o$/, "", a[n-1]); print a[n-1], $NF}' \
    >"$tmp/static"
while read -r obj sym; do
  case "$sym" in _* | *.*) continue ;; esac # compiler-generated (CUDA stubs, C++ names)
  src=$(cd "$root/src" && find . -name "$obj" -print -quit)
  src=${src#./}
  case "$src" in
    */*) mod=${src%/*} ;;
    *) mod=$src ;;
  esac
  ok=0
  for p in ${prefixes[$mod]:-}; do [ "${sym#"$p"}" != "$sym" ] && ok=1; done
  if [ $ok = 0 ]; then
    echo "src/$src: '$sym' lacks a prefix of module $mod (${prefixes[$mod]:-none listed})"
    bad=1
  fi
done <"$tmp/static"

if [ $bad = 0 ]; then echo "exports: 1 passed, 0 failed"; else echo "exports: 0 passed, 1 failed"; fi
exit $bad
