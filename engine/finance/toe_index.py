"""Finance ToE's node index: the directions under an (industry, factor) prefix on hnswlib.

:class:`engine.index.SubtreeIndex` with subtree = the factor node and rows = the store's
experience rows (a direction's row; rows are created in order, so row order is creation
order). Used by ``PipeToE._candidates`` (leaf retrieval) and the merger's sibling search when a
prefix holds at least ``toe.index_min`` active directions; below that the exact product runs.
These functions read the round's store view (``PipeToE``'s ``_FastView``: ``nodes``, ``leaf``,
``active``, ``leaf_texts``) or the store (:func:`restore_prefix_index`), and never write the store.
"""

from __future__ import annotations

import hashlib

import numpy as np

from engine.index import IndexConfig, SubtreeIndex

_PROBE = "node index probe: the embedder that wrote this index"


def prefix_index(cfg) -> SubtreeIndex:
    """The (empty) node index of a ToE config: ``toe.index_min``, ``toe.index_ef``, one build thread, and
    the graph at every size it is used for (``exact_max = 0``: below ``index_min`` the caller's exact
    product runs instead)."""
    fetch = max(2 * cfg.k1, 16)
    return SubtreeIndex(cfg.index_min, IndexConfig(num_threads=1, exact_max=0, ef_search=max(cfg.index_ef, fetch)),
                        fetch=fetch)


def embedder_tag(embedder) -> dict:
    """What must not change for a saved index to stay valid: the embedder (name, width, one probe vector)."""
    v = np.asarray(embedder.embed([_PROBE])[0], np.float32)
    probe = hashlib.sha256(np.round(v, 4).tobytes()).hexdigest()[:16]
    return {"embedder": str(getattr(embedder, "name", type(embedder).__name__)), "dim": int(v.shape[0]), "probe": probe}


def prefix_top(index: SubtreeIndex, view, embedder, fnode: int, vec: np.ndarray, k: int):
    """The ``k`` active directions under factor node ``fnode`` of ``view`` closest to ``vec``:
    ``(rows i8[m], sims f4[m])`` by decreasing cosine, ties to the older row (the index grows here first)."""
    leaf, parent, eid = view.leaf, view.nodes["parent"], view.nodes["eid"]

    def rows_after(last: int) -> np.ndarray:
        lo = last + 1
        return lo + np.flatnonzero(parent[leaf[lo:]] == fnode)

    newest = int(eid[view.nodes["last_child"].item(fnode)])
    return index.top(fnode, vec, k, newest=newest, rows_after=rows_after,
                     vectors_of=lambda rows: embedder.embed(view.leaf_texts(rows)), valid=view.active)


def restore_prefix_index(index: SubtreeIndex, store, embedder) -> list[str]:
    """Load the indexes saved with ``store``'s checkpoint, each checked against the store (see SubtreeIndex.restore)."""
    index.tag = embedder_tag(embedder)
    paths = store.paths
    leaf, parent = paths[:, -1], store.node_column("parent")

    def rows_upto(fnode: int, last: int) -> np.ndarray:
        return np.flatnonzero(parent[leaf[: last + 1]] == fnode)

    return index.restore(store.extra_paths, rows_upto)


def prefix_index_writers(index: SubtreeIndex, embedder) -> dict:
    """``extras`` writers for the store checkpoint (empty when no prefix is indexed)."""
    if not index.subtrees():
        return {}
    index.tag = embedder_tag(embedder)
    return index.writers()
