"""Which runner a config's ``task`` key selects for ``toe run``, and the run's resolved plan.

A task is a plug-in with four parts, found by name in :data:`TASKS`:

- ``runner``: ``run(config: dict, options: RunOptions) -> int``; it receives the
  raw TOML dict (with ``--set`` overrides applied) and hands the task's
  :class:`engine.runner.Task` to :func:`engine.runner.run_task`, the one runner
  (methods x seeds over an executor, one run-folder layout);
- ``keys``: the task's own top-level keys (sections and values);
- ``plan``: ``plan(config, options) -> dict``: parses every one of the task's
  sections, as the runner will, and says what would run (methods, seeds,
  episode counts, checkpoint folder) without running anything;
- ``policy``: ``"module:attr"`` naming ``attr(llm_cfg) -> SimulatedPolicy``, the
  task's simulated policy that ``backend = "simulated"`` answers with
  (:mod:`engine.llm.simulated`; a string, so it pickles for Ray workers).

:func:`resolve` is what ``toe run`` calls before every run and what ``--dry-run``
prints: it checks the top-level keys (unknown ones are errors listing the valid
ones, in every task), parses the engine's sections (``[llm]``, ``[embed]``,
``[cluster]``) and the executor options, then the task's own sections. Modules
are imported lazily so a task's optional dependencies load only when it runs;
nothing here starts Ray or a model.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from engine.config import ENGINE_KEYS  # the keys every task accepts; the engine parses them
from engine.errors import ConfigError


@dataclass(frozen=True)
class TaskEntry:
    runner: str  # "module:function"
    plan: str  # "module:function"
    keys: str  # "module:ATTRIBUTE" naming the task's own top-level keys
    policy: str = ""  # "module:function" building the task's simulated policy from the [llm] config


TASKS = {
    "game24": TaskEntry("engine.game24.task:run", "engine.game24.plan:plan", "engine.game24.plan:KEYS",
                        "engine.game24.simulated_policy:policy_for"),
    "finance": TaskEntry("engine.finance.task:run", "engine.finance.plan:plan", "engine.finance.plan:KEYS",
                         "engine.finance.simulated:policy_for"),
    "forecast": TaskEntry("engine.forecast.task:run", "engine.forecast.plan:plan_prophet_arena",
                          "engine.forecast.plan:PROPHET_ARENA_KEYS", "engine.forecast.simulated:policy_for"),
    "generic": TaskEntry("engine.generic.task:run", "engine.generic.task:plan", "engine.generic.task:KEYS",
                         "engine.generic.simulated:policy_for"),
    "futurex": TaskEntry("engine.forecast.futurex_task:run", "engine.forecast.plan:plan_futurex",
                         "engine.forecast.plan:FUTUREX_KEYS", "engine.forecast.simulated:policy_for"),
}


@dataclass(frozen=True)
class RunOptions:
    """Command-line options of ``toe run`` that are not part of the config file."""

    config_path: Path
    out: Path | None = None
    executor: str = "local"  # "local" | "ray"
    workers: int = 1
    address: str | None = None
    overrides: tuple[str, ...] = field(default_factory=tuple)
    progress: bool = True
    # called as each round finishes: (run key, episodes done in that run, its episodes), e.g. a live tracker
    on_progress: Any = field(default=None, compare=False)
    # the engine's sections, parsed once per run (with_engine_sections); None: not parsed yet
    cluster: Any = None  # [cluster]: engine.executor.ClusterConfig
    llm: Any = None  # [llm]: engine.llm.config.LLMConfig


def with_engine_sections(config: Mapping[str, Any], options: RunOptions) -> RunOptions:
    """``options`` carrying the config's ``[cluster]`` and ``[llm]`` parsed (once per run: the CLI parses them
    before :func:`resolve`, the runner when called without them); the executors, the task and the run folder
    read them from there (:func:`run_llm`) and never parse them again."""
    if getattr(options, "cluster", None) is not None and getattr(options, "llm", None) is not None:
        return options
    import dataclasses
    from types import SimpleNamespace

    from engine.executor import settings
    from engine.llm import config as llm_config

    parsed = {"cluster": getattr(options, "cluster", None) or settings.parse_cluster(config),
              "llm": getattr(options, "llm", None) or llm_config.load_llm_config(config.get("llm"))}
    if dataclasses.is_dataclass(options):
        return dataclasses.replace(options, **parsed)
    return SimpleNamespace(**{**vars(options), **parsed})  # a caller's own options object


def run_llm(config: Mapping[str, Any], options) -> Any:
    """The run's ``[llm]`` (:class:`engine.llm.config.LLMConfig`): ``options.llm`` as parsed once per run, else
    parsed from ``config`` (a caller that did not go through :func:`with_engine_sections`)."""
    parsed = getattr(options, "llm", None)
    if parsed is not None:
        return parsed
    from engine.llm import config as llm_config

    return llm_config.load_llm_config(config.get("llm"))


def _load(task: str, part: str):
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(sorted(TASKS))}")
    module, _, attr = getattr(TASKS[task], part).partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(module.rsplit(".", 1)[0]):
            raise ConfigError(f"task {task!r} is not available in this build ({module} missing)") from exc
        raise
    return getattr(mod, attr)


def runner_for(task: str):
    return _load(task, "runner")


def policy_of(task: str) -> str:
    """The task's simulated policy (``"module:attr"``), for ``make_backend(cfg, policy=...)``."""
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(sorted(TASKS))}")
    return TASKS[task].policy


def task_of(config: Mapping[str, Any], where: str = "config") -> str:
    task = config.get("task")
    if not isinstance(task, str):
        raise ConfigError(f"{where}: missing top-level key task = " + " | ".join(f'"{t}"' for t in TASKS))
    if task not in TASKS:
        raise ConfigError(f"{where}: unknown task {task!r}; valid tasks: {', '.join(sorted(TASKS))}")
    return task


def check_top_keys(config: Mapping[str, Any], task: str) -> None:
    """Unknown top-level keys (a section or value the task does not read) are errors listing the valid ones."""
    valid = set(ENGINE_KEYS) | set(_load(task, "keys"))
    unknown = sorted(set(config) - valid)
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {', '.join(map(repr, unknown))} in the {task} config; "
                          f"valid keys: {', '.join(sorted(valid))}")


def resolve(config: Mapping[str, Any], options: RunOptions) -> dict[str, Any]:
    """Validate the whole config (every section, every override) and the options; return the run's plan.

    The plan is a plain dict: ``task``, ``title``, ``methods``, ``seeds``, ``episodes``
    (task-specific counts), ``backend``, ``model``, ``executor``, ``workers``,
    ``num_cpus_per_worker``, ``num_gpus_per_worker``, ``tensor_parallel_size``,
    ``address``, ``out`` and ``checkpoint`` (folder or None). Raises ConfigError on the
    first thing that is wrong; starts nothing.
    """
    from engine.config import from_dict
    from engine.embed.config import EmbedConfig
    from engine.executor import executor_settings

    where = str(options.config_path)
    options = with_engine_sections(config, options)
    task = task_of(config, where)
    check_top_keys(config, task)
    title = config.get("title", "")
    if not isinstance(title, str):
        raise ConfigError(f"title must be a string, got {title!r}")
    llm = options.llm
    answering = llm.served if llm.backend == "server_model" else llm  # a server model answers with its inner
    if "simulated" in (answering.backend, answering.replay_backend if answering.replay_mode == "passthrough" else None):
        from engine.llm.simulated import load_policy

        load_policy(policy_of(task), llm)  # the task's simulated policy, built as the runner will
    from_dict(EmbedConfig, config.get("embed"), "embed")
    settings = executor_settings(options, config)
    if options.executor == "ray" and importlib.util.find_spec("ray") is None:
        from engine.errors import MissingExtraError

        raise MissingExtraError("ray", "cluster")
    own = _load(task, "plan")(config, options)
    return {
        "task": task, "title": title, **own,
        "backend": llm.backend if llm.backend != "replay" else f"replay of {llm.replay_path}",
        "model": own.get("model") or llm.model or "(backend default)",
        "executor": options.executor, "workers": options.workers, "address": options.address,
        "num_cpus_per_worker": settings["num_cpus_per_worker"],
        "num_gpus_per_worker": settings["num_gpus_per_worker"],
        "tensor_parallel_size": settings["tensor_parallel_size"],
        **({"concurrent_runs": settings["concurrent_runs"] or "every run"} if settings["concurrent_runs"] != 1 else {}),
        "out": None if options.out is None else str(options.out),
        "checkpoint": own.get("checkpoint"),
        **({"engine_kwargs": dict(llm.engine_kwargs)} if llm.engine_kwargs else {}),
        **({"extra_body": dict(llm.extra_body)} if llm.extra_body else {}),
        **({"metrics_url": llm.metrics_url} if llm.metrics_url else {}),
    }


def format_plan(plan: Mapping[str, Any]) -> str:
    """The plan as ``toe run --dry-run`` prints it: one ``key: value`` line each."""
    order = ("task", "title", "methods", "seeds", "episodes", "backend", "model", "executor", "workers",
             "address", "num_cpus_per_worker", "num_gpus_per_worker", "tensor_parallel_size", "out", "checkpoint")
    lines = []
    for key in order + tuple(k for k in plan if k not in order):
        value = plan.get(key)
        if isinstance(value, (list, tuple)):
            value = ", ".join(map(str, value))
        elif isinstance(value, Mapping):
            value = ", ".join(f"{k} {v}" for k, v in value.items())
        lines.append(f"{key + ':':<22}{'-' if value in (None, '') else value}")
    return "\n".join(lines)


# How each task's summary.json becomes one flat record per method (``toe sweep`` tables, ``--track``
# metrics), the metric a sweep plots by default, and the overrides that make a killed run resumable.
SUMMARY_ROWS = {
    "game24": "engine.game24.report:summary_rows",
    "finance": "engine.finance.report:summary_rows",
    "forecast": "engine.forecast.metrics:summary_rows",
    "futurex": "engine.forecast.futurex_metrics:summary_rows",
    "generic": "engine.generic.task:summary_rows",
}
DEFAULT_METRIC = {"game24": "acc_any", "finance": "tsIC_20d_Exploitation", "forecast": "brier",
                  "futurex": "accuracy", "generic": "accuracy"}
RESUME_OVERRIDES = {"game24": {"protocol.checkpoint": True}, "finance": {"protocol.checkpoint": True},
                    "forecast": {"run.checkpoint": True}, "futurex": {"run.checkpoint": True},
                   "generic": {"protocol.checkpoint": True}}


def summary_rows(task: str, summary: dict) -> list[dict]:
    """One flat record per method (``{"method": ..., metric: value, ...}``) from a run's summary.json."""
    if task not in SUMMARY_ROWS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(sorted(SUMMARY_ROWS))}")
    module, _, func = SUMMARY_ROWS[task].partition(":")
    return getattr(importlib.import_module(module), func)(summary)
