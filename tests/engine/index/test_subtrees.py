"""SubtreeIndex (one NodeIndex per large subtree) and NodeIndex.search(valid=): growth, exactness, errors."""

import numpy as np
import pytest
from index_helpers import lowrank

from engine.errors import InputError
from engine.index import IndexConfig, NodeIndex, SubtreeIndex


class Tree:
    """Rows ``0..n-1``, each in subtree ``sub[row]``; ``active`` marks the rows not merged away."""

    def __init__(self, x, sub, active=None):
        self.x, self.sub = x, np.asarray(sub)
        self.active = np.ones(len(sub), bool) if active is None else np.asarray(active, bool)

    def upto(self, n):  # the tree as a reader of its first n rows sees it
        return Tree(self.x[:n], self.sub[:n], self.active[:n])

    def rows(self, s):
        return np.flatnonzero(self.sub == s)

    def top(self, ix: SubtreeIndex, s, q, k):
        rows = self.rows(s)
        return ix.top(s, q, k, newest=int(rows[-1]), valid=self.active,
                      rows_after=lambda last: rows[rows > last], vectors_of=lambda r: self.x[r])


def brute(tree, s, q, k):
    """The exact rule: top k valid rows of subtree s by cosine, ties to the smaller row."""
    rows = tree.rows(s)
    rows = rows[tree.active[rows]]
    x = tree.x[rows] / np.linalg.norm(tree.x[rows], axis=1, keepdims=True)
    sims = x @ (q / np.linalg.norm(q))
    order = np.lexsort((rows, -sims))[:k]
    return rows[order]


@pytest.fixture
def tree(rng):
    n = 3000
    x = lowrank(rng, n, 24)
    sub = rng.choice([5, 9], n, p=[0.8, 0.2])
    active = rng.random(n) > 0.1
    return Tree(x, sub, active)


def test_incremental_growth_matches_a_fresh_build(tree, rng):
    """Rows added round by round give the graph a single build gives: same answers, approximate ones included."""
    cfg = IndexConfig(num_threads=1, exact_max=0, ef_search=16)
    grown, fresh = SubtreeIndex(1, cfg, fetch=8), SubtreeIndex(1, cfg, fetch=8)
    qs = lowrank(rng, 40, 24)
    for n in (300, 301, 900, 2000, 3000):  # the tree grows; each reader sees its first n rows
        tree.upto(n).top(grown, 5, qs[0], 8)
    tree.top(fresh, 5, qs[0], 8)
    assert grown.builds == [5] and fresh.builds == [5]
    assert grown.last_row(5) == fresh.last_row(5) == int(tree.rows(5)[-1])
    for q in qs:
        a, sa = tree.top(grown, 5, q, 8)
        b, sb = tree.top(fresh, 5, q, 8)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(sa, sb)
        ia, _ = grown.index(5).search(q, 20)
        ib, _ = fresh.index(5).search(q, 20)
        np.testing.assert_array_equal(ia, ib)


@pytest.mark.parametrize("n", [1, 2, 17, 400])
def test_top_equals_brute_force_where_exact(rng, n):
    """With a beam as wide as the subtree the graph finds every row: top() is the exact rule, ties included."""
    x = lowrank(rng, n, 16)
    if n > 2:
        x[n // 2] = x[1]  # duplicate vectors: a tie, broken to the older (smaller) row
    tree = Tree(x, np.zeros(n, np.int64), rng.random(n) > 0.2 if n > 2 else None)
    ix = SubtreeIndex(1, IndexConfig(num_threads=1, exact_max=0, ef_search=max(n, 16)), fetch=max(n, 1))
    for q in lowrank(rng, 30, 16):
        got, sims = tree.top(ix, 0, q, 8)
        np.testing.assert_array_equal(got, brute(tree, 0, q, 8))
        assert np.all(np.diff(sims) <= 0)


@pytest.mark.parametrize("exact_max", [0, 10_000])
def test_valid_mask_search_equals_brute_force(tree, rng, exact_max):
    """NodeIndex.search(valid=): only rows i < len(valid) with valid[i]; exact below exact_max, graph above."""
    ix = NodeIndex(24, exact_max=exact_max, ef_search=400)
    ix.add(np.arange(3000), tree.x)
    valid = tree.active[:2500]  # rows 2500.. are past the mask: a reader that has not seen them
    xn = tree.x / np.linalg.norm(tree.x, axis=1, keepdims=True)
    for q in lowrank(rng, 20, 24):
        ids, sims = ix.search(q, 8, valid=valid)
        s = xn[:2500] @ (q / np.linalg.norm(q))
        s[~valid] = -np.inf
        want = np.argsort(-s, kind="stable")[:8]
        np.testing.assert_array_equal(ids, want)
        np.testing.assert_allclose(sims, s[want], atol=1e-5)


def test_valid_mask_that_rejects_most_nodes_and_short_results(rng):
    x = lowrank(rng, 3000, 16)
    ix = NodeIndex(16, exact_max=0)
    ix.add(np.arange(3000), x)
    valid = np.zeros(3000, bool)
    valid[[7, 1500, 2999]] = True  # 3 of 3000: the graph's over-fetch gives up, the exact path answers
    ids, sims = ix.search(x[0], 5, valid=valid)
    assert sorted(ids[:3].tolist()) == [7, 1500, 2999] and ids[3:].tolist() == [-1, -1]
    assert np.isneginf(sims[3:]).all()
    ids, _ = ix.search(np.stack([x[0], x[1]]), 2, valid=np.zeros(0, bool))
    assert (ids == -1).all()


def test_crossover_switch():
    ix = SubtreeIndex(100)
    assert not ix.use(99) and ix.use(100) and ix.use(10**6)
    assert not SubtreeIndex(0).use(10**9)  # 0: never (always brute force)


def test_bad_input_raises_and_changes_nothing(tree, rng):
    with pytest.raises(InputError, match="min_size must be an int >= 0"):
        SubtreeIndex(-1)
    with pytest.raises(InputError, match="fetch must be a positive int"):
        SubtreeIndex(1, fetch=0)
    ix = SubtreeIndex(1, IndexConfig(num_threads=1, exact_max=0))
    q = tree.x[0]
    tree.upto(1000).top(ix, 5, q, 4)
    n0, last0 = len(ix.index(5)), ix.last_row(5)
    rows = tree.rows(5)
    new = rows[rows >= 1000]

    def top(rows_after, vectors_of, k=4, valid=tree.active):
        return ix.top(5, q, k, newest=int(rows[-1]), valid=valid, rows_after=rows_after, vectors_of=vectors_of)

    with pytest.raises(InputError, match="must return ascending rows after"):
        top(lambda last: new[::-1], lambda r: tree.x[r])
    with pytest.raises(InputError, match="must return ascending rows after"):
        top(lambda last: np.array([3]), lambda r: tree.x[r])  # not after the last row indexed
    with pytest.raises(InputError, match="1-D integer rows"):
        top(lambda last: new.astype(float), lambda r: tree.x[r])
    bad = tree.x[new].copy()
    bad[3, 0] = np.nan
    with pytest.raises(InputError, match="NaN or inf"):
        top(lambda last: new, lambda r: bad)
    with pytest.raises(InputError, match=r"shape \[n, 24\]"):
        top(lambda last: new, lambda r: tree.x[r][:, :5])
    with pytest.raises(InputError, match="k must be a positive int"):
        top(lambda last: new, lambda r: tree.x[r], k=0)
    assert len(ix.index(5)) == n0 and ix.last_row(5) == last0  # every failed batch left the index as it was
    with pytest.raises(InputError, match="valid must be a 1-D bool mask"):
        top(lambda last: new, lambda r: tree.x[r], valid=tree.active.astype(np.int8))
    with pytest.raises(InputError, match="no rows to index"):
        SubtreeIndex(1).top(3, q, 4, newest=0, valid=tree.active, rows_after=lambda last: np.zeros(0, np.int64),
                            vectors_of=lambda r: tree.x[r])
    with pytest.raises(InputError, match="within or valid, not both"):
        ix.index(5).search(q, 4, within=[1, 2], valid=tree.active)
