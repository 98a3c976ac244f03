"""Merge candidates for ToE's "Maintenance" step.

ToE (Sec. "Maintenance"): "as part of its routine update procedure, ToE
retrieves semantically similar existing nodes through embedding-based search
and employs a prompt-based LLM merger to determine whether some node should be
merged", to reduce "semantic overlap among sibling nodes". This module does
the retrieval half: for each new node, its existing siblings whose similarity
is at least ``threshold``, most similar first, as flat arrays the merger turns
into one batched LLM call (Table A4 prompt, one request per pair).

The paper gives no separate merge threshold; the default is the paper's
leaf-level cosine threshold lambda = 0.8 and callers may choose another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.errors import InputError
from engine.index.node_index import NodeIndex

DEFAULT_MERGE_THRESHOLD = 0.8  # ToE's lambda (FinEvolveBench settings)


@dataclass(frozen=True)
class MergeCandidates:
    """Struct-of-arrays of (new node, existing sibling, similarity), one row per pair.

    new i8[m], existing i8[m], similarity f4[m]; rows grouped by ``new`` in the
    order the new nodes were given, and within a group by decreasing similarity.
    """

    new: np.ndarray
    existing: np.ndarray
    similarity: np.ndarray

    def __len__(self) -> int:
        return int(self.new.shape[0])

    def pairs(self) -> list[tuple[int, int, float]]:
        """``[(new, existing, similarity), ...]`` for building merger prompts."""
        return list(zip(self.new.tolist(), self.existing.tolist(), self.similarity.tolist()))

    def for_node(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """``(existing i8[j], similarity f4[j])`` of one new node."""
        sel = self.new == node
        return self.existing[sel], self.similarity[sel]


def merge_candidates(
    index: NodeIndex,
    new_ids,
    siblings: Sequence,
    *,
    threshold: float = DEFAULT_MERGE_THRESHOLD,
    k: int = 8,
    vectors=None,
) -> MergeCandidates:
    """Existing siblings of each new node with similarity >= ``threshold`` (at most ``k`` each).

    new_ids: i8[b] the new nodes. siblings: ``b`` id arrays, the current
    children of each new node's parent (the new node itself, if present, is
    ignored; unknown or deleted siblings are skipped). vectors: f[b, dim] the
    new nodes' vectors; None takes them from the index (the new nodes must then
    be in it already). All queries run as one batch.
    """
    new_ids = np.asarray(new_ids)
    if new_ids.ndim != 1 or (new_ids.size and not np.issubdtype(new_ids.dtype, np.integer)):
        raise InputError(f"new_ids must be 1-D integer node ids, got {new_ids.dtype}{list(new_ids.shape)}")
    new_ids = new_ids.astype(np.int64, copy=False)
    b = new_ids.shape[0]
    siblings = list(siblings)
    if len(siblings) != b:
        raise InputError(f"siblings holds {len(siblings)} id sets for {b} new nodes; expected one per node")
    if not np.isfinite(threshold):
        raise InputError(f"threshold must be finite, got {threshold!r}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be a positive int, got {k!r}")
    empty = MergeCandidates(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    if b == 0:
        return empty
    q = index.vectors(new_ids) if vectors is None else vectors
    sets = []
    for j, s in enumerate(siblings):
        s = np.asarray(s).reshape(-1)
        if s.size and not np.issubdtype(s.dtype, np.integer):
            raise InputError(f"siblings[{j}] must be integer node ids, got dtype {s.dtype}")
        s = s.astype(np.int64, copy=False)
        sets.append(s[s != new_ids[j]])
    ids, sims = index.search_threshold(q, threshold, k, within=sets, skip_missing=True)
    ids = np.atleast_2d(ids)
    sims = np.atleast_2d(sims)
    rows, cols = np.nonzero(ids >= 0)
    return MergeCandidates(new_ids[rows], ids[rows, cols], sims[rows, cols].astype(np.float32))
