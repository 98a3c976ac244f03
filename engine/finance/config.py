"""Configuration of the finance task (``task = "finance"``), one frozen dataclass per TOML table.

Tables: ``[data]`` (synthetic or files), ``[synthetic]`` (the generator, see
:class:`engine.finance.synthetic.SyntheticConfig`), ``[protocol]`` (the shared
fairness controls), ``[toe]`` (tree hyperparameters), ``[memory]`` (Pipe+Mem0
and Pipe+MemRL), ``[sampling]`` (request parameters), ``[simulated_finance]``
(the simulated policy), plus the engine's ``[llm]`` and ``[embed]`` tables.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from engine.memory_budget import MemoryBudget
from engine.config import check, check_seeds, from_dict, split_tables
from engine.templates import PromptsConfig, check_files
from engine.errors import ConfigError
from engine.finance.simulated import SimulatedFinanceParams
from engine.finance.synthetic import SyntheticConfig

METHODS = ("Baseline", "Pipe", "Pipe+Mem0", "Pipe+MemRL", "Pipe+FLEX", "Pipe+ToE", "Pipe+ToE (LLM update)",
           "Pipe+ToE (no retrieval)")


@dataclass(frozen=True)
class DataConfig:
    source: Literal["synthetic", "files"] = "synthetic"
    news: str = ""  # files: news table (.csv or .parquet)
    prices: str = ""  # files: prices table (.csv or .parquet)

    def __post_init__(self):
        check(self.source == "synthetic" or (self.news and self.prices),
              "data.news and data.prices must name files when data.source = 'files'")


def _check_date(key: str, value: str) -> None:
    if not value:
        return
    import numpy as np

    try:
        ok = str(np.datetime64(value, "D")) == value
    except ValueError:
        ok = False
    check(ok, f"{key} must be an ISO date YYYY-MM-DD, got {value!r}")


@dataclass(frozen=True)
class ProtocolConfig:
    """Shared by every method (the paper's fairness controls)."""

    horizons: tuple[int, ...] = (10, 20, 40)
    window: int = 4  # news from T - window to T
    min_importance: float = 8.0
    max_news: int = 0  # 0 = every retained item (the paper: no cap); else the most important per industry and day
    max_days: int = 0  # 0 = every evaluated day; else the first max_days (smoke runs)
    checkpoint: bool = False  # each day's state under OUT/checkpoint: a killed run resumes when rerun
    # Evaluation dates (ISO "YYYY-MM-DD"; "" = automatic). The paper records the Overall start and end
    # and the Exploitation start in its evaluation config; default Exploitation start: the day after the
    # first third of the evaluated trading days (d_{floor(T/3)+1}).
    start: str = ""
    end: str = ""
    exploitation_start: str = ""
    # Pre-test span: historical tasks every memory method initializes its experience from (the paper's
    # fairness controls); "" = none. It must end before the evaluation starts.
    pretest_start: str = ""
    pretest_end: str = ""

    def __post_init__(self):
        check(len(self.horizons) > 0 and all(h >= 1 for h in self.horizons),
              f"protocol.horizons must be positive integers, got {list(self.horizons)}")
        check(len(set(self.horizons)) == len(self.horizons), f"protocol.horizons must be distinct, got {list(self.horizons)}")
        check(self.window >= 0, f"protocol.window must be >= 0, got {self.window}")
        check(0 <= self.min_importance <= 10, f"protocol.min_importance must be in [0, 10], got {self.min_importance}")
        check(self.max_news >= 0, f"protocol.max_news must be >= 0 (0 = no cap), got {self.max_news}")
        check(self.max_days >= 0, f"protocol.max_days must be >= 0, got {self.max_days}")
        for key in ("start", "end", "exploitation_start", "pretest_start", "pretest_end"):
            _check_date(f"protocol.{key}", getattr(self, key))
        check(bool(self.pretest_start) == bool(self.pretest_end),
              f"protocol.pretest_start and protocol.pretest_end must be given together, got "
              f"{self.pretest_start!r} and {self.pretest_end!r}")
        for a, b in (("start", "end"), ("pretest_start", "pretest_end"), ("start", "exploitation_start"),
                     ("exploitation_start", "end"), ("pretest_end", "start")):
            x, y = getattr(self, a), getattr(self, b)
            strict = a == "pretest_end"
            check(not (x and y) or (x < y if strict else x <= y),
                  f"protocol.{a} ({x}) must be {'before' if strict else 'on or before'} protocol.{b} ({y})")


@dataclass(frozen=True)
class ToEConfig:
    """ToE hyperparameters for FinEvolveBench (paper appendix)."""

    depth: int = 3  # industry > factor > analysis direction
    k1: int = 8  # first level: the k1 directions under the prefix most similar to the news
    lam: float = 0.8  # leaf level: a candidate whose cosine with the news is below lam is not retrieved
    merge_threshold: float = 0.8  # cosine at which a new node and its closest older sibling go to the merger
    q0: float = 1.0
    eta: float = 10.0
    q_min: float = 0.0
    q_max: float = 2.0
    max_new: int = 1  # new directions per expansion (the paper: at most one)
    merge: bool = True
    merge_factors: bool = True  # a newly routed factor close to a known one goes to the factor merger
    init: Literal["cluster", "empty"] = "cluster"  # the tree at the end of the pre-test span (see toe.py)
    init_tree: str = ""  # a path CSV (Table A1 layout) to start from instead
    # a prefix with at least index_min active directions is searched through the node index (hnswlib,
    # engine/finance/toe_index.py; approximate), a smaller one by the exact product; 0 = always exact.
    # The default is the measured crossover (benchmarks/results/finance_retrieval.md)
    index_min: int = 128
    index_ef: int = 64  # the node index's query beam (recall/latency)
    factors: tuple[str, ...] = (
        "Macroeconomy", "Policy planning", "Company fundamentals", "Supply and capacity",
        "Geopolitics", "Market sentiment", "Regulation",
    )

    def __post_init__(self):
        check(self.depth == 3, f"toe.depth must be 3 (industry, factor, analysis direction), got {self.depth}")
        check(self.k1 >= 1, f"toe.k1 must be >= 1, got {self.k1}")
        check(-1.0 <= self.lam <= 1.0, f"toe.lam must be a cosine in [-1, 1], got {self.lam}")
        check(-1.0 <= self.merge_threshold <= 1.0,
              f"toe.merge_threshold must be a cosine in [-1, 1], got {self.merge_threshold}")
        check(self.init in ("cluster", "empty"), f"toe.init must be 'cluster' or 'empty', got {self.init!r}")
        check(self.q0 > 0, f"toe.q0 must be > 0, got {self.q0}")
        check(self.eta > 0, f"toe.eta must be > 0, got {self.eta}")
        check(0 <= self.q_min <= self.q0 <= self.q_max,
              f"toe needs 0 <= q_min <= q0 <= q_max, got {self.q_min}, {self.q0}, {self.q_max}")
        check(self.max_new == 1, f"toe.max_new must be 1 (the paper proposes at most one direction), got {self.max_new}")
        check(len(self.factors) > 0, "toe.factors must list at least one factor")
        check(self.index_min >= 0, f"toe.index_min must be >= 0 (0 = no node index), got {self.index_min}")
        check(self.index_ef >= 1, f"toe.index_ef must be >= 1, got {self.index_ef}")


@dataclass(frozen=True)
class MemoryConfig(MemoryBudget):
    """``[memory]``: the shared budget (``top_k``: Mem0 ``top_k`` and MemRL ``select_k`` per news item;
    ``max_experience_tokens``: the memories' block per prompt; engine.memory_budget), plus the finance
    adapter's ``max_memories`` (memories shown per prediction, the union over its news items)."""

    max_memories: int = 8
    # MemRL's own Q update takes r = +1 / -1 (success = a_t * o_{t+h} > 0); true feeds it the graded r itself
    memrl_graded_reward: bool = False

    def __post_init__(self):
        super().__post_init__()
        check(self.max_memories >= 1, f"memory.max_memories must be >= 1, got {self.max_memories}")


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.7
    max_tokens: int = 512

    def __post_init__(self):
        check(0.0 <= self.temperature <= 5.0, f"sampling.temperature must be in [0, 5], got {self.temperature}")
        check(self.max_tokens >= 16, f"sampling.max_tokens must be >= 16, got {self.max_tokens}")


@dataclass(frozen=True)
class FinanceConfig:
    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0, 1, 2)
    data: DataConfig = field(default_factory=DataConfig)
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    toe: ToEConfig = field(default_factory=ToEConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    simulated_finance: SimulatedFinanceParams = field(default_factory=SimulatedFinanceParams)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)  # the user's template files (docs/prompts.md)
    plots: bool = True

    def __post_init__(self):
        bad = [m for m in self.methods if m not in METHODS]
        check(not bad and len(self.methods) > 0,
              f"methods must be a non-empty subset of {', '.join(METHODS)}, got {list(self.methods)}")
        check_seeds(list(self.seeds))


KEYS = tuple(f.name for f in dataclasses.fields(FinanceConfig))  # the task's own top-level keys


def load_finance_config(data: Mapping[str, Any]) -> FinanceConfig:
    """Build :class:`FinanceConfig` from a whole config dict (``task``, ``[llm]`` and ``[embed]`` are read elsewhere)."""
    cfg = from_dict(FinanceConfig, split_tables(data, KEYS, "finance"), "")
    check_files(cfg.prompts, "finance")
    if cfg.toe.init_tree and not Path(cfg.toe.init_tree).is_file():
        raise ConfigError(f"toe.init_tree must name a path CSV, got {cfg.toe.init_tree!r} (no such file)")
    return cfg


def check_executor(cfg: FinanceConfig, options) -> None:
    """Custom prompt templates need the local executor (:func:`engine.templates.check_executor`)."""
    from engine.templates import check_executor as check_prompts

    check_prompts(cfg.prompts, options)
