import numpy as np
import pytest
from scipy import stats

from engine.errors import InputError
from engine.finance.metrics import (
    cold_start_split, cs_ic, cs_ic_series, period_ics, rankdata, spearman, ts_ic, ts_ic_series,
)


def _pearson(x, y):
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3 or np.std(x[ok]) == 0 or np.std(y[ok]) == 0:
        return np.nan
    return stats.pearsonr(x[ok], y[ok])[0]


def test_csic_equals_scipy_reference(fixed_ic_data):
    s, alpha = fixed_ic_data
    n, t, h = s.shape
    ref = np.array([[_pearson(s[:, d, k], alpha[:, d, k]) for k in range(h)] for d in range(t)])
    np.testing.assert_allclose(cs_ic_series(s, alpha), ref, atol=1e-12, equal_nan=True)
    np.testing.assert_allclose(cs_ic(s, alpha), np.nanmean(ref, axis=0), atol=1e-12)  # eq. (A8)


def test_tsic_equals_numpy_reference(fixed_ic_data):
    s, alpha = fixed_ic_data
    n, t, h = s.shape
    ref = np.empty((n, h))
    for i in range(n):
        for k in range(h):
            ok = np.isfinite(s[i, :, k]) & np.isfinite(alpha[i, :, k])
            ref[i, k] = np.corrcoef(s[i, ok, k], alpha[i, ok, k])[0, 1]
    np.testing.assert_allclose(ts_ic_series(s, alpha), ref, atol=1e-12)
    np.testing.assert_allclose(ts_ic(s, alpha), ref.mean(axis=0), atol=1e-12)  # eq. (A10)


def test_constant_or_short_series_have_no_ic():
    s = np.ones((3, 5, 1))
    a = np.arange(15, dtype=float).reshape(3, 5, 1)
    assert np.isnan(ts_ic(s, a)).all()
    s2 = np.full((3, 2, 1), np.nan)
    assert np.isnan(cs_ic(s2, a[:, :2])).all()


@pytest.mark.parametrize("t,split", [(0, 0), (1, 0), (3, 1), (10, 3), (300, 100), (301, 100)])
def test_cold_start_is_first_third(t, split):
    assert cold_start_split(t) == split


def test_periods_use_first_third_as_cold_start(fixed_ic_data):
    s, alpha = fixed_ic_data
    split = s.shape[1] // 3
    res = period_ics(s, alpha)
    np.testing.assert_allclose(res["Exploitation"]["tsIC"], ts_ic(s[:, split:], alpha[:, split:]))
    np.testing.assert_allclose(res["Overall"]["csIC"], cs_ic(s, alpha))
    # changing a cold-start prediction leaves Exploitation unchanged
    s2 = s.copy()
    s2[:, : split] = 0.123
    np.testing.assert_allclose(period_ics(s2, alpha)["Exploitation"]["tsIC"], res["Exploitation"]["tsIC"])


def test_spearman_matches_scipy(rng):
    x = rng.integers(0, 5, size=40).astype(float)
    y = x + rng.normal(0, 2, size=40)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    np.testing.assert_allclose(rankdata(x), stats.rankdata(x))


def test_bad_shapes_raise():
    with pytest.raises(InputError, match="must both be"):
        ts_ic(np.zeros((2, 3, 1)), np.zeros((2, 3, 2)))
    with pytest.raises(InputError, match="n_days"):
        cold_start_split(-1)
