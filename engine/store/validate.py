"""Boundary checks for store inputs: done once, before any kernel runs.

Each function returns a C-contiguous array of the kernel's dtype or raises
:class:`InputError` / :class:`StoreError` naming the argument, what was
expected and what came. Nothing is modified before every check has passed.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.errors import InputError, StoreError
from kernels.reliability import first_bad_eid, first_non_finite

_I8 = np.dtype(np.int64)


def _as_array(value, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise InputError(f"{name} must be an array, got {type(value).__name__}: {exc}") from exc
    return arr


def int_array(value, name: str, ndim: int = 1) -> np.ndarray:
    """Integer array of ``ndim`` dimensions as C-contiguous int64 (bool and floats refused)."""
    if type(value) is np.ndarray and value.dtype == _I8 and value.ndim == ndim and value.flags.c_contiguous:
        return value  # already what the kernels take
    arr = _as_array(value, name)
    if arr.ndim != ndim:
        raise InputError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.size == 0 and arr.dtype.kind not in "iu":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name} must have an integer dtype, got {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise InputError(f"{name} has values above the int64 range")
    return np.ascontiguousarray(arr, dtype=np.int64)


def float_array(value, name: str, shape: tuple[int | None, ...]) -> np.ndarray:
    """Finite real array with the given shape (None = any) as C-contiguous float64."""
    arr = _as_array(value, name)
    if arr.size == 0 and arr.dtype.kind not in "iuf":
        arr = arr.astype(np.float64)
    if arr.dtype.kind not in "iuf":
        raise InputError(f"{name} must have a real (integer or float) dtype, got {arr.dtype}")
    if arr.ndim != len(shape) or any(s is not None and s != a for s, a in zip(shape, arr.shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise InputError(f"{name} must have shape {want}, got {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    # one compiled pass over the exponent bits, no temporary; the first inf or nan is named
    i = first_non_finite(arr.reshape(-1).view(np.int64)) if arr.size else -1
    if i >= 0:
        bad = np.unravel_index(i, arr.shape)
        raise InputError(f"{name} must be finite, got {arr[bad]} at index {tuple(int(b) for b in bad)}")
    return arr


def within(arr: np.ndarray, n: int) -> bool:
    """Whether every value of a non-empty int array lies in ``[0, n)`` (small arrays: as Python ints, cheaper)."""
    if arr.size <= 256:
        vals = arr.ravel().tolist()
        return min(vals) >= 0 and max(vals) < n
    return bool(arr.min() >= 0 and arr.max() < n)


def sums_by_id(ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct ids ascending, sum of weights per id)``, as ``np.unique`` + ``np.bincount`` give them
    (small arrays summed in a dict: the same values, without numpy's per-call cost)."""
    if ids.size > 256:
        uniq, inv = np.unique(ids, return_inverse=True)
        return uniq, np.bincount(inv, weights=weights, minlength=uniq.size)
    acc: dict[int, float] = {}
    for e, w in zip(ids.tolist(), weights.tolist()):
        acc[e] = acc.get(e, 0.0) + w
    keys = sorted(acc)
    return np.array(keys, dtype=np.int64), np.array([acc[k] for k in keys], dtype=np.float64)


def all_distinct(ids: np.ndarray) -> bool:
    """Whether no value of a 1-D int array repeats."""
    if ids.size > 256:
        return np.unique(ids).shape[0] == ids.shape[0]
    return len(set(ids.tolist())) == ids.shape[0]


def eids_in_range(eids: np.ndarray, n_exp: int, name: str = "eids") -> None:
    """Raise :class:`StoreError` naming the first eid of ``eids`` (int64, 1-D) outside ``[0, n_exp)``."""
    first = int(first_bad_eid(eids, n_exp)) if eids.size else -1  # one compiled pass (min and max: two)
    if first < 0:
        return
    raise StoreError(
        f"unknown eid {int(eids[first])} at position {first} of {name}; "
        f"the store has {n_exp} experiences (eids 0..{n_exp - 1})"
    )


def horizon_index(horizon, horizons: Sequence[str], name: str = "horizon") -> int:
    """Index of ``horizon`` given as an index or a name (``"h10"``, ``10``-> ``"h10"`` if named)."""
    if isinstance(horizon, str):
        if horizon in horizons:
            return horizons.index(horizon)
        raise InputError(f"{name} {horizon!r} is not one of the store's horizons {list(horizons)}")
    if isinstance(horizon, (bool, np.bool_)) or not isinstance(horizon, (int, np.integer)):
        raise InputError(f"{name} must be an index or a horizon name, got {horizon!r}")
    if not 0 <= int(horizon) < len(horizons):
        raise InputError(
            f"{name} index {int(horizon)} is out of range for {len(horizons)} horizons {list(horizons)}"
        )
    return int(horizon)


def horizon_array(value, horizons: Sequence[str], n: int, name: str = "horizon") -> np.ndarray:
    """Per-update horizon indices i8[n] from a scalar (index or name) or an integer array."""
    if np.ndim(value) == 0:
        return np.full(n, horizon_index(value.item() if hasattr(value, "item") else value, horizons, name), dtype=np.int64)
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.dtype.kind in "UO"):
        if any(isinstance(v, (str, np.str_)) for v in value):
            value = [horizon_index(str(v) if isinstance(v, np.str_) else v, horizons, name) for v in value]
    arr = int_array(value, name)
    if arr.shape[0] != n:
        raise InputError(f"{name} must have {n} entries (one per update), got {arr.shape[0]}")
    if arr.size == 0 or within(arr, len(horizons)):
        return arr
    bad = np.flatnonzero((arr < 0) | (arr >= len(horizons)))
    if bad.size:
        raise InputError(
            f"{name} index {int(arr[bad[0]])} at position {int(bad[0])} is out of range for "
            f"{len(horizons)} horizons {list(horizons)}"
        )
    return arr


def counts_array(counts, n: int, name: str = "counts") -> np.ndarray:
    if counts is None:
        return np.ones(n, dtype=np.float64)
    arr = int_array(counts, name)
    if arr.shape[0] != n:
        raise InputError(f"{name} must have {n} entries (one per eid), got {arr.shape[0]}")
    if arr.size and arr.min() < 0:
        raise InputError(f"{name} must be >= 0, got {int(arr.min())}")
    return arr.astype(np.float64)


def finite_scalar(value, name: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise InputError(f"{name} must be finite, got {v}")
    if low is not None and v < low:
        raise InputError(f"{name} must be >= {low}, got {v}")
    if high is not None and v > high:
        raise InputError(f"{name} must be <= {high}, got {v}")
    return v
