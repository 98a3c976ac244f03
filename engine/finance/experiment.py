"""``toe run configs/finance-synthetic.toml``: every method, every seed, IC tables, plots, the trees.

The run goes through the engine's one runner (:func:`engine.finance.task.run`:
:func:`engine.runner.run_task` with :class:`engine.finance.task.FinanceTask`): one round per trading day on
the local or the Ray executor, checkpoints with ``[protocol] checkpoint = true``.
This module holds the task's building blocks: the market, the evaluated days,
the LLM backend and the methods by name.

The run folder (``--out DIR``):

- ``summary.json``: ``meta`` (data labels, days, horizons, usage per method,
  ``reliability_truth``: Spearman correlation between each Pipe+ToE variant's
  final reliabilities and the generator's ground truth per seed and horizon,
  the config) and ``methods``: one record per method x horizon x period (tsIC,
  csIC as the mean over seeds, their standard deviations, backend, model, seeds);
- ``table.md``: the tables in the paper's layout (Table 1: tsIC; Table A2:
  Exploitation csIC; Table 3: update-rule ablation at 20 days);
- ``episodes.parquet`` (one record per day and industry), ``config.toml``;
- ``predictions.npz``: ``s f8[N, T, H]`` per method and seed, ``alpha``, ``days``;
- ``tree_formula_seed<k>/`` and ``tree_llm_seed<k>/``: the store checkpoint each
  Pipe+ToE run leaves (``toe store show DIR --tree``, ``toe store export DIR PATHS.csv``);
  ``tsic_over_time.png`` and ``tree.png``.

Figures produced with ``llm.backend = "simulated"`` are labelled simulated in
every output.
"""

from __future__ import annotations

import numpy as np

from engine.errors import ConfigError
from engine.finance.config import FinanceConfig
from engine.finance.data import Market, load_market
from engine.finance.synthetic import eval_days, generate_market


def build_market(cfg: FinanceConfig) -> Market:
    if cfg.data.source == "synthetic":
        return generate_market(cfg.synthetic, cfg.protocol.horizons)
    return load_market(cfg.data.news, cfg.data.prices, cfg.protocol.horizons)


def evaluation_days(market: Market, cfg: FinanceConfig) -> np.ndarray:
    days = eval_days(market)
    if cfg.protocol.max_days:
        days = days[: cfg.protocol.max_days]
    if days.size < 3:
        raise ConfigError(f"the stream has {days.size} evaluable trading days; need at least 3 "
                          f"(days with every horizon's return known)")
    return days


def make_llm(llm_table, cfg: FinanceConfig, seed: int):
    """The ``[llm]`` backend; ``simulated`` answers with this task's policy (``[simulated_finance]``), seeded by the run."""
    from dataclasses import replace

    from engine.finance.simulated import FinancePolicy
    from engine.llm.config import load_llm_config
    from engine.llm.factory import make_backend

    return make_backend(replace(load_llm_config(llm_table), seed=seed), policy=FinancePolicy(cfg.simulated_finance))


class FinanceLLMFactory:
    """Picklable zero-argument factory of a run's backend (called once per worker; see engine.executor)."""

    def __init__(self, llm_table, cfg: FinanceConfig, seed: int):
        self.llm_table, self.cfg, self.seed = llm_table, cfg, int(seed)

    def __call__(self):
        return make_llm(self.llm_table, self.cfg, self.seed)


def build_method(name: str, ctx, days, cfg: FinanceConfig, n_channels: int):
    from engine.finance.methods import Baseline, Pipe, PipeMemory
    from engine.finance.toe import PipeToE

    if name == "Baseline":
        return Baseline(ctx, days)
    if name == "Pipe":
        return Pipe(ctx, days)
    if name == "Pipe+Mem0":
        return PipeMemory(ctx, days, "mem0", cfg.memory)
    if name == "Pipe+MemRL":
        return PipeMemory(ctx, days, "memrl", cfg.memory)
    if name == "Pipe+FLEX":
        return PipeMemory(ctx, days, "flex", cfg.memory)
    if name == "Pipe+ToE":
        return PipeToE(ctx, days, cfg.toe, "formula", n_channels)
    if name == "Pipe+ToE (LLM update)":
        return PipeToE(ctx, days, cfg.toe, "llm", n_channels)
    raise ConfigError(f"unknown method {name!r}")
