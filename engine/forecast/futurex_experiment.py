"""``toe run configs/futurex.toml``: ForeDreamer and reference rows on FutureX questions (paper C.2 to C.4).

1. Load a FutureX JSON/JSONL file (``data.path``; ``"example"`` = the fictional
   format example shipped in ``engine/data``) into :class:`FutureXTask` items
   with a question type (single choice, multi choice, ranking, numerical, open)
   and the documents file (``data.documents``) into a cutoff-aware corpus.
2. Split (C.3): ``data.n_evo`` items sampled with ``data.split_seed`` form the
   evolution+validation pool (paper: 20 of 208), every other item is
   evaluation; an item whose question text repeats a pool item's is dropped.
3. Reference rows that need no model on the evaluated items: the expected
   accuracy of a uniform random guess, and the first option / listed order.
4. Model rows on the first ``run.max_questions`` evaluation items:
   ``foredreamer`` (seed MemGuide and empty Experience Bank, or with
   ``run.evolve`` dual-track evolution on the pool ranked by FutureX accuracy,
   then the top validated configurations on the evaluation items),
   ``full_text`` (every document linked to the question and available before
   its cutoff in the prompt), ``rag`` (the top-k cutoff-filtered search hits)
   and the memory baselines applied to the retrieved evidence (``mem0``,
   ``memrl``, ``reme``, ``flex``: :mod:`engine.forecast.memory_baselines`; FutureX
   items get their evidence layer only).
5. Accuracy per question type and overall, printed and written to
   ``summary.json`` / ``table.md`` under ``--out``.

Formats and scoring: :mod:`engine.forecast.futurex_tasks` (items),
:mod:`engine.forecast.futurex_corpus` (documents), :mod:`engine.forecast.futurex_metrics` (rows).
``llm.backend = "simulated"`` uses
:class:`SimulatedForecastBackend`; every row it produces is labelled ``simulated``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from engine.config import to_dict
from engine.embed import embedder_from_table
from engine.errors import ConfigError
from engine.forecast import prompts
from engine.forecast.agent import MEMORY_MODES, ForecastAgent
from engine.forecast.data import FutureXItem, parse_time
from engine.forecast.evolution import Evolution, ExperienceBank, Runner
from engine.forecast.validation_metric import ValidationMetric
from engine.forecast.futurex_config import (
    EXAMPLE, FutureXConfig, load_futurex_config, load_memory_baselines_config,
)
from engine.forecast.futurex_corpus import FutureXCorpus, load_futurex_documents
from engine.forecast.futurex_metrics import AccuracyRow, accuracy_row, format_accuracy_table, reference_rows
from engine.forecast.futurex_tasks import EXAMPLE_DOCS, EXAMPLE_ITEMS, futurex_split, is_correct, load_futurex_tasks
from engine.forecast.memtools import ProceduralStore
from engine.forecast.run_support import (RunProgress, RunWorkspace, close_llm, heading, make_llm, model_tag,
                                         use_prompts, write_outputs)
from engine.forecast.search import SearchProvider, SearchResult
from engine.forecast.seed_tools import DEFAULT_GUIDE, seed_tool_sources

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
    import importlib

    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"data.search_provider must look like 'package.module:factory', got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"data.search_provider {spec!r} cannot be loaded: {exc}") from exc
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


def _details(eps, metric: FutureXAccuracy) -> list[dict]:
    return [{"qid": e.qid, "type": e.task.qtype, "answer": e.answer, "ground_truth": list(e.task.ground_truth),
             "correct": metric.correct(e), "failed": e.failed, "searches": e.searches,
             "memories": [{"item": str(m.item_dir), "fallback": m.fallback, "calls": m.calls} for m in e.memories],
             "raw_answer": e.raw_answer[-400:]} for e in eps]


NAMES = {"foredreamer": "ForeDreamer (seed guide, empty bank)", "full_text": "Full Text", "rag": "RAG",
         "no_information": "No Information (model, no search)",
                        "market_informed": "Market-informed ForeDreamer (engine option)"}


def run(config: dict, options) -> int:
    cfg: FutureXConfig = load_futurex_config(config)
    prompts_entry, prompts_warning = use_prompts(cfg.prompts, config)
    mb_cfg = (load_memory_baselines_config(config)
              if ("memory_baselines" in config or any(m in MEMORY_MODES for m in cfg.run.methods)) else None)
    items_path = _resolve(cfg.data.path, "data.path", EXAMPLE_ITEMS)
    tasks = load_futurex_tasks(items_path)
    docs_path = _resolve(cfg.data.documents, "data.documents", EXAMPLE_DOCS) if cfg.data.documents else None
    evo, ev = futurex_split(tasks, cfg.data.n_evo, cfg.data.split_seed)
    assert not {t.qid for t in evo} & {t.qid for t in ev}
    evaluated = ev[: cfg.run.max_questions] if cfg.run.max_questions else ev
    out = Path(options.out) if getattr(options, "out", None) else None
    t0 = time.perf_counter()
    example = cfg.data.path == EXAMPLE

    lines = [heading("ForeDreamer on FutureX"), "",
             f"Items: {items_path} ({len(tasks)} items" + ("; the FICTIONAL format example shipped with the engine, "
                                                            "not FutureX benchmark data" if example else "") + ")",
             f"Documents: {docs_path or 'none'}; search: "
             f"{cfg.data.search_provider + ' behind CutoffGuard' if cfg.data.search_provider else 'local corpus'}",
             f"Split (C.3, seed {cfg.data.split_seed}): {len(evo)} evolution+validation items, {len(ev)} evaluation "
             f"items; model rows use {len(evaluated)}"]
    rel = cfg.data.numeric_rel_tol
    ref_all = reference_rows(ev, rel)
    lines += ["", "## Reference rows on every evaluation item (accuracy, higher is better)", "",
              format_accuracy_table(ref_all)]
    summary: dict = {"config": config, "n_items": len(tasks), "split": {"evo": [t.qid for t in evo],
                                                                        "eval": [t.qid for t in ev]},
                     "evaluated": [t.qid for t in evaluated], "reference_all": [to_dict(r) for r in ref_all],
                     "prompts": prompts_entry}
    if prompts_warning:
        summary["prompts_warning"] = prompts_warning
        lines += ["", f"Warning: {prompts_warning}."]
    tool_methods = {"foredreamer", "market_informed"} & set(cfg.run.methods)
    if tool_methods:  # MemTools run: the sandbox must work before any LLM call
        from engine.forecast.sandbox import preflight, report_line

        summary["sandbox"] = preflight(cfg.sandbox)
        lines += ["", report_line(summary["sandbox"])]
    llm, simulated = make_llm(config)
    tag = model_tag(llm, simulated)
    lines[0] = heading("ForeDreamer on FutureX", llm, simulated)
    summary.update(backend=llm.answered_by[0], model=llm.answered_by[1], simulated=simulated)
    embedder = embedder_from_table(config.get("embed"))
    corpus = load_futurex_documents(docs_path, embedder) if docs_path else FutureXCorpus()
    if cfg.data.search_provider:
        corpus = FutureXCorpus(corpus.docs, corpus.linked, None, load_search_provider(cfg.data.search_provider))
    metric = FutureXAccuracy(corpus, rel)
    rows: list[AccuracyRow] = []
    details: dict = {}
    late = 0
    workspace = RunWorkspace(cfg.run.workspace, out, "futurex-")
    ws = workspace.path
    try:
        store = seed_gid = None
        if tool_methods:  # only ForeDreamer (and its market-informed variant) runs MemTools (sandboxed)
            store = ProceduralStore(ws / "procedural", cfg.sandbox)
            seed_gid = store.seed(seed_tool_sources(), DEFAULT_GUIDE)
        progress = RunProgress(len(evaluated) * len(cfg.run.methods), getattr(options, "progress", True),
                               "forecast")
        llm = progress.watch(llm)
        for method in progress.each_method(cfg.run.methods, len(evaluated)):
            if method in MEMORY_MODES:
                from engine.forecast.evidence_memory import ROW_NAMES
                from engine.forecast.memory_baselines import MemoryBaselineRunner

                mr = MemoryBaselineRunner(method, llm, corpus, cfg.agent, mb_cfg, embedder, ws / f"rollouts-{method}")
                eps = mr.rollouts(evaluated)
                rows.append(accuracy_row(ROW_NAMES[method] + tag, evaluated, [float(metric.correct(e)) for e in eps],
                                         sum(e.failed for e in eps)))
                details[method] = _details(eps, metric)
                for d, e in zip(details[method], eps):
                    d["written"] = [h.origin for h in mr.written.get(e.qid, [])]
                late += sum(h.available_at > e.task.cutoff for e in eps for h in mr.written.get(e.qid, []))
                continue
            acfg = replace(cfg.agent, mode=method)
            r = FutureXRunner(llm, corpus, acfg, ws / f"rollouts-{method}", store, cfg.subagent.mode,
                              cfg.subagent.max_steps, cfg.sandbox, metric=metric,
                              subagent_tokens=cfg.subagent.max_tokens, subagent_chars=cfg.subagent.max_chars)
            if method == "foredreamer" and cfg.run.evolve:
                new_rows, late_e = _evolved_rows(cfg, llm, r, store, evo, evaluated, metric, tag, details)
                rows += new_rows
                late += late_e
                continue
            guide = store.guides[seed_gid] if store is not None else DEFAULT_GUIDE
            paths = store.tool_paths(guide["tool_names"]) if store is not None else {}
            eps = r.rollouts(evaluated, guide, paths)
            late += late_items(eps)
            rows.append(accuracy_row(NAMES[method] + tag, evaluated, [float(metric.correct(e)) for e in eps],
                                     sum(e.failed for e in eps)))
            details[method] = _details(eps, metric)
        progress.done(len(evaluated))
        progress.close()
        summary["usage"] = to_dict(llm.meter.total)
    finally:
        close_llm(llm)
        workspace.cleanup()
    table = reference_rows(evaluated, rel) + rows
    lines += ["", f"## Model rows on {len(evaluated)} evaluation items, with the reference rows on the same items", ""]
    if simulated:
        lines += ["Every model row here comes from the SIMULATED forecasting harness (llm.backend = simulated), "
                  "not from a model.", ""]
    lines += ["Accuracy (higher is better):", "", format_accuracy_table(table), "",
              "Unusable answers (scored wrong): " + ", ".join(f"{r.method}: {r.failed}" for r in rows),
              f"Search items after their question's cutoff: {late}", f"LLM usage: {summary['usage']}",
              "", f"Wall time: {time.perf_counter() - t0:.1f} s"]
    summary.update(rows=[to_dict(r) for r in table], details=details, late_items=late)
    write_outputs("\n".join(lines), summary, out)
    return 0


def _evolved_rows(cfg, llm, runner, store, evo, evaluated, metric, tag, details) -> tuple[list[AccuracyRow], int]:
    """Evolve on the pool (ranked by accuracy), evaluate the top validated configurations on the evaluation items."""
    evolution = Evolution(llm, runner, store, evo, cfg.evolution, ExperienceBank())
    evolution.run()
    results, late = [], 0
    for bank, gid, val in evolution.top_configurations():
        eps = runner.rollouts(evaluated, store.guides[gid], store.tool_paths(store.guides[gid]["tool_names"]), bank)
        late += late_items(eps)
        results.append((metric.score(eps), val, gid, bank.version, eps))
    details["evolution"] = {"log": evolution.log, "tree_edges": evolution.tree.edges,
                            "top": [(r[2], r[3], r[1], r[0]) for r in results]}
    if not results:
        return [], late
    top1 = results[0]
    best = max(results, key=lambda r: r[0])
    details["foredreamer_evolved_top1"] = _details(top1[4], metric)
    return [accuracy_row("ForeDreamer evolved, top-1 by validation" + tag, evaluated,
                         [float(metric.correct(e)) for e in top1[4]], sum(e.failed for e in top1[4])),
            accuracy_row("ForeDreamer evolved, best of top-k on test (C.3)" + tag, evaluated,
                         [float(metric.correct(e)) for e in best[4]], sum(e.failed for e in best[4]))], late
