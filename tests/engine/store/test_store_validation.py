"""Every bad input raises a clear error and leaves the store unchanged."""

import numpy as np
import pytest

from engine.errors import InputError, StoreError
from engine.store import ExperienceStore


@pytest.fixture
def store():
    st = ExperienceStore()
    st.add_paths([["a", "b", "c"], ["a", "b", "d"], ["e", "f", "g"]])
    st.record_recall([0, 1, 2])
    return st


def state(st):
    return (st.reliability.copy(), st.hit, st.recall, st.n_experiences, st.n_nodes)


def unchanged(before, st):
    after = state(st)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


GOOD = np.full((2, 3), 0.01)


@pytest.mark.parametrize(
    "eids, rewards, kwargs, err, match",
    [
        ([0, 1], [[0.1, np.nan, 0.1], [0.1, 0.1, 0.1]], {}, InputError, r"rewards must be finite, got nan at index \(0, 1\)"),
        ([0, 1], [[0.1, 0.1, 0.1], [np.inf, 0.1, 0.1]], {}, InputError, "rewards must be finite, got inf"),
        ([0, 7], GOOD, {}, StoreError, "unknown eid 7 at position 1 of eids; the store has 3 experiences"),
        ([-1, 0], GOOD, {}, StoreError, "unknown eid -1"),
        ([0, 1], np.full((2, 2), 0.01), {}, InputError, r"rewards must have shape \[2, 3\], got \(2, 2\)"),
        ([0, 1, 2], GOOD, {}, InputError, r"rewards must have shape \[3, 3\]"),
        ([[0, 1]], GOOD, {}, InputError, r"eids must be 1-D, got shape \(1, 2\)"),
        ([0.0, 1.0], GOOD, {}, InputError, "eids must have an integer dtype, got float64"),
        ([True, False], GOOD, {}, InputError, "eids must have an integer dtype, got bool"),
        ([0, 1], np.array([["a"] * 3] * 2), {}, InputError, "rewards must have a real"),
        ([0, 1], [0.1, 0.2], {"horizon": 3}, InputError, "horizon index 3 is out of range for 3 horizons"),
        ([0, 1], [0.1, 0.2], {"horizon": "h5"}, InputError, "horizon 'h5' is not one of"),
        ([0, 1], [0.1, 0.2], {"horizon": [0, 5]}, InputError, "horizon index 5 at position 1 is out of range"),
        ([0, 1], [0.1, 0.2], {"horizon": [0]}, InputError, "horizon must have 2 entries"),
        ([0, 1], GOOD, {"rule": "magic"}, InputError, "rule must be one of formula, asymmetric, binary, delta"),
        ([0, 1], GOOD, {"eta": float("nan")}, InputError, "eta must be finite"),
        ([0, 1], GOOD, {"q0": 0.0}, InputError, "q0 must be > 0"),
        ([0, 1], GOOD, {"rule": "asymmetric", "eta_task": 1.5}, InputError, "eta_task must be <= 1.0"),
    ],
)
def test_bad_updates_change_nothing(store, eids, rewards, kwargs, err, match):
    before = state(store)
    with pytest.raises(err, match=match):
        store.update(eids, rewards, **kwargs)
    unchanged(before, store)


def test_errors_are_value_errors(store):
    with pytest.raises(ValueError):
        store.update([9], GOOD[:1])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: s.record_recall([0, 5]), "unknown eid 5"),
        (lambda s: s.record_recall([0], counts=[-1]), "counts must be >= 0"),
        (lambda s: s.record_recall([0], counts=[1, 2]), "counts must have 1 entries"),
        (lambda s: s.record_hit([0, 0]), "would make hit 2 exceed recall 1 for eid 0"),
        (lambda s: s.record_hit([1.5]), "integer dtype"),
        (lambda s: s.set_counts([0], [1], [2]), "0 <= hit <= recall"),
        (lambda s: s.set_reliability([0], [[3.0, 1.0, 1.0]]), r"values must lie in \[0.0, 2.0\]"),
    ],
)
def test_bad_counters_change_nothing(store, call, match):
    before = state(store)
    with pytest.raises((InputError, StoreError), match=match):
        call(store)
    unchanged(before, store)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: s.add_paths("abc"), "paths must be a sequence of paths"),
        (lambda s: s.add_paths([["a", "b", "c", "d"]]), r"paths\[0\] must be a sequence of 1..3 strings"),
        (lambda s: s.add_paths([[]]), r"paths\[0\] must be a sequence of 1..3 strings"),
        (lambda s: s.add_paths([["a", 3]]), r"paths\[0\]\[1\] must be a str"),
        (lambda s: s.add_paths([["a"]], keys=[[1, 2]]), r"keys\[0\] must have 1 entries"),
        (lambda s: s.add_paths([["a"]], keys=[[1.5]]), "must hold integer keys"),
        (lambda s: s.add_key_paths(np.zeros((2, 4), dtype=np.uint64)), "at most depth=3 columns"),
        (lambda s: s.add_key_paths(np.zeros((2, 2))), "integer dtype"),
        (lambda s: s.add_key_paths(np.zeros(3, dtype=np.uint64)), "keys must be 2-D"),
        (lambda s: s.add_key_paths(np.zeros((2, 2), dtype=np.uint64), lengths=[0, 2]), r"lengths must be in 1..2"),
        (lambda s: s.add_key_paths(np.zeros((2, 2), dtype=np.uint64), created=[1.0, np.nan]), "created must be finite"),
    ],
)
def test_bad_paths_change_nothing(store, call, match):
    before = state(store)
    with pytest.raises(InputError, match=match):
        call(store)
    unchanged(before, store)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"horizons": ()}, "horizons must be a non-empty sequence"),
        ({"horizons": ("h1", "h1")}, "horizons must be distinct"),
        ({"horizons": ("bad name",)}, "alphanumeric"),
        ({"depth": 0}, "depth must be an integer >= 1"),
        ({"q0": -1.0}, "q0 must be > 0"),
        ({"eta_task": 2.0}, "eta_task must be <= 1.0"),
        ({"q_min": 1.5}, "q_min <= q0 <= q_max"),
        ({"capacity": 0}, "capacity must be an integer >= 1"),
        ({"levels": ("a", "b")}, "levels must be 3 distinct"),
    ],
)
def test_bad_constructor_args(kwargs, match):
    with pytest.raises(InputError, match=match):
        ExperienceStore(**kwargs)


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda s: s.children(99), StoreError, "unknown node id 99"),
        (lambda s: s.topk_children(0, "h99", 2), InputError, "horizon 'h99'"),
        (lambda s: s.topk_children(0, 0, 0), InputError, "k must be an integer >= 1"),
        (lambda s: s.topk_children(0, 0, 2, agg="median"), InputError, "agg must be one of max, mean"),
        (lambda s: s.find(42, "a"), StoreError, "unknown parent id 42"),
        (lambda s: s.path_texts(10), StoreError, "unknown eid 10"),
        (lambda s: s.node_column("nope"), InputError, "unknown node column 'nope'"),
        (lambda s: ExperienceStore.from_snapshot({"block": np.zeros((1, 8))}), InputError, "snapshot is missing"),
    ],
)
def test_bad_reads(store, call, err, match):
    with pytest.raises(err, match=match):
        call(store)


@pytest.mark.parametrize("n", [0, 1, 7, 256, 257, 1000])
def test_small_array_paths_give_numpys_answers(n):
    """sums_by_id / all_distinct / within take a Python path for small arrays: same results as numpy's."""
    from engine.store import validate as V

    rng = np.random.default_rng(n)
    ids = rng.integers(0, max(1, n // 3), n).astype(np.int64)
    w = rng.integers(1, 4, n).astype(np.float64)
    uniq, sums = V.sums_by_id(ids, w)
    want_u, inv = np.unique(ids, return_inverse=True)
    assert uniq.dtype == np.int64 and np.array_equal(uniq, want_u)
    assert np.array_equal(sums, np.bincount(inv, weights=w, minlength=want_u.size))
    assert V.all_distinct(ids) == (np.unique(ids).size == n)
    assert V.all_distinct(np.arange(n, dtype=np.int64))
    if n:
        hi = int(ids.max())
        assert V.within(ids, hi + 1) and not V.within(ids, hi)
        assert not V.within(np.concatenate([ids, [-1]]), hi + 1)


def test_large_batches_name_the_first_bad_eid_and_the_first_non_finite_reward():
    """Batches over 256 take the compiled one-pass checks; the errors and the no-change rule are the same."""
    from engine.errors import InputError, StoreError
    from engine.store import ExperienceStore

    st = ExperienceStore(capacity=64, node_capacity=256)
    st.add_key_paths(np.arange(30, dtype=np.uint64).reshape(10, 3) + 1, created=np.zeros(10))
    before = st.reliability.copy()
    eids = np.arange(5000) % 10
    rewards = np.full((5000, st.n_horizons), 0.01)
    bad = eids.copy()
    bad[4321] = 10
    with pytest.raises(StoreError, match="unknown eid 10 at position 4321 of eids"):
        st.update(bad, rewards)
    bad[4321] = -1
    with pytest.raises(StoreError, match="unknown eid -1 at position 4321 of eids"):
        st.update(bad, rewards)
    r = rewards.copy()
    r[3000, 1] = np.inf
    with pytest.raises(InputError, match=r"rewards must be finite, got inf at index \(3000, 1\)"):
        st.update(eids, r)
    r[3000, 1] = 0.0
    r[4999, 0] = np.nan
    with pytest.raises(InputError, match=r"got nan at index \(4999, 0\)"):
        st.update(eids, r)
    np.testing.assert_array_equal(st.reliability, before)
    st.update(eids, rewards)
    assert (st.reliability != before).any()
