"""Keys of the delayed-feedback ledger's index (``engine.store.ledger``), compiled.

An entry is keyed by ``(episode, eid, horizon)``; the index holds one 64-bit
hash per entry, sorted. The hash is SplitMix64's finalizer applied along the
key, ``mix(mix(mix(episode) ^ eid) ^ horizon)``, in one pass (NumPy would
spend one temporary array per operation).
"""

from __future__ import annotations

import numba
import numpy as np

from kernels.store_tree import mix64 as _mix


@numba.njit(cache=True)
def entry_hash(episode, eid, horizon):
    """``u8[b]`` hash of each ``(episode[i], eid[i], horizon[i])`` (all ``i8[b]``)."""
    out = np.empty(eid.shape[0], dtype=np.uint64)
    for i in range(eid.shape[0]):
        x = _mix(np.uint64(episode[i]))
        x = _mix(x ^ np.uint64(eid[i]))
        out[i] = _mix(x ^ np.uint64(horizon[i]))
    return out


# --- the index: open addressing over entry ids -----------------------------------------------
# ``table i8[2^k]`` holds entry ids (-1 = empty) at ``hash & (2^k - 1)``, linear probing; a slot's
# key is compared on the entry's own columns, so a hash collision never confuses two entries.


@numba.njit(cache=True)
def index_find(table, col_episode, col_eid, col_horizon, h, episode, eid, horizon, out):
    """``out[i]`` = the entry id keyed ``(episode[i], eid[i], horizon[i])`` (hash ``h[i]``), or -1."""
    mask = np.uint64(table.shape[0] - 1)
    for i in range(h.shape[0]):
        p = np.int64(h[i] & mask)
        out[i] = -1
        while True:
            e = table[p]
            if e < 0:
                break
            if col_episode[e] == episode[i] and col_eid[e] == eid[i] and col_horizon[e] == horizon[i]:
                out[i] = e
                break
            p = (p + 1) & np.int64(mask)


@numba.njit(cache=True)
def index_insert(table, h, ids):
    """Insert entry ``ids[i]`` with hash ``h[i]`` (keys known to be absent; the table has room)."""
    mask = np.uint64(table.shape[0] - 1)
    for i in range(h.shape[0]):
        p = np.int64(h[i] & mask)
        while table[p] >= 0:
            p = (p + 1) & np.int64(mask)
        table[p] = ids[i]
