"""One :class:`NodeIndex` per large subtree: ToE's retrieval under a prefix on hnswlib.

ToE searches the directions under one (industry, factor) prefix. A subtree holding at least
``min_size`` rows gets its own :class:`NodeIndex` (labels = the store's experience rows),
searched without a filter; smaller subtrees are left to the caller's exact product, which is
faster there (the crossover is measured in ``benchmarks/results/finance_retrieval.md``). One
index per subtree rather than one index searched with hnswlib's ``filter`` callable: the
callable runs in Python for every node the search visits, which costs more than the whole
unfiltered search of a subtree's own graph (same file, "per-prefix index vs filter").

Growth: rows are added in row order on one thread, so an index is a function of its rows: one
grown round by round equals one built at once from the same rows, and a rebuild after a load
gives the graph an uninterrupted run has. Every row that ever sat under the subtree stays in
its index (merged, inactive rows too): a search passes the reader's ``active`` column as
``valid``, so an older snapshot (pipelined rounds) reads the same index correctly and results
never depend on when the index was synced or saved.

A search over-fetches (``fetch`` >= k candidates from the graph), then re-ranks them exactly by
the mirror vectors (NumPy), ties to the smaller row: the result has the exact order of a brute-
force product over the same vectors; only which rows reach the candidate list is approximate.

Persistence: :meth:`SubtreeIndex.writers` gives one ``NodeIndex.save`` writer per subtree for a
store checkpoint's ``extras`` (the same atomic commit as the tables); :meth:`SubtreeIndex.restore`
loads them back, each checked against the store (its ids must equal the store's rows under the
subtree up to the last one indexed, its tag the caller's, its config this one). An index that
is missing or does not match is dropped and rebuilt from the store the next time its subtree
is searched.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from engine.errors import InputError, PersistenceError
from engine.index.config import IndexConfig
from engine.index.node_index import NodeIndex

PREFIX = "node_index."  # extras file name of subtree s: node_index.<s>


class SubtreeIndex:
    """Node indexes of the subtrees with at least ``min_size`` rows (0 = none: always brute force).

    config: the graphs' settings (one thread by default: see the module docstring);
    fetch: candidates asked of the graph per search (>= k), re-ranked exactly;
    tag: JSON the caller saves with every index and requires back on restore
    (e.g. the embedder's identity: vectors of another embedder force a rebuild).
    """

    def __init__(self, min_size: int, config: IndexConfig | None = None, *, fetch: int = 32, tag: dict | None = None):
        if not isinstance(min_size, (int, np.integer)) or isinstance(min_size, bool) or min_size < 0:
            raise InputError(f"min_size must be an int >= 0 (0 = no index), got {min_size!r}")
        if not isinstance(fetch, (int, np.integer)) or fetch < 1:
            raise InputError(f"fetch must be a positive int, got {fetch!r}")
        self.min_size = int(min_size)
        self.config = config or IndexConfig(num_threads=1)
        self.fetch = int(fetch)
        self.tag = dict(tag or {})
        self._ix: dict[int, NodeIndex] = {}
        self._last: dict[int, int] = {}  # subtree -> the last row it indexes
        self._lock = threading.Lock()  # episodes search from several threads; syncs write
        self.builds: list[int] = []  # subtrees whose index was built from empty (first use, rebuild)

    def __getstate__(self):
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def use(self, size: int) -> bool:
        """Whether a subtree of ``size`` rows is searched through its index (else brute force)."""
        return 0 < self.min_size <= size

    def subtrees(self) -> list[int]:
        return sorted(self._ix)

    def index(self, subtree: int) -> NodeIndex | None:
        return self._ix.get(subtree)

    def last_row(self, subtree: int) -> int:
        """The last row indexed under ``subtree`` (-1: none)."""
        return self._last.get(subtree, -1)

    def top(self, subtree: int, query, k: int, *, newest: int, rows_after: Callable[[int], np.ndarray],
            vectors_of: Callable[[np.ndarray], np.ndarray], valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` valid rows under ``subtree`` most similar to ``query``: ``(rows i8[m], sims f4[m])``, m <= k,
        by decreasing exact similarity, ties to the smaller row.

        newest: the last row under the subtree in the caller's reader; when it is past the index's
        last row, ``rows_after(last)`` (the rows under the subtree after ``last``, ascending) are
        embedded with ``vectors_of(rows) -> f[n, dim]`` and added first. valid: ``bool[n_rows]``,
        the reader's ``active`` column.
        """
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int, got {k!r}")
        with self._lock:
            ix = self._sync(int(subtree), int(newest), rows_after, vectors_of)
            got, _ = ix.search(query, max(int(k), self.fetch), valid=valid)
            got = got[got >= 0]
            sims = ix.similarity(query, got)  # exact, NumPy over the mirror
        order = np.lexsort((got, -sims))[:k]
        return got[order], sims[order]

    def _sync(self, subtree: int, newest: int, rows_after, vectors_of) -> NodeIndex:
        ix, last = self._ix.get(subtree), self._last.get(subtree, -1)
        if ix is not None and newest <= last:
            return ix
        rows = np.asarray(rows_after(last))
        if rows.ndim != 1 or (rows.size and not np.issubdtype(rows.dtype, np.integer)):
            raise InputError(f"rows_after({last}) must return 1-D integer rows, got {rows.dtype} {rows.shape}")
        rows = rows.astype(np.int64, copy=False)
        if rows.size and (rows[0] <= last or (rows.size > 1 and (np.diff(rows) <= 0).any())):
            raise InputError(f"rows_after({last}) of subtree {subtree} must return ascending rows after {last}, "
                             f"got {rows[:10].tolist()}")
        if ix is None and not rows.size:
            raise InputError(f"subtree {subtree} has no rows to index (newest row {newest})")
        if not rows.size:
            return ix
        vecs = np.asarray(vectors_of(rows))
        fresh = ix is None
        if fresh:
            if vecs.ndim != 2:
                raise InputError(f"vectors_of must return f[n, dim], got shape {vecs.shape}")
            ix = NodeIndex(int(vecs.shape[1]), self.config, capacity=max(int(rows.size), self.config.capacity))
        ix.add(rows, vecs)  # validated first: a bad batch changes nothing
        self._ix[subtree], self._last[subtree] = ix, int(rows[-1])
        if fresh:
            self.builds.append(subtree)
        return ix

    # -- persistence ------------------------------------------------------------------------------
    def writers(self) -> dict[str, Callable[[Path], None]]:
        """``{"node_index.<subtree>": writer(path)}`` for a store checkpoint's ``extras``."""
        def writer(s: int) -> Callable[[Path], None]:
            return lambda path: self._ix[s].save(path, tag={**self.tag, "subtree": s, "last": self._last[s]})

        return {f"{PREFIX}{s}": writer(s) for s in sorted(self._ix)}

    def restore(self, paths: Mapping[str, Path], rows_upto: Callable[[int, int], np.ndarray]) -> list[str]:
        """Replace the indexes by those saved among ``paths`` (a loaded store's ``extra_paths``).

        rows_upto(subtree, last): the store's rows under ``subtree`` up to row ``last``, ascending;
        an index must hold exactly those. Returns one line per index dropped (missing pieces,
        another tag or config, ids that do not match the store): each is rebuilt on next use.
        """
        self._ix, self._last = {}, {}
        problems = []
        for name, path in sorted(paths.items()):
            if not name.startswith(PREFIX):
                continue
            try:
                s = int(name[len(PREFIX):])
                meta, _, _ = NodeIndex.read_header(path)
                tag = meta.get("tag") or {}
                want = {**self.tag, "subtree": s}
                if {key: tag.get(key) for key in want} != want:
                    raise PersistenceError(f"tag {tag} does not match {want}")
                last = int(tag["last"])
                ix = NodeIndex.load(path, expected_ids=rows_upto(s, last))
                if replace(ix.config, capacity=self.config.capacity) != self.config:
                    raise PersistenceError(f"built with {ix.config}, this run uses {self.config}")
            except (PersistenceError, InputError, ValueError, KeyError, TypeError) as exc:
                problems.append(f"{name}: {exc}")
                continue
            self._ix[s], self._last[s] = ix, last
        return problems
