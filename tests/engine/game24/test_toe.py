"""ToT+ToE on Game of 24: admission of verified continuations only, reuse on equal/overlapping states."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from engine.errors import ConfigError, PersistenceError
from engine.game24.checks import state_key
from engine.game24.hooks import PHASE_PROPOSE, PHASE_VALUE, EpisodeTrace, StepQuery
from engine.game24.toe_method import (
    ToEConfig,
    ToEHooks,
    make_toe_method,
    reinstantiate,
    update_q_binary,
    verified_suffix,
)
from engine.game24.toe_store import ToEStore
from engine.store import ExperienceStore, StoreView
from engine.game24.tot import PuzzleTask
from engine.game24.trajectory import canonical_numbers
from engine.rounds import Episode


def _scripted_backend():
    """The scripted backend of test_tot.py, loaded by path (test modules may share names across folders)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("_game24_test_tot", Path(__file__).with_name("test_tot.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.Scripted


Scripted = _scripted_backend()

SOLUTION = ("13 - 9 = 4 (left: 4 4 10)", "10 - 4 = 6 (left: 4 6)", "4 * 6 = 24 (left: 24)",
            "Answer: (10 - 4) * (13 - 9) = 24")


def _trace(eid, puzzle, solution, success=True, retrieved=(), used=()):
    text = "\n".join(solution) + "\n"
    return EpisodeTrace(eid, str(eid), eid, tuple(puzzle), "warmup", (text,), (success,), success,
                        solution=tuple(solution) if success else (), retrieved=tuple(retrieved), used=tuple(used))


def _query(numbers, phase=PHASE_PROPOSE, step=1):
    nums = canonical_numbers(numbers)
    text = " ".join(str(x) for x in nums)
    return StepQuery(99, "99", 99, (1, 2, 3, 4), step, phase, nums, text, state_key(nums))


def _admit(hooks, numbers, suffix, episode=0):
    """Admit one (state, suffix) row directly (as apply would for a depth-0 path)."""
    nums = canonical_numbers(numbers)
    text = " ".join(str(x) for x in nums)
    return int(hooks.exp.admit(episode, np.array([state_key(nums)]), [text], [suffix], np.array([1.0]))[0])


def _states(hooks):
    view = hooks.reader(hooks.snapshot())
    return [" ".join(str(x) for x in view.state_numbers(e)) for e in range(hooks.store.n_experiences)]


def _learn(hooks, traces):
    upd = hooks.reader(hooks.snapshot()).observe(traces, None)
    hooks.apply([(t.episode_id, u) for t, u in zip(traces, upd)])


def test_binary_update_is_eq_a4():
    q = update_q_binary(np.array([0.3, 1.0, 0.0]), np.array([1.0, 0.0, 1.0]))
    assert q.tolist() == [1.0, 0.0, 1.0]


def test_successful_trajectory_adds_states_and_suffixes():
    hooks = ToEHooks()
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    st = hooks.store
    assert isinstance(st, ExperienceStore) and st.n_experiences == 3
    assert _states(hooks) == ["4 9 10 13", "4 4 10", "4 6"]
    # the trajectory is one tree path: s4 -> s3 -> s2, node keys = canonical state keys
    assert st.path_texts(2) == ["4 9 10 13", "4 4 10", "4 6"]
    assert st.children(0).tolist() == [1] and st.children(1).tolist() == [2]
    assert int(st.node_column("key")[3].astype(np.int64)) == state_key((4, 6))
    assert st.find_key([state_key((4, 6))]).tolist() == [3]
    side = hooks.exp.side
    assert side["suffix"][2] == "4 * 6 = 24 (left: 24)"
    assert side["suffix"][1] == "10 - 4 = 6 (left: 4 6)\n4 * 6 = 24 (left: 24)"
    assert st.reliability[:, 0].tolist() == [1.0, 1.0, 1.0]
    assert side["episode"].tolist() == [0, 0, 0] and side["canon"].all()


def test_failed_or_invalid_trajectories_are_not_admitted():
    hooks = ToEHooks()
    bad = ("13 - 9 = 4 (left: 4 4 10)", "10 - 4 = 6 (left: 4 6)", "4 * 6 = 25 (left: 25)", "Answer: x = 24")
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION, success=False), _trace(1, (4, 9, 10, 13), bad)])
    assert len(hooks.exp) == 0 and hooks.store.n_nodes == 1
    assert not verified_suffix((F(4), F(6)), ["4 * 6 = 25 (left: 25)"])
    assert not verified_suffix((F(4), F(6)), ["4 + 6 = 10 (left: 10)"])  # legal but misses 24
    assert verified_suffix((F(4), F(6)), ["6 * 4 = 24 (left: 24)"])


def test_equivalent_states_consolidate():
    hooks = ToEHooks()
    # two puzzles whose trajectories both pass through state "4 6"
    sol_b = ("2 * 2 = 4 (left: 3 3 4)", "3 + 3 = 6 (left: 4 6)", "4 * 6 = 24 (left: 24)",
             "Answer: (2 * 2) * (3 + 3) = 24")
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION), _trace(1, (2, 2, 3, 3), sol_b)])
    states = _states(hooks)
    assert states.count("4 6") == 1 and len(states) == 5
    assert hooks.exp.side["episode"][states.index("4 6")] == 0  # the first admitted suffix is kept
    # the second trajectory's path still runs through its own "3 3 4" node to the shared state's key
    assert len(hooks.store.nodes_with_key(state_key((4, 6)) & (2**64 - 1))) == 1
    assert hooks.store.path_texts(4) == ["2 2 3 3", "3 3 4"]


def test_exact_and_overlap_retrieval():
    hooks = ToEHooks(ToEConfig(mode="supply"))
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    reader = hooks.reader(hooks.snapshot())
    (ret,) = reader.retrieve([_query((6, 4), PHASE_VALUE)], None)
    assert ret.continuations == (("4 * 6 = 24 (left: 24)",),) and ret.continuation_ids == (2,)
    assert ret.value == 60.0 and ret.experience_ids == (2,)
    (none,) = reader.retrieve([_query((5, 7))], None)
    assert none.continuations == () and none.value is None
    # overlap: a stored state differing in one number; its suffix replayed on the query must verify
    hooks2 = ToEHooks()
    _admit(hooks2, (0, 5, 24), "0 * 5 = 0 (left: 0 24)\n24 + 0 = 24 (left: 24)")
    _admit(hooks2, (3, 5, 8), "5 - 3 = 2 (left: 2 8)\n2 * 8 = 16 (left: 16)")  # (not a real solution)
    r2 = hooks2.reader(hooks2.snapshot())
    (ov,) = r2.retrieve([_query((0, 7, 24))], None)
    assert ov.continuations == (("0 * 7 = 0 (left: 0 24)", "24 + 0 = 24 (left: 24)"),)
    assert ov.experience_ids == (0,)
    (rej,) = r2.retrieve([_query((3, 5, 9))], None)  # overlapping, replay misses 24 -> not offered
    assert rej.continuations == () and rej.experience_ids == (1,)
    guide = ToEHooks(ToEConfig(mode="guide"))
    guide.exp = hooks.exp
    (g,) = guide.reader(guide.snapshot()).retrieve([_query((4, 6))], None)
    assert g.continuations == () and "4 * 6 = 24" in g.experience


def test_reinstantiate():
    lines = ["0 * 5 = 0 (left: 0 24)", "24 + 0 = 24 (left: 24)"]
    assert reinstantiate([0, 5, 24], lines, [0, 24, 11]) == ("0 * 11 = 0 (left: 0 24)", "24 + 0 = 24 (left: 24)")
    assert reinstantiate([2, 3], ["3 / 2 = 3/2 (left: 3/2)"], [0, 3]) is None  # division by zero
    assert reinstantiate([1, 2, 3], lines, [1, 2]) is None


def test_toe_reuses_stored_continuation_in_search():
    """After learning a puzzle, ToT+ToE solves a puzzle through a stored state without those calls."""
    method = make_toe_method(toe_config=ToEConfig(mode="supply"))
    _learn(method.hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    llm = Scripted()
    ep = Episode(5, PuzzleTask((4, 9, 10, 13)), seed=3)
    (res,) = method.run_episodes(method.snapshot(), [ep], llm)
    assert llm.batches == []  # exact match at the root supplies the whole verified continuation
    assert res.record["success_any"] and res.record["by_experience"]
    assert res.updates["hit"].tolist() == [0] and 0 in res.updates["recall"].tolist()
    assert res.record["used_ids"] == [0] and 0 in res.record["retrieved_ids"]
    method.apply([res])
    st = method.hooks.store
    assert st.hit[0] == 1 and st.recall[0] >= 1
    assert (st.hit <= st.recall).all()
    # a different puzzle reaching the stored state "4 4 10" after one LLM step is completed there
    llm2 = Scripted()
    ep2 = Episode(6, PuzzleTask((4, 9, 10, 13)), seed=4)
    method2 = make_toe_method(toe_config=ToEConfig(mode="supply"))
    _admit(method2.hooks, (4, 4, 10), "10 - 4 = 6 (left: 4 6)\n4 * 6 = 24 (left: 24)")
    (r2,) = method2.run_episodes(method2.snapshot(), [ep2], llm2)
    assert r2.record["success_any"] and r2.record["by_experience"]
    assert r2.record["calls"] == 1  # one propose call, then the candidate "4 4 10" is completed from experience


def test_guide_mode_values_known_states_without_calls():
    plain = make_toe_method(toe_config=ToEConfig(mode="guide"))
    llm0 = Scripted()
    (r0,) = plain.run_episodes(plain.snapshot(), [Episode(0, PuzzleTask((4, 9, 10, 13)), seed=1)], llm0)
    method = make_toe_method(toe_config=ToEConfig(mode="guide"))
    _learn(method.hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    llm = Scripted()
    (r1,) = method.run_episodes(method.snapshot(), [Episode(1, PuzzleTask((4, 9, 10, 13)), seed=1)], llm)
    assert r1.record["calls"] < r0.record["calls"]
    assert not r1.record["by_experience"]
    assert any("A verified way to finish" in r.prompt for b in llm.batches for r in b)


def test_persistence_roundtrip_and_errors(tmp_path):
    hooks = ToEHooks()
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    hooks.store.record_recall([1, 1])
    hooks.store.record_hit([1])
    hooks.save_state(tmp_path)
    other = ToEHooks()
    other.load_state(tmp_path)
    for k, v in hooks.exp.side.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(other.exp.side[k]))
    for name in ("reliability", "recall", "hit", "paths"):
        np.testing.assert_array_equal(getattr(hooks.store, name), getattr(other.store, name))
    assert other.exp.lookup(state_key((4, 6)), (F(4), F(6))) == 2  # the consolidation index is rebuilt
    with pytest.raises(PersistenceError, match="does not exist"):
        ToEStore.load(tmp_path / "nope")
    ExperienceStore(horizons=("g24",)).save(tmp_path / "plain")  # a store checkpoint without the side file
    with pytest.raises(PersistenceError, match="lacks game24_toe_side.parquet"):
        ToEStore.load(tmp_path / "plain")


def test_config_errors():
    with pytest.raises(ConfigError, match="toe.mode must be"):
        ToEConfig(mode="copy")
    with pytest.raises(ConfigError, match="overlap_top_k"):
        ToEConfig(overlap_top_k=0)


def test_store_binary_update_matches_eq_a4_reference():
    hooks = ToEHooks()
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    st = hooks.store
    before = st.reliability[:, 0].copy()
    st.update([0, 1, 2], [0.0, 1.0, 1.0], rule="binary", horizon=0)
    assert st.reliability[:, 0].tolist() == update_q_binary(before, np.array([0.0, 1.0, 1.0])).tolist()
    # a state whose Q dropped to 0 is no longer retrieved; re-admission (r = 1) restores Q = 1 (eq. (A5))
    (ret,) = hooks.reader(hooks.snapshot()).retrieve([_query((4, 9, 10, 13))], None)
    assert ret.experience_ids == ()
    _learn(hooks, [_trace(1, (4, 9, 10, 13), SOLUTION)])
    assert st.reliability[:, 0].tolist() == [1.0, 1.0, 1.0] and st.n_experiences == 3


def test_counters_after_a_run_and_read_only_snapshot():
    """After a round: recall counts every retrieval, hit <= recall, Q binary; the snapshot is read-only."""
    method = make_toe_method(toe_config=ToEConfig(mode="supply"))
    _learn(method.hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    snap = method.snapshot()
    eps = [Episode(i, PuzzleTask((4, 9, 10, 13)), seed=i) for i in (5, 6, 7)]
    results = method.run_episodes(snap, eps, Scripted())
    assert all(r.record["used_ids"] == [0] for r in results)
    method.apply(results)
    st = method.hooks.store
    assert st.hit.tolist()[0] == 3 and st.recall[0] >= 3
    assert (st.hit <= st.recall).all() and set(st.reliability[:, 0].tolist()) <= {0.0, 1.0}
    # the snapshot the episodes read did not change, and cannot be written
    view = ExperienceStore.from_snapshot(snap)
    assert isinstance(view, StoreView) and not hasattr(view, "update")
    assert view.hit.tolist() == [0, 0, 0] and view.recall.tolist() == [0, 0, 0]
    for name, arr in snap.items():
        assert not arr.flags.writeable, name
    with pytest.raises(ValueError, match="read-only"):
        snap["toe_suffix"][0] = "x"


def test_hits_are_limited_to_recalled_experiences():
    hooks = ToEHooks()
    _learn(hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    reader = hooks.reader(hooks.snapshot())
    (upd,) = reader.observe([_trace(1, (4, 9, 10, 13), SOLUTION, retrieved=(1, 1, 2), used=(2,))], None)
    assert upd["recall"].tolist() == [1, 1, 2] and upd["hit"].tolist() == [1, 2]  # 0 on path but not recalled
    hooks.apply([(1, upd)])
    assert hooks.store.recall.tolist() == [0, 2, 1] and hooks.store.hit.tolist() == [0, 1, 1]


def test_precomputed_tree_seeds_the_store(tmp_path):
    from engine.game24.precompute import precompute, write_tables

    write_tables(precompute([(4, 9, 10, 13), (1, 1, 4, 6)]), tmp_path / "pre")
    cfg = ToEConfig(mode="supply", precomputed=str(tmp_path / "pre"))
    method = make_toe_method(toe_config=cfg)
    st = method.hooks.store
    assert st.n_experiences > 10 and set(st.reliability[:, 0].tolist()) == {1.0}
    canon = method.hooks.exp.side["canon"]
    assert 0 < canon.sum() <= st.n_experiences  # a state reached from several parents has one canonical eid
    llm = Scripted()
    (res,) = method.run_episodes(method.snapshot(), [Episode(0, PuzzleTask((4, 9, 10, 13)), seed=1)], llm)
    assert llm.batches == [] and res.record["success_any"] and res.record["by_experience"]
    (used,) = res.record["used_ids"]
    assert canon[used] and method.hooks.exp.side["episode"][used] == -1  # precomputed offline
    # learning on top of the seeded store adds nothing for known states
    n = st.n_experiences
    method.apply([res])
    assert st.n_experiences == n and st.hit[used] == 1
    with pytest.raises(PersistenceError, match="not a Game-of-24 precompute directory"):
        make_toe_method(toe_config=ToEConfig(precomputed=str(tmp_path / "missing")))
    with pytest.raises(ConfigError, match="toe.precomputed must be"):
        ToEConfig(precomputed=3)


def test_snapshot_views_equal_the_snapshot_and_share_its_memory():
    """``snapshot_views`` (what Ray's store owner serializes): the same arrays as ``snapshot``, no copy made."""
    method = make_toe_method(toe_config=ToEConfig(mode="supply"))
    _learn(method.hooks, [_trace(0, (4, 9, 10, 13), SOLUTION)])
    snap, views = method.snapshot(), method.snapshot_views()
    assert snap.keys() == views.keys()
    for k in snap:
        same = np.array_equal(snap[k], views[k], equal_nan=snap[k].dtype.kind == "f")
        assert same and not views[k].flags.writeable, k
    block = method.hooks.store._block  # the reliability/counter block the updates write in place
    assert np.shares_memory(views["block"], block) and not np.shares_memory(snap["block"], block)
