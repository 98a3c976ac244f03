"""The finance experience tree: industry > factor > analysis direction, with per-horizon reliability.

A depth-3 tree of text nodes (ToE "Tree Representation and Decoupled
Execution"). Nodes are struct-of-arrays (``parent i8``, ``depth i8``, ``key u8``
= 64-bit hash of the text under its parent, ``text``); each leaf (an analysis
direction) is one experience. Experiences keep reliability, hit and recall in
the packed ``f8[n, W]`` block of :mod:`kernels.reliability` (``Q`` in columns
``0..H-1``, hit in ``H``, recall in ``H+1``), so updates run the shared kernels.

Merging (ToE "Maintenance") folds experience ``drop`` into ``keep``: hit and
recall add up, reliability becomes the hit-weighted mean, ``drop`` turns
inactive and ``merged_into[drop] = keep`` so pending feedback for ``drop``
reaches ``keep``. Nothing is pruned by reliability.

Persistence is the paper's path CSV (one row per active root-to-leaf path:
``industry, factor, analysis_direction, q_h10, q_h20, q_h40, recall, hit, eid``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import InputError, PersistenceError, StoreError
from kernels import reliability as K

_LUT = K.inv_log_lut(4096)


def text_key(parent: int, text: str) -> int:
    """64-bit key of ``text`` under node ``parent`` (normalised: case and spaces)."""
    norm = " ".join(text.lower().split())
    h = hashlib.blake2b(f"{parent}\x00{norm}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def _width(h: int) -> int:
    return 8 * ((h + 2 + 7) // 8)


class ExperienceTree:
    """Industry > factor > direction tree with experience rows for the directions."""

    def __init__(self, horizons: Sequence[int] = (10, 20, 40), q0: float = 1.0,
                 q_min: float = 0.0, q_max: float = 2.0, eta: float = 10.0):
        if not 0 <= q_min <= q0 <= q_max:
            raise InputError(f"need 0 <= q_min <= q0 <= q_max, got {q_min}, {q0}, {q_max}")
        self.horizons = tuple(int(h) for h in horizons)
        self.H = len(self.horizons)
        self.q0, self.q_min, self.q_max, self.eta = float(q0), float(q_min), float(q_max), float(eta)
        # nodes (node 0 is the root)
        self.parent = np.full(1, -1, dtype=np.int64)
        self.depth = np.zeros(1, dtype=np.int64)
        self.key = np.zeros(1, dtype=np.uint64)
        self.text: list[str] = ["root"]
        self._child: dict[tuple[int, int], int] = {}
        self._children: dict[int, list[int]] = {0: []}
        # experiences (one per direction leaf)
        self.block = np.zeros((0, _width(self.H)), dtype=np.float64)
        self.leaf = np.zeros(0, dtype=np.int64)
        self.created = np.zeros(0, dtype=np.int64)
        self.active = np.zeros(0, dtype=bool)
        self.merged_into = np.zeros(0, dtype=np.int64)
        self.node_eid: dict[int, int] = {}

    # ------------------------------------------------------------------ sizes
    @property
    def n_nodes(self) -> int:
        return int(self.parent.shape[0])

    @property
    def n_experiences(self) -> int:
        return int(self.leaf.shape[0])

    @property
    def n_active(self) -> int:
        return int(self.active.sum())

    @property
    def q(self) -> np.ndarray:
        """``Q f8[n, H]`` (a view)."""
        return self.block[:, : self.H]

    @property
    def hit(self) -> np.ndarray:
        return self.block[:, self.H]

    @property
    def recall(self) -> np.ndarray:
        return self.block[:, self.H + 1]

    # ------------------------------------------------------------------ nodes
    def _node(self, parent: int, text: str) -> int:
        text = " ".join(str(text).split())
        if not text:
            raise InputError(f"node text under node {parent} must be non-empty")
        k = text_key(parent, text)
        nid = self._child.get((parent, k))
        if nid is not None:
            return nid
        nid = self.n_nodes
        self.parent = np.append(self.parent, parent)
        self.depth = np.append(self.depth, self.depth[parent] + 1)
        self.key = np.append(self.key, np.uint64(k))
        self.text.append(text)
        self._child[(parent, k)] = nid
        self._children.setdefault(parent, []).append(nid)
        self._children[nid] = []
        return nid

    def find(self, parent: int, text: str) -> int | None:
        return self._child.get((parent, text_key(parent, " ".join(str(text).split()))))

    def prefix(self, industry: str, factor: str) -> int:
        """Node id of the (industry, factor) prefix, created when missing."""
        return self._node(self._node(0, industry), factor)

    def children(self, node: int) -> list[int]:
        return list(self._children.get(node, []))

    def factors(self, industry: str) -> list[str]:
        nid = self.find(0, industry)
        return [] if nid is None else [self.text[c] for c in self._children[nid]]

    def directions(self, factor_node: int) -> np.ndarray:
        """Active experience ids ``i8[k]`` under a factor node, in creation order."""
        eids = [self.node_eid[c] for c in self._children.get(factor_node, []) if c in self.node_eid]
        eids = [e for e in eids if self.active[e]]
        return np.asarray(eids, dtype=np.int64)

    def path(self, eid: int) -> tuple[str, str, str]:
        n = int(self.leaf[eid])
        f = int(self.parent[n])
        return self.text[int(self.parent[f])], self.text[f], self.text[n]

    # ------------------------------------------------------------------ experiences
    def add(self, factor_node: int, direction: str, day: int) -> tuple[int, bool]:
        """Add a direction under ``factor_node``; returns ``(eid, created)`` (an equal text reuses its eid)."""
        if self.depth[factor_node] != 2:
            raise StoreError(f"factor_node must be a depth-2 node, got node {factor_node} at depth {self.depth[factor_node]}")
        leaf = self._node(factor_node, direction)
        if leaf in self.node_eid:
            eid = self.resolve(self.node_eid[leaf])
            return eid, False
        eid = self.n_experiences
        row = np.zeros((1, self.block.shape[1]))
        row[0, : self.H] = self.q0  # ToE: a new path gets the neutral prior q0
        self.block = np.ascontiguousarray(np.vstack([self.block, row]))
        self.leaf = np.append(self.leaf, leaf)
        self.created = np.append(self.created, int(day))
        self.active = np.append(self.active, True)
        self.merged_into = np.append(self.merged_into, -1)
        self.node_eid[leaf] = eid
        return eid, True

    def resolve(self, eid: int) -> int:
        """The active experience that ``eid`` was merged into (itself when active)."""
        e = int(eid)
        if not 0 <= e < self.n_experiences:
            raise StoreError(f"unknown eid {e}; the tree has {self.n_experiences} experiences")
        while self.merged_into[e] >= 0:
            e = int(self.merged_into[e])
        return e

    def _check_eids(self, eids) -> np.ndarray:
        eids = np.asarray(eids, dtype=np.int64).reshape(-1)
        if eids.size and (eids.min() < 0 or eids.max() >= self.n_experiences):
            raise StoreError(f"eids out of range [0, {self.n_experiences}): {eids[(eids < 0) | (eids >= self.n_experiences)][:5].tolist()}")
        return eids

    def count_recall(self, eids) -> None:
        """Recall: retrieved as a candidate (Table A1)."""
        eids = self._check_eids(eids)
        K.add_counts(self.block, eids, self.H + 1, np.ones(eids.size))

    def count_hit(self, eids) -> None:
        """Hit: selected for one news item (incremented once per news item, ToE appendix)."""
        eids = self._check_eids(eids)
        K.add_counts(self.block, eids, self.H, np.ones(eids.size))

    def formula_update(self, eids, hcols, rewards) -> None:
        """ToE eq. (A6) per (eid, horizon) in batch order; ``rewards f8[b]`` must be finite."""
        eids = self._check_eids(eids)
        hcols = np.asarray(hcols, dtype=np.int64).reshape(-1)
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        self._check_batch(eids, hcols, rewards)
        K.formula_update_h(self.block, eids, hcols, rewards, self.H, self.eta, self.q0, self.q_min, self.q_max, _LUT)

    def delta_update(self, eids, hcols, deltas) -> None:
        """LLM-based updater, ToE eq. (10): ``Q <- clip(Q + delta)`` per (eid, horizon), in batch order."""
        eids = self._check_eids(eids)
        hcols = np.asarray(hcols, dtype=np.int64).reshape(-1)
        deltas = np.asarray(deltas, dtype=np.float64).reshape(-1)
        self._check_batch(eids, hcols, deltas)
        K.delta_update_h(self.block, eids, hcols, deltas, self.q_min, self.q_max)

    def _check_batch(self, eids, hcols, values) -> None:
        if not (eids.shape == hcols.shape == values.shape):
            raise InputError(f"eids, hcols and values must have one shape, got {eids.shape}, {hcols.shape}, {values.shape}")
        if hcols.size and (hcols.min() < 0 or hcols.max() >= self.H):
            raise InputError(f"horizon columns must be in [0, {self.H}), got {hcols.tolist()[:5]}")
        if not np.all(np.isfinite(values)):
            raise InputError("rewards must be finite; got NaN or inf")

    def merge(self, keep: int, drop: int) -> None:
        """Fold experience ``drop`` into ``keep`` (siblings under one factor)."""
        keep, drop = self.resolve(keep), self.resolve(drop)
        if keep == drop:
            raise StoreError(f"cannot merge experience {keep} into itself")
        if self.parent[self.leaf[keep]] != self.parent[self.leaf[drop]]:
            raise StoreError(f"experiences {keep} and {drop} are not siblings under one factor")
        hk, hd = self.hit[keep], self.hit[drop]
        wk, wd = (hk, hd) if hk + hd > 0 else (1.0, 1.0)
        q = (wk * self.q[keep] + wd * self.q[drop]) / (wk + wd)
        self.block[keep, : self.H] = q
        self.block[keep, self.H] += hd
        self.block[keep, self.H + 1] += self.recall[drop]
        self.block[drop, : self.H + 2] = 0.0
        self.active[drop] = False
        self.merged_into[drop] = keep

    # ------------------------------------------------------------------ persistence
    def rows(self) -> dict[str, list]:
        """Path-table columns for the active experiences."""
        eids = np.flatnonzero(self.active)
        paths = [self.path(int(e)) for e in eids]
        out = {"industry": [p[0] for p in paths], "factor": [p[1] for p in paths],
               "analysis_direction": [p[2] for p in paths]}
        for k, h in enumerate(self.horizons):
            out[f"q_h{h}"] = self.q[eids, k].tolist()
        out["recall"] = self.recall[eids].astype(np.int64).tolist()
        out["hit"] = self.hit[eids].astype(np.int64).tolist()
        out["eid"] = eids.tolist()
        out["created"] = self.created[eids].tolist()
        return out

    def save_csv(self, path: str | Path) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        pacsv.write_csv(pa.table(self.rows()), tmp)
        tmp.replace(path)  # atomic: a crash leaves the previous file

    @classmethod
    def load_csv(cls, path: str | Path, q0: float = 1.0, q_min: float = 0.0, q_max: float = 2.0,
                 eta: float = 10.0) -> "ExperienceTree":
        import pyarrow.csv as pacsv

        path = Path(path)
        if not path.is_file():
            raise PersistenceError(f"tree file {str(path)!r} does not exist")
        try:
            table = pacsv.read_csv(path)
        except Exception as exc:
            raise PersistenceError(f"cannot read tree file {str(path)!r}: {exc}") from exc
        cols = table.column_names
        hcols = [c for c in cols if c.startswith("q_h")]
        need = ["industry", "factor", "analysis_direction", "recall", "hit"]
        missing = [c for c in need if c not in cols]
        if missing or not hcols:
            raise PersistenceError(
                f"tree file {str(path)!r} lacks column(s) {missing or ['q_h<horizon>']}; got {cols}")
        horizons = [int(c[3:]) for c in hcols]
        tree = cls(horizons, q0, q_min, q_max, eta)
        d = {c: table.column(c).to_pylist() for c in cols}
        created = d.get("created", [0] * table.num_rows)
        for r in range(table.num_rows):
            fnode = tree.prefix(str(d["industry"][r]), str(d["factor"][r]))
            eid, _ = tree.add(fnode, str(d["analysis_direction"][r]), int(created[r] or 0))
            tree.block[eid, : tree.H] = [float(d[c][r]) for c in hcols]
            tree.block[eid, tree.H] = float(d["hit"][r])
            tree.block[eid, tree.H + 1] = float(d["recall"][r])
        return tree
