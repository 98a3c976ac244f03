"""Store owners: the single writers of a run's experience, one per store shard.

A :class:`StoreOwner` holds the method (or, with several shards, the part of it
that ``method.split(count)`` gave shard ``k``: the subtrees with
``subtree_id % count == k``). Per round it serves a read-only snapshot (its
return value lives in Ray's object store; workers receive the ObjectRef as a
top-level argument, so their NumPy arrays map the shared memory without a
copy), then at the barrier applies the round's results in episode order and
writes its state into the round's checkpoint staging folder. Updates are keyed
by episode id: a round delivered twice is ignored, an episode id already
applied in another round is refused.

Store owners are pinned to the driver's node (``NodeAffinitySchedulingStrategy``)
so the checkpoint folder the driver names is on their disk; on a multi-node
cluster no shared file system is needed.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any, Sequence

from engine.checkpoint import load_method_state, save_method_state, state_dir
from engine.errors import StoreError
from engine.rounds import EpisodeResult, served_snapshot


class StoreOwner:
    """Single writer of one store shard (``shard=None``: the whole, unsharded store)."""

    def __init__(self):
        self.method = None

    def load(self, shard: int | None, method, state_path: str | None = None) -> int:
        """Take shard ``shard`` of a new run (its state from ``state_path`` when resuming)."""
        self.shard = shard
        self.method = copy.deepcopy(method)  # arrays from the object store are read-only; the owner writes
        if state_path is not None:
            load_method_state(self.method, Path(state_path))
        self.applied_rounds: set[int] = set()
        self.applied_ids: set[int] = set()
        return os.getpid()

    def snapshot(self) -> dict:
        """The shard's read-only arrays for one round (stored once in the object store). Ray stores a
        task's return value before this actor runs its next task, so a method's zero-copy views
        (:class:`engine.rounds.ViewSnapshots`) are serialized before any apply changes them."""
        return served_snapshot(self.method)

    def apply(self, round_index: int, results: Sequence[EpisodeResult], staging: str | None) -> dict[str, Any]:
        """Apply one round's results (sorted by episode id) and checkpoint the shard into ``staging``."""
        if round_index in self.applied_rounds:
            return {"skipped": True, "apply_s": 0.0, "save_s": 0.0}
        ids = [r.episode_id for r in results]
        if ids != sorted(ids):
            raise StoreError(f"round {round_index}: results must come sorted by episode_id, got {ids[:10]}")
        again = self.applied_ids.intersection(ids)
        if again:
            raise StoreError(f"round {round_index}: episodes {sorted(again)[:10]} were already applied")
        t0 = time.perf_counter()
        self.method.apply(results)
        t1 = time.perf_counter()
        self.applied_rounds.add(round_index)
        self.applied_ids.update(ids)
        if staging is not None:
            save_method_state(self.method, state_dir(Path(staging), self.shard))
        return {"skipped": False, "apply_s": t1 - t0, "save_s": time.perf_counter() - t1}

    def apply_shares(self, round_index: int, staging: str | None, *shares) -> dict[str, Any]:
        """:meth:`apply` of a round given as the workers' share results ``(results, stats)``, in any order.

        The driver passes the shares' ObjectRefs as they came back from the workers,
        so the results go from the object store to every store owner without being
        serialized again; they are put in episode-id order here.
        """
        results = sorted((r for share in shares for r in share[0]), key=lambda r: r.episode_id)
        return self.apply(round_index, results, staging)

    def export(self):
        """The shard's method, pickled back to the driver at the end of a run (then forgotten)."""
        method, self.method = self.method, None
        return method
