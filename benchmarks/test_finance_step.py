"""Cost per trading day of the finance methods on the round loop (figures are SIMULATED).

Workload: the first DAYS evaluated days of the default synthetic market
(configs/finance-synthetic.toml, 8 industries) answered by the simulated finance
policy (engine.finance.simulated: a test harness, not a language model). Each
benchmark runs a fresh method over the same days on the local executor (one
round per day: snapshot, the day's episodes, the barrier), or, for the
reference, the day-by-day Pipe+ToE that had its own tree and ledger
(benchmarks/_finance_reference.py, commit 15eab27). Reported: each method's wall
time relative to Pipe's, and the round-loop Pipe+ToE relative to the reference,
measured in the same run. One warm-up pass per method (imports, JIT, embedder
caches) is excluded.

    python -m pytest benchmarks/test_finance_step.py -s -p no:cacheprovider --benchmark-columns=mean,stddev,rounds
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.embed import embedder_from_table
from engine.executor import LocalExecutor
from engine.finance.config import FinanceConfig
from engine.finance.experiment import build_market, build_method, evaluation_days
from engine.finance.methods import StreamContext, stream_episodes
from engine.finance.simulated import simulated_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _finance_reference as reference  # noqa: E402
import _instructions as instructions  # noqa: E402
from _results import record  # noqa: E402

DAYS = int(os.environ.get("TOE_BENCH_FIN_DAYS", 60))
RESULTS: dict[str, float] = {}
MEDIANS: dict[str, float] = {}
STREAM_NAMES = {"Pipe+Mem0": "Pipe+Mem0 (arrays store)",
                "Pipe+ToE": "Pipe+ToE (round loop, ExperienceStore + FeedbackLedger)"}


def _setup():
    # the reference's retrieval and merging: every one of the k1 candidates is shown (no leaf threshold,
    # toe.lam = -1) and factors are not merged, so both sides send the same prompts (checked below)
    cfg = FinanceConfig()
    cfg = replace(cfg, toe=replace(cfg.toe, lam=-1.0, merge_factors=False))
    market = build_market(cfg)
    days = evaluation_days(market, cfg)[:DAYS]
    return cfg, market, days, embedder_from_table(None)


@pytest.fixture(scope="module")
def setup():
    return _setup()


def _report(name: str) -> None:
    record("finance", f"methods,days={DAYS}", {
        "days": DAYS, "industries": 8, "rounds": 5, "simulated": True,
        "methods": {STREAM_NAMES.get(k, k): {"mean_s": v, "median_s": MEDIANS[k]} for k, v in RESULTS.items()}},
        note="SIMULATED finance policy on the synthetic market; figures of the methods timed so far in this session")
    if "Pipe" in RESULTS and name != "Pipe":
        print(f"\n{name}: {RESULTS[name] / RESULTS['Pipe']:.2f}x Pipe's wall time over {DAYS} days "
              f"({1000 * RESULTS[name] / DAYS:.2f} ms per trading day)")
    if name == "Pipe+ToE" and "Pipe+ToE (day-by-day reference)" in RESULTS:
        ref = RESULTS["Pipe+ToE (day-by-day reference)"]
        print(f"\nPipe+ToE round loop / day-by-day reference: {RESULTS[name] / ref:.2f}x "
              f"({1000 * RESULTS[name] / DAYS:.2f} vs {1000 * ref / DAYS:.2f} ms per trading day)")


def test_reference_day_by_day(benchmark, setup):
    """The old implementation: PipeToE.step(day) on its own ExperienceTree and PendingFeedback."""
    cfg, market, days, emb = setup

    def once():
        ctx = StreamContext(market, cfg.protocol, cfg.sampling, 0, emb)
        method = reference.PipeToE(ctx, cfg.toe, "formula", 9)
        llm = simulated_backend(0)
        for d in days.tolist():
            method.step(d, llm)

    once()  # warm-up
    benchmark.pedantic(once, rounds=5, iterations=1)
    RESULTS["Pipe+ToE (day-by-day reference)"] = benchmark.stats.stats.mean
    MEDIANS["Pipe+ToE (day-by-day reference)"] = benchmark.stats.stats.median
    _report("Pipe+ToE (day-by-day reference)")


@pytest.mark.parametrize("name", ["Pipe", "Pipe+ToE", "Pipe+MemRL", "Pipe+Mem0"])
def test_stream(benchmark, setup, name):
    cfg, market, days, emb = setup

    def once():
        ctx = StreamContext(market, cfg.protocol, cfg.sampling, 0, emb)
        method = build_method(name, ctx, days, cfg, 9)
        LocalExecutor().run(method, stream_episodes(days, market.n_industries, 0), lambda: simulated_backend(0),
                            round_size=market.n_industries)

    once()  # warm-up
    benchmark.pedantic(once, rounds=5, iterations=1)
    RESULTS[name] = benchmark.stats.stats.mean
    MEDIANS[name] = benchmark.stats.stats.median
    _report(name)


def test_side_by_side_interleaved(setup):
    """Pipe+ToE, round loop vs day-by-day reference, alternated 5 times (load drifts hit both alike)."""
    import time

    old, new = _passes(*setup)
    old(), new()  # warm-up
    times = {"old": [], "new": []}
    cpu = {"old": [], "new": []}  # process CPU time: what load from other jobs on the machine does not inflate
    for _ in range(5):
        for name, fn in (("old", old), ("new", new)):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    ratios = sorted(b / a for a, b in zip(times["old"], times["new"]))
    cpu_ratios = sorted(b / a for a, b in zip(cpu["old"], cpu["new"]))
    print(f"\nPipe+ToE interleaved, CPU time: round loop / reference, min {min(cpu['new']) / min(cpu['old']):.2f}x, "
          f"median of pairs {cpu_ratios[2]:.2f}x")
    print(f"\nPipe+ToE interleaved over {DAYS} days: round loop / reference, min {min(times['new']) / min(times['old']):.2f}x, "
          f"median of pairs {ratios[2]:.2f}x; per trading day min {1000 * min(times['new']) / DAYS:.2f} ms "
          f"vs {1000 * min(times['old']) / DAYS:.2f} ms")
    record("finance", f"interleaved,days={DAYS}", {
        "days": DAYS, "pairs": 5, "simulated": True,
        "cpu_ratio_min": min(cpu["new"]) / min(cpu["old"]), "cpu_ratio_median": cpu_ratios[2],
        "wall_ratio_min": min(times["new"]) / min(times["old"]), "wall_ratio_median": ratios[2],
        "new_ms_per_day": 1000 * min(times["new"]) / DAYS, "old_ms_per_day": 1000 * min(times["old"]) / DAYS},
        note="SIMULATED finance policy; Pipe+ToE round loop (new) against the day-by-day reference (old)")


def _passes(cfg, market, days, emb):
    """One pass over ``days`` of Pipe+ToE each: the day-by-day reference (``old``) and the round loop (``new``)."""
    n = market.n_industries

    def old():
        method = reference.PipeToE(StreamContext(market, cfg.protocol, cfg.sampling, 0, emb), cfg.toe, "formula", 9)
        llm = simulated_backend(0)
        for d in days.tolist():
            method.step(d, llm)

    def new():
        method = build_method("Pipe+ToE", StreamContext(market, cfg.protocol, cfg.sampling, 0, emb), days, cfg, 9)
        LocalExecutor().run(method, stream_episodes(days, n, 0), lambda: simulated_backend(0), round_size=n)

    return old, new


def _workload(which: str):
    """The benchmark's setup (the fixture's, built outside pytest for the callgrind child) and one side's pass."""
    old, new = _passes(*_setup())
    return old if which == "old" else new


def old_workload():
    return _workload("old")


def new_workload():
    return _workload("new")


@pytest.mark.skipif(not instructions.available(), reason="needs valgrind (apt-get install valgrind)")
def test_instructions_side_by_side():
    """The same comparison in machine instructions (callgrind): what load on the machine does not change."""
    old = instructions.count("test_finance_step", "old_workload")
    new = instructions.count("test_finance_step", "new_workload")
    print(f"\nPipe+ToE over {DAYS} days, instructions: round loop {new / 1e9:.3f} G, reference {old / 1e9:.3f} G, "
          f"ratio {new / old:.3f}x")
    record("finance", f"instructions,days={DAYS}", {
        "days": DAYS, "simulated": True, "new_instructions": new, "old_instructions": old, "ratio": new / old},
        note="SIMULATED finance policy; machine instructions of one pass (valgrind callgrind, PYTHONHASHSEED=0)")
