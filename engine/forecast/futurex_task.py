"""``toe run configs/futurex.toml``: ForeDreamer and reference rows on FutureX questions (paper C.2 to C.4), as a Task.

:func:`engine.runner.run_task` drives :class:`FutureXTask` over the local or the Ray executor:

1. :meth:`parse` loads a FutureX JSON/JSONL file (``data.path``; ``"example"`` =
   the fictional format example shipped in ``engine/data``) into items with a
   question type (single choice, multi choice, ranking, numerical, open) and the
   documents file (``data.documents``) into a cutoff-aware corpus; splits (C.3):
   ``data.n_evo`` items sampled with ``data.split_seed`` form the
   evolution+validation pool (paper: 20 of 208), every other item is
   evaluation; an item whose question text repeats a pool item's is dropped.
2. :meth:`runs`: one run per method; episodes are the first ``run.max_questions``
   evaluation items (:mod:`engine.forecast.round_methods`): ``foredreamer``
   (seed MemGuide and empty Experience Bank, or with ``run.evolve`` dual-track
   evolution on the pool ranked by FutureX accuracy, then the top validated
   configurations on the evaluation items), ``full_text`` (every document linked
   to the question and available before its cutoff in the prompt), ``rag`` (the
   top-k cutoff-filtered search hits) and the memory baselines on the retrieved
   evidence (``mem0``, ``memrl``, ``reme``, ``flex``; FutureX items get their
   evidence layer only).
3. :meth:`summarize`: the reference rows that need no model (the expected accuracy
   of a uniform random guess; the first option / listed order), computed from the
   data, and accuracy per question type and overall for every method.

Formats and scoring: :mod:`engine.forecast.futurex_tasks` (items),
:mod:`engine.forecast.futurex_corpus` (documents), :mod:`engine.forecast.futurex_metrics` (rows).
``llm.backend = "simulated"`` answers with the simulated forecasting policy; every row it produces
is labelled ``simulated``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from engine.config import load_named, to_dict
from engine.errors import ConfigError
from engine.forecast import prompts
from engine.forecast.agent import MEMORY_MODES, ForecastAgent
from engine.forecast.data import FutureXItem, parse_time
from engine.forecast.evolution import Runner
from engine.forecast.futurex_config import EXAMPLE, load_futurex_config, load_memory_baselines_config
from engine.forecast.futurex_corpus import FutureXCorpus, load_futurex_documents
from engine.forecast.futurex_metrics import AccuracyRow, accuracy_row, format_accuracy_table, reference_rows
from engine.forecast.futurex_tasks import EXAMPLE_DOCS, EXAMPLE_ITEMS, futurex_split, is_correct, load_futurex_tasks
from engine.forecast.round_methods import ForecastContext
from engine.forecast.search import SearchProvider, SearchResult
from engine.forecast.task import (NAMES, ForecastRun, ForecastTask, answered, by_question, evolution_episodes,
                                  question_episodes, summary_of, tag_of, usage_total, worker_path,
                                  worker_prompts)
from engine.forecast.validation_metric import ValidationMetric
from engine.rounds import Episode
from engine.runner import RunSpec, Summary

TITLE = "ForeDreamer on FutureX"
TOOL_MODES = ("foredreamer", "market_informed")

# --------------------------------------------------------------------------- agent, runner, metric


def _evidence_text(docs: Sequence[SearchResult], budget: int) -> str:
    text = "\n".join(f"[{d.available_at.date()}] {d.title} ({d.url}): {d.content}" for d in docs)
    return text[:budget]


class FutureXAgent(ForecastAgent):
    """The main agent with FutureX evidence rows: ``full_text`` puts every linked document available before
    the cutoff into the prompt, ``rag`` the top-k cutoff-filtered search hits (no subagent)."""

    def _task_prompt(self, task, bank) -> str:
        if not isinstance(task, FutureXItem) or self.cfg.mode not in ("full_text", "rag"):
            return super()._task_prompt(task, bank)
        if self.search is None:
            docs = []
        elif self.cfg.mode == "full_text":
            docs = getattr(self.search, "question_documents", lambda q, c: [])(task.qid, task.cutoff)
        else:
            docs = self.search.search(task.question, task.cutoff, self.cfg.top_k)
        base = prompts.futurex_prompt(task, bank, "Search is disabled in this run: use the evidence below.")
        evidence = f"Evidence:\n{_evidence_text(docs, self.cfg.context_chars) or '(no documents before the cutoff)'}\n\n"
        marker = "Final answer requirements:"
        return base.replace(marker, evidence + marker, 1) if marker in base else base + "\n\n" + evidence


class FutureXRunner(Runner):
    agent_class = FutureXAgent


class FutureXAccuracy(ValidationMetric):
    """FutureX validation metric (B.6): accuracy over the pool, higher is better; gate items come from the
    cutoff-filtered corpus search with the question text."""

    name = "accuracy"
    lower_is_better = False

    def __init__(self, corpus: FutureXCorpus | None, rel_tol: float = 0.0):
        self.corpus = corpus
        self.rel_tol = rel_tol

    def correct(self, ep) -> bool:
        return is_correct(ep.answer, ep.task, self.rel_tol)

    def score(self, episodes) -> float:
        return sum(self.correct(ep) for ep in episodes) / max(1, len(episodes))

    def episode_result(self, ep) -> dict:
        return {"question": ep.qid, "type": ep.task.qtype, "answer": ep.answer,
                "ground_truth": list(ep.task.ground_truth), "correct": self.correct(ep), "failed": ep.failed}

    def rollout_text(self, ep) -> str:
        return (f"Question: {ep.task.question}\nGround truth: {' | '.join(ep.task.ground_truth)}\n"
                f"Answer: {ep.answer}\nCorrect: {self.correct(ep)}")

    def gate_items(self, task, n: int) -> list[SearchResult]:
        return self.corpus.search(task.question, task.cutoff, max(1, n)) if self.corpus else []


# --------------------------------------------------------------------------- runner


def _resolve(value: str, key: str, example: Path) -> Path:
    if value == EXAMPLE:
        return example
    p = Path(value).expanduser()
    if not p.is_file():
        raise ConfigError(f"{key} {value!r} is not a file (resolved to {str(p.resolve())!r}); point {key} at your "
                          f"copy, or use {key} = \"example\" for the fictional format example shipped with the engine")
    return p


def load_search_provider(spec: str) -> SearchProvider:
    """``"package.module:factory"`` -> ``factory()``, which must return an object with
    ``search(query, cutoff, k) -> list[SearchResult]`` (a web-search API adapter reads its key from the environment)."""
    factory = load_named(spec, "data.search_provider", "package.module:factory")
    provider = factory()
    if not callable(getattr(provider, "search", None)):
        raise ConfigError(f"data.search_provider {spec!r} returned {type(provider).__name__}, which has no "
                          "search(query, cutoff, k) method")
    return provider


def late_items(episodes) -> int:
    """Items a search returned with ``published_date`` after the question's cutoff (must be 0)."""
    late = 0
    for ep in episodes:
        for _, _, dirs in ep.searches:
            for d in dirs:
                raw = json.loads((Path(d) / "raw_data.json").read_text(encoding="utf-8"))
                late += parse_time(raw["item"]["published_date"], d) > ep.task.cutoff
    return late


def futurex_record(ep, ctx, mode: str) -> dict:
    """What one scored FutureX item leaves in ``episodes.parquet``."""
    metric = ctx.metric
    rec = {"qid": ep.qid, "type": ep.task.qtype, "answer": ep.answer, "ground_truth": json.dumps(list(ep.task.ground_truth)),
           "correct": bool(metric.correct(ep)), "failed": bool(ep.failed),
           "experience_tokens": float(ep.experience_per_prompt),
           "searches": json.dumps([[t, q, len(d)] for t, q, d in ep.searches]),
           "memories": json.dumps([{"item": Path(m.item_dir).name, "fallback": m.fallback, "calls": m.calls}
                                   for m in ep.memories], default=str),
           "raw_answer": ep.raw_answer[-400:]}
    if mode not in MEMORY_MODES:  # search items written into the workspace (memory baselines: see late_written)
        rec["late_items"] = late_items([ep])
    return rec


@dataclass(kw_only=True)
class FutureXRun(ForecastRun):
    """The parsed config and data of one FutureX ``toe run``."""

    items_path: Path
    docs_path: Path | None
    tasks: list
    evo: list
    ev: list
    mb_cfg: Any = None  # [memory_baselines] when a memory method runs


class FutureXTask(ForecastTask):
    name = "futurex"
    default_metric = "accuracy"
    run_class = FutureXRun
    load_config = staticmethod(load_futurex_config)

    @staticmethod
    def summary_rows(summary: dict) -> list[dict]:
        from engine.forecast.futurex_metrics import summary_rows

        return summary_rows(summary)

    def _uses_tools(self, exp) -> bool:
        return bool(set(TOOL_MODES) & set(exp.cfg.run.methods))

    def _counts(self, exp) -> dict[str, Any]:
        n = len(exp.tasks)
        return {"items": n if exp.cfg.data.path != EXAMPLE else f"{n} (fictional example)",
                "evolution pool": len(exp.evo), "evaluation items per method": len(exp.evaluated)}

    def _parse(self, config, cfg) -> dict[str, Any]:
        mb_cfg = (load_memory_baselines_config(config)
                  if ("memory_baselines" in config or any(m in MEMORY_MODES for m in cfg.run.methods)) else None)
        items_path = _resolve(cfg.data.path, "data.path", EXAMPLE_ITEMS)
        tasks = load_futurex_tasks(items_path)
        docs_path = _resolve(cfg.data.documents, "data.documents", EXAMPLE_DOCS) if cfg.data.documents else None
        evo, ev = futurex_split(tasks, cfg.data.n_evo, cfg.data.split_seed)
        if {t.qid for t in evo} & {t.qid for t in ev}:
            raise AssertionError("the FutureX split put an item in both the pool and the evaluation")
        return {"items_path": items_path, "docs_path": docs_path, "tasks": tasks, "evo": evo, "ev": ev,
                "evaluated": ev[: cfg.run.max_questions] if cfg.run.max_questions else ev, "mb_cfg": mb_cfg}

    def _context(self, exp: FutureXRun) -> ForecastContext:
        from engine.embed import make_embedder

        cfg, config = exp.cfg, exp.config
        embedder = make_embedder(exp.embed_cfg)
        corpus = load_futurex_documents(exp.docs_path, embedder) if exp.docs_path else FutureXCorpus()
        if cfg.data.search_provider:
            corpus = FutureXCorpus(corpus.docs, corpus.linked, None, load_search_provider(cfg.data.search_provider))
        items = {t.qid: t for t in list(exp.evo) + list(exp.evaluated)}
        return ForecastContext(
            task=self.name, agent=cfg.agent, subagent=cfg.subagent, sandbox=cfg.sandbox, evolution=cfg.evolution,
            search=corpus, embedder=embedder, items=items, pools={"": [t.qid for t in exp.evo]}, record=futurex_record,
            workspace=worker_path(cfg.run.workspace or exp.out / "workspace"), metric=FutureXAccuracy(corpus,
                                                                                              cfg.data.numeric_rel_tol),
            runner_class=FutureXRunner, memory_baselines=exp.mb_cfg,
            prompts=(worker_prompts(cfg.prompts), config.get("llm")), rel_tol=cfg.data.numeric_rel_tol)

    def runs(self, exp) -> list[RunSpec]:
        return [RunSpec(m, exp.seed) for m in exp.cfg.run.methods]

    def episodes(self, exp, run: RunSpec) -> list[Episode]:
        if self._evolves(exp, run):
            if not exp.evaluated:
                return []
            return evolution_episodes([""], {"": [t.qid for t in exp.evaluated]}, exp.cfg.evolution, run.seed)
        return question_episodes(exp.evaluated, run, exp.ctx)

    def summarize(self, exp, records: list[dict], extras: dict) -> Summary:
        rel = exp.cfg.data.numeric_rel_tol
        ref_all = reference_rows(exp.ev, rel)
        rows: list[tuple[AccuracyRow, str]] = []
        late = 0
        evolution = {cat: d for e in extras.values() for cat, d in (e.get("evolution") or {}).items()}
        for m in exp.cfg.run.methods:
            recs = [r for r in records if r["method"] == m]
            tag = tag_of(recs)
            late += sum(r.get("late_items") or 0 for r in recs) + sum(r.get("late_written") or 0 for r in recs)
            if self._evolves(exp, run=RunSpec(m, exp.seed)):
                rows += [(r, m) for r in self._evolved_rows(exp, recs, tag, evolution)]
                continue
            recs = by_question(recs, exp.evaluated)
            from engine.forecast.evidence_memory import ROW_NAMES

            name = (ROW_NAMES.get(m) or NAMES[m]) + tag
            from engine.forecast.task import mean_experience_tokens

            row = accuracy_row(name, exp.evaluated, [float(r["correct"]) for r in recs], sum(bool(r["failed"]) for r in recs))
            rows.append((replace(row, experience_tokens=mean_experience_tokens(recs)), m))
        meta = {"n_items": len(exp.tasks), "split": {"evo": [t.qid for t in exp.evo], "eval": [t.qid for t in exp.ev]},
                "evaluated": [t.qid for t in exp.evaluated], "reference_all": [to_dict(r) for r in ref_all],
                "prompts": exp.prompts_entry, "usage": usage_total(records), "late_items": late,
                "evolution": evolution}
        if exp.prompts_warning:
            meta["prompts_warning"] = exp.prompts_warning
        if exp.sandbox is not None:
            meta["sandbox"] = exp.sandbox
        return summary_of([(r, "") for r in reference_rows(exp.evaluated, rel)] + rows, meta)

    def _evolved_rows(self, exp, recs, tag, evolution) -> list[AccuracyRow]:
        """The top validated configurations on the evaluation items: top-1 by validation, best on test (C.3)."""
        results = []
        for rank in range(exp.cfg.evolution.top_k):
            rs = [r for r in recs if r.get("kind") == "eval" and r.get("rank") == rank and r.get("configured")]
            if not rs:
                continue
            rs = by_question(rs, exp.evaluated)
            hits = [float(r["correct"]) for r in rs]
            results.append((sum(hits) / max(1, len(hits)), rs[0]["validation"], rs[0]["guide"], rs[0]["bank_version"],
                            hits, sum(bool(r["failed"]) for r in rs)))
        if "" in evolution:
            evolution[""]["top"] = [(r[2], r[3], r[1], r[0]) for r in results]
        if not results:
            return []
        top1 = results[0]
        best = max(results, key=lambda r: r[0])
        return [accuracy_row("ForeDreamer evolved, top-1 by validation" + tag, exp.evaluated, top1[4], top1[5]),
                accuracy_row("ForeDreamer evolved, best of top-k on test (C.3)" + tag, exp.evaluated, best[4],
                             best[5])]

    def report(self, exp, summary: Summary, records, out: Path) -> tuple[str, list[str]]:
        from engine.forecast.run_support import heading

        cfg, meta = exp.cfg, summary.meta
        who, simulated = answered(records)
        if who is None:  # no model answered: the backend the config names
            from engine.forecast.simulated import MODEL_NAME

            llm = exp.llm_cfg
            simulated = llm.backend == "simulated"
            who = (llm.backend, MODEL_NAME if simulated else (llm.model or llm.backend))
        example = cfg.data.path == EXAMPLE
        lines = [heading(TITLE, who, simulated), "",
                 f"Items: {exp.items_path} ({len(exp.tasks)} items" + (
                     "; the FICTIONAL format example shipped with the engine, not FutureX benchmark data"
                     if example else "") + ")",
                 f"Documents: {exp.docs_path or 'none'}; search: "
                 f"{cfg.data.search_provider + ' behind CutoffGuard' if cfg.data.search_provider else 'local corpus'}",
                 f"Split (C.3, seed {cfg.data.split_seed}): {len(exp.evo)} evolution+validation items, {len(exp.ev)} "
                 f"evaluation items; model rows use {len(exp.evaluated)}"]
        lines += ["", "## Reference rows on every evaluation item (accuracy, higher is better)", "",
                  format_accuracy_table([AccuracyRow(**r) for r in meta["reference_all"]])]
        if exp.prompts_warning:
            lines += ["", f"Warning: {exp.prompts_warning}."]
        if exp.sandbox is not None:
            from engine.forecast.sandbox import report_line

            lines += ["", report_line(exp.sandbox)]
        table = [AccuracyRow(**{k: r[k] for k in ("method", "n", "correct", "failed")},
                             experience_tokens=r.get("experience_tokens")) for r in summary.rows]
        model = [r for r, rec in zip(table, summary.rows) if rec["row"] == "model"]
        lines += ["", f"## Model rows on {len(exp.evaluated)} evaluation items, with the reference rows on the same "
                  "items", ""]
        if simulated:
            lines += ["Every model row here comes from the SIMULATED forecasting harness (llm.backend = simulated), "
                      "not from a model.", ""]
        lines += ["Accuracy (higher is better):", "", format_accuracy_table(table), "",
                  "Unusable answers (scored wrong): " + ", ".join(f"{r.method}: {r.failed}" for r in model),
                  f"Search items after their question's cutoff: {meta['late_items']}", f"LLM usage: {meta['usage']}",
                  "", f"Wall time: {time.perf_counter() - exp.t0:.1f} s"]
        return "\n".join(lines), []


TASK = FutureXTask()
