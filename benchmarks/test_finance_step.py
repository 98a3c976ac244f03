"""Cost of Pipe+ToE's per-day machinery relative to experience-free Pipe (figures are SIMULATED).

Workload: the first DAYS evaluated days of the default synthetic market
(configs/finance-synthetic.toml, 8 industries) answered by the simulated finance
policy (engine.finance.simulated: a test harness, not a language model). Each
benchmark runs a fresh method over the same days; reported as the ratio of
Pipe+ToE's (and Pipe+Mem0's, Pipe+MemRL's) wall time to Pipe's, measured in the
same run. One warm-up round per method (imports, embedder caches) is excluded.

    python -m pytest benchmarks/test_finance_step.py -p no:cacheprovider --benchmark-columns=mean,stddev,rounds
"""

from __future__ import annotations

import os

import pytest

from engine.embed import embedder_from_table
from engine.finance.config import FinanceConfig
from engine.finance.experiment import build_market, build_method, evaluation_days, run_method
from engine.finance.methods import StreamContext
from engine.finance.simulated import simulated_backend

DAYS = int(os.environ.get("TOE_BENCH_FIN_DAYS", 60))
RESULTS: dict[str, float] = {}


@pytest.fixture(scope="module")
def setup():
    cfg = FinanceConfig()
    market = build_market(cfg)
    days = evaluation_days(market, cfg)[:DAYS]
    return cfg, market, days, embedder_from_table(None)


@pytest.mark.parametrize("name", ["Pipe", "Pipe+ToE", "Pipe+MemRL", "Pipe+Mem0"])
def test_stream(benchmark, setup, name):
    cfg, market, days, emb = setup

    def once():
        ctx = StreamContext(market, cfg.protocol, cfg.sampling, 0, emb)
        method = build_method(name, ctx, cfg, 9)
        return run_method(method, simulated_backend(0), days, market.n_industries, 3)

    once()  # warm-up
    benchmark.pedantic(once, rounds=3, iterations=1)
    RESULTS[name] = benchmark.stats.stats.mean
    if "Pipe" in RESULTS and name != "Pipe":
        print(f"\n{name}: {RESULTS[name] / RESULTS['Pipe']:.2f}x Pipe's wall time over {DAYS} days")
