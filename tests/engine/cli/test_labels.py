"""Labels name what answered: the simulated policy everywhere it answered, a replay as the backend that recorded it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.llm.base import MeteredBackend, Request, answered_by
from engine.llm.replay import ReplayBackend

ROOT = Path(__file__).resolve().parents[3]


def _game24(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "g.toml"
    cfg.write_text('task = "game24"\ntitle = "a title claiming real SmolLM2-135M"\nmethods = ["tot", "toe"]\n'
                   "seeds = [0]\n[protocol]\nwarmup_last = 0\ntest_limit = 3\nround_size = 3\n"
                   "[report]\nplots = false\n" + extra)
    return cfg


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def test_answered_by_sees_through_meter_and_replay(tmp_path):
    from engine.llm.factory import make_backend
    from engine.llm.config import load_llm_config

    trace = tmp_path / "t.arrow"
    rec = make_backend(load_llm_config({"backend": "replay", "replay": {"path": str(trace), "mode": "passthrough"}}),
                       policy="engine.game24.simulated_policy:policy_for")
    rec.generate([Request(prompt="Input: 4 6\n", n=1, max_tokens=8)])
    strict = ReplayBackend(trace)
    assert strict.name == "replay"
    assert answered_by(MeteredBackend(strict)) == ("simulated", "simulated-game24-v1")
    assert MeteredBackend(strict).answered_by == ("simulated", "simulated-game24-v1")


def test_game24_replay_of_a_simulated_trace_is_labelled_simulated(tmp_path, capsys):
    trace = tmp_path / "trace.arrow"
    cfg = _game24(tmp_path, f'[llm]\nbackend = "replay"\nreplay_path = "{trace}"\nreplay_mode = "passthrough"\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "rec"), "--no-progress"]) == 0
    assert main(["run", str(cfg), "--out", str(tmp_path / "rep"), "--no-progress",
                 "--set", "llm.replay.mode=strict"]) == 0  # every answer from the trace, none computed
    capsys.readouterr()
    for sub in ("rec", "rep"):
        s = _summary(tmp_path / sub)
        assert s["meta"]["simulated"] is True and s["meta"]["backend"] == "simulated"
        assert s["meta"]["configured_backend"] == "replay"
        assert all(m["simulated"] is True and m["backend"] == "simulated" for m in s["methods"])
        table = (tmp_path / sub / "table.md").read_text()
        rows = [line for line in table.splitlines() if line.startswith("| ToT")]
        assert len(rows) == 2 and all("[simulated]" in r for r in rows)
        assert "SIMULATED" in table
    acc = lambda sub: [(m["method"], m["acc_any"], m["calls"]) for m in _summary(tmp_path / sub)["methods"]]
    assert acc("rec") == acc("rep")  # the replay reproduces the recorded figures


def test_game24_heading_is_not_the_config_title(tmp_path, capsys):
    cfg = _game24(tmp_path)
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    table = (tmp_path / "o" / "table.md").read_text()
    assert "SmolLM2" not in table and "simulated policy (simulated-game24-v1)" in table.splitlines()[0]
    assert "ranks 901-1000, 3 puzzles" in table.splitlines()[0]


def test_futurex_simulated_heading_and_rows(tmp_path, capsys):
    out = tmp_path / "fx"
    assert main(["run", str(ROOT / "configs/futurex.toml"), "--out", str(out), "--no-progress",
                 "--set", "llm.backend=simulated", "--set", 'run.methods=["full_text"]']) == 0
    text = (out / "table.md").read_text()
    first = text.splitlines()[0]
    assert "SIMULATED" in first and "SmolLM2" not in first
    model_rows = [line for line in text.splitlines() if line.startswith("| Full Text")]
    assert model_rows and all("[simulated]" in r for r in model_rows)
    s = _summary(out)["meta"]
    assert s["simulated"] is True and s["backend"] == "simulated"


def test_finance_rows_are_tagged(tmp_path, capsys):
    cfg = tmp_path / "f.toml"
    cfg.write_text('task = "finance"\nmethods = ["Baseline", "Pipe+ToE"]\nseeds = [0]\nplots = false\n'
                   "[synthetic]\nn_days = 60\n[protocol]\nmax_days = 5\n")
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"]) == 0
    text = (tmp_path / "o" / "table.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| Baseline") or line.startswith("| Pipe")]
    assert rows and all("[simulated]" in r for r in rows)
    assert _summary(tmp_path / "o")["meta"]["simulated"] is True
