"""Pipe+Mem0 runs the real mem0 library: on a small stream it stores memories through the library's add and shows them."""

import numpy as np
import pytest

pytest.importorskip("mem0")
pytest.importorskip("faiss")

from engine.executor import LocalExecutor  # noqa: E402
from engine.finance.config import FinanceConfig  # noqa: E402
from engine.finance.experiment import build_method, evaluation_days  # noqa: E402
from engine.finance.methods import StreamContext, stream_episodes  # noqa: E402
from engine.finance.simulated import simulated_backend  # noqa: E402


def _run(market, embedder, n_days=25):
    cfg = FinanceConfig()
    days = evaluation_days(market, cfg)[:n_days]
    method = build_method("Pipe+Mem0", StreamContext(market, cfg.protocol, cfg.sampling, 0, embedder), days, cfg, 9)
    results = LocalExecutor().run(method, stream_episodes(days, market.n_industries, 0), lambda: simulated_backend(0),
                                  round_size=market.n_industries)
    return method, results


def test_pipe_mem0_stores_and_shows_through_the_library(small_market, embedder):
    from engine.baselines.mem0 import Mem0Memory

    method, results = _run(small_market, embedder)
    assert isinstance(method.memory, Mem0Memory)
    snap = method.memory.snapshot()
    assert len(snap["memory"]) > 20  # the stream wrote through the library's add
    assert len(set(snap["id"].tolist())) == len(snap["id"])
    np.testing.assert_allclose(np.linalg.norm(snap["embedding"], axis=1), 1.0, atol=1e-5)
    shown = [r.updates["shown"].tolist() for r in results]
    assert any(shown) and all(set(s) <= set(snap["id"].tolist()) for s in shown)
    again, results2 = _run(small_market, embedder)  # the library store is deterministic run to run
    assert again.memory.snapshot()["memory"].tolist() == snap["memory"].tolist()
    np.testing.assert_array_equal(np.array([r.record["s"] for r in results]), np.array([r.record["s"] for r in results2]))
