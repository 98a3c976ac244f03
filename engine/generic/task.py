"""``task = "generic"``: a user's own problems with answers, run by every memory method on the one runner.

Config (see configs/generic-example.toml)::

    task = "generic"
    methods = ["plain", "flex", "mem0", "memrl", "reme"]
    seeds = [0]
    [data]     path = "example" | "problems.jsonl"; limit = 0 (all)
    [checker]  kind = "exact" | "numeric" | "module:attr"; rel_tol = 1e-6
    [protocol] round_size = 10; max_tokens = 256; temperature = 0.0; checkpoint = false
    [memory]   top_k, max_experience_tokens (engine.memory_budget)
    [flex] [mem0] [memrl] [reme]   each memory's own keys
    [report]   plots = true; window = 10 (performance tracking; FLEX's plateau rule: [flex] window ...)

Outputs: the run folder of :func:`engine.runner.run_task`, with ``learning_curve.png``
(success rate per window, plateau markers) and, per row, accuracy, calls, tokens,
experience tokens per prompt, the success rate of the last window and where a
plateau was detected (:mod:`engine.flex.tracking`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from engine.config import check, check_seeds, from_dict, split_tables, to_dict
from engine.errors import ConfigError
from engine.flex.tracking import PlateauRule, tracking_report
from engine.generic.checkers import CheckerConfig, make_checker
from engine.generic.data import Problem, load_problems
from engine.generic.method import MEMORY_METHODS, METHODS, GenericMethod, make_memory
from engine.memory_budget import MemoryBudget, load_budget
from engine.rounds import Episode, request_seed
from engine.run_folder import run_folder
from engine.runner import RunSpec, Summary
from engine.markdown import table

KEYS = ("methods", "seeds", "data", "checker", "protocol", "memory", "report") + MEMORY_METHODS
NAMES = {"plain": "Plain (no memory)", "flex": "FLEX", "mem0": "Mem0", "memrl": "MemRL", "reme": "ReMe"}


@dataclass(frozen=True)
class DataConfig:
    path: str = "example"
    limit: int = 0

    def __post_init__(self):
        check(self.limit >= 0, f"data.limit must be >= 0 (0 = all), got {self.limit}")


@dataclass(frozen=True)
class ProtocolConfig:
    round_size: int = 10
    max_tokens: int = 256
    temperature: float = 0.0
    checkpoint: bool = False

    def __post_init__(self):
        check(self.round_size >= 1, f"protocol.round_size must be >= 1, got {self.round_size}")
        check(self.max_tokens >= 1, f"protocol.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"protocol.temperature must be in [0, 5], got {self.temperature}")


@dataclass(frozen=True)
class ReportConfig:
    plots: bool = True
    window: int = 10
    plateau_min_gain: float = 0.02
    plateau_patience: int = 2

    def __post_init__(self):
        PlateauRule(self.window, self.plateau_min_gain, self.plateau_patience)

    @property
    def rule(self) -> PlateauRule:
        return PlateauRule(self.window, self.plateau_min_gain, self.plateau_patience)


@dataclass
class GenericRun:
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    data: DataConfig
    checker: CheckerConfig
    protocol: ProtocolConfig
    memory: MemoryBudget
    report: ReportConfig
    tables: dict
    problems: list[Problem]
    llm_cfg: Any
    embed: Any
    title: str


def parse(config: Mapping[str, Any], options=None) -> GenericRun:
    """The generic task's config; ``options``: the run's, with ``[llm]`` and ``[embed]`` parsed once (None: parsed
    here)."""
    from engine.run_options import run_embed, run_llm

    title = config.get("title", "Generic task")
    llm_cfg, embed = run_llm(config, options), run_embed(config, options)
    config = split_tables(config, KEYS, "generic")
    methods = config.get("methods", list(METHODS))
    if not isinstance(methods, list) or not methods or any(m not in METHODS for m in methods):
        raise ConfigError(f"methods must be a non-empty list of {', '.join(METHODS)}, got {methods!r}")
    if len(set(methods)) != len(methods):
        raise ConfigError(f"methods lists a method more than once: {methods}")
    seeds = check_seeds(config.get("seeds", [0]))
    data = from_dict(DataConfig, config.get("data"), "data")
    problems = load_problems(data.path)
    if data.limit:
        problems = problems[: data.limit]
    if not isinstance(title, str):
        raise ConfigError(f"title must be a string, got {title!r}")
    return GenericRun(tuple(methods), tuple(seeds), data, from_dict(CheckerConfig, config.get("checker"), "checker"),
                      from_dict(ProtocolConfig, config.get("protocol"), "protocol"), load_budget(config),
                      from_dict(ReportConfig, config.get("report"), "report"),
                      {m: dict(config.get(m) or {}) for m in MEMORY_METHODS}, problems, llm_cfg, embed, title)


def llm_factory(llm_cfg, seed: int):
    from engine.llm.factory import BackendFactory

    return BackendFactory(replace(llm_cfg, seed=seed), policy=GenericTask.policy)


class GenericTask:
    name = "generic"
    keys = KEYS
    policy = "engine.generic.simulated:policy_for"
    default_metric = "accuracy"
    resume_overrides = {"protocol.checkpoint": True}

    def resolved(self, run: GenericRun) -> dict:
        """The task's own sections with every default filled in (engine.runner.resolved_config)."""
        return {"methods": list(run.methods), "seeds": list(run.seeds), "title": run.title, "data": run.data,
                "checker": run.checker, "protocol": run.protocol, "memory": run.memory, "report": run.report}

    def parse(self, config, options) -> GenericRun:
        return parse(config, options)

    def plan(self, run: GenericRun, options) -> dict[str, Any]:
        """``toe run --dry-run``: every section parsed, the problems loaded, each memory built once, nothing run."""
        for m in run.methods:  # a bad memory table fails here, as in the runner's pre-flight
            self.make_method(run, RunSpec(m, run.seeds[0]))
        out = run_folder(options)
        model = run.llm_cfg.model
        if not model and run.llm_cfg.backend == "simulated":
            from engine.generic.simulated import MODEL_NAME

            model = MODEL_NAME
        return {"methods": list(run.methods), "seeds": list(run.seeds),
                "episodes": {"problems": len(run.problems),
                             "episodes in all": len(run.problems) * len(run.methods) * len(run.seeds),
                             "round size": run.protocol.round_size},
                "model": model, "checkpoint": str(out / "checkpoint") if run.protocol.checkpoint else None}

    @staticmethod
    def summary_rows(summary: dict) -> list[dict]:
        """``summary.json`` as one flat record per method (``toe sweep``, ``--track``)."""
        return [{"method": r["method"], "accuracy": r["accuracy"], "calls": r["calls"], "tokens": r["tokens"],
                 "experience_tokens": r["experience_tokens"]} for r in summary.get("methods", [])]

    def runs(self, run: GenericRun) -> list[RunSpec]:
        return [RunSpec(m, s) for m in run.methods for s in run.seeds]

    def make_method(self, run: GenericRun, spec: RunSpec):
        memory = None
        if spec.method in MEMORY_METHODS:
            from engine.embed import make_embedder

            memory = make_memory(spec.method, run.tables[spec.method], run.memory, make_embedder(run.embed))
        return GenericMethod(spec.method, memory, make_checker(run.checker), run.memory, run.protocol.max_tokens,
                             run.protocol.temperature)

    def episodes(self, run: GenericRun, spec: RunSpec) -> list[Episode]:
        return [Episode(i, p, request_seed("generic", spec.seed, p.id)) for i, p in enumerate(run.problems)]

    def round_size(self, run, spec) -> int:
        return run.protocol.round_size

    def llm_factory(self, run: GenericRun, spec: RunSpec):
        return llm_factory(run.llm_cfg, spec.seed)

    def checkpoint(self, run) -> bool:
        return run.protocol.checkpoint

    def independent_runs(self, run: GenericRun) -> bool:
        """False when FLEX continues one library file across runs (``[flex] library``): each run reads what the
        one before it left, so they cannot go at once (cluster.concurrent_runs)."""
        return not ("flex" in run.methods and (run.tables.get("flex") or {}).get("library"))

    def after_run(self, run, spec, method, results, out):
        mem = getattr(method, "memory", None)
        if spec.method == "flex" and mem is not None:
            return {"flex": {**mem.counts(), "tracking": mem.tracking(), "library": mem.config.library or None}}
        return {}

    def summarize(self, run: GenericRun, records, extras) -> Summary:
        from engine.run_folder import answered_by

        backend, model = answered_by(records, run.llm_cfg)
        rows = []
        for m in run.methods:
            per_seed = []
            for s in run.seeds:
                recs = sorted((r for r in records if r["method"] == m and r["seed"] == s), key=lambda r: r["episode_id"])
                per_seed.append(recs)
            acc = [np.mean([r["correct"] for r in recs]) for recs in per_seed]
            pooled = [r for recs in per_seed for r in recs]
            curve = [float(r["correct"]) for r in per_seed[0]]
            row = {"method": m, "label": NAMES[m], "seeds": list(run.seeds), "n_problems": len(run.problems),
                   "accuracy": float(np.mean(acc)), "accuracy_std": float(np.std(acc, ddof=1)) if len(acc) > 1 else 0.0,
                   "calls": float(np.mean([r["calls"] for r in pooled])),
                   "tokens": float(np.mean([r["tokens"] for r in pooled])),
                   "experience_tokens": float(np.mean([r["experience_tokens"] for r in pooled])),
                   "experience_fitted": int(sum(bool(r["experience_fitted"]) for r in pooled)),
                   "tracking": tracking_report(curve, run.report.rule),
                   "backend": backend, "model": model, "simulated": backend == "simulated"}
            flex = [e["flex"] for k, e in extras.items() if k.startswith(f"{m}-seed") and "flex" in e]
            if flex:
                row["flex"] = flex
            rows.append(row)
        meta = {"title": run.title, "methods": list(run.methods), "seeds": list(run.seeds),
                "data": to_dict(run.data), "checker": to_dict(run.checker), "memory": to_dict(run.memory),
                "report": to_dict(run.report), "n_problems": len(run.problems)}
        return Summary(rows, meta)

    def report(self, run: GenericRun, summary: Summary, records, out: Path) -> tuple[str, list[str]]:
        sim = bool(summary.rows and summary.rows[0]["simulated"])
        lines = [f"**{run.title}** ({len(run.problems)} problems, checker {run.checker.kind})"
                 + (" - SIMULATED policy, not a model" if sim else ""), ""]
        rows = []
        for r in summary.rows:
            t = r["tracking"]
            last = "-" if t["success_rate_last_window"] is None else f"{100 * t['success_rate_last_window']:.0f}%"
            rows.append((f"{r['label']}{' [simulated]' if sim else ''}",
                         f"{100 * r['accuracy']:.1f}% ± {100 * r['accuracy_std']:.1f}", f"{r['calls']:.1f}",
                         f"{r['tokens']:.0f}", f"{r['experience_tokens']:.1f}", last, t["plateau_at"] or "-"))
        lines += table(("Method", "Accuracy", "Calls", "Tokens", "Exp. tokens / prompt", "Last-window success",
                        "Plateau at"), rows)
        lines += ["", f"Per problem, mean over seeds. Performance tracking (FLEX seed 002 step 5; first seed): windows "
                      f"of {run.report.window}; plateau = {run.report.plateau_patience} windows gaining less than "
                      f"{run.report.plateau_min_gain:g} (engine.flex.tracking)."]
        for r in summary.rows:
            for f in r.get("flex", []):
                lines.append(f"FLEX library: {f['records']} records, {f['rejected']} rejected by validation, archived "
                             f"{f['archived']}" + (f", file {f['library']}" if f["library"] else ""))
        if not run.report.plots:
            return "\n".join(lines) + "\n", []
        from engine.flex.tracking import plot_learning

        curves = {}
        for m in run.methods:
            recs = sorted((r for r in records if r["method"] == m and r["seed"] == run.seeds[0]),
                          key=lambda r: r["episode_id"])
            curves[NAMES[m]] = [float(r["correct"]) for r in recs]
        plot_learning(curves, run.report.rule, out / "learning_curve.png",
                      f"{run.title}" + (" (SIMULATED)" if sim else ""))
        return "\n".join(lines) + "\n", ["learning_curve.png"]


TASK = GenericTask()
