"""Pipe+Mem0 on the finance stream: the real mem0 library's store against the arrays store (figures SIMULATED).

Workload: the first DAYS evaluated days of the default synthetic market (configs/finance-synthetic.toml,
8 industries, seed 0) answered by the simulated finance policy (engine.finance.simulated: a test harness,
not a language model), one round per trading day on the local executor; each variant runs the same
method (Pipe+Mem0, extraction by mem0's rule completion, so every memory goes through the library's
``Memory.add``), REPEATS times, alternated so load drifts hit every variant alike. Variants:

* ``arrays``: engine/finance/memories.py, mem0's parsing and hash de-duplication over arrays (the reference);
* ``library, faiss``: engine.baselines.mem0.Mem0Memory on mem0's FAISS store held in memory, snapshot
  kept from each add's results (the default);
* ``library, qdrant, re-exported snapshot``: the code before this benchmark: mem0's local Qdrant
  (``QdrantClient(":memory:")``) and the snapshot re-exported from the library every round (run only
  for DAYS <= 60: its cost grows with the square of the memories stored).

Reported: wall and process CPU time (min and median over the repeats), each relative to ``arrays``
in the same run, and the memories stored (mem0's add de-duplicates against the 10 memories its
search returns, the arrays store against every stored hash, so the counts can differ).

    python -m pytest benchmarks/test_mem0_store.py -s -p no:cacheprovider
    TOE_BENCH_FIN_DAYS=300 TOE_BENCH_MEM0_REPEATS=1 python -m pytest benchmarks/test_mem0_store.py -s -p no:cacheprovider
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("mem0")
pytest.importorskip("faiss")

from engine.baselines.mem0 import Mem0Config, Mem0Memory  # noqa: E402
from engine.embed import embedder_from_table  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402
from engine.finance.config import FinanceConfig  # noqa: E402
from engine.finance.experiment import build_market, build_method, evaluation_days  # noqa: E402
from engine.finance.methods import StreamContext, stream_episodes  # noqa: E402
from engine.finance.simulated import simulated_backend  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import record  # noqa: E402

DAYS = int(os.environ.get("TOE_BENCH_FIN_DAYS", 60))
REPEATS = int(os.environ.get("TOE_BENCH_MEM0_REPEATS", 3))


class ReExporting(Mem0Memory):
    """The library store as it was: every round's snapshot re-exported (get_all, list, re-embedding)."""

    def snapshot(self):
        return self.export()


VARIANTS = {
    "arrays": ("arrays", None),
    "library, faiss": ("library", lambda mcfg, emb: Mem0Memory(replace(mcfg, vector_store="faiss"), embedder=emb)),
    "library, qdrant, re-exported snapshot": ("library", lambda mcfg, emb: ReExporting(replace(mcfg, vector_store="qdrant"), embedder=emb)),
}


def _run(cfg, market, days, emb, variant):
    store, make = VARIANTS[variant]
    c = replace(cfg, memory=replace(cfg.memory, mem0_store=store))
    method = build_method("Pipe+Mem0", StreamContext(market, c.protocol, c.sampling, 0, emb), days, c, 9)
    if make is not None:
        method.memory = make(method.memory.config, emb)
    LocalExecutor().run(method, stream_episodes(days, market.n_industries, 0), lambda: simulated_backend(0),
                        round_size=market.n_industries)
    return len(method.memory.snapshot()["memory"])


def test_mem0_library_store_against_arrays():
    cfg = FinanceConfig()
    market = build_market(cfg)
    days = evaluation_days(market, cfg)
    days_run = days[:DAYS]
    emb = embedder_from_table(None)
    variants = [v for v in VARIANTS if DAYS <= 60 or "qdrant" not in v]
    for v in variants:  # warm-up: imports, JIT, embedder caches (a few days)
        _run(cfg, market, days[:3], emb, v)
    wall = {v: [] for v in variants}
    cpu = {v: [] for v in variants}
    stored = {}
    for _ in range(REPEATS):
        for v in variants:
            t0, c0 = time.perf_counter(), time.process_time()
            stored[v] = _run(cfg, market, days_run, emb, v)
            wall[v].append(time.perf_counter() - t0)
            cpu[v].append(time.process_time() - c0)
    assert len({n for v, n in stored.items() if v.startswith("library")}) == 1, f"the library's stores disagree: {stored}"
    figures = {"days": int(len(days_run)), "repeats": REPEATS, "simulated": True, "variants": {}}
    for v in variants:
        f = {"memories": stored[v], "wall_min_s": min(wall[v]), "wall_median_s": statistics.median(wall[v]),
             "cpu_min_s": min(cpu[v]), "cpu_median_s": statistics.median(cpu[v])}
        f["cpu_min_over_arrays"] = f["cpu_min_s"] / min(cpu["arrays"])
        f["wall_min_over_arrays"] = f["wall_min_s"] / min(wall["arrays"])
        figures["variants"][v] = f
        print(f"\n{v}: CPU min {f['cpu_min_s']:.2f} s ({f['cpu_min_over_arrays']:.2f}x arrays), "
              f"wall min {f['wall_min_s']:.2f} s ({f['wall_min_over_arrays']:.2f}x) over {len(days_run)} days")
    record("finance", f"mem0-store,days={len(days_run)}", figures,
           note="SIMULATED finance policy on the synthetic market; Pipe+Mem0, one seed, alternated variants")
