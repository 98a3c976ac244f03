"""HNSW index over the experience store's node rows; labels ARE node ids.

Its users: finance ToE's retrieval under an (industry, factor) prefix and the
merger's sibling search (cosine; k1 = 8 candidates, leaf threshold lambda = 0.8),
through one index per large prefix (:mod:`engine.index.subtrees`; labels are
experience rows there), and the forecasting document search
(:mod:`engine.forecast.search`). The memory baselines keep their own stores
(mem0's FAISS, MemRL's and ReMe's arrays). One :class:`NodeIndex`:

* the hnswlib graph is labelled with the store's int64 node ids, so a query
  returns node ids directly (``labels.view(np.int64)``: no dict, no Python
  loop in the query path);
* a NumPy mirror ``f4[id_capacity, dim]`` of the (normalised) vectors, indexed
  by node id, serves exact search over small node sets (the children of a
  node, a subtree), similarity lookups and save/load checks;
* ``state i1[id_capacity]`` marks each id ABSENT, ALIVE or DELETED.

Writes validate the whole batch first (shape, dimension, NaN/inf, zero norm
under cosine, ids known/unknown, duplicates): a bad batch raises
:class:`InputError` and changes nothing. Deleted nodes keep their HNSW slot
(hnswlib marks them; they are skipped by search and revived by ``add``);
``compact()`` rebuilds the graph without them.

Similarity: "cosine" and "ip" return the dot product of (normalised) vectors;
"l2" returns minus the squared Euclidean distance, so bigger is always closer.
Missing results are padded with id -1 and similarity -inf.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import hnswlib
import numpy as np

from engine import atomic_io
from engine.errors import InputError, PersistenceError
from engine.index.config import IndexConfig

ABSENT, ALIVE, DELETED = 0, 1, 2
FORMAT = 1
_ID_LIMIT = 1 << 40  # node ids are dense row ids; anything near this is a bug upstream
_MAGIC = b"TOENIDX1"

# Test hook: called with the stage name during save ("graph": hnswlib's temporary graph written;
# "header": the header written into the temporary output, the graph not yet). Tests make it raise
# or kill the process; TOE_INDEX_FAULT=<stage> makes a save SIGKILL itself there.
fault_hook = None


def _stage(name: str) -> None:
    if os.environ.get("TOE_INDEX_FAULT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    if fault_hook is not None:
        fault_hook(name)


class NodeIndex:
    """Approximate + exact similarity search over node vectors, labelled by node id."""

    def __init__(self, dim: int, config: IndexConfig | None = None, **overrides):
        if not isinstance(dim, (int, np.integer)) or dim <= 0:
            raise InputError(f"dim must be a positive int, got {dim!r}")
        cfg = config or IndexConfig()
        if overrides:
            from dataclasses import replace

            cfg = replace(cfg, **overrides)
        self.config = cfg
        self.dim = int(dim)
        self.space = cfg.space
        self._hnsw_space = "l2" if cfg.space == "l2" else "ip"  # cosine = ip on normalised vectors
        self._hnsw = hnswlib.Index(space=self._hnsw_space, dim=self.dim)
        self._hnsw.init_index(max_elements=cfg.capacity, M=cfg.M, ef_construction=cfg.ef_construction, random_seed=cfg.seed)
        self._ef = cfg.ef_search
        self._hnsw.set_ef(self._ef)
        self._vecs = np.zeros((0, self.dim), dtype=np.float32)
        self._state = np.zeros(0, dtype=np.int8)
        self._n_alive = 0
        self._n_slots = 0  # hnswlib elements, alive + deleted
        self.tag: dict = {}  # caller's JSON saved with the index (see save)

    # -- properties ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n_alive

    @property
    def capacity(self) -> int:
        """HNSW capacity in elements (alive + deleted); grows automatically."""
        return self._hnsw.get_max_elements()

    @property
    def n_deleted(self) -> int:
        return self._n_slots - self._n_alive

    def ids(self) -> np.ndarray:
        """``i8[len(self)]`` alive node ids, ascending."""
        return np.flatnonzero(self._state == ALIVE).astype(np.int64)

    def contains(self, ids) -> np.ndarray:
        """``bool[n]``: which of ``ids`` are alive in the index (unknown ids give False)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        out = np.zeros(ids.shape[0], dtype=bool)
        ok = (ids >= 0) & (ids < self._state.shape[0])
        out[ok] = self._state[ids[ok]] == ALIVE
        return out

    def vectors(self, ids) -> np.ndarray:
        """``f4[n, dim]`` stored (normalised under cosine) vectors of alive ``ids``."""
        ids = self._check_ids(ids, "ids", must_be=ALIVE)
        return self._vecs[ids].copy()

    def set_ef(self, ef: int) -> None:
        """Query beam width (recall/speed trade-off)."""
        if ef < 1:
            raise InputError(f"ef must be >= 1, got {ef}")
        self._ef = int(ef)
        self._hnsw.set_ef(self._ef)

    # -- validation ---------------------------------------------------------------------------
    def _check_ids(self, ids, where: str, must_be: int | None = None, unique: bool = True) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.ndim != 1:
            raise InputError(f"{where} must be 1-D node ids, got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise InputError(f"{where} must be integer node ids, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size == 0:
            return arr
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= _ID_LIMIT:
            bad = arr[(arr < 0) | (arr >= _ID_LIMIT)]
            raise InputError(f"{where} must be node ids in [0, 2**40), got {bad[:10].tolist()}")
        if unique and arr.shape[0] > 1:
            srt = np.sort(arr)
            dup = srt[1:][srt[1:] == srt[:-1]]
            if dup.size:
                raise InputError(f"{where} holds duplicate node ids {_sorted_unique(dup)[:10].tolist()}")
        if must_be is not None:
            st = np.zeros(arr.shape[0], dtype=np.int8)
            inside = arr < self._state.shape[0]
            st[inside] = self._state[arr[inside]]
            if must_be == ALIVE:
                bad = arr[st != ALIVE]
                if bad.size:
                    raise InputError(f"{where}: unknown or deleted node ids {bad[:10].tolist()} (not in the index)")
            else:  # must not be alive
                bad = arr[st == ALIVE]
                if bad.size:
                    raise InputError(f"{where}: node ids {bad[:10].tolist()} are already in the index; use replace()")
        return arr

    def _check_vectors(self, vectors, n: int | None, where: str) -> np.ndarray:
        v = np.asarray(vectors)
        if v.dtype == object or not (np.issubdtype(v.dtype, np.floating) or np.issubdtype(v.dtype, np.integer)):
            raise InputError(f"{where} must be a float array, got dtype {v.dtype}")
        if v.ndim == 1:
            v = v.reshape(1, -1)
        if v.ndim != 2 or v.shape[1] != self.dim:
            raise InputError(f"{where} must have shape [n, {self.dim}] (index dim {self.dim}), got {np.shape(vectors)}")
        if n is not None and v.shape[0] != n:
            raise InputError(f"{where} has {v.shape[0]} rows but {n} node ids were given")
        v = np.ascontiguousarray(v, dtype=np.float32)
        finite = np.isfinite(v).all(axis=1)
        if not finite.all():
            raise InputError(f"{where} rows {np.flatnonzero(~finite)[:10].tolist()} contain NaN or inf")
        if self.space == "cosine":
            with np.errstate(over="ignore"):
                norms = np.sqrt(np.add.reduce(v * v, axis=1))
            if not np.isfinite(norms).all():  # float32 overflow of huge finite entries: redo in float64
                v64 = v.astype(np.float64)
                norms = np.sqrt(np.add.reduce(v64 * v64, axis=1))
                v = (v64 / np.where(norms > 0, norms, 1.0)[:, None]).astype(np.float32)
                norms = np.where(norms > 0, 1.0, 0.0)
            zero = norms <= 1e-12
            if zero.any():
                raise InputError(f"{where} rows {np.flatnonzero(zero)[:10].tolist()} are zero vectors (undefined under cosine)")
            v = v / norms[:, None].astype(np.float32)
        return v

    # -- writes -------------------------------------------------------------------------------
    def _grow_ids(self, max_id: int) -> None:
        need = max_id + 1
        if need <= self._state.shape[0]:
            return
        new = max(need, 2 * self._state.shape[0], 1024)
        vecs = np.zeros((new, self.dim), dtype=np.float32)
        vecs[: self._vecs.shape[0]] = self._vecs
        state = np.zeros(new, dtype=np.int8)
        state[: self._state.shape[0]] = self._state
        self._vecs, self._state = vecs, state

    def reserve(self, n_elements: int) -> None:
        """Make room for ``n_elements`` HNSW elements (alive + deleted) without further resizes."""
        if n_elements > self.capacity:
            self._hnsw.resize_index(int(n_elements))

    def _write(self, ids: np.ndarray, vecs: np.ndarray) -> None:
        if ids.size == 0:
            return
        self._grow_ids(int(ids.max()))
        new_slots = int(np.count_nonzero(self._state[ids] == ABSENT))
        if self._n_slots + new_slots > self.capacity:
            self.reserve(max(self._n_slots + new_slots, 2 * self.capacity))
        self._hnsw.add_items(vecs, ids.astype(np.uint64), num_threads=self.config.num_threads)
        was = self._state[ids]
        self._n_slots += new_slots
        self._n_alive += int(np.count_nonzero(was != ALIVE))
        self._vecs[ids] = vecs
        self._state[ids] = ALIVE

    def add(self, ids, vectors) -> None:
        """Insert nodes ``ids i8[n]`` with ``vectors f[n, dim]``; ids must not be alive (deleted ones revive)."""
        ids = self._check_ids(ids, "ids", must_be=DELETED)
        vecs = self._check_vectors(vectors, ids.shape[0], "vectors")
        self._write(ids, vecs)

    def replace(self, ids, vectors) -> None:
        """Give alive nodes ``ids`` new vectors (the graph is re-linked around them)."""
        ids = self._check_ids(ids, "ids", must_be=ALIVE)
        vecs = self._check_vectors(vectors, ids.shape[0], "vectors")
        self._write(ids, vecs)

    def upsert(self, ids, vectors) -> None:
        """``add`` for new ids, ``replace`` for alive ones, in one batch."""
        ids = self._check_ids(ids, "ids")
        vecs = self._check_vectors(vectors, ids.shape[0], "vectors")
        self._write(ids, vecs)

    def delete(self, ids) -> None:
        """Mark alive nodes ``ids`` deleted: search skips them; ``add`` may revive them."""
        ids = self._check_ids(ids, "ids", must_be=ALIVE)
        for i in ids.tolist():
            self._hnsw.mark_deleted(i)
        self._state[ids] = DELETED
        self._n_alive -= ids.shape[0]

    def compact(self) -> None:
        """Rebuild the HNSW graph from the alive nodes only (frees deleted slots)."""
        ids = self.ids()
        fresh = NodeIndex(self.dim, self.config, capacity=max(ids.shape[0], 1))
        fresh.set_ef(self._ef)
        fresh._write(ids, self._vecs[ids])
        self._hnsw, self._n_slots = fresh._hnsw, fresh._n_slots
        self._state[self._state == DELETED] = ABSENT

    # -- queries ------------------------------------------------------------------------------
    def _queries(self, queries) -> tuple[np.ndarray, bool]:
        q = np.asarray(queries)
        single = q.ndim == 1
        return self._check_vectors(q, None, "queries"), single

    def _to_sim(self, dist: np.ndarray) -> np.ndarray:
        return (1.0 - dist) if self._hnsw_space == "ip" else -dist

    def _exact(self, q: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k of ``q f4[b, d]`` over candidate ids ``cand i8[s]`` (all alive)."""
        b = q.shape[0]
        out_i = np.full((b, k), -1, dtype=np.int64)
        out_s = np.full((b, k), -np.inf, dtype=np.float32)
        s = cand.shape[0]
        if s == 0 or k == 0:
            return out_i, out_s
        x = self._vecs[cand]
        sims = q @ x.T  # f4[b, s]
        if self.space == "l2":
            sims = 2.0 * sims - np.add.reduce(x * x, axis=1)[None, :] - np.add.reduce(q * q, axis=1)[:, None]
        kk = min(k, s)
        if kk < s:
            part = np.argpartition(-sims, kk - 1, axis=1)[:, :kk]
        else:
            part = np.broadcast_to(np.arange(s), (b, s))
        top = np.take_along_axis(sims, part, axis=1)
        order = np.argsort(-top, axis=1, kind="stable")
        out_i[:, :kk] = cand[np.take_along_axis(part, order, axis=1)]
        out_s[:, :kk] = np.take_along_axis(top, order, axis=1)
        return out_i, out_s

    def _hnsw_knn(self, q: np.ndarray, k: int, filt=None) -> tuple[np.ndarray, np.ndarray]:
        ef = max(self._ef, k)
        if ef != self._hnsw.ef:
            self._hnsw.set_ef(ef)
        threads = 1 if q.shape[0] <= 8 else self.config.num_threads
        labels, dist = self._hnsw.knn_query(q, k=k, num_threads=threads, filter=filt)
        if ef != self._ef:
            self._hnsw.set_ef(self._ef)
        return labels.view(np.int64), self._to_sim(dist).astype(np.float32, copy=False)

    def search(self, queries, k: int = 8, *, within=None, skip_missing: bool = False,
               valid=None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` nodes by similarity.

        queries: f[dim] or f[b, dim]. within: None (whole index), one id array
        (a set shared by every query, e.g. the children of one node) or a
        sequence of ``b`` id arrays (one set per query). Sets of at most
        ``exact_max`` nodes are searched exactly; larger ones through HNSW
        (over-fetch and keep the set's members, else hnswlib's filter callback,
        else exact). ``skip_missing`` drops unknown/deleted ids from the sets
        instead of raising.

        valid: ``bool[m]`` over node ids (e.g. a store snapshot's ``active``
        column), only with ``within=None``: results are the top-``k`` alive
        nodes ``i`` with ``i < m and valid[i]``, found by over-fetching the
        graph (x4 per retry) without copying the mask, so the cost does not
        grow with ``m``; when the mask rejects most of what the graph returns
        (a fetch past ``max(4 * ef, 256)``) the query runs exactly over the
        valid alive nodes.

        Returns ``(ids i8[b, k], sims f4[b, k])`` sorted by decreasing
        similarity, padded with -1 / -inf (``[k]`` arrays for a 1-D query).
        """
        if valid is not None:
            return self._search_valid(queries, k, within, valid)
        if within is None and type(k) is int and 1 <= k <= self._n_alive and self._n_alive > self.config.exact_max:
            fast = self._search_one_fast(queries, k)
            if fast is not None:
                return fast
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int, got {k!r}")
        q, single = self._queries(queries)
        b = q.shape[0]
        if within is None:
            ids, sims = self._search_all(q, int(k))
        elif isinstance(within, np.ndarray) and within.ndim == 1 or _is_flat_ids(within):
            cand = self._set(within, skip_missing)
            ids, sims = self._search_set(q, int(k), cand)
        else:
            sets = list(within)
            if len(sets) != b:
                raise InputError(f"within holds {len(sets)} id sets for {b} queries; expected one per query")
            cands = [self._set(s, skip_missing, where=f"within[{j}]") for j, s in enumerate(sets)]
            ids = np.full((b, k), -1, dtype=np.int64)
            sims = np.full((b, k), -np.inf, dtype=np.float32)
            for j, cand in enumerate(cands):
                ids[j : j + 1], sims[j : j + 1] = self._search_set(q[j : j + 1], int(k), cand)
        return (ids[0], sims[0]) if single else (ids, sims)

    def _search_valid(self, queries, k, within, valid):
        if within is not None:
            raise InputError("search takes within or valid, not both")
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be a positive int, got {k!r}")
        valid = np.asarray(valid)
        if valid.ndim != 1 or valid.dtype != np.bool_:
            raise InputError(f"valid must be a 1-D bool mask over node ids, got dtype {valid.dtype} shape {valid.shape}")
        q, single = self._queries(queries)
        b, k, m, n = q.shape[0], int(k), valid.shape[0], self._n_alive
        ids = np.full((b, k), -1, dtype=np.int64)
        sims = np.full((b, k), -np.inf, dtype=np.float32)
        fetch = min(n, 2 * k)
        todo = np.arange(b) if n else np.zeros(0, np.int64)
        while todo.size:
            if n <= self.config.exact_max or fetch > max(4 * self._ef, 256):
                break  # small index, or a mask rejecting most nodes: the exact path below
            try:
                lab, sim = self._hnsw_knn(q[todo], fetch)
            except RuntimeError:  # fewer than ``fetch`` alive nodes reachable
                break
            ids[todo], sims[todo] = -1, -np.inf  # a retry rewrites its rows whole
            keep = lab < m
            keep[keep] = valid[lab[keep]]
            rank = np.cumsum(keep, axis=1) - 1
            ok = keep & (rank < k)
            r, c = np.nonzero(ok)
            ids[todo[r], rank[r, c]] = lab[r, c]
            sims[todo[r], rank[r, c]] = sim[r, c]
            short = keep.sum(axis=1) < k
            if fetch == n:  # every alive node seen: fewer than k are valid
                todo = todo[:0]
                break
            todo, fetch = todo[short], min(n, 4 * fetch)
        if todo.size:
            alive = self.ids()
            cand = alive[alive < m]
            cand = cand[valid[cand]]
            ids[todo], sims[todo] = self._exact(q[todo], cand, k)
        return (ids[0], sims[0]) if single else (ids, sims)

    def _search_one_fast(self, queries, k: int):
        """One 1-D query over the whole graph with minimal Python work; None = take the full path.

        A finite sum of squares implies every entry is finite (no cancellation among
        squares), so one dot product validates the query; anything unusual (wrong
        shape, NaN, zero, overflow, too few results) falls back to the checked path.
        """
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim != 1 or q.shape[0] != self.dim:
            return None
        with np.errstate(over="ignore", invalid="ignore"):
            nrm = float(np.dot(q, q))
        if not (1e-24 < nrm < float("inf")):
            return None
        if self.space == "cosine":
            q = q * np.float32(1.0 / np.sqrt(nrm))
        if self._ef < k:
            return None
        try:
            labels, dist = self._hnsw.knn_query(q, k=k, num_threads=1)
        except RuntimeError:
            return None
        dist = dist[0]
        return labels[0].view(np.int64), (1.0 - dist) if self._hnsw_space == "ip" else -dist

    def search_threshold(self, queries, threshold: float, k: int = 8, *, within=None, skip_missing: bool = False):
        """Like :meth:`search` but only results with similarity >= ``threshold`` (ToE's lambda)."""
        if not np.isfinite(threshold):
            raise InputError(f"threshold must be finite, got {threshold!r}")
        ids, sims = self.search(queries, k, within=within, skip_missing=skip_missing)
        below = sims < np.float32(threshold)
        ids = np.where(below, -1, ids)
        sims = np.where(below, np.float32(-np.inf), sims)
        return ids, sims

    def similarity(self, query, ids) -> np.ndarray:
        """Exact ``f4[n]`` similarity of one query vector to alive nodes ``ids``."""
        q, _ = self._queries(query)
        ids = self._check_ids(ids, "ids", must_be=ALIVE, unique=False)
        x = self._vecs[ids]
        s = x @ q[0]
        if self.space == "l2":
            s = 2.0 * s - np.add.reduce(x * x, axis=1) - float(q[0] @ q[0])
        return s.astype(np.float32, copy=False)

    def _set(self, within, skip_missing: bool, where: str = "within") -> np.ndarray:
        """Validated candidate ids; duplicates allowed (removed here for small sets, by mask for large)."""
        if skip_missing:
            arr = self._check_ids(within, where, unique=False)
            arr = arr[self.contains(arr)]
        else:
            arr = self._check_ids(within, where, must_be=ALIVE, unique=False)
        if arr.shape[0] <= max(self.config.exact_max, 1):
            arr = _sorted_unique(arr)
        return arr

    def _search_all(self, q: np.ndarray, k: int):
        b = q.shape[0]
        kk = min(k, self._n_alive)
        ids = np.full((b, k), -1, dtype=np.int64)
        sims = np.full((b, k), -np.inf, dtype=np.float32)
        if kk == 0:
            return ids, sims
        if self._n_alive <= self.config.exact_max:
            return self._exact(q, self.ids(), k)
        try:
            ids[:, :kk], sims[:, :kk] = self._hnsw_knn(q, kk)
        except RuntimeError:  # graph could not produce kk alive results (many deletions): exact
            return self._exact(q, self.ids(), k)
        return ids, sims

    def _search_set(self, q: np.ndarray, k: int, cand: np.ndarray):
        if cand.shape[0] <= self.config.exact_max:
            return self._exact(q, cand, k)
        mask = np.zeros(self._state.shape[0], dtype=bool)
        mask[cand] = True
        n_set = int(np.count_nonzero(mask))
        if n_set <= max(self.config.exact_max, k):
            return self._exact(q, np.flatnonzero(mask), k)
        b = q.shape[0]
        ids = np.full((b, k), -1, dtype=np.int64)
        sims = np.full((b, k), -np.inf, dtype=np.float32)
        todo = np.arange(b)
        # 1) over-fetch without a filter and keep the set's members: one plain HNSW query when
        #    the set is a sizeable fraction of the index (no Python callback per visited node).
        frac = n_set / max(self._n_alive, 1)
        fetch = min(int(np.ceil(2.0 * k / frac)) + k, self._n_alive)
        if fetch <= max(4 * self._ef, 256):
            try:
                lab, sim = self._hnsw_knn(q, fetch)
            except RuntimeError:
                lab = None
            if lab is not None:
                keep = mask[lab]
                rank = np.cumsum(keep, axis=1) - 1
                ok = keep & (rank < k)
                rows, cols = np.nonzero(ok)
                ids[rows, rank[rows, cols]] = lab[rows, cols]
                sims[rows, rank[rows, cols]] = sim[rows, cols]
                todo = np.flatnonzero(keep.sum(axis=1) < k)
        # 2) rows still short of k: hnswlib with a filter callback, else exact over the set.
        if todo.size:
            try:
                ids[todo], sims[todo] = self._hnsw_knn(q[todo], k, filt=mask.__getitem__)
            except RuntimeError:  # filter too selective for the beam
                ids[todo], sims[todo] = self._exact(q[todo], np.flatnonzero(mask), k)
        return ids, sims

    # -- persistence --------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """SHA-256 (hex, 32 chars) of the alive and deleted id sets: what the node table must match."""
        h = hashlib.sha256()
        h.update(self.ids().tobytes())
        h.update(b"|")
        h.update(np.flatnonzero(self._state == DELETED).astype(np.int64).tobytes())
        return h.hexdigest()[:32]

    def save(self, path: str | Path, *, tag: dict | None = None) -> Path:
        """Write the index to ONE file ``path``, atomically (:func:`engine.atomic_io.atomic_writer`).

        Layout: magic ``TOENIDX1``, u8 length + JSON meta (format, dim, config,
        counts, fingerprint, ``tag``), u8 length + ``state i1[ids]``, then the
        hnswlib graph as hnswlib writes it. ``tag`` is any JSON the caller wants
        checked on load (the store adapter records the node table it matches).
        Fits the store checkpoint's ``extras={name: writer(path)}`` hook as is.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = np.ascontiguousarray(self._state[: self._used_ids()])
        meta = {
            "format": FORMAT,
            "dim": self.dim,
            "config": {f: getattr(self.config, f) for f in self.config.__dataclass_fields__},
            "ef_search": self._ef,
            "count": self._n_alive,
            "slots": self._n_slots,
            "fingerprint": self.fingerprint(),
            "tag": tag or {},
        }
        head = json.dumps(meta).encode()
        fd, graph_tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".graph.tmp", dir=path.parent)
        os.close(fd)
        try:
            self._hnsw.save_index(graph_tmp)  # hnswlib writes only to a path
            _stage("graph")
            with atomic_io.atomic_writer(path) as out, open(graph_tmp, "rb") as graph:
                out.write(_MAGIC)
                out.write(np.uint64(len(head)).tobytes())
                out.write(head)
                out.write(np.uint64(state.nbytes).tobytes())
                out.write(state.tobytes())
                out.flush()
                _stage("header")
                shutil.copyfileobj(graph, out, 1 << 24)
        finally:
            if os.path.exists(graph_tmp):
                os.unlink(graph_tmp)
        return path

    def _used_ids(self) -> int:
        nz = np.flatnonzero(self._state != ABSENT)
        return int(nz[-1]) + 1 if nz.size else 0

    @staticmethod
    def read_header(path: str | Path) -> tuple[dict, np.ndarray, int]:
        """``(meta, state i1[ids], graph_offset)`` of a saved index, without loading the graph."""
        path = Path(path)
        try:
            with open(path, "rb") as fh:
                if fh.read(len(_MAGIC)) != _MAGIC:
                    raise PersistenceError(f"node index {str(path)!r} is not a node index file (bad magic)")
                n_head = int(np.frombuffer(fh.read(8), dtype=np.uint64)[0])
                meta = json.loads(fh.read(n_head))
                n_state = int(np.frombuffer(fh.read(8), dtype=np.uint64)[0])
                raw = fh.read(n_state)
                if len(raw) != n_state:
                    raise PersistenceError(f"node index {str(path)!r} is truncated (state)")
                state = np.frombuffer(raw, dtype=np.int8).copy()
                offset = fh.tell()
        except PersistenceError:
            raise
        except (OSError, ValueError, IndexError) as exc:
            raise PersistenceError(f"node index {str(path)!r} is missing or unreadable: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            got = meta.get("format") if isinstance(meta, dict) else meta
            raise PersistenceError(f"node index {str(path)!r} has format {got!r}, expected {FORMAT}")
        return meta, state, offset

    @classmethod
    def load(cls, path: str | Path, *, expected_ids=None, expected_count: int | None = None,
             expected_dim: int | None = None) -> "NodeIndex":
        """Read an index saved by :meth:`save` and check it against its node table.

        expected_ids: the node ids the store says are indexed (any order);
        expected_count: their number when the ids are not at hand;
        expected_dim: the embedder's width. A mismatch raises PersistenceError
        before the graph is read. ``.tag`` holds the saved tag.
        """
        path = Path(path)
        meta, state, offset = cls.read_header(path)
        if expected_dim is not None and meta["dim"] != expected_dim:
            raise PersistenceError(f"node index {str(path)!r} has dim {meta['dim']}, the embedder gives {expected_dim}")
        try:
            cfg = IndexConfig(**meta["config"])
        except Exception as exc:
            raise PersistenceError(f"node index {str(path)!r}: bad config in its header: {exc}") from exc
        self = cls(int(meta["dim"]), cfg)
        self.tag = meta.get("tag", {})
        self._state = state
        self._vecs = np.zeros((state.shape[0], self.dim), dtype=np.float32)
        self._n_alive = int(np.count_nonzero(self._state == ALIVE))
        self._n_slots = int(np.count_nonzero(self._state != ABSENT))
        if self._n_alive != meta["count"] or self._n_slots != meta["slots"] or self.fingerprint() != meta["fingerprint"]:
            raise PersistenceError(f"node index {str(path)!r}: node states do not match the header (corrupted file)")
        if expected_count is not None and expected_count != self._n_alive:
            raise PersistenceError(
                f"node index {str(path)!r} holds {self._n_alive} nodes but the node table expects {expected_count}; "
                f"the index does not belong to this store (rebuild it)"
            )
        if expected_ids is not None:
            exp = _sorted_unique(np.asarray(expected_ids, dtype=np.int64).reshape(-1))
            got = self.ids()
            if exp.shape != got.shape or not np.array_equal(exp, got):
                missing = np.setdiff1d(exp, got)[:5].tolist()
                extra = np.setdiff1d(got, exp)[:5].tolist()
                raise PersistenceError(
                    f"node index {str(path)!r} does not match its node table: {got.shape[0]} ids indexed, "
                    f"{exp.shape[0]} expected; missing {missing}, unexpected {extra}"
                )
        with tempfile.TemporaryDirectory(prefix="toe-nodeindex-") as tmp:
            graph = Path(tmp) / "graph.bin"
            with open(path, "rb") as src, open(graph, "wb") as dst:
                src.seek(offset)
                shutil.copyfileobj(src, dst, 1 << 24)
            try:
                self._hnsw = hnswlib.Index(space=self._hnsw_space, dim=self.dim)
                self._hnsw.load_index(str(graph), max_elements=max(self._n_slots, cfg.capacity))
            except RuntimeError as exc:
                raise PersistenceError(f"node index {str(path)!r}: the hnswlib graph is unreadable: {exc}") from exc
        if self._hnsw.element_count != self._n_slots:
            raise PersistenceError(
                f"node index {str(path)!r}: graph holds {self._hnsw.element_count} elements, the header {self._n_slots}"
            )
        self._ef = int(meta.get("ef_search", cfg.ef_search))
        self._hnsw.set_ef(self._ef)
        alive = self.ids()
        if alive.size:
            try:
                self._vecs[alive] = self._hnsw.get_items(alive.astype(np.uint64), return_type="numpy")
            except RuntimeError as exc:
                raise PersistenceError(f"node index {str(path)!r}: graph lacks alive nodes of the header: {exc}") from exc
            v = self._vecs[alive]
            ok = np.isfinite(v).all() and (self.space != "cosine" or np.allclose(np.add.reduce(v * v, axis=1), 1.0, atol=1e-3))
            if not ok:
                raise PersistenceError(f"node index {str(path)!r}: graph vectors are not valid {self.space} vectors (foreign or corrupted file)")
        return self


def _sorted_unique(arr: np.ndarray) -> np.ndarray:
    """Sorted distinct values of ``i8[n]`` (np.unique's hash path is slow for small arrays)."""
    if arr.shape[0] <= 1:
        return arr
    srt = np.sort(arr)
    keep = np.empty(srt.shape[0], dtype=bool)
    keep[0] = True
    np.not_equal(srt[1:], srt[:-1], out=keep[1:])
    return srt[keep]


def _is_flat_ids(within) -> bool:
    """True for one flat id sequence (list/tuple/range of ints), False for a sequence of sets."""
    if isinstance(within, range):
        return True
    if isinstance(within, (list, tuple)):
        return len(within) == 0 or all(isinstance(x, (int, np.integer)) for x in within)
    return False


def build_index(ids, vectors, config: IndexConfig | None = None, **overrides) -> NodeIndex:
    """A :class:`NodeIndex` holding ``ids`` with ``vectors`` (capacity reserved up front)."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise InputError(f"vectors must be 2-D [n, dim], got shape {vectors.shape}")
    ix = NodeIndex(vectors.shape[1], config, **overrides)
    ix.reserve(vectors.shape[0])
    ix.add(ids, vectors)
    return ix

