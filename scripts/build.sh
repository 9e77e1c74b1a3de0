#!/usr/bin/env bash
# Configures and builds Chimera into build/ (Release; CUDA when nvcc is found).
# Extra arguments go to CMake, e.g. scripts/build.sh -DCHIMERA_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
