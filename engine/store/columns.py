"""Column declarations of the experience store, declared once.

Append, grow, snapshot and persistence loop over these tables, so adding a
column touches one line. A dtype string is a NumPy dtype; ``"L"`` as the width
means "one column per tree level" (the path), ``"H"`` one per horizon.

Experiences keep reliability, hit and recall in one packed, 64-byte aligned
``f8[n, W]`` block (layout in :mod:`kernels.reliability`); the rest are plain
columns.
"""

from __future__ import annotations

import numpy as np

# name -> (dtype, width); width None = 1-D column
NODE_COLUMNS: dict[str, tuple[str, str | None]] = {
    "parent": ("i8", None),  # parent node id; -1 for the root (node 0)
    "depth": ("i8", None),  # 0 for the root, 1..L below
    "key": ("u8", None),  # 64-bit key (text hash or a caller's key, e.g. a canonical state)
    "eid": ("i8", None),  # experience ending at this node, or -1
    "first_child": ("i8", None),
    "last_child": ("i8", None),
    "next_sibling": ("i8", None),
    "next_same_key": ("i8", None),  # older node with the same key, or -1
    "text_end": ("i8", None),  # end offset of the node's UTF-8 text in the text buffer
}
EXPERIENCE_COLUMNS: dict[str, tuple[str, str | None]] = {
    "path": ("i8", "L"),  # node ids root-to-leaf (root excluded), -1 after the leaf
    "created": ("f8", None),  # creation time, seconds since the epoch
    # the experience's external id (a path CSV's eid); strictly increasing with the row, so the
    # boundary maps ids to dense rows with np.searchsorted; = the row for stores never imported
    "external_id": ("i8", None),
    # merges (ToE's merger of near-duplicate siblings): a merged experience turns inactive and
    # names the row it was folded into, so pending feedback for it reaches that row
    "active": ("b1", None),
    "merged_into": ("i8", None),  # row of the experience it was merged into, or -1
}
# value of each experience column on a new row (columns not listed are written by the kernel)
EXPERIENCE_DEFAULTS = {"active": True, "merged_into": -1}
# packed block fields: name -> (logical dtype, width); their columns are :func:`block_columns`
BLOCK_FIELDS: dict[str, tuple[str, str | None]] = {
    "reliability": ("f8", "H"),  # Q, ToE eq. (A1)
    "hit": ("i8", None),
    "recall": ("i8", None),
}

# Persisted subsets, in file column order (the rest is rebuilt on load from these).
# engine.store.persistence loops over them: a column of width "L" is stored as
# NAME_1..NAME_L, one of width "H" as NAME_<horizon>; FILE_STEM renames a field in the files.
NODE_PERSISTED = ("parent", "depth", "key")
EXPERIENCE_PERSISTED = ("path", "reliability", "recall", "hit", "created", "external_id", "active", "merged_into")
FILE_STEM = {"reliability": "q"}  # experiences.parquet: q_h10, q_h20, ...


def field_decl(name: str) -> tuple[str, str | None]:
    """``(dtype, width)`` of a node, experience or block field."""
    for table in (NODE_COLUMNS, EXPERIENCE_COLUMNS, BLOCK_FIELDS):
        if name in table:
            return table[name]
    raise KeyError(f"no store column named {name!r}")


def file_columns(name: str, depth: int, horizons) -> list[str]:
    """Names of the file columns that hold field ``name`` (see the declarations above)."""
    stem = FILE_STEM.get(name, name)
    width = field_decl(name)[1]
    if width is None:
        return [stem]
    suffixes = [str(i + 1) for i in range(depth)] if width == "L" else list(horizons)
    return [f"{stem}_{s}" for s in suffixes]


def block_columns(name: str, n_horizons: int) -> slice | int:
    """Column(s) of block field ``name`` in the packed ``f8[n, W]`` block (layout: kernels.reliability)."""
    return {"reliability": slice(0, n_horizons), "hit": hit_col(n_horizons), "recall": recall_col(n_horizons)}[name]


def block_width(n_horizons: int) -> int:
    """Row width of the packed block: Q[H], hit, recall, padded to whole cache lines."""
    return 8 * ((n_horizons + 2 + 7) // 8)


def hit_col(n_horizons: int) -> int:
    return n_horizons


def recall_col(n_horizons: int) -> int:
    return n_horizons + 1


def aligned_empty(rows: int, width: int, dtype="f8", align: int = 64) -> np.ndarray:
    """C-contiguous ``dtype[rows, width]`` whose data pointer is ``align``-byte aligned."""
    dt = np.dtype(dtype)
    rows_alloc = max(rows, 1)
    nbytes = rows_alloc * width * dt.itemsize
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + nbytes].view(dt).reshape(rows_alloc, width)[:rows]


def column_shape(width: str | None, rows: int, depth: int, n_horizons: int) -> tuple[int, ...]:
    if width is None:
        return (rows,)
    return (rows, {"L": depth, "H": n_horizons}[width])


def grow(arr: np.ndarray, used: int, new_rows: int, fill=None) -> np.ndarray:
    """A copy of ``arr[:used]`` in a larger array of ``new_rows`` rows (same trailing shape)."""
    out = np.empty((new_rows,) + arr.shape[1:], dtype=arr.dtype)
    out[:used] = arr[:used]
    if fill is not None:
        out[used:] = fill
    return out


def grow_aligned(block: np.ndarray, used: int, new_rows: int) -> np.ndarray:
    out = aligned_empty(new_rows, block.shape[1])
    out[:used] = block[:used]
    return out


def next_pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p
