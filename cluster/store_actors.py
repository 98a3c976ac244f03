"""Store owners: the single writers of the runs' experience, one per store shard.

A :class:`StoreOwner` holds, per run it serves, the run's method (or, with several
shards, the part of it that ``method.split(count)`` gave shard ``k``: the subtrees with
``subtree_id % count == k``). One owner per shard serves every run of an executor and
of its forks (runs at once): an owner is a process, and Ray wakes each actor process
about every 10 ms, so one owner per run at once cost the cluster a core doing nothing
at 96 runs (benchmarks/results/scaling.md). Each call names its run (a key the driver
draws per run); the runs' states never meet.

Per round the owner serves a read-only snapshot (its return value lives in Ray's
object store; workers receive the ObjectRef as a top-level argument, so their NumPy
arrays map the shared memory without a copy), then at the barrier applies the
round's results in episode order and writes its state into the round's checkpoint
staging folder; when a later round will read the state this apply leaves, the same
call serves that snapshot (:meth:`StoreOwner.apply_shares_and_serve`). Updates are keyed by episode id: a round delivered twice is ignored,
an episode id already applied in another round is refused. An actor runs its calls
one at a time, in the order one driver submitted them, so a run's snapshot for
round k+1 is served after its apply of round k, whatever the other runs submit
in between.

Store owners are pinned to the driver's node (``NodeAffinitySchedulingStrategy``)
so the checkpoint folder the driver names is on their disk; on a multi-node
cluster no shared file system is needed.
"""

from __future__ import annotations

import gc
import os
import pickle
import time
from pathlib import Path
from typing import Any, Sequence

from engine.checkpoint import load_method_state, save_method_state, state_dir
from engine.errors import StoreError
from engine.rounds import EpisodeResult, served_snapshot


def pickle_method(method) -> bytes:
    """``method`` as :meth:`StoreOwner.load` takes it (cloudpickle: a method may hold local classes)."""
    from ray import cloudpickle

    return cloudpickle.dumps(method)


def freeze_held() -> None:
    """Keep every object this process holds now out of the cyclic garbage collector's later scans
    (:func:`gc.freeze`): called once a run's method is loaded (by a store owner, or fetched by a worker serving
    runs at once), as the method lives as long as its run.

    Unpickling a method allocates tens of thousands of containers; with the collector scanning them, each load
    paid for collections over every method the process already held (a full collection each time the heap had
    grown by a quarter). 96 loads held in one process, CPU a load, same run
    (``benchmarks/test_scaling.py::test_store_owner_loads_at_once``): finance 6.8 ms with the collector on, 1.8 ms
    with it off during the unpickle and the result frozen (3.7x); Game of 24 and Prophet Arena 0.1 and 0.5 ms
    either way (few objects each: arrays, and the shared context unpickled once per process).
    Frozen objects are still freed by reference counting. What only the collector frees (reference cycles: the
    ended run's, or garbage that was frozen with it) goes back to it when a run ends (:func:`thaw_held`) and is
    collected by its next full collection; none is forced (that would be a full collection in every worker at
    each short run of the default executor, whose workers, holding two methods at most, do not freeze).
    """
    gc.freeze()


def thaw_held() -> None:
    """A run this process held has ended: every frozen object back under the collector (:func:`freeze_held`)."""
    gc.unfreeze()


class _Shard:
    """One run's shard in an owner: its method and the rounds and episodes applied to it."""

    def __init__(self, shard: int | None, method):
        self.shard = shard
        self.method = method
        self.applied_rounds: set[int] = set()
        self.applied_ids: set[int] = set()


class StoreOwner:
    """Single writer of one store shard of every run it holds (``shard=None``: the whole, unsharded store)."""

    def __init__(self):
        self.runs: dict[str, _Shard] = {}

    def load(self, run: str, shard: int | None, pickled: bytes, state_path: str | None = None) -> int:
        """Take shard ``shard`` of run ``run``, pickled by the driver (:func:`pickle_method`; its state from
        ``state_path`` when resuming).

        Unpickling gives the owner its own objects, arrays writable as the driver's were. A method passed as
        the call's argument came out of Ray's object store with read-only arrays and had to be deep-copied; the
        one owner loads every run at once in turn while they start. Through the object store, driver and owner
        together (``benchmarks/test_scaling.py::test_store_owner_load``, same run): finance 2.3-2.5x less CPU,
        Game of 24 the same, Prophet Arena 0.88-0.93x (its method is mostly the shared context, which the copy
        did not duplicate and the pickle carries as bytes once more: ~1.5 ms a run)."""
        if not isinstance(pickled, (bytes, bytearray, memoryview)):
            raise TypeError(f"StoreOwner.load takes the method pickled (pickle_method), got {type(pickled).__name__}")
        collecting = gc.isenabled()
        gc.disable()  # every object unpickled is live: no collection over them (freeze_held)
        try:
            method = pickle.loads(pickled)
        finally:
            if collecting:
                gc.enable()
        if state_path is not None:
            load_method_state(method, Path(state_path))
        self.runs[run] = _Shard(shard, method)
        freeze_held()
        return os.getpid()

    def _run(self, run: str) -> _Shard:
        try:
            return self.runs[run]
        except KeyError:
            raise StoreError(f"this store owner holds no run {run!r} (not loaded, or already exported)") from None

    def snapshot(self, run: str) -> dict:
        """The shard's read-only arrays for one round (stored once in the object store). Ray stores a
        task's return value before this actor runs its next task, so a method's zero-copy views
        (:class:`engine.rounds.ViewSnapshots`) are serialized before any apply changes them."""
        return served_snapshot(self._run(run).method)

    def apply(self, run: str, round_index: int, results: Sequence[EpisodeResult],
              staging: str | None) -> dict[str, Any]:
        """Apply one round's results (sorted by episode id) and checkpoint the shard into ``staging``."""
        s = self._run(run)
        if round_index in s.applied_rounds:
            return {"skipped": True, "apply_s": 0.0, "save_s": 0.0}
        ids = [r.episode_id for r in results]
        if ids != sorted(ids):
            raise StoreError(f"round {round_index}: results must come sorted by episode_id, got {ids[:10]}")
        again = s.applied_ids.intersection(ids)
        if again:
            raise StoreError(f"round {round_index}: episodes {sorted(again)[:10]} were already applied")
        t0 = time.perf_counter()
        s.method.apply(results)
        t1 = time.perf_counter()
        s.applied_rounds.add(round_index)
        s.applied_ids.update(ids)
        if staging is not None:
            save_method_state(s.method, state_dir(Path(staging), s.shard))
        return {"skipped": False, "apply_s": t1 - t0, "save_s": time.perf_counter() - t1}

    def apply_shares(self, run: str, round_index: int, staging: str | None, *shares) -> dict[str, Any]:
        """:meth:`apply` of a round given as the workers' share results ``(results, stats)``, in any order.

        The driver passes the shares' ObjectRefs as they came back from the workers,
        so the results go from the object store to every store owner without being
        serialized again; they are put in episode-id order here.
        """
        results = sorted((r for share in shares for r in share[0]), key=lambda r: r.episode_id)
        return self.apply(run, round_index, results, staging)

    def apply_shares_and_serve(self, run: str, round_index: int, staging: str | None, *shares) -> tuple[dict, dict]:
        """:meth:`apply_shares`, then the run's snapshot as :meth:`snapshot` gives it after this apply (called with
        ``num_returns=2``): what the run's next round reads, with one call a round instead of two."""
        return self.apply_shares(run, round_index, staging, *shares), self.snapshot(run)

    def export(self, run: str):
        """The run's shard, pickled back to the driver at the end of the run (then forgotten)."""
        method = self._run(run).method
        del self.runs[run]
        thaw_held()
        return method

    def drop(self, run: str) -> None:
        """Forget run ``run`` (a failed run; nothing if it was never loaded)."""
        if self.runs.pop(run, None) is not None:
            thaw_held()

    def held(self) -> list[str]:
        """The runs this owner holds."""
        return sorted(self.runs)
