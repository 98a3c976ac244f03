"""``--track mlflow``: a run's config, metrics, throughput and artifacts in an MLflow store, read back with
MLflow's own client."""

import argparse
import json
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.tracking import flatten, metric_key, tracking_uri

def test_helpers():
    assert flatten({"tot": {"breadth": 5}, "seeds": [0, 1], "task": "game24"}) == \
        {"tot.breadth": "5", "seeds": "[0, 1]", "task": "game24"}
    assert metric_key("Pipe+ToE (LLM update)/tsIC") == "Pipe_ToE _LLM update_/tsIC"
    assert tracking_uri("http://h:5000") == "http://h:5000"
    assert tracking_uri("/x/mlruns") == "file:///x/mlruns"
    assert tracking_uri(None).startswith("file:///") and tracking_uri(None).endswith("/mlruns")


@pytest.mark.slow
def test_mlflow_run_is_written_and_read_back(tiny, tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out, store = tmp_path / "run", tmp_path / "mlruns"
    assert main(["run", str(tiny), "--out", str(out), "--no-progress", "--set", "tot.breadth=3",
                 "--track", "mlflow", "--track-uri", str(store)]) == 0
    client = MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("tiny")
    (run,) = client.search_runs([exp.experiment_id])
    assert (store / exp.experiment_id / run.info.run_id).is_dir()  # the run folder on disk
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert run.data.params["tot.breadth"] == "3" and run.data.params["protocol.test_limit"] == "2"
    assert run.data.tags["task"] == "game24" and run.data.tags["simulated"] == "True"
    summary = json.loads((out / "summary.json").read_text())
    for rec in summary["methods"]:
        assert run.data.metrics[f"{rec['method']}/acc_any"] == pytest.approx(rec["acc_any"])
        assert run.data.metrics[f"{rec['method']}/calls"] == pytest.approx(rec["calls"])
    stats = [json.loads(line) for line in (out / "executor_stats.jsonl").read_text().splitlines()]
    history = client.get_metric_history(run.info.run_id, "throughput/episodes_per_s")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(len(stats)))
    assert sorted(m.value for m in history) == pytest.approx(sorted(s["episodes_per_s"] for s in stats))
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "table.md", "config.json", "executor_stats.jsonl", "accuracy_vs_calls.png",
            "learning_curve.png", "episodes.parquet", "summary.parquet", "config.toml"} <= names
    # opened at the start and filled as it went: every round of every run as it finished, in the same run
    for key, wall in summary["meta"]["wall_s"].items():
        history = sorted(client.get_metric_history(run.info.run_id, f"progress/{key}"), key=lambda m: m.step)
        assert history and [m.step for m in history] == list(range(len(history)))
        assert history[-1].value == max(m.value for m in history) > 0
        assert client.get_metric_history(run.info.run_id, f"progress/{key}_share")[-1].value == 1.0
    prov = summary["meta"]["provenance"]  # what made the run, as tags
    assert run.data.tags["mlflow.source.git.commit"] == str(prov["git"]["commit"])
    assert run.data.tags["version.numpy"] == prov["versions"]["numpy"] and run.data.tags["started_at"]
    local = Path(client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path)))
    assert json.loads(local.read_text()) == summary


def test_missing_mlflow_names_the_extra_and_runs_nothing(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    out = tmp_path / "run"
    assert main(["run", str(tiny), "--out", str(out), "--no-progress", "--track", "mlflow"]) == 1
    err = capsys.readouterr().err
    assert "mlflow is not installed" in err and ".[track]" in err
    assert not out.exists()


def test_a_tracking_server_that_is_not_there_is_refused_before_the_run(tiny, tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a port where nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    uri = f"http://127.0.0.1:{port}"
    assert main(["run", str(tiny), "--out", str(out), "--no-progress", "--track", "mlflow", "--track-uri", uri]) == 1
    err = capsys.readouterr().err
    assert f"no tracking server answers at {uri}" in err and "Traceback" not in err
    assert not out.exists()  # nothing ran


def test_a_failed_logging_after_the_run_says_the_results_are_saved(tiny, tmp_path, capsys, monkeypatch):
    import engine.tracking as tracking

    def fail(*a, **k):
        raise RuntimeError("the store went away")

    monkeypatch.setattr(tracking, "log_run", fail)
    out = tmp_path / "run"
    assert main(["run", str(tiny), "--out", str(out), "--no-progress", "--track", "mlflow",
                 "--track-uri", str(tmp_path / "mlruns")]) == 1
    err = capsys.readouterr().err
    assert f"the run finished and its results are in {out}" in err and "the store went away" in err
    assert (out / "summary.json").is_file()


def test_sweep_passes_one_store_and_experiment_to_every_run(tmp_path):
    pytest.importorskip("mlflow")
    from engine.cli.sweep import _track_args

    args = argparse.Namespace(track="mlflow", track_uri=None, track_experiment=None)
    got = _track_args(args, tmp_path / "grid")
    assert got == ["--track", "mlflow", "--track-uri", (tmp_path / "grid" / "mlruns").resolve().as_uri(),
                   "--track-experiment", "grid"]
    assert _track_args(argparse.Namespace(track=None, track_uri=None, track_experiment=None), tmp_path) == []


def test_a_tracked_sweep_is_one_parent_run_with_a_child_per_combination(tiny, tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    out = tmp_path / "grid"
    assert main(["sweep", str(tiny), "--grid", "seeds=0,1", "--out", str(out), "--no-progress", "--jobs", "2",
                 "--set", "report.plots=false", "--track", "mlflow"]) == 0
    client = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    exp = client.get_experiment_by_name("grid")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("kind") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == 2 and len(runs) == 3
    for child in children:
        names = {a.path for a in client.list_artifacts(child.info.run_id)}
        assert {"episodes.parquet", "config.toml", "summary.json"} <= names
    assert "sweep.parquet" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}


class Recording:
    """A store that keeps what the mapping hands it (the interface every tracker implements)."""

    kind = "fake"

    def __init__(self, fail_log=False):
        self.fail_log, self.points, self.ended = fail_log, [], []

    def start(self, name, params, tags, parent):
        self.params, self.tags = dict(params), dict(tags)
        return "r1"

    def log(self, run_id, points):
        if self.fail_log:
            raise RuntimeError("the store went away")
        self.points += points

    def end(self, run_id, ok):
        self.ended.append(ok)


def test_live_progress_steps_each_run_by_its_rounds_and_warns_once(tmp_path, capsys):
    from engine.tracking import Live

    store = Recording()
    live = Live(store, tmp_path / "run", {"tot": {"breadth": 3}, "seeds": [0]}, "game24", None)
    assert store.params == {"tot.breadth": 3, "seeds": [0]} and store.tags["task"] == "game24"
    for key, done in (("tot-seed0", 2), ("toe-seed0", 2), ("tot-seed0", 4)):
        live(key, done, 4)
    got = [(p.key, p.step, p.value, p.axis) for p in store.points if not p.key.endswith("_share")]
    assert got == [("progress/tot-seed0", 0, 2.0, "progress/tot-seed0_round"),
                   ("progress/toe-seed0", 0, 2.0, "progress/toe-seed0_round"),
                   ("progress/tot-seed0", 1, 4.0, "progress/tot-seed0_round")]
    broken = Live(Recording(fail_log=True), tmp_path / "run", {}, "game24", None)
    for _ in range(3):
        broken("tot-seed0", 1, 2)  # the run goes on
    assert capsys.readouterr().err.count("warning: live tracking failed") == 1
    broken.end(False)
    assert broken.store.ended == [False]
