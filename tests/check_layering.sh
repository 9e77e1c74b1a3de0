#!/usr/bin/env bash
# Enforces the dependency direction of docs/architecture.md: a module may include the
# headers of the modules listed for it below and nothing else from src/; the CLI sees
# only the public header, and so does the server (server/). Prints each violation; exits non-zero if there is one.
set -u
root=${1:-.}
cd "$root" || exit 2
declare -A allowed=(
  [core]="core"
  [data]="core data"
  [meta]="core meta"
  [quant]="core quant"
  [cluster]="core cluster"
  [graph]="core graph"
  [index]="core data meta quant cluster graph index"
  [backend]="core quant backend backend/cpu backend/cuda"
  [backend/cpu]="core quant graph backend backend/cpu"
  [backend/cuda]="core quant backend backend/cuda"
  [search]="core data meta quant cluster graph index backend search"
)
bad=0
for mod in "${!allowed[@]}"; do
  [ -d "src/$mod" ] || continue
  for f in $(find "src/$mod" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \)); do
    while IFS= read -r inc; do
      dep=${inc%/*}
      ok=0
      for a in ${allowed[$mod]}; do [ "$dep" = "$a" ] && ok=1; done
      if [ $ok = 0 ]; then echo "$f includes \"$inc\": $mod may not depend on $dep"; bad=1; fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$f")
  done
done
# The manifest's JSON is the container's business: outside src/index/, no source file
# includes cJSON or the container header (index/store.h, store_impl.h) that exposes it;
# other modules reach index data through index.h and its typed functions.
for f in $(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -not -path 'src/index/*'); do
  while IFS= read -r inc; do
    case "$inc" in
      cJSON.h|index/store.h|index/store_impl.h) echo "$f includes \"$inc\": cJSON and the store are private to src/index/"; bad=1 ;;
    esac
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^">]*\)[">].*/\1/p' "$f")
done
# SQLite is the metadata module's business: outside src/meta/, no source file includes it
# (the index and search reach metadata through meta/meta.h).
for f in $(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -not -path 'src/meta/*'); do
  if grep -qE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](sqlite3\.h|meta/meta_impl\.h)[">]' "$f"; then
    echo "$f includes sqlite3.h or meta/meta_impl.h: SQLite is private to src/meta/"; bad=1
  fi
done
# The front ends: the CLI (tools/) and the Python extension (python/, any depth).
for f in tools/*.c tools/*.h $(find python -type f \( -name '*.c' -o -name '*.h' \) 2>/dev/null); do
  [ -f "$f" ] || continue
  while IFS= read -r inc; do
    case "$inc" in chimera.h|cli.h|shards.h) ;; *) echo "$f includes \"$inc\": front ends use only chimera.h"; bad=1 ;; esac
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
# The MPI driver (mpi/) is a front end too: the public header, the CLI's option parsing
# and sharded layout, the server's header (serve runs it), and its own header.
for f in mpi/*.c mpi/*.h; do
  [ -f "$f" ] || continue
  while IFS= read -r inc; do
    case "$inc" in chimera.h|mpi.h|server.h|../tools/cli.h|../tools/shards.h) ;; *) echo "$f includes \"$inc\": the MPI driver uses only chimera.h, tools/cli.h, tools/shards.h, server/server.h and mpi/ headers"; bad=1 ;; esac
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
# The HTTP server (server/) is a front end too: the public header and its own headers.
for f in server/*.c server/*.h; do
  [ -f "$f" ] || continue
  while IFS= read -r inc; do
    case "$inc" in chimera.h|server.h) ;; *) echo "$f includes \"$inc\": the server uses only chimera.h and server/ headers"; bad=1 ;; esac
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
if [ $bad = 0 ]; then echo "layering: 1 passed, 0 failed"; else echo "layering: 0 passed, 1 failed"; fi
exit $bad
