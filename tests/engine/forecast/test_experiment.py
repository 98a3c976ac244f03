import json

import pyarrow.parquet as pq
import pytest

from engine.cli import main as toe_main
from engine.config import load_toml
from engine.errors import ConfigError
from engine.forecast.config import load_forecast_config
from engine.tasks import run
from engine.forecast.memtools import ProceduralStore
from engine.tasks import RunOptions

from .conftest import needs_bwrap


def _episodes(out, method=None) -> list[dict]:
    rows = pq.read_table(out / "episodes.parquet").to_pylist()
    return [r for r in rows if method is None or r["method"] == method]


def _config(pa_folder, **run):
    return {"task": "forecast", "title": "t", "data": {"path": str(pa_folder), "n_evo": 2},
            "run": {"methods": ["foredreamer", "full_text", "rag"], "max_questions": 2, **run},
            "agent": {"top_k": 1}, "llm": {"backend": "simulated"}}


@needs_bwrap
def test_simulated_run_prints_labelled_table(pa_folder, tmp_path, capsys):
    assert run(_config(pa_folder), RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "out")) == 0
    text = capsys.readouterr().out
    assert "| Market |" in text and "[simulated]" in text and "| Full Text [simulated] |" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    meta = summary["meta"]
    sports = meta["splits"]["Sports"]
    assert set(sports["evo"]) == {"s0", "s1"} and not set(sports["evo"]) & set(sports["eval"])
    # reference rows on every question; model rows on max_questions per category
    assert sum(meta["reference_all"][0]["n"].values()) == 12
    assert all(sum(r["n"].values()) == 4 for r in summary["methods"])
    assert [r["row"] for r in summary["methods"]] == ["reference"] * 2 + ["model"] * 3
    assert not summary["methods"][0]["simulated"] and summary["methods"][-1]["simulated"]
    assert meta["simulated"] and meta["backend"] == "simulated"
    evaluated = {d["qid"] for d in _episodes(tmp_path / "out", "foredreamer")}
    assert len(evaluated) == 4 and not evaluated & {q for s in meta["splits"].values() for q in s["evo"]}
    assert (tmp_path / "out" / "table.md").read_text() in text + "\n"


@needs_bwrap
@pytest.mark.slow
def test_simulated_run_with_evolution(pa_folder, tmp_path, capsys):
    cfg = _config(pa_folder, methods=["foredreamer"], evolve=True, max_questions=1)
    cfg["evolution"] = {"iterations": 2, "top_k": 2, "items_per_example": 1}
    cfg["run"]["workspace"] = str(tmp_path / "ws")
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "o")) == 0
    text = capsys.readouterr().out
    assert "ForeDreamer evolved, top-1 by validation [simulated]" in text
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    for cat in ("Economics", "Sports"):  # C.3: each category evolves from the seed guide in its own store
        evo = summary["meta"]["evolution"][cat]
        log = evo["log"]
        assert [e["track"] for e in log] == ["procedural", "textual"] and [e["iteration"] for e in log] == [0, 1]
        assert evo["store"] == f"procedural/foredreamer-seed0-{cat}"
        store = ProceduralStore(tmp_path / "o" / evo["store"])
        seed = next(iter(store.guides))
        assert log[0]["parent"] == seed
        assert all(store.manifest["guides"][g].get("parent") in (None, seed) for g in store.guides)
    # toe forecast guides RUN: lineage, archetypes and a PNG from the same run
    capsys.readouterr()
    assert toe_main(["forecast", "guides", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "## Economics" in out and "## Sports" in out and "Tool-Orchestrated Processing" in out
    report = json.loads((tmp_path / "o" / "guides.json").read_text())
    seed_rows = [g for g in report["Economics"]["guides"] if g["how"] == "seed"]
    assert len(seed_rows) == 1 and seed_rows[0]["parent"] is None
    assert (tmp_path / "o" / "guides_archetypes.png").stat().st_size > 1000



def test_missing_data_path_is_a_clear_error(tmp_path):
    cfg = _config(tmp_path / "missing")
    with pytest.raises(ConfigError, match="data.path .* does not exist .* ships no Prophet Arena data"):
        run(cfg, RunOptions(config_path=tmp_path / "x.toml"))
    with pytest.raises(ConfigError, match=r"needs a \[data\] table"):
        run({"task": "forecast"}, RunOptions(config_path=tmp_path / "x.toml"))
    with pytest.raises(ConfigError, match="run.methods must be a non-empty subset"):
        load_forecast_config({"data": {"path": "x"}, "run": {"methods": ["magic"]}})


def test_shipped_config_parses():
    from pathlib import Path

    cfg = load_forecast_config(load_toml(Path(__file__).resolve().parents[3] / "configs" / "prophet-arena.toml"))
    assert cfg.agent.turns == 2 and cfg.data.path.endswith("prophet_arena")


def test_cli_baselines(pa_folder, capsys):
    assert toe_main(["forecast", "baselines", str(pa_folder), "--metric", "all"]) == 0
    out = capsys.readouterr().out
    assert "12 unique questions" in out and "| Uniform (0.5 on every market) | 0.2500 | 0.2500 | 0.2500 |" in out
    assert toe_main(["forecast", "baselines", str(pa_folder / "nope")]) == 1
    capsys.readouterr()
    assert toe_main(["forecast", "baselines", str(pa_folder), "--metric", "all", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["questions"] == 12 == sum(js["per_category"].values())
    uniform = js["rows"][0]
    assert uniform["method"].startswith("Uniform") and uniform["brier"]["mean"] == 0.25
    assert set(uniform) == {"method", "brier", "accuracy", "market_return"}


def test_memory_baseline_rows_without_a_memguide_store(pa_folder, tmp_path, capsys):
    cfg = _config(pa_folder, methods=["mem0", "memrl", "reme", "flex"], max_questions=1)
    cfg["memory"] = {"top_k": 3}
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "out")) == 0
    text = capsys.readouterr().out
    for name in ("Mem0", "MemRL", "ReMe", "FLEX"):
        assert f"| {name} (evidence) [simulated] |" in text
    assert "0 after a cutoff dropped" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert not (tmp_path / "out" / "workspace" / "procedural").exists()  # memory-only runs seed no MemGuide store
    rows = {r["method"]: r for r in summary["methods"]}
    assert all(sum(rows[f"{n} (evidence) [simulated]"]["n"].values()) == 2 for n in ("Mem0", "MemRL", "ReMe", "FLEX"))
    for method in ("mem0", "memrl", "reme", "flex"):
        for d in _episodes(tmp_path / "out", method):
            evidence = json.loads(d["evidence"])
            assert evidence and evidence[0]["written"] and not d["failed"]


def test_subagent_budget_is_configurable_and_reaches_the_subagent(pa_folder, tmp_path):
    from engine.forecast.evolution import Runner

    cfg = load_forecast_config({"data": {"path": str(pa_folder)}, "subagent": {"max_tokens": 99, "max_chars": 1234}})
    assert (cfg.subagent.max_tokens, cfg.subagent.max_chars) == (99, 1234)
    store = type("S", (), {"limits": cfg.sandbox, "tools": {}})()
    runner = Runner(None, None, cfg.agent, tmp_path, store, subagent_tokens=cfg.subagent.max_tokens,
                    subagent_chars=cfg.subagent.max_chars)
    proc = runner.processor({"guide_name": "g", "prompt": "p", "tool_names": []}, {})
    assert (proc.max_tokens, proc.max_chars) == (99, 1234)
    with pytest.raises(ConfigError, match="subagent.max_tokens must be >= 16"):
        load_forecast_config({"data": {"path": str(pa_folder)}, "subagent": {"max_tokens": 1}})


def test_the_papers_five_memory_baselines_run_through_toe_run(pa_folder, tmp_path, capsys):
    five = {"hipporag": "HippoRAG 2", "memoryos": "MemoryOS", "amem": "A-MEM", "lightmem": "LightMem", "langmem": "LangMem"}
    cfg = _config(pa_folder, methods=list(five), max_questions=1)
    cfg["memory"] = {"top_k": 3}
    cfg["memory_baselines"] = {"extraction": "llm"}  # the simulated policy answers their prompts
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "out")) == 0
    text = capsys.readouterr().out
    label = {n: "library" if k == "langmem" else "re-impl." for k, n in five.items()}  # LangMem: its real library
    for name in five.values():
        assert f"| {name} ({label[name]}, evidence) [simulated] |" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    rows = {r["method"]: r for r in summary["methods"]}
    assert all(sum(rows[f"{n} ({label[n]}, evidence) [simulated]"]["n"].values()) == 2 for n in five.values())
    for method in five:
        for d in _episodes(tmp_path / "out", method):
            evidence = json.loads(d["evidence"])
            assert evidence and evidence[0]["written"] and evidence[0]["retrieved"] and not d["failed"]
