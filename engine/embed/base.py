"""The one embedding interface: ``Embedder`` (a Protocol) and the caching base.

Every embedder has a ``name``, a fixed ``dim`` and ``embed(texts)`` returning
``f4[n, dim]`` rows with unit L2 norm, in the order of ``texts``. Embedding is
batched (``batch_size`` texts per backend call) and cached by a 128-bit
BLAKE2b hash of the UTF-8 text, so repeated texts (the same perspective in
many episodes) cost one backend call in total.

Backends subclass :class:`CachedEmbedder` and implement only
``_embed_batch(texts) -> f4[b, dim]`` (raw, not yet normalised). The base
checks what the backend returns (shape, finiteness, non-zero norm) and raises
:class:`BackendError` naming the backend, so a broken model never writes NaN
rows into an index.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from engine.errors import BackendError, InputError


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into unit-norm float32 vectors of a fixed width."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``f4[len(texts), dim]``, each row L2-normalised."""
        ...


def text_key(text: str) -> bytes:
    """16-byte BLAKE2b digest of ``text`` (the cache key)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def check_texts(texts: Sequence[str], where: str = "texts") -> list[str]:
    """Validate a batch of texts once, at the boundary; return it as a list."""
    if isinstance(texts, (str, bytes)):
        raise InputError(f"{where} must be a sequence of strings, got a single {type(texts).__name__}")
    try:
        out = list(texts)
    except TypeError as exc:
        raise InputError(f"{where} must be a sequence of strings, got {type(texts).__name__}") from exc
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InputError(f"{where}[{i}] must be a str, got {type(t).__name__}")
    return out


def l2_normalise(x: np.ndarray, where: str = "vectors") -> np.ndarray:
    """Return ``f4[n, d]`` rows scaled to unit norm; zero or non-finite rows raise InputError."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise InputError(f"{where} must be 2-D [n, dim], got shape {x.shape}")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise InputError(f"{where} rows {np.flatnonzero(bad)[:10].tolist()} contain NaN or inf")
    norms = np.linalg.norm(x, axis=1)
    zero = norms <= 1e-12
    if zero.any():
        raise InputError(f"{where} rows {np.flatnonzero(zero)[:10].tolist()} have zero norm (no direction under cosine)")
    return np.ascontiguousarray(x / norms[:, None], dtype=np.float32)


# Process-wide caches, by the ``shared`` name of the embedders that use them: (vectors, lock).
_SHARED: dict[tuple, tuple[OrderedDict, threading.Lock]] = {}
_SHARED_LOCK = threading.Lock()


class CachedEmbedder:
    """Batching, hashing cache and output checks shared by every backend.

    ``cache_size`` bounds the number of cached vectors (LRU); 0 disables the cache.
    ``shared`` names a process-wide cache that every embedder built with the same name
    uses (a backend whose vector for a text does not depend on what else is in the batch,
    e.g. all-MiniLM-L6-v2 on the CPU: every run of an experiment then embeds a text once).
    ``disk_cache`` (``[embed] disk_cache``: "" off, "auto" or a directory) adds a machine-wide level
    below it (:mod:`engine.embed.disk_cache`): a text missed in the process is looked up there before the
    backend runs, so every process on the machine (each Ray worker) embeds a text once between them; only a
    ``shared`` backend may use it, and it names its identity in :meth:`_disk_identity`.
    ``calls`` counts backend batch calls and ``embedded`` the texts actually sent.
    """

    name: str = "embedder"
    dim: int = 0

    def __init__(self, *, dim: int, batch_size: int = 64, cache_size: int = 100_000, shared: tuple | None = None,
                 disk_cache: str = ""):
        if dim <= 0:
            raise InputError(f"dim must be > 0, got {dim}")
        if batch_size <= 0:
            raise InputError(f"batch_size must be > 0, got {batch_size}")
        if cache_size < 0:
            raise InputError(f"cache_size must be >= 0, got {cache_size}")
        if disk_cache and shared is None:
            raise InputError(f"{type(self).__name__}: a disk cache needs a backend whose vector of a text does not "
                             f"depend on its batch (embed.disk_cache is for backend 'minilm' with runtime 'numpy')")
        self.dim = int(dim)
        self.batch_size = int(batch_size)
        self.cache_size = int(cache_size)
        self._shared = shared
        self.disk_cache = str(disk_cache)
        self._disk = None  # the DiskCache, built on the first miss (its identity may need the model's files)
        self._attach(OrderedDict())
        self.calls = 0
        self.embedded = 0

    def _attach(self, own: OrderedDict) -> None:
        """Use the process-wide cache named ``self._shared`` (else ``own``), with its lock."""
        if self._shared is None:
            self._cache, self._lock = own, threading.Lock()
        else:
            with _SHARED_LOCK:
                self._cache, self._lock = _SHARED.setdefault(self._shared, (OrderedDict(), threading.Lock()))

    def __getstate__(self) -> dict:  # a Ray worker gets the embedder: the lock stays; a shared cache is rejoined there
        # the disk level is named again where it is opened: the model files it is named by are that machine's
        state = {k: v for k, v in self.__dict__.items() if k not in ("_cache", "_lock", "_disk")}
        state["_own"] = None if self._shared is not None else OrderedDict(self._cache)
        return state

    def __setstate__(self, state: dict) -> None:
        own = state.pop("_own")
        state.setdefault("disk_cache", "")  # an embedder pickled before the disk cache existed
        state["_disk"] = None
        self.__dict__.update(state)
        self._attach(own if own is not None else OrderedDict())

    def _disk_identity(self) -> tuple:
        """What the vectors depend on (the disk cache file's name): the shared settings by default."""
        return (type(self).__name__, *self._shared)

    def _disk_level(self):
        if self._disk is None:
            from engine.embed.disk_cache import DiskCache

            self._disk = DiskCache(self.disk_cache, self.name, self._disk_identity(), self.dim)
        return self._disk

    # Backends implement this: raw vectors f4[len(texts), dim] (any norm).
    def _embed_batch(self, texts: list[str]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return ``f4[n, dim]`` unit-norm rows for ``texts`` (cached, batched)."""
        texts = check_texts(texts)
        n = len(texts)
        out = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        keys = [text_key(t) for t in texts]
        todo: dict[bytes, list[int]] = {}
        with self._lock:
            for i, k in enumerate(keys):
                hit = self._cache.get(k) if self.cache_size else None
                if hit is not None:
                    self._cache.move_to_end(k)
                    out[i] = hit
                else:
                    todo.setdefault(k, []).append(i)
        if todo and self.disk_cache:
            found = self._disk_level().get(list(todo))
            with self._lock:
                for k, v in found.items():
                    out[todo.pop(k)] = v
                    if self.cache_size:
                        self._put(k, v)
        if todo:
            uniq = list(todo)
            for start in range(0, len(uniq), self.batch_size):
                chunk = uniq[start : start + self.batch_size]
                batch = [texts[todo[k][0]] for k in chunk]
                vecs = self._checked_batch(batch)
                if self.disk_cache:
                    self._disk_level().put(zip(chunk, vecs))
                with self._lock:
                    for k, v in zip(chunk, vecs):
                        out[todo[k]] = v
                        if self.cache_size:
                            self._put(k, v)
        return out

    def _put(self, k: bytes, v: np.ndarray) -> None:  # under self._lock
        self._cache[k] = v
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def _checked_batch(self, batch: list[str]) -> np.ndarray:
        raw = self._embed_batch(batch)
        self.calls += 1
        self.embedded += len(batch)
        raw = np.asarray(raw, dtype=np.float32)
        if raw.shape != (len(batch), self.dim):
            raise BackendError(
                f"embedder {self.name!r} returned shape {raw.shape} for {len(batch)} texts; "
                f"expected ({len(batch)}, {self.dim})"
            )
        try:
            return l2_normalise(raw, where=f"embedder {self.name!r} output")
        except InputError as exc:
            raise BackendError(str(exc)) from exc

    def clear_cache(self) -> None:
        with self._lock:
            self._cache.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"
