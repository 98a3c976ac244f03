"""The Ray executor: a round's episodes sharded over worker actors, updates applied by store owners.

Same interface and same results as :class:`engine.executor.LocalExecutor` at the
same round size, whatever the number of workers (see :mod:`engine.rounds`).
Per round:

1. every store owner serves its ``snapshot()`` (the first round asks for it; a later
   one reads what the previous apply call served with its acknowledgement: one
   owner call a round); the driver keeps only the ObjectRefs (the arrays stay in
   Ray's object store, put there once);
2. the round is cut into contiguous shares (``chunks_per_worker`` per worker)
   dispatched through :class:`cluster.workers.EpisodePool` (``ray.util.ActorPool``
   conventions); each worker gets the snapshot refs as top-level arguments, so
   Ray hands it read-only, zero-copy NumPy views of the shared memory;
3. the driver collects the results (a share lost with its worker is rerun on
   another) and hands every store owner the shares' ObjectRefs (no second
   serialization); each owner sorts them by episode id, applies them in that
   order and writes its state into the round's checkpoint staging folder; the
   driver then commits the checkpoint. Rounds without a checkpoint do not wait
   for the owners' acknowledgements: the next round's shares wait for the
   snapshot the apply serves, and the acknowledgements are checked before the
   next apply and at the end of the run.

At the end the driver's ``method`` takes the store owners' state (``join`` for
several shards), so it ends exactly as after a local run.

Replica mode (``replicas``; by default on when a run has one store shard, no
checkpoint, ``pipeline_rounds = 0`` and one share per worker at a time): no store
owner. Each worker keeps a replica of the run's method; its call for round k
takes the shares of every round its replica lacks (normally round k-1) as
arguments (their ObjectRefs, so Ray hands the results over with no driver round
trip), applies each round in episode-id order, as an owner would, and runs its
share on the replica's snapshot. Two messages a round instead of four or five, and
no snapshot in the object store. A restarted worker's next share carries every
round from round 0; the final state comes from the worker whose replica lacks the
fewest rounds, after applying them. Same results as the store owners'.

Failure semantics: a worker killed mid-round is restarted by Ray
(``max_restarts``) and its share is rerun elsewhere (``max_attempts``); a
killed driver takes its actors with it and resumes from the last checkpoint
(``checkpoint_dir`` given again); a store owner that dies fails the runs it
holds (every run at once: one owner per shard serves them all), which then
resume from the last checkpoint.
"""

from __future__ import annotations

import copy
import functools
import math
import threading
import time
import uuid
from typing import Any

import numpy as np
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from cluster.auth import connection_hint, enable_driver_token_auth
from cluster.store_actors import StoreOwner, pickle_method
from cluster.workers import EpisodePool, EpisodeWorker, ReplicaLost
from engine.errors import BackendError, ConfigError
from cluster.resources import check_cluster_resources
from engine.executor import REPLICA_MODES, RoundLoop, books_since, check_concurrent_runs, worker_stats
from engine.http import unreachable
from engine.rounds import served_snapshot


def _run_share(run_ref: list, snapshot_refs, actor, episodes):
    """``run_ref``: ``[method ObjectRef, LLM factory or None]`` (a list: Ray passes the ref unresolved)."""
    return actor.run.remote(list(run_ref), episodes, *snapshot_refs)


_INIT_LOCK = threading.Lock()


class Fleet:
    """The actors of an executor and of its forks (runs at once share them): the episode workers, the
    factory and shape they were built with, how many shares each has in flight over every run (``load``:
    a run's pool hands its next share to the least loaded idle worker, so runs at once spread over the
    workers instead of all starting on worker 0), and the store owners, one per shard, each holding
    its shard of every run (:mod:`cluster.store_actors`)."""

    def __init__(self, n_workers: int):
        self.lock = threading.Lock()
        self.workers: list = []
        self.llm_factory = None
        self.shape = None
        self.load = [0] * n_workers
        # every worker answered since they were built or one was last lost: a run at once starts without asking
        # them again (RayExecutor._start)
        self.answered = False
        self.runs = 0  # runs in progress on these workers (a run's round is cut for its part of them)
        self.stores: list = []  # StoreOwner handles: shard k of every run at once is owner k's (store_actors)


def union_s(spans) -> float:
    """Seconds covered by the union of ``(start, end)`` intervals (a worker's shares may overlap)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def share_bounds(n: int, workers: int, chunks: int, runs: int = 1, streams: int = 1) -> np.ndarray:
    """Where a round of ``n`` episodes is cut into shares: ``workers x chunks`` shares (at most ``n``) for one
    run. Runs at once split the workers: with ``runs`` in progress a round is cut for its run's part of them,
    ``workers x chunks / runs`` shares, but into no share smaller than the ``streams`` that run it while the
    workers allow (a share of fewer episodes than streams leaves streams idle; more shares balance the
    workers). So a share carries several episodes (one Ray call and one snapshot fetch for all of them)
    instead of one each: finance's 96 runs at once on 32 workers, a trading day of 8 episodes in 8 streams,
    went from 8 shares to 1 and from 122 to 222 episodes/s. Records do not depend on the cut."""
    k = min(n, workers * chunks, max(math.ceil(workers * chunks / max(1, runs)), math.ceil(n / max(1, streams))))
    return np.linspace(0, n, max(1, k) + 1).round().astype(int)


REPLICA_AUTO_BYTES = 64 * 2**20  # replicas="auto": the largest experience (snapshot bytes) copied into every worker


def probe_head(address: str | None, timeout_s: float) -> None:
    """Fail at once when nothing accepts a TCP connection at a head address ``[ray://]host:port``.

    Ray's own ``ray.init(address=...)`` retries an address where no head runs for minutes before it
    gives up; a connection attempt answers in ``timeout_s`` at most. Other addresses (``auto``, none)
    are left to Ray.
    """
    if not address or address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        return
    why = unreachable(host, int(port), timeout_s)
    if why:
        raise BackendError(
            f"no Ray head answers at {address} ({why}, [cluster] connect_timeout_s): start one there "
            f"(`ray start --head --port {port}`), fix --address, or leave --address out to start a local Ray cluster")


class RayExecutor(RoundLoop):
    """Rounds of episodes over ``workers`` Ray actors, each owning one LLM backend.

    Args:
        workers: number of episode workers (one LLM backend each).
        address: Ray cluster address (``ray start --head`` prints it); None starts
            a local cluster unless Ray is already initialised in this process.
        num_cpus_per_worker, num_gpus_per_worker: each worker's resources. On a GPU
            cluster with vLLM use ``num_gpus_per_worker=1`` (one engine per GPU).
        store_shards: store owners; > 1 needs a :class:`engine.rounds.Shardable` method.
        chunks_per_worker: shares per worker per round (more: better balance, smaller LLM batches).
        max_restarts: restarts Ray grants a dead worker; max_attempts: tries per share.
        init_kwargs: extra ``ray.init`` keywords when this executor starts Ray.
        tensor_parallel_size: GPUs (bundles) per worker for an engine spanning several GPUs: each
            worker gets a STRICT_PACK placement group of that many bundles of
            ``{"GPU": num_gpus_per_worker, "CPU": num_cpus_per_worker}`` and captures it for its
            child tasks, so vLLM (``distributed_executor_backend="ray"``) places its
            tensor-parallel workers there (vLLM's and Ray Data LLM's documented pattern).
        startup_timeout_s: how long to wait for the actors to be scheduled and built
            (an LLM engine load included) before failing with the resources asked for.
        pipeline_rounds: rounds in flight beyond the one collected (:class:`engine.executor.RoundLoop`):
            a worker done with its share of round k starts on round k+1 while the others finish.
        streams_per_worker: concurrent streams each worker cuts its share into
            (:func:`engine.executor.run_streams`): several calls in flight on the worker's LLM, the same results.
        shares_per_worker: shares each worker runs at once (a threaded actor, ``max_concurrency``); with
            ``chunks_per_worker`` > 1 a worker whose shares finish early takes the next ones (pull-based
            balance) while its other shares keep its engine busy. The same results.
        replicas: ``"auto"`` (default), ``"on"`` or ``"off"``: workers apply the rounds to their own replicas
            instead of store owners (module docstring). ``"auto"`` uses them when the run allows it (one store
            shard, no checkpoint, ``pipeline_rounds = 0``, ``shares_per_worker = 1``) and its experience is at
            most ``REPLICA_AUTO_BYTES`` (each worker holds a copy, where owners share one per node);
            ``"on"`` refuses a run that does not allow it. The same results.
    """

    name = "ray"

    def __init__(self, workers: int = 1, address: str | None = None, *, num_cpus_per_worker: float = 1.0,
                 num_gpus_per_worker: float = 0.0, store_shards: int = 1, chunks_per_worker: int = 1,
                 max_restarts: int = 2, max_attempts: int = 3, init_kwargs: dict | None = None,
                 checkpoint_every: int = 1, startup_timeout_s: float = 900.0, tensor_parallel_size: int = 1,
                 stats_path=None, pipeline_rounds: int = 0, streams_per_worker: int = 1, shares_per_worker: int = 1,
                 replicas: str = "auto", engine_probe=None, connect_timeout_s: float = 5.0, concurrent_runs: int = 1,
                 fleet: "Fleet | None" = None):
        settings = {k: v for k, v in locals().items() if k not in ("self", "fleet", "__class__")}
        super().__init__(checkpoint_every, stats_path, pipeline_rounds, engine_probe)
        # 0 (every run at once) is the runner's to resolve
        self.concurrent_runs = check_concurrent_runs(concurrent_runs or 1)
        self._settings = settings  # what fork() builds a sibling from
        self._fleet = fleet if fleet is not None else Fleet(workers)
        self._owns_fleet = fleet is None
        if replicas not in REPLICA_MODES:
            raise ConfigError(f"replicas must be one of {', '.join(map(repr, REPLICA_MODES))}, got {replicas!r}")
        self.replicas = replicas
        self._checkpointing = False
        self._use_replicas = False
        for key, value, low in (("workers", workers, 1), ("store_shards", store_shards, 1),
                                ("streams_per_worker", streams_per_worker, 1),
                                ("shares_per_worker", shares_per_worker, 1),
                                ("chunks_per_worker", chunks_per_worker, 1), ("max_restarts", max_restarts, 0),
                                ("max_attempts", max_attempts, 1), ("tensor_parallel_size", tensor_parallel_size, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{key} must be an integer >= {low}, got {value!r}")
        if num_cpus_per_worker < 0 or num_gpus_per_worker < 0:
            raise ConfigError(f"worker resources must be >= 0, got num_cpus_per_worker={num_cpus_per_worker}, "
                              f"num_gpus_per_worker={num_gpus_per_worker}")
        self.n_workers = workers
        self.streams_per_worker = streams_per_worker
        self.shares_per_worker = shares_per_worker
        self.address = address
        self.num_cpus_per_worker = num_cpus_per_worker
        self.num_gpus_per_worker = num_gpus_per_worker
        self.store_shards = store_shards
        self.chunks_per_worker = chunks_per_worker
        self.max_restarts = max_restarts
        self.max_attempts = max_attempts
        self.init_kwargs = dict(init_kwargs or {})
        self.startup_timeout_s = startup_timeout_s
        self.connect_timeout_s = float(connect_timeout_s)
        self.tensor_parallel_size = tensor_parallel_size
        self._groups: list = []  # one placement group per worker when tensor_parallel_size > 1
        self._owns_ray = False
        self._active_stores: list = []  # the fleet's store owners this run uses (one per shard)
        self._run_key = ""  # this run's name in the store owners
        # the current run's state (_start sets it, _finish clears it)
        self.pool: EpisodePool | None = None
        self._method_ref = None  # the run's method in the object store
        self._run_llm = None  # runs at once: the run's LLM factory, carried by each share
        self._startup_s = 0.0
        self._history: list[list] = []  # replica mode: each collected round's share refs
        # replica mode: rounds applied to each worker's replica once its latest share runs (None: none, or lost)
        self._replica_rounds: list[int | None] = []
        # per worker: episodes, LLM calls, its shares' (start, end) wall times (busy = their union: shares
        # may overlap) and, per process, the first and last CPU-time readings (CPU time is per process)
        self._per_worker: list[dict] = []
        self._server_start: dict[int, dict] = {}  # a worker's engine books at its first share of this run
        self._server_now: dict[int, dict] = {}
        self._store_apply: list[float] = []  # per round: the slowest store owner's apply
        self._round_of: dict[int, int] = {}  # episode id -> round, for shares of several rounds in flight
        self._finished: dict[int, list] = {}  # round -> [(share ref, results, stats)] collected so far
        self._shares_left: dict[int, int] = {}
        self._share_refs: list = []  # the collected round's share refs (store owners apply them)
        self._acks: list = []  # the store owners' apply calls in flight
        self._served: list | None = None  # the snapshot refs the last apply served (_apply), until a round reads them

    # the workers and what they were built from live in the fleet, which forks share (concurrent runs)
    def _set_workers(self, value) -> None:
        self._fleet.workers, self._fleet.answered = value, False

    workers = property(lambda self: self._fleet.workers, _set_workers)
    _llm_factory = property(lambda self: self._fleet.llm_factory,
                            lambda self, value: setattr(self._fleet, "llm_factory", value))
    _streams = property(lambda self: self._fleet.shape, lambda self, value: setattr(self._fleet, "shape", value))
    stores = property(lambda self: self._fleet.stores, lambda self, value: setattr(self._fleet, "stores", value))

    def fork(self) -> "RayExecutor":
        """A sibling executor for a run at the same time as this one's others, on the same workers (module
        docstring, concurrent runs); ``close()`` on this executor kills them."""
        self._ensure_ray()  # once, here: the forks find it up (and this executor's shutdown() stops it)
        return RayExecutor(**self._settings, fleet=self._fleet)

    def fleet_books(self):
        if not self.workers:
            return []
        return ray.get([w.books.remote() for w in self.workers])

    # -- Ray lifecycle ---------------------------------------------------------------------------
    def _ensure_ray(self) -> None:
        with _INIT_LOCK:  # runs at once start in several threads: one ray.init
            self._init_ray()

    def _init_ray(self) -> None:
        if ray.is_initialized():
            return
        kwargs = {"include_dashboard": False, "log_to_driver": True, **self.init_kwargs}
        probe_head(self.address, self.connect_timeout_s)  # nothing listening: fail now, not after Ray's retries
        enable_driver_token_auth(self.address)  # an existing cluster with token auth: send the token we hold
        try:
            ray.init(address=self.address, **kwargs)
        except ConnectionError as exc:
            raise BackendError(connection_hint(str(self.address))) from exc
        self._owns_ray = True

    def close(self) -> None:
        """Kill the executor's actors (a fork's are its parent's to kill). Ray stays up for the next executor of
        this process (a runner makes one per method and seed); ``ray.init`` shuts it down at exit."""
        if self._owns_fleet:
            self._kill(self.workers + self.stores)
            self.workers, self._llm_factory, self.stores = [], None, []

    def shutdown(self) -> None:
        """:meth:`close`, then shut Ray down if this executor started it."""
        self.close()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def _kill(self, actors) -> None:
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # pragma: no cover - already gone
                pass
        if any(a in self.workers for a in actors):
            for group in self._groups:
                remove_placement_group(group)
            self._groups = []

    def _worker_cls(self, index: int):
        """The actor class of worker ``index``: its own resources, or a tensor-parallel placement group."""
        cls = ray.remote(EpisodeWorker)
        # shares_per_worker > 1 or runs at once: a threaded actor running that many shares at once
        slots = self.shares_per_worker * self.concurrent_runs
        more = {"max_concurrency": slots} if slots > 1 else {}
        if self.tensor_parallel_size == 1:
            return cls.options(num_cpus=self.num_cpus_per_worker, num_gpus=self.num_gpus_per_worker,
                               max_restarts=self.max_restarts, max_task_retries=0, **more)
        bundle = {"CPU": self.num_cpus_per_worker}
        if self.num_gpus_per_worker:
            bundle["GPU"] = self.num_gpus_per_worker
        group = placement_group([dict(bundle) for _ in range(self.tensor_parallel_size)], strategy="STRICT_PACK")
        self._groups.append(group)
        # The actor itself holds no resources: the engine's tensor-parallel workers take the bundles.
        return cls.options(num_cpus=0, num_gpus=0, max_restarts=self.max_restarts, max_task_retries=0, **more,
                           scheduling_strategy=PlacementGroupSchedulingStrategy(
                               group, placement_group_capture_child_tasks=True))

    def run(self, method, episodes, llm_factory, round_size=1, progress=None, *, checkpoint_dir=None, **kwargs):
        self._checkpointing = checkpoint_dir is not None
        with self._fleet.lock:
            self._fleet.runs += 1
        try:
            return super().run(method, episodes, llm_factory, round_size, progress, checkpoint_dir=checkpoint_dir,
                               **kwargs)
        finally:
            with self._fleet.lock:
                self._fleet.runs -= 1

    def _replicas_for(self, method, shards: int) -> bool:
        """Whether this run's rounds are applied by the workers (``replicas``; class docstring)."""
        if self.replicas == "off":
            return False
        blockers = [why for why, bad in (("store_shards > 1", shards > 1), ("a checkpoint", self._checkpointing),
                                         ("pipeline_rounds > 0", self.pipeline_rounds > 0),
                                         ("shares_per_worker > 1", self.shares_per_worker > 1),
                                         ("concurrent_runs > 1", self.concurrent_runs > 1)) if bad]
        if self.replicas == "on":
            if blockers:
                raise ConfigError(f"replicas='on' needs one store shard, no checkpoint, pipeline_rounds = 0, "
                                  f"shares_per_worker = 1 and concurrent_runs = 1; this run has "
                                  f"{', '.join(blockers)} (set replicas to 'auto' or 'off')")
            return True
        if blockers:
            return False
        return sum(np.asarray(v).nbytes for v in served_snapshot(method).values()) <= REPLICA_AUTO_BYTES

    # -- RoundLoop hooks -------------------------------------------------------------------------
    def _shards(self, method) -> int:
        if self.store_shards > 1:
            missing = [h for h in ("split", "merge_snapshots", "join") if not hasattr(method, h)]
            if missing:
                raise ConfigError(f"store_shards={self.store_shards} needs a method with split/merge_snapshots/join; "
                                  f"{type(method).__name__} lacks {', '.join(missing)}")
        return self.store_shards

    def _start(self, method, llm_factory, cursor):
        """Start (or reuse) the actors and hand them this run's method and state.

        Workers live as long as the executor and keep their LLM backend across runs
        with an equal ``llm_factory`` (a vLLM engine loads once); store owners are
        reused and reloaded per run.
        """
        self._ensure_ray()
        if not self.workers:  # fail at once on resources the cluster can never give, rather than wait
            check_cluster_resources(self.n_workers, self.num_cpus_per_worker, self.num_gpus_per_worker,
                                    self.tensor_parallel_size,
                                    [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")])
        t0 = time.perf_counter()
        shards = self._shards(method)
        self._use_replicas = self._replicas_for(method, shards)
        self._history = []
        self._replica_rounds = [None] * self.n_workers
        if self._use_replicas:
            self._active_stores, loaded = [], []
        else:
            parts = [method] if shards == 1 else method.split(shards)
            if len(parts) != shards:
                raise AssertionError(f"{type(method).__name__}.split({shards}) returned {len(parts)} shards")
            with self._fleet.lock:  # runs at once: the first to need shard k starts its owner
                if len(self.stores) < shards:
                    here = NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=False)
                    store_cls = ray.remote(StoreOwner).options(num_cpus=0, max_restarts=0, scheduling_strategy=here)
                    self.stores += [store_cls.remote() for _ in range(shards - len(self.stores))]
                self._active_stores = self.stores[:shards]
            self._run_key = uuid.uuid4().hex
            loaded = [s.load.remote(self._run_key, None if shards == 1 else k, pickle_method(part),
                                    None if cursor is None else str(cursor.state_dir(None if shards == 1 else k)))
                      for k, (s, part) in enumerate(zip(self._active_stores, parts))]
        shape = (self.streams_per_worker, self.shares_per_worker, self.concurrent_runs)
        with self._fleet.lock:  # runs at once start here one after another: the first builds the workers
            # a fork's workers serve every run at once, each with its own LLM config (the share carries it)
            rebuild = self._streams != shape or (self._owns_fleet and self._llm_factory != llm_factory)
            if self.workers and rebuild:
                self._kill(self.workers)
                self.workers = []
            if not self.workers:
                self.workers = [self._worker_cls(i).remote(i, llm_factory, self.streams_per_worker,
                                                           self.shares_per_worker, self.concurrent_runs)
                                for i in range(self.n_workers)]
                self._llm_factory, self._streams = llm_factory, shape
            self._method_ref = ray.put(method)  # put once per run, fetched once by each worker
            # runs at once: each share names its run's LLM config (the worker builds a backend for it once)
            self._run_llm = None if self._owns_fleet else llm_factory
            # a run at once on workers that have all answered waits for its own store owners only, outside the
            # lock: asking 32 busy workers and waiting for its load in turn took ~115 ms a run, so finance's 96
            # runs started over ~10 s (benchmarks/results/scaling.md)
            ask = self.concurrent_runs == 1 or not self._fleet.answered
            if ask:
                self._await_actors(loaded, llm_factory)
                self._fleet.answered = True
        if not ask:
            self._await_actors(loaded, llm_factory, ask=False)
        self._startup_s = time.perf_counter() - t0  # process start, LLM backend build: not per-round cost
        self.pool = EpisodePool(self.workers, self.max_restarts, self.max_attempts, self.shares_per_worker,
                                on_lost=self._lost,
                                load=self._fleet.load if self.concurrent_runs > 1 else None)
        self._per_worker = [{"episodes": 0, "llm_calls": 0, "spans": [], "cpu": {}} for _ in range(self.n_workers)]
        self._server_start, self._server_now = {}, {}
        self._store_apply, self._round_of, self._finished, self._shares_left = [], {}, {}, {}
        self._served = None

    def _submit_round(self, index, batch, progress):
        # Queued behind the previous round's apply on each store owner (an actor runs its calls in
        # order), so the shares start as soon as the owners have applied it: no driver round trip.
        # With pipeline_rounds > 0 this is called before the later applies, so the round reads the
        # experience applied so far (RoundLoop), and its shares wait for idle workers in the pool.
        bounds = share_bounds(len(batch), self.n_workers, self.chunks_per_worker, self._fleet.runs,
                              self.streams_per_worker)
        n_chunks = len(bounds) - 1
        if self._use_replicas:  # the workers apply round index - 1 themselves (module docstring)
            submit = functools.partial(self._replica_share, index)
        else:  # the snapshot the last apply served (the state now), else asked for
            snapshot_refs, self._served = self._served or [s.snapshot.remote(self._run_key)
                                                           for s in self._active_stores], None
            submit = functools.partial(_run_share, [self._method_ref, self._run_llm], snapshot_refs)
        self.pool.sort_idle()  # share i -> worker i: reruns of a round meet the same warm caches
        for e in batch:
            self._round_of[e.episode_id] = index
        self._finished[index] = []
        self._shares_left[index] = n_chunks
        for a, b in zip(bounds[:-1], bounds[1:]):
            self.pool.submit(submit, batch[a:b])
        return index, progress

    def _await_actors(self, loaded: list, llm_factory, ask: bool = True) -> None:
        """Wait until the store owners have loaded and (``ask``) every worker answers, within ``startup_timeout_s``.

        A reused worker that Ray is restarting (a loaded cluster is slow to bring one back after a
        crash) answers ``ActorUnavailableError``: it is asked again until the deadline. One that will
        not come back (``ActorDiedError``: its restarts are spent) is replaced by a new worker.
        """
        deadline = time.monotonic() + self.startup_timeout_s
        pings = [w.pid.remote() for w in self.workers] if ask else []

        def too_slow(n_pending: int) -> BackendError:
            return BackendError(
                f"{n_pending} of {len(loaded) + len(pings)} actors did not start within "
                f"{self.startup_timeout_s} s; the cluster may lack the resources asked for "
                f"({self.n_workers} workers x num_cpus={self.num_cpus_per_worker}, "
                f"num_gpus={self.num_gpus_per_worker}); cluster resources: {ray.available_resources()}")

        _, pending = ray.wait(loaded + pings, num_returns=len(loaded) + len(pings),
                              timeout=max(0.0, deadline - time.monotonic()))
        if pending:
            raise too_slow(len(pending))
        ray.get(loaded)
        for i in range(len(pings)):
            while True:
                try:
                    ray.get(pings[i], timeout=max(0.0, deadline - time.monotonic()))
                    break
                except ray.exceptions.GetTimeoutError:
                    raise too_slow(1) from None
                except ray.exceptions.ActorDiedError:  # will not restart: a new worker in its place
                    self.workers[i] = self._worker_cls(i).remote(i, llm_factory, self.streams_per_worker,
                                                                 self.shares_per_worker, self.concurrent_runs)
                except ray.exceptions.ActorUnavailableError as exc:  # restarting: ask again
                    if time.monotonic() >= deadline:
                        raise too_slow(1) from exc
                    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                pings[i] = self.workers[i].pid.remote()

    def _missing_rounds(self, i: int, upto: int) -> tuple[int, list[int], list]:
        """``(start, counts, share refs)`` of the rounds worker ``i``'s replica lacks to reach ``upto`` applied
        rounds (all of them from round 0 when it has none)."""
        start = self._replica_rounds[i] or 0
        rounds = self._history[start:upto]
        return start, [len(h) for h in rounds], [r for h in rounds for r in h]

    def _replica_share(self, index, actor, episodes):
        """Submit a share of round ``index`` to ``actor`` in replica mode, with the rounds its replica lacks."""
        i = self.workers.index(actor)
        start, counts, refs = self._missing_rounds(i, index)
        self._replica_rounds[i] = index
        return actor.run_on_replica.remote([self._method_ref], index, episodes, start, counts, *refs)

    def _lost(self, i: int) -> None:
        """Worker ``i`` died or restarted under a share: the next run at once asks every worker again (and
        replaces one that will not come back); in replica mode, its replica is rebuilt."""
        self._fleet.answered = False
        if self._use_replicas:
            self._replica_lost(i)

    def _replica_lost(self, i: int) -> None:
        self._replica_rounds[i] = None  # its next share rebuilds the replica from round 0

    def _collect_round(self, handle):
        index, progress = handle
        while self._shares_left[index]:
            ref, (results, st) = self.pool.get_next_with_ref()
            if not results:
                raise AssertionError("an episode share returned no results")
            k = self._round_of[results[0].episode_id]
            self._finished[k].append((ref, results, st))
            self._shares_left[k] -= 1
            w = self._per_worker[st["worker"]]
            w["episodes"] += st["episodes"]
            w["llm_calls"] += st["llm_calls"]
            w["spans"].append((st["started_at"], st["ended_at"]))
            lo, hi = w["cpu"].get(st["pid"], (st["cpu_start"], st["cpu_end"]))
            w["cpu"][st["pid"]] = (min(lo, st["cpu_start"]), max(hi, st["cpu_end"]))
            if st.get("server") is not None:  # the books before the worker's first share, after its last
                first = self._server_start.get(st["worker"])
                if first is None or st["started_at"] < first[0]:
                    self._server_start[st["worker"]] = (st["started_at"], st["server_before"])
                last = self._server_now.get(st["worker"])
                if last is None or st["ended_at"] > last[0]:
                    self._server_now[st["worker"]] = (st["ended_at"], st["server"])
            if progress is not None:
                progress(st["episodes"])
        shares = self._finished.pop(index)
        del self._shares_left[index]
        out, spans = [], {}
        self._share_refs = []
        for ref, results, st in shares:
            self._share_refs.append(ref)
            out.extend(results)
            spans.setdefault(st["worker"], []).append((st["started_at"], st["ended_at"]))
            for r in results:
                self._round_of.pop(r.episode_id, None)
        self._round_compute = max((union_s(x) for x in spans.values()), default=0.0)
        if self._use_replicas:  # the next round's shares apply this one
            if len(self._history) != index:
                raise AssertionError(f"replica mode collected round {index} after {len(self._history)} rounds")
            self._history.append(list(self._share_refs))
            applied = [st["apply_s"] for _, _, st in shares if st.get("apply_s")]
            if applied:
                self._store_apply.append(max(applied))
        return out

    def _run_round(self, index, batch, progress):
        return self._collect_round(self._submit_round(index, batch, progress))

    def _apply(self, index, results, staging):
        """The barrier: every store owner applies the round (the workers' share refs, no re-serialization).

        Without a checkpoint to commit the driver does not wait for the owners' acknowledgements:
        the next round's shares wait for the snapshot the apply serves. They are checked before the next
        apply and before the run's end, so a failed apply still fails the run (and nothing of it is
        committed or returned).
        """
        if self._use_replicas:  # applied by the next round's shares, or at the end (_finish); no checkpoint here
            self._share_refs = []
            return
        self._check_acks()
        args = (self._run_key, index, None if staging is None else str(staging), *self._share_refs)
        # a round still to be submitted reads the state this apply leaves: the same call serves its snapshot
        # (round index + pipeline_rounds + 1 is submitted next; Prophet Arena's 96 runs at once made 1,888
        # snapshot calls a pass)
        if index + self.pipeline_rounds + 1 < self._rounds_total:
            pairs = [s.apply_shares_and_serve.options(num_returns=2).remote(*args) for s in self._active_stores]
            self._acks, self._served = [a for a, _ in pairs], [snap for _, snap in pairs]
        else:
            self._acks, self._served = [s.apply_shares.remote(*args) for s in self._active_stores], None
        self._share_refs = []
        if staging is not None:  # the checkpoint is committed right after: wait for every owner
            self._check_acks()

    def _check_acks(self) -> None:
        acks, self._acks = self._acks, []
        if acks:
            self._store_apply.append(max(a["apply_s"] for a in ray.get(acks)))

    def _finish(self, method, ok):
        method_ref, self._method_ref = self._method_ref, None
        if ok:
            try:
                self._check_acks()  # the last round's applies
            except Exception:
                ok = False
                self._finish(method, False)
                raise
        self._acks, self._served = [], None
        if not ok:  # a dead store owner or worker may be why: start fresh next run
            if self._owns_fleet:
                self._kill(self.workers + self.stores)
                self.workers, self._llm_factory, self.stores = [], None, []
            else:  # a fork's actors serve its siblings (its parent kills them at the end): forget this run
                for store in self._active_stores:
                    store.drop.remote(self._run_key)
            return
        if self._use_replicas:
            try:
                final = self._final_replica(method_ref)
            except Exception:
                self._finish(method, False)
                raise
            self._history = []
            if final is not None:
                vars(method).update(vars(final))
            return
        # deepcopy: arrays deserialized from the object store are read-only views
        owned = copy.deepcopy(ray.get([s.export.remote(self._run_key) for s in self._active_stores]))
        if len(owned) == 1:
            vars(method).update(vars(owned[0]))
        else:
            method.join(owned)

    def _final_replica(self, method_ref):
        """Replica mode: the run's final method, from the worker whose replica needs the fewest rounds applied
        (any other, rebuilt, if that one fails), copied so its arrays are writable. None when no round ran."""
        rounds = len(self._history)
        if not rounds:
            return None
        have = [-1 if r is None else r for r in self._replica_rounds]
        order = sorted(range(self.n_workers), key=lambda i: -have[i])  # the replica lacking the fewest rounds first
        error = None
        for i in order:
            start, counts, refs = self._missing_rounds(i, rounds)
            try:
                method = ray.get(self.workers[i].finish_replica.remote([method_ref], rounds, start, counts, *refs))
                return copy.deepcopy(method)
            except (ray.exceptions.RayActorError, ReplicaLost) as exc:  # try the next worker, from round 0
                self._replica_rounds[i] = None
                error = exc
        raise BackendError(f"no worker could hand back the run's final state: {error}") from error

    def _worker_stats(self) -> list[dict[str, Any]]:
        retried = self.pool.retried if self.pool is not None else [0] * self.n_workers
        now, start = self._server_now, self._server_start
        return [worker_stats(f"ray-{i}", w["episodes"], union_s(w["spans"]), w["llm_calls"], retried[i],
                             sum(hi - lo for lo, hi in w["cpu"].values()),
                             books_since(now.get(i, (0, None))[1], start.get(i, (0, None))[1]))
                for i, w in enumerate(self._per_worker)]

    def _record_stats(self, timing, wall, first, n_results, finished=False):
        super()._record_stats(timing, wall, first, n_results, finished)
        store = self._store_apply
        self.stats["store_apply_s"] = float(np.mean(store)) if store else 0.0
        self.stats["store_shards"] = self.store_shards
        self.stats["startup_s"] = self._startup_s
        self.stats["retried_chunks"] = sum(w["retried_chunks"] for w in self.stats["workers"])
        self.stats["streams_per_worker"] = self.streams_per_worker
        self.stats["shares_per_worker"] = self.shares_per_worker
        self.stats["replicas"] = self._use_replicas
