"""Delayed feedback for the finance task (ToE eq. (7)): pending updates applied once their return is known.

A prediction made on day ``t`` for horizon ``h`` can only be scored on day
``t + h`` (when ``close[t + h]`` exists). :class:`PendingFeedback` holds one
entry per (industry, day, horizon) prediction with the experiences it used;
:meth:`PendingFeedback.due` pops, in insertion order, every entry whose due day
has come, exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import InputError


@dataclass(frozen=True)
class Entry:
    entry_id: int
    industry: int
    day: int  # prediction day t (index into the market's days)
    hcol: int  # horizon column
    horizon: int
    due: int  # t + h: first day on which alpha[industry, t, h] is known
    sentiment: float  # a_t
    eids: tuple[int, ...]  # experiences (or memory ids) used for this prediction


class PendingFeedback:
    """Pending per-horizon feedback; each entry resolves exactly once."""

    def __init__(self):
        self._entries: list[Entry] = []
        self._next = 0
        self.resolved = 0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, industry: int, day: int, hcol: int, horizon: int, sentiment: float, eids) -> Entry:
        if horizon < 1:
            raise InputError(f"horizon must be >= 1, got {horizon}")
        if not np.isfinite(sentiment):
            raise InputError(f"sentiment must be finite, got {sentiment}")
        e = Entry(self._next, int(industry), int(day), int(hcol), int(horizon), int(day) + int(horizon),
                  float(sentiment), tuple(int(x) for x in eids))
        self._next += 1
        self._entries.append(e)
        return e

    def peek(self, today: int) -> list[Entry]:
        """The entries :meth:`due` would return, without removing them (compute first, then commit)."""
        return [e for e in self._entries if e.due <= today]

    def due(self, today: int) -> list[Entry]:
        """Remove and return the entries with ``due <= today`` (their returns are known), oldest first."""
        ready = [e for e in self._entries if e.due <= today]
        if ready:
            self._entries = [e for e in self._entries if e.due > today]
            self.resolved += len(ready)
        return ready


def feedback(entry: Entry, alpha: np.ndarray) -> float:
    """``r_env = a_t * o_{t+h}`` (ToE eq. (7) for FinEvolveBench); ``alpha f8[N, T, H]``."""
    o = float(alpha[entry.industry, entry.day, entry.hcol])
    if not np.isfinite(o):
        raise InputError(
            f"return of industry {entry.industry} on day {entry.day} at horizon {entry.horizon} is not known yet"
        )
    return entry.sentiment * o
