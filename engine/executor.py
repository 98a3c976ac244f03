"""Executors run a :class:`~engine.rounds.Method` over a stream of episodes in rounds.

This module holds the executor interface, the round loop every executor shares
(rounds, barrier, exactly-once bookkeeping, atomic checkpoints and resume,
throughput statistics) and the local (no Ray) executor, the embedded default.
Executors are found by name in a registry (:func:`executor_factory`): ``local``
is registered here, the Ray executor (``cluster/``, same interface) is an entry
point of the installed package, so this module never imports ``cluster``; pick
one with :func:`make_executor`. See :mod:`engine.rounds` for the round semantics.

Usage (what a runner does)::

    executor = make_executor(options)               # engine.tasks.RunOptions
    with progress_bar(len(episodes), enabled=options.progress) as bar:
        results = executor.run(method, episodes, llm_factory, round_size=8,
                               progress=bar.update, checkpoint_dir=out / "checkpoint")
    executor.stats                                  # per-worker episodes/s, LLM calls, overheads
    executor.close()

``llm_factory`` is called once per worker (in the worker's process for Ray), so
it must be picklable for Ray and should compare by value (a frozen dataclass such as
:class:`engine.llm.factory.BackendFactory`): an executor handed an equal factory keeps its
workers and their loaded engines, a different one restarts them.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from engine.checkpoint import (
    Cursor, RoundCheckpoints, fingerprint, load_method_state, save_method_state, state_dir,
)
from engine.config import apply_overrides, check, from_dict, load_toml, to_dict
from engine.errors import ConfigError, InputError, MissingExtraError
from engine.llm.base import LLMBackend, MeteredBackend, Usage
from engine.llm.engine_metrics import engine_summary
from engine.rounds import Episode, EpisodeResult, Method, Snapshot

LLMFactory = Callable[[], LLMBackend]
ProgressFn = Callable[[int], None]  # called with the number of episodes just finished
# episodes per round: one size for every round (the last may be shorter), or each round's size in order
RoundPlan = int | Sequence[int]


class RunCancelled(RuntimeError):
    """A run stopped between rounds because another run of the same experiment failed (concurrent runs)."""


class Executor(Protocol):
    name: str
    stats: dict[str, Any]

    def run(
        self,
        method: Method,
        episodes: Sequence[Episode],
        llm_factory: LLMFactory,
        round_size: RoundPlan = 1,
        progress: ProgressFn | None = None,
        *,
        checkpoint_dir: str | Path | None = None,
        resume: bool = True,
        run_key: str = "",
    ) -> list[EpisodeResult]: ...

    def close(self) -> None: ...


def round_sizes(n_episodes: int, round_size: RoundPlan) -> list[int]:
    """Each round's episode count for a stream of ``n_episodes``: ``round_size`` episodes per round (the last
    may be shorter), or a plan of sizes in order that must cover the stream exactly."""
    if isinstance(round_size, (int, np.integer)) and not isinstance(round_size, bool):
        if round_size < 1:
            raise ConfigError(f"round_size must be >= 1, got {round_size}")
        return [min(int(round_size), n_episodes - start) for start in range(0, n_episodes, int(round_size))]
    sizes = list(round_size)
    bad = [x for x in sizes if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1]
    if bad or sum(sizes) != n_episodes:
        raise ConfigError(f"a round plan must be integers >= 1 summing to the {n_episodes} episodes of the stream; "
                          f"got {len(sizes)} rounds summing to {sum(int(x) for x in sizes if not bad)}"
                          + (f", bad sizes {bad[:5]}" if bad else ""))
    return [int(x) for x in sizes]


def rounds(episodes: Sequence[Episode], round_size: RoundPlan) -> Iterable[list[Episode]]:
    """Split the stream into consecutive rounds by :func:`round_sizes`."""
    start = 0
    for size in round_sizes(len(episodes), round_size):
        yield list(episodes[start : start + size])
        start += size


def freeze(snapshot: Snapshot) -> dict[str, np.ndarray]:
    """Mark every array of a snapshot read-only, as Ray's object store does (same errors on both executors)."""
    out = {}
    for key, arr in snapshot.items():
        if type(arr) is not np.ndarray:
            arr = np.asarray(arr)
        if arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False
        out[key] = arr
    return out


def check_round_results(method_name: str, batch: Sequence[Episode], results: Sequence[EpisodeResult]
                        ) -> list[EpisodeResult]:
    """Sort a round's results by episode id and check there is exactly one per episode of the round."""
    out = sorted(results, key=lambda r: r.episode_id)
    got = [r.episode_id for r in out]
    want = [e.episode_id for e in batch]
    if got != want:
        raise AssertionError(
            f"{method_name} returned results for episodes {got[:10]}, expected {want[:10]} (one per episode)"
        )
    return out


def _check_episodes(episodes: Sequence[Episode]) -> None:
    ids = np.array([e.episode_id for e in episodes], dtype=np.int64)
    if ids.size and (np.diff(ids) <= 0).any():
        i = int(np.flatnonzero(np.diff(ids) <= 0)[0])
        raise InputError(
            f"episodes must have strictly increasing episode_id (updates are keyed by it); "
            f"got {ids[i]} then {ids[i + 1]} at positions {i}, {i + 1}"
        )


def restore_state(method: Method, cursor: Cursor) -> None:
    """Load a checkpoint's method state into ``method`` in this process (joining store shards)."""
    if cursor.shards == 1:
        load_method_state(method, cursor.state_dir())
        return
    shards = method.split(cursor.shards)
    for k, shard in enumerate(shards):
        load_method_state(shard, cursor.state_dir(k))
    method.join(shards)


@contextmanager
def progress_bar(total: int, enabled: bool = True, desc: str = "episodes", round_size: RoundPlan = 0,
                 **tqdm_kwargs) -> Iterator[Any]:
    """A tqdm bar over all episodes of a run (all workers): episodes, rate and ETA, and with
    ``round_size`` (a size or a plan, :data:`RoundPlan`) the rounds finished; its ``update`` is a :data:`ProgressFn`."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=desc, unit="ep", disable=not enabled, dynamic_ncols=True, **tqdm_kwargs)
    if not isinstance(round_size, (int, np.integer)) or round_size > 0:
        ends = np.cumsum(round_sizes(total, round_size))
        update = bar.update
        finished = [0]  # episodes (a disabled bar does not count them)

        def update_with_rounds(n: int = 1):
            update(n)
            finished[0] += n
            done = int(np.searchsorted(ends, finished[0], side="right"))
            bar.set_postfix_str(f"rounds {done}/{len(ends)}", refresh=False)

        bar.update = update_with_rounds
    try:
        yield bar
    finally:
        bar.close()


class RoundLoop:
    """The executor-independent round loop; subclasses say where episodes run and where updates land.

    Per round: ``_submit_round`` starts the round on the current snapshot and
    ``_collect_round`` returns its results (any order; the default pair runs
    ``_run_round``), the loop checks one result per episode, ``_apply`` applies
    them at the barrier in episode order (and writes the method state into the
    staging folder when checkpointing), then the loop commits the checkpoint.
    Episode ids already applied are refused, so an update is never applied twice.

    ``pipeline_rounds = p`` (``[cluster] pipeline_rounds``, default 0) keeps ``p``
    rounds in flight beyond the one being collected: round ``k`` is submitted right
    after round ``k - p - 1`` is applied, so it reads the experience of rounds
    ``0 .. k-p-1`` and runs while rounds ``k-p .. k-1`` finish (workers that finish
    a round early start the next; the barrier is overlapped). Deterministic: the
    same ``p`` gives the same results on every executor; ``p = 0`` is the plain
    round loop. Not combined with checkpoints (a resumed run would need the
    in-flight rounds' snapshots).
    """

    name = "base"

    def __init__(self, checkpoint_every: int = 1, stats_path: str | Path | None = None, pipeline_rounds: int = 0,
                 engine_probe: Callable[[], Any] | None = None):
        if checkpoint_every < 1:
            raise ConfigError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        if not isinstance(pipeline_rounds, int) or isinstance(pipeline_rounds, bool) or pipeline_rounds < 0:
            raise ConfigError(f"pipeline_rounds must be an integer >= 0, got {pipeline_rounds!r}")
        self.checkpoint_every = checkpoint_every
        self.pipeline_rounds = pipeline_rounds
        # each finished run appends {"method": ..., **stats} here as one JSON line (the run folder's
        # executor_stats.jsonl when made by make_executor): per-worker throughput in the results
        self.stats_path = None if stats_path is None else Path(stats_path)
        # makes a sampler of a real server's metrics (engine.llm.engine_metrics.MetricsSampler: start/stop) read
        # over each run; its summary goes into stats["server_engine"] (llm.metrics_url)
        self.engine_probe = engine_probe
        self.stats: dict[str, Any] = {}
        self.rounds_done = 0  # live cursor, readable from another thread
        # concurrent runs (cluster.concurrent_runs): set by the runner when a sibling run failed; this run stops at
        # its next round boundary (its checkpoint, if any, is kept) with RunCancelled
        self.cancel: threading.Event | None = None

    # -- subclass hooks --------------------------------------------------------------------------
    def _start(self, method: Method, llm_factory: LLMFactory, cursor: Cursor | None) -> None: ...

    def _run_round(self, index: int, batch: list[Episode], progress: ProgressFn | None
                   ) -> list[EpisodeResult]: ...

    def _submit_round(self, index: int, batch: list[Episode], progress: ProgressFn | None) -> Any:
        """Start round ``index`` on the experience applied so far; a handle for :meth:`_collect_round`."""
        return index, batch, progress

    def _collect_round(self, handle: Any) -> list[EpisodeResult]:
        """Wait for the round ``handle`` stands for; its results (any order). Sets ``_round_compute``."""
        return self._run_round(*handle)

    def _apply(self, index: int, results: list[EpisodeResult], staging: Path | None) -> None: ...

    def _finish(self, method: Method, ok: bool) -> None: ...

    def _shards(self, method: Method) -> int:
        return 1

    def _worker_stats(self) -> list[dict[str, Any]]:
        return []

    # -- the loop --------------------------------------------------------------------------------
    def run(self, method, episodes, llm_factory, round_size=1, progress=None, *,
            checkpoint_dir=None, resume=True, run_key=""):
        episodes = list(episodes)
        _check_episodes(episodes)
        batches = list(rounds(episodes, round_size))
        ckpt = cursor = None
        if checkpoint_dir is not None and self.pipeline_rounds:
            raise ConfigError(f"pipeline_rounds={self.pipeline_rounds} cannot be combined with checkpoints (a "
                              f"resumed run would need the snapshots of the rounds in flight); set "
                              f"cluster.pipeline_rounds = 0 or turn the task's checkpoint off")
        if checkpoint_dir is not None:
            shards = self._shards(method)
            ckpt = RoundCheckpoints(checkpoint_dir, fingerprint(method.name, episodes, round_size, shards, run_key),
                                    shards)
            if resume:
                cursor = ckpt.latest()
            if cursor is None:
                ckpt.reset()
        results: list[EpisodeResult] = []
        uncommitted: list[EpisodeResult] = []  # results of the rounds since the last checkpoint
        applied: set[int] = set()
        first = 0
        if cursor is not None:
            results = ckpt.load_results(cursor)
            applied = {r.episode_id for r in results}
            first = cursor.rounds_done
            want = [e.episode_id for b in batches[:first] for e in b]
            if cursor.applied.tolist() != want:
                raise AssertionError("checkpoint cursor does not match the episode stream")
            if progress is not None and cursor.episodes_done:
                progress(cursor.episodes_done)
            print(f"resuming {run_key or method.name} from its checkpoint: round {first} of {len(batches)} "
                  f"({cursor.episodes_done} episodes done)", file=sys.stderr)
        self.rounds_done = first
        timing = {"round_s": [], "apply_s": [], "checkpoint_s": [], "compute_s": []}
        t_run = time.perf_counter()
        ok = False
        if cursor is not None and first == len(batches):  # finished run: restore, start nothing
            restore_state(method, cursor)
            self._record_stats(timing, 0.0, first, len(results), finished=True)
            return results
        sampler = None
        try:
            self._start(method, llm_factory, cursor)
            sampler = self.engine_probe().start() if self.engine_probe is not None else None
            in_flight: deque = deque()  # handles of submitted rounds, oldest first
            submitted = first
            for index in range(first, len(batches)):
                if self.cancel is not None and self.cancel.is_set():
                    raise RunCancelled(f"{run_key or method.name} stopped at round {index} of {len(batches)}: "
                                       f"another run of the experiment failed")
                batch = batches[index]
                t0 = time.perf_counter()
                # round j is submitted once round j - pipeline_rounds - 1 is applied (module docstring)
                while submitted < len(batches) and submitted <= index + self.pipeline_rounds:
                    in_flight.append(self._submit_round(submitted, batches[submitted], progress))
                    submitted += 1
                self._round_compute = 0.0
                out = check_round_results(method.name, batch, self._collect_round(in_flight.popleft()))
                dup = applied.intersection(r.episode_id for r in out)
                if dup:
                    raise AssertionError(f"episodes {sorted(dup)[:10]} were already applied; refusing to apply twice")
                last = index == len(batches) - 1
                save = ckpt is not None and ((index + 1) % self.checkpoint_every == 0 or last)
                staging = ckpt.staging(index + 1) if save else None
                t1 = time.perf_counter()
                self._apply(index, out, staging)
                t2 = time.perf_counter()
                applied.update(r.episode_id for r in out)
                results.extend(out)
                uncommitted.extend(out)
                if save:
                    ckpt.commit(staging, index + 1, uncommitted, np.array([r.episode_id for r in results], np.int64))
                    uncommitted = []
                t3 = time.perf_counter()
                self.rounds_done = index + 1
                timing["round_s"].append(t3 - t0)
                timing["apply_s"].append(t2 - t1)
                timing["checkpoint_s"].append(t3 - t2)
                timing["compute_s"].append(self._round_compute)
            ok = True
        finally:
            scraped = sampler.stop() if sampler is not None else None
            self._finish(method, ok)
            self._record_stats(timing, time.perf_counter() - t_run, first, len(results))
            if scraped is not None:
                self.stats["server_engine"] = engine_summary(scraped, self.stats["wall_s"]) | {
                    "samples": scraped.get("samples", 0), "errors": scraped.get("errors", 0)}
        if self.stats_path is not None:
            record_stats_line(self.stats_path, {"method": method.name, "run_key": run_key, **self.stats})
        return results

    def _record_stats(self, timing: dict[str, list[float]], wall: float, first: int, n_results: int,
                      finished: bool = False) -> None:
        n = len(timing["round_s"])
        mean = (lambda xs: float(np.mean(xs)) if xs else 0.0)
        overhead = [r - a - c - k for r, a, c, k in
                    zip(timing["round_s"], timing["apply_s"], timing["compute_s"], timing["checkpoint_s"])]
        workers = [] if finished else self._worker_stats()
        for w in workers:  # what each modelled engine saw over the run's wall time (engine.llm.engine_metrics)
            if w.get("server") is not None:
                w["engine"] = engine_summary(w["server"], wall)
        ran = sum(w["episodes"] for w in workers)
        self.stats = {
            "executor": self.name,
            "rounds": n,
            "resumed_at_round": first,
            "episodes": n_results,
            "episodes_run": ran,
            "wall_s": wall,
            "episodes_per_s": ran / wall if wall > 0 else 0.0,
            "round_s": mean(timing["round_s"]),
            "round_overhead_s": mean(overhead),  # round wall - slowest worker's compute - barrier - checkpoint
            "barrier_apply_s": mean(timing["apply_s"]),
            "checkpoint_s": mean(timing["checkpoint_s"]),
            "pipeline_rounds": self.pipeline_rounds,
            "workers": workers,
        }

    def fork(self) -> "RoundLoop":
        """A new executor for one more run at the same time as this executor's others: same settings, the same
        workers and LLM engines (its own round loop, snapshots, store owners and stats). What the runner hands each
        run with ``cluster.concurrent_runs`` > 1; :meth:`close` on this executor releases the shared workers."""
        raise ConfigError(f"the {self.name!r} executor cannot run several runs at once; set cluster.concurrent_runs = 1")

    def fleet_books(self) -> list[dict[str, Any] | None]:
        """The books of every worker's modelled engine now (None where a worker has none); for the experiment's
        engine line when runs share the workers (:meth:`fork`)."""
        return []

    def close(self) -> None:
        """Release what the executor holds (nothing for the local executor)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def record_stats_line(path: Path, line: Mapping[str, Any]) -> None:
    """Add one executor run's line to ``executor_stats.jsonl``, replacing an earlier line of the same
    ``run_key`` (a run rerun after an interruption, or resumed: one line per run, its last execution's);
    the file is rewritten atomically."""
    from engine.atomic_io import write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    key = line.get("run_key")
    with _STATS_LOCK:  # concurrent runs (cluster.concurrent_runs) end in several threads
        kept = []
        if path.is_file():
            for old in path.read_text().splitlines():
                try:
                    same = bool(key) and json.loads(old).get("run_key") == key
                except ValueError:
                    same = False  # a line this code did not write: kept as it is
                if not same:
                    kept.append(old)
        write_text(path, "\n".join(kept + [json.dumps(line)]) + "\n")


_STATS_LOCK = threading.Lock()


def worker_stats(name: str, episodes: int, busy_s: float, llm_calls: int, retried: int = 0,
                 cpu_s: float = 0.0, server: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One worker's throughput record, as it appears in ``executor.stats["workers"]``.

    ``busy_s`` is wall time inside ``run_episodes``; ``cpu_s`` the CPU time the worker's
    process got meanwhile (``cpu_s / busy_s`` well under 1 on a CPU-bound backend: the
    worker was starved of CPU, not slowed by the executor). ``server``: the books of the
    worker's modelled engine (``llm.backend = "server_model"``) since the run started.
    """
    out = {"worker": name, "episodes": episodes, "busy_s": busy_s, "cpu_s": cpu_s,
           "episodes_per_s": episodes / busy_s if busy_s > 0 else 0.0, "llm_calls": llm_calls,
           "retried_chunks": retried}
    if server is not None:
        out["server"] = dict(server)
    return out


def server_books(llm) -> dict[str, Any] | None:
    """The books of the modelled engine inside ``llm`` (``server_model`` backend), else None."""
    from engine.llm.server_model import find_server

    server = find_server(llm)
    return None if server is None else server.server_stats()


def books_since(now: Mapping[str, Any] | None, start: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Counters of ``now`` minus those of ``start`` (a run's share of a backend kept across runs)."""
    if now is None:
        return None
    if start is None:
        return dict(now)
    keep = ("peak_tokens_per_s", "max_num_seqs", "time_scale", "max_in_flight", "max_concurrent_calls",
            "queue_delay_edges_s")

    def since(k, v):
        if k in keep:
            return v
        if isinstance(v, list):  # histograms: bucket by bucket
            old = list(start.get(k) or [])
            return [x - (old[i] if i < len(old) else 0) for i, x in enumerate(v)]
        return v - start.get(k, 0) if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    return {k: since(k, v) for k, v in now.items()}


def backends_of(llm) -> list:
    """``llm`` and every backend it wraps (through ``.backend``, or a replay's ``.inner``), outermost first."""
    chain, seen = [], 0
    while llm is not None and seen < 8 and hasattr(llm, "generate"):
        chain.append(llm)
        inner = getattr(llm, "backend", None)
        llm = inner if hasattr(inner, "generate") else getattr(llm, "inner", None)
        seen += 1
    return chain


def check_streams(llm, streams: int) -> None:
    """Refuse ``streams > 1`` over a backend that must not be called from several threads at once.

    A backend says so with ``concurrent_calls = False`` (the in-process ``vllm.LLM``: its
    ``generate`` drives one engine loop and is not re-entrant). Serving the model with
    ``vllm serve`` and ``llm.backend = "openai"`` takes concurrent calls (vLLM's async engine).
    """
    if streams <= 1:
        return
    for b in backends_of(llm):
        if getattr(b, "concurrent_calls", True) is False:
            raise ConfigError(
                f"cluster.streams_per_worker={streams} needs an LLM backend that takes calls from several threads; "
                f"{getattr(b, 'name', type(b).__name__)!r} does not (its generate() is not re-entrant). Set "
                f"cluster.streams_per_worker = 1, or serve the model (vllm serve) and use llm.backend = \"openai\"")


def merge_usage(into, meter) -> None:
    """Add ``meter``'s totals and per-episode usage into ``into`` (both :class:`UsageMeter`)."""
    into.total.merge(meter.total)
    for key, u in meter.per_episode.items():
        into.per_episode.setdefault(key, Usage()).merge(u)


def stream_bounds(n: int, streams: int) -> np.ndarray:
    """Cut ``n`` episodes into ``min(streams, n)`` contiguous streams (sizes differ by at most one)."""
    k = max(1, min(streams, n))
    return np.linspace(0, n, k + 1).round().astype(int)


def run_streams(method: Method, snapshot: Snapshot, episodes: Sequence[Episode], llm: MeteredBackend,
                streams: int = 1, pool=None) -> list[EpisodeResult]:
    """A worker's share of a round, as ``streams`` independent streams running concurrently.

    ``streams = 1`` is ``method.run_episodes(snapshot, episodes, llm)``. Otherwise the share is cut
    into contiguous streams (:func:`stream_bounds`); each runs ``run_episodes`` on its episodes in
    its own thread, lockstepping only its own episodes, so a stream's next call reaches the LLM as
    soon as that stream is ready instead of after the slowest episode of the whole share (the
    backend must take calls from several threads: :func:`check_streams`). Results are gathered in
    stream order, i.e. episode order: an episode's result depends only on the snapshot, the
    episode and its seed (:mod:`engine.rounds`), so they equal the one-stream run's for any
    ``streams``. Each stream meters its calls on its own :class:`MeteredBackend` over ``llm``'s
    backend; the counts are added to ``llm.meter`` afterwards, so usage is exact. ``pool``: a
    ``ThreadPoolExecutor`` with at least ``streams`` threads (kept by the worker), else one is
    made for the call.
    """
    episodes = list(episodes)
    if streams <= 1 or len(episodes) <= 1:
        return method.run_episodes(snapshot, episodes, llm)
    bounds = stream_bounds(len(episodes), streams)
    inner = llm.backend if isinstance(llm, MeteredBackend) else llm
    by_episode = llm.meter.by_episode if isinstance(llm, MeteredBackend) else True
    meters = [MeteredBackend(inner, by_episode) for _ in range(len(bounds) - 1)]
    own = pool is None
    if own:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(len(meters), thread_name_prefix="stream")
    try:
        futures = [pool.submit(method.run_episodes, snapshot, episodes[a:b], m)
                   for m, a, b in zip(meters, bounds[:-1], bounds[1:])]
        errors = [f.exception() for f in futures]  # waits for every stream before raising any error
    finally:
        if own:
            pool.shutdown(wait=True)
    for exc in errors:
        if exc is not None:
            raise exc
    out: list[EpisodeResult] = []
    for f, m in zip(futures, meters):
        out.extend(f.result())
        if isinstance(llm, MeteredBackend):
            merge_usage(llm.meter, m.meter)
    return out


def stream_pool(streams: int):
    """The thread pool a worker keeps for its streams (None for one stream)."""
    if streams <= 1:
        return None
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(streams, thread_name_prefix="stream")


class LocalExecutor(RoundLoop):
    """Runs every round in this process with one LLM backend (the embedded default).

    ``streams_per_worker = S`` runs each round as S concurrent streams (:func:`run_streams`):
    the same results, several calls in flight on the backend.
    """

    name = "local"

    def __init__(self, checkpoint_every: int = 1, stats_path: str | Path | None = None, pipeline_rounds: int = 0,
                 streams_per_worker: int = 1, engine_probe: Callable[[], Any] | None = None,
                 concurrent_runs: int = 1, shared: "WorkerBackends | None" = None):
        super().__init__(checkpoint_every, stats_path, pipeline_rounds, engine_probe)
        self.streams_per_worker = _check_streams_setting(streams_per_worker)
        self.concurrent_runs = check_concurrent_runs(concurrent_runs)
        self._shared = shared if shared is not None else WorkerBackends()

    def fork(self) -> "LocalExecutor":
        return LocalExecutor(self.checkpoint_every, self.stats_path, self.pipeline_rounds, self.streams_per_worker,
                             self.engine_probe, self.concurrent_runs, self._shared)

    def fleet_books(self):
        return [server_books(self._shared.backend)] if self._shared.backend is not None else []

    def _start(self, method, llm_factory, cursor):
        self._method = method
        # the worker's totals (methods meter episodes); runs at once (fork) share one backend
        self._llm = MeteredBackend(self._shared.get(llm_factory, fresh=self.concurrent_runs == 1), by_episode=False)
        check_streams(self._llm, self.streams_per_worker * self.concurrent_runs)
        self._pool = stream_pool(self.streams_per_worker)
        self._episodes = 0
        self._busy = 0.0
        self._cpu = 0.0
        if cursor is not None:
            load_method_state(method, cursor.state_dir())

    def _submit_round(self, index, batch, progress):
        # a pipelined round runs after later applies: it keeps a copy of the experience it was submitted on
        snap = self._method.snapshot()
        if self.pipeline_rounds:
            snap = {k: np.array(v, copy=True) for k, v in snap.items()}
        return freeze(snap), batch, progress

    def _collect_round(self, handle):
        snap, batch, progress = handle
        return self._run_on(snap, batch, progress)

    def _run_round(self, index, batch, progress):
        return self._collect_round(self._submit_round(index, batch, progress))

    def _run_on(self, snap, batch, progress):
        t0, c0 = time.perf_counter(), time.process_time()
        out = run_streams(self._method, snap, batch, self._llm, self.streams_per_worker, self._pool)
        dt = time.perf_counter() - t0
        self._round_compute = dt
        self._busy += dt
        self._cpu += time.process_time() - c0
        self._episodes += len(batch)
        if progress is not None:
            progress(len(batch))
        return out

    def _apply(self, index, results, staging):
        self._method.apply(results)
        if staging is not None:
            save_method_state(self._method, state_dir(staging))

    def _finish(self, method, ok):
        self._method = None
        pool, self._pool = getattr(self, "_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True)

    def _worker_stats(self):
        if not hasattr(self, "_llm"):
            return []
        return [worker_stats("local-0", self._episodes, self._busy, self._llm.meter.total.calls, 0, self._cpu,
                             server_books(self._llm))]

    def _record_stats(self, timing, wall, first, n_results, finished=False):
        super()._record_stats(timing, wall, first, n_results, finished)
        self.stats["streams_per_worker"] = self.streams_per_worker


class WorkerBackends:
    """The LLM backends of one worker: one per LLM config the runs it serves ask for, all on the worker's one engine.

    Runs at once (:meth:`RoundLoop.fork`) usually differ in their config only by what the requests carry (the
    seed), so each gets its own backend, built once from its factory; a modelled engine (``server_model``) is
    shared (:meth:`engine.llm.server_model.ServerModelBackend.share_engine`): one GPU, whose batches the runs
    fill together. ``fresh=True`` (one run at a time) builds a new backend per run, as before runs could share.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._items: list[tuple[Any, Any]] = []  # (factory, backend), the first one's engine serves them all

    @property
    def backend(self):
        """The first backend built (None before any): its engine's books are the worker's."""
        return self._items[0][1] if self._items else None

    def add(self, factory: LLMFactory, backend) -> None:
        with self._lock:
            self._items.append((factory, backend))

    def get(self, factory: LLMFactory, fresh: bool = False):
        with self._lock:
            if fresh:
                self._items = []
            for known, backend in self._items:
                if known == factory:
                    return backend
            backend = factory()
            if self._items:
                share_engine(backend, self._items[0][1])
            self._items.append((factory, backend))
            return backend


def share_engine(backend, primary) -> None:
    """Make ``backend`` run on ``primary``'s modelled engine (both ``server_model``, or neither)."""
    from engine.llm.server_model import find_server

    mine, theirs = find_server(backend), find_server(primary)
    if (mine is None) != (theirs is None):
        raise ConfigError("runs on one worker share its engine, so they need the same llm.backend; one run asks "
                          "for a modelled engine (server_model) and another does not. Set cluster.concurrent_runs = 1")
    if mine is not None:
        mine.share_engine(theirs)


def check_concurrent_runs(n: int) -> int:
    """``concurrent_runs`` of an executor (the runner resolves the config's 0, every run, before it builds one)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"concurrent_runs must be an integer >= 1, got {n!r}")
    return n


def _check_streams_setting(streams: int) -> int:
    if not isinstance(streams, int) or isinstance(streams, bool) or streams < 1:
        raise ConfigError(f"streams_per_worker must be an integer >= 1, got {streams!r}")
    return streams


REPLICA_MODES = ("auto", "on", "off")  # [cluster] replicas (the Ray executor's replica mode)


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]``: how the Ray executor places its actors (the local executor reads only checkpoint_every,
    pipeline_rounds and streams_per_worker).

    On a GPU cluster serving the model with vLLM in-process: ``num_gpus_per_worker = 1``
    (one engine per GPU), or ``tensor_parallel_size = T`` for an engine spanning T GPUs
    (each worker then gets a placement group of T bundles of ``num_gpus_per_worker`` GPUs).
    """

    num_cpus_per_worker: float = 1.0
    num_gpus_per_worker: float = 0.0
    tensor_parallel_size: int = 1
    store_shards: int = 1
    chunks_per_worker: int = 1
    max_restarts: int = 2
    max_attempts: int = 3
    checkpoint_every: int = 1
    startup_timeout_s: float = 900.0
    connect_timeout_s: float = 5.0  # Ray: how long --address may take to accept a TCP connection before the run fails
    pipeline_rounds: int = 0  # rounds in flight beyond the one collected (RoundLoop); changes results
    streams_per_worker: int = 1  # concurrent streams a worker cuts its share into (run_streams); same results
    shares_per_worker: int = 1  # shares a Ray worker runs at once (pull-based balance); same results
    replicas: str = "auto"  # Ray: workers apply the rounds to their own replicas ("auto", "on", "off"); same results
    # runs of the experiment (methods x seeds x parts) run at once over the same workers; 0: all; same results
    concurrent_runs: int = 1

    def __post_init__(self):
        check(self.num_cpus_per_worker >= 0, f"cluster.num_cpus_per_worker must be >= 0, got {self.num_cpus_per_worker}")
        check(self.num_gpus_per_worker >= 0, f"cluster.num_gpus_per_worker must be >= 0, got {self.num_gpus_per_worker}")
        for key in ("tensor_parallel_size", "store_shards", "chunks_per_worker", "max_attempts", "checkpoint_every",
                    "streams_per_worker", "shares_per_worker"):
            check(getattr(self, key) >= 1, f"cluster.{key} must be >= 1, got {getattr(self, key)}")
        check(self.max_restarts >= 0, f"cluster.max_restarts must be >= 0, got {self.max_restarts}")
        check(self.pipeline_rounds >= 0, f"cluster.pipeline_rounds must be >= 0, got {self.pipeline_rounds}")
        check(self.concurrent_runs >= 0, f"cluster.concurrent_runs must be >= 0 (0: every run at once), "
                                         f"got {self.concurrent_runs}")
        check(self.startup_timeout_s > 0, f"cluster.startup_timeout_s must be > 0, got {self.startup_timeout_s}")
        check(self.connect_timeout_s > 0, f"cluster.connect_timeout_s must be > 0, got {self.connect_timeout_s}")
        check(self.replicas in REPLICA_MODES, f"cluster.replicas must be one of {', '.join(map(repr, REPLICA_MODES))}, "
                                              f"got {self.replicas!r}")


def cluster_config(options, config: Mapping[str, Any] | None = None) -> ClusterConfig:
    """The ``[cluster]`` table of the run's config (``config``, else the file at ``options.config_path``
    with ``options.overrides`` applied); defaults when there is none."""
    if config is None:
        path = getattr(options, "config_path", None)
        if path is None or not Path(path).is_file():
            return ClusterConfig()
        config = apply_overrides(load_toml(path), getattr(options, "overrides", ()))
    return from_dict(ClusterConfig, config.get("cluster"), "cluster")


# --- the executor registry -------------------------------------------------------------------
# An executor is a factory ``factory(workers=N, address=ADDR|None, **cluster_settings)`` found by
# name: registered here (``local``) or declared by an installed package as an entry point of this
# group (the Ray executor, ``cluster.ray_executor:RayExecutor``, in pyproject.toml). The engine
# never imports the package that provides an executor.
EXECUTOR_ENTRY_POINTS = "toe_engine.executors"
_EXECUTORS: dict[str, Callable[..., RoundLoop]] = {}


def executor_settings(options, config: Mapping[str, Any] | None = None, **kwargs) -> dict[str, Any]:
    """Validate ``--executor``, ``--workers``, ``--address`` and ``[cluster]`` together; the executor's keywords.

    What :func:`make_executor` builds from and ``toe run --dry-run`` checks: errors here
    are raised before anything starts.
    """
    kind = getattr(options, "executor", None)
    workers = getattr(options, "workers", 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1, got {workers!r}")
    if kind not in executor_names():  # by name only: nothing is imported before the run starts
        executor_factory(kind)  # raises the error that lists the executors
    settings = {**to_dict(cluster_config(options, config)), **kwargs}
    if kind == "local":
        if workers != 1:
            raise ConfigError(f"the local executor runs one worker; got --workers {workers} (use --executor ray)")
        if getattr(options, "address", None):
            raise ConfigError("--address is a Ray cluster address; it needs --executor ray")
    return settings


def check_cluster_resources(workers: int, num_cpus: float, num_gpus: float, tensor_parallel_size: int,
                            nodes: Sequence[Mapping[str, float]]) -> None:
    """Fail at once when a cluster with ``nodes`` (each node's total resources, e.g. ``{"CPU": 2.0}``)
    can never hold ``workers`` workers of ``tensor_parallel_size`` bundles of ``num_cpus`` CPUs and
    ``num_gpus`` GPUs (a tensor-parallel group is packed on one node).

    The check is on totals, not on what is free now: resources held by another job free up, resources
    the cluster lacks never come. Raises ConfigError saying what was asked, what the cluster has and
    which setting to change.
    """
    tp = tensor_parallel_size
    per_worker = {"CPU": num_cpus * tp, "GPU": num_gpus * tp}
    total = {r: float(sum(n.get(r, 0.0) for n in nodes)) for r in per_worker}
    fits = 0  # workers the nodes hold, each worker on one node (STRICT_PACK for tp > 1; one actor otherwise)
    for n in nodes:
        caps = [n.get(r, 0.0) / need for r, need in per_worker.items() if need > 0]
        fits += int(min(caps) + 1e-9) if caps else workers
    if fits >= workers:
        return
    asked = (f"{workers} workers x (num_cpus_per_worker={num_cpus:g}, num_gpus_per_worker={num_gpus:g}"
             + (f", tensor_parallel_size={tp}" if tp > 1 else "") + ")"
             + f" = {per_worker['CPU'] * workers:g} CPUs, {per_worker['GPU'] * workers:g} GPUs")
    has = (f"{len(nodes)} node(s) with {total['CPU']:g} CPUs, {total['GPU']:g} GPUs in all "
           f"(largest node: {max((n.get('CPU', 0.0) for n in nodes), default=0):g} CPUs, "
           f"{max((n.get('GPU', 0.0) for n in nodes), default=0):g} GPUs); room for {fits} worker(s)")
    fix = [f"--workers {max(fits, 1)}" if fits else None]
    if num_gpus > 0 and total["GPU"] < per_worker["GPU"] * workers:
        fix.append("--set cluster.num_gpus_per_worker=0 (no GPUs) or a cluster with GPUs")
    if num_cpus > 0 and total["CPU"] < per_worker["CPU"] * workers:
        fix.append(f"--set cluster.num_cpus_per_worker={total['CPU'] / (workers * tp):g}")
    if tp > 1:
        fix.append("a smaller cluster.tensor_parallel_size")
    raise ConfigError(f"the Ray cluster cannot hold the workers asked for: asked {asked}; the cluster has {has}. "
                      f"Change {' or '.join(f for f in fix if f)}.")


def register_executor(name: str, factory: Callable[..., RoundLoop]) -> None:
    """Make ``factory(workers=..., address=..., **cluster_settings)`` the executor called ``name``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise InputError(f"executor name must be an identifier, got {name!r}")
    if not callable(factory):
        raise InputError(f"executor {name!r} needs a callable factory, got {type(factory).__name__}")
    _EXECUTORS[name] = factory


def _entry_points() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=EXECUTOR_ENTRY_POINTS)}


def executor_names() -> list[str]:
    """Names of every executor: registered ones and installed entry points."""
    return sorted(set(_EXECUTORS) | set(_entry_points()))


def executor_factory(name: str) -> Callable[..., RoundLoop]:
    """The factory of executor ``name``; loads its entry point on first use."""
    if name in _EXECUTORS:
        return _EXECUTORS[name]
    ep = _entry_points().get(name) if isinstance(name, str) else None
    if ep is None:
        raise ConfigError(
            f"executor must be one of {', '.join(repr(n) for n in executor_names())}, got {name!r} (executors "
            f"are registered with engine.executor.register_executor or as {EXECUTOR_ENTRY_POINTS!r} entry points "
            f"of an installed package; the Ray executor comes with pip install -e '.[cluster]', to be rerun "
            f"after updating a checkout)")
    try:
        factory = ep.load()
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == "ray" or exc.name.startswith("ray.")):
            raise MissingExtraError("ray", "cluster") from exc
        raise
    _EXECUTORS[name] = factory
    return factory


def local_executor(workers: int = 1, address: str | None = None, *, checkpoint_every: int = 1,
                   stats_path=None, pipeline_rounds: int = 0, **cluster_settings) -> LocalExecutor:
    """The ``local`` executor's factory: one worker in this process; ``[cluster]`` placement keys are ignored."""
    streams = cluster_settings.pop("streams_per_worker", 1)
    cluster_settings.pop("connect_timeout_s", None)
    probe = cluster_settings.pop("engine_probe", None)
    runs = cluster_settings.pop("concurrent_runs", 1) or 1  # 0 (every run at once) is the runner's to resolve
    if workers != 1:
        raise ConfigError(f"the local executor runs one worker; got --workers {workers} (use --executor ray)")
    if address:
        raise ConfigError("--address is a Ray cluster address; it needs --executor ray")
    return LocalExecutor(checkpoint_every=checkpoint_every, stats_path=stats_path, pipeline_rounds=pipeline_rounds,
                         streams_per_worker=streams, engine_probe=probe, concurrent_runs=runs)


register_executor("local", local_executor)


def make_executor(options, config: Mapping[str, Any] | None = None, **kwargs) -> RoundLoop:
    """The executor ``toe run CONFIG --executor NAME [--workers N] [--address ADDR]`` asks for.

    ``options`` is an :class:`engine.tasks.RunOptions`; the executor is looked up
    by name (:func:`executor_factory`); the config's ``[cluster]`` table
    (:class:`ClusterConfig`) sets actor resources; ``kwargs`` override it. With
    ``options.out`` set, every run appends its :attr:`stats` (per-worker episodes/s and LLM
    calls, round overhead, barrier time) to ``OUT/executor_stats.jsonl``.
    """
    settings = executor_settings(options, config, **kwargs)
    factory = executor_factory(getattr(options, "executor", None))
    out = getattr(options, "out", None)
    if out is not None and "stats_path" not in settings:
        settings["stats_path"] = Path(out) / "executor_stats.jsonl"
    return factory(workers=getattr(options, "workers", 1), address=getattr(options, "address", None), **settings)
