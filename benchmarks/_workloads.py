"""The workloads of the scaling study and the staleness table: a task's method, its episode stream, its LLM.

Each workload goes through the task's own plug-in (``parse``, ``runs``, ``make_method``,
``episodes``, ``llm_factory``: the calls :func:`engine.runner.run_task` makes), so what is
measured is what ``toe run`` runs; only the round size is chosen here. Texts always come from
the task's SIMULATED policy (a seeded test harness, not a model); with ``server`` the policy
answers through ``llm.backend = "server_model"`` (one modelled vLLM engine per worker).

Prophet Arena needs its CSV files: ``TOE_PA_DATA`` (default: the config's ``data.path``).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from engine.config import load_toml

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Workload:
    name: str
    task: Any
    exp: Any
    spec: Any
    episodes: list
    llm_factory: Callable
    metric: str  # the record field the staleness table averages
    default_round: int | list[int]  # the task's own round size (or plan of sizes) for this method

    def method(self):
        return self.task.make_method(self.exp, self.spec)


def _llm_table(server: dict | None) -> dict:
    if server is None:
        return {"backend": "simulated"}
    return {"backend": "server_model", "server_model": {**server, "backend": "simulated"}}


def _pick(task, exp, method: str, seed: int = 0):
    for spec in task.runs(exp):
        if spec.method == method and spec.seed == seed:
            return spec
    raise ValueError(f"no run of method {method!r} seed {seed}")


def game24(method: str = "tot", server: dict | None = None, episodes: int | None = None, seed: int = 0) -> Workload:
    from engine.game24.experiment import episodes_for
    from engine.game24.task import Game24Task

    cfg = load_toml(ROOT / "configs/game24.toml")
    cfg["methods"], cfg["seeds"], cfg["llm"] = [method], [seed], _llm_table(server)
    cfg.setdefault("protocol", {})["checkpoint"] = False
    task = Game24Task()
    exp = task.parse(cfg, SimpleNamespace(config_path=ROOT / "configs/game24.toml", executor="local",
                                          overrides=(), out=None))
    spec = _pick(task, exp, method, seed)
    # every method on the whole warm-up + test stream (plain ToT, which learns nothing, normally skips the
    # warm-up): the same puzzles for both rows, and enough of them for 32 workers
    eps = episodes_for(exp.warm, exp.test, spec.seed)
    eps = eps if episodes is None else eps[:episodes]
    return Workload(f"game24 {'ToT' if method == 'tot' else 'ToT+ToE'}", task, exp, spec, eps,
                    task.llm_factory(exp, spec), "solved", task.round_size(exp, spec))


def finance(method: str = "Pipe+ToE", server: dict | None = None, days: int | None = None, seed: int = 0,
            disk_cache: str | None = None) -> Workload:
    """``disk_cache``: the ``[embed] disk_cache`` folder (None: the config's own, "auto")."""
    from engine.finance.task import FinanceTask

    cfg = load_toml(ROOT / "configs/finance-synthetic.toml")
    cfg["methods"], cfg["seeds"], cfg["llm"], cfg["plots"] = [method], [seed], _llm_table(server), False
    if disk_cache is not None:
        cfg["embed"]["disk_cache"] = disk_cache
    if days is not None:  # a cut stream: the config's exploitation date may lie past it; split at T/3 as the task does
        cfg.setdefault("protocol", {})["max_days"] = days
        cfg["protocol"]["exploitation_start"] = ""
    task = FinanceTask()
    exp = task.parse(cfg, SimpleNamespace(config_path=ROOT / "configs/finance-synthetic.toml"))
    spec = _pick(task, exp, method, seed)
    return Workload(f"finance {method}", task, exp, spec, task.episodes(exp, spec), task.llm_factory(exp, spec),
                    "tsic", task.round_size(exp, spec))


_PA_CONTEXTS: dict = {}  # (data folder, questions) -> the ForecastContext every seed's runs share


def prophet_arena(method: str = "memrl", server: dict | None = None, questions: int | None = None,
                  seed: int | None = None) -> Workload:
    from engine.forecast.task import ProphetArenaTask

    cfg = copy.deepcopy(load_toml(ROOT / "configs/prophet-arena.toml"))
    cfg["data"]["path"] = os.environ.get("TOE_PA_DATA", cfg["data"]["path"])
    cfg["data"]["categories"] = []
    if not Path(cfg["data"]["path"]).is_dir():
        raise FileNotFoundError(f"Prophet Arena CSV folder {cfg['data']['path']!r} not found: set TOE_PA_DATA")
    cfg["run"]["methods"] = [method]
    cfg["run"]["checkpoint"] = False
    cfg["run"]["max_questions"] = questions or 1000
    cfg["llm"] = _llm_table(server)
    if seed is not None:  # the task's one seed (llm.seed): a seed is another experiment of the same questions
        cfg["llm"]["seed"] = seed
    task = ProphetArenaTask()
    exp = task.parse(cfg, SimpleNamespace(config_path=ROOT / "configs/prophet-arena.toml", out=None,
                                          executor="local", overrides=()))
    key = (cfg["data"]["path"], questions)
    if key in _PA_CONTEXTS:  # another seed of the same questions: the one context, as a toe run's runs share it
        exp.ctx = _PA_CONTEXTS[key]
    task.prepare(exp)  # the sandbox check; builds the context when there is none yet
    _PA_CONTEXTS.setdefault(key, exp.ctx)
    spec = _pick(task, exp, method, exp.seed)
    eps = task.episodes(exp, spec)
    plan = task.round_size(exp, spec)
    if questions is not None:
        eps = eps[:questions]
        plan = plan if isinstance(plan, int) else cut_plan(plan, len(eps))
    return Workload(f"prophet-arena {method}", task, exp, spec, eps, task.llm_factory(exp, spec), "brier", plan)


def cut_plan(plan: list[int], n: int) -> list[int]:
    """The round plan of the first ``n`` episodes: the plan's rounds up to there, the last one cut
    (a prefix of a leak-free round is leak-free)."""
    out, total = [], 0
    for size in plan:
        if total >= n:
            break
        out.append(min(size, n - total))
        total += out[-1]
    return out
