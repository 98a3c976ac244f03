"""``toe run``: one validation of every section and override for every task, --dry-run, overwrite protection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = sorted(p.name for p in (ROOT / "configs").glob("*.toml"))


def _cfg_args(name: str, data_dir: Path | None) -> list[str]:
    args = [str(ROOT / "configs" / name)]
    if name == "prophet-arena.toml":
        args += ["--set", f"data.path={json.dumps(str(data_dir))}"]
    return args


@pytest.mark.parametrize("name", CONFIGS)
def test_dry_run_every_shipped_config(name, pa_data, tmp_path, capsys):
    assert main(["run", *_cfg_args(name, pa_data), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for key in ("task:", "methods:", "seeds:", "episodes:", "backend:", "model:", "executor:", "workers:",
                "num_gpus_per_worker:", "checkpoint:"):
        assert key in out
    assert "dry run: config valid, nothing started" in out
    assert not (tmp_path / "o").exists()  # nothing written


@pytest.mark.parametrize("name", CONFIGS)
def test_cluster_section_accepted_and_checked_in_every_task(name, pa_data, capsys):
    extra = ["--executor", "ray", "--workers", "2"]
    assert main(["run", *_cfg_args(name, pa_data), *extra, "--set", "cluster.num_gpus_per_worker=1",
                 "--dry-run"]) == 0
    if extra:
        assert "num_gpus_per_worker:  1.0" in capsys.readouterr().out
    assert main(["run", *_cfg_args(name, pa_data), "--set", "cluster.bogus=1", "--dry-run"]) == 1
    assert "unknown key(s) 'bogus' in [cluster]" in capsys.readouterr().err


@pytest.mark.parametrize("name", CONFIGS)
def test_unknown_top_level_key_fails_in_every_task(name, pa_data, capsys):
    assert main(["run", *_cfg_args(name, pa_data), "--set", "bogus.key=1"]) == 1  # not only with --dry-run
    err = capsys.readouterr().err
    assert "unknown top-level key(s) 'bogus'" in err and "valid keys:" in err


@pytest.mark.parametrize("override, match", [
    ("llm.backend=nope", "llm.backend must be one of"),
    ("llm.bogus=1", "unknown key(s) 'bogus' in [llm]"),
    ("embed.bogus=1", "unknown key(s) 'bogus' in [embed]"),
    ("cluster.num_cpus_per_worker=-1", "cluster.num_cpus_per_worker must be >= 0"),
    ("protocol.round_size=0", "protocol.round_size must be >= 1"),
    ("methods=[\"nope\"]", "unknown method 'nope'"),
    ("title=3", "title must be a string"),
])
def test_dry_run_rejects_bad_values(override, match, capsys):
    assert main(["run", str(ROOT / "configs/game24.toml"), "--set", override, "--dry-run"]) == 1
    assert match in capsys.readouterr().err


def test_dry_run_rejects_bad_executor_options(capsys):
    cfg = str(ROOT / "configs/game24.toml")
    assert main(["run", cfg, "--workers", "2", "--dry-run"]) == 1
    assert "local executor runs one worker" in capsys.readouterr().err
    assert main(["run", cfg, "--address", "10.0.0.1:6379", "--dry-run"]) == 1
    assert "needs --executor ray" in capsys.readouterr().err
    assert main(["run", str(ROOT / "configs/finance-synthetic.toml"), "--workers", "2", "--dry-run"]) == 1
    assert "local executor runs one worker" in capsys.readouterr().err


def test_dry_run_plan_follows_overrides(capsys):
    assert main(["run", str(ROOT / "configs/game24.toml"), "--set", 'methods=["tot","toe"]', "--set", "seeds=[4]",
                 "--set", "protocol.test_limit=7", "--set", "protocol.warmup_sample=10",
                 "--set", "protocol.checkpoint=true", "--out", "runs/x", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "methods:              tot, toe" in out and "seeds:                4" in out
    assert "test puzzles 7" in out and "tot 7 + toe 17" in out and "episodes in all 24" in out
    assert "checkpoint:           runs/x/checkpoint" in out


def test_dry_run_starts_neither_ray_nor_a_model(tmp_path):
    code = ("import sys; from engine.cli import main; "
            "rc = main(['run', 'configs/game24.toml', '--executor', 'ray', '--workers', '3', "
            "'--set', 'llm.backend=vllm', '--set', 'llm.model=/models/M', '--dry-run']); "
            "bad = [m for m in ('ray', 'vllm', 'torch', 'xllamacpp') if m in sys.modules]; "
            "print('LOADED', bad); sys.exit(rc or (1 if bad else 0))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "LOADED []" in r.stdout and "backend:              vllm" in r.stdout


def _tiny_game24(tmp_path: Path) -> Path:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text('task = "game24"\nmethods = ["tot"]\nseeds = [0]\n'
                   "[protocol]\nwarmup_last = 0\ntest_limit = 2\nround_size = 2\n[report]\nplots = false\n")
    return cfg


def test_finished_run_folder_is_not_overwritten(tmp_path, capsys):
    cfg = _tiny_game24(tmp_path)
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    before = (out / "summary.json").read_bytes()
    (out / "table.md").write_text("kept")
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "already holds a finished run" in err and "--overwrite" in err
    assert (out / "table.md").read_text() == "kept" and (out / "summary.json").read_bytes() == before
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--overwrite"]) == 0
    assert (out / "table.md").read_text() != "kept"


def test_default_run_folder_is_protected_too(tmp_path, monkeypatch, capsys):
    cfg = _tiny_game24(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(cfg), "--no-progress"]) == 0
    assert (tmp_path / "runs" / "tiny" / "summary.json").is_file()
    assert main(["run", str(cfg), "--no-progress"]) == 1
    assert "runs/tiny" in capsys.readouterr().err


def test_checkpointed_run_resumes_into_its_folder(tmp_path):
    cfg = _tiny_game24(tmp_path)
    out = tmp_path / "run"
    args = ["run", str(cfg), "--out", str(out), "--no-progress", "--set", "protocol.checkpoint=true"]
    assert main(args) == 0
    first = json.loads((out / "summary.json").read_text())["methods"]
    assert main(args) == 0  # resumes from OUT/checkpoint: same figures, nothing rerun
    assert json.loads((out / "summary.json").read_text())["methods"][0]["acc_any"] == first[0]["acc_any"]


@pytest.mark.parametrize("name, override, message", [
    ("game24.toml", "seeds=[99999999999999999999]", "seeds must lie in [0, 2**32), got 99999999999999999999"),
    ("game24.toml", "seeds=[-1]", "seeds must lie in [0, 2**32), got -1"),
    ("finance-synthetic.toml", "seeds=[4294967296]", "seeds must lie in [0, 2**32)"),
    ("generic-example.toml", "seeds=[3, 3]", "seeds must be distinct"),
    ("futurex.toml", "llm.seed=-5", "llm.seed must lie in [0, 2**32), got -5"),
    ("game24.toml", "tot.n_evaluate=1000000000", "tot.n_evaluate must be in [1, 100], got 1000000000"),
    ("game24.toml", "tot.breadth=0", "tot.breadth must be in [1, 100], got 0"),
])
def test_dry_run_refuses_what_would_fail_after_the_work(name, override, message, capsys, tmp_path):
    """A value NumPy or Arrow cannot hold (a seed beyond int64 failed writing episodes.parquet after the whole
    run) or a work multiplier that would never finish is refused before anything starts."""
    assert main(["run", str(ROOT / "configs" / name), "--set", override, "--out", str(tmp_path / "o"),
                 "--dry-run"]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
