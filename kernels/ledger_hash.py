"""Keys of the delayed-feedback ledger's index (``engine.store.ledger``), compiled.

An entry is keyed by ``(episode, eid, horizon)``; the index holds one 64-bit
hash per entry, sorted. The hash is SplitMix64's finalizer applied along the
key, ``mix(mix(mix(episode) ^ eid) ^ horizon)``, in one pass (NumPy would
spend one temporary array per operation).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _mix(x):
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@numba.njit(cache=True)
def entry_hash(episode, eid, horizon):
    """``u8[b]`` hash of each ``(episode[i], eid[i], horizon[i])`` (all ``i8[b]``)."""
    out = np.empty(eid.shape[0], dtype=np.uint64)
    for i in range(eid.shape[0]):
        x = _mix(np.uint64(episode[i]))
        x = _mix(x ^ np.uint64(eid[i]))
        out[i] = _mix(x ^ np.uint64(horizon[i]))
    return out
