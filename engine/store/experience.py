"""The writable experience store: a struct-of-arrays ToE tree with reliability vectors.

Reads are inherited from :class:`engine.store.reader.StoreReader`; this module
adds building the tree, counters, the reliability updates (ToE eqs. (8)-(10),
(A3)-(A6)), delayed feedback, snapshots and persistence.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from engine.errors import InputError, StoreError
from engine.store import columns as C
from engine.store import validate as V
from engine.store.ledger import FeedbackLedger
from engine.store.reader import (  # noqa: F401  (re-exported)
    DEFAULT_HORIZONS,
    FINANCE_LEVELS,
    LUT_SIZE,
    RULES,
    StoreReader,
    StoreView,
    _keys_u64,
    _load_snapshot_into,
    horizon_names,
    normalized_key,
    text_key,
)
from kernels import reliability as KR
from kernels import store_tree as KT


_LUT: list = []


def _inv_log_lut() -> np.ndarray:
    """The formula rule's ``1 / (1 + ln(1 + n_hit))`` table (kernels.reliability.inv_log_lut), made once per
    process and shared by every store (the kernels only read it)."""
    if not _LUT:
        _LUT.append(KR.inv_log_lut(LUT_SIZE))
    return _LUT[0]


class ExperienceStore(StoreReader):
    """Writable experience tree with per-horizon reliability (ToE).

    Parameters: ``horizons`` (names like ``"h10"`` or integers ``10``),
    ``depth`` L (max path length), ``q0`` neutral prior (new experiences start at
    q0), ``eta`` formula learning rate, ``eta_task`` asymmetric decay, bounds
    ``q_min``/``q_max`` (default ``[0, 2*q0]``), ``capacity`` initial experience
    rows, ``levels`` names of the tree levels (CSV columns).
    """

    def __init__(
        self,
        horizons=DEFAULT_HORIZONS,
        depth: int = 3,
        q0: float = 1.0,
        eta: float = 10.0,
        eta_task: float = 1.0,
        q_min: float = 0.0,
        q_max: float | None = None,
        capacity: int = 1024,
        node_capacity: int | None = None,
        levels: Sequence[str] | None = None,
    ):
        self.horizons = horizon_names(horizons)
        if isinstance(depth, (bool, np.bool_)) or not isinstance(depth, (int, np.integer)) or depth < 1:
            raise InputError(f"depth must be an integer >= 1, got {depth!r}")
        self.depth = int(depth)
        self.q0 = V.finite_scalar(q0, "q0")
        if self.q0 <= 0:
            raise InputError(f"q0 must be > 0, got {self.q0}")
        self.eta = V.finite_scalar(eta, "eta", 0.0)
        self.eta_task = V.finite_scalar(eta_task, "eta_task", 0.0, 1.0)
        self.q_min = V.finite_scalar(q_min, "q_min")
        self._q_max = None if q_max is None else V.finite_scalar(q_max, "q_max")
        if not self.q_min <= self.q0 <= self.q_max:
            raise InputError(f"bounds must satisfy q_min <= q0 <= q_max, got {self.q_min}, {self.q0}, {self.q_max}")
        if levels is None:
            levels = FINANCE_LEVELS if self.depth == 3 else tuple(f"level_{i + 1}" for i in range(self.depth))
        levels = tuple(levels)
        if len(levels) != self.depth or len(set(levels)) != self.depth or not all(isinstance(v, str) and v for v in levels):
            raise InputError(f"levels must be {self.depth} distinct non-empty names, got {list(levels)}")
        self.levels = levels
        for name, v in (("capacity", capacity), ("node_capacity", node_capacity)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise InputError(f"{name} must be an integer >= 1, got {v!r}")
        cap = int(capacity)
        ncap = int(node_capacity) if node_capacity is not None else cap + 1
        H = len(self.horizons)
        self._n_exp = 0
        self._exp = {n: np.empty(C.column_shape(w, cap, self.depth, H), dtype=dt)
                     for n, (dt, w) in C.EXPERIENCE_COLUMNS.items()}
        self._block = C.aligned_empty(cap, C.block_width(H))
        self._nodes = {n: np.empty(C.column_shape(w, ncap, self.depth, H), dtype=dt)
                       for n, (dt, w) in C.NODE_COLUMNS.items()}
        self._text = np.empty(4096, dtype=np.uint8)  # grows on demand
        self._text_used = 0
        # node 0: the virtual root
        for n, v in (("parent", -1), ("depth", 0), ("key", 0), ("eid", -1), ("first_child", -1),
                     ("last_child", -1), ("next_sibling", -1), ("next_same_key", -1), ("text_end", 0)):
            self._nodes[n][0] = v
        self._n_nodes = 1
        self._pk_table = np.full(C.next_pow2(2 * ncap), -1, dtype=np.int64)
        self._key_table = np.empty(0, dtype=np.int64)  # built on the first lookup by key
        self._lut = _inv_log_lut()
        self.ledger = FeedbackLedger()
        self.extra_paths: dict[str, Path] = {}

    # --- growth ---------------------------------------------------------------------------
    def _reserve_nodes(self, n_nodes: int) -> None:
        cap = self._nodes["parent"].shape[0]
        if n_nodes > cap:
            new = max(n_nodes, 2 * cap)
            self._nodes = {n: C.grow(a, self._n_nodes, new) for n, a in self._nodes.items()}
        if 2 * n_nodes > self._pk_table.shape[0]:
            size = C.next_pow2(max(2 * n_nodes, 2 * self._pk_table.shape[0]))
            self._pk_table = np.full(size, -1, dtype=np.int64)
            if self._key_table.shape[0]:
                self._key_table = np.full(size, -1, dtype=np.int64)
            KT.rebuild_tables(self._pk_table, self._key_table, self._nodes["parent"], self._nodes["key"],
                              self._nodes["next_same_key"], self._n_nodes)

    def _reserve_experiences(self, n_exp: int) -> None:
        cap = self._block.shape[0]
        if n_exp > cap:
            new = max(n_exp, 2 * cap)
            self._exp = {n: C.grow(a, self._n_exp, new) for n, a in self._exp.items()}
            self._block = C.grow_aligned(self._block, self._n_exp, new)

    def _append_text(self, data: bytes) -> None:
        need = self._text_used + len(data)
        if need > self._text.shape[0]:
            self._text = C.grow(self._text, self._text_used, max(need, 2 * self._text.shape[0]))
        self._text[self._text_used : need] = np.frombuffer(data, dtype=np.uint8)
        self._text_used = need

    # --- adding paths ---------------------------------------------------------------------
    def add_paths(self, paths: Sequence[Sequence[str]], keys=None, created=None) -> np.ndarray:
        """Add root-to-leaf paths of node texts; returns their eids ``i8[b]``.

        Existing prefixes are reused (matched by (parent, key)); a path that
        already ends an experience returns that eid. ``keys`` (optional, one int
        sequence per path) replaces the text hash as node key (e.g. a canonical
        Game-of-24 state). ``created`` f8[b] defaults to now.
        """
        if isinstance(paths, (str, bytes)) or not isinstance(paths, Sequence):
            raise InputError(f"paths must be a sequence of paths (sequences of str), got {type(paths).__name__}")
        b = len(paths)
        karr = np.zeros((b, self.depth), dtype=np.uint64)
        lengths = np.zeros(b, dtype=np.int64)
        if keys is not None and (not isinstance(keys, Sequence) and not isinstance(keys, np.ndarray) or len(keys) != b):
            raise InputError(f"keys must have one entry per path ({b}), got {keys!r:.80}")
        for i, p in enumerate(paths):
            if isinstance(p, str) or not isinstance(p, Sequence) or not 1 <= len(p) <= self.depth:
                raise InputError(f"paths[{i}] must be a sequence of 1..{self.depth} strings, got {p!r:.80}")
            for lev, t in enumerate(p):
                if not isinstance(t, str):
                    raise InputError(f"paths[{i}][{lev}] must be a str, got {type(t).__name__}")
            lengths[i] = len(p)
            if keys is None:
                karr[i, : len(p)] = [text_key(t) for t in p]
            else:
                kp = keys[i]
                if len(kp) != len(p):
                    raise InputError(f"keys[{i}] must have {len(p)} entries like paths[{i}], got {len(kp)}")
                karr[i, : len(p)] = _keys_u64(kp, f"keys[{i}]", 1)
        return self.add_key_paths(karr, lengths, texts=paths, created=created)

    def add_key_paths(self, keys, lengths=None, texts=None, created=None) -> np.ndarray:
        """Add paths given as 64-bit keys ``u8/i8[b, l]`` (l <= L); the fast path.

        ``lengths i8[b]`` (default l) picks ``keys[i, :lengths[i]]``; ``texts``
        (optional, one str sequence per path) names newly created nodes.
        Returns eids ``i8[b]``.
        """
        keys = _keys_u64(keys, "keys", 2)
        b, width = keys.shape
        if width > self.depth:
            raise InputError(f"keys must have at most depth={self.depth} columns, got {width}")
        if lengths is None:
            lengths = np.full(b, width, dtype=np.int64)
        else:
            lengths = V.int_array(lengths, "lengths")
            if lengths.shape[0] != b:
                raise InputError(f"lengths must have {b} entries, got {lengths.shape[0]}")
            if b and (lengths.min() < 1 or lengths.max() > width):
                raise InputError(f"lengths must be in 1..{width}, got range [{lengths.min()}, {lengths.max()}]")
        if b and width == 0:
            raise InputError("keys must have at least one column")
        if created is None:
            created = np.full(b, time.time(), dtype=np.float64)
        else:
            created = V.float_array(created, "created", (b,))
        if texts is not None and len(texts) != b:
            raise InputError(f"texts must have one entry per path ({b}), got {len(texts)}")
        if width < self.depth:
            keys = np.concatenate([keys, np.zeros((b, self.depth - width), dtype=np.uint64)], axis=1)
        out = np.empty(b, dtype=np.int64)
        H = self.n_horizons
        self._reserve_experiences(self._n_exp + b)
        start = 0
        while start < b:
            free = min(self._nodes["parent"].shape[0], self._pk_table.shape[0] // 2) - self._n_nodes
            src = np.empty(max(0, min(free, (b - start) * self.depth)), dtype=np.int64)
            first_new = self._n_nodes
            done, n_nodes, n_exp, n_new = KT.add_key_paths(
                keys[start:], lengths[start:], created[start:], self.q0, H,
                self._nodes["parent"], self._nodes["depth"], self._nodes["key"], self._nodes["eid"],
                self._nodes["first_child"], self._nodes["last_child"], self._nodes["next_sibling"],
                self._nodes["next_same_key"], self._pk_table, self._key_table, self._n_nodes,
                self._exp["path"], self._exp["created"], self._block, self._n_exp,
                out[start:], src,
            )
            ends = self._nodes["text_end"]
            if texts is None:
                ends[first_new:n_nodes] = self._text_used
            else:
                pos = self._text_used
                parts = []
                for j, s in enumerate(src[:n_new]):
                    i, lev = divmod(int(s), self.depth)
                    data = texts[start + i][lev].encode("utf-8")
                    parts.append(data)
                    pos += len(data)
                    ends[first_new + j] = pos
                self._append_text(b"".join(parts))
            self._number_new_rows(self._n_exp, int(n_exp))
            self._n_nodes, self._n_exp = int(n_nodes), int(n_exp)
            start += int(done)
            if start < b:  # out of room: grow (doubling) and go on; a cut path is retried
                if self._n_exp >= self._block.shape[0]:
                    self._reserve_experiences(self._n_exp + 1)
                self._reserve_nodes(self._n_nodes + self.depth)
        return out

    def _number_new_rows(self, old: int, new: int) -> None:
        """External ids of appended rows: one past the last one (= the row for a store never imported);
        the columns of :data:`columns.EXPERIENCE_DEFAULTS` get their default."""
        ext = self._exp["external_id"]
        first = int(ext[old - 1]) + 1 if old else 0
        ext[old:new] = first + np.arange(new - old, dtype=np.int64)
        for name, value in C.EXPERIENCE_DEFAULTS.items():
            self._exp[name][old:new] = value

    def add_nodes(self, paths: Sequence[Sequence[str]], keys=None) -> np.ndarray:
        """Inner nodes without experiences (e.g. a finance (industry, factor) prefix); returns the
        end node of each path ``i8[b]``. Existing nodes are reused, matched by (parent, key) as in
        :meth:`add_paths`; ``keys`` (one int sequence per path) replaces the text hash."""
        out = np.empty(len(paths), dtype=np.int64)
        nd = self._nodes
        for i, p in enumerate(paths):
            if isinstance(p, str) or not isinstance(p, Sequence) or not 1 <= len(p) <= self.depth:
                raise InputError(f"paths[{i}] must be a sequence of 1..{self.depth} strings, got {p!r:.80}")
            kp = [text_key(t) for t in p] if keys is None else [int(k) & 0xFFFFFFFFFFFFFFFF for k in keys[i]]
            if len(kp) != len(p):
                raise InputError(f"keys[{i}] must have {len(p)} entries like paths[{i}], got {len(kp)}")
            parent = 0
            for lev, (t, k) in enumerate(zip(p, kp)):
                if not isinstance(t, str):
                    raise InputError(f"paths[{i}][{lev}] must be a str, got {type(t).__name__}")
                key = np.uint64(k)
                nid = int(KT.pk_find(self._pk_table, nd["parent"], nd["key"], parent, key))
                if nid < 0:
                    self._reserve_nodes(self._n_nodes + 1)
                    nd = self._nodes
                    nid = self._n_nodes
                    for name, v in (("parent", parent), ("depth", lev + 1), ("key", key), ("eid", -1),
                                    ("first_child", -1), ("last_child", -1), ("next_sibling", -1),
                                    ("next_same_key", -1)):
                        nd[name][nid] = v
                    if nd["last_child"][parent] < 0:
                        nd["first_child"][parent] = nid
                    else:
                        nd["next_sibling"][nd["last_child"][parent]] = nid
                    nd["last_child"][parent] = nid
                    KT._pk_insert(self._pk_table, parent, key, nid)
                    if self._key_table.shape[0]:
                        KT._key_insert(self._key_table, nd["key"], nd["next_same_key"], key, nid)
                    self._append_text(t.encode("utf-8"))
                    nd["text_end"][nid] = self._text_used
                    self._n_nodes += 1
                parent = nid
            out[i] = parent
        return out

    # --- merges (ToE: near-duplicate siblings folded by the merger) ------------------------
    def canonical(self, eids) -> np.ndarray:
        """The active experience each of ``eids`` was (transitively) merged into; itself when active."""
        eids = self._check_eids(eids).copy()
        into = self._exp["merged_into"]
        while eids.size:
            nxt = into[eids]
            moved = nxt >= 0
            if not moved.any():
                break
            eids[moved] = nxt[moved]
        return eids

    def merge(self, keep: int, drop: int, *, siblings_only: bool = True) -> None:
        """Fold experience ``drop`` into its sibling ``keep`` (both active, one parent; with
        ``siblings_only=False`` any two active experiences, e.g. when a parent node is merged).

        Hit and recall add up, reliability becomes the hit-weighted mean of the
        two (the plain mean when neither was hit); ``drop`` turns inactive with
        hit = recall = 0 and ``merged_into[drop] = keep``, so :meth:`resolve` sends
        pending feedback for ``drop`` to ``keep``. Nothing changes on an error.
        """
        keep, drop = (int(x) for x in self._check_eids([keep, drop]))
        act, into = self._exp["active"], self._exp["merged_into"]
        if keep == drop:
            raise StoreError(f"cannot merge experience {keep} into itself")
        for e in (keep, drop):
            if not act[e]:
                raise StoreError(f"experience {e} is inactive (merged into {int(into[e])}); merge active ones")
        path = self._exp["path"]
        leaf = lambda e: int(path[e][path[e] >= 0][-1])  # noqa: E731
        pk, pd = self._nodes["parent"][leaf(keep)], self._nodes["parent"][leaf(drop)]
        if siblings_only and pk != pd:
            raise StoreError(f"experiences {keep} and {drop} are not siblings (parents {int(pk)} and {int(pd)})")
        H = self.n_horizons
        blk = self._block
        hk, hd = blk[keep, C.hit_col(H)], blk[drop, C.hit_col(H)]
        wk, wd = (hk, hd) if hk + hd > 0 else (1.0, 1.0)
        blk[keep, :H] = (wk * blk[keep, :H] + wd * blk[drop, :H]) / (wk + wd)
        blk[keep, C.hit_col(H)] += hd
        blk[keep, C.recall_col(H)] += blk[drop, C.recall_col(H)]
        blk[drop, C.hit_col(H)] = 0.0
        blk[drop, C.recall_col(H)] = 0.0
        act[drop] = False
        into[drop] = keep

    def set_external_ids(self, external_ids) -> None:
        """Overwrite every experience's external id (imports): ``i8[n]``, strictly increasing with the row."""
        ids = V.int_array(external_ids, "external_ids")
        if ids.shape != (self._n_exp,):
            raise InputError(f"external_ids must have one entry per experience ({self._n_exp}), got {ids.shape[0]}")
        if ids.size and (ids[0] < 0 or (np.diff(ids) <= 0).any()):
            i = 0 if ids[0] < 0 else int(np.flatnonzero(np.diff(ids) <= 0)[0]) + 1
            raise InputError(f"external_ids must be non-negative and strictly increasing with the row; "
                             f"entry {i} is {int(ids[i])}")
        self._exp["external_id"][: self._n_exp] = ids

    # --- counters -------------------------------------------------------------------------
    def record_recall(self, eids, counts=None) -> None:
        """``recall[eids] += counts`` (default 1 each): retrieved as a candidate (ToE Table A1)."""
        eids = self._check_eids(eids)
        cnt = V.counts_array(counts, eids.shape[0])
        KR.add_counts(self._block, eids, C.recall_col(self.n_horizons), cnt)

    def record_hit(self, eids, counts=None) -> None:
        """``hit[eids] += counts`` (default 1 each): actually used. Hit never exceeds recall.

        Raises :class:`StoreError` (and changes nothing) if any hit would exceed its recall.
        """
        eids = self._check_eids(eids)
        cnt = V.counts_array(counts, eids.shape[0])
        if eids.size:
            uniq, add = V.sums_by_id(eids, cnt)
            H = self.n_horizons
            new_hit = self._block[uniq, C.hit_col(H)] + add
            rec = self._block[uniq, C.recall_col(H)]
            bad = np.flatnonzero(new_hit > rec)
            if bad.size:
                e = int(uniq[bad[0]])
                raise StoreError(
                    f"record_hit would make hit {int(new_hit[bad[0]])} exceed recall {int(rec[bad[0]])} "
                    f"for eid {e}; hit never exceeds recall (record_recall first)")
        KR.add_counts(self._block, eids, C.hit_col(self.n_horizons), cnt)

    def set_counts(self, eids, recall, hit) -> None:
        """Overwrite recall and hit of ``eids`` (imports); requires 0 <= hit <= recall."""
        eids = self._check_eids(eids)
        recall = V.int_array(recall, "recall")
        hit = V.int_array(hit, "hit")
        if recall.shape != eids.shape or hit.shape != eids.shape:
            raise InputError(f"recall and hit must have {eids.shape[0]} entries, got {recall.shape[0]} and {hit.shape[0]}")
        if eids.size and (hit.min() < 0 or (hit > recall).any()):
            i = int(np.flatnonzero((hit < 0) | (hit > recall))[0])
            raise InputError(f"hit must satisfy 0 <= hit <= recall, got hit={hit[i]} recall={recall[i]} at position {i}")
        H = self.n_horizons
        self._block[eids, C.recall_col(H)] = recall
        self._block[eids, C.hit_col(H)] = hit

    def set_reliability(self, eids, values) -> None:
        """Overwrite Q ``f8[b, H]`` of ``eids`` (imports, LLM updaters that output Q); bounds checked."""
        eids = self._check_eids(eids)
        values = V.float_array(values, "values", (eids.shape[0], self.n_horizons))
        if values.size and (values.min() < self.q_min or values.max() > self.q_max):
            raise InputError(f"values must lie in [{self.q_min}, {self.q_max}], got range "
                             f"[{values.min()}, {values.max()}]")
        self._block[eids, : self.n_horizons] = values

    # --- reliability updates (ToE eqs. (8)-(10), (A3)-(A6)) -------------------------------
    def update(self, eids, rewards, rule: str = "formula", *, horizon=None, eta=None, q0=None,
               eta_task=None) -> None:
        """Apply one batch of reliability updates in batch order (repeated eids sequentially).

        ``rule``: "formula" (eq. (9)/(A6)), "asymmetric" (eq. (A3), ``eta_task``),
        "binary" (eqs. (A4)/(A5): eq. (A3) with eta_task = 1) or "delta" (eq. (10):
        ``rewards`` are externally computed deltas). ``rewards`` is ``f8[b, H]``
        (all horizons), or ``f8[b]`` with ``horizon`` an index/name or ``i8[b]``.
        Results are clipped to ``[q_min, q_max]``. The batch is validated
        as a whole first: on any error nothing changes.
        """
        if rule not in RULES:
            raise InputError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        eids = self._check_eids(eids)
        b = eids.shape[0]
        H = self.n_horizons
        if horizon is None:
            r = V.float_array(rewards, "rewards", (b, H))
            hcols = None
        else:
            r = V.float_array(rewards, "rewards", (b,))
            hcols = V.horizon_array(horizon, self.horizons, b)
        eta = self.eta if eta is None else V.finite_scalar(eta, "eta", 0.0)
        if q0 is None:
            q0 = self.q0
        else:
            q0 = V.finite_scalar(q0, "q0")
            if q0 <= 0:
                raise InputError(f"q0 must be > 0, got {q0}")
        q_max = (2.0 * q0) if self._q_max is None else self._q_max
        if rule == "binary":
            eta_task = 1.0
        else:
            eta_task = self.eta_task if eta_task is None else V.finite_scalar(eta_task, "eta_task", 0.0, 1.0)
        if b == 0:
            return
        blk = self._block
        if hcols is None:  # every update's whole vector
            hcols = KR.ALL_HORIZONS
        else:  # one horizon per update: its reward in column 0
            r = r.reshape(b, 1)
        if rule == "formula":
            KR.formula_update(blk, eids, hcols, r, H, eta, q0, self.q_min, q_max, self._lut)
        elif rule in ("asymmetric", "binary"):
            KR.asymmetric_update(blk, eids, hcols, r, eta_task, self.q_min, q_max)
        else:
            KR.delta_update(blk, eids, hcols, r, self.q_min, q_max)

    # --- delayed feedback (ToE eq. (7)) ---------------------------------------------------
    def defer(self, episode_ids, eids, horizons, due, actions) -> np.ndarray:
        """Record pending updates in :attr:`ledger` (eids checked here). Returns entry ids."""
        eids = self._check_eids(eids)
        hcols = V.horizon_array(horizons, self.horizons, eids.shape[0], "horizons")
        return self.ledger.add(episode_ids, eids, hcols, due, actions)

    def resolve(self, entries, outcomes=None, rewards=None, rule: str = "formula", **params) -> None:
        """Apply pending ledger entries exactly once and mark them applied.

        Rewards are ``action * outcome`` (ToE eq. (7), FinEvolveBench's
        ``r = a_t o_{t+h}``) unless ``rewards`` is given. An entry whose
        experience was merged updates the experience it was merged into
        (:meth:`canonical`); when that makes two entries of one episode and
        horizon name one experience, only the first updates it (the rest are
        marked applied). Entries already applied or unknown raise
        :class:`StoreError`; nothing changes on any error.
        """
        entries, eids, hcols, r = self.ledger.prepare(entries, outcomes, rewards)
        moved = self.canonical(eids)
        if np.array_equal(moved, eids):  # no merged experience: (episode, eid, horizon) keys are unique
            self.update(eids, r, rule, horizon=hcols, **params)
        else:
            keep = _first_of_each(self.ledger.column("episode")[entries], hcols, moved)
            self.update(moved[keep], r[keep], rule, horizon=hcols[keep], **params)
        self.ledger.mark_applied(entries, r)

    # --- snapshots and persistence --------------------------------------------------------
    @staticmethod
    def from_snapshot(snap: Mapping[str, np.ndarray], writable: bool = False):
        """A :class:`StoreView` over ``snap`` (zero-copy), or with ``writable`` a new store (copies)."""
        view = StoreView(snap)
        if not writable:
            return view
        st = ExperienceStore.__new__(ExperienceStore)
        _load_snapshot_into(st, {k: np.array(v, copy=True) for k, v in snap.items()})
        st._block = C.grow_aligned(st._block, st._n_exp, max(st._n_exp, 1))
        st._lut = _inv_log_lut()
        st.ledger = FeedbackLedger()
        st.extra_paths = {}
        return st

    def save(self, directory, extras: Mapping[str, Callable[[Path], None]] | None = None) -> Path:
        """Atomically save a checkpoint (store + ledger + ``extras``) into ``directory``.

        ``extras`` maps file names to writer callbacks ``writer(path)`` that
        write extra artifacts into the staging checkpoint (checksummed in the
        manifest). Returns the checkpoint folder. See :mod:`engine.store.persistence`.
        """
        from engine.store.persistence import save_store

        return save_store(self, directory, extras)

    @classmethod
    def load(cls, directory) -> "ExperienceStore":
        """Load the current checkpoint of ``directory``; ``extra_paths`` maps extras to files."""
        from engine.store.persistence import load_store

        return load_store(directory, cls.from_persisted)

    # --- persistence interface (what engine.store.persistence reads and writes) ------------
    def persisted_params(self) -> dict:
        """The constructor parameters a checkpoint records."""
        return {"horizons": list(self.horizons), "levels": list(self.levels), "depth": self.depth,
                "q0": self.q0, "eta": self.eta, "eta_task": self.eta_task, "q_min": self.q_min,
                "q_max": self._q_max}

    def persisted_nodes(self) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """``(columns, text_offsets, text)``: the :data:`columns.NODE_PERSISTED` columns over all
        nodes (root included), node texts as offsets ``i8[n_nodes + 1]`` into UTF-8 bytes ``u8[m]``."""
        n = self._n_nodes
        offsets = np.zeros(n + 1, dtype=np.int64)
        offsets[1:] = self._nodes["text_end"][:n]
        return ({name: self._nodes[name][:n] for name in C.NODE_PERSISTED}, offsets,
                self._text[: self._text_used])

    def persisted_experiences(self) -> dict[str, np.ndarray]:
        """The :data:`columns.EXPERIENCE_PERSISTED` fields over all experiences (block fields as views)."""
        n, H = self._n_exp, self.n_horizons
        return {name: self._exp[name][:n] if name in self._exp else self._block[:n, C.block_columns(name, H)]
                for name in C.EXPERIENCE_PERSISTED}

    @classmethod
    def from_persisted(cls, params: Mapping, nodes: Mapping[str, np.ndarray], text_offsets: np.ndarray,
                       text: np.ndarray, experiences: Mapping[str, np.ndarray],
                       ledger: Mapping[str, np.ndarray] | None = None) -> "ExperienceStore":
        """A new store from what the ``persisted_*`` methods return (and the ledger's columns).

        Checks the tree's consistency; raises :class:`StoreError` naming the first
        bad node, experience or ledger entry, and :class:`InputError` for bad ``params``.
        """
        n_nodes = int(np.shape(nodes["parent"])[0])
        n_exp = int(np.shape(experiences["path"])[0])
        st = cls(horizons=tuple(params["horizons"]), depth=int(params["depth"]), q0=params["q0"],
                 eta=params["eta"], eta_task=params["eta_task"], q_min=params["q_min"], q_max=params["q_max"],
                 levels=tuple(params["levels"]), capacity=max(1, n_exp), node_capacity=max(1, n_nodes))
        H, L = st.n_horizons, st.depth
        if n_nodes < 1:
            raise StoreError("a store has at least the root node, got 0 nodes")
        for name, arr in nodes.items():
            if np.shape(arr) != (n_nodes,):
                raise StoreError(f"node column {name} has shape {np.shape(arr)}, expected ({n_nodes},)")
        # nodes
        st._reserve_nodes(n_nodes)
        nd = st._nodes
        for name in C.NODE_PERSISTED:
            nd[name][:n_nodes] = nodes[name]
        if nd["depth"][:n_nodes].max() > L:
            raise StoreError(f"a node is deeper than depth={L}")
        first = KT.link_tree(nd["parent"], nd["depth"], n_nodes, nd["first_child"], nd["last_child"], nd["next_sibling"])
        if first >= 0:
            raise StoreError(f"node {first} has an inconsistent parent or depth")
        st._pk_table[:] = -1
        st._key_table[:] = -1
        dup = KT.rebuild_tables_checked(st._pk_table, st._key_table, nd["parent"], nd["key"], nd["next_same_key"], n_nodes)
        if dup >= 0:
            raise StoreError(f"node {dup} duplicates the (parent, key) of an earlier node")
        offs = np.asarray(text_offsets, dtype=np.int64)
        if offs.shape != (n_nodes + 1,) or offs[0] != 0 or (np.diff(offs) < 0).any() or offs[-1] != len(text):
            raise StoreError(f"node text offsets must rise from 0 to {len(text)} in {n_nodes + 1} entries")
        used = int(offs[-1])
        st._text = np.array(text, dtype=np.uint8) if used else np.empty(64, np.uint8)
        st._text_used = used
        nd["text_end"][:n_nodes] = offs[1:]
        # experiences
        for name in C.EXPERIENCE_PERSISTED:
            dt, w = C.field_decl(name)
            want = C.column_shape(w, n_exp, L, H)
            if np.shape(experiences[name]) != want:
                raise StoreError(f"experience column {name} has shape {np.shape(experiences[name])}, expected {want}")
        st._reserve_experiences(n_exp)
        for name in C.EXPERIENCE_COLUMNS:
            if name in C.EXPERIENCE_PERSISTED:
                st._exp[name][:n_exp] = experiences[name]
        first = KT.link_experiences(st._exp["path"], n_exp, nd["parent"], n_nodes, nd["eid"])
        if first >= 0:
            raise StoreError(f"experience {first} has an invalid path")
        ext = st._exp["external_id"][:n_exp]
        if n_exp and (ext[0] < 0 or (np.diff(ext) <= 0).any()):
            raise StoreError("external ids must be non-negative and strictly increasing with the row")
        q, hit, recall = (np.asarray(experiences[k]) for k in ("reliability", "hit", "recall"))
        if n_exp and (not np.isfinite(q).all() or q.min() < st.q_min or q.max() > st.q_max):
            raise StoreError(f"reliability values outside [{st.q_min}, {st.q_max}] or not finite")
        if n_exp and (hit.min() < 0 or (hit > recall).any()):
            raise StoreError("hit counts must satisfy 0 <= hit <= recall")
        into = np.asarray(experiences["merged_into"], dtype=np.int64)
        act = np.asarray(experiences["active"], dtype=bool)
        if n_exp and (into.min() < -1 or into.max() >= n_exp or (act != (into < 0)).any()):
            bad = int(np.flatnonzero((into < -1) | (into >= n_exp) | (act != (into < 0)))[0])
            raise StoreError(f"experience {bad}: merged_into={int(into[bad])} and active={bool(act[bad])} "
                             f"disagree (an experience is inactive exactly when merged into a row 0..{n_exp - 1})")
        st._block[:n_exp] = 0.0
        for name in C.BLOCK_FIELDS:
            st._block[:n_exp, C.block_columns(name, H)] = experiences[name]
        st._n_nodes, st._n_exp = n_nodes, n_exp
        # ledger
        if ledger is not None:
            if len(ledger["eid"]):
                if (ledger["eid"].min() < 0 or ledger["eid"].max() >= n_exp or ledger["horizon"].min() < 0
                        or ledger["horizon"].max() >= H):
                    raise StoreError("ledger entries name unknown eids or horizons")
                if not np.isin(ledger["status"], (0, 1)).all():
                    raise StoreError("ledger status values must be 0 (pending) or 1 (applied)")
            st.ledger = FeedbackLedger.from_columns(ledger)
        return st

    # --- memory ---------------------------------------------------------------------------
    def nbytes(self) -> dict[str, int]:
        """Allocated bytes per part and raw bytes of the used rows at the columns' logical dtypes.

        ``raw_experiences``/``raw_nodes``: every declared column (experience:
        Q H x f8, hit i8, recall i8, path L x i8, created f8, external_id i8, active b1, merged_into i8; node: all of
        :data:`columns.NODE_COLUMNS` plus the text bytes). ``raw_persisted``:
        only what a checkpoint stores (node parent, depth, key, text).
        """
        H, L = self.n_horizons, self.depth
        n, m = self._n_exp, self._n_nodes
        width = lambda w: 1 if w is None else {"L": L, "H": H}[w]  # noqa: E731
        exp_row = H * 8 + 8 + 8 + sum(np.dtype(dt).itemsize * width(w) for dt, w in C.EXPERIENCE_COLUMNS.values())
        node_row = sum(np.dtype(dt).itemsize * width(w) for dt, w in C.NODE_COLUMNS.values())
        return {
            "experiences": self._block.nbytes + sum(a.nbytes for a in self._exp.values()),
            "nodes": sum(a.nbytes for a in self._nodes.values()) + self._text.nbytes,
            "tables": self._pk_table.nbytes + self._key_table.nbytes,
            "raw_experiences": n * exp_row,
            "raw_nodes": m * node_row + self._text_used,
            "raw_persisted": n * exp_row + m * 3 * 8 + self._text_used,
        }


def _first_of_each(episode: np.ndarray, hcols: np.ndarray, eids: np.ndarray) -> np.ndarray:
    """Mask ``bool[b]`` of the first occurrence of each (episode, horizon, eid), batch order kept."""
    b = eids.shape[0]
    if b < 2:
        return np.ones(b, dtype=bool)
    keys = np.stack([np.asarray(episode, np.int64), np.asarray(hcols, np.int64), eids], axis=1)
    _, first = np.unique(keys, axis=0, return_index=True)
    mask = np.zeros(b, dtype=bool)
    mask[first] = True
    return mask
