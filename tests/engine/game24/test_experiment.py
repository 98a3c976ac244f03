"""A tiny end-to-end run of `toe run` for game24 on the simulated backend, and config validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.config import load_toml
from engine.errors import ConfigError
from engine.game24.experiment import build_stream, episodes_for, parse_config
from engine.tasks import run
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
    assert "ToT+ToE (supply) [simulated]" in printed and "SIMULATED" in printed
    assert "ToE modes: supply" in printed and "value cache per episode" in printed
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
    assert set(full.methods) == {"tot", "toe-supply", "toe-guide", "mem0", "memrl", "reme", "flex"}
    assert len(full.seeds) == 3


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


def _records(path):
    import pyarrow.parquet as pq

    return pq.read_table(path / "episodes.parquet").to_pylist()


def test_both_toe_modes_are_labelled_rows(tmp_path):
    cfg = _tiny(["tot", "toe-supply", "toe-guide"], warmup_sample=4, test_limit=3)
    cfg.update(seeds=[0], report={"plots": False}, toe={"mode": "guide"})  # the suffix wins over [toe] mode
    run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path, progress=False))
    data = json.loads((tmp_path / "summary.json").read_text())
    modes = {m["method"]: m.get("toe_mode") for m in data["methods"]}
    assert modes == {"tot": None, "toe-supply": "supply", "toe-guide": "guide"}
    table = (tmp_path / "table.md").read_text()
    assert "| ToT+ToE (supply) [simulated] |" in table and "| ToT+ToE (guide) [simulated] |" in table
    guide = [r for r in _records(tmp_path) if r["method"] == "toe-guide"]
    assert guide and not any(r["by_experience"] for r in guide)  # guide never completes a branch itself
    with pytest.raises(ConfigError, match="toe.mode"):
        make_method("toe", {"mode": "x"})


def test_drop_invalid_steps_is_a_labelled_variant(tmp_path):
    cfg = _tiny(["tot"], warmup_sample=0, test_limit=2)
    cfg.update(seeds=[0], report={"plots": False}, tot={"drop_invalid_steps": True})
    run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path, progress=False))
    table = (tmp_path / "table.md").read_text()
    assert "| ToT (Yao et al. 2023) [invalid steps dropped] [simulated] |" in table
    assert "drop_invalid_steps" in table
    meta = json.loads((tmp_path / "summary.json").read_text())["meta"]
    assert meta["tot"]["drop_invalid_steps"] is True and meta["tot"]["value_cache"] == "episode"
    with pytest.raises(ConfigError, match="tot.value_cache must be one of episode, run"):
        parse_config({"task": "game24", "tot": {"value_cache": "global"}})


def test_warmup_does_not_change_tot_test_records(tmp_path):
    """Seeds come from (run seed, puzzle rank, phase): the warm-up before ToT's test episodes changes nothing."""
    drop = {"episode_id", "wall_s", "llm_latency_s"}
    got = []
    for sub, warm in (("a", 7), ("b", 0)):
        cfg = _tiny(["tot"], warmup_sample=warm, test_limit=4)
        cfg.update(seeds=[2], report={"plots": False})
        run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path / sub, progress=False))
        got.append([{k: v for k, v in r.items() if k not in drop} for r in _records(tmp_path / sub)])
    assert got[0] == got[1] and len(got[0]) == 4


def test_every_method_meets_the_same_draws_on_a_test_item():
    from engine.game24.tot import ToTConfig

    warm, test = build_stream(parse_config(_tiny(["tot"], warmup_sample=5, test_limit=3)).protocol)
    seen = {}
    for name in ("tot", "toe", "mem0"):
        eps = episodes_for(warm, test, seed=4, skip_warmup=name == "tot")
        seen[name] = {e.payload.rank: e.seed for e in eps if e.phase == "test"}
    assert seen["tot"] == seen["toe"] == seen["mem0"] and len(set(seen["tot"].values())) == 3
    # the first request of a test episode (before any experience can differ) is the same for every method
    firsts = {}
    for name in ("tot", "toe"):
        method = make_method(name, None, ToTConfig())
        llm = _FirstRequest()
        ep = [e for e in episodes_for(warm, test, seed=4) if e.phase == "test"][:1]
        method.run_episodes(method.snapshot(), ep, llm)
        firsts[name] = llm.first
    assert firsts["tot"] == firsts["toe"]


class _FirstRequest:
    """The simulated backend, remembering the first request's prompt and seed."""

    name = "simulated"
    answers_any_prompt = False  # the simulated backend's capability

    def __init__(self):
        from engine.game24.simulated_policy import simulated_backend

        self.inner, self.first, self.model = simulated_backend(), None, "sim"

    def generate(self, requests):
        if self.first is None:
            self.first = (requests[0].prompt, requests[0].seed)
        return self.inner.generate(requests)
