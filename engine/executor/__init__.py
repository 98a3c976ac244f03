"""Executors run a :class:`~engine.rounds.Method` over a stream of episodes in rounds.

One module per concern:

* :mod:`engine.executor.loop`: the executor interface and the round loop every executor shares
  (rounds, barrier, exactly-once bookkeeping, atomic checkpoints and resume, pipelined rounds);
* :mod:`engine.executor.local`: the local (no Ray) executor, the embedded default;
* :mod:`engine.executor.streams`: a worker's share as concurrent streams, and the backends a worker keeps;
* :mod:`engine.executor.stats`: ``executor_stats.jsonl`` lines and the workers' records;
* :mod:`engine.executor.settings`: ``[cluster]``, the executor registry and :func:`make_executor`.

Executors are found by name (:func:`executor_factory`): ``local`` is registered here, the Ray
executor (``cluster/``, same interface) is an entry point of the installed package, so the engine
never imports ``cluster``. See :mod:`engine.rounds` for the round semantics.

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

from engine.executor.local import LocalExecutor, local_executor
from engine.executor.loop import (
    Executor, LLMFactory, ProgressFn, RoundLoop, RoundPlan, RunCancelled, check_round_results, freeze,
    progress_bar, restore_state, round_sizes, rounds,
)
from engine.executor.settings import (
    EXECUTOR_ENTRY_POINTS, REPLICA_MODES, ClusterConfig, check_concurrent_runs, cluster_config, executor_factory,
    executor_names, executor_settings, make_executor, parse_cluster, register_executor,
)
from engine.executor.stats import books_since, record_stats_line, server_books, worker_stats
from engine.executor.streams import (
    WorkerBackends, backends_of, check_streams, check_streams_setting, merge_usage, run_streams, share_engine,
    stream_bounds, stream_pool,
)

__all__ = [
    "ClusterConfig", "EXECUTOR_ENTRY_POINTS", "Executor", "LLMFactory", "LocalExecutor", "ProgressFn",
    "REPLICA_MODES", "RoundLoop", "RoundPlan", "RunCancelled", "WorkerBackends", "backends_of", "books_since",
    "check_concurrent_runs", "check_round_results", "check_streams", "check_streams_setting", "cluster_config",
    "executor_factory", "executor_names", "executor_settings", "freeze", "local_executor", "make_executor",
    "merge_usage", "parse_cluster", "progress_bar", "record_stats_line", "register_executor", "restore_state", "round_sizes",
    "rounds", "run_streams", "server_books", "share_engine", "stream_bounds", "stream_pool", "worker_stats",
]
