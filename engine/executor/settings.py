"""Which executor runs a run, with which settings: ``[cluster]`` (:class:`ClusterConfig`), the executor
registry (``local`` here, the Ray executor an entry point of the installed package, so the engine never
imports ``cluster``) and :func:`make_executor`, what the runner calls."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from engine.config import check, from_dict, to_dict
from engine.errors import ConfigError, InputError, MissingExtraError
from engine.executor.loop import RoundLoop


def check_concurrent_runs(n: int) -> int:
    """``concurrent_runs`` of an executor (the runner resolves the config's 0, every run, before it builds one)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"concurrent_runs must be an integer >= 1, got {n!r}")
    return n




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


def parse_cluster(config: Mapping[str, Any] | None) -> ClusterConfig:
    """The one parser of ``[cluster]``: the table of the raw config ``config`` (defaults when there is none)."""
    return from_dict(ClusterConfig, (config or {}).get("cluster"), "cluster")


def cluster_config(options, config: Mapping[str, Any] | None = None) -> ClusterConfig:
    """The run's ``[cluster]``: ``options.cluster`` when the section was parsed already (a run parses it once:
    :func:`engine.tasks.with_engine_sections`), else parsed from ``config``; defaults when there is none."""
    parsed = getattr(options, "cluster", None)
    if parsed is not None:
        if not isinstance(parsed, ClusterConfig):
            raise InputError(f"options.cluster must be a ClusterConfig, got {type(parsed).__name__}")
        return parsed
    return parse_cluster(config)


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
        check_local(workers, getattr(options, "address", None))
    return settings


def check_local(workers: int, address: str | None) -> None:
    """The local executor runs one worker in this process: no ``--workers N``, no ``--address``."""
    if workers != 1:
        raise ConfigError(f"the local executor runs one worker; got --workers {workers} (use --executor ray)")
    if address:
        raise ConfigError("--address is a Ray cluster address; it needs --executor ray")




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




def make_executor(options, config: Mapping[str, Any] | None = None, **kwargs) -> RoundLoop:
    """The executor ``toe run CONFIG --executor NAME [--workers N] [--address ADDR]`` asks for.

    ``options`` is an :class:`engine.tasks.RunOptions`; the executor is looked up
    by name (:func:`executor_factory`); the run's ``[cluster]`` (:func:`cluster_config`: ``options.cluster``,
    else ``config``'s table) sets actor resources; ``kwargs`` override it. With
    ``options.out`` set, every run appends its :attr:`stats` (per-worker episodes/s and LLM
    calls, round overhead, barrier time) to ``OUT/executor_stats.jsonl``.
    """
    settings = executor_settings(options, config, **kwargs)
    factory = executor_factory(getattr(options, "executor", None))
    out = getattr(options, "out", None)
    if out is not None and "stats_path" not in settings:
        settings["stats_path"] = Path(out) / "executor_stats.jsonl"
    return factory(workers=getattr(options, "workers", 1), address=getattr(options, "address", None), **settings)
