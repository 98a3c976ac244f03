"""Information coefficients of FinEvolveBench (ToE eqs. (A7)-(A10)) and the cold-start split.

``s f8[N, T, H]`` are predicted sentiments, ``alpha f8[N, T, H]`` forward excess
returns; NaN marks "no prediction" or "return unknown" and is left out pairwise.
Correlations are Pearson's. A day (csIC) or an industry (tsIC) with fewer than
``min_obs`` pairs or a constant side has no IC and is left out of the mean.
"""

from __future__ import annotations

import numpy as np

from engine.errors import InputError


def cold_start_split(n_days: int) -> int:
    """Index of the first Exploitation day: the first ``floor(T / 3)`` days are Cold-Start."""
    if n_days < 0:
        raise InputError(f"n_days must be >= 0, got {n_days}")
    return n_days // 3


def _corr(x: np.ndarray, y: np.ndarray, min_obs: int) -> float:
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < min_obs:
        return np.nan
    x, y = x[ok], y[ok]
    xc, yc = x - x.mean(), y - y.mean()
    den = np.sqrt((xc * xc).sum() * (yc * yc).sum())
    if den <= 1e-15 * max(1.0, len(x)):
        return np.nan
    return float((xc * yc).sum() / den)


def _check(s: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(s, dtype=np.float64)
    alpha = np.asarray(alpha, dtype=np.float64)
    if s.shape != alpha.shape or s.ndim != 3:
        raise InputError(f"predictions and returns must both be [N, T, H], got {s.shape} and {alpha.shape}")
    return s, alpha


def cs_ic_series(s: np.ndarray, alpha: np.ndarray, min_obs: int = 3) -> np.ndarray:
    """``csIC_{t,h}`` (eq. A7): correlation across industries on each day; ``f8[T, H]``."""
    s, alpha = _check(s, alpha)
    _, t, h = s.shape
    out = np.full((t, h), np.nan)
    for d in range(t):
        for k in range(h):
            out[d, k] = _corr(s[:, d, k], alpha[:, d, k], min_obs)
    return out


def ts_ic_series(s: np.ndarray, alpha: np.ndarray, min_obs: int = 3) -> np.ndarray:
    """``tsIC_{i,h}`` (eq. A9): correlation across days for each industry; ``f8[N, H]``."""
    s, alpha = _check(s, alpha)
    n, _, h = s.shape
    out = np.full((n, h), np.nan)
    for i in range(n):
        for k in range(h):
            out[i, k] = _corr(s[i, :, k], alpha[i, :, k], min_obs)
    return out


def _nanmean(x: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x)
    cnt = ok.sum(axis=0)
    tot = np.where(ok, x, 0.0).sum(axis=0)
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def cs_ic(s: np.ndarray, alpha: np.ndarray, min_obs: int = 3) -> np.ndarray:
    """``csIC_h`` (eq. A8): mean over days of ``csIC_{t,h}``; ``f8[H]``."""
    return _nanmean(cs_ic_series(s, alpha, min_obs))


def ts_ic(s: np.ndarray, alpha: np.ndarray, min_obs: int = 3) -> np.ndarray:
    """``tsIC_h`` (eq. A10): mean over industries of ``tsIC_{i,h}``; ``f8[H]``."""
    return _nanmean(ts_ic_series(s, alpha, min_obs))


def period_ics(s: np.ndarray, alpha: np.ndarray, min_obs: int = 3,
               split: int | None = None) -> dict[str, dict[str, np.ndarray]]:
    """tsIC and csIC per horizon over ``Overall`` (all T days) and ``Exploitation`` (days ``split..``;
    default: after the first third)."""
    s, alpha = _check(s, alpha)
    split = cold_start_split(s.shape[1]) if split is None else int(split)
    out = {}
    for period, sl in (("Overall", slice(0, None)), ("Exploitation", slice(split, None))):
        out[period] = {"tsIC": ts_ic(s[:, sl], alpha[:, sl], min_obs), "csIC": cs_ic(s[:, sl], alpha[:, sl], min_obs)}
    return out


def rolling_ts_ic(s: np.ndarray, alpha: np.ndarray, window: int = 60, min_obs: int = 10) -> np.ndarray:
    """tsIC over a trailing window of ``window`` days ending at each day; ``f8[T, H]`` (for plots)."""
    s, alpha = _check(s, alpha)
    _, t, h = s.shape
    out = np.full((t, h), np.nan)
    for d in range(t):
        lo = max(0, d - window + 1)
        out[d] = ts_ic(s[:, lo:d + 1], alpha[:, lo:d + 1], min_obs)
    return out


def rankdata(x: np.ndarray) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of ``x f8[n]``."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size, dtype=np.float64)
    xs = x[order]
    i = 0
    while i < x.size:
        j = i
        while j + 1 < x.size and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j) + 1.0
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation of two ``f8[n]`` vectors (NaN pairs dropped; NaN if undefined)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return np.nan
    return _corr(rankdata(x[ok]), rankdata(y[ok]), 3)
