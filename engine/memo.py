"""One bounded, thread-safe memo: ``get(key, make)`` computes a key once per process and keeps the last ``size``.

Used where the same pure computation is asked for again by the streams, shares or runs a process serves: a
forecasting round's release (:mod:`engine.forecast.round_methods`) and the offline sources search
(:class:`engine.forecast.search.CorpusSearch`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable


class Memo:
    """The last ``size`` values by key, least recently used dropped first. The first caller of a key computes it
    and callers of the same key wait for it; a failed ``make`` is not kept (the next caller retries)."""

    def __init__(self, size: int = 16):
        self.size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._making: dict[Hashable, threading.Lock] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, make: Callable[[], Any]) -> tuple[Any, bool]:
        """``(value, made)``: the value under ``key``, computed by ``make()`` here (``made``) if absent."""
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key], False
            making = self._making.setdefault(key, threading.Lock())
        with making:  # one caller computes a key; the others wait for it
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key], False
            try:
                value = make()
            finally:
                with self._lock:
                    self._making.pop(key, None)
            with self._lock:
                self._entries[key] = value
                while len(self._entries) > self.size:
                    self._entries.popitem(last=False)
            return value, True
