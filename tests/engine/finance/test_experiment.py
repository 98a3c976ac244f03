import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import main as toe_main
from engine.config import load_toml
from engine.errors import ConfigError
from engine.finance.config import load_finance_config
from engine.tasks import run
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


def test_run_writes_summary_table_plots_and_trees(tiny_run):
    s = json.loads((tiny_run / "summary.json").read_text())
    meta, recs = s["meta"], s["methods"]
    assert meta["task"] == "finance" and meta["backend"] == "simulated" and meta["simulated"]
    assert meta["label"] == "synthetic data, SIMULATED policy (simulated-finance-v1)"
    assert len(recs) == len(TINY["methods"]) * 3 * 2
    assert {(r["method"], r["horizon"], r["period"]) for r in recs} == {
        (m, h, p) for m in TINY["methods"] for h in (10, 20, 40) for p in ("Exploitation", "Overall")}
    assert all(r["backend"] == "simulated" and r["simulated"] and r["seeds"] == [0, 1] for r in recs)
    assert set(meta["reliability_truth"]) == {"Pipe+ToE", "Pipe+ToE (LLM update)"}
    assert meta["usage"]["Pipe+ToE"]["prompts_rerank"] > 0 and meta["usage"]["Pipe"]["prompts_rerank"] == 0
    assert meta["usage"]["Pipe+ToE"]["prompts_predict"] == meta["usage"]["Pipe"]["prompts_predict"] > 0
    assert meta["trees"]["Pipe+ToE"] == {"0": "tree_formula_seed0", "1": "tree_formula_seed1"}
    table = (tiny_run / "table.md").read_text()
    assert "simulated" in table and "| Pipe+ToE [simulated] |" in table and "formula-based [simulated]" in table
    assert "Relative tsIC improvement over Pipe" in table and "| Pipe+ToE [simulated] | " in table
    assert meta["news_pairs_dropped"] == 0 and meta["pretest"] is None
    for f in ("tsic_over_time.png", "tsic_bars.png", "tree.png", "predictions.npz", "episodes.parquet", "config.toml"):
        assert (tiny_run / f).stat().st_size > 0


def test_store_show_and_export_read_the_tree_a_run_leaves(tiny_run, capsys, tmp_path):
    tree = tiny_run / "tree_formula_seed0"
    assert toe_main(["store", "show", str(tree), "--tree", "--png", str(tmp_path / "t.png"), "--horizon", "20"]) == 0
    out = capsys.readouterr().out
    assert "active paths" in out and "recall=" in out and "ledger" in out
    assert (tmp_path / "t.png").stat().st_size > 0
    assert toe_main(["store", "export", str(tree), str(tmp_path / "paths.csv")]) == 0
    header = (tmp_path / "paths.csv").read_text().splitlines()[0]
    assert header.startswith('"industry","factor","analysis_direction","q_h10"')
    assert toe_main(["store", "show", str(tree), "--horizon", "7"]) == 1
    assert "--horizon must be one of" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # `toe tree` is folded into `toe store`
        toe_main(["tree", "show", str(tiny_run)])


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
    assert len(cfg.methods) == 7 and len(cfg.seeds) == 3 and not cfg.protocol.checkpoint
    assert "Pipe+ToE (no retrieval)" in cfg.methods  # the labelled ablation next to Pipe+ToE
    assert data["embed"]["backend"] == "minilm" and data["embed"]["runtime"] == "numpy"  # lam is a cosine: semantic


def test_files_source_runs(tmp_path, small_market):
    from engine.finance.data import save_market

    save_market(small_market, tmp_path / "news.parquet", tmp_path / "prices.csv")
    cfg = {"task": "finance", "methods": ["Pipe", "Pipe+ToE"], "seeds": [0], "plots": False,
           "data": {"source": "files", "news": str(tmp_path / "news.parquet"), "prices": str(tmp_path / "prices.csv")}}
    assert run(cfg, RunOptions(config_path=Path("x"), out=tmp_path / "out", progress=False)) == 0
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["meta"]["data"] == "files" and s["meta"]["reliability_truth"] == {}


RESUMABLE = """task = "finance"
methods = ["Pipe", "Pipe+ToE (LLM update)", "Pipe+ToE"]
seeds = [0]
plots = false
[synthetic]
n_industries = 4
n_days = 110
events_per_day = 2.0
seed = 5
[protocol]
checkpoint = true
[llm]
backend = "simulated"
"""


def _records(out: Path) -> list[dict]:
    return json.loads((out / "summary.json").read_text())["methods"]


def test_killed_driver_resumes_to_the_uninterrupted_run(tmp_path):
    cfg = tmp_path / "fin.toml"
    cfg.write_text(RESUMABLE)
    want = tmp_path / "want"
    assert toe_main(["run", str(cfg), "--out", str(want), "--no-progress"]) == 0
    out = tmp_path / "got"
    cmd = [sys.executable, "-m", "engine", "run", str(cfg), "--out", str(out), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    latest = out / "checkpoint" / "Pipe+ToE (LLM update)-seed0" / "LATEST"
    deadline = time.time() + 120
    try:
        while time.time() < deadline:  # kill inside the second run, a few days in
            if latest.is_file() and json.loads(latest.read_text())["dir"] >= "ckpt-000005":
                break
            assert proc.poll() is None, "driver ended before it was killed: " + proc.stdout.read()
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert not (out / "summary.json").exists()
    done = int(json.loads(latest.read_text())["dir"].split("-")[1])
    assert 5 <= done < 70  # mid-run: the stream has 70 days
    assert toe_main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0  # same command: resumes
    assert _records(out) == _records(want)
    stats = [json.loads(line) for line in (out / "executor_stats.jsonl").read_text().splitlines()]
    resumed = [s for s in stats if s["run_key"] == "Pipe+ToE (LLM update)-seed0"][-1]
    assert resumed["resumed_at_round"] >= done
