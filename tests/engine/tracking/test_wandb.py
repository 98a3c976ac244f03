"""``--track wandb``: the same mapping as MLflow (engine.tracking.mapping) in W&B's offline mode, read back from
the transaction log wandb writes (``wandb/offline-run-*/run-*.wandb``) with wandb's own reader,
``wandb leet inspect --json``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main


@pytest.fixture
def offline(tiny, tmp_path, monkeypatch):
    """The tiny run's config; W&B offline, its staging, cache and settings inside the test's folder."""
    pytest.importorskip("wandb")
    for var, sub in (("WANDB_DATA_DIR", "data"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config"),
                     ("WANDB_ARTIFACT_DIR", "artifacts")):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tiny


def records(path: Path) -> list[dict]:
    """Every record of one offline run, in order, as wandb's own inspector prints it."""
    got = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                         capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in got.stdout.splitlines() if line.strip()]


class Run:
    """One offline run read back: its run record, config, tags, summary, history, artifacts and exit code."""

    def __init__(self, path: Path):
        recs = records(path)
        runs = [r["run"] for r in recs if r["type"] == "run"]  # the first, then one per update (e.g. of its tags)
        self.info = {k: v for r in runs for k, v in r.items()}
        self.config = {k: v for r in runs for k, v in r.get("config", {}).get("update", {}).items()}
        self.tags = set(self.info.get("tags", []))
        self.summary: dict = {}
        for r in recs:
            if r["type"] == "summary":
                self.summary.update(r["summary"].get("update", {}))
        self.history = [r["history"]["item"] for r in recs if r["type"] == "history"]
        self.artifacts = [r["artifact"] for r in recs if r["type"] == "artifact"]
        self.exit_code = [r["exit"].get("exit_code", 0) for r in recs if r["type"] == "exit"]

    def series(self, key: str, axis: str) -> list[tuple[int, float]]:
        return [(row[axis], row[key]) for row in self.history if key in row]

    def files(self) -> set[str]:
        return {c["path"] for a in self.artifacts for c in a["manifest"]["contents"]}


def offline_runs(folder: Path) -> list[Run]:
    return [Run(p) for p in sorted(folder.glob("wandb/offline-run-*/run-*.wandb"))]


@pytest.mark.slow
def test_wandb_offline_run_holds_the_mlflow_mapping(offline, tmp_path):
    out, folder = tmp_path / "run", tmp_path / "wb"
    assert main(["run", str(offline), "--out", str(out), "--no-progress", "--set", "tot.breadth=3",
                 "--track", "wandb", "--track-uri", str(folder)]) == 0
    (run,) = offline_runs(folder)
    assert run.info["project"] == "tiny" and run.info["display_name"] == "run" and run.info["job_type"] == "run"
    assert run.exit_code == [0]
    assert run.config["tot.breadth"] == 3 and run.config["protocol.test_limit"] == 2  # params, as values
    summary = json.loads((out / "summary.json").read_text())
    prov = summary["meta"]["provenance"]
    assert {"task=game24", "simulated=True", "backend=simulated", f"git.commit={prov['git']['commit']}"} <= run.tags
    assert run.summary["tag/run_folder"] == str(out.resolve()) and run.summary["tag/started_at"]
    assert run.summary["tag/version.numpy"] == prov["versions"]["numpy"]
    for rec in summary["methods"]:  # the per-method summary as the run summary
        assert run.summary[f"{rec['method']}/acc_any"] == pytest.approx(rec["acc_any"])
        assert run.summary[f"{rec['method']}/calls"] == pytest.approx(rec["calls"])
    for key in summary["meta"]["wall_s"]:  # every round of every method x seed run, live, stepped by its round
        done = run.series(f"progress/{key}", f"progress/{key}_round")
        assert done and [s for s, _ in done] == list(range(len(done)))
        assert done[-1][1] == max(v for _, v in done) > 0
        assert run.series(f"progress/{key}_share", f"progress/{key}_round")[-1][1] == 1.0
    stats = [json.loads(line) for line in (out / "executor_stats.jsonl").read_text().splitlines()]
    eps = run.series("throughput/episodes_per_s", "throughput/executor_run")
    assert [s for s, _ in eps] == list(range(len(stats)))
    assert [v for _, v in eps] == pytest.approx([s["episodes_per_s"] for s in stats])
    (artifact,) = run.artifacts
    assert artifact["type"] == "run-folder" and artifact["name"] == "run"
    assert {"summary.json", "table.md", "config.json", "executor_stats.jsonl", "accuracy_vs_calls.png",
            "episodes.parquet", "summary.parquet", "config.toml"} <= run.files()


@pytest.mark.slow
def test_a_failed_wandb_run_exits_failed(offline, tmp_path, monkeypatch, capsys):
    import engine.cli.run as cli_run
    from engine.errors import BackendError

    def run(data, options, prepared):
        options.on_progress("tot/0", 1, 2)
        raise BackendError("the model went away")

    monkeypatch.setattr(cli_run, "run", run)
    folder = tmp_path / "wb"
    assert main(["run", str(offline), "--out", str(tmp_path / "run"), "--no-progress", "--track", "wandb",
                 "--track-uri", str(folder)]) == 1
    assert "the model went away" in capsys.readouterr().err
    (run,) = offline_runs(folder)
    assert run.exit_code == [1] and run.series("progress/tot/0", "progress/tot/0_round") == [(0, 1.0)]


@pytest.mark.slow
def test_a_wandb_sweep_is_a_group_with_a_sweep_run(offline, tmp_path):
    out = tmp_path / "grid"
    assert main(["sweep", str(offline), "--grid", "seeds=0,1", "--out", str(out), "--no-progress", "--jobs", "2",
                 "--set", "report.plots=false", "--track", "wandb"]) == 0
    runs = offline_runs(out)
    (parent,) = [r for r in runs if r.info["job_type"] == "sweep"]
    group = (out / "wandb_parent_run").read_text()
    assert parent.info["run_id"] == parent.info["run_group"] == group and "kind=sweep" in parent.tags
    assert parent.exit_code == [0] and "sweep.parquet" in parent.files()
    children = [r for r in runs if r.info["job_type"] == "run"]
    assert len(children) == 2 and {r.info["run_group"] for r in children} == {group}
    assert {r.info["project"] for r in runs} == {"grid"}
    for child in children:
        assert {"episodes.parquet", "config.toml", "summary.json"} <= child.files() and child.exit_code == [0]


def test_wandb_takes_a_folder_not_a_server(tiny, tmp_path, capsys):
    pytest.importorskip("wandb")
    path = tiny
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--track", "wandb",
                 "--track-uri", "http://127.0.0.1:1"]) == 1
    assert "--track wandb takes a folder" in capsys.readouterr().err and not out.exists()


def test_missing_wandb_names_the_extra_and_runs_nothing(tiny, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)
    path = tiny
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--track", "wandb"]) == 1
    err = capsys.readouterr().err
    assert "wandb is not installed" in err and ".[track]" in err and not out.exists()
