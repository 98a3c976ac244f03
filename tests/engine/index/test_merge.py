"""Merge candidates for ToE's Maintenance step."""

import numpy as np
import pytest

from engine.errors import InputError
from engine.index import build_index, merge_candidates


@pytest.fixture
def tree():
    # siblings 1..4 under one parent, 5..6 under another; 7 and 8 are new nodes
    v = np.array(
        [[1, 0, 0], [1, 0.05, 0], [1, 0.3, 0], [0, 1, 0], [0.7, 0.7, 0], [1, 0.02, 0], [0, 0, 1], [1, 0.01, 0], [0, 0.1, 1]],
        dtype=np.float32,
    )
    return build_index(np.arange(9), v)


def test_siblings_above_threshold_sorted(tree):
    mc = merge_candidates(tree, [7, 8], [[1, 2, 3, 4, 7], [5, 6, 8]], threshold=0.8)
    assert mc.pairs()[0][:2] == (7, 1)
    ex, sims = mc.for_node(7)
    assert ex.tolist() == [1, 2] and (np.diff(sims) <= 0).all() and (sims >= 0.8).all()
    ex, sims = mc.for_node(8)
    assert ex.tolist() == [6]  # 5 is not similar; 8 itself excluded
    assert len(mc) == 3 and mc.new.dtype == np.int64 and mc.similarity.dtype == np.float32


def test_k_limit_threshold_and_unindexed_vectors(tree):
    mc = merge_candidates(tree, [7], [[1, 2, 3, 4]], threshold=0.99, k=1)
    assert mc.pairs() == [(7, 1, pytest.approx(1.0, abs=1e-3))]
    # a proposed node not yet in the index: pass its vector; deleted siblings are skipped
    tree.delete([1])
    mc = merge_candidates(tree, [100], [[1, 2, 3]], vectors=[[1, 0, 0]], threshold=0.9)
    assert mc.existing.tolist() == [2]
    assert len(merge_candidates(tree, [], [])) == 0


def test_bad_input(tree):
    with pytest.raises(InputError, match="1 id sets for 2 new nodes"):
        merge_candidates(tree, [7, 8], [[1]])
    with pytest.raises(InputError, match="unknown or deleted node ids"):
        merge_candidates(tree, [99], [[1]])
    with pytest.raises(InputError, match=r"siblings\[0\] must be integer node ids"):
        merge_candidates(tree, [7], [[1.5]])
    with pytest.raises(InputError, match="threshold must be finite"):
        merge_candidates(tree, [7], [[1]], threshold=float("inf"))
