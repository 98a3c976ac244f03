"""``toe run configs/finance-synthetic.toml --dry-run``: the finance run's plan, every section parsed, nothing run."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from engine.errors import ConfigError
from engine.finance.config import FinanceConfig, load_finance_config

KEYS = tuple(f.name for f in dataclasses.fields(FinanceConfig))


def plan(config: Mapping[str, Any], options) -> dict[str, Any]:
    from engine.finance.experiment import build_market, evaluation_days
    from engine.finance.simulated import MODEL_NAME
    from engine.llm.config import load_llm_config

    if getattr(options, "executor", "local") != "local":
        raise ConfigError(
            f"task 'finance' runs day by day in one process (each day's merges need the LLM before the next "
            f"day); --executor must be 'local', got {options.executor!r}")
    cfg = load_finance_config(config)
    days = evaluation_days(build_market(cfg), cfg)  # the synthetic generator is cheap; files are read and checked
    llm = load_llm_config(config.get("llm"))
    return {
        "methods": list(cfg.methods), "seeds": list(cfg.seeds),
        "episodes": {"data": cfg.data.source, "trading days": int(days.size),
                     "method-days in all": int(days.size) * len(cfg.methods) * len(cfg.seeds)},
        "model": MODEL_NAME if llm.backend == "simulated" else llm.model,
        "checkpoint": None,
    }
