"""Reliability update kernels (ToE eqs. (8)-(10), (A3)-(A6)).

Row layout ("block"): every experience owns one row of a C-contiguous
``f8[n, W]`` array whose rows are 64-byte aligned (``W`` a multiple of 8, so a
row is one or more whole cache lines; ``W = 8`` for up to 6 horizons)::

    block[e, 0:H]   reliability Q(e) per horizon
    block[e, H]     hit count n_hit(e), stored as float64 (exact below 2**53)
    block[e, H + 1] recall count, stored as float64
    block[e, H+2:]  padding

An update reads Q and n_hit and writes Q of one row: one cache miss per
update, the same as a random scatter-add into ``Q`` alone. Two more tricks
keep the kernel at the memory limit:

* ``1 / (1 + ln(1 + n_hit))`` comes from a lookup table (``inv_log_lut``) for
  ``n_hit < len(lut)`` and from ``math.log`` above it;
* ``PREFETCH`` updates ahead, the kernel issues a software prefetch of the
  target row of a later update (:mod:`kernels.prefetch`), so the cache misses
  of several updates overlap instead of being paid one after another.

Every kernel applies its updates sequentially in batch order, so an eid that
repeats within a batch sees the result of its earlier updates, exactly as if
the updates had come one at a time (``np.add.at`` would not: the formula is
not additive). Inputs are validated by the caller (``engine.store``):
``eids`` are in range, rewards are finite, horizon columns are in range.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from kernels.prefetch import prefetch_row

PREFETCH = 32  # updates ahead whose row is prefetched before it is updated


@numba.njit(cache=True)
def inv_log_lut(size):
    """``lut f8[size]`` with ``lut[n] = 1 / (1 + ln(1 + n))``: the usage damping of ToE eq. (9)."""
    out = np.empty(size, dtype=np.float64)
    for n in range(size):
        out[n] = 1.0 / (1.0 + math.log(1.0 + n))
    return out


@numba.njit(cache=True, inline="always")
def _inv_log(n_hit, lut):
    n = int(n_hit)
    if n < lut.shape[0]:
        return lut[n]
    return 1.0 / (1.0 + math.log(1.0 + n))


@numba.njit(cache=True, inline="always")
def _clip(q, q_min, q_max):
    if q < q_min:
        return q_min
    if q > q_max:
        return q_max
    return q


# --- the rules, each written once (one reliability value in, one out); the kernels below walk whole rows
# (rewards f8[b, H]) or single horizons (hcols i8[b], rewards f8[b]) and call the same rule ---------------------

@numba.njit(cache=True, inline="always")
def _formula(q, damp, r, q0, q_min, q_max):
    """ToE eq. (9)/(A6) for one value: ``clip(q + damp (1 - ((q - q0) / q0)^2) r)``, ``damp = eta / (1 + ln(1 + n_hit))``."""
    d = (q - q0) / q0
    return _clip(q + damp * (1.0 - d * d) * r, q_min, q_max)


@numba.njit(cache=True, inline="always")
def _asymmetric(q, r, eta_task, q_min, q_max):
    """ToE eq. (A3) for one value: ``r`` if ``r > 0`` else ``(1 - eta_task) q + eta_task r``, clipped."""
    if r > 0.0:
        return _clip(r, q_min, q_max)
    return _clip((1.0 - eta_task) * q + eta_task * r, q_min, q_max)


@numba.njit(cache=True, inline="always")
def _delta(q, delta, q_min, q_max):
    """ToE eq. (10) for one value: ``clip(q + delta)``."""
    return _clip(q + delta, q_min, q_max)


# Each rule is one kernel; which horizons an update sets is its argument ``hcols``: ``i8[b]``, the horizon
# column of update i (its reward ``rewards[i, 0]``), or an empty ``i8[0]`` (:data:`ALL_HORIZONS`) for every
# update's whole vector (``rewards[i, :]``, ``f8[b, H]``). The branch is the same for the whole batch.
ALL_HORIZONS = np.empty(0, np.int64)


@numba.njit(cache=True)
def formula_update(block, eids, hcols, rewards, n_horizons, eta, q0, q_min, q_max, lut):
    """ToE eq. (9)/(A6), in batch order.

    ``Q <- clip(Q + eta * (1 - ((Q - q0) / q0)^2) / (1 + ln(1 + n_hit)) * r, q_min, q_max)``
    with ``n_hit = block[e, H]`` the hit count at update time (``H = n_horizons``).

    block f8[n, W] (layout in the module docstring), eids i8[b], hcols (above), rewards f8[b, H] or f8[b, 1],
    lut f8[m] from :func:`inv_log_lut`. Writes Q in place.
    """
    b = eids.shape[0]
    # the horizon choice outside the walk: inside it, the single-horizon walk ran 10% slower (4M updates)
    if hcols.shape[0] == 0:
        for i in range(b):
            if i + PREFETCH < b:
                prefetch_row(block, eids[i + PREFETCH])
            e = eids[i]
            damp = eta * _inv_log(block[e, n_horizons], lut)  # ToE eq. (9): eta / (1 + log(1 + n_hit))
            for j in range(n_horizons):
                block[e, j] = _formula(block[e, j], damp, rewards[i, j], q0, q_min, q_max)
    else:
        for i in range(b):
            if i + PREFETCH < b:
                prefetch_row(block, eids[i + PREFETCH])
            e, c = eids[i], hcols[i]
            damp = eta * _inv_log(block[e, n_horizons], lut)
            block[e, c] = _formula(block[e, c], damp, rewards[i, 0], q0, q_min, q_max)


@numba.njit(cache=True)
def asymmetric_update(block, eids, hcols, rewards, eta_task, q_min, q_max):
    """ToE eq. (A3): ``Q <- r`` if ``r > 0`` else ``(1 - eta_task) * Q + eta_task * r``, clipped.

    ``eta_task = 1`` is the binary update of eqs. (A4)/(A5) (``Q <- r``).
    block f8[n, W], eids i8[b], hcols (above), rewards f8[b, H] or f8[b, 1]. In place, batch order.
    """
    b = eids.shape[0]
    whole = hcols.shape[0] == 0
    for i in range(b):
        if i + PREFETCH < b:
            prefetch_row(block, eids[i + PREFETCH])
        e = eids[i]
        if whole:
            for j in range(rewards.shape[1]):
                block[e, j] = _asymmetric(block[e, j], rewards[i, j], eta_task, q_min, q_max)
        else:
            c = hcols[i]
            block[e, c] = _asymmetric(block[e, c], rewards[i, 0], eta_task, q_min, q_max)


@numba.njit(cache=True)
def delta_update(block, eids, hcols, deltas, q_min, q_max):
    """LLM-based updater, ToE eq. (10): ``Q <- clip(Q + delta, q_min, q_max)``.

    ``deltas f8[b, H]`` or ``f8[b, 1]`` are computed outside (by the prompt-based updater); hcols (above).
    """
    b = eids.shape[0]
    whole = hcols.shape[0] == 0
    for i in range(b):
        if i + PREFETCH < b:
            prefetch_row(block, eids[i + PREFETCH])
        e = eids[i]
        if whole:
            for j in range(deltas.shape[1]):
                block[e, j] = _delta(block[e, j], deltas[i, j], q_min, q_max)
        else:
            c = hcols[i]
            block[e, c] = _delta(block[e, c], deltas[i, 0], q_min, q_max)


@numba.njit(cache=True)
def add_counts(block, eids, col, counts):
    """``block[eids[i], col] += counts[i]`` in batch order (recall / hit counters)."""
    for i in range(eids.shape[0]):
        block[eids[i], col] += counts[i]


@numba.njit(cache=True)
def scatter_add(block, eids, values):
    """Reference for benchmarks: ``block[eids[i], :H] += values[i]``, the random-access limit."""
    h = values.shape[1]
    for i in range(eids.shape[0]):
        e = eids[i]
        for j in range(h):
            block[e, j] += values[i, j]


@numba.njit(cache=True)
def scatter_add_prefetch(block, eids, values):
    """Reference for benchmarks: :func:`scatter_add` with the same software prefetch as the updates."""
    b = eids.shape[0]
    h = values.shape[1]
    for i in range(b):
        if i + PREFETCH < b:
            prefetch_row(block, eids[i + PREFETCH])
        e = eids[i]
        for j in range(h):
            block[e, j] += values[i, j]


_EXP_MASK = np.int64(0x7FF0000000000000)  # exponent bits all set: inf or nan
_CHUNK = 2048


@numba.njit(cache=True)
def first_bad_eid(eids, n):
    """Index of the first eid outside ``[0, n)``, or -1: one pass, vectorised per chunk
    (an unsigned compare catches negatives too), the exact position found only in a bad chunk."""
    b = eids.shape[0]
    un = np.uint64(n)
    for start in range(0, b, _CHUNK):
        stop = min(b, start + _CHUNK)
        bad = False
        for i in range(start, stop):
            bad |= np.uint64(eids[i]) >= un
        if bad:
            for i in range(start, stop):
                if np.uint64(eids[i]) >= un:
                    return i
    return -1


@numba.njit(cache=True)
def first_non_finite(bits):
    """Index of the first inf or nan in ``bits`` (float64 values viewed as int64, flat), or -1;
    integer tests on the exponent bits, vectorised per chunk like :func:`first_bad_eid`."""
    b = bits.shape[0]
    for start in range(0, b, _CHUNK):
        stop = min(b, start + _CHUNK)
        bad = False
        for i in range(start, stop):
            bad |= (bits[i] & _EXP_MASK) == _EXP_MASK
        if bad:
            for i in range(start, stop):
                if (bits[i] & _EXP_MASK) == _EXP_MASK:
                    return i
    return -1
