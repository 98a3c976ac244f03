import json
from pathlib import Path

import pytest

from engine.cli import main as toe_main
from engine.config import load_toml
from engine.errors import ConfigError
from engine.finance.config import load_finance_config
from engine.finance.experiment import run
from engine.tasks import RunOptions

REPO = Path(__file__).resolve().parents[3]

TINY = {
    "task": "finance",
    "methods": ["Baseline", "Pipe", "Pipe+MemRL", "Pipe+Mem0", "Pipe+ToE", "Pipe+ToE (LLM update)"],
    "seeds": [0, 1],
    "synthetic": {"n_industries": 4, "n_days": 24, "events_per_day": 2.0, "seed": 2},
    "llm": {"backend": "simulated"},
    "plots": True,
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fin")
    assert run(TINY, RunOptions(config_path=Path("tiny.toml"), out=out, progress=False)) == 0
    return out


def test_run_writes_summary_table_plots_and_tree(tiny_run, capsys):
    s = json.loads((tiny_run / "summary.json").read_text())
    assert s["backend"] == "simulated" and s["label"] == "synthetic data, SIMULATED policy (simulated-finance-v1)"
    recs = s["records"]
    assert len(recs) == len(TINY["methods"]) * 3 * 2
    assert {(r["method"], r["horizon"], r["period"]) for r in recs} == {
        (m, h, p) for m in TINY["methods"] for h in (10, 20, 40) for p in ("Exploitation", "Overall")}
    assert all(r["backend"] == "simulated" and r["seeds"] == [0, 1] for r in recs)
    assert set(s["reliability_truth"]) == {"Pipe+ToE", "Pipe+ToE (LLM update)"}
    assert s["usage"]["Pipe+ToE"]["calls"] > s["usage"]["Pipe"]["calls"] > 0
    table = (tiny_run / "table.md").read_text()
    assert "simulated" in table and "| Pipe+ToE [simulated] |" in table and "formula-based [simulated]" in table
    for f in ("tsic_over_time.png", "tree.png", "tree.csv", "predictions.npz"):
        assert (tiny_run / f).stat().st_size > 0


def test_tree_show_prints_and_draws(tiny_run, capsys, tmp_path):
    assert toe_main(["tree", "show", str(tiny_run), "--png", str(tmp_path / "t.png"), "--horizon", "20"]) == 0
    out = capsys.readouterr().out
    assert "experience tree:" in out and "recall=" in out
    assert (tmp_path / "t.png").stat().st_size > 0
    assert toe_main(["tree", "show", str(tmp_path)]) == 1  # no tree.csv: clear error, exit 1
    assert "has no tree.csv" in capsys.readouterr().err
    assert toe_main(["tree", "show", str(tiny_run), "--horizon", "7"]) == 1


def test_config_errors():
    with pytest.raises(ConfigError, match="methods must be a non-empty subset"):
        load_finance_config({"methods": ["Pipe+Magic"]})
    with pytest.raises(ConfigError, match="unknown key"):
        load_finance_config({"toe": {"k2": 3}})
    with pytest.raises(ConfigError, match="toe.max_new must be 1"):
        load_finance_config({"toe": {"max_new": 2}})
    with pytest.raises(ConfigError, match="data.news and data.prices"):
        load_finance_config({"data": {"source": "files"}})
    with pytest.raises(ConfigError, match="evaluable trading days"):
        run({**TINY, "protocol": {"max_days": 2}}, RunOptions(config_path=Path("x"), progress=False))


def test_shipped_config_parses():
    data = load_toml(REPO / "configs" / "finance-synthetic.toml")
    cfg = load_finance_config(data)
    assert data["task"] == "finance" and data["llm"]["backend"] == "simulated"
    assert cfg.toe.k1 == 8 and cfg.toe.lam == 0.8 and cfg.toe.eta == 10 and cfg.protocol.horizons == (10, 20, 40)
    assert len(cfg.methods) == 6 and len(cfg.seeds) == 3


def test_files_source_runs(tmp_path, small_market):
    from engine.finance.data import save_market

    save_market(small_market, tmp_path / "news.parquet", tmp_path / "prices.csv")
    cfg = {"task": "finance", "methods": ["Pipe", "Pipe+ToE"], "seeds": [0], "plots": False,
           "data": {"source": "files", "news": str(tmp_path / "news.parquet"), "prices": str(tmp_path / "prices.csv")}}
    assert run(cfg, RunOptions(config_path=Path("x"), out=tmp_path / "out", progress=False)) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["data"] == "files" and s["reliability_truth"] == {}
