"""FLEX record keys identify the episode: two Game-of-24 runs on different puzzles into one library
keep both runs' records, and a run restarted after a kill appends nothing twice."""

import json
from pathlib import Path

from engine.flex.library import ExperienceLibrary
from engine.tasks import run
from engine.tasks import RunOptions


def _run(lib: Path, out: Path, warmup: tuple[int, int], test: tuple[int, int]):
    cfg = {"task": "game24", "methods": ["flex"], "seeds": [0], "llm": {"backend": "simulated"},
           "protocol": {"warmup_first": warmup[0], "warmup_last": warmup[1], "warmup_sample": 0,
                        "test_first": test[0], "test_last": test[1], "round_size": 5},
           "flex": {"library": str(lib), "retrieval": "embedding"}, "report": {"plots": False}}
    assert run(cfg, RunOptions(config_path=Path("x.toml"), out=out, progress=False)) == 0
    return json.loads((out / "summary.json").read_text())


def test_two_runs_keep_both_and_a_restart_appends_nothing_twice(tmp_path):
    lib = tmp_path / "flex.jsonl"
    a = dict(warmup=(1, 40), test=(901, 910))  # 50 puzzles
    b = dict(warmup=(41, 70), test=(911, 920))  # 40 other puzzles
    _run(lib, tmp_path / "a", **a)
    records = ExperienceLibrary(lib).experiences
    assert len(records) == 50 and len({r.key for r in records}) == 50
    # a kill after the 20th append: the library holds run A's first 20 records (one line each, fsynced)
    lines = lib.read_bytes().splitlines(keepends=True)
    lib.write_bytes(b"".join(lines[:20]))
    _run(lib, tmp_path / "a-restart", **a)
    records = ExperienceLibrary(lib).experiences
    assert len(records) == 50 and len({r.key for r in records}) == 50
    assert [r.problem for r in records] == [json.loads(x)["problem"] for x in lines]  # the same records, in order
    _run(lib, tmp_path / "b", **b)
    records = ExperienceLibrary(lib).experiences
    assert len(records) == 90 and len({r.key for r in records}) == 90
    assert [r.step for r in records] == list(range(90))
    # run B again: nothing new
    _run(lib, tmp_path / "b-again", **b)
    assert len(ExperienceLibrary(lib).experiences) == 90


def test_seeds_of_one_run_continue_the_library_in_order(tmp_path):
    """Seeds 0 and 1 of one toe run into one library: seed 1's method is built when its run starts, after seed 0
    appended (a method built before would read the library without them and restart the admission steps)."""
    lib = tmp_path / "flex.jsonl"
    cfg = {"task": "game24", "methods": ["flex"], "seeds": [0, 1], "llm": {"backend": "simulated"},
           "protocol": {"warmup_first": 1, "warmup_last": 10, "warmup_sample": 0, "test_first": 901,
                        "test_last": 905, "round_size": 5},
           "flex": {"library": str(lib), "retrieval": "embedding"}, "report": {"plots": False}}
    assert run(cfg, RunOptions(config_path=Path("x.toml"), out=tmp_path / "out", progress=False)) == 0
    records = ExperienceLibrary(lib).experiences
    assert len(records) == 30 and len({r.key for r in records}) == 30  # 15 puzzles x 2 seeds
    assert [r.step for r in records] == list(range(30))
