"""Cost per trading day of the finance methods on the round loop (figures are SIMULATED).

Workload: the first DAYS evaluated days of the default synthetic market
(configs/finance-synthetic.toml, 8 industries) answered by the simulated finance
policy (engine.finance.simulated: a test harness, not a language model). Each
benchmark runs a fresh method over the same days on the local executor (one
round per day: snapshot, the day's episodes, the barrier). Reported: each method's
wall time relative to Pipe's; and Pipe+ToE on this tree against Pipe+ToE on the
engine of another git revision (``TOE_BENCH_FIN_REF``, default: REFERENCE below,
checked out by benchmarks/_revision.py), alternated 5 times, each pass in its own
process with the same workload code. One warm-up pass per method (imports, JIT,
embedder caches) is excluded.

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
import _instructions as instructions  # noqa: E402
from _results import record  # noqa: E402
from _revision import ROOT, revision_tree, timed  # noqa: E402

DAYS = int(os.environ.get("TOE_BENCH_FIN_DAYS", 60))
# the engine before finance read the store through StoreReader.columns (its private arrays) and before
# _structure was split into steps: the change this comparison was made for (issue 34)
REFERENCE = os.environ.get("TOE_BENCH_FIN_REF", "93d7ba3")
RESULTS: dict[str, float] = {}
MEDIANS: dict[str, float] = {}
STREAM_NAMES = {"Pipe+Mem0": "Pipe+Mem0 (mem0 library)",
                "Pipe+ToE": "Pipe+ToE (round loop, ExperienceStore + FeedbackLedger)"}


def _setup():
    # every one of the k1 candidates is shown (no leaf threshold, toe.lam = -1) and factors are not merged:
    # the heaviest retrieval path under the hashing embedder (whose cosines rarely pass the paper's lam)
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


def test_side_by_side_with_a_revision():
    """Pipe+ToE on this tree (new) and on REFERENCE's engine (old), alternated 5 times (load drifts hit both alike);
    each pass a fresh process: its own imports, one warm-up pass, then the timed one."""
    times = {"old": [], "new": []}
    cpu = {"old": [], "new": []}  # process CPU time: what load from other jobs on the machine does not inflate
    with revision_tree(REFERENCE) as old_tree:
        for _ in range(5):
            for name, root in (("old", old_tree), ("new", ROOT)):
                t = timed("test_finance_step", "pipe_toe_workload", root)
                times[name] += t["wall"]
                cpu[name] += t["cpu"]
    ratios = sorted(b / a for a, b in zip(times["old"], times["new"]))
    cpu_ratios = sorted(b / a for a, b in zip(cpu["old"], cpu["new"]))
    print(f"\nPipe+ToE over {DAYS} days, this tree / {REFERENCE}: CPU time min {min(cpu['new']) / min(cpu['old']):.3f}x, "
          f"median of pairs {cpu_ratios[2]:.3f}x; wall min {min(times['new']) / min(times['old']):.3f}x, median of "
          f"pairs {ratios[2]:.3f}x; per trading day min {1000 * min(times['new']) / DAYS:.2f} ms "
          f"vs {1000 * min(times['old']) / DAYS:.2f} ms")
    record("finance", f"revision,days={DAYS}", {
        "days": DAYS, "pairs": 5, "simulated": True, "reference": REFERENCE,
        "cpu_ratio_min": min(cpu["new"]) / min(cpu["old"]), "cpu_ratio_median": cpu_ratios[2],
        "wall_ratio_min": min(times["new"]) / min(times["old"]), "wall_ratio_median": ratios[2],
        "new_ms_per_day": 1000 * min(times["new"]) / DAYS, "old_ms_per_day": 1000 * min(times["old"]) / DAYS},
        note=f"SIMULATED finance policy; Pipe+ToE on this tree (new) against the engine of {REFERENCE} (old)")


def pipe_toe_workload():
    """One pass of Pipe+ToE over the benchmark's days on the local executor (the engine of whichever tree is
    imported: API both revisions have)."""
    cfg, market, days, emb = _setup()
    n = market.n_industries

    def once():
        method = build_method("Pipe+ToE", StreamContext(market, cfg.protocol, cfg.sampling, 0, emb), days, cfg, 9)
        LocalExecutor().run(method, stream_episodes(days, n, 0), lambda: simulated_backend(0), round_size=n)

    return once


@pytest.mark.skipif(not instructions.available(), reason="needs valgrind (apt-get install valgrind)")
def test_instructions_side_by_side():
    """The same comparison in machine instructions (callgrind): what load on the machine does not change."""
    try:
        with revision_tree(REFERENCE) as old_tree:
            for root in (old_tree, ROOT):  # a native pass first: Numba compiles and caches the kernels outside
                timed("test_finance_step", "pipe_toe_workload", root)  # valgrind
            old = instructions.count("test_finance_step", "pipe_toe_workload", root=old_tree)
        new = instructions.count("test_finance_step", "pipe_toe_workload")
    except RuntimeError as exc:
        if "SIGILL" in str(exc):  # e.g. the hnswlib wheel (imported by finance ToE since its node index) is
            pytest.skip(f"valgrind cannot run this workload's native code: {str(exc)[-300:]}")  # built for AVX-512
        raise
    print(f"\nPipe+ToE over {DAYS} days, instructions: this tree {new / 1e9:.3f} G, {REFERENCE} {old / 1e9:.3f} G, "
          f"ratio {new / old:.3f}x")
    record("finance", f"revision-instructions,days={DAYS}", {
        "days": DAYS, "simulated": True, "reference": REFERENCE, "new_instructions": new, "old_instructions": old,
        "ratio": new / old},
        note="SIMULATED finance policy; machine instructions of one pass (valgrind callgrind, PYTHONHASHSEED=0)")
