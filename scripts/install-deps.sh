#!/usr/bin/env bash
# Installs what Chimera needs on Debian 12 (bookworm): compilers (gcc, and clang with its
# sanitizer and libFuzzer runtime) and CMake, OpenBLAS, xxHash, cJSON and SQLite (all
# from Debian; SQLite holds document metadata and evaluates filter predicates), Python's venv module and headers (the Python package), and numpy for the
# tests' fixture conversions; libmicrohttpd for `chimera serve` (the HTTP service:
# an embeddable C server with a thread pool, epoll and suspendable connections, linked
# dynamically, LGPL); Open MPI for `chimera-mpi` (sharded build, search and serving, one
# process per shard: the standard runtime of distributed C programs, with mpirun to
# launch it on one machine or many).
# Idempotent: installs only what is missing. The CUDA toolkit is optional and is not
# installed here (the build uses nvcc when it finds one).
set -euo pipefail
# clang and its runtime (sanitizers, libFuzzer) for the clang sanitizer pass and the fuzz
# target of scripts/test.sh.
# python3-venv and python3-dev for the Python package's pass (a venv under build-python/,
# and Python.h for its C extension); pip fetches scikit-build-core, numpy and pytest
# from PyPI into that venv.
pkgs=(build-essential cmake pkg-config libopenblas-dev libxxhash-dev libcjson-dev libsqlite3-dev clang libclang-rt-14-dev
      python3-venv python3-dev libmicrohttpd-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! python3 -c 'import numpy' 2>/dev/null; then
  echo "installing: numpy (PyPI)"
  python3 -m pip install -q numpy || echo "warning: numpy unavailable; the float16/NaN CLI checks will be skipped"
fi
