"""The local executor (the embedded default): every round in this process, on one LLM backend."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from engine.checkpoint import load_method_state, save_method_state, state_dir
from engine.executor.loop import RoundLoop, freeze
from engine.executor.settings import check_concurrent_runs, check_local, register_executor
from engine.executor.stats import server_books, worker_stats
from engine.executor.streams import WorkerBackends, check_streams, check_streams_setting, run_streams, stream_pool
from engine.llm.base import MeteredBackend


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
        self.streams_per_worker = check_streams_setting(streams_per_worker)
        self.concurrent_runs = check_concurrent_runs(concurrent_runs)
        self._shared = shared if shared is not None else WorkerBackends()
        self._method = None  # the run's method, between _start and _finish
        self._llm: MeteredBackend | None = None  # the worker's backend, metered (kept after the run for its stats)
        self._pool = None  # the streams' thread pool
        self._episodes, self._busy, self._cpu = 0, 0.0, 0.0

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
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _worker_stats(self):
        if self._llm is None:
            return []
        return [worker_stats("local-0", self._episodes, self._busy, self._llm.meter.total.calls, 0, self._cpu,
                             server_books(self._llm))]

    def _record_stats(self, timing, wall, first, n_results, finished=False):
        super()._record_stats(timing, wall, first, n_results, finished)
        self.stats["streams_per_worker"] = self.streams_per_worker



def local_executor(workers: int = 1, address: str | None = None, *, checkpoint_every: int = 1,
                   stats_path=None, pipeline_rounds: int = 0, **cluster_settings) -> LocalExecutor:
    """The ``local`` executor's factory: one worker in this process; ``[cluster]`` placement keys are ignored."""
    streams = cluster_settings.pop("streams_per_worker", 1)
    cluster_settings.pop("connect_timeout_s", None)
    probe = cluster_settings.pop("engine_probe", None)
    runs = cluster_settings.pop("concurrent_runs", 1) or 1  # 0 (every run at once) is the runner's to resolve
    check_local(workers, address)
    return LocalExecutor(checkpoint_every=checkpoint_every, stats_path=stats_path, pipeline_rounds=pipeline_rounds,
                         streams_per_worker=streams, engine_probe=probe, concurrent_runs=runs)


register_executor("local", local_executor)



register_executor("local", local_executor)
