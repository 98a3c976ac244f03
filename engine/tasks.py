"""Which runner a config's ``task`` key selects for ``toe run``.

A runner is ``run(config: dict, options: RunOptions) -> int``; it receives the
raw TOML dict (with ``--set`` overrides applied) and parses its own sections.
Runners are imported lazily so a task's optional dependencies load only when
that task runs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import ConfigError

TASKS = {
    "game24": "engine.game24.experiment:run",
    "finance": "engine.finance.experiment:run",
    "forecast": "engine.forecast.experiment:run",
    "futurex": "engine.forecast.futurex_experiment:run",
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


def runner_for(task: str):
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(sorted(TASKS))}")
    module, _, func = TASKS[task].partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith(module.rsplit(".", 1)[0]):
            raise ConfigError(f"task {task!r} is not available in this build ({module} missing)") from exc
        raise
    return getattr(mod, func)


# How each task's summary.json becomes one flat record per method (``toe sweep`` tables, ``--track``
# metrics), the metric a sweep plots by default, and the overrides that make a killed run resumable.
SUMMARY_ROWS = {
    "game24": "engine.game24.report:summary_rows",
    "finance": "engine.finance.report:summary_rows",
    "forecast": "engine.forecast.metrics:summary_rows",
    "futurex": "engine.forecast.futurex_metrics:summary_rows",
}
DEFAULT_METRIC = {"game24": "acc_any", "finance": "tsIC_20d_Exploitation", "forecast": "brier",
                  "futurex": "accuracy"}
RESUME_OVERRIDES = {"game24": {"protocol.checkpoint": True}}


def summary_rows(task: str, summary: dict) -> list[dict]:
    """One flat record per method (``{"method": ..., metric: value, ...}``) from a run's summary.json."""
    if task not in SUMMARY_ROWS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(sorted(SUMMARY_ROWS))}")
    module, _, func = SUMMARY_ROWS[task].partition(":")
    return getattr(importlib.import_module(module), func)(summary)
