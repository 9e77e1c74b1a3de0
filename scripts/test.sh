#!/usr/bin/env bash
# Builds and runs every test twice: a RelWithDebInfo build (asserts on) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build; then, with clang, a third time
# under clang's sanitizers, and the index-open fuzz target under libFuzzer for
# FUZZ_SECONDS (default 60). Installs missing dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)
passes=("build-test:" "build-asan:-DCHIMERA_SANITIZE=address,undefined")
# clang's UndefinedBehaviorSanitizer finds what gcc's does not (and float-cast-overflow,
# added for both); CUDA off, since the .cu files are built and tested by the gcc passes.
if command -v clang >/dev/null; then
  passes+=("build-clang:-DCMAKE_C_COMPILER=clang -DCHIMERA_CUDA=OFF -DCHIMERA_SANITIZE=address,undefined")
fi
for cfg in "${passes[@]}"; do
  dir=${cfg%%:*}
  flags=${cfg#*:}
  echo "== $dir ${flags:-(asserts on)}"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF $flags >/dev/null
  cmake --build "$dir" -j"$jobs"
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs")
done
# The index-open fuzz target (tests/fuzz_open.c): only the fuzz executables are built,
# with the library instrumented for libFuzzer; ctest runs the standalone driver and, when
# libFuzzer is there, fuzz_open for FUZZ_SECONDS.
if command -v clang >/dev/null; then
  echo "== build-fuzz (libFuzzer, ${FUZZ_SECONDS:-60}s)"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF -DCMAKE_C_COMPILER=clang \
    -DCHIMERA_CUDA=OFF -DCHIMERA_SANITIZE=address,undefined -DCHIMERA_FUZZ=ON >/dev/null
  targets=(fuzz_open_replay)
  grep -q "^CHIMERA_FUZZ:BOOL=ON" build-fuzz/CMakeCache.txt && targets+=(fuzz_open)
  cmake --build build-fuzz -j"$jobs" --target "${targets[@]}"
  (cd build-fuzz && ctest --output-on-failure -R '^fuzz_open')
fi
