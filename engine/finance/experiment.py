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
  ``tsic_over_time.png``, ``tsic_bars.png`` (Figure 3 layout) and ``tree.png``.

Figures produced with ``llm.backend = "simulated"`` are labelled simulated in
every output.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.errors import ConfigError
from engine.finance.config import FinanceConfig
from engine.finance.data import Market, load_market
from engine.finance.metrics import cold_start_split
from engine.finance.synthetic import eval_days, generate_market


def build_market(cfg: FinanceConfig) -> Market:
    if cfg.data.source == "synthetic":
        return generate_market(cfg.synthetic, cfg.protocol.horizons)
    return load_market(cfg.data.news, cfg.data.prices, cfg.protocol.horizons)


@dataclass(frozen=True)
class DayPlan:
    """The trading days a run walks: ``days i8[P + T]`` = the pre-test span's P days, then the T evaluated ones.

    ``exploitation`` indexes the evaluated days: the first Exploitation day
    (ToE appendix: the first ``floor(T/3)`` evaluated days are Cold-Start).
    """

    days: np.ndarray
    n_pretest: int
    exploitation: int

    @property
    def evaluated(self) -> np.ndarray:
        return self.days[self.n_pretest:]


def _on_or_after(dates: np.ndarray, day: str) -> int:
    return int(np.searchsorted(dates, np.datetime64(day, "D"), side="left"))


def _on_or_before(dates: np.ndarray, day: str) -> int:
    return int(np.searchsorted(dates, np.datetime64(day, "D"), side="right"))


def day_plan(market: Market, cfg: FinanceConfig) -> DayPlan:
    """Pre-test, evaluated and Exploitation days from ``[protocol]`` (dates inclusive; "" = automatic).

    Candidates are the days with the news window filled and every horizon's
    return known; ``protocol.max_days`` keeps the first evaluated days (smoke runs).
    """
    pr = cfg.protocol
    cand = eval_days(market)
    dates = market.dates[cand].astype("datetime64[D]")
    lo = _on_or_after(dates, pr.start) if pr.start else 0
    hi = _on_or_before(dates, pr.end) if pr.end else cand.size
    pre = np.zeros(0, np.int64)
    if pr.pretest_start:
        a, b = _on_or_after(dates, pr.pretest_start), _on_or_before(dates, pr.pretest_end)
        pre = cand[a:b]
        if pre.size == 0:
            raise ConfigError(f"protocol.pretest_start..pretest_end ({pr.pretest_start}..{pr.pretest_end}) holds no "
                              f"evaluable trading day; the stream's are {dates[0]}..{dates[-1]}")
        if not pr.start:  # evaluation starts after the pre-test span
            lo = max(lo, b)
    days = cand[lo:hi]
    if cfg.protocol.max_days:
        days = days[: cfg.protocol.max_days]
    if days.size < 3:
        raise ConfigError(f"the stream has {days.size} evaluable trading days in the evaluation span "
                          f"({pr.start or 'first'}..{pr.end or 'last'}); need at least 3 "
                          f"(days with every horizon's return known; the stream's are {dates[0]}..{dates[-1]})")
    if pre.size and pre[-1] >= days[0]:
        raise ConfigError(f"the pre-test span must end before the first evaluated day "
                          f"{market.dates[days[0]]}, got protocol.pretest_end = {pr.pretest_end}")
    if pr.exploitation_start:
        ex = _on_or_after(market.dates[days].astype("datetime64[D]"), pr.exploitation_start)
        if not 0 < ex < days.size:
            raise ConfigError(f"protocol.exploitation_start ({pr.exploitation_start}) must fall after the first and "
                              f"on or before the last evaluated day ({market.dates[days[0]]}..{market.dates[days[-1]]})")
    else:
        ex = cold_start_split(days.size)
    return DayPlan(np.concatenate([pre, days]).astype(np.int64), int(pre.size), int(ex))


def evaluation_days(market: Market, cfg: FinanceConfig) -> np.ndarray:
    """The evaluated trading days (without the pre-test span)."""
    return day_plan(market, cfg).evaluated


def make_llm(llm_cfg, cfg: FinanceConfig, seed: int):
    """The run's ``[llm]`` backend (``llm_cfg``, an LLMConfig); ``simulated`` answers with this task's policy
    (``[simulated_finance]``), seeded by the run."""
    from dataclasses import replace

    from engine.finance.simulated import FinancePolicy
    from engine.llm.factory import make_backend

    return make_backend(replace(llm_cfg, seed=seed), policy=FinancePolicy(cfg.simulated_finance))


@dataclass(frozen=True)
class FinanceLLMFactory:
    """Picklable zero-argument factory of a run's backend (called once per worker; see engine.executor).

    Compared by value, so an executor handed an equal factory keeps its workers.
    """

    llm_cfg: object  # the run's [llm] (engine.llm.config.LLMConfig), parsed once
    cfg: FinanceConfig
    seed: int

    def __post_init__(self):
        object.__setattr__(self, "seed", int(self.seed))

    def __call__(self):
        return make_llm(self.llm_cfg, self.cfg, self.seed)


# methods that keep experience: they walk the pre-test span too (the paper's fairness controls: "the same
# pre-test historical tasks for experience initialization"); the others start at the evaluation
EXPERIENCE_METHODS = ("Pipe+Mem0", "Pipe+MemRL", "Pipe+ToE", "Pipe+ToE (LLM update)", "Pipe+ToE (no retrieval)")


def build_method(name: str, ctx, days, cfg: FinanceConfig, n_channels: int, n_pretest: int = 0):
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
        return PipeToE(ctx, days, cfg.toe, "formula", n_channels, n_pretest)
    if name == "Pipe+ToE (LLM update)":
        return PipeToE(ctx, days, cfg.toe, "llm", n_channels, n_pretest)
    if name == "Pipe+ToE (no retrieval)":  # the ablation: the leaf level keeps nothing, the proposer alone reuses
        return PipeToE(ctx, days, cfg.toe, "formula", n_channels, n_pretest, retrieval=False)
    raise ConfigError(f"unknown method {name!r}")
