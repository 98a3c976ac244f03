"""Forecasting on Ray: 2 workers give the records and summary of the local executor (timings aside)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

pytest.importorskip("ray")

import pyarrow.parquet as pq  # noqa: E402

from engine.forecast.sandbox import sandbox_available  # noqa: E402
from engine.tasks import RunOptions, run  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _pa_folder(tmp_path: Path) -> Path:
    """The forecast tests' two-category Prophet Arena folder (tests/engine/forecast/conftest.py)."""
    spec = importlib.util.spec_from_file_location("forecast_conftest", ROOT / "tests/engine/forecast/conftest.py")
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    folder = tmp_path / "pa"
    folder.mkdir()
    rows = [helpers.make_row(f"s{i}", snapshot=f"2025-08-{i + 1:02d}T12:00:00+00:00") for i in range(6)]
    helpers.write_csv(folder / "subset_data_Sports_6.csv", rows)
    return folder


def _configs(tmp_path: Path) -> dict:
    return {
        # ForeDreamer's evolution (editor, critic, generator, sandboxed gate in the iteration's episode)
        # and MemRL's experience track: both one episode per round
        "futurex": {"task": "futurex", "data": {"path": "example", "documents": "example", "n_evo": 2},
                    "run": {"methods": ["foredreamer", "memrl"], "max_questions": 3, "evolve": True},
                    "agent": {"top_k": 1}, "evolution": {"iterations": 2, "top_k": 2, "items_per_example": 1},
                    "memory": {"top_k": 2}, "llm": {"backend": "simulated"}},
        # no experience: all held-out questions in one round, split over the two workers; two of the
        # paper's memory baselines (HippoRAG 2's graph, MemoryOS's heat) through the evidence layer
        "forecast": {"task": "forecast", "data": {"path": str(_pa_folder(tmp_path)), "n_evo": 2},
                     "run": {"methods": ["foredreamer", "full_text", "hipporag", "memoryos"], "max_questions": 4},
                     "agent": {"top_k": 1}, "llm": {"backend": "simulated"}},
    }


def _folder(out: Path) -> tuple[list[dict], dict]:
    records = [{k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()
                if k != "llm_latency_s"} for r in pq.read_table(out / "episodes.parquet").to_pylist()]
    summary = json.loads((out / "summary.json").read_text())
    meta = {k: v for k, v in summary["meta"].items()
            if k not in ("wall_s", "executor", "workers", "usage", "provenance")}  # how it ran, not what it found
    return records, {"methods": summary["methods"], "meta": meta}


@pytest.mark.parametrize("task", ["futurex", "forecast"])
def test_ray_two_workers_equal_local(ray_cluster, tmp_path, task):
    ok, why = sandbox_available()
    if not ok:
        pytest.skip(f"bubblewrap sandbox unavailable: {why}")
    config = _configs(tmp_path)[task]
    got = {}
    for executor, workers in (("local", 1), ("ray", 2)):
        out = tmp_path / executor
        opts = RunOptions(config_path=tmp_path / f"{task}.toml", out=out, executor=executor, workers=workers,
                          progress=False)
        assert run(config, opts) == 0
        got[executor] = _folder(out)
    assert got["ray"] == got["local"]
    records = got["local"][0]
    assert all(r["backend"] == "simulated" and r["model"] for r in records)
    assert {r["method"] for r in records} == set(config["run"]["methods"])
    stats = [json.loads(line) for line in (tmp_path / "ray" / "executor_stats.jsonl").read_text().splitlines()]
    assert all(s["executor"] == "ray" for s in stats)
    if task == "forecast":  # the one round of each run was shared by both workers
        assert all(sum(w["episodes"] > 0 for w in s["workers"]) == 2 for s in stats)
