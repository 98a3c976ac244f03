"""Read API of the experience store, shared by the writable store and read-only views.

:class:`StoreReader` reads the struct-of-arrays columns (see
:mod:`engine.store.columns`); :class:`StoreView` is a read-only reader over a
snapshot dict (zero-copy), built by :meth:`ExperienceStore.from_snapshot`.
"""

from __future__ import annotations

import hashlib
import math
from typing import Mapping, Sequence

import numpy as np

from engine.errors import InputError, StoreError
from engine.store import columns as C
from engine.store import validate as V
from kernels import store_tree as KT

DEFAULT_HORIZONS = ("h10", "h20", "h40")  # ToE eq. (A1): 10-, 20-, 40-trading-day horizons
FINANCE_LEVELS = ("industry", "factor", "analysis_direction")  # ToE "Tree Representation..."
LUT_SIZE = 1 << 16
RULES = ("formula", "asymmetric", "binary", "delta")
AGGS = {"max": 0, "mean": 1}


def text_key(text: str) -> int:
    """Stable 64-bit key of a node text: the first 8 bytes of its BLAKE2b digest (little endian)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def normalized_key(text: str) -> int:
    """:func:`text_key` of ``text`` with case and runs of whitespace ignored (finance's node keys:
    "Policy  planning" and "policy planning" are one node under a parent)."""
    return text_key(" ".join(text.lower().split()))


def horizon_names(horizons) -> tuple[str, ...]:
    """``(10, 20, 40)`` -> ``("h10", "h20", "h40")``; names are kept as given."""
    if isinstance(horizons, (str, int)) or not isinstance(horizons, Sequence) or len(horizons) == 0:
        raise InputError(f"horizons must be a non-empty sequence of names or integers, got {horizons!r}")
    out = []
    for h in horizons:
        if isinstance(h, (bool, np.bool_)):
            raise InputError(f"horizons must be names or integers, got {h!r}")
        if isinstance(h, (int, np.integer)):
            out.append(f"h{int(h)}")
        elif isinstance(h, str) and h and h.replace("_", "").isalnum():
            out.append(h)
        else:
            raise InputError(f"horizon names must be non-empty alphanumeric strings, got {h!r}")
    if len(set(out)) != len(out):
        raise InputError(f"horizons must be distinct, got {out}")
    return tuple(out)


class StoreReader:
    """Read API over the store's arrays (shared by the store and its read-only views)."""

    horizons: tuple[str, ...]
    levels: tuple[str, ...]
    depth: int
    q0: float
    eta: float
    eta_task: float
    q_min: float

    # --- sizes and columns ----------------------------------------------------------------
    @property
    def n_experiences(self) -> int:
        return self._n_exp

    @property
    def n_nodes(self) -> int:
        """Number of nodes, the virtual root (node 0) included."""
        return self._n_nodes

    def __len__(self) -> int:
        return self._n_exp

    @property
    def n_horizons(self) -> int:
        return len(self.horizons)

    @property
    def q_max(self) -> float:
        return 2.0 * self.q0 if self._q_max is None else self._q_max

    @property
    def reliability(self) -> np.ndarray:
        """Read-only view ``f8[n, H]`` of Q (a strided view into the packed block)."""
        v = self._block[: self._n_exp, : self.n_horizons]
        v = v.view()
        v.flags.writeable = False
        return v

    @property
    def hit(self) -> np.ndarray:
        """Hit counts ``i8[n]`` (a copy)."""
        return self._block[: self._n_exp, C.hit_col(self.n_horizons)].astype(np.int64)

    @property
    def recall(self) -> np.ndarray:
        """Recall counts ``i8[n]`` (a copy)."""
        return self._block[: self._n_exp, C.recall_col(self.n_horizons)].astype(np.int64)

    @property
    def created(self) -> np.ndarray:
        return self._ro(self._exp["created"][: self._n_exp])

    @property
    def external_ids(self) -> np.ndarray:
        """External ids ``i8[n]`` (a path CSV's ``eid`` values), strictly increasing with the row."""
        return self._ro(self._exp["external_id"][: self._n_exp])

    @property
    def active(self) -> np.ndarray:
        """``bool[n]``: False for an experience merged into another (see ``ExperienceStore.merge``)."""
        return self._ro(self._exp["active"][: self._n_exp])

    @property
    def merged_into(self) -> np.ndarray:
        """``i8[n]``: the row an experience was merged into, -1 while active."""
        return self._ro(self._exp["merged_into"][: self._n_exp])

    def rows_of(self, external_ids, name: str = "eids") -> np.ndarray:
        """Dense rows ``i8[b]`` (what kernels and every other method take) of external ids.

        One ``np.searchsorted`` over the sorted external-id column; raises
        :class:`StoreError` naming the first id the store does not hold.
        """
        ids = V.int_array(external_ids, name)
        ext = self._exp["external_id"][: self._n_exp]
        rows = np.searchsorted(ext, ids)
        bad = np.flatnonzero((rows >= ext.shape[0]) | (ext[np.minimum(rows, max(ext.shape[0] - 1, 0))] != ids)
                            if ext.shape[0] else np.ones(ids.shape[0], bool))
        if bad.size:
            i = int(bad[0])
            raise StoreError(f"unknown eid {int(ids[i])} at position {i} of {name}; the store holds "
                             f"{self._n_exp} experiences" + (f" with eids {int(ext[0])}..{int(ext[-1])}"
                                                             if ext.shape[0] else ""))
        return rows.astype(np.int64)

    @property
    def paths(self) -> np.ndarray:
        """Node ids ``i8[n, L]`` of each experience's path (root excluded), -1 after the leaf."""
        return self._ro(self._exp["path"][: self._n_exp])

    def node_column(self, name: str) -> np.ndarray:
        """Read-only node column (``parent``, ``depth``, ``key``, ``eid``, ...) over all nodes."""
        if name not in C.NODE_COLUMNS:
            raise InputError(f"unknown node column {name!r}; valid: {', '.join(C.NODE_COLUMNS)}")
        return self._ro(self._nodes[name][: self._n_nodes])

    @staticmethod
    def _ro(arr: np.ndarray) -> np.ndarray:
        v = arr.view()
        v.flags.writeable = False
        return v

    def columns(self) -> "StoreColumns":
        """Every column as a read-only array, for a reader on a hot path (one episode's thousands of lookups).

        Nothing is checked per lookup here: ids must come from this store (a snapshot's own paths, children
        and finds). The arrays are views of the store's (no copy); a view of a snapshot never changes, a
        writable store's do as it is written. Texts: :meth:`StoreColumns.text_of`; child lookups:
        :meth:`StoreColumns.find` (the store's own hash index)."""
        return StoreColumns(
            nodes={n: self._ro(self._nodes[n][: self._n_nodes]) for n in C.NODE_COLUMNS},
            experiences={n: self._ro(self._exp[n][: self._n_exp]) for n in C.EXPERIENCE_COLUMNS},
            reliability=self.reliability, hit=self._ro(self._block[: self._n_exp, C.hit_col(self.n_horizons)]),
            text=self._ro(self._text[: self._text_used]), pk_table=self._ro(self._pk_table))

    # --- nodes ----------------------------------------------------------------------------
    def _check_nodes(self, nodes, name="node") -> np.ndarray:
        arr = V.int_array(np.atleast_1d(nodes), name)
        bad = np.flatnonzero((arr < 0) | (arr >= self._n_nodes))
        if bad.size:
            raise StoreError(f"unknown {name} id {int(arr[bad[0]])}; the store has {self._n_nodes} nodes")
        return arr

    def node_text(self, node: int) -> str:
        nid = int(self._check_nodes(node)[0])
        end = self._nodes["text_end"]
        start = 0 if nid == 0 else int(end[nid - 1])
        return bytes(self._text[start : int(end[nid])]).decode("utf-8")

    def node_texts(self, nodes) -> list[str]:
        return [self.node_text(int(n)) for n in self._check_nodes(nodes)]

    def path_texts(self, eid: int) -> list[str]:
        """Texts of experience ``eid``'s path, root-to-leaf."""
        e = self._check_eids(np.atleast_1d(eid))[0]
        return [self.node_text(int(v)) for v in self._exp["path"][e] if v >= 0]

    def find(self, parent: int, key) -> int:
        """Node id of child ``key`` (int key or text) under ``parent``, or -1."""
        self._check_nodes(parent, "parent")
        k = text_key(key) if isinstance(key, str) else int(key)
        return int(KT.pk_find(self._pk_table, self._nodes["parent"], self._nodes["key"], int(parent), np.uint64(k & 0xFFFFFFFFFFFFFFFF)))

    def find_batch(self, parents, keys) -> np.ndarray:
        """``i8[b]`` node ids with (parents[i], keys[i]) or -1. keys are u8/i8[b] 64-bit keys."""
        parents = self._check_nodes(parents, "parent")
        keys = _keys_u64(keys, "keys", 1)
        if keys.shape[0] != parents.shape[0]:
            raise InputError(f"parents and keys must have the same length, got {parents.shape[0]} and {keys.shape[0]}")
        out = np.empty(keys.shape[0], dtype=np.int64)
        KT.pk_find_batch(self._pk_table, self._nodes["parent"], self._nodes["key"], parents, keys, out)
        return out

    def find_key(self, keys) -> np.ndarray:
        """``i8[b]``: the lowest node id with each 64-bit key (or text), or -1."""
        if isinstance(keys, str):
            keys = [keys]
        if isinstance(keys, (list, tuple)) and keys and isinstance(keys[0], str):
            keys = [text_key(k) for k in keys]
        keys = _keys_u64(keys if np.ndim(keys) else [keys], "keys", 1)
        out = np.empty(keys.shape[0], dtype=np.int64)
        self._ensure_key_index()
        KT.key_find_first(self._key_table, self._nodes["key"], self._next_same_key, keys, out)
        return out

    def _ensure_key_index(self) -> None:
        """Build the key -> nodes index on first use (kept up to date by later adds)."""
        if self._key_table.shape[0]:
            return
        size = max(self._pk_table.shape[0], C.next_pow2(2 * max(self._n_nodes, 1)))
        table = np.full(size, -1, dtype=np.int64)
        chain = self._nodes["next_same_key"]
        if not chain.flags.writeable:  # a read-only view keeps a private chain
            chain = np.full(self._n_nodes, -1, dtype=np.int64)
            self._next_same_key_private = chain
        KT.build_key_table(table, self._nodes["key"], chain, self._n_nodes)
        self._key_table = table

    @property
    def _next_same_key(self) -> np.ndarray:
        return getattr(self, "_next_same_key_private", self._nodes["next_same_key"])

    def nodes_with_key(self, key) -> np.ndarray:
        """All node ids with ``key`` (int or text), ascending."""
        k = np.uint64(text_key(key) if isinstance(key, str) else int(key) & 0xFFFFFFFFFFFFFFFF)
        out = []
        self._ensure_key_index()
        nid = int(KT.key_find(self._key_table, self._nodes["key"], k))
        while nid >= 0:
            out.append(nid)
            nid = int(self._next_same_key[nid])
        return np.array(sorted(out), dtype=np.int64)

    def find_path(self, path) -> int:
        """Node id at the end of ``path`` (texts or int keys, root-to-leaf), or -1."""
        node = 0
        for item in path:
            node = self.find(node, item)
            if node < 0:
                return -1
        return node

    def eid_of(self, path) -> int:
        """Experience id of the path (texts or keys) or of a node id given as int, or -1."""
        if isinstance(path, (int, np.integer)):
            return int(self._nodes["eid"][self._check_nodes(path)[0]])
        node = self.find_path(path)
        return -1 if node < 0 else int(self._nodes["eid"][node])

    def children(self, node: int = 0) -> np.ndarray:
        """Children of ``node`` (root = 0) in insertion order, ``i8[c]``."""
        nid = self._check_nodes(node)
        cnt = np.empty(1, dtype=np.int64)
        KT.count_children(self._nodes["first_child"], self._nodes["next_sibling"], nid, cnt)
        out = np.empty(int(cnt[0]), dtype=np.int64)
        KT.list_children(self._nodes["first_child"], self._nodes["next_sibling"], int(nid[0]), out)
        return out

    def topk_children(self, nodes, horizon, k: int, agg: str = "max"):
        """Top-``k`` children of each node by reliability on ``horizon`` (index or name).

        A child that ends an experience scores its Q; an inner child scores the
        ``agg`` ("max" or "mean") of the experiences below it; NaN if none.
        Returns ``(ids i8[b, k], scores f8[b, k])`` padded with -1 / NaN, or 1-D
        arrays when ``nodes`` is a scalar.
        """
        scalar = np.ndim(nodes) == 0
        nids = self._check_nodes(np.atleast_1d(nodes))
        h = V.horizon_index(horizon, self.horizons)
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)) or k < 1:
            raise InputError(f"k must be an integer >= 1, got {k!r}")
        if agg not in AGGS:
            raise InputError(f"agg must be one of {', '.join(AGGS)}, got {agg!r}")
        ids = np.empty((nids.shape[0], int(k)), dtype=np.int64)
        scores = np.empty((nids.shape[0], int(k)), dtype=np.float64)
        stack = np.empty(max(self._n_nodes, 1), dtype=np.int64)
        KT.topk_children(
            self._nodes["first_child"], self._nodes["next_sibling"], self._nodes["eid"], self._block,
            nids, h, int(k), AGGS[agg], stack, ids, scores,
        )
        return (ids[0], scores[0]) if scalar else (ids, scores)

    def subtree(self, node: int) -> np.ndarray:
        """Node ids of the subtree under ``node`` (itself first), preorder."""
        nid = int(self._check_nodes(node)[0])
        stack = np.empty(self._n_nodes, dtype=np.int64)
        out = np.empty(self._n_nodes, dtype=np.int64)
        n = KT.subtree_nodes(self._nodes["first_child"], self._nodes["next_sibling"], nid, stack, out)
        return out[:n].copy()

    def subtree_eids(self, node: int) -> np.ndarray:
        """Experience ids ending in the subtree under ``node``, ascending (sharding by subtree)."""
        eids = self._nodes["eid"][self.subtree(node)]
        return np.sort(eids[eids >= 0])

    # --- internal -------------------------------------------------------------------------
    def _check_eids(self, eids, name="eids") -> np.ndarray:
        arr = V.int_array(eids, name)
        V.eids_in_range(arr, self._n_exp, name)
        return arr

    def snapshot(self, copy: bool = False) -> dict[str, np.ndarray]:
        """Read-only arrays holding the whole store (see :mod:`engine.rounds`).

        ``copy=False`` returns zero-copy read-only views: they see later in-place
        reliability updates of this store (not appended rows). ``copy=True``
        returns independent copies. Rebuild a reader with
        :meth:`ExperienceStore.from_snapshot`.
        """
        snap: dict[str, np.ndarray] = {}
        nn, ne = self._n_nodes, self._n_exp
        for key, name in _NODE_KEYS:
            snap[key] = self._nodes[name][:nn]
        for key, name in _EXP_KEYS:
            snap[key] = self._exp[name][:ne]
        snap["block"] = self._block[:ne]
        snap["text"] = self._text[: self._text_used]
        snap["pk_table"] = self._pk_table
        snap["key_table"] = self._key_table
        names = (self.horizons, self.levels)
        meta = getattr(self, "_meta_names", None)  # the names never change: their arrays are made once
        if meta is None or meta[0] != names:
            meta = self._meta_names = (names, np.array(self.horizons, dtype=str), np.array(self.levels, dtype=str))
        snap["meta_horizons"], snap["meta_levels"] = meta[1], meta[2]
        snap["meta_params"] = np.array(
            [self.q0, self.eta, self.eta_task, self.q_min,
             np.nan if self._q_max is None else self._q_max, self.depth], dtype=np.float64)
        out = {}
        for k, v in snap.items():
            v = v.copy() if copy else v.view()
            v.flags.writeable = False
            out[k] = v
        return out

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(experiences={self._n_exp}, nodes={self._n_nodes}, "
                f"horizons={list(self.horizons)}, depth={self.depth})")


_U64_MASK = (1 << 64) - 1


def _keys_u64(keys, name: str, ndim: int) -> np.ndarray:
    """64-bit keys as C-contiguous uint64 (negative int64 keys wrap, Python ints up to 2**64 - 1)."""
    if not isinstance(keys, np.ndarray):
        try:
            obj = np.array(keys, dtype=object)
        except Exception as exc:
            raise InputError(f"{name} must be an array of integer keys: {exc}") from exc
        if obj.ndim != ndim:
            raise InputError(f"{name} must be {ndim}-D, got shape {obj.shape}")
        flat = obj.ravel()
        for k in flat:
            if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
                raise InputError(f"{name} must hold integer keys, got {type(k).__name__} {k!r:.40}")
        return np.array([int(k) & _U64_MASK for k in flat], dtype=np.uint64).reshape(obj.shape)
    arr = keys
    if arr.ndim != ndim:
        raise InputError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.uint64)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name} must have an integer dtype (64-bit keys), got {arr.dtype}")
    return np.ascontiguousarray(arr.astype(np.uint64, casting="unsafe"))


class StoreColumns:
    """The store's columns, read-only and unchecked (:meth:`StoreReader.columns`): ``nodes`` and ``experiences``
    (name -> array, :mod:`engine.store.columns`), ``reliability`` ``f8[n, H]``, ``hit`` ``f8[n]`` (a view,
    not a copy as :attr:`StoreReader.hit`), the node ``text`` buffer, and what :meth:`find` reads."""

    __slots__ = ("nodes", "experiences", "reliability", "hit", "text", "_pk_table")

    def __init__(self, nodes, experiences, reliability, hit, text, pk_table):
        self.nodes, self.experiences, self.reliability, self.hit = nodes, experiences, reliability, hit
        self.text, self._pk_table = text, pk_table

    def text_of(self, node: int) -> str:
        """Node ``node``'s text."""
        end = self.nodes["text_end"]
        return self.text[(0 if node == 0 else end.item(node - 1)): end.item(node)].tobytes().decode("utf-8")

    def find(self, parent: int, key: int) -> int:
        """Node id of the child with 64-bit ``key`` (an int below 2**64) under ``parent``, or -1."""
        return int(KT.pk_find(self._pk_table, self.nodes["parent"], self.nodes["key"], int(parent), np.uint64(key)))


class StoreView(StoreReader):
    """A read-only store over a snapshot dict (no copies). Built by :meth:`ExperienceStore.from_snapshot`."""

    def __init__(self, snap: Mapping[str, np.ndarray]):
        _load_snapshot_into(self, snap)


_NODE_KEYS = tuple((f"node_{n}", n) for n in C.NODE_COLUMNS)  # (snapshot key, column) pairs
_EXP_KEYS = tuple((f"exp_{n}", n) for n in C.EXPERIENCE_COLUMNS)
_SNAPSHOT_KEYS = (tuple(k for k, _ in _NODE_KEYS + _EXP_KEYS)
                  + ("block", "text", "pk_table", "key_table", "meta_horizons", "meta_levels", "meta_params"))


def _load_snapshot_into(obj, snap: Mapping[str, np.ndarray]) -> None:
    missing = [k for k in _SNAPSHOT_KEYS if k not in snap]
    if missing:
        raise InputError(f"snapshot is missing array(s) {', '.join(missing)}")
    params = np.asarray(snap["meta_params"], dtype=np.float64).tolist()
    obj.horizons = tuple(str(h) for h in np.asarray(snap["meta_horizons"]).tolist())
    obj.levels = tuple(str(v) for v in np.asarray(snap["meta_levels"]).tolist())
    obj.q0, obj.eta, obj.eta_task, obj.q_min = params[:4]
    obj._q_max = None if math.isnan(params[4]) else params[4]
    obj.depth = int(params[5])
    obj._nodes = {n: np.asarray(snap[k]) for k, n in _NODE_KEYS}
    obj._exp = {n: np.asarray(snap[k]) for k, n in _EXP_KEYS}
    obj._block = np.asarray(snap["block"])
    obj._text = np.asarray(snap["text"])
    obj._text_used = obj._text.shape[0]
    obj._pk_table = np.asarray(snap["pk_table"])
    obj._key_table = np.asarray(snap["key_table"])
    obj._n_nodes = obj._nodes["parent"].shape[0]
    obj._n_exp = obj._block.shape[0]
    if obj._exp["path"].shape != (obj._n_exp, obj.depth) or obj._block.shape[1] != C.block_width(len(obj.horizons)):
        raise InputError("snapshot arrays have inconsistent shapes")
