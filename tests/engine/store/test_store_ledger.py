"""Delayed feedback (ToE eq. (7)): each pending update applies exactly once, across restarts."""

import numpy as np
import pytest

from engine.errors import InputError, StoreError
from engine.store import APPLIED, PENDING, ExperienceStore


@pytest.fixture
def store():
    st = ExperienceStore()
    st.add_paths([["a", "b", "c"], ["a", "b", "d"], ["e", "f", "g"]])
    return st


def test_defer_due_resolve(store):
    ids = store.defer([10, 10, 11], [0, 1, 2], ["h10", "h20", 2], [3, 5, 5], [0.5, -1.0, 0.2])
    np.testing.assert_array_equal(ids, [0, 1, 2])
    np.testing.assert_array_equal(store.ledger.due(2), [])
    np.testing.assert_array_equal(store.ledger.due(4), [0])
    store.resolve(store.ledger.due(4), outcomes=[0.02])  # r = a * o = 0.01
    assert store.reliability[0, 0] == pytest.approx(1 + 10 * 0.01)
    assert store.reliability[0, 1] == 1.0
    np.testing.assert_array_equal(store.ledger.column("status"), [APPLIED, PENDING, PENDING])
    assert store.ledger.column("reward")[0] == pytest.approx(0.01)
    assert store.ledger.n_pending == 2
    store.resolve(store.ledger.due(5), rewards=[0.01, -0.01])
    assert store.reliability[1, 1] == pytest.approx(1.1)
    assert store.reliability[2, 2] == pytest.approx(0.9)
    assert store.ledger.n_pending == 0


def test_resolving_twice_is_refused(store):
    store.defer(1, [0], [0], 1, 1.0)
    store.resolve([0], outcomes=[0.01])
    q = store.reliability.copy()
    with pytest.raises(StoreError, match="already applied; each update applies once"):
        store.resolve([0], outcomes=[0.01])
    np.testing.assert_array_equal(store.reliability, q)


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda s: s.resolve([5], outcomes=[0.1]), StoreError, "unknown ledger entry 5"),
        (lambda s: s.resolve([0, 0], outcomes=[0.1, 0.1]), InputError, "must not repeat"),
        (lambda s: s.resolve([0], outcomes=[np.nan]), InputError, "outcomes must be finite"),
        (lambda s: s.resolve([0], outcomes=[0.1], rewards=[0.1]), InputError, "exactly one of outcomes"),
        (lambda s: s.resolve([0, 1], outcomes=[0.1]), InputError, r"outcomes must have shape \[2\]"),
        (lambda s: s.defer([1], [9], [0], [1], [1.0]), StoreError, "unknown eid 9"),
        (lambda s: s.defer([1], [0], [4], [1], [1.0]), InputError, "horizons index 4"),
        (lambda s: s.defer([1], [0], [0], [1], [np.inf]), InputError, "actions must be finite"),
        (lambda s: s.defer([1, 1], [0, 0], [0, 0], [1, 1], [1.0, 1.0]), InputError, "appears twice in the batch"),
        (lambda s: s.defer([7], [0], [0], [2], [1.0]), InputError, "already exists with a different due"),
    ],
)
def test_bad_ledger_input_changes_nothing(store, call, err, match):
    store.defer([7, 8], [0, 1], [0, 0], [1, 1], [1.0, 1.0])
    q = store.reliability.copy()
    cols = {k: v.copy() for k, v in store.ledger.columns().items()}
    with pytest.raises(err, match=match):
        call(store)
    np.testing.assert_array_equal(store.reliability, q)
    for k, v in store.ledger.columns().items():
        np.testing.assert_array_equal(v, cols[k])


def test_identical_re_add_is_idempotent(store):
    store.defer([7, 8], [0, 1], [0, 0], [1, 1], [1.0, 1.0])
    ids = store.defer([8, 9], [1, 2], [0, 0], [1, 1], [1.0, 1.0])  # 8 is a replay
    np.testing.assert_array_equal(ids, [1, 2])
    assert len(store.ledger) == 3


def test_exactly_once_across_restart(tmp_path, store):
    """Crash after resolving but before saving, and after saving: nothing lost, nothing doubled."""
    store.defer(np.arange(6), [0, 1, 2, 0, 1, 2], [0, 1, 2, 2, 1, 0], [1, 1, 2, 2, 3, 3], np.linspace(-1, 1, 6))
    store.save(tmp_path)  # checkpoint A: six pending

    outcomes = {1: [0.02, 0.03], 2: [0.01, -0.02], 3: [0.05, 0.04]}

    def step(st, now):
        due = st.ledger.due(now)
        st.resolve(due, outcomes=outcomes[now][: len(due)])

    # reference run without any crash
    ref = ExperienceStore.load(tmp_path)
    for now in (1, 2, 3):
        step(ref, now)

    # run 1: resolve step 1, save, resolve step 2, "crash" (no save)
    st = ExperienceStore.load(tmp_path)
    step(st, 1)
    st.save(tmp_path)
    step(st, 2)
    del st
    # restart from the last checkpoint: step 1 is applied, step 2 still pending
    st = ExperienceStore.load(tmp_path)
    np.testing.assert_array_equal(st.ledger.due(1), [])
    np.testing.assert_array_equal(st.ledger.due(2), [2, 3])
    step(st, 2)
    step(st, 3)
    st.save(tmp_path)
    st = ExperienceStore.load(tmp_path)
    assert st.ledger.n_pending == 0
    np.testing.assert_allclose(st.reliability, ref.reliability, rtol=0, atol=0)
    np.testing.assert_array_equal(st.ledger.column("reward"), ref.ledger.column("reward"))
    # a replayed defer after the restart does not resurrect an applied entry
    st.defer([0], [0], [0], [1], [-1.0])
    assert st.ledger.n_pending == 0


def test_index_finds_every_entry_after_growth_and_reload():
    """The compiled hash index: thousands of entries added over many batches (the table is
    rebuilt as it grows), re-adds return the existing ids, a key that differs in one field
    is new, and a ledger rebuilt from its columns finds the same entries."""
    from engine.store.ledger import FeedbackLedger

    rng = np.random.default_rng(0)
    led = FeedbackLedger()
    keys = np.unique(rng.integers(0, 400, size=(6000, 3)), axis=0)  # (episode, eid, horizon), distinct
    ids = []
    for part in np.array_split(keys, 40):
        ids.append(led.add(part[:, 0], part[:, 1], part[:, 2], part[:, 0] + 1, 0.5))
    ids = np.concatenate(ids)
    np.testing.assert_array_equal(ids, np.arange(len(keys)))
    pick = rng.choice(len(keys), 500, replace=False)
    again = led.add(keys[pick, 0], keys[pick, 1], keys[pick, 2], keys[pick, 0] + 1, 0.5)
    np.testing.assert_array_equal(again, pick)
    assert len(led) == len(keys)
    rebuilt = FeedbackLedger.from_columns(led.columns())
    np.testing.assert_array_equal(rebuilt._find(keys[:, 0], keys[:, 1], keys[:, 2]), np.arange(len(keys)))
    absent = keys[:50].copy()
    absent[:, 2] += 1000  # same episode and eid, another horizon
    np.testing.assert_array_equal(rebuilt._find(absent[:, 0], absent[:, 1], absent[:, 2]), -1)
