"""Figures quoted in prose (not in a rendered table) are what their command prints today."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_simulated_policys_calibration_in_docs_llm_md():
    doc = (ROOT / "docs/llm.md").read_text()
    cmd = re.search(r"\.venv/bin/python (scripts/llm_calibrate_sim\.py [^\n]+)", doc).group(1).split()
    out = subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    seeds = [round(100 * float(x)) for x in re.findall(r"offset \d+: any=([0-9.]+)", out)]
    total = re.search(r"any-of-b acc=([0-9.]+) first acc=([0-9.]+) calls/puzzle=([0-9.]+)", out)
    any_, first, calls = float(total.group(1)), float(total.group(2)), total.group(3)
    assert f"**{100 * any_:.1f}% accuracy (any of b; {100 * first:.1f}% first output), {calls} LLM calls per puzzle**" \
        in " ".join(doc.split())
    assert f"Per seed: {', '.join(map(str, seeds))}%." in doc


def test_the_precomputed_store_figure_in_docs_game24_md(tmp_path):
    import json

    from engine.cli import main

    doc = " ".join((ROOT / "docs/game24.md").read_text().split())
    warm = tmp_path / "warmup.csv"
    warm.write_text("".join((ROOT / "engine/data/game24/24.csv").read_text().splitlines(keepends=True)[:901]))
    assert main(["game24", "precompute", "--puzzles", str(warm), "--out", str(tmp_path / "pre")]) == 0
    assert main(["run", str(ROOT / "configs/game24.toml"), "--out", str(tmp_path / "run"), "--no-progress",
                 "--set", 'methods=["toe"]', "--set", "seeds=[0]", "--set", "protocol.warmup_sample=0",
                 "--set", "protocol.warmup_last=0", "--set", f"toe.precomputed={tmp_path / 'pre'}",
                 "--set", "report.plots=false"]) == 0
    row = json.loads((tmp_path / "run" / "summary.json").read_text())["methods"][0]
    assert f"ToT+ToE {100 * row['acc_any']:.1f}% at {row['calls']:.1f} calls per test puzzle" in doc
