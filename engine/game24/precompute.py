"""Offline Game-of-24 experience-tree precomputation (ToE "Details in Game of 24").

For a puzzle set: every distinct canonical 4-, 3- and 2-number state reachable
from the puzzles, whether each is solvable, the distinct parent -> child edges,
and one verified solution suffix per solvable state. Everything is computed in
compiled kernels (kernels.game24_precompute, kernels.game24_solver); every
suffix is replayed exactly by a kernel verifier before it is admitted
(ToE eq. (A4): a verified continuation gets Q(e) = 1, anything else is not stored).

Tables (Parquet, one directory)::

    puzzles.parquet      rank, puzzle, key, solvable
    states.parquet       key, level (numbers in the state), num, den (list<int64>),
                         state (text, value-sorted), solvable, is_root
    edges.parquet        parent_key, child_key, parent_level, step ("4 + 9 = 13"), child_solvable
    experiences.parquet  key, level, state, suffix (ToT step lines), expression,
                         n_steps, reliability (1.0), verified (true)
    manifest.json        format, counts per level, overflow count

:func:`load_into_store` turns the tables into an :class:`engine.store.ExperienceStore`
of depth 3 (levels ``state4``, ``state3``, ``state2``): every solvable root, every
solvable child of it and every solvable grandchild is a node keyed by the
state's 64-bit canonical key (:func:`engine.game24.state_key`), and each path
ending at a solvable state is an experience with reliability 1 whose suffix is
the ``experiences`` row of that state's key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Sequence

import numpy as np

from engine import atomic_io
from engine.errors import InputError, PersistenceError
from engine.game24.puzzles import Puzzle, parse_puzzle
from engine.game24.rational import format_fraction
from engine.game24.solver import SYMBOLS, SolverMemo
from kernels import game24_precompute as kp
from kernels import game24_solver as ks
from kernels import game24_state as kst

FORMAT = "toe-game24-precompute/1"
LEVELS = (4, 3, 2)
STORE_LEVELS = ("state4", "state3", "state2")
TABLES = ("puzzles", "states", "edges", "experiences")


@dataclass
class Level:
    """Distinct canonical states of one level (``n`` numbers), struct of arrays.

    num, den i8[m, 4]; key i8[m]; solvable bool[m]; steps i8[m, 3, 7] and
    n_steps i8[m] (-1 where unsolvable) hold one verified suffix per solvable state.
    """

    n: int
    num: np.ndarray
    den: np.ndarray
    key: np.ndarray
    solvable: np.ndarray = field(default=None)
    steps: np.ndarray = field(default=None)
    n_steps: np.ndarray = field(default=None)

    def __len__(self) -> int:
        return int(self.key.shape[0])


@dataclass
class Edges:
    """Distinct parent -> child edges between level n and n - 1 (rows index the Levels)."""

    parent: np.ndarray  # i8[e]
    child: np.ndarray  # i8[e]
    move: np.ndarray  # i8[e], i * 64 + j * 8 + op on the parent's canonical row


@dataclass
class Precomputed:
    """The result of :func:`precompute`: levels 4, 3, 2, the edges, and each puzzle's root row."""

    puzzles: list[Puzzle]
    root_of_puzzle: np.ndarray  # i8[p] row in levels[4]
    levels: dict[int, Level]
    edges: dict[int, Edges]  # keyed by the parent level (4 or 3)
    overflow: int = 0

    def counts(self) -> dict[str, dict[str, int]]:
        """``{"4": {"states": .., "solvable": .., "edges_out": ..}, ...}``."""
        out = {}
        for n, lv in self.levels.items():
            e = self.edges.get(n)
            out[str(n)] = {
                "states": len(lv),
                "solvable": int(lv.solvable.sum()),
                "edges_out": 0 if e is None else int(e.parent.shape[0]),
            }
        return out


def _empty_table(cap: int):
    return (
        np.zeros(cap, np.uint8),
        np.zeros(cap, np.int64),
        np.zeros((cap, 4), np.int64),
        np.ones((cap, 4), np.int64),
        np.zeros(cap, np.int64),
    )


def _pow2_at_least(n: int) -> int:
    p = 1024
    while p < n:
        p <<= 1
    return p


def _expand(level: Level) -> tuple[Level, Edges, int]:
    n = level.n
    b = len(level)
    m = b * (n * (n - 1) // 2) * ks.N_OPS
    cap = _pow2_at_least(2 * m + 1)
    t_key = np.empty(cap, np.int64)
    t_row = np.full(cap, -1, np.int64)
    c_num = np.zeros((m, 4), np.int64)
    c_den = np.ones((m, 4), np.int64)
    c_key = np.zeros(m, np.int64)
    e_parent = np.zeros(m, np.int64)
    e_child = np.zeros(m, np.int64)
    e_move = np.zeros(m, np.int64)
    counts = np.zeros(3, np.int64)
    size = np.full(b, n, np.int64)
    kp.expand_level(level.num, level.den, size, t_key, t_row, c_num, c_den, c_key, e_parent, e_child, e_move, counts)
    nc, ne = int(counts[0]), int(counts[1])
    child = Level(n - 1, c_num[:nc].copy(), c_den[:nc].copy(), c_key[:nc].copy())
    return child, Edges(e_parent[:ne].copy(), e_child[:ne].copy(), e_move[:ne].copy()), int(counts[2])


def _solve_level(level: Level, memo: SolverMemo) -> None:
    size = np.full(len(level), level.n, np.int64)
    status = memo.solve_canonical(level.num, level.den, size)
    if (status == ks.UNKNOWN).any():
        bad = int(np.flatnonzero(status == ks.UNKNOWN)[0])
        raise InputError(f"state {level.num[bad]}/{level.den[bad]} leaves the int64 range; precompute needs small puzzles")
    level.solvable = status == ks.SOLVABLE
    steps, count = memo.steps_canonical(level.num, level.den, size)
    ok = np.zeros(len(level), np.uint8)
    kp.verify_batch(level.num, level.den, size, steps, count, ok)
    if not np.array_equal(ok.astype(bool), level.solvable):  # pragma: no cover - a kernel bug
        raise RuntimeError(f"level {level.n}: a solution suffix failed exact verification")
    level.steps = steps
    level.n_steps = count


def _as_puzzles(puzzles) -> list[Puzzle]:
    out = []
    for i, p in enumerate(puzzles):
        if isinstance(p, Puzzle):
            out.append(p)
        else:
            q = parse_puzzle(p)
            out.append(Puzzle(rank=i + 1, numbers=q.numbers))
    if not out:
        raise InputError("puzzles must hold at least one puzzle, got none")
    return out


def precompute(puzzles: Sequence, memo: SolverMemo | None = None) -> Precomputed:
    """All reachable canonical states of ``puzzles`` (levels 4, 3, 2), edges, flags, verified suffixes.

    ``puzzles``: Puzzles or anything :func:`parse_puzzle` accepts. ``memo``: a
    :class:`SolverMemo` to share (default: a fresh one, so timings are honest).
    """
    puzzles = _as_puzzles(puzzles)
    memo = memo if memo is not None else SolverMemo(capacity=1 << 17)
    p = len(puzzles)
    num = np.array([pz.numbers for pz in puzzles], dtype=np.int64).reshape(p, -1)
    if num.shape[1] != 4:
        raise InputError(f"puzzles must have 4 numbers, got {num.shape[1]}")
    den = np.ones_like(num)
    cn, cd, ck = np.empty_like(num), np.empty_like(den), np.empty(p, np.int64)
    kst.canonical_keys(num, den, np.full(p, 4, np.int64), cn, cd, ck)
    # distinct roots, first occurrence order
    table = _empty_table(_pow2_at_least(2 * p + 1))
    root_of_puzzle = np.empty(p, np.int64)
    rows: list[int] = []
    slot_row: dict[int, int] = {}
    for i in range(p):
        s = kst.table_find(*table, ck[i], cn[i], cd[i], 4)
        if s < 0:
            s = -(s + 1)
            kst.table_put(*table, s, ck[i], cn[i], cd[i], 4)
            slot_row[s] = len(rows)
            rows.append(i)
        root_of_puzzle[i] = slot_row[s]
    idx = np.array(rows, np.int64)
    levels = {4: Level(4, cn[idx].copy(), cd[idx].copy(), ck[idx].copy())}
    edges = {}
    overflow = 0
    for n in (4, 3):
        child, e, ov = _expand(levels[n])
        levels[n - 1] = child
        edges[n] = e
        overflow += ov
    for n in LEVELS:
        _solve_level(levels[n], memo)
    return Precomputed(puzzles, root_of_puzzle, levels, edges, overflow)


# ---------------------------------------------------------------- text and tables


class _Fmt:
    """Cached exact text of int64 rationals."""

    def __init__(self):
        self.cache: dict[tuple[int, int], str] = {}

    def __call__(self, n: int, d: int) -> str:
        k = (n, d)
        s = self.cache.get(k)
        if s is None:
            s = format_fraction(Fraction(n, d))
            self.cache[k] = s
        return s

    def many(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """Object array (num's shape) of texts; one Python call per distinct value."""
        if num.size == 0:
            return np.empty(num.shape, dtype=object)
        n, d = num.ravel(), den.ravel()
        if np.abs(n).max() < 2**31 and d.max() < 2**31:
            packed = n * (1 << 32) + d  # one int64 per pair: np.unique on 1-D is fast
            uniq, inv = np.unique(packed, return_inverse=True)
            texts = np.array([self(int(u >> 32), int(u & 0xFFFFFFFF)) for u in uniq], dtype=object)
            return texts[np.asarray(inv).ravel()].reshape(num.shape)
        return np.array([self(int(a), int(b)) for a, b in zip(n, d)], dtype=object).reshape(num.shape)


def _join(columns, sep: str = " "):
    import pyarrow as pa
    import pyarrow.compute as pc

    arrays = [pa.array(c, pa.string()) for c in columns]
    if len(arrays) == 1:
        return arrays[0]
    return pc.binary_join_element_wise(*arrays, sep)


def _lists(blocks):
    """list<int64> Arrow array from 2-D int blocks of varying widths (one list per row)."""
    import pyarrow as pa

    values = np.concatenate([b.ravel() for b in blocks])
    lengths = np.concatenate([np.full(b.shape[0], b.shape[1], np.int64) for b in blocks])
    offsets = np.zeros(lengths.shape[0] + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(values, pa.int64()))


def _state_texts(level: Level, fmt: _Fmt):
    """Arrow string array: each state's numbers in value order (``"4 13/3 10"``)."""
    import pyarrow as pa

    b = len(level)
    vn, vd = np.empty_like(level.num), np.empty_like(level.den)
    if kst.value_sort_rows(level.num, level.den, np.full(b, level.n, np.int64), vn, vd):
        texts = fmt.many(vn[:, : level.n], vd[:, : level.n])
        return _join([texts[:, c] for c in range(level.n)])
    out = []
    for r in range(b):
        vals = sorted(Fraction(int(level.num[r, c]), int(level.den[r, c])) for c in range(level.n))
        out.append(" ".join(fmt(v.numerator, v.denominator) for v in vals))
    return pa.array(out, pa.string())


def _suffix_texts(level: Level, fmt: _Fmt, rows: np.ndarray) -> tuple[list[str], list[str]]:
    """ToT step lines and an infix expression for each (solvable) state row in ``rows``."""
    suffixes: list[str] = []
    exprs: list[str] = []
    n_steps = level.n_steps.tolist()
    for r in rows.tolist():
        k = n_steps[r]
        items = [(Fraction(int(level.num[r, c]), int(level.den[r, c])), None) for c in range(level.n)]
        items = [(v, fmt(v.numerator, v.denominator)) for v, _ in items]
        lines = []
        for s in range(k):
            st = level.steps[r, s]
            x, y, res = (Fraction(int(st[0]), int(st[1])), Fraction(int(st[3]), int(st[4])), Fraction(int(st[5]), int(st[6])))
            sym = SYMBOLS[int(st[2])]
            ex = ey = None
            for t, (v, e) in enumerate(items):
                if v == x:
                    ex = e
                    del items[t]
                    break
            for t, (v, e) in enumerate(items):
                if v == y:
                    ey = e
                    del items[t]
                    break
            items.append((res, f"({ex} {sym} {ey})"))
            left = " ".join(fmt(v.numerator, v.denominator) for v in sorted(v for v, _ in items))
            lines.append(
                f"{fmt(x.numerator, x.denominator)} {sym} {fmt(y.numerator, y.denominator)} = "
                f"{fmt(res.numerator, res.denominator)} (left: {left})"
            )
        expr = items[0][1]
        if k > 0:
            expr = expr[1:-1]
        suffixes.append("\n".join(lines))
        exprs.append(expr)
    return suffixes, exprs


def to_tables(pre: Precomputed) -> dict:
    """Arrow tables ``{"puzzles", "states", "edges", "experiences"}`` of a precomputation."""
    import pyarrow as pa

    fmt = _Fmt()
    texts = {n: _state_texts(pre.levels[n], fmt) for n in LEVELS}
    roots = pre.levels[4]
    puzzles = pa.table(
        {
            "rank": pa.array([p.rank for p in pre.puzzles], pa.int64()),
            "puzzle": pa.array([p.text for p in pre.puzzles], pa.string()),
            "key": pa.array(roots.key[pre.root_of_puzzle], pa.int64()),
            "solvable": pa.array(roots.solvable[pre.root_of_puzzle], pa.bool_()),
        }
    )
    cols = {k: [] for k in ("key", "level", "num", "den", "state", "solvable", "is_root")}
    for n in LEVELS:
        lv = pre.levels[n]
        cols["key"].append(lv.key)
        cols["level"].append(np.full(len(lv), n, np.int8))
        cols["solvable"].append(lv.solvable)
        cols["is_root"].append(np.full(len(lv), n == 4))
    states = pa.table(
        {
            "key": pa.array(np.concatenate(cols["key"]), pa.int64()),
            "level": pa.array(np.concatenate(cols["level"]), pa.int8()),
            "num": _lists([pre.levels[n].num[:, :n] for n in LEVELS]),
            "den": _lists([pre.levels[n].den[:, :n] for n in LEVELS]),
            "state": pa.concat_arrays([texts[n] for n in LEVELS]),
            "solvable": pa.array(np.concatenate(cols["solvable"]), pa.bool_()),
            "is_root": pa.array(np.concatenate(cols["is_root"]), pa.bool_()),
        }
    )
    e_cols = {k: [] for k in ("parent_key", "child_key", "parent_level", "child_solvable")}
    step_texts = []
    for n in (4, 3):
        e = pre.edges[n]
        parent, child = pre.levels[n], pre.levels[n - 1]
        steps = np.zeros((e.parent.shape[0], 7), np.int64)
        kp.move_steps(parent.num, parent.den, e.parent, e.move, steps)
        e_cols["parent_key"].append(parent.key[e.parent])
        e_cols["child_key"].append(child.key[e.child])
        e_cols["parent_level"].append(np.full(e.parent.shape[0], n, np.int8))
        e_cols["child_solvable"].append(child.solvable[e.child])
        xs = fmt.many(steps[:, 0], steps[:, 1])
        ys = fmt.many(steps[:, 3], steps[:, 4])
        rs = fmt.many(steps[:, 5], steps[:, 6])
        ops = np.array(SYMBOLS, dtype=object)[steps[:, 2]]
        step_texts.append(_join([xs, ops, ys, np.full(len(xs), "=", dtype=object), rs]))
    edges = pa.table(
        {
            "parent_key": pa.array(np.concatenate(e_cols["parent_key"]), pa.int64()),
            "child_key": pa.array(np.concatenate(e_cols["child_key"]), pa.int64()),
            "parent_level": pa.array(np.concatenate(e_cols["parent_level"]), pa.int8()),
            "step": pa.concat_arrays(step_texts),
            "child_solvable": pa.array(np.concatenate(e_cols["child_solvable"]), pa.bool_()),
        }
    )
    x = {k: [] for k in ("key", "level", "state", "suffix", "expression", "n_steps")}
    for n in LEVELS:
        lv = pre.levels[n]
        sel = np.flatnonzero(lv.solvable)
        suffixes, exprs = _suffix_texts(lv, fmt, sel)
        x["key"].append(lv.key[sel])
        x["level"].append(np.full(sel.shape[0], n, np.int8))
        x["n_steps"].append(lv.n_steps[sel])
        x["state"].extend(texts[n].take(pa.array(sel, pa.int64())).to_pylist())
        x["suffix"].extend(suffixes)
        x["expression"].extend(exprs)
    n_exp = len(x["state"])
    experiences = pa.table(
        {
            "key": pa.array(np.concatenate(x["key"]), pa.int64()),
            "level": pa.array(np.concatenate(x["level"]), pa.int8()),
            "state": pa.array(x["state"], pa.string()),
            "suffix": pa.array(x["suffix"], pa.string()),
            "expression": pa.array(x["expression"], pa.string()),
            "n_steps": pa.array(np.concatenate(x["n_steps"]), pa.int8()),
            "reliability": pa.array(np.ones(n_exp), pa.float64()),  # ToE eq. (A4): verified => Q = 1
            "verified": pa.array(np.ones(n_exp, bool), pa.bool_()),
        }
    )
    return {"puzzles": puzzles, "states": states, "edges": edges, "experiences": experiences}


def write_tables(pre: Precomputed, out_dir, source: str = "") -> dict:
    """Write the four Parquet tables and ``manifest.json`` into ``out_dir``; returns the manifest.

    Each file is replaced atomically (:mod:`engine.atomic_io`) and the manifest, written last,
    records every table's sha256, which :func:`read_tables` checks.
    """
    import pyarrow.parquet as pq

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"out_dir {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    tables = to_tables(pre)
    for name, table in tables.items():
        with atomic_io.atomic_writer(out / f"{name}.parquet") as fh:
            pq.write_table(table, fh)
    manifest = {
        "format": FORMAT,
        "source": source,
        "puzzles": len(pre.puzzles),
        "levels": pre.counts(),
        "experiences": tables["experiences"].num_rows,
        "overflow_moves_skipped": pre.overflow,
        "files": atomic_io.file_digests(out, [f"{name}.parquet" for name in tables]),
    }
    atomic_io.write_text(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")  # written last: the commit
    return manifest


def read_tables(directory) -> dict:
    """The four tables of a precompute directory (``{"puzzles": pa.Table, ...}``) plus ``"manifest"``."""
    import pyarrow.parquet as pq

    d = Path(directory)
    mf = d / "manifest.json"
    if not mf.is_file():
        raise PersistenceError(f"{str(d)!r} is not a Game-of-24 precompute directory (no manifest.json)")
    try:
        manifest = json.loads(mf.read_text())
    except json.JSONDecodeError as exc:
        raise PersistenceError(f"{str(mf)!r} is not valid JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise PersistenceError(f"{str(mf)!r} has format {manifest.get('format')!r}, expected {FORMAT!r}")
    for name in TABLES:
        if not (d / f"{name}.parquet").is_file():
            raise PersistenceError(f"precompute directory {str(d)!r} is missing {name}.parquet")
    if "files" in manifest:  # sha256 of every table (folders written before checksums have none)
        atomic_io.verify_digests(d, manifest["files"], what="precompute table")
    out = {"manifest": manifest}
    for name in TABLES:
        path = d / f"{name}.parquet"
        try:
            out[name] = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise PersistenceError(f"{str(path)!r} is not a readable Parquet file: {exc}") from None
    return out


@dataclass
class StoreLoad:
    """What :func:`load_into_store` built.

    store: the ExperienceStore; eids i8[b] of the paths added (root-to-leaf
    keys in ``path_keys`` i8[b, 3], lengths in ``path_lengths``); ``suffix_of_eid``
    maps every eid of the store to its verified suffix row (a dict
    eid -> experiences-table row), ``experiences`` is that table.
    """

    store: object
    eids: np.ndarray
    path_keys: np.ndarray
    path_lengths: np.ndarray
    experience_row: np.ndarray  # i8[b]: experiences-table row of each path's leaf state
    experiences: object

    def suffix(self, eid: int) -> str:
        """The verified solution suffix (ToT step lines) of experience ``eid``."""
        pos = np.flatnonzero(self.eids == eid)
        if pos.size == 0:
            raise InputError(f"eid {eid} was not added by this load")
        return self.experiences.column("suffix")[int(self.experience_row[pos[0]])].as_py()


def load_into_store(source, store=None, horizons=("g24",), with_texts: bool = True) -> StoreLoad:
    """Load precomputed tables (a directory, or the dict from :func:`to_tables`) into an ExperienceStore.

    Paths: each solvable root ``[s4]``, each solvable child ``[s4, s3]`` and each
    solvable grandchild ``[s4, s3, s2]``; node keys are the canonical state keys
    and node texts the state texts. Every such path is an experience with
    reliability 1 on every horizon (ToE eq. (A4)); unsolvable states stay in the
    ``states`` table only (the paper stores no failed continuations).
    ``store``: an existing store of depth >= 3 to add to (default: a new one
    with ``horizons`` and levels ``state4, state3, state2``).
    """
    from engine.store import ExperienceStore

    tables = read_tables(source) if not isinstance(source, dict) else source
    states, edges, exps = tables["states"], tables["edges"], tables["experiences"]
    s_key = states.column("key").to_numpy()
    s_level = states.column("level").to_numpy()
    s_solv = states.column("solvable").to_numpy(zero_copy_only=False)
    s_text = states.column("state").to_pylist() if with_texts else None
    row_of = {(int(k), int(lv)): i for i, (k, lv) in enumerate(zip(s_key, s_level))}
    x_key = exps.column("key").to_numpy()
    x_level = exps.column("level").to_numpy()
    x_row_of = {(int(k), int(lv)): i for i, (k, lv) in enumerate(zip(x_key, x_level))}

    e_parent = edges.column("parent_key").to_numpy()
    e_child = edges.column("child_key").to_numpy()
    e_plev = edges.column("parent_level").to_numpy()
    e_csolv = edges.column("child_solvable").to_numpy(zero_copy_only=False)
    kids: dict[tuple[int, int], list[int]] = {}
    for p, c, lv, ok in zip(e_parent.tolist(), e_child.tolist(), e_plev.tolist(), e_csolv.tolist()):
        if ok:
            kids.setdefault((p, lv), []).append(c)

    paths: list[tuple[int, ...]] = []
    for k, lv, ok in zip(s_key.tolist(), s_level.tolist(), s_solv.tolist()):
        if lv != 4 or not ok:
            continue
        paths.append((k,))
        for c3 in kids.get((k, 4), ()):
            paths.append((k, c3))
            for c2 in kids.get((c3, 3), ()):
                paths.append((k, c3, c2))
    b = len(paths)
    keys = np.zeros((b, 3), np.int64)
    lengths = np.zeros(b, np.int64)
    leaf_row = np.zeros(b, np.int64)
    for i, path in enumerate(paths):
        keys[i, : len(path)] = path
        lengths[i] = len(path)
        leaf_row[i] = x_row_of[(path[-1], 5 - len(path))]
    texts = None
    if with_texts:
        texts = [[s_text[row_of[(k, 4 - j)]] for j, k in enumerate(path)] for path in paths]
    if store is None:
        store = ExperienceStore(horizons=horizons, depth=3, q0=1.0, eta_task=1.0, levels=STORE_LEVELS,
                                capacity=max(b, 1), node_capacity=max(b, 1) + 1)
    elif store.depth < 3:
        raise InputError(f"store must have depth >= 3 for Game-of-24 paths, got depth {store.depth}")
    eids = store.add_key_paths(keys, lengths, texts=texts) if b else np.zeros(0, np.int64)
    if b:
        store.set_reliability(eids, np.ones((b, store.n_horizons)))  # verified suffixes: Q = 1
    return StoreLoad(store, eids, keys, lengths, leaf_row, exps)
