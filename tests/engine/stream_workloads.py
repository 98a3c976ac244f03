"""Small workloads of the three tasks on their SIMULATED policies, for the streams tests (local and Ray).

Each is ``(name, make_method, episodes, llm_factory, round_size)`` built through the task's own
plug-in (``parse``, ``runs``, ``make_method``, ``episodes``, ``llm_factory``), with rounds of
several episodes so that a worker's share splits into streams.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

from engine.config import load_toml

ROOT = Path(__file__).resolve().parents[2]


def _pick(task, exp, method):
    return next(s for s in task.runs(exp) if s.method == method)


def game24(method: str = "toe", n: int = 16):
    from engine.game24.experiment import episodes_for
    from engine.game24.task import Game24Task

    cfg = load_toml(ROOT / "configs/game24.toml")
    cfg["methods"], cfg["seeds"], cfg["llm"] = [method], [0], {"backend": "simulated"}
    cfg["protocol"]["checkpoint"] = False
    task = Game24Task()
    exp = task.parse(cfg, SimpleNamespace(config_path=ROOT / "configs/game24.toml", executor="local",
                                          overrides=(), out=None))
    spec = _pick(task, exp, method)
    eps = episodes_for(exp.warm, exp.test, spec.seed)[:n]
    return f"game24-{method}", lambda: task.make_method(exp, spec), eps, task.llm_factory(exp, spec), 8


def finance(method: str = "Pipe+ToE"):
    from engine.finance.task import FinanceTask

    cfg = {"task": "finance", "methods": [method], "seeds": [0], "plots": False,
           "synthetic": {"n_industries": 4, "n_days": 60, "events_per_day": 2.0, "seed": 4},
           "protocol": {"max_days": 6, "horizons": [1, 2, 4], "pretest_start": "2025-01-06",
                        "pretest_end": "2025-01-09", "start": "2025-01-10"},
           "llm": {"backend": "simulated"}}
    task = FinanceTask()
    exp = task.parse(cfg, SimpleNamespace(config_path=Path("fin.toml")))
    spec = _pick(task, exp, method)
    return (f"finance-{method}", lambda: task.make_method(exp, spec), task.episodes(exp, spec),
            task.llm_factory(exp, spec), task.round_size(exp, spec))


def prophet_arena(folder: Path, method: str = "full_text"):
    """Prophet Arena on a 6-question folder written by the forecast tests' helpers; the task's rounds (all
    questions in one round without experience, leak-free rounds with MemRL's experience track)."""
    from engine.forecast.task import ProphetArenaTask

    spec_ = importlib.util.spec_from_file_location("forecast_conftest", ROOT / "tests/engine/forecast/conftest.py")
    helpers = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(helpers)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [helpers.make_row(f"s{i}", snapshot=f"2025-08-{i + 1:02d}T12:00:00+00:00") for i in range(6)]
    helpers.write_csv(folder / "subset_data_Sports_6.csv", rows)
    cfg = {"task": "forecast", "data": {"path": str(folder), "n_evo": 2},
           "run": {"methods": [method], "max_questions": 4, "checkpoint": False},
           "agent": {"top_k": 1}, "llm": {"backend": "simulated"}}
    task = ProphetArenaTask()
    exp = task.parse(cfg, SimpleNamespace(config_path=folder / "pa.toml", out=None, executor="local", overrides=()))
    task.prepare(exp)
    spec = _pick(task, exp, method)
    eps = task.episodes(exp, spec)
    return (f"prophet-arena-{method}", lambda: task.make_method(exp, spec), eps, task.llm_factory(exp, spec),
            task.round_size(exp, spec))


def plain(results) -> str:
    """The records without timings (keys ending in _s), as JSON text (NaN compares equal to NaN)."""
    return json.dumps([{k: v for k, v in r.record.items() if not k.endswith("_s")} for r in results],
                      sort_keys=True, default=str)


def together(one, workloads) -> list[BaseException]:
    """Run ``one(*w)`` for every workload in its own thread, all at once; the errors they raised."""
    import threading

    errors: list[BaseException] = []

    def guarded(*args):
        try:
            one(*args)
        except BaseException as exc:  # noqa: BLE001 - returned to the test's assertion
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=w) for w in workloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
