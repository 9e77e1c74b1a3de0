#!/usr/bin/env bash
# Builds and runs every test twice: a RelWithDebInfo build (asserts on) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Installs missing dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
for cfg in "build-test:" "build-asan:-DCHIMERA_SANITIZE=address,undefined"; do
  dir=${cfg%%:*}
  flags=${cfg#*:}
  echo "== $dir ${flags:-(asserts on)}"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF $flags >/dev/null
  cmake --build "$dir" -j"$jobs"
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs")
done
