"""The round loop every executor shares: rounds, barrier, exactly-once bookkeeping, atomic checkpoints
and resume, pipelined rounds, run statistics. See :mod:`engine.rounds` for the round semantics and
:mod:`engine.executor` for the package's map."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import numpy as np

from engine.checkpoint import Cursor, RoundCheckpoints, fingerprint, load_method_state
from engine.errors import ConfigError, InputError
from engine.executor.stats import record_stats_line
from engine.llm.base import LLMBackend
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
        # over each run; its summary goes into stats["server_engine"] (llm.openai.metrics_url)
        self.engine_probe = engine_probe
        self.stats: dict[str, Any] = {}
        self.rounds_done = 0  # live cursor, readable from another thread
        # concurrent runs (cluster.concurrent_runs): set by the runner when a sibling run failed; this run stops at
        # its next round boundary (its checkpoint, if any, is kept) with RunCancelled
        self.cancel: threading.Event | None = None
        self._round_compute = 0.0  # the collected round's slowest worker compute, set by _collect_round
        self._rounds_total = 0  # the current run's rounds (what a subclass may serve ahead for)

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
        self._rounds_total = len(batches)
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
