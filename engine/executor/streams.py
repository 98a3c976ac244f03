"""A worker's share of a round as concurrent streams, and the LLM backends a worker keeps.

Every executor's worker runs its episodes through :func:`run_streams` (``[cluster] streams_per_worker``);
:class:`WorkerBackends` holds one backend per LLM config of the runs a worker serves at once, all on the
worker's one engine.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from engine.errors import ConfigError
from engine.executor.loop import LLMFactory
from engine.llm.base import MeteredBackend, Usage
from engine.rounds import Episode, EpisodeResult, Method, Snapshot


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


def check_streams_setting(streams: int) -> int:
    """``streams_per_worker`` of an executor (an integer >= 1)."""
    if not isinstance(streams, int) or isinstance(streams, bool) or streams < 1:
        raise ConfigError(f"streams_per_worker must be an integer >= 1, got {streams!r}")
    return streams
