"""Reliability kernels against plain-Python references (ToE eqs. (9)/(A6), (A3)-(A5), (10))."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.store.columns import aligned_empty, block_width
from kernels import reliability as KR

LUT = KR.inv_log_lut(64)  # small table so both the table and the math.log path run


def make_block(q, hit):
    n, h = q.shape
    blk = aligned_empty(n, block_width(h))
    blk[:] = 0.0
    blk[:, :h] = q
    blk[:, h] = hit
    blk[:, h + 1] = hit + 5
    return blk


# --- plain-Python references: one update at a time, straight from the paper -------------------
def ref_formula(q, hit, eids, rewards, eta, q0, q_min, q_max):
    q = [list(map(float, row)) for row in q]
    for e, r in zip(eids, rewards):
        for j in range(len(r)):
            x = q[e][j] + eta * (1 - ((q[e][j] - q0) / q0) ** 2) / (1 + math.log(1 + hit[e])) * r[j]
            q[e][j] = min(max(x, q_min), q_max)
    return np.array(q).reshape(len(q), -1)


def ref_asymmetric(q, eids, rewards, eta_task, q_min, q_max):
    q = [list(map(float, row)) for row in q]
    for e, r in zip(eids, rewards):
        for j in range(len(r)):
            x = r[j] if r[j] > 0 else (1 - eta_task) * q[e][j] + eta_task * r[j]
            q[e][j] = min(max(x, q_min), q_max)
    return np.array(q).reshape(len(q), -1)


def ref_delta(q, eids, deltas, q_min, q_max):
    q = [list(map(float, row)) for row in q]
    for e, d in zip(eids, deltas):
        for j in range(len(d)):
            q[e][j] = min(max(q[e][j] + d[j], q_min), q_max)
    return np.array(q).reshape(len(q), -1)


@st.composite
def batches(draw, max_rows=12, max_b=120):
    n = draw(st.integers(1, max_rows))
    h = draw(st.integers(1, 7))  # 7 horizons -> a 16-wide block
    b = draw(st.integers(0, max_b))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    q = rng.uniform(0.0, 2.0, (n, h))
    hit = rng.integers(0, 200, n).astype(np.float64)  # crosses the 64-entry table
    eids = rng.integers(0, min(n, draw(st.integers(1, n))), b)  # few rows -> many repeats
    rewards = rng.normal(0.0, draw(st.sampled_from([0.01, 0.1, 1.0])), (b, h))
    return q, hit, eids.astype(np.int64), rewards


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from([1.0, 10.0]), st.sampled_from([1.0, 0.5]))
def test_formula_matches_reference(batch, eta, q0):
    q, hit, eids, r = batch
    q = q * q0
    blk = make_block(q, hit)
    KR.formula_update(blk, eids, KR.ALL_HORIZONS, r, r.shape[1], eta, q0, 0.0, 2 * q0, LUT)
    want = ref_formula(q, hit, eids, r, eta, q0, 0.0, 2 * q0)
    np.testing.assert_allclose(blk[:, : q.shape[1]], want, rtol=1e-12, atol=1e-12)
    assert (blk[:, : q.shape[1]] >= 0).all() and (blk[:, : q.shape[1]] <= 2 * q0).all()
    np.testing.assert_array_equal(blk[:, q.shape[1]], hit)  # hit untouched


@settings(max_examples=40, deadline=None)
@given(batches())
def test_formula_single_horizon_matches_reference(batch):
    q, hit, eids, r = batch
    rng = np.random.default_rng(len(eids))
    hcols = rng.integers(0, q.shape[1], len(eids)).astype(np.int64)
    blk = make_block(q, hit)
    KR.formula_update(blk, eids, hcols, r[:, :1].copy(), q.shape[1], 10.0, 1.0, 0.0, 2.0, LUT)
    full = np.zeros_like(r)
    want = q.copy()
    for i, (e, hc) in enumerate(zip(eids, hcols)):  # one at a time through the full-vector reference
        full = np.zeros((1, q.shape[1]))
        full[0, hc] = r[i, 0]
        want = ref_formula(want, hit, [e], full, 10.0, 1.0, 0.0, 2.0)
    np.testing.assert_allclose(blk[:, : q.shape[1]], want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.3, 1.0]))
def test_asymmetric_matches_reference(batch, eta_task):
    q, hit, eids, r = batch
    r = np.round(r)  # mix of successes (>0), zeros and penalties
    blk = make_block(q, hit)
    KR.asymmetric_update(blk, eids, KR.ALL_HORIZONS, r, eta_task, 0.0, 2.0)
    np.testing.assert_allclose(blk[:, : q.shape[1]], ref_asymmetric(q, eids, r, eta_task, 0.0, 2.0), rtol=1e-12, atol=1e-12)
    hcols = (eids % q.shape[1]).astype(np.int64)
    blk2 = make_block(q, hit)
    KR.asymmetric_update(blk2, eids, hcols, r[:, :1].copy(), eta_task, 0.0, 2.0)
    want = q.copy()
    for i, (e, hc) in enumerate(zip(eids, hcols)):
        x = r[i, 0] if r[i, 0] > 0 else (1 - eta_task) * want[e, hc] + eta_task * r[i, 0]
        want[e, hc] = min(max(x, 0.0), 2.0)
    np.testing.assert_allclose(blk2[:, : q.shape[1]], want, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(batches())
def test_delta_matches_reference(batch):
    q, hit, eids, r = batch
    blk = make_block(q, hit)
    KR.delta_update(blk, eids, KR.ALL_HORIZONS, r, 0.0, 2.0)
    np.testing.assert_allclose(blk[:, : q.shape[1]], ref_delta(q, eids, r, 0.0, 2.0), rtol=1e-12, atol=1e-12)
    blk2 = make_block(q, hit)
    hcols = np.zeros(len(eids), dtype=np.int64)
    KR.delta_update(blk2, eids, hcols, r[:, :1].copy(), 0.0, 2.0)
    want = q.copy()
    for i, e in enumerate(eids):
        want[e, 0] = min(max(want[e, 0] + r[i, 0], 0.0), 2.0)
    np.testing.assert_allclose(blk2[:, : q.shape[1]], want, rtol=1e-12, atol=1e-12)


def test_binary_is_asymmetric_with_eta_one():
    # ToE eqs. (A4)/(A5): Q_new = r in {0, 1}
    q = np.array([[0.3, 1.7], [1.0, 0.0]])
    blk = make_block(q, np.zeros(2))
    KR.asymmetric_update(blk, np.array([0, 1, 0]), KR.ALL_HORIZONS, np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), 1.0,
                         0.0, 2.0)
    np.testing.assert_array_equal(blk[:, :2], [[0.0, 1.0], [0.0, 1.0]])


@pytest.mark.parametrize("n", [0, 1, 5])
def test_empty_and_tiny_batches(n):
    q = np.ones((max(n, 1), 3))
    blk = make_block(q, np.zeros(len(q)))
    eids = np.zeros(n, dtype=np.int64)
    KR.formula_update(blk, eids, KR.ALL_HORIZONS, np.full((n, 3), 0.01), 3, 10.0, 1.0, 0.0, 2.0, LUT)
    want = ref_formula(q, np.zeros(len(q)), eids, np.full((n, 3), 0.01), 10.0, 1.0, 0.0, 2.0)
    np.testing.assert_allclose(blk[:, :3], want, rtol=1e-12)


def test_repeats_differ_from_add_at():
    """The formula is not additive: np.add.at of per-update deltas would be wrong."""
    q = np.ones((1, 1))
    blk = make_block(q, np.zeros(1))
    KR.formula_update(blk, np.array([0, 0]), KR.ALL_HORIZONS, np.array([[0.05], [0.05]]), 1, 10.0, 1.0, 0.0, 2.0, LUT)
    one_at_a_time = ref_formula(q, [0], [0, 0], [[0.05], [0.05]], 10.0, 1.0, 0.0, 2.0)
    add_at = 1.0 + 2 * 10.0 * 0.05  # both deltas computed from the old Q
    assert blk[0, 0] == pytest.approx(one_at_a_time[0, 0], rel=1e-12)
    assert blk[0, 0] != pytest.approx(add_at)


def test_bounds_hold_under_extreme_rewards():
    rng = np.random.default_rng(3)
    q = rng.uniform(0, 2, (50, 3))
    blk = make_block(q, rng.integers(0, 5, 50).astype(float))
    eids = rng.integers(0, 50, 5000)
    KR.formula_update(blk, eids, KR.ALL_HORIZONS, rng.normal(0, 100.0, (5000, 3)), 3, 10.0, 1.0, 0.0, 2.0, LUT)
    assert blk[:, :3].min() >= 0.0 and blk[:, :3].max() <= 2.0
    KR.delta_update(blk, eids, KR.ALL_HORIZONS, rng.normal(0, 100.0, (5000, 3)), 0.25, 1.5)
    assert blk[:, :3].min() >= 0.25 and blk[:, :3].max() <= 1.5


def test_lut_matches_formula():
    lut = KR.inv_log_lut(1000)
    want = np.array([1 / (1 + math.log(1 + n)) for n in range(1000)])
    np.testing.assert_allclose(lut, want, rtol=1e-15)


def test_add_counts_and_scatter_add():
    blk = make_block(np.ones((3, 2)), np.zeros(3))
    KR.add_counts(blk, np.array([0, 2, 0]), 2, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(blk[:, 2], [4.0, 0.0, 2.0])
    KR.scatter_add(blk, np.array([1, 1]), np.array([[0.5, 0.5], [0.5, 0.5]]))
    np.testing.assert_array_equal(blk[1, :2], [2.0, 2.0])


def test_prefetch_variant_equals_plain_scatter_add():
    from kernels.prefetch import HAVE_PREFETCH

    rng = np.random.default_rng(9)
    a = make_block(np.ones((100, 3)), np.zeros(100))
    b = a.copy()
    eids = rng.integers(0, 100, 500)
    vals = rng.normal(size=(500, 3))
    KR.scatter_add(a, eids, vals)
    KR.scatter_add_prefetch(b, eids, vals)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    assert isinstance(HAVE_PREFETCH, bool)
