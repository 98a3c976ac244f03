"""The paper's path-based CSV (ToE "Tree Representation and Decoupled Execution", Table A1).

One row per root-to-leaf path: the level columns (``industry``, ``factor``,
``analysis_direction`` for the finance tree), one reliability column per
horizon ``q_<horizon>`` (``q_h10``, ``q_h20``, ``q_h40``), then ``recall``,
``hit`` and ``eid``. Shorter paths leave their trailing level cells empty.

On import, rows are added in ascending ``eid`` order and every ``eid`` is kept
as the experience's external id (:attr:`ExperienceStore.external_ids`):
updates keyed by the CSV's eids apply through :meth:`ExperienceStore.rows_of`,
and export writes them back. Internally rows stay dense (0..n-1), which is
what the compiled kernels index. An eid must be a non-negative integer,
unique in the file; a bad one is refused with the CSV line that holds it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from engine import atomic_io
from engine.errors import InputError
from engine.store.experience import ExperienceStore

FIXED_TAIL = ("recall", "hit", "eid")


_EID = re.compile(r"^\s*\+?(\d+)\s*$")


def _parse_eids(path: Path, cells: list) -> np.ndarray:
    """The eid column as ``i8[n]``; a cell that is not a non-negative integer is refused with its CSV line."""
    out = np.empty(len(cells), dtype=np.int64)
    for i, cell in enumerate(cells):
        m = _EID.match(cell) if cell is not None else None
        if m is None or int(m.group(1)) >= 2**63:
            raise InputError(f"{path}: row {i + 2} has eid {cell!r}; an eid must be a non-negative integer")
        out[i] = int(m.group(1))
    return out


def read_path_csv(path, **store_kwargs) -> tuple[ExperienceStore, bool]:
    """Build a store from a path CSV. Returns ``(store, sparse)``: ``sparse`` when the CSV's eids
    (kept as external ids) are not exactly the dense rows 0..n-1.

    Level columns are the columns before the first ``q_`` column; horizons are
    taken from the ``q_<horizon>`` columns. ``store_kwargs`` go to
    :class:`ExperienceStore` (q0, eta, ...).
    """
    import pyarrow as pa
    import pyarrow.csv as pcsv

    path = Path(path)
    if not path.is_file():
        raise InputError(f"path CSV {path} does not exist")
    try:
        with open(path, "rb") as fh:
            header = fh.readline().decode("utf-8-sig").strip().split(",")  # a spreadsheet's BOM is not a name
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not UTF-8 text: {exc}") from exc
    header = [h.strip().strip('"') for h in header]
    qcols = [h for h in header if h.startswith("q_")]
    missing = [c for c in FIXED_TAIL if c not in header]
    if not qcols or missing:
        raise InputError(
            f"{path} must have level columns, q_<horizon> columns and recall, hit, eid; "
            f"missing: {', '.join(missing + ([] if qcols else ['q_<horizon>']))} (got {header})")
    levels = header[: header.index(qcols[0])]
    if not levels:
        raise InputError(f"{path} has no level columns before {qcols[0]}")
    horizons = tuple(q[2:] for q in qcols)
    types = {c: pa.string() for c in levels}
    types.update({q: pa.float64() for q in qcols})
    types.update({c: pa.int64() for c in FIXED_TAIL})
    types["eid"] = pa.string()  # parsed below, so a bad cell is named with its row
    try:
        table = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False))
    except pa.ArrowInvalid as exc:
        raise InputError(f"{path} could not be parsed: {exc}") from exc
    n = table.num_rows
    for c in qcols + ["recall", "hit"]:
        if table.column(c).null_count:
            raise InputError(f"{path}: column {c} has empty cells")
    q = np.stack([table.column(c).to_numpy() for c in qcols], axis=1).astype(np.float64) if n else np.zeros((0, len(qcols)))
    recall = table.column("recall").to_numpy().astype(np.int64)
    hit = table.column("hit").to_numpy().astype(np.int64)
    bad = np.flatnonzero((hit < 0) | (hit > recall))
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{path}: row {i + 2} has hit {int(hit[i])} and recall {int(recall[i])}; "
                         "counts must satisfy 0 <= hit <= recall")
    bad = np.flatnonzero(~np.isfinite(q).all(axis=1)) if n else bad[:0]
    if bad.size:
        raise InputError(f"{path}: row {int(bad[0]) + 2} has a q value that is not a finite number")
    eid = _parse_eids(path, table.column("eid").to_pylist())
    order = np.argsort(eid, kind="stable")
    same = np.flatnonzero(np.diff(eid[order]) == 0) if n else np.zeros(0, np.int64)
    if same.size:
        a, b = sorted((int(order[same[0]]) + 2, int(order[same[0] + 1]) + 2))
        raise InputError(f"{path}: eid values must be unique; rows {a} and {b} both have eid {int(eid[order[same[0]]])}")
    level_cols = [table.column(c).to_pylist() for c in levels]
    paths = []
    for i in range(n):
        p = [level_cols[j][i] for j in range(len(levels))]
        while p and (p[-1] is None or p[-1] == ""):
            p.pop()
        if not p or any(v is None or v == "" for v in p):
            raise InputError(f"{path}: row {i + 2} has an empty level cell before its leaf (or no path)")
        paths.append(p)
    store = ExperienceStore(horizons=horizons, depth=len(levels), levels=levels,
                            capacity=max(n, 1), **store_kwargs)
    eids = store.add_paths([paths[i] for i in order])
    if n and np.unique(eids).shape[0] != n:
        first = np.flatnonzero(np.bincount(eids) > 1)[0]
        rows = (order[np.flatnonzero(eids == first)] + 2).tolist()
        raise InputError(f"{path}: rows {rows} repeat the same path")
    lo, hi = store.q_min, store.q_max
    bad = np.flatnonzero(((q < lo) | (q > hi)).any(axis=1)) if n else np.zeros(0, np.int64)
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{path}: row {i + 2} has q values {q[i].tolist()} outside the store's bounds [{lo}, {hi}] "
                         f"(q0 = {store.q0}: bounds [0, 2 * q0]; --q0 sets it)")
    store.set_reliability(eids, q[order])
    store.set_counts(eids, recall[order], hit[order])
    store.set_external_ids(eid[order])  # rows were added in eid order, so eids[k] == k
    sparse = bool(n) and not np.array_equal(eid[order], np.arange(n))
    return store, sparse


def write_path_csv(store, path) -> int:
    """Write one row per experience (row order = eid order), eid = the external id; returns the row count.

    A store with merges gets two more columns after ``eid``: ``active`` and ``merged_into`` (the eid
    a merged row was folded into, empty while active); :func:`read_path_csv` reads the paths, counts
    and reliabilities and ignores those two (an imported store has no merges)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    n = store.n_experiences
    texts = np.array([store.node_text(v) for v in range(store.n_nodes)], dtype=object)
    texts[0] = ""
    paths = store.paths
    cols = {}
    for lev, name in enumerate(store.levels):
        ids = paths[:, lev]
        col = texts[np.where(ids >= 0, ids, 0)]
        cols[name] = pa.array([None if i < 0 else t for i, t in zip(ids, col)], type=pa.string())
    rel = store.reliability
    for j, h in enumerate(store.horizons):
        cols[f"q_{h}"] = pa.array(np.ascontiguousarray(rel[:, j]))
    cols["recall"] = pa.array(store.recall)
    cols["hit"] = pa.array(store.hit)
    ext = np.ascontiguousarray(store.external_ids)
    cols["eid"] = pa.array(ext)
    into = store.merged_into
    if (into >= 0).any():  # a store with merges (finance): which rows are folded into which, by eid
        cols["active"] = pa.array(np.ascontiguousarray(store.active))
        cols["merged_into"] = pa.array([None if j < 0 else int(ext[j]) for j in into.tolist()], type=pa.int64())
    path = Path(path)
    with atomic_io.atomic_writer(path) as fh:  # a device or FIFO (/dev/stdout) is streamed, not replaced
        pcsv.write_csv(pa.table(cols), fh)
    return n
