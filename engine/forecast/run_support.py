"""What the forecast tasks (Prophet Arena, FutureX) share: the LLM factory, its row tag, the prompt templates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.llm.base import MeteredBackend


def make_llm(llm_cfg):
    """``(metered backend, simulated?)`` from the run's ``[llm]`` (an LLMConfig; simulated = the forecasting
    harness)."""
    from engine.llm.factory import make_backend
    from engine.tasks import policy_of

    llm = MeteredBackend(make_backend(llm_cfg, policy=policy_of("forecast")))
    return llm, llm.answered_by[0] == "simulated"  # a replay of a simulated trace is simulated


@dataclass
class ForecastLLM:
    """The picklable LLM factory of a forecast run: called once per worker (in the worker's process on Ray)."""

    llm: Any = None  # the run's [llm] (engine.llm.config.LLMConfig), parsed once

    def __call__(self):
        return make_llm(self.llm)[0]


def use_prompts(prompts_cfg, llm_cfg) -> tuple[dict, str | None]:
    """Check and activate the run's prompt templates (``[prompts]``); ``(summary entry, warning or None)``.

    The warning says that custom templates meet the simulated forecasting policy, which reads the
    shipped wording (engine/forecast/simulated.py).
    """
    import engine.baselines.prompts  # noqa: F401  (registers the baselines' prompts)
    import engine.forecast.prompts  # noqa: F401  (registers the set)
    from engine import templates

    sets, warning = templates.activate_for_run(
        [("forecast", prompts_cfg.file), ("baselines", prompts_cfg.baselines)], llm_cfg)
    return templates.summary_entry(sets), warning


def activate_prompts(prompts_cfg) -> None:
    """The run's templates in this process (a Ray worker's), already checked by :func:`use_prompts`."""
    import engine.baselines.prompts  # noqa: F401
    import engine.forecast.prompts  # noqa: F401
    from engine import templates

    for name, path in (("forecast", prompts_cfg.file), ("baselines", prompts_cfg.baselines)):
        templates.use(name, path)


def model_tag(answered: tuple[str, str], simulated: bool) -> str:
    """The suffix every model row carries: ``[simulated]`` or ``[backend:model]`` of what answered
    (a replay: the backend that recorded the trace)."""
    backend, model = answered
    return " [simulated]" if simulated else f" [{backend}:{model.rsplit('/', 1)[-1]}]"


def heading(what: str, answered: tuple[str, str] | None = None, simulated: bool = False) -> str:
    """A run's heading: what ran and what answered it (never the config's title, which may name another backend)."""
    if answered is None:
        return f"# {what}: reference rows only (no model rows)"
    backend, model = answered
    if simulated:
        return f"# {what}: SIMULATED forecasting harness ({model}), not a model"
    return f"# {what}: backend {backend}, model {model}"
