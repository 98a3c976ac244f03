"""The round contract between self-evolving methods and executors.

Self-evolving methods are sequential by nature: episode t uses what episodes
before it learned. To run them in parallel with reproducible results, episodes
run in *rounds* of ``round_size``:

1. the executor takes a read-only :meth:`Method.snapshot` of the experience
   (a dict of NumPy arrays: zero-copy through Ray's object store);
2. it splits the round's episodes over workers; each worker calls
   :meth:`Method.run_episodes` on its share with that snapshot and its own LLM
   backend. The result of an episode depends only on the snapshot, the episode
   and its seed, never on which other episodes share the call or the worker;
3. at the barrier the executor calls :meth:`Method.apply` with every result of
   the round, sorted by ``episode_id``; updates are keyed by episode id and
   applied exactly once.

A run may also give each round's size (a plan, e.g. forecasting's leak-free
rounds). Round size 1 is exactly the sequential run. Within a round, episodes do
not see each other's experience (staleness of at most ``round_size - 1`` episodes).

Arrays may arrive read-only: the snapshot given to ``run_episodes`` always is
(zero-copy views of Ray's object store; the local executor freezes them too),
and on Ray so are the ``updates`` arrays given to ``apply``: copy before
writing. The method object itself is pickled to Ray workers once per run, so
``run_episodes`` must read experience only from the snapshot. Executors live in
:mod:`engine.executor` (local) and :mod:`cluster.ray_executor` (Ray).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from engine.llm.base import LLMBackend

Snapshot = Mapping[str, np.ndarray]


def request_seed(*parts: object) -> int:
    """A stable non-negative 63-bit seed from any printable parts (episode seed, step, role, text): how an
    episode derives each request's seed from its own seed, so its results never depend on the round's other
    episodes (point 2 above). Python's ``hash`` is salted per process; this is not, so a request gets the same
    seed on every worker and in every batch."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True)
class Episode:
    """One task instance in the stream. ``episode_id`` is its position in the stream."""

    episode_id: int
    payload: Any  # task-specific: a puzzle, a news day, a question
    seed: int
    phase: str = "test"  # e.g. "warmup" | "test"


@dataclass
class EpisodeResult:
    """What one episode produced: a metrics record and its experience updates as arrays."""

    episode_id: int
    record: dict[str, Any]
    updates: dict[str, np.ndarray] = field(default_factory=dict)


class Method(Protocol):
    """A method on a benchmark (ToT, ToT+ToE, a baseline...), seen by an executor."""

    name: str

    def snapshot(self) -> dict[str, np.ndarray]:
        """Read-only arrays holding all experience the episodes of a round may read."""
        ...

    def run_episodes(
        self, snapshot: Snapshot, episodes: Sequence[Episode], llm: LLMBackend
    ) -> list[EpisodeResult]:
        """Run ``episodes`` against ``snapshot``, batching all LLM prompts of a step into one call."""
        ...

    def apply(self, results: Sequence[EpisodeResult]) -> None:
        """Apply one round's updates, in the given (episode id) order. Called once per round."""
        ...


# --- Optional hooks (an executor checks for them with ``hasattr``) -------------------------


class Checkpointable(Protocol):
    """A method whose experience (store, feedback ledger...) can be saved between rounds.

    Executors write the state into a fresh staging folder and commit it atomically
    together with the round cursor, so ``save_state`` only writes files under
    ``directory`` (it need not fsync or rename). ``load_state`` reads what
    ``save_state`` wrote into a method built from the same config. A method
    without these hooks is checkpointed by pickling its ``__dict__``
    (see :mod:`engine.checkpoint`).
    """

    def save_state(self, directory: Path) -> None: ...

    def load_state(self, directory: Path) -> None: ...


class ViewSnapshots(Protocol):
    """A method whose snapshot can also come as zero-copy views of its live arrays.

    ``snapshot()`` must return arrays that later ``apply`` calls never change (the local
    executor keeps old snapshots with ``pipeline_rounds``). An executor that serializes the
    snapshot before the next ``apply`` (Ray's store owner: a task's return value is stored
    before the actor runs its next task) calls ``snapshot_views()`` instead when the method
    has it, and skips one full copy of the store per round.
    """

    def snapshot_views(self) -> Snapshot: ...


def served_snapshot(method) -> Snapshot:
    """The round's snapshot for a reader that is done with it before the next ``apply`` (a store owner, whose
    return value Ray stores at once; a worker running a share on its replica): ``snapshot_views()`` when the
    method has it (no copy of the store), else ``snapshot()``."""
    views = getattr(method, "snapshot_views", None)
    return views() if views is not None else method.snapshot()


class Shardable(Protocol):
    """A method whose experience splits by subtree across several store owners.

    ``split(count)`` returns ``count`` methods; shard ``k`` holds the subtrees
    with ``subtree_id % count == k`` and its ``apply`` applies only the update
    rows that touch its subtrees (every round's results go to every shard).
    ``merge_snapshots`` rebuilds the snapshot of the whole store from the
    shards' snapshots (equal to what the unsharded ``snapshot()`` returns), and
    ``join`` sets this method's experience from its shards at the end of a run.
    """

    def split(self, count: int) -> list["Method"]: ...

    def merge_snapshots(self, parts: Sequence[Snapshot]) -> dict[str, np.ndarray]: ...

    def join(self, shards: Sequence["Method"]) -> None: ...
