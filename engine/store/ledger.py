"""Delayed-feedback ledger (ToE eq. (7)): pending updates applied exactly once.

An outcome ``o_{t+h}`` arrives h steps after the action ``a_t`` that used an
experience. Each pending update is one entry keyed by
``(episode id, eid, horizon)`` with its due time and the action value needed to
compute the reward later (``r = a_t * o_{t+h}`` in FinEvolveBench). Resolving
an entry applies its update to the store and marks it applied in the same call;
the ledger is saved in the same checkpoint as the store
(:mod:`engine.store.persistence`), so a restart from any checkpoint neither
loses a pending update nor applies one twice.

Columns are declared once in :data:`LEDGER_COLUMNS`.
"""

from __future__ import annotations

import numpy as np

from engine.errors import InputError, StoreError
from engine.store import validate as V
from kernels.ledger_hash import entry_hash, index_find, index_insert

LEDGER_COLUMNS: dict[str, str] = {
    "episode": "i8",  # episode id that used the experience
    "eid": "i8",
    "horizon": "i8",  # horizon index into the store's horizons
    "due": "i8",  # time step at which the outcome becomes known
    "action": "f8",  # a_t (e.g. a sentiment score) for r = a_t * o_{t+h}
    "status": "i8",  # PENDING or APPLIED
    "reward": "f8",  # the reward applied (NaN while pending)
}
PENDING, APPLIED = 0, 1


def _entry_hash(episode, eid, horizon) -> np.ndarray:
    return entry_hash(np.ascontiguousarray(episode, np.int64), np.ascontiguousarray(eid, np.int64),
                      np.ascontiguousarray(horizon, np.int64))


def _table_size(n: int) -> int:
    """A power of two at least twice ``n`` (load factor <= 1/2), at least 64."""
    return 1 << max(6, int(2 * max(n, 1) - 1).bit_length())


class FeedbackLedger:
    """Struct-of-arrays list of pending / applied delayed updates."""

    def __init__(self, capacity: int = 64):
        self._n = 0
        self._cols = {n: np.empty(capacity, dtype=dt) for n, dt in LEDGER_COLUMNS.items()}
        self._table = np.full(_table_size(capacity), -1, dtype=np.int64)  # hash index of entry ids

    def __len__(self) -> int:
        return self._n

    def column(self, name: str) -> np.ndarray:
        if name not in LEDGER_COLUMNS:
            raise InputError(f"unknown ledger column {name!r}; valid: {', '.join(LEDGER_COLUMNS)}")
        v = self._cols[name][: self._n].view()
        v.flags.writeable = False
        return v

    def columns(self) -> dict[str, np.ndarray]:
        return {n: self.column(n) for n in LEDGER_COLUMNS}

    @property
    def n_pending(self) -> int:
        return int((self._cols["status"][: self._n] == PENDING).sum())

    def _find(self, episode, eid, horizon, h=None) -> np.ndarray:
        """Entry index of each key, or -1 (``h``: the keys' hashes, when the caller has them)."""
        out = np.full(eid.shape[0], -1, dtype=np.int64)
        if self._n == 0 or eid.size == 0:
            return out
        if h is None:
            h = _entry_hash(episode, eid, horizon)
        c = self._cols
        index_find(self._table, c["episode"], c["eid"], c["horizon"], h,
                   np.ascontiguousarray(episode, np.int64), np.ascontiguousarray(eid, np.int64),
                   np.ascontiguousarray(horizon, np.int64), out)
        return out

    def add(self, episode_ids, eids, horizons, due, actions) -> np.ndarray:
        """Append pending entries; returns their entry ids ``i8[b]``.

        Re-adding an identical entry (same key, due and action) is a no-op that
        returns the existing id (replays after a restart); a conflicting one,
        or a key repeated within the batch, raises :class:`InputError`. eids and
        horizon indices are checked by the store (:meth:`ExperienceStore.defer`).
        """
        eids = V.int_array(eids, "eids")
        b = eids.shape[0]
        episode = V.int_array(np.broadcast_to(episode_ids, (b,)) if np.ndim(episode_ids) == 0 else episode_ids, "episode_ids")
        horizon = V.int_array(horizons, "horizons")
        due = V.int_array(np.broadcast_to(due, (b,)) if np.ndim(due) == 0 else due, "due")
        actions = V.float_array(np.broadcast_to(actions, (b,)) if np.ndim(actions) == 0 else actions, "actions", (b,))
        for name, arr in (("episode_ids", episode), ("horizons", horizon), ("due", due)):
            if arr.shape[0] != b:
                raise InputError(f"{name} must have {b} entries (one per eid), got {arr.shape[0]}")
        h = _entry_hash(episode, eids, horizon)
        order = np.argsort(h, kind="stable")
        hs = h[order]
        same = np.flatnonzero(hs[1:] == hs[:-1])
        if same.size:  # equal hashes: a repeated key, unless (2^-64) a collision of distinct keys
            a, z = order[same], order[same + 1]
            rep = (episode[a] == episode[z]) & (eids[a] == eids[z]) & (horizon[a] == horizon[z])
            if rep.any():
                dup = int(z[np.flatnonzero(rep)].min())
                raise InputError(
                    f"ledger entry (episode={episode[dup]}, eid={eids[dup]}, horizon={horizon[dup]}) "
                    f"appears twice in the batch (position {dup})")
        found = self._find(episode, eids, horizon, h)
        old = found >= 0
        if old.any():
            c = self._cols
            conflict = old & ((c["due"][np.where(old, found, 0)] != due) | (c["action"][np.where(old, found, 0)] != actions))
            if conflict.any():
                i = int(np.flatnonzero(conflict)[0])
                raise InputError(
                    f"ledger entry (episode={episode[i]}, eid={eids[i]}, horizon={horizon[i]}) already exists "
                    f"with a different due time or action")
        new = ~old
        m = int(new.sum())
        ids = found.copy()
        if m:
            self._reserve(self._n + m)
            sl = slice(self._n, self._n + m)
            c = self._cols
            c["episode"][sl] = episode[new]
            c["eid"][sl] = eids[new]
            c["horizon"][sl] = horizon[new]
            c["due"][sl] = due[new]
            c["action"][sl] = actions[new]
            c["status"][sl] = PENDING
            c["reward"][sl] = np.nan
            ids[new] = np.arange(self._n, self._n + m)
            self._n += m
            self._index_new(h[new], ids[new])
        return ids

    def _reserve(self, n: int) -> None:
        cap = self._cols["eid"].shape[0]
        if n > cap:
            new = max(n, 2 * cap)
            for k, a in self._cols.items():
                g = np.empty(new, dtype=a.dtype)
                g[: self._n] = a[: self._n]
                self._cols[k] = g

    def _index_new(self, h: np.ndarray, ids: np.ndarray) -> None:
        """Insert new entries into the hash index (compiled; rebuilt at twice the size past half full)."""
        if 2 * self._n > self._table.shape[0]:
            self._reindex()
        else:
            index_insert(self._table, h, np.ascontiguousarray(ids, np.int64))

    def _reindex(self) -> None:
        c = self._cols
        self._table = np.full(_table_size(self._n), -1, dtype=np.int64)
        h = _entry_hash(c["episode"][: self._n], c["eid"][: self._n], c["horizon"][: self._n])
        index_insert(self._table, h, np.arange(self._n, dtype=np.int64))

    def due(self, now) -> np.ndarray:
        """Entry ids of pending entries with ``due <= now``, ascending."""
        c = self._cols
        mask = (c["status"][: self._n] == PENDING) & (c["due"][: self._n] <= int(now))
        return np.flatnonzero(mask).astype(np.int64)

    def pending(self) -> np.ndarray:
        return np.flatnonzero(self._cols["status"][: self._n] == PENDING).astype(np.int64)

    def prepare(self, entries, outcomes=None, rewards=None):
        """Validate a resolution; returns ``(entries, eids, horizons, rewards)`` without changing anything."""
        entries = V.int_array(entries, "entries")
        b = entries.shape[0]
        if b and not V.within(entries, self._n):
            bad = np.flatnonzero((entries < 0) | (entries >= self._n))
            raise StoreError(f"unknown ledger entry {int(entries[bad[0]])}; the ledger has {self._n} entries")
        if b and not V.all_distinct(entries):
            raise InputError("entries must not repeat within one resolution")
        c = self._cols
        done = np.flatnonzero(c["status"][entries] != PENDING)
        if done.size:
            raise StoreError(f"ledger entry {int(entries[done[0]])} was already applied; each update applies once")
        if (outcomes is None) == (rewards is None):
            raise InputError("give exactly one of outcomes (r = action * outcome) or rewards")
        if rewards is None:
            o = V.float_array(outcomes, "outcomes", (b,))
            r = c["action"][entries] * o  # ToE eq. (7), r_env = a_t * o_{t+h}
        else:
            r = V.float_array(rewards, "rewards", (b,))
        return entries, c["eid"][entries].copy(), c["horizon"][entries].copy(), r

    def mark_applied(self, entries: np.ndarray, rewards: np.ndarray) -> None:
        self._cols["status"][entries] = APPLIED
        self._cols["reward"][entries] = rewards

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray]) -> "FeedbackLedger":
        """Rebuild from persisted columns (validated by the caller)."""
        n = int(cols["eid"].shape[0])
        led = cls(capacity=max(n, 64))
        for k, dt in LEDGER_COLUMNS.items():
            led._cols[k][:n] = np.asarray(cols[k], dtype=dt)
        led._n = n
        led._reindex()
        return led
