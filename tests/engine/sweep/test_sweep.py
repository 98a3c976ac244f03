"""``toe sweep``: grid parsing, run names, planning errors, and a killed-and-resumed 2 x 2 x 2-seed sweep."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import ConfigError
from engine.sweep import SweepOptions, parse_axis, plan, run_name
from engine.sweep.grid import combinations, split_values
from engine.tasks import summary_rows

REPO = Path(__file__).resolve().parents[3]

TINY = """\
task = "game24"
methods = ["tot", "toe"]
seeds = [0]
[protocol]
warmup_first = 1
warmup_last = 40
warmup_sample = 4
test_first = 901
test_last = 1000
test_limit = 2
round_size = 2
[tot]
breadth = 2
[llm]
backend = "simulated"
[report]
plots = false
"""
GRID = ["--grid", "tot.breadth=2,3", "--grid", "protocol.round_size=1,2", "--grid", "seeds=0,1"]
WALL = {"wall_s", "wall_s_std", "run_wall_s"}  # time, not results


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def test_parse_axis_values_are_toml_and_split_outside_brackets():
    axis = parse_axis("toe.lam=0.5,1")
    assert axis.key == "toe.lam" and axis.values == (0.5, 1) and axis.raw == ("0.5", "1")
    assert parse_axis("seeds=[0,1],[2,3]").values == ([0, 1], [2, 3])
    assert split_values('"a,b",c') == ['"a,b"', "c"]
    assert parse_axis("llm.backend=simulated,local").values == ("simulated", "local")


@pytest.mark.parametrize("text, match", [
    ("tot.breadth", "expects KEY=V1,V2"),
    ("=1,2", "expects KEY=V1,V2"),
    ("tot..breadth=1", "empty component"),
    ("tot.breadth=1,,2", "comma-separated list"),
    ("tot.breadth=2,2", "distinct"),
    ("seeds=[0,1", "unclosed"),
])
def test_parse_axis_errors(text, match):
    with pytest.raises(ConfigError, match=match):
        parse_axis(text)


def test_run_names_are_stable_sorted_and_filesystem_safe():
    assert run_name({"tot.breadth": "3", "seeds": "0"}) == "seeds=0__tot.breadth=3"
    assert run_name({"seeds": "0", "tot.breadth": "3"}) == "seeds=0__tot.breadth=3"
    a, b = run_name({"llm.model": "/models/a b"}), run_name({"llm.model": "/models/a_b"})
    assert a != b and "/" not in a and " " not in a
    assert a == run_name({"llm.model": "/models/a b"})  # stable
    long = run_name({"title": "x" * 500})
    assert len(long) <= 120


def test_scalar_values_are_wrapped_where_the_config_holds_a_list():
    combos = combinations([parse_axis("seeds=0,1"), parse_axis("tot.breadth=2,3")], {"seeds": [0, 1, 2]})
    assert [c.overrides for c in combos][:2] == [("seeds=[0]", "tot.breadth=2"), ("seeds=[0]", "tot.breadth=3")]
    assert combos[0].values == {"seeds": 0, "tot.breadth": 2}
    with pytest.raises(ConfigError, match="more than once"):
        combinations([parse_axis("seeds=0"), parse_axis("seeds=1")], {})


def test_plan_errors_change_nothing(tiny, tmp_path):
    out = tmp_path / "sweep"
    opts = dict(config_path=tiny, out=out, axes=(parse_axis("tot.breadth=2,3"),))
    with pytest.raises(ConfigError, match="both as --grid and as --set"):
        plan(SweepOptions(**opts, overrides=("tot.breadth=4",)))
    with pytest.raises(ConfigError, match="--jobs must be >= 1"):
        plan(SweepOptions(**opts, jobs=0))
    with pytest.raises(ConfigError, match="at least one --grid"):
        plan(SweepOptions(config_path=tiny, out=out, axes=()))
    bad = tmp_path / "bad.toml"
    bad.write_text('task = "nope"\n')
    with pytest.raises(ConfigError, match="unknown task .nope.; valid tasks: finance"):
        plan(SweepOptions(config_path=bad, out=out, axes=(parse_axis("x=1,2"),)))
    assert not out.exists()
    sweep = plan(SweepOptions(**opts))
    assert [r.finished for r in sweep.runs] == [False, False]
    assert "--set" in sweep.runs[0].argv and "protocol.checkpoint=true" in sweep.runs[0].argv  # resumable
    # a folder from another config is refused before anything runs
    folder = sweep.runs[0].path
    folder.mkdir(parents=True)
    (folder / "sweep_run.json").write_text(json.dumps({"fingerprint": "0" * 16, "status": "finished"}))
    with pytest.raises(ConfigError, match="holds a run of another config"):
        plan(SweepOptions(**opts))


def _sweep_cmd(config, out, jobs):
    return [sys.executable, "-m", "engine", "sweep", str(config), *GRID, "--out", str(out), "--jobs", str(jobs),
            "--no-progress"]


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _finished(out):
    done = {}
    for rec_path in (out / "runs").glob("*/sweep_run.json"):
        try:
            rec = json.loads(rec_path.read_text())
        except json.JSONDecodeError:
            continue
        if rec.get("status") == "finished":
            done[rec_path.parent.name] = (rec_path.parent / "summary.json").stat().st_mtime_ns
    return done


@pytest.mark.slow
def test_sweep_killed_midway_resumes_without_redoing_finished_runs(tiny, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "sweep"
    proc = subprocess.Popen(_sweep_cmd(tiny, out, 1), env=_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while len(_finished(out)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and the run it was running
    proc.wait()
    before = _finished(out)
    assert 2 <= len(before) < 8, f"kill came too late or too early: {len(before)} runs finished"
    assert not (out / "sweep.parquet").exists()

    res = subprocess.run(_sweep_cmd(tiny, out, 2), env=_env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert f"({len(before)} finished, {8 - len(before)} to run)" in res.stdout
    after = _finished(out)
    assert len(after) == 8
    for name, mtime in before.items():
        assert after[name] == mtime, f"{name} was run again"
        assert json.loads((out / "runs" / name / "sweep_run.json").read_text())["attempts"] == 1
    manifest = json.loads((out / "sweep.json").read_text())
    assert sum(r["attempts"] for r in manifest["runs"]) >= 8
    assert (out / "sweep.md").is_file() and (out / "sweep_acc_any.png").stat().st_size > 0

    table = pq.read_table(out / "sweep.parquet").to_pylist()
    assert len(table) == 8 * 2  # runs x methods
    assert {"tot.breadth", "protocol.round_size", "seeds", "run", "method", "acc_any"} <= set(table[0])
    # the combined table equals the eight single runs' summaries (same overrides, no sweep involved)
    runs = {r["name"]: r for r in manifest["runs"]}
    for name, rec in runs.items():
        single = tmp_path / "single" / name
        sets = [x for k, v in rec["values"].items()
                for x in ("--set", f"{k}=[{v}]" if k == "seeds" else f"{k}={v}")]
        assert main(["run", str(tiny), "--out", str(single), "--no-progress", *sets]) == 0
        expect = summary_rows("game24", json.loads((single / "summary.json").read_text()))
        got = [r for r in table if r["run"] == name]
        assert [r["method"] for r in got] == [e["method"] for e in expect]
        for g, e in zip(got, expect):
            assert {k: g[k] for k in rec["values"]} == rec["values"]
            assert {k: v for k, v in e.items() if k not in WALL} == \
                   {k: g[k] for k in e if k not in WALL}, name


def test_summary_rows_of_every_task():
    from engine.config import to_dict
    from engine.forecast.futurex_metrics import AccuracyRow
    from engine.forecast.metrics import Row

    fin = {"meta": {"label": "synthetic"}, "methods": [  # the run folder's summary.json
        {"method": "Pipe", "horizon": h, "period": p, "tsIC": 0.1 * h, "csIC": -0.1 * h, "backend": "simulated",
         "model": "m", "simulated": True} for h in (10, 20) for p in ("Exploitation", "Overall")]}
    (row,) = summary_rows("finance", fin)
    assert row["tsIC_20d_Exploitation"] == pytest.approx(2.0) and row["csIC_10d_Overall"] == pytest.approx(-1.0)
    assert row["simulated"] is True
    fc = {"meta": {}, "methods": [{**to_dict(Row("ForeDreamer [simulated]", {"A": 0.2, "B": 0.4}, {"A": 1.0, "B": 0.0},
                                                 {"A": 1.0, "B": 1.0}, {"A": 2, "B": 3}, failed=1)),
                                   "simulated": True}]}
    (row,) = summary_rows("forecast", fc)
    assert row["brier"] == pytest.approx(0.3) and row["brier_B"] == 0.4 and row["failed"] == 1
    assert row["n_questions"] == 5 and row["simulated"] is True
    fx = {"meta": {}, "methods": [{**to_dict(AccuracyRow("RAG", {"binary": 2, "numeric": 2}, {"binary": 2, "numeric": 0})),
                                   "simulated": False}]}
    (row,) = summary_rows("futurex", fx)
    assert row["accuracy"] == 0.5 and row["accuracy_binary"] == 1.0 and row["simulated"] is False
    with pytest.raises(ConfigError, match="unknown task"):
        summary_rows("nope", {})
