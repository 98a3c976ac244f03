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
