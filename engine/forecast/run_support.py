"""What the forecast runners (Prophet Arena, FutureX) share: the LLM, its row tag, the run's workspace."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from engine.llm.base import MeteredBackend
from engine.llm.config import load_llm_config


def make_llm(config: dict):
    """``(metered backend, simulated?)`` from the config's ``[llm]`` table (simulated = the forecasting harness)."""
    from engine.llm.factory import make_backend
    from engine.tasks import policy_of

    llm = MeteredBackend(make_backend(load_llm_config(config.get("llm")), policy=policy_of("forecast")))
    return llm, llm.answered_by[0] == "simulated"  # a replay of a simulated trace is simulated


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
    """The suffix every model row carries: ``[simulated]`` or ``[backend:model]`` of what answered
    (a replay: the backend that recorded the trace)."""
    backend, model = llm.answered_by
    return " [simulated]" if simulated else f" [{backend}:{model.rsplit('/', 1)[-1]}]"


def heading(what: str, llm=None, simulated: bool = False) -> str:
    """A run's heading: what ran and what answered it (never the config's title, which may name another backend)."""
    if llm is None:
        return f"# {what}: reference rows only (no model rows)"
    backend, model = llm.answered_by
    if simulated:
        return f"# {what}: SIMULATED forecasting harness ({model}), not a model"
    return f"# {what}: backend {backend}, model {model}"


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


class RunProgress:
    """A progress bar over a forecast run's rows (questions x methods) with the LLM calls so far.

    The agent answers a method's questions as one batched multi-turn loop, so the bar
    advances per method; the LLM-call count on it moves with every batched call, and the
    bar's rate gives the ETA over the remaining methods.
    """

    def __init__(self, total: int, enabled: bool, desc: str):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="question", disable=not enabled, dynamic_ncols=True)

    def method(self, name: str) -> None:
        self.bar.set_description_str(name)

    def done(self, n: int) -> None:
        self.bar.update(n)

    def each_method(self, methods, per_method: int):
        """Yield the methods in order, advancing the bar by ``per_method`` questions after each one."""
        for k, method in enumerate(methods):
            if k:
                self.done(per_method)
            self.method(f"[{k + 1}/{len(methods)}] {method}")
            yield method

    def watch(self, llm) -> "ProgressLLM":
        return ProgressLLM(llm, self.bar)

    def close(self) -> None:
        self.bar.close()


class ProgressLLM:
    """The metered backend, unchanged, except that each ``generate`` shows the running LLM-call count."""

    def __init__(self, llm, bar):
        self._llm = llm
        self._bar = bar

    def __getattr__(self, key):
        return getattr(self._llm, key)

    def generate(self, requests):
        out = self._llm.generate(requests)
        self._bar.set_postfix_str(f"LLM calls {self._llm.meter.total.calls}", refresh=True)
        return out
