"""Episode workers (Ray actors, one LLM backend each) and the pool that feeds them.

:class:`EpisodeWorker` owns one LLM backend built in its own process from a
picklable factory (on a GPU cluster: one vLLM engine per GPU, the actor created
with ``num_gpus=1``; a tensor-parallel engine spanning several GPUs gets its
bundle from a placement group, see docs/cluster.md). Each call runs a share of
a round's episodes against the round's snapshot, batching the LLM prompts of
the share, and returns the results with their updates as NumPy arrays plus the
share's throughput figures.

:class:`EpisodePool` follows ``ray.util.ActorPool`` (ray/python/ray/util/actor_pool.py):
``submit(fn, value)`` with ``fn(actor, value) -> ObjectRef``, ``has_next()``,
``get_next_unordered()``, an idle-actor list and a future->actor map. It adds
what ActorPool leaves to the caller (its ``_get_result`` drops a dead actor and
re-raises): a share whose actor died (``RayActorError``) is resubmitted to the
next idle actor, at most ``max_attempts`` times. The actor goes back to the idle
list while Ray may still restart it (``max_restarts``), so its later shares
queue on the restarted process. Results are keyed by episode id by the caller,
so a retried share cannot be counted twice.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from typing import Any, Callable, Sequence

import ray
import ray.util

from cluster.store_actors import freeze_held, thaw_held
from engine.errors import BackendError
from engine.executor import (
    WorkerBackends, check_streams, freeze, merge_usage, run_streams, server_books, stream_pool,
)
from engine.llm.base import MeteredBackend
from engine.rounds import Episode, EpisodeResult, served_snapshot


class ReplicaLost(RuntimeError):
    """A worker has no replica of the run at the round it is asked for (it was restarted): rebuild it."""


class EpisodeWorker:
    """One worker: one LLM backend for its lifetime, and the method of the current run.

    ``streams`` > 1: each share runs as that many concurrent streams (:func:`engine.executor.run_streams`).
    ``shares`` > 1: the actor is created with ``max_concurrency = shares`` and runs that many shares at
    once, each in its own actor thread, all on the one backend (up to ``streams x shares`` calls in flight).
    """

    def __init__(self, index: int, llm_factory: Callable[[], Any], streams: int = 1, shares: int = 1, runs: int = 1):
        self.index = index
        self.llm = MeteredBackend(llm_factory(), by_episode=False)  # built once (a vLLM engine loads for minutes); totals
        # runs at once whose LLM configs differ (the seed): a backend each, all on this worker's engine
        self._backends = WorkerBackends()
        self._backends.add(llm_factory, self.llm.backend)
        check_streams(self.llm, streams * shares * runs)
        self.streams = streams
        self._pool = stream_pool(streams * shares * runs) if streams > 1 else None
        self._lock = threading.Lock()  # the worker's meter and method cache, for shares that run at once
        # the methods of the runs it serves, by method ref (runs at once: one per run; the oldest dropped first)
        self._methods: dict[str, Any] = {}
        self._keep = runs + 1
        self._replica = None  # replica mode: this run's experience, applied here round by round
        self._replica_key = None  # the run (method ref) the replica belongs to
        self._replica_rounds = 0  # rounds applied to it

    def _backend_for(self, method_ref: list):
        """The backend of the run ``method_ref`` names: ``[method ref, LLM factory]`` (runs at once: the run's own
        config, on this worker's engine) or ``[method ref]`` (the worker's)."""
        if len(method_ref) < 2 or method_ref[1] is None:
            return self.llm.backend
        return self._backends.get(method_ref[1])

    def _method_for(self, method_ref: list) -> tuple[str, Any]:
        """``(key, method)`` of the run ``method_ref`` names: fetched on the run's first share here."""
        key = method_ref[0].hex()
        with self._lock:
            method = self._methods.get(key)
        if method is None:
            method = ray.get(method_ref[0])
            with self._lock:
                self._methods[key] = method
                evicted = len(self._methods) > self._keep
                while len(self._methods) > self._keep:
                    self._methods.pop(next(iter(self._methods)))
            if evicted:  # that run has ended: what only the collector frees goes back to it
                thaw_held()
            elif self._keep > 2:  # runs at once: many runs' methods held here (store_actors.freeze_held)
                freeze_held()
        return key, method

    def books(self) -> dict[str, Any] | None:
        """The books of this worker's modelled engine now (``server_model``), else None."""
        return server_books(self.llm)

    def run(self, method_ref: list, episodes: Sequence[Episode], *snapshot_parts
            ) -> tuple[list[EpisodeResult], dict[str, Any]]:
        """Run ``episodes`` on the round's snapshot (one part per store shard, read-only, zero-copy).

        ``method_ref`` is ``[ObjectRef]`` of the run's method (nested, so Ray does not
        resolve it per call): fetched on the first share of a run, or after a restart.
        The method brings code and config; experience is read only from the snapshot.
        The share meters its own calls (shares may run at once) and adds them to the worker's meter.
        """
        t0, c0, started = time.perf_counter(), time.process_time(), time.time()
        _, method = self._method_for(method_ref)
        if len(snapshot_parts) == 1:
            snapshot = snapshot_parts[0]
        else:
            snapshot = method.merge_snapshots(snapshot_parts)
        return self._run(method, snapshot, episodes, t0, c0, started, self._backend_for(method_ref))

    # -- replica mode (RayExecutor replicas): the worker applies every round to its own copy ------
    def run_on_replica(self, method_ref: list, round_index: int, episodes: Sequence[Episode], start: int,
                       counts: Sequence[int], *shares) -> tuple[list[EpisodeResult], dict[str, Any]]:
        """Run ``episodes`` of round ``round_index`` on the replica, after applying the rounds it lacks.

        ``shares`` are the share results ``(results, stats)`` of rounds ``start .. round_index - 1``
        (``counts[j]`` of them for round ``start + j``, in any order); each round is applied in
        episode-id order, as a store owner applies it, so the replica's snapshot is the one a store
        owner would serve. ``start = 0`` builds a new replica from the run's method first (a new run,
        or a worker Ray restarted); a worker whose replica is older than ``start`` (it was restarted
        unnoticed) raises :class:`ReplicaLost`, and the executor sends every round again.
        """
        t0, c0, started = time.perf_counter(), time.process_time(), time.time()
        t = time.perf_counter()
        applied = self._catch_up(method_ref, start, counts, shares)
        apply_s = time.perf_counter() - t
        if self._replica_rounds != round_index:
            raise ReplicaLost(f"worker {self.index}: replica at round {self._replica_rounds}, asked for {round_index}")
        # views: this actor runs one call at a time, so no apply touches the replica while the share reads it
        results, stats = self._run(self._replica, freeze(served_snapshot(self._replica)), episodes, t0, c0, started)
        stats["apply_s"] = apply_s if applied else 0.0
        return results, stats

    def finish_replica(self, method_ref: list, rounds: int, start: int, counts: Sequence[int], *shares):
        """Apply the rounds the replica lacks up to the run's last (``rounds - 1``) and hand it back: the run's
        final method. Arguments as :meth:`run_on_replica`'s."""
        self._catch_up(method_ref, start, counts, shares)
        if self._replica_rounds != rounds:
            raise ReplicaLost(f"worker {self.index}: replica at round {self._replica_rounds}, asked for {rounds}")
        method, self._replica, self._replica_key = self._replica, None, None
        return method

    def _catch_up(self, method_ref: list, start: int, counts: Sequence[int], shares) -> bool:
        key, method = self._method_for(method_ref)
        if start == 0:
            # deepcopy: arrays deserialized from the object store are read-only; the replica is written
            self._replica, self._replica_key, self._replica_rounds = copy.deepcopy(method), key, 0
        elif self._replica_key != key or self._replica_rounds < start:
            raise ReplicaLost(f"worker {self.index} holds no replica of this run at round {start}")
        applied, first = False, 0
        for j, n in enumerate(counts):
            rounds = start + j + 1  # applied rounds once round start + j is in
            if self._replica_rounds < rounds:
                self._replica.apply(sorted((r for share in shares[first:first + n] for r in share[0]),
                                           key=lambda r: r.episode_id))
                self._replica_rounds, applied = rounds, True
            first += n
        return applied

    def _run(self, method, snapshot, episodes, t0: float, c0: float, started: float, backend=None):
        server0 = server_books(self.llm)
        meter = MeteredBackend(self.llm.backend if backend is None else backend, by_episode=False)
        results = run_streams(method, snapshot, list(episodes), meter, self.streams, self._pool)
        with self._lock:
            merge_usage(self.llm.meter, meter.meter)
        stats = {"worker": self.index, "episodes": len(episodes), "busy_s": time.perf_counter() - t0,
                 "cpu_s": time.process_time() - c0, "cpu_start": c0, "cpu_end": time.process_time(),
                 "llm_calls": meter.meter.total.calls, "pid": os.getpid(), "started_at": started,
                 "ended_at": time.time()}
        if server0 is not None:  # a modelled engine (llm.backend = "server_model"): its books before and after
            stats["server_before"], stats["server"] = server0, server_books(self.llm)
        return results, stats

    def pid(self) -> int:
        return os.getpid()

    def placement(self) -> int:
        """Bundles in the placement group this worker runs in (0: none): where TP engine workers go."""
        group = ray.util.get_current_placement_group()
        return 0 if group is None else len(group.bundle_specs)


# Runs at once (a pool with ``load``): a run's next share goes back to a worker that already holds the run (and
# runs none of its shares now) when that worker has at most this many more shares in flight than the least loaded
# one. A worker meeting a run for the first time fetches and unpickles its method and builds the run's backend
# (finance: a 1.3 MB method, ~8 ms of CPU, 10-300 ms before the share starts at 32 workers, and a gen-2 garbage
# collection of ~100 ms now and then over every method it keeps): without affinity each of 32 workers met ~28 of
# finance's 96 runs, with it ~9 (benchmarks/results/scaling.md). Records do not depend on the worker.
AFFINITY = 1


class EpisodePool:
    """``ray.util.ActorPool`` conventions plus resubmission of shares whose actor died."""

    def __init__(self, actors: Sequence["ray.actor.ActorHandle"], max_restarts: int = 2, max_attempts: int = 3,
                 slots: int = 1, on_lost: Callable[[int], None] | None = None, load: list[int] | None = None,
                 affinity: int | None = None):
        self._actors = list(actors)
        # shares in flight on each actor over every pool that shares it (runs at once): the next share goes to
        # the least loaded idle actor, or to one that already holds this pool's run when that one is at most
        # ``affinity`` shares busier (below); None: this pool's idle order alone
        self.load = load
        self.affinity = AFFINITY if affinity is None else affinity  # the module's, read when the pool is made
        self.held: set[int] = set()  # actors that ran a share of this pool's run (they hold its method)
        # called with an actor's index when a share was lost with it (the actor died, or restarted and
        # reported ReplicaLost): the caller can rebuild what the actor held before its next share
        self.on_lost = on_lost
        self.slots = slots  # shares an actor runs at once (its max_concurrency): it is idle that many times over
        self._idle: list[int] = list(range(len(self._actors))) * slots  # actor indices, one per free slot, FIFO
        self._future_to_task: dict[Any, tuple[int, Any, Callable, int]] = {}
        self._pending: list[tuple[Callable, Any, int]] = []
        self._failures = [0] * len(self._actors)
        self.max_restarts = max_restarts
        self.max_attempts = max_attempts
        self.retried = [0] * len(self._actors)  # shares lost on each actor and resubmitted

    def submit(self, fn: Callable[[Any, Any], Any], value: Any, attempt: int = 0) -> None:
        """Schedule ``fn(actor, value)`` on the next idle actor (or queue it until one is idle)."""
        if self._idle:
            at = 0 if self.load is None else self._pick()
            i = self._idle.pop(at)
            future = fn(self._actors[i], value)
            self._future_to_task[future] = (i, value, fn, attempt)
            self.held.add(i)
            if self.load is not None:
                self.load[i] += 1
        else:
            self._pending.append((fn, value, attempt))

    def _pick(self) -> int:
        """Where in the idle list the next share goes (runs at once): the first idle slot of the least loaded
        actor (ties: idle order), unless an actor that holds this run, and runs none of its shares now, is at
        most ``affinity`` shares busier (a round's shares still spread over as many workers as before)."""
        first: dict[int, int] = {}  # actor -> its first idle slot
        for k, i in enumerate(self._idle):
            first.setdefault(i, k)
        best = min(first.values(), key=lambda k: (self.load[self._idle[k]], k))
        mine = {task[0] for task in self._future_to_task.values()}  # actors running a share of this run now
        home = min((k for i, k in first.items() if i in self.held and i not in mine),
                   key=lambda k: (self.load[self._idle[k]], k), default=None)
        if home is not None and self.load[self._idle[home]] <= self.load[self._idle[best]] + self.affinity:
            return home
        return best

    def sort_idle(self) -> None:
        """Hand the next shares to idle actors in index order (call at a round's start, all idle).

        Without it the idle list keeps the order in which actors finished their last
        share, so a round's i-th share lands on a different worker from run to run.
        With it, share i of a round goes to worker i (with several slots, shares
        W .. 2W-1 go to the workers' second slots, and so on) whenever the workers start the
        round idle: the same episodes meet the same worker's per-process caches
        (memo tables, an engine's prefix cache) when a workload is rerun.
        """
        seen: dict[int, int] = {}
        for i in self._idle:
            seen[i] = seen.get(i, 0) + 1
        # every actor's first free slot in index order, then every second one, ...: a round's first shares spread
        self._idle = [i for rank in range(max(seen.values(), default=0)) for i in sorted(seen) if seen[i] > rank]

    def has_next(self) -> bool:
        return bool(self._future_to_task) or bool(self._pending)

    def get_next_unordered(self, timeout: float | None = None) -> Any:
        """The next result to finish, resubmitting shares whose actor died on the way."""
        return self.get_next_with_ref(timeout)[1]

    def get_next_with_ref(self, timeout: float | None = None) -> tuple[Any, Any]:
        """``(ObjectRef, result)`` of the next share to finish: the ref can be handed on (zero-copy)."""
        while True:
            if not self._future_to_task:
                raise BackendError("every episode worker died; no worker left to run the pending shares")
            ready, _ = ray.wait(list(self._future_to_task), num_returns=1, timeout=timeout)
            if not ready:
                raise TimeoutError(f"no episode share finished within {timeout} s")
            future = ready[0]
            i, value, fn, attempt = self._future_to_task.pop(future)
            if self.load is not None:
                self.load[i] -= 1
            try:
                result = ray.get(future)
            except (ray.exceptions.RayActorError, ReplicaLost) as exc:
                # ReplicaLost: the actor restarted between shares (Ray raises the worker's error as a
                # RayTaskError that is also a ReplicaLost); counted as a death
                if self.on_lost is not None:
                    self.on_lost(i)
                self.held.discard(i)  # a restarted process holds nothing of the run
                self._failures[i] += 1 / self.slots  # one death loses up to ``slots`` shares at once
                self.retried[i] += 1
                if self._failures[i] <= self.max_restarts:
                    self._idle.append(i)  # Ray restarts it; later calls queue on the new process
                if attempt + 1 >= self.max_attempts:
                    raise BackendError(
                        f"an episode share failed {attempt + 1} times (max_attempts={self.max_attempts}): "
                        f"its worker died each time; last error: {exc}"
                    ) from exc
                self._resubmit_pending()
                self.submit(fn, value, attempt + 1)
                continue
            self._idle.append(i)
            self._resubmit_pending()
            return future, result

    def _resubmit_pending(self) -> None:
        while self._pending and self._idle:
            fn, value, attempt = self._pending.pop(0)
            self.submit(fn, value, attempt)
