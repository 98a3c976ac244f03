"""``toe sweep --executor ray``: runs become Ray tasks and give the same table as local processes."""

import json

import pytest

from engine.sweep import SweepOptions, parse_axis, run_sweep

pytestmark = pytest.mark.ray

TINY = """\
task = "game24"
methods = ["toe"]
seeds = [0]
[protocol]
warmup_first = 1
warmup_last = 20
warmup_sample = 2
test_first = 901
test_last = 1000
test_limit = 2
[llm]
backend = "simulated"
[report]
plots = false
"""


def test_ray_sweep_equals_local_sweep(ray_cluster, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    tables = {}
    for executor in ("ray", "local"):
        out = tmp_path / executor
        opts = SweepOptions(config_path=config, out=out, axes=(parse_axis("seeds=0,1"),), executor=executor,
                            jobs=2, progress=False)
        assert run_sweep(opts) == 0
        manifest = json.loads((out / "sweep.json").read_text())
        assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]
        tables[executor] = [{k: v for k, v in r.items() if "wall" not in k}
                            for r in pq.read_table(out / "sweep.parquet").to_pylist()]
    assert tables["ray"] == tables["local"] and len(tables["ray"]) == 2


def test_each_run_asks_ray_for_its_configs_resources_and_a_run_that_cannot_fit_is_refused(ray_cluster, tmp_path):
    from engine.errors import ConfigError
    from engine.sweep.runs import child_env, plan

    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    opts = SweepOptions(config_path=config, out=tmp_path / "gpu", axes=(parse_axis("seeds=0,1"),), executor="ray",
                        overrides=("cluster.num_gpus_per_worker=1",), jobs=2, progress=False)
    sweep = plan(opts)
    assert [r.resources for r in sweep.runs] == [{"num_cpus": 1.0, "num_gpus": 1.0, "tensor_parallel_size": 1}] * 2
    # this cluster (Ray's own resource view) has no GPU: refused at once, nothing run
    with pytest.raises(ConfigError, match=r"cannot hold the workers asked for: .*1 GPUs.*0 GPUs"):
        run_sweep(opts)
    assert not any((r.path / "run.log").exists() for r in sweep.runs)
    env = child_env(only_shipped=True)  # what a task on another node gets: no stray variables of the driver
    assert "PYTHONPATH" in env and all(k in env for k in ("PATH",) if k in __import__("os").environ)
