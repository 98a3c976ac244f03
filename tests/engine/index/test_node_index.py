"""NodeIndex: search vs brute force, restricted search, writes, bad input."""

import numpy as np
import pytest

from engine.errors import ConfigError, InputError
from engine.index import IndexConfig, NodeIndex, build_index

from index_helpers import brute_topk, lowrank, recall


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
def test_exact_path_equals_brute_force(rng, space):
    x = lowrank(rng, 300, 16)
    q = rng.standard_normal((7, 16)).astype(np.float32)
    ix = build_index(np.arange(300) + 5, x, space=space)  # 300 <= exact_max: exact search
    ids, sims = ix.search(q, 5)
    ref, ref_s = brute_topk(x, q, 5, space)
    np.testing.assert_array_equal(ids, ref + 5)
    np.testing.assert_allclose(sims, ref_s, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("space", ["cosine", "ip", "l2"])
def test_hnsw_path_recall(data, space):
    x, q = data
    ix = build_index(np.arange(x.shape[0]), x, space=space, exact_max=0)
    ids, sims = ix.search(q, 8)
    assert ids.dtype == np.int64 and sims.dtype == np.float32 and ids.shape == (50, 8)
    # raw inner product on unnormalised rows is not a metric: HNSW's guarantee is weaker there
    assert recall(ids, brute_topk(x, q, 8, space)[0]) >= (0.9 if space == "ip" else 0.95)
    assert (np.diff(sims, axis=1) <= 1e-6).all()


def test_single_query_matches_batch(data):
    x, q = data
    ix = build_index(np.arange(x.shape[0]), x, exact_max=0)
    ids, sims = ix.search(q, 4)
    i0, s0 = ix.search(q[3], 4)
    assert i0.shape == (4,)
    np.testing.assert_array_equal(i0, ids[3])
    np.testing.assert_allclose(s0, sims[3], rtol=1e-6)


def test_k_larger_than_index_pads(rng):
    ix = build_index([3, 9], rng.standard_normal((2, 8)))
    ids, sims = ix.search(rng.standard_normal(8), 4)
    assert set(ids[:2].tolist()) == {3, 9} and (ids[2:] == -1).all() and np.isneginf(sims[2:]).all()
    empty = NodeIndex(8)
    ids, sims = empty.search(rng.standard_normal(8), 3)
    assert (ids == -1).all()


@pytest.mark.parametrize("set_size", [1, 40, 900, 2500])
def test_restricted_search_returns_only_set_members(data, rng, set_size):
    x, q = data
    ix = build_index(np.arange(x.shape[0]), x, exact_max=500)  # small sets exact, big ones HNSW
    within = rng.choice(x.shape[0], set_size, replace=False)
    ids, sims = ix.search(q, 8, within=within)
    got = ids[ids >= 0]
    assert np.isin(got, within).all()
    assert ((ids >= 0).sum(axis=1) == min(8, set_size)).all()
    ref = within[brute_topk(x[within], q, min(8, set_size))[0]]
    assert recall(ids[:, : ref.shape[1]], ref) >= 0.95


def test_restricted_search_per_query_sets(data, rng):
    x, q = data
    ix = build_index(np.arange(x.shape[0]), x, exact_max=100)
    sets = [rng.choice(x.shape[0], int(s), replace=False) for s in rng.integers(1, 600, q.shape[0])]
    ids, _ = ix.search(q, 5, within=sets)
    for row, s in zip(ids, sets):
        assert np.isin(row[row >= 0], s).all() and (row >= 0).sum() == min(5, len(s))


def test_restricted_search_duplicates_and_skip_missing(rng):
    ix = build_index(np.arange(10), rng.standard_normal((10, 8)))
    ids, _ = ix.search(rng.standard_normal(8), 5, within=[1, 1, 2, 2])
    assert sorted(ids[ids >= 0].tolist()) == [1, 2]
    ix.delete([2])
    with pytest.raises(InputError, match=r"unknown or deleted node ids \[2, 99\]"):
        ix.search(rng.standard_normal(8), 5, within=[1, 2, 99])
    ids, _ = ix.search(rng.standard_normal(8), 5, within=[1, 2, 99], skip_missing=True)
    assert ids[ids >= 0].tolist() == [1]


def test_threshold_query(rng):
    x = np.eye(4, dtype=np.float32)
    x[1] = [0.9, 0.1, 0, 0]
    ix = build_index(np.arange(4), x)
    ids, sims = ix.search_threshold([1, 0, 0, 0], 0.8, k=4)
    assert ids[:2].tolist() == [0, 1] and (ids[2:] == -1).all()
    assert sims[0] == pytest.approx(1.0) and sims[1] >= 0.8


def test_replace_delete_revive_grow(rng):
    ix = NodeIndex(8, capacity=4)
    x = rng.standard_normal((20, 8)).astype(np.float32)
    ix.add(np.arange(10), x[:10])
    ix.add(np.arange(10, 20), x[10:])  # grows past capacity 4
    assert len(ix) == 20 and ix.capacity >= 20
    ix.replace([3], x[15])
    assert set(ix.search(x[15], 2)[0].tolist()) == {3, 15}
    ix.delete([15])
    assert ix.search(x[15], 1)[0][0] == 3 and len(ix) == 19 and ix.n_deleted == 1
    assert not ix.contains([15, 99])[0]
    ix.add([15], -x[15])  # revive with a new vector
    assert ix.search(-x[15], 1)[0][0] == 15 and len(ix) == 20 and ix.n_deleted == 0
    ix.upsert([15, 25], np.stack([x[0], x[1]]))
    assert len(ix) == 21
    np.testing.assert_allclose(ix.vectors([25])[0], x[1] / np.linalg.norm(x[1]), rtol=1e-5)


def test_compact_drops_deleted(rng):
    x = lowrank(rng, 600, 16)
    ix = build_index(np.arange(600), x, exact_max=0)
    ix.delete(np.arange(0, 600, 2))
    ix.compact()
    assert ix.n_deleted == 0 and len(ix) == 300
    ids, _ = ix.search(x[:20], 5)
    assert (ids % 2 == 1).all()
    ix.add([0], x[0])
    assert ix.search(x[0], 1)[0][0] == 0


def test_hnsw_with_many_deletions_still_returns_alive(rng):
    x = lowrank(rng, 2000, 16)
    ix = build_index(np.arange(2000), x, exact_max=0)
    ix.delete(np.arange(1990))
    ids, _ = ix.search(x[:5], 8)
    assert np.isin(ids[ids >= 0], np.arange(1990, 2000)).all() and ((ids >= 0).sum(1) == 8).all()


def test_similarity(rng):
    ix = build_index([4, 6], np.array([[1.0, 0], [0, 1.0]]))
    np.testing.assert_allclose(ix.similarity([1.0, 1.0], [6, 4, 6]), [2**-0.5] * 3, rtol=1e-6)


# -- bad input: clear errors, nothing changed -------------------------------------------------
@pytest.fixture
def small(rng):
    ix = build_index(np.arange(5), rng.standard_normal((5, 4)))
    return ix, ix.fingerprint(), ix.vectors(np.arange(5))


def _unchanged(ix, fp, vecs):
    assert ix.fingerprint() == fp and len(ix) == 5
    np.testing.assert_array_equal(ix.vectors(np.arange(5)), vecs)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda ix: ix.add([7], np.ones((1, 3))), r"shape \[n, 4\] \(index dim 4\), got \(1, 3\)"),
        (lambda ix: ix.add([7, 8], np.ones((1, 4))), "1 rows but 2 node ids"),
        (lambda ix: ix.add([7, 8], [[1, 1, 1, 1], [np.nan, 0, 0, 0]]), r"rows \[1\] contain NaN"),
        (lambda ix: ix.add([7, 8], [[1, 1, 1, 1], [np.inf, 0, 0, 0]]), "NaN or inf"),
        (lambda ix: ix.add([7, 8], [[1, 1, 1, 1], [0, 0, 0, 0]]), r"rows \[1\] are zero vectors"),
        (lambda ix: ix.add([3], np.ones((1, 4))), r"\[3\] are already in the index; use replace"),
        (lambda ix: ix.add([7, 7], np.ones((2, 4))), r"duplicate node ids \[7\]"),
        (lambda ix: ix.add([-1], np.ones((1, 4))), r"node ids in \[0, 2\*\*40\), got \[-1\]"),
        (lambda ix: ix.add([1.5], np.ones((1, 4))), "integer node ids"),
        (lambda ix: ix.add([9], np.array([["a", "b", "c", "d"]])), "float array"),
        (lambda ix: ix.replace([2, 42], np.ones((2, 4))), r"unknown or deleted node ids \[42\]"),
        (lambda ix: ix.delete([1, 42]), r"unknown or deleted node ids \[42\]"),
        (lambda ix: ix.search(np.ones(3), 2), r"index dim 4"),
        (lambda ix: ix.search(np.zeros(4), 2), "zero vectors"),
        (lambda ix: ix.search(np.full(4, np.nan), 2), "NaN"),
        (lambda ix: ix.search(np.ones(4), 0), "k must be a positive int"),
        (lambda ix: ix.search(np.ones((2, 4)), 2, within=[[1], [2], [3]]), "3 id sets for 2 queries"),
        (lambda ix: ix.search_threshold(np.ones(4), float("nan")), "threshold must be finite"),
    ],
)
def test_bad_input_raises_and_changes_nothing(small, call, match):
    ix, fp, vecs = small
    with pytest.raises(InputError, match=match):
        call(ix)
    _unchanged(ix, fp, vecs)


def test_bad_config():
    with pytest.raises(ConfigError, match="index.space must be one of"):
        IndexConfig(space="hamming")
    with pytest.raises(ConfigError, match="ef_construction must be >= M"):
        IndexConfig(M=32, ef_construction=16)
    with pytest.raises(InputError, match="dim must be a positive int"):
        NodeIndex(0)


def test_single_query_fast_path_validates_like_the_full_path(data):
    x, q = data
    ix = build_index(np.arange(x.shape[0]), x, exact_max=0)  # 1-D queries take the fast path
    ids, sims = ix.search(q[0], 3)
    ref_ids, ref_sims = ix.search(q[:1], 3)
    np.testing.assert_array_equal(ids, ref_ids[0])
    assert ids.dtype == np.int64 and sims.dtype == np.float32
    for bad, match in [(np.full(32, np.nan), "NaN"), (np.zeros(32), "zero vectors"), (np.ones(31), "index dim 32"),
                       (np.full(32, 1e30), None)]:
        if match is None:  # huge but finite: float32 overflow in the norm must not change the answer
            np.testing.assert_array_equal(ix.search(bad, 3)[0], ix.search(np.ones(32), 3)[0])
            continue
        with pytest.raises(InputError, match=match):
            ix.search(bad, 3)


def test_config_from_table():
    from engine.index import index_config_from_table

    cfg = index_config_from_table({"M": 32, "ef_construction": 100, "space": "l2"})
    assert (cfg.M, cfg.space) == (32, "l2") and index_config_from_table(None) == IndexConfig()
    with pytest.raises(ConfigError, match="unknown key.*'efsearch'.*valid keys"):
        index_config_from_table({"efsearch": 10})
