"""``toe run configs/prophet-arena.toml``: ForeDreamer and reference rows on Prophet Arena questions, as a Task.

:func:`engine.runner.run_task` drives :class:`ProphetArenaTask` over the local or the Ray executor:

1. :meth:`parse` loads every CSV under ``data.path`` (deduplicated), keeps
   ``data.categories`` and splits each category (evolution+validation pool vs
   held-out evaluation, C.3); the model rows use the first ``run.max_questions``
   held-out questions of each category.
2. :meth:`runs`: one run per method (seed ``llm.seed``); ``foredreamer`` with
   ``run.evolve`` runs once per category (``part``), each category evolving
   from the seed guide on its own (C.3), unless
   ``evolution.share_across_categories`` makes it one run over one store.
   The methods and their rounds: :mod:`engine.forecast.round_methods`.
3. :meth:`summarize`: the reference rows that need no model (Uniform, Market)
   on every loaded question and on the evaluated ones, computed from the data
   (they are not runs), and one row per method from its episode records:
   ``foredreamer`` (seed MemGuide, empty Experience Bank; evolved: top-1 by
   validation and best of top-k on test, C.3), ``full_text``, ``rag``,
   ``no_information``, ``market_informed`` and the memory baselines on the
   retrieved evidence (``mem0``, ``memrl``, ``reme``, ``flex``).
4. :meth:`report`: the Brier / accuracy / market-return tables (``table.md``).

``llm.backend = "simulated"`` answers with the simulated forecasting policy; every
row it produces is labelled ``simulated``. ``run.checkpoint = true`` checkpoints every
round under ``OUT/checkpoint``: rerunning a killed command resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine.config import to_dict
from engine.forecast.config import KEYS as FORECAST_KEYS
from engine.errors import ConfigError
from engine.forecast.evidence_memory import ROW_NAMES
from engine.forecast.metrics import Row, format_table, reference_rows, score
from engine.forecast.round_methods import ForecastContext, make_method, sequential
from engine.rounds import Episode
from engine.run_folder import run_folder
from engine.runner import RunSpec, Summary

TITLE = "ForeDreamer on Prophet Arena"
NAMES = {"foredreamer": "ForeDreamer (seed guide, empty bank)", "full_text": "Full Text", "rag": "RAG",
         "no_information": "No Information (model, no search)",
         "market_informed": "Market-informed ForeDreamer (engine option)"}
SCORER_NOTE = {
    "pm_rank": "Scores as upstream's scorer computes them (pm-rank 0.3.1, run.scorer = \"pm_rank\"): Brier and return "
               "over the markets with price data, an omitted market at 0, Yes-or-No bets per market; Market's return "
               "is pm-rank's market-price predictor's. Accuracy: p >= 0.5 against the outcome on the same markets.",
    "listed": "Scores by the engine's own definitions (run.scorer = \"listed\"): every listed market, $1 on the Yes "
              "contract with the largest p / ask.",
}


def data_path(cfg) -> Path:
    p = Path(cfg.data.path).expanduser()
    if not p.exists():
        raise ConfigError(
            f"data.path {cfg.data.path!r} does not exist (resolved to {str(p.resolve())!r}); the engine ships no "
            f"Prophet Arena data: point data.path at your copy, e.g. --set data.path=../shared/data/forecast/prophet_arena"
        )
    return p


def worker_path(path) -> str:
    """An absolute path: a Ray worker's current directory is not the driver's."""
    return str(Path(path).expanduser().resolve())


def worker_prompts(prompts_cfg):
    """``[prompts]`` with absolute file paths, for workers to load the same templates."""
    from dataclasses import replace

    return replace(prompts_cfg, **{k: worker_path(v) for k in ("file", "baselines")
                                   if (v := getattr(prompts_cfg, k))})


def tag_of(records: list[dict]) -> str:
    """The suffix of a method's rows: ``[simulated]`` or ``[backend:model]`` of what answered its records."""
    from engine.forecast.run_support import model_tag

    rec = next((r for r in records if r.get("backend")), None)
    if rec is None:
        return ""
    return model_tag((rec["backend"], rec["model"]), rec["backend"] == "simulated")


def answered(records: list[dict]) -> tuple[tuple[str, str] | None, bool]:
    rec = next((r for r in records if r.get("backend")), None)
    if rec is None:
        return None, False
    return (rec["backend"], rec["model"]), rec["backend"] == "simulated"


def usage_total(records: list[dict]) -> dict:
    """The run's LLM usage, summed from each record's share (``Usage`` fields, in their order)."""
    keys = (("calls", "llm_calls"), ("samples", "llm_samples"), ("prompt_tokens", "prompt_tokens"),
            ("completion_tokens", "completion_tokens"), ("latency_s", "llm_latency_s"))
    return {k: sum(r.get(src) or 0 for r in records) for k, src in keys}


def mean_experience_tokens(recs: list[dict]) -> float | None:
    """Mean over questions of the memory tokens per main-agent prompt (None: records without the count)."""
    vals = [float(r["experience_tokens"]) for r in recs if r.get("experience_tokens") is not None]
    return sum(vals) / len(vals) if vals and len(vals) == len(recs) else None


def prophet_record(ep, ctx, mode: str) -> dict:
    """What one scored Prophet Arena question leaves in ``episodes.parquet``."""
    return {"qid": ep.qid, "category": ep.task.category, "probs": json.dumps(ep.probs), "failed": bool(ep.failed),
            "experience_tokens": float(ep.experience_per_prompt),
            "searches": json.dumps([[t, q, len(d)] for t, q, d in ep.searches]),
            "memories": json.dumps([{"item": Path(m.item_dir).name, "fallback": m.fallback, "calls": m.calls}
                                    for m in ep.memories], default=str),
            "raw_answer": ep.raw_answer[-400:]}


@dataclass(kw_only=True)
class ForecastRun:
    """What both forecasting tasks' parsed plans hold: the config, its sections, the [llm] and [embed] (parsed
    once), the prompt files in use, where the run writes; and what :meth:`ForecastTask.prepare` builds."""

    config: dict
    cfg: Any
    llm_cfg: Any
    embed_cfg: Any  # [embed] as parsed once per run (engine.embed.EmbedConfig)
    prompts_entry: dict
    prompts_warning: str | None
    seed: int
    out: Path
    t0: float
    evaluated: list  # the held-out items every model row is scored on
    sandbox: dict | None = None
    ctx: ForecastContext | None = None


@dataclass(kw_only=True)
class ProphetArenaRun(ForecastRun):
    """The parsed config and data of one Prophet Arena ``toe run``."""

    path: Path
    all_questions: list
    questions: list  # the questions of the configured categories
    splits: list
    eval_by_category: dict


def summary_of(table: Sequence[tuple[Any, str]], meta: dict) -> Summary:
    """A forecasting run's summary: one record per ``(row, run)``; a row without a run is a reference row
    (computed from the data: no model answered)."""
    out = []
    for row, run in table:
        rec = {"row": "model" if run else "reference", "run": run, **to_dict(row)}
        if not run:
            rec.update(backend="", model="", simulated=False)
        out.append(rec)
    return Summary(out, meta)


class ForecastTask:
    """What the forecasting tasks (Prophet Arena, FutureX) share: their keys, methods, rounds, LLM, checkpoints,
    what is built before the runs and the dry run's plan."""

    keys = FORECAST_KEYS
    policy = "engine.forecast.simulated:policy_for"
    resume_overrides = {"run.checkpoint": True}

    def parse(self, config, options):
        """The task's sections, the [llm] as parsed once, the prompt files, then the task's data (``_parse``)."""
        from engine.forecast.run_support import use_prompts
        from engine.run_options import run_embed, run_llm

        t0 = time.perf_counter()
        cfg = self.load_config(config)
        llm_cfg = run_llm(config, options)
        prompts_entry, prompts_warning = use_prompts(cfg.prompts, llm_cfg)
        return self.run_class(config=dict(config), cfg=cfg, llm_cfg=llm_cfg, embed_cfg=run_embed(config, options),
                              prompts_entry=prompts_entry,
                              prompts_warning=prompts_warning, seed=llm_cfg.seed, out=run_folder(options), t0=t0,
                              **self._parse(config, cfg))

    def prepare(self, exp) -> None:
        """Before any run: the sandbox checked (MemTools runs need it to work before any LLM call), then the
        workers' context (embedder, search corpus). ``parse`` builds neither, so a dry run starts nothing."""
        if exp.sandbox is None and self._uses_tools(exp):
            from engine.forecast.sandbox import preflight

            exp.sandbox = preflight(exp.cfg.sandbox)
        if exp.ctx is None:
            exp.ctx = self._context(exp)

    def plan(self, exp, options) -> dict[str, Any]:
        from engine.forecast.simulated import MODEL_NAME

        llm = exp.llm_cfg
        return {"methods": list(exp.cfg.run.methods), "seeds": [exp.seed],
                "episodes": {**self._counts(exp), "evolve": exp.cfg.run.evolve,
                             "workspace": exp.cfg.run.workspace or str(exp.out / "workspace")},
                "model": MODEL_NAME if llm.backend == "simulated" else llm.model,
                "checkpoint": str(exp.out / "checkpoint") if exp.cfg.run.checkpoint else None}

    def resolved(self, exp) -> dict:
        """The task's own sections with every default filled in (engine.runner.resolved_config);
        [memory_baselines] stays as given (its budget keys come from [memory], which it must not repeat)."""
        from dataclasses import fields

        return {f.name: getattr(exp.cfg, f.name) for f in fields(exp.cfg) if f.name != "memory_baselines"}

    def _evolves(self, exp, run: RunSpec) -> bool:
        return run.method == "foredreamer" and exp.cfg.run.evolve

    def make_method(self, exp, run: RunSpec):
        return make_method(run.method, exp.cfg.run.evolve, exp.ctx, run.key)

    def round_size(self, exp, run: RunSpec) -> int | list[int]:
        return round_size(run, exp.cfg.run.evolve, exp.ctx, self.episodes(exp, run))

    def llm_factory(self, exp, run: RunSpec):
        from engine.forecast.run_support import ForecastLLM

        return ForecastLLM(exp.llm_cfg)

    def checkpoint(self, exp) -> bool:
        return exp.cfg.run.checkpoint

    def after_run(self, exp, run, method, results, out: Path) -> dict:
        return evolution_extras(method, run, out)


class ProphetArenaTask(ForecastTask):
    name = "forecast"
    default_metric = "brier"
    run_class = ProphetArenaRun

    @staticmethod
    def load_config(config):
        from engine.forecast.config import load_forecast_config

        return load_forecast_config(config)

    @staticmethod
    def summary_rows(summary: dict) -> list[dict]:
        from engine.forecast.metrics import summary_rows

        return summary_rows(summary)

    def _uses_tools(self, exp) -> bool:
        return bool(exp.evaluated) and any(m not in ROW_NAMES for m in exp.cfg.run.methods)

    def _counts(self, exp) -> dict[str, Any]:
        return {"questions loaded": len(exp.questions), "categories": len(exp.splits),
                "held-out questions per method": len(exp.evaluated)}

    def _parse(self, config, cfg) -> dict[str, Any]:
        from engine.forecast.data import category_splits, load_prophet_arena, train_ids_from_files

        path = data_path(cfg)
        all_questions = load_prophet_arena(path)
        questions = load_prophet_arena(path, cfg.data.categories) if cfg.data.categories else all_questions
        evo_ids = train_ids_from_files(path) if (cfg.data.use_train_files and path.is_dir()) else None
        splits = category_splits(questions, cfg.data.n_evo, cfg.data.split_seed, evo_ids)
        eval_by_category = {s.category: (list(s.eval)[: cfg.run.max_questions] if cfg.run.max_questions
                                         else list(s.eval)) for s in splits}
        return {"path": path, "all_questions": all_questions, "questions": questions, "splits": splits,
                "eval_by_category": eval_by_category,
                "evaluated": [q for s in splits for q in eval_by_category[s.category]]}

    def _context(self, exp: ProphetArenaRun) -> ForecastContext | None:
        from engine.embed import make_embedder

        if not exp.evaluated:
            return None
        cfg, questions = exp.cfg, exp.questions
        embedder = make_embedder(exp.embed_cfg)
        if cfg.data.search == "sources":
            from engine.forecast.search import corpus_from_questions

            search = corpus_from_questions(questions, embedder)
        else:  # the paper's web providers, behind the same cutoff guard as every provider
            from engine.forecast.search import CutoffGuard
            from engine.forecast.web_search import web_search

            search = CutoffGuard(web_search(cfg.data.search, cfg.agent.context_chars, cfg.data.tavily_url,
                                            cfg.data.firecrawl_url))
        items = {q.qid: q for q in exp.evaluated}
        items.update({q.qid: q for s in exp.splits for q in s.evo})
        return ForecastContext(
            task=self.name, agent=cfg.agent, subagent=cfg.subagent, sandbox=cfg.sandbox,
            evolution=cfg.evolution, search=search, embedder=embedder, items=items,
            pools={s.category: [q.qid for q in s.evo] for s in exp.splits}, record=prophet_record,
            workspace=worker_path(cfg.run.workspace or exp.out / "workspace"), memory_baselines=cfg.memory_baselines,
            prompts=(worker_prompts(cfg.prompts), exp.config.get("llm")), scorer=cfg.run.scorer)

    # -- runs ------------------------------------------------------------------------------------
    def _evolved_categories(self, exp) -> list[str]:
        return [s.category for s in exp.splits if exp.eval_by_category[s.category]]

    def runs(self, exp) -> list[RunSpec]:
        if not exp.evaluated:
            return []
        out = []
        for m in exp.cfg.run.methods:
            if m == "foredreamer" and exp.cfg.run.evolve and not exp.cfg.evolution.share_across_categories:
                out += [RunSpec(m, exp.seed, c) for c in self._evolved_categories(exp)]
            else:
                out.append(RunSpec(m, exp.seed))
        return out

    def episodes(self, exp, run: RunSpec) -> list[Episode]:
        if self._evolves(exp, run):
            return evolution_episodes([run.part] if run.part else self._evolved_categories(exp),
                                      {c: [q.qid for q in v] for c, v in exp.eval_by_category.items()},
                                      exp.cfg.evolution, run.seed)
        return question_episodes(exp.evaluated, run, exp.ctx)

    # -- summary and tables ----------------------------------------------------------------------
    def summarize(self, exp, records: list[dict], extras: dict) -> Summary:
        cfg = exp.cfg
        ref_all = reference_rows(exp.all_questions, cfg.run.scorer)
        meta = {"n_questions": len(exp.all_questions), "scorer": cfg.run.scorer, "search": cfg.data.search,
                "splits": {s.category: {"evo": [q.qid for q in s.evo], "eval": [q.qid for q in s.eval]}
                           for s in exp.splits},
                "evaluated": [q.qid for q in exp.evaluated], "reference_all": [to_dict(r) for r in ref_all],
                "prompts": exp.prompts_entry, "usage": usage_total(records)}
        if exp.prompts_warning:
            meta["prompts_warning"] = exp.prompts_warning
        if exp.sandbox is not None:
            meta["sandbox"] = exp.sandbox
        evolution = {cat: d for e in extras.values() for cat, d in (e.get("evolution") or {}).items()}
        rows: list[tuple[Row, str]] = []
        notes = []
        for m in cfg.run.methods if exp.evaluated else ():
            recs = [r for r in records if r["method"] == m]
            tag = tag_of(recs)
            if m == "foredreamer" and cfg.run.evolve:
                for row in self._evolved_rows(exp, recs, tag, evolution):
                    rows.append((row, m))
                continue
            recs = by_question(recs, exp.evaluated)
            name = (ROW_NAMES.get(m) or NAMES[m]) + tag
            row = score(name, exp.evaluated, [json.loads(r["probs"]) for r in recs],
                        sum(bool(r["failed"]) for r in recs), cfg.run.scorer)
            rows.append((replace(row, experience_tokens=mean_experience_tokens(recs)), m))
            if m in ROW_NAMES:
                notes.append(memory_note(ROW_NAMES[m], recs, exp.evaluated, exp.ctx))
        meta["evolution"] = evolution
        meta["notes"] = notes
        table = [(r, "") for r in reference_rows(exp.evaluated, cfg.run.scorer)] if exp.evaluated else []
        return summary_of(table + rows, meta)

    def _evolved_rows(self, exp, recs, tag, evolution) -> list[Row]:
        """Per category: top-1 by validation and the best of the top-k on the held-out questions (C.3)."""
        scorer = exp.cfg.run.scorer
        best_q, best_p, top1_q, top1_p, failed = [], [], [], [], 0
        for cat in self._evolved_categories(exp):
            ev_q = exp.eval_by_category[cat]
            results = []
            for rank in range(exp.cfg.evolution.top_k):
                rs = [r for r in recs if r.get("kind") == "eval" and r.get("category") == cat
                      and r.get("rank") == rank and r.get("configured")]
                if not rs:
                    continue
                rs = by_question(rs, ev_q)
                probs = [json.loads(r["probs"]) for r in rs]
                results.append((score("x", ev_q, probs, scorer=scorer).avg_brier, rs[0]["validation"],
                                rs[0]["guide"], rs[0]["bank_version"], probs, sum(bool(r["failed"]) for r in rs)))
            if cat in evolution:
                evolution[cat]["top"] = [(r[2], r[3], r[1], r[0]) for r in results]
            if not results:
                continue
            top1 = results[0]
            best = min(results, key=lambda r: r[0])
            for target_q, target_p, r in ((best_q, best_p, best), (top1_q, top1_p, top1)):
                target_q += ev_q
                target_p += r[4]
            failed += top1[5]
        return [score("ForeDreamer evolved, top-1 by validation" + tag, top1_q, top1_p, failed, scorer),
                score("ForeDreamer evolved, best of top-k on test (C.3)" + tag, best_q, best_p, scorer=scorer)]

    def report(self, exp, summary: Summary, records, out: Path) -> tuple[str, list[str]]:
        from engine.forecast.run_support import heading

        cfg, meta = exp.cfg, summary.meta
        who, simulated = answered(records)
        ref_all = [Row(**r) for r in meta["reference_all"]]
        lines = [heading(TITLE, who, simulated) if exp.evaluated else heading(TITLE), "",
                 f"Data: {exp.path} ({len(exp.all_questions)} unique questions; model rows use "
                 f"{len(exp.splits)} categories)"]
        lines += ["", "## Reference rows on every loaded question (Brier, lower is better)", "",
                  format_table(ref_all, "brier"), "", "Market return (gross, risk-neutral bettor, $1 per event):", "",
                  format_table(ref_all, "market_return")]
        if exp.prompts_warning:
            lines += ["", f"Warning: {exp.prompts_warning}."]
        if not exp.evaluated:
            lines += ["", "No held-out evaluation questions in the selected categories (every question is in the "
                      "evolution pool); model rows skipped."]
        else:
            from engine.forecast.sandbox import report_line

            if exp.sandbox is not None:
                lines += ["", report_line(exp.sandbox)]
            table = [Row(**{k: r[k] for k in ("method", "brier", "accuracy", "market_return", "n", "failed")},
                         experience_tokens=r.get("experience_tokens")) for r in summary.rows]
            model = [r for r, rec in zip(table, summary.rows) if rec["row"] == "model"]
            lines += ["", f"## Model rows on {len(exp.evaluated)} held-out questions (first "
                      f"{cfg.run.max_questions or 'all'} per category), with the reference rows on the same questions",
                      ""]
            if simulated:
                lines += ["Every model row here comes from the SIMULATED forecasting harness (llm.backend = "
                          "simulated), not from a model.", ""]
            lines += [SCORER_NOTE[cfg.run.scorer], ""]
            lines += ["Brier (lower is better):", "", format_table(table, "brier"), "", "Accuracy (market-level):", "",
                      format_table(table, "accuracy"), "", "Market return:", "", format_table(table, "market_return"),
                      "", "Unusable answers (scored as Uniform): " + ", ".join(f"{r.method}: {r.failed}" for r in model),
                      f"LLM usage: {meta['usage']}"]
            if meta["notes"]:
                lines += ["", "Memory baselines (evidence):"] + [f"- {n}" for n in meta["notes"]]
        lines += ["", f"Wall time: {time.perf_counter() - exp.t0:.1f} s"]
        return "\n".join(lines), []


# -- shared by the Prophet Arena and FutureX tasks ---------------------------------------------------


def question_episodes(questions, run: RunSpec, ctx: ForecastContext) -> list[Episode]:
    """One episode per held-out question, payload ``("question", qid)``. The memory baselines with an
    experience track: in cutoff order, payload ``("question", qid, opens)`` where ``opens`` marks the first
    question of each leak-free round (:func:`~engine.forecast.outcome_memory.leak_free_rounds`)."""
    order = list(range(len(questions)))
    if not sequential(run.method, False, ctx.memory_baselines):
        return [Episode(k, ("question", questions[i].qid), run.seed, "test") for k, i in enumerate(order)]
    from engine.forecast.outcome_memory import leak_free_rounds

    order.sort(key=lambda i: (questions[i].cutoff, i))
    sizes = leak_free_rounds([questions[i] for i in order], ctx.memory_baselines.resolution_delay_h)
    opens = set(np.cumsum([0] + sizes[:-1]).tolist())
    return [Episode(k, ("question", questions[i].qid, k in opens), run.seed, "test") for k, i in enumerate(order)]


def evolution_episodes(categories, eval_qids: dict, evo_cfg, seed: int) -> list[Episode]:
    """Per category: ``init``, one ``iterate`` per evolution iteration, one ``eval`` per (rank, question)."""
    payloads = []
    tracks = evo_cfg.textual or evo_cfg.procedural
    for cat in categories:
        payloads.append(("init", cat))
        payloads += [("iterate", cat, i) for i in range(evo_cfg.iterations if tracks else 0)]
        payloads += [("eval", cat, rank, q) for rank in range(evo_cfg.top_k) for q in eval_qids[cat]]
    return [Episode(k, p, seed, "evolve" if p[0] != "eval" else "test") for k, p in enumerate(payloads)]


def round_size(run: RunSpec, evolve: bool, ctx: ForecastContext, episodes: Sequence[Episode]) -> int | list[int]:
    """Questions of a method without experience form one round; ForeDreamer's evolution runs one episode
    per round; an experience track runs its leak-free rounds (the ``opens`` flags of
    :func:`question_episodes`), as a plan of round sizes."""
    if evolve and run.method == "foredreamer":
        return 1
    if sequential(run.method, evolve, ctx.memory_baselines):
        starts = [k for k, e in enumerate(episodes) if e.payload[2]]
        return [b - a for a, b in zip(starts, starts[1:] + [len(episodes)])]
    return max(1, len(episodes))


def by_question(records: list[dict], questions) -> list[dict]:
    """``records`` in the order of ``questions`` (by qid): one each."""
    index = {r["qid"]: r for r in records}
    missing = [q.qid for q in questions if q.qid not in index]
    if missing:
        raise AssertionError(f"no episode record for questions {missing[:5]}")
    return [index[q.qid] for q in questions]


def memory_note(name: str, recs: list[dict], questions, ctx: ForecastContext) -> str:
    """The memory baseline's line under the tables: what went into its memories and what it saw."""
    from engine.forecast.outcome_memory import leak_free_rounds

    sizes = [n for r in recs for n in json.loads(r["evidence_chars"])]
    seen = [len(json.loads(r["experience_visible"])) for r in recs]
    tracked = any(r.get("tracked") for r in recs)
    rounds = len(leak_free_rounds(sorted(questions, key=lambda q: q.cutoff), ctx.memory_baselines.resolution_delay_h))
    return (f"{name}: {sum(r['n_written'] for r in recs)} search results written to per-question memories, "
            f"{sum(r['dropped'] for r in recs)} after a cutoff dropped; tool results "
            f"{sum(sizes) / max(1, len(sizes)):.0f} characters on average; "
            + (f"resolved outcomes in the experience memory per question: mean {sum(seen) / len(seen):.1f}, max "
               f"{max(seen)}; {len(recs)} questions in {rounds} leak-free rounds" if tracked else "no experience layer"))


def evolution_extras(method, run: RunSpec, out: Path) -> dict:
    """An evolved run's procedural store (``OUT/procedural/<run key>``) and its evolution per category."""
    from engine.forecast.round_methods import EvolutionMethod

    if not isinstance(method, EvolutionMethod):
        return {}
    rel = f"procedural/{run.key}"
    method.write_store(out / rel)
    evolution = {}
    for cat, state in method.history.items():
        unusable = {k: sum(1 for e in state["log"] if e.get("unusable") == k) for k in ("editor", "critic")}
        evolution[cat] = {"log": state["log"], "tree_edges": state["tree"].edges, "scores": dict(state["tree"].score),
                          "store": rel, "categories": {k: list(v) for k, v in state["categories"].items()},
                          "unusable": unusable}
    return {"evolution": evolution}


TASK = ProphetArenaTask()
