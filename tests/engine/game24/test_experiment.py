"""A tiny end-to-end run of `toe run` for game24 on the simulated backend, and config validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import load_toml
from engine.errors import ConfigError
from engine.game24.experiment import build_stream, episodes_for, parse_config, run
from engine.game24.methods import make_method
from engine.llm.config import load_llm_config
from engine.tasks import RunOptions

REPO = Path(__file__).resolve().parents[3]


def _tiny(methods, **protocol):
    prot = {"warmup_sample": 6, "test_limit": 4, "round_size": 3}
    prot.update(protocol)
    return {"task": "game24", "methods": methods, "seeds": [0, 1], "protocol": prot,
            "llm": {"backend": "simulated"}, "report": {"plots": True, "window": 5}}


def test_tiny_end_to_end(tmp_path, capsys):
    cfg = _tiny(["tot", "toe"])
    opts = RunOptions(config_path=Path("x.toml"), out=tmp_path, progress=False)
    assert run(cfg, opts) == 0
    printed = capsys.readouterr().out
    assert "ToT+ToE [simulated]" in printed and "SIMULATED" in printed
    for name in ("episodes.parquet", "summary.json", "table.md", "accuracy_vs_calls.png", "learning_curve.png"):
        assert (tmp_path / name).is_file(), name
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["meta"]["backend"] == "simulated" and data["meta"]["simulated"] is True
    assert data["meta"]["model"] == "simulated-game24-v1"
    assert [m["method"] for m in data["methods"]] == ["tot", "toe"]
    for m in data["methods"]:
        assert m["seeds"] == [0, 1] and m["n_puzzles"] == 4 and m["backend"] == "simulated"
        assert 0.0 <= m["acc_any"] <= 1.0 and m["acc_first"] <= m["acc_any"] + 1e-12
    import pyarrow.parquet as pq

    t = pq.read_table(tmp_path / "episodes.parquet").to_pydict()
    # ToT skips the warm-up (experience-free); ToE runs warm-up + test, for each seed
    assert t["method"].count("tot") == 2 * 4 and t["method"].count("toe") == 2 * (6 + 4)
    assert set(t["backend"]) == {"simulated"}


def test_same_figures_whatever_the_round_size(tmp_path):
    b = _tiny(["tot"], round_size=7, warmup_sample=4, test_limit=3)
    c = _tiny(["tot"], round_size=1, warmup_sample=4, test_limit=3)
    for cfg, sub in ((b, "b"), (c, "c")):
        cfg.update(seeds=[3], report={"plots": False})
        run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path / sub, progress=False))
    sb = json.loads((tmp_path / "b" / "summary.json").read_text())["methods"][0]
    sc = json.loads((tmp_path / "c" / "summary.json").read_text())["methods"][0]
    for k in ("acc_any", "acc_first", "calls", "samples", "tokens"):
        assert sb[k] == sc[k], k  # plain ToT: batch composition never changes an episode


def test_stream_and_episode_seeds():
    exp = parse_config(_tiny(["tot"], warmup_sample=5, test_limit=2))
    warm, test = build_stream(exp.protocol)
    assert len(warm) == 5 and [p.rank for p in warm] == sorted(p.rank for p in warm)
    assert all(p.rank <= 900 for p in warm) and [p.rank for p in test] == [901, 902]
    eps = episodes_for(warm, test, seed=0)
    assert [e.phase for e in eps] == ["warmup"] * 5 + ["test"] * 2
    assert [e.episode_id for e in episodes_for(warm, test, seed=0, skip_warmup=True)] == [5, 6]
    assert eps[5].seed == episodes_for(warm, test, seed=0, skip_warmup=True)[0].seed
    assert eps[5].seed != episodes_for(warm, test, seed=1)[5].seed


def test_shipped_configs_parse():
    for name in ("game24.toml", "game24-local.toml"):
        cfg = load_toml(REPO / "configs" / name)
        exp = parse_config(cfg)
        assert exp.methods and exp.seeds
        assert load_llm_config(cfg).backend == ("local" if "local" in name else "simulated")
    full = parse_config(load_toml(REPO / "configs" / "game24.toml"))
    assert set(full.methods) == {"tot", "toe", "mem0", "memrl", "reme", "flex"} and len(full.seeds) == 3


def test_config_errors():
    with pytest.raises(ConfigError, match="unknown top-level key"):
        parse_config({"task": "game24", "methodz": []})
    with pytest.raises(ConfigError, match="unknown method 'tott'"):
        parse_config({"task": "game24", "methods": ["tott"]})
    with pytest.raises(ConfigError, match="more than once"):
        parse_config({"task": "game24", "methods": ["tot", "tot"]})
    with pytest.raises(ConfigError, match="seeds must be a non-empty list"):
        parse_config({"task": "game24", "seeds": []})
    with pytest.raises(ConfigError, match="overlap the test split"):
        parse_config({"task": "game24", "protocol": {"warmup_last": 950}})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({"task": "game24", "protocol": {"warmup": 3}})
    with pytest.raises(ConfigError, match="tot.breadth"):
        parse_config({"task": "game24", "tot": {"breadth": 0}})
    with pytest.raises(ConfigError, match="toe.mode"):
        make_method("toe", {"mode": "x"})
    with pytest.raises(ConfigError, match="no puzzles with ranks"):
        build_stream(parse_config({"task": "game24", "protocol": {"test_first": 5000, "test_last": 5001,
                                                                   "warmup_last": 10}}).protocol)


def test_bad_method_table_fails_before_any_run(tmp_path):
    cfg = _tiny(["tot", "toe"])
    cfg["toe"] = {"mode": "nope"}
    with pytest.raises(ConfigError, match="toe.mode"):
        run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path, progress=False))
    assert not (tmp_path / "episodes.parquet").exists()


@pytest.mark.slow
def test_toe_beats_tot_at_fewer_calls_on_the_simulated_policy(tmp_path):
    """The headline's shape (ToE Table 2) on a shortened stream: 150 warm-up, 50 test puzzles."""
    cfg = _tiny(["tot", "toe"], warmup_sample=150, test_limit=50, round_size=25)
    cfg.update(seeds=[0], report={"plots": False})
    run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path, progress=False))
    s = {m["method"]: m for m in json.loads((tmp_path / "summary.json").read_text())["methods"]}
    assert s["toe"]["acc_any"] > s["tot"]["acc_any"]
    assert s["toe"]["calls"] < 0.5 * s["tot"]["calls"]
    assert 35 <= s["tot"]["calls"] <= 65  # calibrated near ToT's published ~50 calls per puzzle
