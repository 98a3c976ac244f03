"""The generic task: every memory method on the shipped example; FLEX's library continued across runs; checkers."""

import json

import pyarrow.parquet as pq
import pytest

from engine.config import load_toml
from engine.errors import ConfigError, InputError
from engine.flex.library import ExperienceLibrary
from engine.generic.checkers import CheckerConfig, make_checker
from engine.generic.data import example_problems, load_problems, write_problems
from engine.tasks import RunOptions, run

SHIPPED = load_toml("configs/generic-example.toml")


def _run(config, out, **over):
    cfg = json.loads(json.dumps(config))
    for section, values in over.items():
        cfg[section] = {**cfg.get(section, {}), **values} if isinstance(values, dict) else values
    assert run(cfg, RunOptions(config_path=out / "c.toml", out=out, progress=False)) == 0
    return pq.read_table(out / "episodes.parquet").to_pylist(), json.loads((out / "summary.json").read_text())


def test_every_memory_method_runs_on_the_shipped_example(tmp_path):
    records, summary = _run(SHIPPED, tmp_path / "all", data={"limit": 20}, report={"plots": False})
    rows = {r["method"]: r for r in summary["methods"]}
    assert list(rows) == ["plain", "flex", "mem0", "memrl", "reme"]
    assert all(r["simulated"] and r["backend"] == "simulated" for r in rows.values())
    assert rows["plain"]["experience_tokens"] == 0
    for m in ("flex", "mem0", "memrl", "reme"):  # each memory wrote, retrieved and filled prompts
        recs = [r for r in records if r["method"] == m]
        assert len(recs) == 20 and any(r["n_retrieved"] > 0 for r in recs), m
        assert rows[m]["experience_tokens"] > 0, m
        assert max(r["n_retrieved"] for r in recs) <= 3  # [memory] top_k
    assert rows["flex"]["flex"][0]["records"] == 20
    assert set(rows["flex"]["tracking"]) >= {"window_rates", "plateau_at", "success_rate_last_window"}


def test_a_run_a_restart_and_a_second_run_continue_one_library(tmp_path):
    lib = tmp_path / "flex.jsonl"
    probs = example_problems(40)
    write_problems(probs[:20], tmp_path / "a.jsonl")
    write_problems(probs[20:], tmp_path / "b.jsonl")
    base = {**SHIPPED, "methods": ["flex"], "flex": {**SHIPPED["flex"], "library": str(lib)},
            "report": {"plots": False}}
    first, _ = _run(base, tmp_path / "r1", data={"path": str(tmp_path / "a.jsonl")})
    assert len(ExperienceLibrary(lib).experiences) == 20 and first[0]["n_retrieved"] == 0
    # a second run in a fresh method (what a restart builds) starts from the 20 records on disk
    second, summary = _run(base, tmp_path / "r2", data={"path": str(tmp_path / "b.jsonl")})
    assert second[0]["n_retrieved"] == 3  # its very first problem already sees the first run's experience
    exps = ExperienceLibrary(lib).experiences
    assert len(exps) == 40 and [e.step for e in exps] == list(range(40))
    assert {e.problem for e in exps[20:]} == {p.problem for p in probs[20:]}
    assert summary["methods"][0]["flex"][0]["records"] == 40
    # rerunning the same episodes (a resumed run) appends nothing twice
    _run(base, tmp_path / "r3", data={"path": str(tmp_path / "b.jsonl")})
    assert len(ExperienceLibrary(lib).experiences) == 40


def test_checkers():
    assert make_checker(CheckerConfig("exact"))(" 42 ", "42") and not make_checker(CheckerConfig("exact"))("42.0", "42")
    num = make_checker(CheckerConfig("numeric", rel_tol=1e-3))
    assert num("42.0", "42") and num("1,000", "1000") and not num("43", "42") and not num("x", "42")
    assert make_checker(CheckerConfig("engine.generic.checkers:numeric"))("7.0", "7")
    with pytest.raises(ConfigError, match="checker.kind 'nope:fn' cannot be loaded"):
        CheckerConfig("nope:fn")
    with pytest.raises(ConfigError, match="checker.kind must look like"):
        CheckerConfig("fuzzy")


def test_problem_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"problem": "a", "answer": "1"}\n{"problem": "", "answer": "2"}\n')
    with pytest.raises(InputError, match=r"p.jsonl:2: 'problem' must be a non-empty string"):
        load_problems(bad)
    bad.write_text('{"problem": "a", "answer": "1", "hint": "x"}\n')
    with pytest.raises(InputError, match=r"unknown field\(s\) \['hint'\]"):
        load_problems(bad)
    with pytest.raises(InputError, match="is not a file"):
        load_problems(tmp_path / "missing.jsonl")


def test_cli_example_writes_what_the_config_runs(tmp_path, capsys):
    from engine.cli import main

    assert main(["generic", "example", str(tmp_path / "ex.jsonl")]) == 0
    assert load_problems(tmp_path / "ex.jsonl") == load_problems("example")


def test_every_method_checkpoints_and_gives_the_records_of_a_run_without(tmp_path):
    # every round's state is written as data (engine.codec); the checker function comes from the config
    over = dict(data={"limit": 20}, report={"plots": False})
    plain, _ = _run(SHIPPED, tmp_path / "plain", **over)
    ckpt, _ = _run(SHIPPED, tmp_path / "ckpt", protocol={"checkpoint": True}, **over)
    assert (tmp_path / "ckpt" / "checkpoint").is_dir()
    drop = ("wall_s", "llm_latency_s")
    assert [{k: v for k, v in r.items() if k not in drop} for r in ckpt] == \
           [{k: v for k, v in r.items() if k not in drop} for r in plain]
