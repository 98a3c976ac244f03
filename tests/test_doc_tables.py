"""The measured tables quoted in README.md, docs/ and benchmarks/ are what scripts/doc_tables.py renders from
the committed summary.json files of the shipped configs' runs (docs/results/<run>/summary.json) and from the
benchmarks' own results (benchmarks/results/<topic>.json); benchmarks/RESULTS.md is generated from them too."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _script():
    return _load("doc_tables", ROOT / "scripts" / "doc_tables.py")


def test_quoted_tables_match_the_committed_summaries():
    stale = _script().update(check=True)
    assert stale == [], f"run .venv/bin/python scripts/doc_tables.py; stale: {stale}"


def _copied_docs(tmp_path):
    """The table script, every document that holds a table, RESULTS.md, the committed summaries and the
    benchmark JSON copied to tmp_path."""
    dt = _script()
    prose = {str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks" / "results").glob("*.md")}  # RESULTS.md's parts
    for doc in {d for d, _, _ in dt.TABLES.values()} | {dt.RESULTS_MD} | prose:
        (tmp_path / doc).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / doc, tmp_path / doc)
    results = tmp_path / "results"
    shutil.copytree(ROOT / "docs" / "results", results)
    bench = tmp_path / "bench-json"
    shutil.copytree(ROOT / "benchmarks" / "results", bench, ignore=shutil.ignore_patterns("*.md"))
    return dt, results, bench


def test_a_changed_figure_makes_its_tables_stale(tmp_path):
    dt, results, bench = _copied_docs(tmp_path)
    path = results / "game24" / "summary.json"
    s = json.loads(path.read_text())
    s["methods"][0]["acc_any"] += 0.01
    path.write_text(json.dumps(s))
    stale = dt.update(tmp_path, results, check=True, bench_results=bench)
    assert stale == ["README.md: game24-table", "docs/game24.md: game24-full-table",
                     "docs/baselines.md: game24-baselines-table"]
    assert dt.update(tmp_path, results, bench_results=bench) == stale  # rewrite
    assert dt.update(tmp_path, results, check=True, bench_results=bench) == []
    assert f"{100 * s['methods'][0]['acc_any']:.1f}%" in (tmp_path / "README.md").read_text()


def test_a_changed_prophet_reference_figure_makes_its_tables_stale(tmp_path):
    dt, results, bench = _copied_docs(tmp_path)
    path = results / "prophet-arena" / "summary.json"
    s = json.loads(path.read_text())
    market = next(r for r in s["meta"]["reference_all"] if r["method"] == "Market")
    market["brier"]["Economics"] += 0.01
    path.write_text(json.dumps(s))
    assert dt.update(tmp_path, results, check=True, bench_results=bench) == [
        "docs/commands.md: prophet-reference-table", "docs/forecast.md: prophet-reference-full-table"]
    dt.update(tmp_path, results, bench_results=bench)
    assert f"| Economics | {market['brier']['Economics']:.4f} |" in (tmp_path / "docs/commands.md").read_text()


def test_a_changed_benchmark_figure_makes_the_speed_tables_and_results_md_stale(tmp_path):
    dt, results, bench = _copied_docs(tmp_path)
    path = bench / "index.json"
    data = json.loads(path.read_text())
    node = next(r for r in data["runs"]["n=100000,dim=384"][-1]["figures"]["rows"] if r["method"].startswith("NodeIndex (M="))
    node["p50_ms"] = 0.777
    path.write_text(json.dumps(data))
    stale = dt.update(tmp_path, results, check=True, bench_results=bench)
    assert stale == ["benchmarks/results/index.md: bench-index-100k-table", "docs/commands.md: speed-table",
                     "docs/retrieval.md: index-summary-table", dt.RESULTS_MD]
    dt.update(tmp_path, results, bench_results=bench)
    assert "p50 0.78 ms at recall@8" in (tmp_path / "docs/commands.md").read_text()
    assert "| 0.777 |" in (tmp_path / dt.RESULTS_MD).read_text()
    assert dt.update(tmp_path, results, check=True, bench_results=bench) == []


def test_a_hand_edit_of_results_md_is_stale(tmp_path):
    dt, results, bench = _copied_docs(tmp_path)
    p = tmp_path / dt.RESULTS_MD
    text = p.read_text()
    figure = re.search(r"formula_update`\) \| \d+\.\d M \|", text).group(0)  # what the store benchmark last measured
    p.write_text(text.replace(figure, "formula_update`) | 999.9 M |"))
    assert dt.update(tmp_path, results, check=True, bench_results=bench) == [dt.RESULTS_MD]


def test_a_suite_writes_json_that_the_tables_render(tmp_path, monkeypatch):
    """The writer the benchmarks call: one run per key (or appended), the command, machine and date kept;
    a rerun of the same key replaces its figures and the rendered table follows."""
    rs = _load("bench_results", ROOT / "benchmarks" / "_results.py")
    dt, results, bench = _copied_docs(tmp_path)
    monkeypatch.setenv("TOE_BENCH_SIZES", "2000")
    old = json.loads((bench / "sandbox.json").read_text())
    path = rs.record("sandbox", "trivial-call", {"variant": "benchmark run", "sandboxed_s": 0.1234, "bare_s": 0.02,
                                                 "ratio": 6.17}, results=bench)
    data = json.loads(path.read_text())
    run = data["runs"]["trivial-call"]
    assert len(run) == 1 and run[0]["figures"]["sandboxed_s"] == 0.1234
    assert "TOE_BENCH_SIZES=2000" in run[0]["command"] and " -m pytest" in run[0]["command"]
    assert run[0]["machine"]["cores"] == os.cpu_count() and run[0]["date"].endswith("Z")
    assert data["runs"]["ab-before"] == old["runs"]["ab-before"]  # other keys untouched
    assert dt.update(tmp_path, results, check=True, bench_results=bench) == [
        "benchmarks/results/sandbox.md: bench-sandbox-table", dt.RESULTS_MD]
    dt.update(tmp_path, results, bench_results=bench)
    assert "| benchmark run | 123 ms | 6.17x |" in (tmp_path / "benchmarks/results/sandbox.md").read_text()
    rs.record("llm", "overhead", {"overhead": 0.5}, keep="all", results=bench)
    assert len(json.loads((bench / "llm.json").read_text())["runs"]["overhead"]) == 4


def test_the_writer_refuses_bad_input_and_writes_nothing(tmp_path):
    rs = _load("bench_results", ROOT / "benchmarks" / "_results.py")
    with pytest.raises(ValueError, match="keep must be 'last' or 'all', got 'first'"):
        rs.record("x", "k", {"a": 1}, keep="first", results=tmp_path)
    with pytest.raises(ValueError, match="figures of x/k must be a non-empty dict"):
        rs.record("x", "k", {}, results=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_section_writer_replaces_its_sections_and_keeps_the_others(tmp_path):
    rs = _load("bench_results", ROOT / "benchmarks" / "_results.py")
    assert rs.read_sections("scaling", results=tmp_path) == {}
    rs.write_sections("scaling", results=tmp_path, rows=[{"w": 1}], stores=[{"n": 2}])
    rs.write_sections("scaling", results=tmp_path, rows=[{"w": 32}])
    assert rs.read_sections("scaling", results=tmp_path) == {"rows": [{"w": 32}], "stores": [{"n": 2}]}
    with pytest.raises(ValueError, match="needs at least one section"):
        rs.write_sections("scaling", results=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scaling.json"]


def test_every_rendered_table_names_simulated_rows():
    dt = _script()
    for name, (_, source, _) in dt.TABLES.items():
        block = dt.render_block(name)
        if source.startswith("bench:"):  # figures from the simulated policy say so in the block
            bench = dt.bench
            topics = [p.stem for p in dt.BENCH_RESULTS.glob("*.json")] if source == "bench:*" else [source[6:]]
            sim = any(r["figures"].get("simulated") for t in topics
                      for key in (bench.KEYS.get(name) or dt.load_bench(t)["runs"]) if key in dt.load_bench(t)["runs"]
                      for r in dt.load_bench(t)["runs"][key])
            assert not sim or "SIMULATED" in block or "simulated" in block, name
            assert "Rendered by `benchmarks/build_results.py`" in block, name
            continue
        rows = [line for line in block.splitlines() if line.startswith("| ") and not line.startswith("| Method")
                and not line.startswith("| ---")]
        if name in dt.NO_MODEL_TABLES:  # reference rows (uniform, market prices): no model answered
            assert rows and not any("[" in r.split("|")[1] for r in rows), name
        else:
            model = [r for r in rows if r.split("|")[1].strip() not in dt.REFERENCE_ROWS]
            assert model, name
            if dt.load_summary(source)["meta"].get("simulated", True):
                assert all("[simulated]" in r for r in model), name
            else:  # a real model's rows name the backend and model that answered, never "simulated"
                assert all(re.search(r"\[[a-z_]+:[^\]]+\]", r.split("|")[1]) and "simulated" not in r.lower()
                           for r in model), name
        assert dt.RUNS[source] in block


def _timeless(x):
    """A summary without its timings (wall, latency: every key ending in _s) and its provenance (command,
    commit, versions, machine, times: what made the run, not what it found)."""
    if isinstance(x, dict):
        return {k: _timeless(v) for k, v in x.items() if not k.endswith(("_s", "_s_std")) and k != "provenance"}
    if isinstance(x, list):
        return [_timeless(v) for v in x]
    return x


# the shipped runs that take seconds, not minutes (game24 ~6 min, finance ~3 min, game24-filtered ~1.5 min)
SMALL_RUNS = ["futurex", "prophet-arena", "forecast-baselines"]
PA_DATA = ROOT.parent / "shared" / "data" / "forecast" / "prophet_arena"


@pytest.mark.slow
def test_the_shipped_small_runs_reproduce_their_committed_summaries(tmp_path):
    """Rerun each small shipped config's simulated run exactly as its table's command says and compare the
    summary with the committed one (timings excluded): a change in the code that moves a quoted figure fails."""
    dt = _script()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran = []
    for run in SMALL_RUNS:
        cmd = dt.RUNS[run]
        if "prophet-arena" in cmd and not PA_DATA.is_dir():
            continue  # the Prophet Arena files are not part of the repository
        cmd = cmd.replace(".venv/bin/toe", f"{sys.executable} -m engine").replace("--out runs/", f"--out {tmp_path}/")
        proc = subprocess.run(cmd + " --no-progress", shell=True, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"{run}: {proc.stderr[-2000:]}"
        out = tmp_path / cmd.split(f"--out {tmp_path}/")[1].split()[0]
        got = json.loads((out / "summary.json").read_text())
        want = json.loads((ROOT / "docs" / "results" / run / "summary.json").read_text())
        assert _timeless(got) == _timeless(want), f"{run}: rerun differs from docs/results/{run}/summary.json"
        ran.append(run)
    assert "futurex" in ran


# docs exempt from the check (none)
VENV_PENDING: set[str] = set()


def test_documented_commands_use_the_virtual_environment():
    """Every ``toe`` and ``python`` command line in a bash block of the README and docs/ is the venv's."""
    import re

    bad = []
    for doc in [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")):
        if doc.name in VENV_PENDING:
            continue
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"^ *```(?:bash|sh)\n(.*?)^ *```", text, re.S | re.M):
            for line in m.group(1).splitlines():
                if re.match(r"^\s*(?:[A-Z_]+=\S+\s+)*(toe|python3?)\s", line) or re.search(r"\$\(python3? ", line):
                    bad.append(f"{doc.name}: {line.strip()}")
    assert bad == [], "use .venv/bin/toe and .venv/bin/python:\n" + "\n".join(bad)
