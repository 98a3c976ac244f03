"""``toe run configs/finance-synthetic.toml --dry-run``: the finance run's plan, every section parsed, nothing run."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from engine.finance.config import FinanceConfig, check_executor, load_finance_config
from engine.run_folder import run_folder

KEYS = tuple(f.name for f in dataclasses.fields(FinanceConfig))


def checkpoint_folder(options) -> Path:
    return run_folder(options) / "checkpoint"


def plan(config: Mapping[str, Any], options) -> dict[str, Any]:
    from engine.finance.experiment import EXPERIENCE_METHODS, build_market, day_plan
    from engine.finance.simulated import MODEL_NAME
    from engine.tasks import run_llm

    cfg = load_finance_config(config)
    check_executor(cfg, options)
    market = build_market(cfg)
    dp = day_plan(market, cfg)  # the synthetic generator is cheap; files are read and checked
    days = dp.evaluated
    n_exp = sum(m in EXPERIENCE_METHODS for m in cfg.methods)
    llm = run_llm(config, options)
    return {
        "methods": list(cfg.methods), "seeds": list(cfg.seeds),
        "episodes": {"data": cfg.data.source, "trading days": int(days.size),
                     "evaluated": f"{market.dates[days[0]]}..{market.dates[days[-1]]}",
                     "exploitation from": str(market.dates[days[dp.exploitation]]),
                     "pre-test days": dp.n_pretest,
                     "method-days in all": (int(days.size) * len(cfg.methods) + dp.n_pretest * n_exp) * len(cfg.seeds),
                     "rounds per run": int(days.size) + (dp.n_pretest if n_exp else 0),
                     "episodes per round": int(market.n_industries)},
        "model": MODEL_NAME if llm.backend == "simulated" else llm.model,
        "checkpoint": str(checkpoint_folder(options)) if cfg.protocol.checkpoint else None,
    }
