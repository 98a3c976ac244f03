"""The generic task on Ray: 2 workers give the records and summary of the local executor (timings aside)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

import pyarrow.parquet as pq  # noqa: E402

from engine.tasks import RunOptions, run  # noqa: E402

pytestmark = [pytest.mark.ray]


def _folder(out: Path):
    records = [{k: v for k, v in r.items() if k != "wall_s"} for r in pq.read_table(out / "episodes.parquet").to_pylist()]
    summary = json.loads((out / "summary.json").read_text())
    meta = {k: v for k, v in summary["meta"].items()
            if k not in ("wall_s", "executor", "workers", "usage", "provenance")}  # how it ran, not what it found
    return records, summary["methods"], meta


def test_generic_ray_two_workers_equal_local(ray_cluster, tmp_path):
    config = {"task": "generic", "methods": ["plain", "flex", "memrl"], "seeds": [0],
              "data": {"path": "example", "limit": 16}, "protocol": {"round_size": 8},
              "report": {"plots": False}, "llm": {"backend": "simulated"}}
    got = {}
    for executor, workers in (("local", 1), ("ray", 2)):
        out = tmp_path / executor
        opts = RunOptions(config_path=tmp_path / "g.toml", out=out, executor=executor, workers=workers, progress=False)
        assert run(config, opts) == 0
        got[executor] = _folder(out)
    assert got["ray"] == got["local"]
    assert any(r["n_retrieved"] > 0 for r in got["local"][0] if r["method"] == "flex")
