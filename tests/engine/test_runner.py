"""The one runner (engine.runner.run_task) and its run folder (engine.run_folder), on the toy harness.

A toy task drives the real executor, checkpoints and writers: the folder layout, the
resolved config, what answered, resume after a crash, and a failed write that keeps the
earlier run folder.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from toy_harness import ToyLLMFactory, ToyMethod, toy_episodes

from engine.runner import RunSpec, Summary, run_task
from engine.tasks import RunOptions


class ToyTask:
    name = "toy"

    def __init__(self, crash_after: str | None = None):
        self.crash_after = crash_after  # a run key whose after_run raises (a driver dying after that run)
        self.made = []

    def parse(self, config, options):
        if not isinstance(config.get("episodes"), int):
            from engine.errors import ConfigError

            raise ConfigError(f"episodes must be an integer, got {config.get('episodes')!r}")
        return dict(config)

    def runs(self, exp):
        return [RunSpec(m, s, part) for m in exp["methods"] for s in exp["seeds"] for part in exp.get("parts", [""])]

    def make_method(self, exp, spec):
        self.made.append(spec.key)
        return ToyMethod(name=spec.method)

    def episodes(self, exp, spec):
        return toy_episodes(exp["episodes"], seed=spec.seed)

    def round_size(self, exp, spec):
        return 3

    def llm_factory(self, exp, spec):
        return ToyLLMFactory()

    def checkpoint(self, exp):
        return bool(exp.get("checkpoint"))

    def after_run(self, exp, spec, method, results, out):
        if spec.key == self.crash_after:
            raise KeyboardInterrupt("driver killed")
        return {"final_score": float(method.table["score"].sum())}

    def summarize(self, exp, records, extras):
        rows = []
        for m in exp["methods"]:
            mine = [r for r in records if r["method"] == m]
            rows.append({"method": m, "reward": float(np.mean([r["reward"] for r in mine])), "n": len(mine)})
        return Summary(rows, {"final_scores": {k: e["final_score"] for k, e in extras.items()}})

    def report(self, exp, summary, records, out):
        return "| method | reward |\n|---|---|\n" + "".join(
            f"| {r['method']} | {r['reward']:.6f} |\n" for r in summary.rows), []


def options(tmp_path: Path, **kw) -> RunOptions:
    return RunOptions(config_path=tmp_path / "toy.toml", out=tmp_path / "run", progress=False, **kw)


CONFIG = {"task": "toy", "title": "toy run", "methods": ["a", "b"], "seeds": [0, 1], "episodes": 7,
          "llm": {"backend": "simulated"}}


def test_run_folder_layout_and_contents(tmp_path):
    assert run_task(ToyTask(), CONFIG, options(tmp_path)) == 0
    out = tmp_path / "run"
    assert {p.name for p in out.iterdir()} >= {"episodes.parquet", "summary.json", "table.md", "config.toml"}
    summary = json.loads((out / "summary.json").read_text())
    assert [r["method"] for r in summary["methods"]] == ["a", "b"]
    assert all(r["n"] == 14 for r in summary["methods"])
    meta = summary["meta"]
    assert meta["task"] == "toy" and meta["title"] == "toy run" and meta["executor"] == "local"
    assert set(meta["wall_s"]) == {"a-seed0", "a-seed1", "b-seed0", "b-seed1"}
    assert set(meta["final_scores"]) == set(meta["wall_s"])
    # the toy records name no backend, so the config's is reported (and it says simulated everywhere)
    assert (meta["backend"], meta["simulated"]) == ("simulated", True)
    assert all(r["simulated"] for r in summary["methods"])
    table = pq.read_table(out / "episodes.parquet").to_pylist()
    assert len(table) == 28 and {(r["method"], r["seed"]) for r in table} == {(m, s) for m in "ab" for s in (0, 1)}
    assert "part" not in table[0]  # the toy task has no parts
    written = tomllib.loads((out / "config.toml").read_text())  # the resolved config: [llm] with its defaults
    assert {k: v for k, v in written.items() if k != "llm"} == {k: v for k, v in CONFIG.items() if k != "llm"}
    assert written["llm"]["backend"] == "simulated" and written["llm"]["openai"]["on_error"] == "fail"
    assert (out / "table.md").read_text().startswith("| method | reward |")


def test_parts_are_runs_with_their_own_key(tmp_path):
    config = {**CONFIG, "methods": ["a"], "seeds": [0], "parts": ["x", "y"]}
    run_task(ToyTask(), config, options(tmp_path))
    meta = json.loads((tmp_path / "run" / "summary.json").read_text())["meta"]
    assert set(meta["wall_s"]) == {"a-seed0-x", "a-seed0-y"}
    assert {r["part"] for r in pq.read_table(tmp_path / "run" / "episodes.parquet").to_pylist()} == {"x", "y"}


def test_a_bad_config_fails_before_anything_is_written(tmp_path):
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="episodes must be an integer"):
        run_task(ToyTask(), {**CONFIG, "episodes": "7"}, options(tmp_path))
    assert not (tmp_path / "run").exists()


def test_a_killed_run_resumes_from_its_checkpoints_and_gives_the_uninterrupted_result(tmp_path):
    config = {**CONFIG, "checkpoint": True}
    clean = tmp_path / "clean"
    run_task(ToyTask(), config, RunOptions(config_path=tmp_path / "t.toml", out=clean, progress=False))
    with pytest.raises(KeyboardInterrupt):
        run_task(ToyTask(crash_after="b-seed0"), config, options(tmp_path))
    assert not (tmp_path / "run" / "summary.json").exists()  # nothing claims to be a finished run
    run_task(ToyTask(), config, options(tmp_path))
    a = json.loads((clean / "summary.json").read_text())
    b = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert a["methods"] == b["methods"] and a["meta"]["final_scores"] == b["meta"]["final_scores"]
    stats = [json.loads(x) for x in (tmp_path / "run" / "executor_stats.jsonl").read_text().splitlines()]
    # the three runs finished before the kill were restored from their checkpoints, not run again:
    # every run executed its rounds exactly once over the two invocations
    assert [x["run_key"] for x in stats] == ["a-seed0", "a-seed1", "b-seed0", "b-seed1"]
    assert all(x["episodes_run"] == 7 and x["resumed_at_round"] == 0 for x in stats)

def test_a_failed_artefact_costs_that_artefact_not_the_run(tmp_path, monkeypatch):
    """A write that fails at the end (a full disk) loses that file only: the summary and the episodes are
    written, the summary lists the failure, and the error names what is missing."""
    from engine import run_folder
    from engine.errors import PersistenceError

    run_task(ToyTask(), CONFIG, options(tmp_path))
    real = run_folder.write_config

    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(run_folder, "write_config", broken)
    with pytest.raises(PersistenceError, match=r"summary.json holds its results, but config.toml could not be written "
                                               r"\(OSError: disk full\)"):
        run_task(ToyTask(), {**CONFIG, "episodes": 4}, options(tmp_path))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["methods"][0]["n"] == 8 and summary["meta"]["artefact_errors"] == ["config.toml: OSError: disk full"]
    assert len(pq.read_table(tmp_path / "run" / "episodes.parquet")) == 16
    monkeypatch.setattr(run_folder, "write_config", real)
    run_task(ToyTask(), {**CONFIG, "episodes": 4}, options(tmp_path))
    assert "artefact_errors" not in json.loads((tmp_path / "run" / "summary.json").read_text())["meta"]


def test_a_failed_report_keeps_the_summary_and_episodes(tmp_path):
    from engine.errors import PersistenceError

    class BadPlots(ToyTask):
        def report(self, exp, summary, records, out):
            raise RuntimeError("matplotlib exploded")

    with pytest.raises(PersistenceError, match="table.md and plots could not be written"):
        run_task(BadPlots(), CONFIG, options(tmp_path))
    out = tmp_path / "run"
    assert json.loads((out / "summary.json").read_text())["meta"]["artefact_errors"] == [
        "table.md and plots: RuntimeError: matplotlib exploded"]
    assert len(pq.read_table(out / "episodes.parquet")) == 28 and (out / "config.toml").is_file()


def test_finished_runs_records_are_on_disk_before_a_later_run_fails(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        run_task(ToyTask(crash_after="b-seed0"), CONFIG, options(tmp_path))
    out = tmp_path / "run"
    assert not (out / "summary.json").exists()  # not a finished run
    rows = pq.read_table(out / "episodes.parquet").to_pylist()
    assert {(r["method"], r["seed"]) for r in rows} == {("a", 0), ("a", 1)} and len(rows) == 14


def test_what_answered_is_read_from_the_records():
    from engine.llm.config import load_llm_config
    from engine.run_folder import answered_by

    replay = load_llm_config({"backend": "replay", "replay": {"path": "t.jsonl", "backend": "local"}})
    assert answered_by([{"backend": "simulated", "model": "sim-v1"}], replay) == ("simulated", "sim-v1")
    assert answered_by([{"backend": "local", "model": "m"}, {"backend": "simulated", "model": "s"}],
                       replay) == ("local+simulated", "m+s")
    assert answered_by([], replay)[0] == "local"  # nothing recorded: the trace's recording backend


def test_summary_and_episodes_say_what_made_the_run(tmp_path):
    from engine import __version__

    run_task(ToyTask(), CONFIG, options(tmp_path))
    out = tmp_path / "run"
    prov = json.loads((out / "summary.json").read_text())["meta"]["provenance"]
    assert prov["versions"]["toe-engine"] == __version__ and prov["versions"]["numpy"] == np.__version__
    assert prov["git"] is None or (len(prov["git"]["commit"]) == 40 and isinstance(prov["git"]["dirty"], bool))
    assert prov["started_at"] <= prov["ended_at"] and prov["started_at"].endswith("+00:00")
    assert isinstance(prov["command"], list) and prov["python"] and "CPUs" in prov["machine"]
    meta = pq.read_schema(out / "episodes.parquet").metadata
    assert json.loads(meta[b"toe.provenance"]) == prov


def test_summary_parquet_holds_one_flat_row_per_method_and_seed(tmp_path):
    """The task's own rows, seed by seed: what the table averages, readable without unnesting."""
    import pandas as pd

    run_task(ToyTask(), CONFIG, options(tmp_path))
    out = tmp_path / "run"
    frame = pd.read_parquet(out / "summary.parquet")
    assert sorted(zip(frame["method"], frame["seed"])) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    episodes = pd.read_parquet(out / "episodes.parquet")
    want = episodes.groupby(["method", "seed"])["reward"].mean()
    for row in frame.itertuples():
        assert row.reward == pytest.approx(want[(row.method, row.seed)]) and row.n == 7
        assert row.task == "toy" and row.backend == "simulated" and bool(row.simulated)
    # the mean of the seeds' rows is the table's row
    table = {r["method"]: r["reward"] for r in json.loads((out / "summary.json").read_text())["methods"]}
    assert frame.groupby("method")["reward"].mean().to_dict() == pytest.approx(table)
    assert b"toe.provenance" in pq.read_schema(out / "summary.parquet").metadata
    try:
        import duckdb
    except ImportError:
        return
    assert duckdb.sql(f"select count(*) from '{out / 'summary.parquet'}'").fetchone() == (4,)


def test_each_runs_method_is_built_once_and_dependent_runs_build_theirs_when_they_start(tmp_path):
    task = ToyTask()
    keys = [s.key for s in task.runs(CONFIG)]
    run_task(task, CONFIG, options(tmp_path))
    assert task.made == keys  # the pre-flight build is the one each run uses

    class Dependent(ToyTask):
        """Runs that read what the one before left (a FLEX library file) when their method is built."""

        def independent_runs(self, exp):
            return False

        def after_run(self, exp, spec, method, results, out):
            self.made.append(f"finished {spec.key}")
            return super().after_run(exp, spec, method, results, out)

    dep = Dependent()
    run_task(dep, CONFIG, options(tmp_path / "dep"))
    assert dep.made == keys + [x for k in keys for x in (k, f"finished {k}")]  # rebuilt at each start, in order
