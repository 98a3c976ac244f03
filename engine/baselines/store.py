"""A small struct-of-arrays memory table shared by the MemRL, ReMe and FLEX baselines.

Columns are declared once per memory (``{"q": "f8", "when_to_use": "text", ...}``);
append, delete, lookup and snapshot loop over that declaration. Every row has an
int64 ``id`` (assigned in append order, never reused) and an ``embedding``
row ``f4[dim]``. Ids stay sorted, so id -> row is one ``searchsorted``.

Text columns are ``object`` arrays of str inside the table and fixed-width
unicode (``U``) arrays in snapshots, so a snapshot is a plain dict of NumPy
arrays (the round contract of :mod:`engine.rounds`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines.common import str_array
from engine.errors import InputError, StoreError

TEXT = "text"


@codec.data
class MemoryTable:
    """Rows of one memory: ``id i8``, ``embedding f4[dim]`` and the declared columns."""

    def __init__(self, columns: Mapping[str, str], dim: int):
        if dim <= 0:
            raise InputError(f"dim must be > 0, got {dim}")
        reserved = {"id", "embedding"} & set(columns)
        if reserved:
            raise InputError(f"columns may not be named {sorted(reserved)}; they are built in")
        self.columns = dict(columns)
        self.dim = int(dim)
        self.next_id = 0
        self.id = np.zeros(0, dtype=np.int64)
        self.embedding = np.zeros((0, self.dim), dtype=np.float32)
        self.data: dict[str, np.ndarray] = {
            name: np.zeros(0, dtype=object if kind == TEXT else kind) for name, kind in self.columns.items()
        }

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def append(self, embedding: np.ndarray, **values: Sequence) -> np.ndarray:
        """Append ``m`` rows; returns their new ids ``i8[m]``. Every declared column must be given."""
        embedding = np.asarray(embedding, dtype=np.float32)
        if embedding.ndim != 2 or embedding.shape[1] != self.dim:
            raise InputError(f"embedding must have shape (m, {self.dim}), got {embedding.shape}")
        m = embedding.shape[0]
        missing = sorted(set(self.columns) - set(values))
        unknown = sorted(set(values) - set(self.columns))
        if missing or unknown:
            raise InputError(f"append needs exactly the columns {sorted(self.columns)}; missing {missing}, unknown {unknown}")
        new = {}
        for name, kind in self.columns.items():
            col = values[name]
            if kind == TEXT:
                arr = np.empty(len(col), dtype=object)
                arr[:] = [str(v) for v in col]
            else:
                arr = np.asarray(col, dtype=kind)
            if arr.shape != (m,):
                raise InputError(f"column {name!r} must have {m} values, got shape {arr.shape}")
            new[name] = arr
        ids = np.arange(self.next_id, self.next_id + m, dtype=np.int64)
        self.next_id += m
        self.id = np.concatenate([self.id, ids])
        self.embedding = np.concatenate([self.embedding, embedding])
        for name, arr in new.items():
            self.data[name] = np.concatenate([self.data[name], arr])
        return ids

    def rows(self, ids: Sequence[int], *, strict: bool = True) -> np.ndarray:
        """Row positions ``i8[k]`` of ``ids``; unknown ids raise StoreError (or are dropped if not strict)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        pos = np.searchsorted(self.id, ids)
        ok = (pos < len(self)) & (self.id[np.minimum(pos, max(len(self) - 1, 0))] == ids) if len(self) else np.zeros(ids.shape, bool)
        if strict and not ok.all():
            raise StoreError(f"unknown memory ids {ids[~ok][:10].tolist()} (table holds {len(self)} rows)")
        return pos[ok]

    def delete(self, ids: Sequence[int]) -> int:
        """Drop the rows of ``ids`` (unknown ids ignored); returns how many were dropped."""
        rows = self.rows(ids, strict=False)
        if rows.size == 0:
            return 0
        keep = np.ones(len(self), dtype=bool)
        keep[rows] = False
        self.id = self.id[keep]
        self.embedding = self.embedding[keep]
        for name in self.data:
            self.data[name] = self.data[name][keep]
        return int(rows.size)

    def snapshot(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Copies of every column (text as ``U`` arrays), keys prefixed with ``prefix``."""
        snap = {f"{prefix}id": self.id.copy(), f"{prefix}embedding": self.embedding.copy()}
        for name, kind in self.columns.items():
            snap[f"{prefix}{name}"] = str_array(self.data[name]) if kind == TEXT else self.data[name].copy()
        return snap


class TableView:
    """Read-only view of a :meth:`MemoryTable.snapshot` (what a reader uses)."""

    def __init__(self, snapshot: Mapping[str, np.ndarray], columns: Mapping[str, str], dim: int, prefix: str = ""):
        need = ["id", "embedding", *columns]
        missing = [f"{prefix}{k}" for k in need if f"{prefix}{k}" not in snapshot]
        if missing:
            raise InputError(f"snapshot lacks {missing}; was it made by this memory's snapshot()?")
        self.id = np.asarray(snapshot[f"{prefix}id"], dtype=np.int64)
        self.embedding = np.asarray(snapshot[f"{prefix}embedding"], dtype=np.float32)
        if self.embedding.ndim != 2 or self.embedding.shape != (self.id.shape[0], dim):
            raise InputError(
                f"snapshot {prefix}embedding must have shape ({self.id.shape[0]}, {dim}), got {self.embedding.shape}"
            )
        self.data = {name: np.asarray(snapshot[f"{prefix}{name}"]) for name in columns}

    def __len__(self) -> int:
        return int(self.id.shape[0])

    def text(self, name: str, row: int) -> str:
        return str(self.data[name][row])
