"""Pipe+Mem0 runs the real mem0 library by default; on a small stream it stores and shows what the arrays store does."""

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("mem0")
pytest.importorskip("faiss")

from engine.executor import LocalExecutor  # noqa: E402
from engine.finance.config import FinanceConfig, MemoryConfig  # noqa: E402
from engine.finance.experiment import build_method, evaluation_days  # noqa: E402
from engine.finance.methods import StreamContext, stream_episodes  # noqa: E402
from engine.finance.simulated import simulated_backend  # noqa: E402


def _run(market, embedder, store, n_days=25):
    cfg = FinanceConfig()
    cfg = replace(cfg, memory=replace(cfg.memory, mem0_store=store))
    days = evaluation_days(market, cfg)[:n_days]
    method = build_method("Pipe+Mem0", StreamContext(market, cfg.protocol, cfg.sampling, 0, embedder), days, cfg, 9)
    results = LocalExecutor().run(method, stream_episodes(days, market.n_industries, 0), lambda: simulated_backend(0),
                                  round_size=market.n_industries)
    return method, results


def test_the_library_is_the_default():
    assert MemoryConfig().mem0_store == "library"


def test_library_and_arrays_stores_agree_on_a_small_stream(small_market, embedder):
    from engine.baselines.mem0 import Mem0Memory
    from engine.finance.memories import ArrayMem0Memory

    lib, lib_res = _run(small_market, embedder, "library")
    arr, arr_res = _run(small_market, embedder, "arrays")
    assert isinstance(lib.memory, Mem0Memory) and isinstance(arr.memory, ArrayMem0Memory)
    a, b = lib.memory.snapshot(), arr.memory.snapshot()
    assert len(a["memory"]) > 20  # the stream wrote through the library's add
    assert a["memory"].tolist() == b["memory"].tolist() and a["id"].tolist() == b["id"].tolist()
    np.testing.assert_allclose(a["embedding"], b["embedding"], atol=1e-6)
    shown = [r.updates["shown"].tolist() for r in lib_res]
    assert shown == [r.updates["shown"].tolist() for r in arr_res] and any(shown)
    np.testing.assert_array_equal(np.array([r.record["s"] for r in lib_res]), np.array([r.record["s"] for r in arr_res]))
