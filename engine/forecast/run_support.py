"""What the forecast runners (Prophet Arena, FutureX) share: the LLM, its row tag, the run's workspace."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from engine.forecast.simulated import SimulatedForecastBackend
from engine.llm.base import MeteredBackend
from engine.llm.config import load_llm_config


def make_llm(config: dict):
    """``(metered backend, simulated?)`` from the config's ``[llm]`` table (simulated = the forecasting harness)."""
    llm_cfg = load_llm_config(config.get("llm"))
    if llm_cfg.backend == "simulated":
        return MeteredBackend(SimulatedForecastBackend(seed=llm_cfg.seed)), True
    from engine.llm.factory import make_backend

    return MeteredBackend(make_backend(llm_cfg)), False


def use_prompts(prompts_cfg, config: dict) -> tuple[dict, str | None]:
    """Check and activate the run's prompt templates (``[prompts]``); ``(summary entry, warning or None)``.

    The warning says that custom templates meet the simulated forecasting policy, which reads the
    shipped wording (engine/forecast/simulated.py).
    """
    import engine.baselines.prompts  # noqa: F401  (registers the baselines' prompts)
    import engine.forecast.prompts  # noqa: F401  (registers the set)
    from engine import templates

    sets, warning = templates.activate_for_run(
        [("forecast", prompts_cfg.file), ("baselines", prompts_cfg.baselines)], load_llm_config(config.get("llm")))
    return templates.summary_entry(sets), warning


def model_tag(llm, simulated: bool) -> str:
    """The suffix every model row carries: ``[simulated]`` or ``[backend:model]``."""
    return " [simulated]" if simulated else f" [{llm.name}:{llm.model.rsplit('/', 1)[-1]}]"


def close_llm(llm) -> None:
    """Release the backend's engine or server, if it holds one."""
    close = getattr(getattr(llm, "backend", None), "close", None)
    if close:
        close()


class RunWorkspace:
    """The agent's workspace: ``run.workspace`` if set, else ``<out>/workspace``, else a temporary folder."""

    def __init__(self, configured: str, out: Path | None, prefix: str):
        self._tmp = None
        if configured:
            self.path = Path(configured)
        elif out is not None:
            self.path = out / "workspace"
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
            self.path = Path(self._tmp.name)

    def cleanup(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()


def write_outputs(text: str, summary: dict, out: Path | None) -> None:
    """Print the run's tables; with ``--out``, also write ``table.md`` and ``summary.json`` there."""
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(text + "\n", encoding="utf-8")
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
