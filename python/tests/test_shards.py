"""chimera.ShardedIndex over a layout the CLI builds (`chimera build --shards 3`): its
merged results equal `chimera search DIR`'s at the same (default) parameters and, with
exhaustive parameters, those of one index built with the shards' codebook; ids are the
corpus's and subset/exclude act across shards; a directory that is not a layout, or a
damaged manifest, is refused by name."""
import json
import subprocess

import numpy as np
import pytest

import chimera


def _run_ids(path, nq, k):
    ids = np.full((nq, k), -1, dtype=np.int64)
    for line in open(path):
        q, _, d, rank, *_ = line.split()
        ids[int(q), int(rank) - 1] = int(d)
    return ids


@pytest.fixture(scope="module")
def layout(cli, corpus, tmp_path_factory):
    tokens, lens, queries = corpus
    d = tmp_path_factory.mktemp("shards")
    np.save(d / "t.npy", tokens)
    np.save(d / "l.npy", lens)
    np.save(d / "q.npy", queries)
    subprocess.run([cli, "build", "--tokens", str(d / "t.npy"), "--doclens", str(d / "l.npy"),
                    "--out", str(d / "S"), "--shards", "3", "--no-sync"], check=True,
                   capture_output=True)
    return d


def test_equals_cli(cli, layout, corpus):
    _, _, queries = corpus
    subprocess.run([cli, "search", str(layout / "S"), "--queries", str(layout / "q.npy"), "-k",
                    "10", "--threads", "1", "--out", str(layout / "run")], check=True,
                   capture_output=True)
    with chimera.ShardedIndex(layout / "S") as s:
        assert len(s.shards) == 3 and s.n_docs == len(corpus[1])
        scores, ids = s.search(queries, k=10, threads=1)
    assert np.array_equal(ids, _run_ids(layout / "run", len(queries), 10))
    assert np.all(np.diff(scores, axis=1) <= 0)


def test_exhaustive_equals_one_index(cli, layout, corpus):
    tokens, lens, queries = corpus
    cb = next((layout / "S").glob("g*-codebook.bin"))
    subprocess.run([cli, "build", "--tokens", str(layout / "t.npy"), "--doclens",
                    str(layout / "l.npy"), "--out", str(layout / "one"), "--codebook", str(cb),
                    "--no-sync"], check=True, capture_output=True)
    one = chimera.Index.open(layout / "one")
    k_all = json.load(open(layout / "S" / "shards.json"))["n_clusters"]
    ex = {"n_probe": k_all, "k_refine": len(lens), "k_fullbit": len(lens)}
    with chimera.ShardedIndex(layout / "S") as s:
        s_scores, s_ids = s.search(queries, k=10, params=ex, threads=1)
    o_scores, o_ids = one.search(queries, k=10, params=ex, threads=1)
    assert np.array_equal(s_ids, o_ids)
    assert np.array_equal(s_scores, o_scores)
    one.close()


def test_filters_across_shards(layout, corpus):
    _, lens, queries = corpus
    allowed = np.array([3, 150, 299, 398])  # in different shards
    with chimera.ShardedIndex(layout / "S") as s:
        _, ids = s.search(queries[:5], k=10, subset=allowed)
        assert all(set(row[row >= 0]) == set(allowed) for row in ids)
        _, top = s.search(queries[:5], k=5)
        _, ids = s.search(queries[:5], k=5, exclude=top[:, 0])
        assert not np.isin(ids, top[:, 0]).any()


def test_refusals(layout, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a sharded index"):
        chimera.ShardedIndex(tmp_path)
    (tmp_path / "shards.json").write_text('{"format": "chimera-shards 1", "shards": [{"dir": "../x"}]}')
    with pytest.raises(ValueError, match="dir"):
        chimera.ShardedIndex(tmp_path)
    (tmp_path / "shards.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid shards manifest"):
        chimera.ShardedIndex(tmp_path)
