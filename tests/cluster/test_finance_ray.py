"""Finance on the Ray executor (2 workers): the same records, state and summary rows as the local executor.

Every method runs through one 2-worker executor whose actors outlive each run (as in
test_ray_executor.py), so the test costs one actor start-up, not one per method.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ray")

from cluster.ray_executor import RayExecutor  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402
from engine.finance.task import FinanceTask  # noqa: E402

pytestmark = pytest.mark.ray

TINY = {
    "task": "finance",
    "methods": ["Baseline", "Pipe", "Pipe+Mem0", "Pipe+MemRL", "Pipe+ToE", "Pipe+ToE (LLM update)"],
    "seeds": [0],
    "plots": False,
    "synthetic": {"n_industries": 4, "n_days": 60, "events_per_day": 2.0, "seed": 4},
    # short horizons: feedback every day; a 4-day pre-test span (clustering at its end) before 8 evaluated days
    "protocol": {"max_days": 8, "horizons": [1, 2, 4], "pretest_start": "2025-01-06", "pretest_end": "2025-01-09",
                 "start": "2025-01-10"},
    "llm": {"backend": "simulated"},
}


def _state(method) -> dict:
    if hasattr(method, "store"):
        return {"q": method.store.reliability.copy(), "hit": method.store.hit, "active": method.store.active.copy(),
                "status": method.store.ledger.column("status").copy(), "route": method.route.copy()}
    if hasattr(method, "ledger"):
        # mem0's own ids (uuid4) and payload timestamps differ in every run, so the library's rows are compared
        # by their engine ids, texts, vectors and session messages
        return {"status": method.ledger.column("status").copy(),
                **{f"memory.{k}": np.asarray(v).copy() for k, v in method.memory.snapshot().items()
                   if k not in ("mem0_id", "payload")}}
    return {k: v for k, v in vars(method).items() if isinstance(v, np.ndarray)}


def test_local_and_ray_with_2_workers_give_identical_records(ray_cluster, tmp_path):
    task = FinanceTask()
    fin = task.parse(TINY, SimpleNamespace(config_path=Path("fin.toml")))
    ray_ex = RayExecutor(workers=2, num_cpus_per_worker=0.5)
    records = {"local": [], "ray": []}
    try:
        for spec in task.runs(fin):
            episodes = task.episodes(fin, spec)
            size = task.round_size(fin, spec)
            states = {}
            for kind, ex in (("local", LocalExecutor()), ("ray", ray_ex)):
                method = task.make_method(fin, spec)
                results = ex.run(method, episodes, task.llm_factory(fin, spec), round_size=size)
                records[kind].extend({**r.record, "method": spec.method, "seed": spec.seed} for r in results)
                states[kind] = _state(method)
            assert len(ray_ex.stats["workers"]) == 2 and all(w["episodes"] > 0 for w in ray_ex.stats["workers"])
            assert states["local"], spec.key
            for k in states["local"]:
                np.testing.assert_array_equal(states["local"][k], states["ray"][k], err_msg=f"{spec.key}: {k}")
    finally:
        ray_ex.close()
    assert json.dumps(records["local"]) == json.dumps(records["ray"])  # NaN (no news) compares equal as text
    rows = {k: task.summarize(fin, v, {}).rows for k, v in records.items()}
    assert rows["local"] == rows["ray"] and len(rows["local"]) == 6 * 3 * 2


def test_pipelined_pipe_toe_on_ray_equals_local(ray_cluster):
    """``pipeline_rounds = 1`` (a day reads the store of two days before): the same records and store on both."""
    task = FinanceTask()
    fin = task.parse({**TINY, "methods": ["Pipe+ToE"]}, SimpleNamespace(config_path=Path("fin.toml")))
    (spec,) = task.runs(fin)
    got = {}
    for kind, ex in (("local", LocalExecutor(pipeline_rounds=1)),
                     ("ray", RayExecutor(workers=2, num_cpus_per_worker=0.5, pipeline_rounds=1))):
        method = task.make_method(fin, spec)
        try:
            results = ex.run(method, task.episodes(fin, spec), task.llm_factory(fin, spec),
                             round_size=task.round_size(fin, spec))
        finally:
            ex.close()
        got[kind] = (json.dumps([r.record for r in results]), _state(method))
    assert got["local"][0] == got["ray"][0]
    for k in got["local"][1]:
        np.testing.assert_array_equal(got["local"][1][k], got["ray"][1][k], err_msg=k)
