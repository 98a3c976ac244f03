"""Game of 24 as a :class:`engine.runner.Task`: ToT, ToT+ToE and the baselines on one puzzle stream.

The protocol (warm-up stream, test split, seeds from puzzle identity) and the
config sections are in :mod:`engine.game24.experiment`; the run loop, executor,
checkpoints and run folder are the engine's (:func:`engine.runner.run_task`).
This file says what is particular to the task: which methods run which stream,
how records become the paper's Table 2 rows, and the two plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.config import to_dict
from engine.game24.experiment import (KEYS, Game24Experiment, build_stream, episodes_for, heading, llm_factory,
                                      method_table, notes, parse_config, row_labels, use_prompts)
from engine.game24.methods import BASELINE_NAMES, EXPERIENCE_FREE, TOE_NAMES, make_method, toe_mode
from engine.run_folder import run_folder
from engine.runner import RunSpec, Summary


@dataclass
class Game24Run:
    """What one ``toe run`` of the task holds after parsing: the experiment, its stream and its resources."""

    exp: Game24Experiment
    config: Mapping[str, Any]
    llm_cfg: Any
    warm: list
    test: list
    learn: tuple[str, ...]
    embedder: Any
    prompt_sets: list
    prompts_warning: str | None


class Game24Task:
    name = "game24"
    keys = KEYS
    policy = "engine.game24.simulated_policy:policy_for"
    default_metric = "acc_any"
    resume_overrides = {"protocol.checkpoint": True}

    def resolved(self, run: Game24Run) -> dict:
        """The task's own sections with every default filled in (engine.runner.resolved_config)."""
        exp = run.exp
        return {"methods": list(exp.methods), "seeds": list(exp.seeds), "title": exp.title, "protocol": exp.protocol,
                "tot": exp.tot, "report": exp.report, "prompts": exp.prompts, "memory": exp.memory}

    def parse(self, config, options) -> Game24Run:
        from engine.run_options import run_embed, run_llm

        exp = parse_config(config)
        llm_cfg = run_llm(config, options)
        prompt_sets, warning = use_prompts(exp.prompts, llm_cfg, options)
        embedder = None
        if any(m in BASELINE_NAMES for m in exp.methods):
            from engine.embed import make_embedder

            embedder = make_embedder(run_embed(config, options))
        warm, test = build_stream(exp.protocol)
        learn = ("warmup", "test") if exp.protocol.learn_on_test else ("warmup",)
        return Game24Run(exp, config, llm_cfg, warm, test, learn, embedder, prompt_sets, warning)

    def plan(self, run: Game24Run, options) -> dict[str, Any]:
        exp = run.exp
        for name in exp.methods:  # the method tables, as the runner's pre-flight builds them (hashing embedder)
            make_method(name, None if name == "tot" else run.config.get(name), exp.tot, run.learn, None, exp.memory)
        per_seed = {m: (len(run.test) if m in EXPERIENCE_FREE else len(run.warm) + len(run.test)) for m in exp.methods}
        model = run.llm_cfg.model
        if not model and run.llm_cfg.backend == "simulated":
            from engine.game24.simulated_policy import MODEL_NAME

            model = MODEL_NAME
        return {
            "methods": list(exp.methods), "seeds": list(exp.seeds),
            "episodes": {"warm-up puzzles": len(run.warm), "test puzzles": len(run.test),
                         "episodes per seed": " + ".join(f"{m} {n}" for m, n in per_seed.items()),
                         "episodes in all": sum(per_seed.values()) * len(exp.seeds),
                         "round size": exp.protocol.round_size},
            "model": model,
            "checkpoint": str(run_folder(options) / "checkpoint") if exp.protocol.checkpoint else None,
        }

    @staticmethod
    def summary_rows(summary: dict) -> list[dict]:
        from engine.game24.report import summary_rows

        return summary_rows(summary)

    def runs(self, run: Game24Run) -> list[RunSpec]:
        return [RunSpec(m, s) for m in run.exp.methods for s in run.exp.seeds]

    def make_method(self, run: Game24Run, spec: RunSpec):
        return make_method(spec.method, method_table(spec.method, run.config), run.exp.tot, run.learn, run.embedder,
                           run.exp.memory)

    def episodes(self, run: Game24Run, spec: RunSpec):
        return episodes_for(run.warm, run.test, spec.seed, skip_warmup=spec.method in EXPERIENCE_FREE)

    def round_size(self, run: Game24Run, spec: RunSpec) -> int:
        return run.exp.protocol.round_size

    def llm_factory(self, run: Game24Run, spec: RunSpec):
        return llm_factory(run.llm_cfg, spec.seed)

    def checkpoint(self, run: Game24Run) -> bool:
        return run.exp.protocol.checkpoint

    def independent_runs(self, run: Game24Run) -> bool:
        """False when FLEX continues one library file across runs (``[flex] library``): each run's method reads
        what the run before it left when it is built (engine.runner builds it at the run's start, one at a time)."""
        return not ("flex" in run.exp.methods and (run.config.get("flex") or {}).get("library"))

    def after_run(self, run, spec, method, results, out):
        return {}

    def summarize(self, run: Game24Run, records, extras) -> Summary:
        from engine import templates
        from engine.game24 import metrics, report
        from engine.run_folder import answered_by

        exp = run.exp
        backend, model = answered_by(records, run.llm_cfg)
        rows = metrics.summarize(records, "test", exp.methods)
        labels = row_labels(exp, run.config)
        for row in rows:
            row["label"] = labels[row["method"]]
            if row["method"] in TOE_NAMES:
                row["toe_mode"] = toe_mode(row["method"], run.config.get("toe"))
            row["backend"] = backend
            row["model"] = model
            row["simulated"] = backend == "simulated"
            row["run_wall_s"] = float(sum(e["wall_s"] for key, e in extras.items()
                                          if key.startswith(row["method"] + "-seed")))
        meta = {
            "configured_backend": run.llm_cfg.backend, "label": report.backend_label(backend, model),
            "title": exp.title, "methods": list(exp.methods), "seeds": list(exp.seeds),
            "warmup_puzzles": len(run.warm), "test_puzzles": len(run.test),
            "protocol": to_dict(exp.protocol), "tot": to_dict(exp.tot), "memory": to_dict(exp.memory),
            "prompts": templates.summary_entry(run.prompt_sets),
        }
        if run.prompts_warning:
            meta["prompts_warning"] = run.prompts_warning
        return Summary(rows, meta)

    def report(self, run: Game24Run, summary: Summary, records, out: Path) -> tuple[str, list[str]]:
        from engine.game24 import report

        exp = run.exp
        backend = summary.rows[0]["backend"] if summary.rows else run.llm_cfg.backend
        model = summary.rows[0]["model"] if summary.rows else ""
        extra = [f"Warning: {run.prompts_warning}."] if run.prompts_warning else []
        table = report.markdown_table(summary.rows, backend, model, heading(exp.protocol, len(run.test)),
                                      notes=notes(exp) + extra)
        if not exp.report.plots:
            return table, []
        labels = row_labels(exp, run.config)
        report.plot_accuracy_vs_calls(summary.rows, out / "accuracy_vs_calls.png", backend)
        report.plot_learning_curve(records, exp.methods, out / "learning_curve.png", backend, exp.report.window,
                                   test_start=len(run.warm), labels=labels)
        return table, ["accuracy_vs_calls.png", "learning_curve.png"]


TASK = Game24Task()
