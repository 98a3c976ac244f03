"""Tasks: what a config's ``task`` key names, how a run's config is resolved, and ``toe run``'s entry.

A task is one module that defines ``TASK``, an object implementing :class:`engine.runner.Task`:
how it parses its own top-level keys (``keys``) into a typed plan, the runs, methods and episode
streams the one runner (:func:`engine.runner.run_task`) drives, its tables and plots, and what the
rest of the engine asks of a task (its simulated policy, the metric a sweep plots, the overrides
that make a killed run resumable, one flat record per method for sweeps and trackers). Nothing
else registers a task:

- the engine's own tasks are found by file, ``engine/<name>/task.py`` (task ``<name>``) or
  ``engine/<package>/<name>_task.py`` (task ``<name>``, e.g. ``futurex``);
- any other task by module path: ``task = "mylab.sudoku"`` imports ``mylab.sudoku`` and uses its
  ``TASK`` (``task = "mylab.tasks:SUDOKU"`` names another attribute). docs/architecture.md shows one.

:func:`prepare` is what ``toe run`` calls before every run and what ``--dry-run`` prints: it parses
the engine's sections (``[llm]``, ``[cluster]``, ``[embed]``) and the executor options, then the task's
own sections, once (``task.parse``); the parsed plan goes down to the runner, which does not parse
again. Modules are imported lazily so a task's optional dependencies load only when it runs; nothing
here starts Ray or a model.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.errors import ConfigError
from engine.run_options import RunOptions, run_llm, with_engine_sections  # noqa: F401  (the CLI's and tasks' names)

# What the engine reads from a task object (engine.runner.Task); load_task checks them.
TASK_MEMBERS = ("name", "keys", "policy", "default_metric", "resume_overrides", "parse", "plan", "runs",
                "make_method", "episodes", "round_size", "llm_factory", "checkpoint", "after_run", "summarize",
                "report", "summary_rows")


@functools.cache
def builtin_tasks() -> dict[str, str]:
    """The engine's own tasks, by file: ``{task name: module}``."""
    root = Path(__file__).parent
    found = {p.parent.name: f"engine.{p.parent.name}.task" for p in root.glob("*/task.py")}
    found.update({p.stem.removesuffix("_task"): f"engine.{p.parent.name}.{p.stem}" for p in root.glob("*/*_task.py")})
    return dict(sorted(found.items()))


def _valid() -> str:
    return ", ".join(builtin_tasks()) + ", or a module path defining TASK (e.g. \"mylab.sudoku\")"


@functools.cache
def load_task(name: str):
    """The task object ``name`` selects (an engine task's name, or ``module`` / ``module:ATTR``)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"task must be a task name, got {name!r}; valid tasks: {_valid()}")
    builtin = builtin_tasks().get(name)
    if builtin is None and "." not in name and ":" not in name:
        raise ConfigError(f"unknown task {name!r}; valid tasks: {_valid()}")
    module, _, attr = (builtin or name).partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name):
            raise ConfigError(f"task {name!r}: no module {exc.name!r} ({'not in this build' if builtin else 'not importable'})"
                              ) from exc
        raise
    task = getattr(mod, attr or "TASK", None)
    if task is None:
        raise ConfigError(f"task {name!r}: module {module} defines no {attr or 'TASK'} (the task object)")
    missing = [m for m in TASK_MEMBERS if not hasattr(task, m)]
    if missing:
        raise ConfigError(f"task {name!r}: {module}.{attr or 'TASK'} lacks {', '.join(missing)} "
                          f"(engine.runner.Task)")
    if builtin is not None and task.name != name:
        raise ConfigError(f"{module}.TASK.name is {task.name!r}, but its file makes it task {name!r}")
    return task


def policy_of(task: str) -> str:
    """The task's simulated policy (``"module:attr"``), for ``make_backend(cfg, policy=...)``."""
    return load_task(task).policy


def task_of(config: Mapping[str, Any], where: str = "config") -> str:
    """The config's ``task`` value, checked (the task loads)."""
    task = config.get("task")
    if not isinstance(task, str):
        raise ConfigError(f"{where}: missing top-level key task = " + " | ".join(f'"{t}"' for t in builtin_tasks()))
    try:
        load_task(task)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return task


@dataclass(frozen=True)
class Prepared:
    """A run's config, parsed once: the task, its parsed plan (``exp``, what ``task.parse`` returned) and the
    resolved plan ``toe run --dry-run`` prints (``plan``)."""

    task: Any
    exp: Any
    plan: dict
    options: Any


def resolve(config: Mapping[str, Any], options: RunOptions) -> dict[str, Any]:
    """The run's resolved plan (:func:`prepare`'s ``plan``)."""
    return prepare(config, options).plan


def prepare(config: Mapping[str, Any], options: RunOptions) -> Prepared:
    """Validate the whole config (every section, every override) and the options, parsing each once; return the
    task, its parsed plan and the resolved plan.

    The plan is a plain dict: ``task``, ``title``, ``methods``, ``seeds``, ``episodes``
    (task-specific counts), ``backend``, ``model``, ``executor``, ``workers``,
    ``num_cpus_per_worker``, ``num_gpus_per_worker``, ``tensor_parallel_size``,
    ``address``, ``out`` and ``checkpoint`` (folder or None). Raises ConfigError on the
    first thing that is wrong; starts nothing.
    """
    from engine.executor import executor_settings

    where = str(options.config_path)
    options = with_engine_sections(config, options)
    task = load_task(task_of(config, where))
    title = config.get("title", "")
    if not isinstance(title, str):
        raise ConfigError(f"title must be a string, got {title!r}")
    llm = options.llm
    answering = llm.served if llm.backend == "server_model" else llm  # a server model answers with its inner
    if "simulated" in (answering.backend, answering.replay.backend if answering.replay.mode == "passthrough" else None):
        from engine.llm.simulated import load_policy

        load_policy(task.policy, llm)  # the task's simulated policy, built as the runner will
    settings = executor_settings(options, config)
    if options.executor == "ray" and importlib.util.find_spec("ray") is None:
        from engine.errors import MissingExtraError

        raise MissingExtraError("ray", "cluster")
    exp = task.parse(config, options)
    own = task.plan(exp, options)
    plan = {
        "task": task.name, "title": title, **own,
        "backend": llm.backend if llm.backend != "replay" else f"replay of {llm.replay.path}",
        "model": own.get("model") or llm.model or "(backend default)",
        "executor": options.executor, "workers": options.workers, "address": options.address,
        "num_cpus_per_worker": settings["num_cpus_per_worker"],
        "num_gpus_per_worker": settings["num_gpus_per_worker"],
        "tensor_parallel_size": settings["tensor_parallel_size"],
        **({"concurrent_runs": settings["concurrent_runs"] or "every run"} if settings["concurrent_runs"] != 1 else {}),
        "out": None if options.out is None else str(options.out),
        "checkpoint": own.get("checkpoint"),
        **({"engine_kwargs": dict(llm.vllm.engine_kwargs)} if llm.vllm.engine_kwargs else {}),
        **({"extra_body": dict(llm.openai.extra_body)} if llm.openai.extra_body else {}),
        **({"metrics_url": llm.openai.metrics_url} if llm.openai.metrics_url else {}),
    }
    return Prepared(task, exp, plan, options)


def run(config: Mapping[str, Any], options: RunOptions, prepared: Prepared | None = None) -> int:
    """Run the config's task (``toe run``): :func:`prepare` (unless given) then :func:`engine.runner.run_task` on the
    parsed plan."""
    from engine.runner import run_task

    prepared = prepared or prepare(config, options)
    return run_task(prepared.task, config, prepared.options, exp=prepared.exp)


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


def summary_rows(task: str, summary: dict) -> list[dict]:
    """One flat record per method (``{"method": ..., metric: value, ...}``) from a run's summary.json."""
    return load_task(task).summary_rows(summary)
