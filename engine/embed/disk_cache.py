"""A machine-wide embedding cache: one SQLite file every process on the machine reads and fills.

The process-wide cache (:class:`engine.embed.base.CachedEmbedder`) embeds a text once per
process. On a Ray cluster every worker is a process of its own, and every worker that meets a
text (the day's news, an experience another worker proposed) runs the model on it again: in
the finance scaling study at 16 workers, half of a worker's CPU was all-MiniLM-L6-v2 in NumPy
re-embedding texts another worker had embedded already. With ``[embed] disk_cache`` set, a
text missed in the process is looked up here before the model runs, and what the model
embeds is added, so the machine embeds each text once (each node of a multi-node cluster
holds its own file).

The file is named by the embedder's *identity*: its name and settings, the machine
architecture, the NumPy version, the backend's source and (MiniLM) the weights file's size
and modification time, so vectors of another model, version or forward pass are never read.
A vector is stored as the exact float32 bytes the model gave; a process reads back what the
model would give it (the backend's vectors do not depend on the batch; only such backends may
use the cache). SQLite in WAL mode: readers run concurrently, a write is one transaction, and
a process killed mid-write leaves the file as it was before that write.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import threading
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from engine.errors import BackendError

FORMAT = 1  # the table layout; part of the identity


def default_dir() -> Path:
    """``$TOE_CACHE_DIR/embed``, else ``$XDG_CACHE_HOME/toe/embed``, else ``~/.cache/toe/embed``."""
    if os.environ.get("TOE_CACHE_DIR"):
        return Path(os.environ["TOE_CACHE_DIR"]) / "embed"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "toe" / "embed"


def resolve_dir(setting: str) -> Path:
    """``"auto"`` -> :func:`default_dir`; anything else is a directory path (``~`` expanded)."""
    return default_dir() if setting == "auto" else Path(setting).expanduser()


def source_digest(*files: str | Path) -> str:
    """BLAKE2b of the files' bytes (a backend's source: a changed forward pass is another identity)."""
    h = hashlib.blake2b(digest_size=8)
    for f in files:
        h.update(Path(f).read_bytes())
    return h.hexdigest()


def identity_digest(identity: Iterable) -> str:
    parts = [*map(repr, identity), platform.machine(), np.__version__, str(FORMAT)]
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).hexdigest()


class DiskCache:
    """Vectors ``f4[dim]`` by 16-byte text key in ``<dir>/<name>-<identity>.sqlite``.

    ``setting`` is the ``[embed] disk_cache`` value, resolved in the process that opens the file
    (a pickled cache reopens it on the Ray worker's own machine). Thread-safe; the connection is
    opened on first use in each process."""

    def __init__(self, setting: str, name: str, identity: Sequence, dim: int):
        self.setting = str(setting)
        self.dim = int(dim)
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        self.file_name = f"{safe}-{identity_digest(identity)}.sqlite"
        self._conn = None
        self._pid = None
        self._lock = threading.Lock()
        self.hits = 0
        self.stored = 0

    @property
    def path(self) -> Path:
        return resolve_dir(self.setting) / self.file_name

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("_conn", "_lock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._conn, self._pid, self._lock = None, None, threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=60.0, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID")
        except (sqlite3.Error, OSError) as exc:
            raise BackendError(f"embedding cache {path} (embed.disk_cache = {self.setting!r}) cannot be opened: "
                               f"{exc}; delete the file or set embed.disk_cache = \"\"") from exc
        self._conn, self._pid = conn, os.getpid()
        return conn

    def get(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors of ``keys`` (a key not cached is absent)."""
        out: dict[bytes, np.ndarray] = {}
        if not keys:
            return out
        with self._lock:
            conn = self._connect()
            try:
                for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                    chunk = list(keys[start: start + 500])
                    q = f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})"
                    for k, v in conn.execute(q, chunk):
                        if len(v) != 4 * self.dim:
                            raise BackendError(f"embedding cache {self.path} holds a {len(v)}-byte vector; "
                                               f"expected {4 * self.dim} ({self.dim} float32): delete the file")
                        out[bytes(k)] = np.frombuffer(v, dtype="<f4")
            except sqlite3.Error as exc:
                raise BackendError(f"embedding cache {self.path} is unreadable ({exc}); delete the file or set "
                                   f"embed.disk_cache = \"\"") from exc
        self.hits += len(out)
        return out

    def put(self, items: Iterable[tuple[bytes, np.ndarray]]) -> None:
        """Add vectors (one transaction; a key already there keeps its vector)."""
        rows = [(k, np.ascontiguousarray(v, dtype="<f4").tobytes()) for k, v in items]
        if not rows:
            return
        with self._lock:
            conn = self._connect()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany("INSERT OR IGNORE INTO vectors (key, vec) VALUES (?, ?)", rows)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise BackendError(f"embedding cache {self.path} could not be written ({exc}); delete the file or "
                                   f"set embed.disk_cache = \"\"") from exc
        self.stored += len(rows)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
