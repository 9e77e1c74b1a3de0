"""Fixtures for the Python package's tests: a small synthetic corpus written by the CLI's
`chimera gen` when the CLI is there (CHIMERA_CLI, else build-test/chimera), or by numpy
otherwise, and an index built from it once per session."""
import os
import pathlib
import signal
import subprocess

import numpy as np
import pytest

import chimera

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli_path():
    p = os.environ.get("CHIMERA_CLI") or str(ROOT / "build-test" / "chimera")
    return p if os.access(p, os.X_OK) else None


@pytest.fixture(scope="session")
def cli():
    p = cli_path()
    if p is None:
        if os.environ.get("CHIMERA_CLI"):
            pytest.fail(f"CHIMERA_CLI={os.environ['CHIMERA_CLI']} is not executable")
        pytest.skip("no chimera CLI (set CHIMERA_CLI or build build-test/)")
    return p


@pytest.fixture(autouse=True)
def _sigint_raises():
    """SIGINT as an interactive Python has it: a test runner started in the background of
    a non-interactive shell inherits SIGINT ignored, and then no Ctrl-C (nor
    _thread.interrupt_main) ever raises KeyboardInterrupt, which the interrupt tests
    expect."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _normalise(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="session")
def corpus():
    """(tokens [n, 64] f32, doclens [n_docs] i64, queries [20, 16, 64] f32): documents
    drawn around topic centres, queries made of a document's tokens plus noise."""
    rng = np.random.default_rng(7)
    d, n_docs, n_topics = 64, 400, 40
    centres = _normalise(rng.standard_normal((n_topics, d)))
    lens = rng.integers(8, 48, n_docs).astype(np.int64)
    docs = []
    for n in lens:
        t = rng.integers(n_topics)
        docs.append(_normalise(centres[t] + 0.35 * rng.standard_normal((n, d))))
    tokens = np.concatenate(docs)
    queries = []
    for i in rng.integers(0, n_docs, 20):
        rows = docs[i][rng.integers(0, len(docs[i]), 16)]
        queries.append(_normalise(rows + 0.1 * rng.standard_normal(rows.shape)))
    return tokens, lens, np.stack(queries)


@pytest.fixture(scope="session")
def index(corpus, tmp_path_factory):
    tokens, lens, _ = corpus
    path = tmp_path_factory.mktemp("idx") / "corpus.idx"
    ix = chimera.Index.build(path, tokens=tokens, doclens=lens, threads=2)
    yield ix
    ix.close()


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}: {r.stderr}"
    return r.stdout


def read_trec(path, nq, k):
    """ids [nq, k] (-1 padding) and scores [nq, k] from a TREC run."""
    ids = np.full((nq, k), -1, dtype=np.int64)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    for line in open(path):
        q, _, doc, rank, score, _ = line.split()
        ids[int(q), int(rank) - 1] = int(doc)
        scores[int(q), int(rank) - 1] = float(score)
    return ids, scores
