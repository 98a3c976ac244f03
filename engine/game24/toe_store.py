"""ToE's Game-of-24 experience, kept in the engine's compiled :class:`engine.store.ExperienceStore`.

Layout (the same as :func:`engine.game24.precompute.load_into_store`, so an
offline precomputed tree seeds it directly):

* **nodes** are canonical states, keyed by their 64-bit canonical key
  (:func:`engine.game24.state_key`) and named by their text; the tree has depth
  3 (levels ``state4 -> state3 -> state2``), a trajectory ``s4 -> s3 -> s2`` is
  the path ``[s4, s3, s2]``.
* an **experience** (eid) is a path ending at a state; its verified
  continuation suffix (ToT step lines to 24) lives in the side column
  ``suffix`` (eid-aligned, this module), its binary reliability in the store's
  Q column (one horizon, ``"g24"``), its recall and hit counts in the store's
  counters (ToE Table A1, hit <= recall, enforced by the store).
* **consolidation**: equivalent states (equal canonical number multisets) are
  one logical node: the first admitted experience of a state is its
  *canonical* experience (side column ``canon``); retrieval, counters and
  later updates go to it, and no second experience is created for the state.
  (A precomputed tree holds one path per parent of a state; the lowest eid is
  canonical.)

Side columns (eid-aligned NumPy arrays, declared once in :data:`SIDE_COLUMNS`)
travel in the snapshot under ``toe_<name>`` next to the store's arrays and are
saved with the store as one extra Parquet file of its checkpoint.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.errors import InputError, PersistenceError
from engine.game24.precompute import STORE_LEVELS
from engine.game24.prompts import format_numbers, parse_number
from engine.game24.trajectory import canonical_numbers
from engine.store import ExperienceStore

MAX_NUMBERS = 4
HORIZONS = ("g24",)  # one reliability column: Game of 24 has no horizons
SIDE_FILE = "game24_toe_side.parquet"
PREFIX = "toe_"  # snapshot names of the side columns

# eid-aligned side columns: name -> (dtype, trailing shape). Adding one touches this line only.
SIDE_COLUMNS: dict[str, tuple[str, tuple[int, ...]]] = {
    "suffix": ("U", ()),  # verified continuation from the eid's state: step lines joined by "\n"
    "canon": ("?", ()),  # the canonical (first admitted) experience of its state
    "nums": ("f8", (MAX_NUMBERS,)),  # the state's numbers as floats, NaN-padded (overlap search only)
    "size": ("i8", ()),  # how many numbers the state has
    "episode": ("i8", ()),  # episode id that admitted it (-1: precomputed offline)
}


def canon_text(numbers: Sequence) -> str:
    """The canonical text of a state: its sorted exact numbers, as written in the prompts."""
    return format_numbers(canonical_numbers(numbers))


def parse_state(text: str) -> tuple[Fraction, ...]:
    """Canonical numbers of a state text such as ``"4 6 10"`` or ``"-6 9 13"``."""
    return canonical_numbers(parse_number(t) for t in str(text).split())


def nums_row(numbers: Sequence) -> np.ndarray:
    """``f8[MAX_NUMBERS]``: the numbers as floats, NaN-padded."""
    row = np.full(MAX_NUMBERS, np.nan)
    row[: len(numbers)] = [float(x) for x in numbers]
    return row


def _empty_side(n: int = 0) -> dict[str, np.ndarray]:
    return {k: np.zeros((n, *shape), dtype=dt) for k, (dt, shape) in SIDE_COLUMNS.items()}


def _side_rows(suffixes, canon, numbers, episode) -> dict[str, np.ndarray]:
    m = len(suffixes)
    return {
        "suffix": np.asarray(list(suffixes), dtype=str) if m else np.zeros(0, dtype="U1"),
        "canon": np.asarray(canon, dtype=bool).reshape(m),
        "nums": np.asarray([nums_row(x) for x in numbers], dtype=np.float64).reshape(m, MAX_NUMBERS),
        "size": np.asarray([len(x) for x in numbers], dtype=np.int64).reshape(m),
        "episode": np.asarray(episode, dtype=np.int64).reshape(m),
    }


def new_store(capacity: int = 256) -> ExperienceStore:
    """An empty store for Game of 24: depth 3 (``state4, state3, state2``), one horizon, Q in [0, 2]."""
    return ExperienceStore(horizons=HORIZONS, depth=3, q0=1.0, eta_task=1.0, levels=STORE_LEVELS,
                           capacity=capacity, node_capacity=3 * capacity + 1)


class ToEStore:
    """The writable side of ToE's Game-of-24 experience: an ExperienceStore plus eid-aligned side columns.

    Only :meth:`admit`, :meth:`count`, :meth:`seed_precomputed` and
    :meth:`load` change it (the hooks call them from ``apply`` at the round
    barrier); readers work on :meth:`snapshot`.
    """

    def __init__(self, store: ExperienceStore | None = None, side: dict[str, np.ndarray] | None = None):
        self.store = store if store is not None else new_store()
        self.side = side if side is not None else _empty_side()
        n = self.store.n_experiences
        if any(v.shape[0] != n for v in self.side.values()):
            raise InputError(f"side columns must have one row per experience ({n}), got "
                             f"{ {k: v.shape[0] for k, v in self.side.items()} }")
        self._canon: dict[tuple[int, str], int] = {}
        self._rebuild_index()
        self.store.find_key([0])  # builds the store's key index now, so every snapshot carries it

    def _rebuild_index(self) -> None:
        self._canon = {}
        if not self.store.n_experiences:
            return
        keys = self.store.node_column("key").view(np.int64)
        paths = self.store.paths
        leaf = paths[np.arange(paths.shape[0]), (paths >= 0).sum(axis=1) - 1]
        for e in np.flatnonzero(self.side["canon"]):
            text = canon_text(parse_state(self.store.node_text(int(leaf[e]))))
            self._canon.setdefault((int(keys[leaf[e]]), text), int(e))

    def __len__(self) -> int:
        return self.store.n_experiences

    def lookup(self, key: int, numbers: Sequence) -> int:
        """The canonical eid of the state (equality on the canonical numbers, not the key alone), or -1."""
        return self._canon.get((int(key), canon_text(numbers)), -1)

    def _append_side(self, rows: dict[str, np.ndarray]) -> None:
        self.side = {k: np.concatenate([self.side[k], rows[k]]) for k in SIDE_COLUMNS}

    # -- changes (called at the barrier) ------------------------------------------------------
    def count(self, recall: np.ndarray, hit: np.ndarray) -> None:
        """One episode's counters: ``recall`` eids (repeats add up), then ``hit`` eids (each <= its recall)."""
        recall = np.asarray(recall, dtype=np.int64)
        if recall.size:
            uniq, cnt = np.unique(recall, return_counts=True)
            self.store.record_recall(uniq, cnt.astype(np.int64))
        hit = np.asarray(hit, dtype=np.int64)
        if hit.size:
            self.store.record_hit(np.unique(hit))

    def admit(self, episode_id: int, keys: np.ndarray, states: Sequence[str], suffixes: Sequence[str],
              rewards: np.ndarray) -> np.ndarray:
        """Admit one trajectory's (state, suffix) rows (``keys i8[m]``, ``states``, ``suffixes``, ``r f8[m]``).

        Row ``i`` is the state after ``i`` steps, so its tree path is
        ``keys[:i + 1]``. A row with ``r <= 0`` is a rejected continuation and is
        not stored (eq. (A4)); a state that already has a canonical experience
        consolidates into it; a new state gets a new experience (its path is
        added, prefixes shared). Then eq. (A4)/(A5) sets Q of every admitted
        eid with ``store.update(rule="binary")``. Returns the eids, -1 for rejected rows.
        """
        keys = np.asarray(keys, dtype=np.int64)
        rewards = np.asarray(rewards, dtype=np.float64)
        m = keys.shape[0]
        out = np.full(m, -1, dtype=np.int64)
        new_rows = []
        for i in range(m):
            if rewards[i] <= 0:
                continue
            eid = self.lookup(int(keys[i]), parse_state(states[i]))
            if eid >= 0:
                out[i] = eid
            else:
                new_rows.append(i)
        if new_rows:
            paths = np.zeros((len(new_rows), 3), dtype=np.int64)
            lengths = np.zeros(len(new_rows), dtype=np.int64)
            texts = []
            for j, i in enumerate(new_rows):
                paths[j, : i + 1] = keys[: i + 1]
                lengths[j] = i + 1
                texts.append([str(s) for s in states[: i + 1]])
            n_before = self.store.n_experiences
            eids = self.store.add_key_paths(paths, lengths, texts=texts)
            numbers = [parse_state(states[i]) for i in new_rows]
            fresh = eids >= n_before
            if not fresh.all():  # an existing path whose state had no canonical experience: cannot happen
                raise AssertionError(f"paths {paths[~fresh].tolist()} already existed without a canonical experience")
            self._append_side(_side_rows([suffixes[i] for i in new_rows], np.ones(len(new_rows), bool),
                                         numbers, np.full(len(new_rows), episode_id)))
            for j, i in enumerate(new_rows):
                out[i] = eids[j]
                self._canon[(int(keys[i]), canon_text(numbers[j]))] = int(eids[j])
        ok = out >= 0
        if ok.any():
            self.store.update(out[ok], rewards[ok], rule="binary", horizon=0)  # eqs. (A4)/(A5): Q <- r_t
        return out

    def seed_precomputed(self, source) -> int:
        """Add an offline precomputed tree (a ``toe game24 precompute`` directory or its tables).

        Uses :func:`engine.game24.precompute.load_into_store` on this store;
        every added path is an experience with Q = 1 and the verified suffix of
        its leaf state. Returns the number of experiences added.
        """
        from engine.game24.precompute import load_into_store, read_tables

        tables = read_tables(source) if not isinstance(source, dict) else source
        n_before = self.store.n_experiences
        load = load_into_store(tables, store=self.store)
        n_after = self.store.n_experiences
        if n_after == n_before:
            return 0
        exp_state = load.experiences.column("state").to_pylist()
        exp_suffix = load.experiences.column("suffix").to_pylist()
        exp_key = load.experiences.column("key").to_numpy()
        row_of_eid = {int(e): int(r) for e, r in zip(load.eids, load.experience_row)}
        suffixes, canon, numbers = [], [], []
        for e in range(n_before, n_after):
            row = row_of_eid[e]
            nums = parse_state(exp_state[row])
            slot = (int(exp_key[row]), canon_text(nums))
            first = slot not in self._canon
            if first:
                self._canon[slot] = e
            suffixes.append(exp_suffix[row])
            canon.append(first)
            numbers.append(nums)
        self._append_side(_side_rows(suffixes, canon, numbers, np.full(len(suffixes), -1)))
        return n_after - n_before

    # -- reads -------------------------------------------------------------------------------
    def snapshot(self, copy: bool = True) -> dict[str, np.ndarray]:
        """The store's snapshot plus the side columns as ``toe_<name>`` (read-only): copies, or with
        ``copy=False`` zero-copy views that see later in-place updates (for a snapshot serialized at once)."""
        snap = self.store.snapshot(copy=copy)
        for k, v in self.side.items():
            a = v.copy() if copy else v.view()
            a.flags.writeable = False
            snap[PREFIX + k] = a
        return snap

    # -- persistence -------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Atomic store checkpoint (:meth:`ExperienceStore.save`) with the side columns as an extra file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        def write_side(path: Path) -> None:
            cols = {k: (list(v) if v.ndim > 1 else v) for k, v in self.side.items()}
            pq.write_table(pa.table(cols), path)

        return self.store.save(Path(directory), extras={SIDE_FILE: write_side})

    @classmethod
    def load(cls, directory) -> "ToEStore":
        """Load what :meth:`save` wrote; :class:`PersistenceError` if the side file is missing or wrong."""
        import pyarrow.parquet as pq

        store = ExperienceStore.load(Path(directory))
        path = store.extra_paths.get(SIDE_FILE)
        if path is None or not Path(path).is_file():
            raise PersistenceError(f"checkpoint in {str(directory)!r} lacks {SIDE_FILE}; "
                                   f"expected a Game-of-24 ToE store saved by ToEStore.save")
        table = pq.read_table(path)
        missing = sorted(set(SIDE_COLUMNS) - set(table.column_names))
        if missing:
            raise PersistenceError(f"{path} lacks column(s) {missing}; expected {sorted(SIDE_COLUMNS)}")
        side = {}
        for k, (dt, shape) in SIDE_COLUMNS.items():
            values = table.column(k).to_pylist()
            if dt == "U":
                side[k] = np.asarray(values, dtype=str) if values else np.zeros(0, dtype="U1")
            else:
                side[k] = np.asarray(values, dtype=dt).reshape(len(values), *shape)
        if table.num_rows != store.n_experiences:
            raise PersistenceError(f"{path} has {table.num_rows} rows, expected one per experience "
                                   f"({store.n_experiences})")
        return cls(store, side)
