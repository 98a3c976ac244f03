"""The measured tables quoted in README.md and docs/ are what scripts/doc_tables.py renders from the
committed summary.json files of the shipped configs' runs (docs/results/<run>/summary.json)."""

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_quoted_tables_match_the_committed_summaries():
    stale = _script().update(check=True)
    assert stale == [], f"run .venv/bin/python scripts/doc_tables.py; stale: {stale}"


def _copied_docs(tmp_path):
    """The table script, with every document that holds a table and every committed summary copied to tmp_path."""
    dt = _script()
    for doc in {d for d, _, _ in dt.TABLES.values()}:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    results = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results", results)
    return dt, results


def test_a_changed_figure_makes_its_tables_stale(tmp_path):
    dt, results = _copied_docs(tmp_path)
    path = results / "game24" / "summary.json"
    s = json.loads(path.read_text())
    s["methods"][0]["acc_any"] += 0.01
    path.write_text(json.dumps(s))
    stale = dt.update(tmp_path, results, check=True)
    assert stale == ["README.md: game24-table", "docs/game24.md: game24-full-table",
                     "docs/baselines.md: game24-baselines-table"]
    assert dt.update(tmp_path, results) == stale  # rewrite
    assert dt.update(tmp_path, results, check=True) == []
    assert f"{100 * s['methods'][0]['acc_any']:.1f}%" in (tmp_path / "README.md").read_text()


def test_a_changed_prophet_reference_figure_makes_its_tables_stale(tmp_path):
    dt, results = _copied_docs(tmp_path)
    path = results / "prophet-arena" / "summary.json"
    s = json.loads(path.read_text())
    market = next(r for r in s["meta"]["reference_all"] if r["method"] == "Market")
    market["brier"]["Economics"] += 0.01
    path.write_text(json.dumps(s))
    assert dt.update(tmp_path, results, check=True) == ["README.md: prophet-reference-table",
                                                        "docs/forecast.md: prophet-reference-full-table"]
    dt.update(tmp_path, results)
    assert f"| Economics | {market['brier']['Economics']:.4f} |" in (tmp_path / "README.md").read_text()


def test_every_rendered_table_names_simulated_rows():
    dt = _script()
    for name, (_, run, _) in dt.TABLES.items():
        block = dt.render_block(name)
        rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| Method")
                and not line.startswith("| ---")]
        if name in dt.NO_MODEL_TABLES:  # reference rows (uniform, market prices): no model answered
            assert rows and not any("[" in r.split("|")[1] for r in rows), name
        else:
            assert rows and all("[simulated]" in r for r in rows), name
        assert dt.RUNS[run] in block
