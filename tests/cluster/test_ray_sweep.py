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
