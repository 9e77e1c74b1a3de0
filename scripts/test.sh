#!/usr/bin/env bash
# Builds and runs every test twice: a RelWithDebInfo build (asserts on) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build; then, with clang, a third time
# under clang's sanitizers; then the concurrency tests under ThreadSanitizer; the
# index-open fuzz target under libFuzzer for FUZZ_SECONDS (default 60); and the Python
# package: `pip install .[test]` into a venv under build-python/ and its pytest tests
# (python/tests). Installs missing dependencies.
#
# With no arguments this is the full run (the README's test command and CI's). Options
# narrow it (tests/README.md):
#   -L LABEL, -LE LABEL   run only the tests with (without) a label: unit, cli, slow,
#                         gpu, fuzz, python; passed to ctest in every pass (-L python
#                         alone runs only the Python pass; -LE slow skips its wheel test)
#   -R REGEX, -E REGEX    run only the tests whose names match (do not match)
#   --fast                only the plain build (build-test/), no sanitizer or fuzz pass
#   -j N                  parallel build and test jobs (default: nproc)
#   -- ARGS...            further arguments for ctest
# The fuzz pass runs in a full run, or when the fuzz label is asked for (-L fuzz); the
# ThreadSanitizer pass only in a full run; the Python pass in a full run, with --fast
# and no filter, or when the python label is asked for (-L python).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { sed -n '/^# With no arguments/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
jobs=$(nproc)
fast=0
filter=()
extra=()
want_fuzz=1
want_python=1
python_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    -L|-LE|-R|-E)
      [ $# -ge 2 ] || { echo "test.sh: $1 needs an argument" >&2; exit 2; }
      filter+=("$1" "$2")
      want_fuzz=0
      [ "$1" = -L ] && [[ fuzz =~ $2 ]] && want_fuzz=2
      # The Python pass: asked for by -L python, left out by any other -L, -R or -E,
      # and by an -LE that matches python.
      case "$1" in
        -L) if [[ python =~ $2 ]]; then want_python=2; else want_python=0; fi ;;
        -LE) [[ python =~ $2 ]] && want_python=0 ;;
        *) want_python=0 ;;
      esac
      shift 2 ;;
    --fast) fast=1; shift ;;
    -j) [ $# -ge 2 ] || { echo "test.sh: -j needs an argument" >&2; exit 2; }
        jobs=$2; shift 2 ;;
    -j*) jobs=${1#-j}; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "test.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
# Several -L options mean "all of these labels" to ctest; the fuzz pass then runs only if
# every one of them admits fuzz.
if [ $want_fuzz = 2 ]; then
  for ((i = 0; i < ${#filter[@]}; i += 2)); do
    case "${filter[i]}" in
      -L) [[ fuzz =~ ${filter[i+1]} ]] || want_fuzz=0 ;;
      -R|-E|-LE) want_fuzz=0 ;;
    esac
  done
fi
[ $fast = 1 ] && want_fuzz=0
# -L python (the only filter): just the Python pass, with the CLI it compares against.
if [ ${#filter[@]} -eq 2 ] && [ "${filter[0]}" = -L ] && [ "${filter[1]}" = python ]; then
  python_only=1
fi
# -LE slow leaves out the Python pass's slow test (the wheel built and installed afresh).
pytest_mark=()
for ((i = 0; i < ${#filter[@]}; i += 2)); do
  [ "${filter[i]}" = -LE ] && [[ slow =~ ${filter[i+1]} ]] && pytest_mark=(-m "not slow")
done
scripts/install-deps.sh
passes=("build-test:")
[ $python_only = 1 ] && passes=()
if [ $fast = 0 ]; then
  passes+=("build-asan:-DCHIMERA_SANITIZE=address,undefined")
  # clang's UndefinedBehaviorSanitizer finds what gcc's does not (and float-cast-overflow,
  # added for both); CUDA off, since the .cu files are built and tested by the gcc passes.
  if command -v clang >/dev/null; then
    passes+=("build-clang:-DCMAKE_C_COMPILER=clang -DCHIMERA_CUDA=OFF -DCHIMERA_SANITIZE=address,undefined")
  fi
fi
for cfg in ${passes[@]+"${passes[@]}"}; do
  dir=${cfg%%:*}
  flags=${cfg#*:}
  echo "== $dir ${flags:-(asserts on)}"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF $flags >/dev/null
  cmake --build "$dir" -j"$jobs"
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" ${filter[@]+"${filter[@]}"} \
    ${extra[@]+"${extra[@]}"})
done
# ThreadSanitizer pass over the concurrency tests only (ctest -R): one index searched,
# and one corpus exact-searched, from many threads at once (tests/test_concurrent.c),
# and, where the server is built, `chimera serve` (tests/test_server.py: its batcher,
# writer and HTTP threads under concurrent clients; a shorter fuzz run, TSan being
# ~5x slower). A separate build because TSan cannot be combined with ASan; CUDA off,
# since TSan does not see into the driver. OpenBLAS and libmicrohttpd are
# uninstrumented (TSan sees their pthread calls), and the library pins OpenBLAS to one
# thread, so no suppressions are needed; halt_on_error makes any report fail.
if [ $fast = 0 ] && [ ${#filter[@]} -eq 0 ]; then
  echo "== build-tsan (ThreadSanitizer, concurrency tests)"
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF \
    -DCHIMERA_SANITIZE=thread -DCHIMERA_CUDA=OFF >/dev/null
  cmake --build build-tsan -j"$jobs" --target test_concurrent test_update_concurrent chimera
  (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" FUZZ_REQUESTS=500 \
    ctest --output-on-failure -R '^test_((update_)?concurrent|server)$')
fi
# The index-open fuzz target (tests/fuzz_open.c): only the fuzz executables are built,
# with the library instrumented for libFuzzer; ctest runs the standalone driver and, when
# libFuzzer is there, fuzz_open for FUZZ_SECONDS.
if [ $want_fuzz != 0 ] && command -v clang >/dev/null; then
  echo "== build-fuzz (libFuzzer, ${FUZZ_SECONDS:-60}s)"
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF -DCMAKE_C_COMPILER=clang \
    -DCHIMERA_CUDA=OFF -DCHIMERA_SANITIZE=address,undefined -DCHIMERA_FUZZ=ON >/dev/null
  targets=(fuzz_open_replay)
  grep -q "^CHIMERA_FUZZ:BOOL=ON" build-fuzz/CMakeCache.txt && targets+=(fuzz_open)
  cmake --build build-fuzz -j"$jobs" --target "${targets[@]}"
  (cd build-fuzz && ctest --output-on-failure -R '^fuzz_open')
fi
# The Python package (pyproject.toml, python/): installed with pip into a venv under
# build-python/ exactly as a user's `pip install .` does (scikit-build-core over this
# CMake build, dependencies from PyPI), then its pytest tests, which compare with the CLI
# of build-test/ and build a wheel into a fresh venv (the slow one). CUDA is left out of
# this build: build-test/ already compiles and tests the .cu files, and nvcc would add
# minutes for no new coverage. The CMake build directory build-python/cmake persists, so
# a rerun recompiles only what changed. pytest's exit 5 (no test collected) fails here.
if [ $want_python != 0 ]; then
  echo "== build-python (pip install .[test], pytest python/tests)"
  if [ $python_only = 1 ]; then
    cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF >/dev/null
    cmake --build build-test -j"$jobs" --target chimera
  fi
  [ -x build-python/venv/bin/python ] || python3 -m venv build-python/venv
  skbuild=(-C build-dir=build-python/cmake -C cmake.define.CHIMERA_CUDA=OFF)
  build-python/venv/bin/python -m pip install -q --disable-pip-version-check ".[test]" "${skbuild[@]}"
  rc=0
  CHIMERA_CLI="$PWD/build-test/chimera" CHIMERA_WHEEL_ARGS="${skbuild[*]}" \
    build-python/venv/bin/python -m pytest -q -p no:cacheprovider python/tests \
    ${pytest_mark[@]+"${pytest_mark[@]}"} || rc=$?
  if [ $rc = 5 ]; then
    echo "test.sh: pytest collected no tests in python/tests" >&2
  fi
  [ $rc = 0 ] || exit $rc
  # In a full run, the same tests once more with the extension and the library built
  # under gcc's AddressSanitizer and UndefinedBehaviorSanitizer (build-pyasan/, CMake
  # directly), loaded into the venv's Python by LD_PRELOAD of the runtimes: bad inputs
  # and concurrent searches must not touch memory they should not. Leak checking is off:
  # CPython keeps memory until exit by design. The wheel test does not use this build.
  if [ $fast = 0 ] && [ ${#filter[@]} -eq 0 ]; then
    echo "== build-pyasan (Python tests, extension under ASan+UBSan)"
    cmake -S . -B build-pyasan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHIMERA_BENCH=OFF -DCHIMERA_TESTS=OFF \
      -DCHIMERA_CUDA=OFF -DCHIMERA_SANITIZE=address,undefined -DCHIMERA_PYTHON=ON \
      -DPython_EXECUTABLE="$PWD/build-python/venv/bin/python" >/dev/null
    cmake --build build-pyasan -j"$jobs" --target _chimera
    rm -rf build-pyasan/pkg && mkdir -p build-pyasan/pkg/chimera
    cp python/chimera/*.py build-pyasan/pkg/chimera/ && cp build-pyasan/_chimera*.so build-pyasan/pkg/chimera/
    CHIMERA_CLI="$PWD/build-test/chimera" PYTHONPATH="$PWD/build-pyasan/pkg" ASAN_OPTIONS=detect_leaks=0 \
      LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
      build-python/venv/bin/python -m pytest -q -p no:cacheprovider -m "not slow" python/tests
  fi
fi
