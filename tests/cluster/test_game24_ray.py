"""Game of 24 on the Ray executor (2 workers): every method gives the local executor's records and rows.

All seven methods of the main job (ToT, the four baselines, ToE supply and guide) run a tiny
stream through one 2-worker executor whose actors outlive each run, so the test pays one start-up.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from cluster.ray_executor import RayExecutor  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402
from engine.game24.task import Game24Task  # noqa: E402

pytestmark = pytest.mark.ray

TINY = {
    "task": "game24",
    "methods": ["tot", "mem0", "memrl", "reme", "flex", "toe-supply", "toe-guide"],
    "seeds": [0],
    "protocol": {"warmup_sample": 4, "test_limit": 4, "round_size": 4},
    "tot": {"breadth": 2},
    "report": {"plots": False},
    "llm": {"backend": "simulated"},
    "embed": {"backend": "hashing"},
}

TIMING = {"wall_s", "llm_latency_s"}


def test_every_method_on_ray_with_2_workers_equals_local(ray_cluster):
    task = Game24Task()
    run = task.parse(TINY, SimpleNamespace(config_path=Path("g24.toml"), executor="local"))
    ray_ex = RayExecutor(workers=2, num_cpus_per_worker=0.5)
    records = {"local": [], "ray": []}
    try:
        for spec in task.runs(run):
            episodes = task.episodes(run, spec)
            for kind, ex in (("local", LocalExecutor()), ("ray", ray_ex)):
                results = ex.run(task.make_method(run, spec), episodes, task.llm_factory(run, spec),
                                 round_size=task.round_size(run, spec))
                records[kind].extend({**r.record, "method": spec.method, "seed": spec.seed} for r in results)
            assert len(ray_ex.stats["workers"]) == 2 and all(w["episodes"] > 0 for w in ray_ex.stats["workers"])
    finally:
        ray_ex.close()
    assert {r["method"] for r in records["local"]} == set(TINY["methods"])
    untimed = {k: [{f: x for f, x in r.items() if f not in TIMING} for r in v] for k, v in records.items()}
    assert json.dumps(untimed["local"], sort_keys=True) == json.dumps(untimed["ray"], sort_keys=True)
    extras = {s.key: {"wall_s": 0.0} for s in task.runs(run)}
    rows = {k: [{f: x for f, x in row.items() if not f.startswith("wall_s")}
                for row in task.summarize(run, v, extras).rows] for k, v in records.items()}
    assert rows["local"] == rows["ray"] and len(rows["local"]) == 7
