"""ExperienceStore: tree building, lookups, counters, updates, top-k, snapshots."""

import math

import numpy as np
import pytest

from engine.errors import StoreError
from engine.store import ExperienceStore, StoreView, text_key
from engine.store.columns import block_width

PATHS = [
    ["Energy", "Geopolitics", "OPEC spare capacity"],
    ["Energy", "Geopolitics", "Sanctions on exporters"],
    ["Energy", "Macroeconomy", "Aggregate demand cycle"],
    ["Banks", "Policy", "Reserve requirement cuts"],
]


@pytest.fixture
def store():
    st = ExperienceStore()
    st.add_paths(PATHS, created=np.arange(4, dtype=float))
    return st


def test_shared_prefixes_are_reused(store):
    assert store.n_experiences == 4
    assert store.n_nodes == 1 + 2 + 3 + 4  # root, industries, factors, directions
    assert store.node_texts(store.children(0)) == ["Energy", "Banks"]
    geo = store.find_path(["Energy", "Geopolitics"])
    assert store.node_texts(store.children(geo)) == ["OPEC spare capacity", "Sanctions on exporters"]
    np.testing.assert_array_equal(store.paths[0][:2], store.paths[1][:2])
    assert store.path_texts(2) == PATHS[2]
    np.testing.assert_array_equal(store.created, [0, 1, 2, 3])


def test_adding_existing_path_returns_its_eid(store):
    eids = store.add_paths([PATHS[1], ["Energy", "Geopolitics", "New direction"], PATHS[1]])
    np.testing.assert_array_equal(eids, [1, 4, 1])
    assert store.n_experiences == 5


def test_new_experiences_start_at_q0_with_zero_counts():
    st = ExperienceStore(horizons=(5, 10), q0=0.5)
    st.add_paths([["a"], ["a", "b"]])
    np.testing.assert_array_equal(st.reliability, [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_array_equal(st.hit, [0, 0])
    np.testing.assert_array_equal(st.recall, [0, 0])
    assert st.horizons == ("h5", "h10") and st.q_max == 1.0
    assert st.eid_of(["a"]) == 0 and st.eid_of(["a", "b"]) == 1 and st.eid_of(["zz"]) == -1


def test_block_is_cache_line_aligned(store):
    assert store._block.ctypes.data % 64 == 0
    assert store._block.shape[1] == block_width(3) == 8
    assert block_width(7) == 16


def test_lookup_by_key_and_parent_key(store):
    e = store.find(0, "Energy")
    assert e == store.find(0, text_key("Energy")) == store.find_key("Energy")[0]
    assert store.find(e, "Policy") == -1
    np.testing.assert_array_equal(
        store.find_batch([0, e, e], [text_key("Banks"), text_key("Macroeconomy"), 7]),
        [store.find_path(["Banks"]), store.find_path(["Energy", "Macroeconomy"]), -1],
    )


def test_same_key_under_two_parents():
    st = ExperienceStore(depth=2)
    st.add_paths([["x", "shared"], ["y", "shared"]], keys=[[1, 99], [2, 99]])
    both = st.nodes_with_key(99)
    assert len(both) == 2 and st.find_key([99])[0] == both[0]
    assert st.node_texts(both) == ["shared", "shared"]
    np.testing.assert_array_equal(st.find_key(np.array([1, 2, 3], dtype=np.uint64)), [1, 3, -1])


def test_key_paths_fast_path_grows_and_matches_text_paths():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 5, (3000, 3)).astype(np.uint64)  # many repeats, forces growth
    st = ExperienceStore(capacity=1, node_capacity=1)
    eids = st.add_key_paths(keys)
    uniq = {tuple(k) for k in keys.tolist()}
    assert st.n_experiences == len(uniq)
    # every equal key path got the same eid
    first = {}
    for k, e in zip(map(tuple, keys.tolist()), eids):
        assert first.setdefault(k, e) == e
    # parents precede children; tree is consistent
    parent = st.node_column("parent")
    assert (parent[1:] < np.arange(1, st.n_nodes)).all()


def test_short_paths_and_lengths():
    st = ExperienceStore(depth=3)
    eids = st.add_key_paths(np.array([[1, 2, 3], [1, 2, 0]], dtype=np.uint64), lengths=[3, 2])
    np.testing.assert_array_equal(st.paths[1], [1, 2, -1])
    assert st.eid_of(2) == eids[1]


def test_counters_and_hit_never_exceeds_recall(store):
    store.record_recall([0, 0, 1])
    store.record_hit([0, 0])
    np.testing.assert_array_equal(store.recall, [2, 1, 0, 0])
    np.testing.assert_array_equal(store.hit, [2, 0, 0, 0])
    with pytest.raises(StoreError, match="exceed recall"):
        store.record_hit([1, 1])
    np.testing.assert_array_equal(store.hit, [2, 0, 0, 0])  # nothing applied
    store.record_recall([3], counts=[5])
    store.record_hit([3], counts=[5])
    assert store.hit[3] == 5


def test_formula_update_uses_hit_count(store):
    store.record_recall([0, 1], counts=[3, 3])
    store.record_hit([0], counts=[3])
    store.update([0, 1], np.full((2, 3), 0.01))
    q = store.reliability
    assert q[0, 0] == pytest.approx(1 + 10 * 0.01 / (1 + math.log(4)))
    assert q[1, 0] == pytest.approx(1 + 10 * 0.01)


def test_update_rules(store):
    store.update([0, 1], [[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]], rule="delta")
    np.testing.assert_allclose(store.reliability[:2], [[1.5] * 3, [2.0] * 3])
    store.update([0], [[0.0, 1.0, -1.0]], rule="binary")
    np.testing.assert_allclose(store.reliability[0], [0.0, 1.0, 0.0])
    store.update([1], [[0.0, 0.0, 0.0]], rule="asymmetric", eta_task=0.25)
    np.testing.assert_allclose(store.reliability[1], [1.5] * 3)
    store.update([2, 2], [0.01, 0.02], horizon="h20")
    assert store.reliability[2, 0] == 1.0 and store.reliability[2, 2] == 1.0
    assert store.reliability[2, 1] > 1.0
    store.update([3, 3], [0.3, -0.3], rule="delta", horizon=[0, 2])
    np.testing.assert_allclose(store.reliability[3], [1.3, 1.0, 0.7])


def test_update_parameter_overrides(store):
    store.update([0], [[0.01] * 3], eta=1.0)
    assert store.reliability[0, 0] == pytest.approx(1.01)
    store.update([1], [[10.0] * 3], q0=0.5)  # bounds follow q0: [0, 1]
    assert store.reliability[1, 0] == 1.0


def test_topk_children_by_horizon(store):
    geo = store.find_path(["Energy", "Geopolitics"])
    store.update([1], [[0.05, -0.05, 0.0]], rule="delta")
    ids, scores = store.topk_children(geo, "h10", 1)
    assert ids.tolist() == [store.find_path(PATHS[1])] and scores[0] == pytest.approx(1.05)
    ids, scores = store.topk_children(geo, 1, 3)
    assert ids.tolist() == [store.find_path(PATHS[0]), store.find_path(PATHS[1]), -1]
    assert np.isnan(scores[2])
    # inner nodes score the max (or mean) of their subtree
    ids, scores = store.topk_children(0, "h10", 2)
    assert ids.tolist() == [store.find_path(["Energy"]), store.find_path(["Banks"])]
    assert scores.tolist() == pytest.approx([1.05, 1.0])
    _, mean = store.topk_children(0, "h10", 1, agg="mean")
    assert mean[0] == pytest.approx((1.0 + 1.05 + 1.0) / 3)
    ids, _ = store.topk_children([0, geo], 0, 2)
    assert ids.shape == (2, 2)


def test_subtree(store):
    energy = store.find_path(["Energy"])
    np.testing.assert_array_equal(store.subtree_eids(energy), [0, 1, 2])
    assert store.subtree(energy)[0] == energy and len(store.subtree(energy)) == 6
    np.testing.assert_array_equal(store.subtree_eids(0), [0, 1, 2, 3])


def test_snapshot_is_read_only_and_view_matches(store):
    store.update([0], [[0.1, 0.2, 0.3]], rule="delta")
    snap = store.snapshot()
    assert all(isinstance(v, np.ndarray) and not v.flags.writeable for v in snap.values())
    view = ExperienceStore.from_snapshot(snap)
    assert isinstance(view, StoreView)
    np.testing.assert_array_equal(view.reliability, store.reliability)
    assert view.path_texts(3) == PATHS[3]
    assert view.find_path(PATHS[2]) == store.find_path(PATHS[2])
    assert view.topk_children(0, 0, 2)[0].tolist() == store.topk_children(0, 0, 2)[0].tolist()
    assert not hasattr(view, "update")
    with pytest.raises(ValueError):
        view.reliability[0, 0] = 5.0


def test_snapshot_copy_is_independent_and_pickles(store):
    import pickle

    snap = store.snapshot(copy=True)
    store.update([0], [[0.5, 0.5, 0.5]], rule="delta")
    view = ExperienceStore.from_snapshot(pickle.loads(pickle.dumps(snap)))
    assert view.reliability[0, 0] == 1.0 and store.reliability[0, 0] == 1.5


def test_writable_copy_from_snapshot(store):
    st2 = ExperienceStore.from_snapshot(store.snapshot(), writable=True)
    st2.add_paths([["New", "x", "y"]])
    st2.update([0], [[0.5, 0.5, 0.5]], rule="delta")
    assert st2.n_experiences == 5 and store.n_experiences == 4
    assert store.reliability[0, 0] == 1.0
    assert st2._block.ctypes.data % 64 == 0


def test_nbytes_reports_raw_and_allocated(store):
    nb = store.nbytes()
    # Q x3, hit, recall, path x3, created, external_id, active (1 byte), merged_into
    assert nb["raw_experiences"] == 4 * (3 * 8 + 8 + 8 + 3 * 8 + 8 + 8 + 1 + 8)
    assert nb["experiences"] >= 4 * 64


def test_key_index_is_built_lazily_and_kept_up_to_date():
    st = ExperienceStore(depth=2, capacity=1, node_capacity=1)
    st.add_paths([["x", "s"]], keys=[[1, 99]])
    assert st._key_table.size == 0  # not built until the first lookup by key
    assert st.find_key([99])[0] == 2
    st.add_key_paths(np.array([[5, 99]] * 1 + [[k, k] for k in range(100, 400)], dtype=np.uint64))  # grows
    np.testing.assert_array_equal(st.nodes_with_key(99), [2, 4])
    assert st.find_key([399])[0] == st.find_path([399, 399]) - 1
    view = ExperienceStore.from_snapshot(ExperienceStore(depth=1).snapshot())
    assert view.find_key([3])[0] == -1
    st2 = ExperienceStore(depth=2)
    st2.add_paths([["x", "s"], ["y", "s"]])
    view = ExperienceStore.from_snapshot(st2.snapshot())  # read-only: builds a private index
    np.testing.assert_array_equal(view.nodes_with_key("s"), [2, 4])


def test_growth_mid_path_keeps_texts_and_prefixes():
    st = ExperienceStore(capacity=1, node_capacity=1)
    paths = [[f"i{k % 3}", f"f{k % 5}", f"d{k}"] for k in range(200)]
    eids = st.add_paths(paths)
    np.testing.assert_array_equal(eids, np.arange(200))
    assert st.n_nodes == 1 + 3 + 15 + 200
    assert all(st.path_texts(k) == paths[k] for k in range(200))


@pytest.mark.parametrize("rule", ["formula", "asymmetric", "binary", "delta"])
@pytest.mark.parametrize("per_horizon", [False, True])
def test_batch_equals_one_at_a_time(rule, per_horizon):
    rng = np.random.default_rng(11)
    a = ExperienceStore(eta_task=0.3)
    a.add_paths([[f"i{k}", f"d{k}"] for k in range(6)])
    a.record_recall(np.arange(6), counts=np.full(6, 9))
    a.record_hit(np.arange(6), counts=np.arange(6))
    b = ExperienceStore.from_snapshot(a.snapshot(copy=True), writable=True)
    b.eta_task = a.eta_task
    eids = rng.integers(0, 3, 40)  # heavy repetition
    if per_horizon:
        r = np.round(rng.normal(0, 0.05, 40), 2)
        h = rng.integers(0, 3, 40)
        a.update(eids, r, rule, horizon=h)
        for i in range(40):
            b.update(eids[i : i + 1], r[i : i + 1], rule, horizon=h[i : i + 1])
    else:
        r = np.round(rng.normal(0, 0.05, (40, 3)), 2)
        a.update(eids, r, rule)
        for i in range(40):
            b.update(eids[i : i + 1], r[i : i + 1], rule)
    np.testing.assert_array_equal(a.reliability, b.reliability)
    assert a.reliability.min() >= 0.0 and a.reliability.max() <= 2.0
