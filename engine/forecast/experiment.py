"""``toe run configs/prophet-arena.toml``: ForeDreamer and reference rows on Prophet Arena questions.

1. Load every CSV under ``data.path`` (deduplicated), keep ``data.categories``,
   split each category (evolution+validation pool vs held-out evaluation, C.3).
2. Reference rows that need no model (No Information, Market) on EVERY loaded
   question, and again on exactly the questions the model rows use.
3. Model rows on the first ``run.max_questions`` evaluation questions of each
   category: ``foredreamer`` (seed MemGuide and empty Experience Bank, or,
   with ``run.evolve``, per-category dual-track evolution on the pool, then the
   top validated configurations on the held-out questions, reporting the best
   of them as C.3 does and the top-1 by validation), ``full_text``, ``rag``,
   and the memory baselines applied to the retrieved evidence (``mem0``,
   ``memrl``, ``reme``, ``flex``; rows "Mem0 (evidence)" etc., see
   :mod:`engine.forecast.memory_baselines` and ``[memory_baselines]``).
4. Print the Brier / accuracy / market-return tables and write
   ``summary.json`` and ``table.md`` to ``--out`` when given.

``llm.backend = "simulated"`` uses :class:`SimulatedForecastBackend`; every
row it produces is labelled ``simulated``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from pathlib import Path

from engine.config import to_dict
from engine.embed import embedder_from_table
from engine.errors import ConfigError
from engine.forecast.config import ForecastConfig, load_forecast_config
from engine.forecast.data import category_splits, load_prophet_arena, train_ids_from_files
from engine.forecast.evolution import Evolution, ExperienceBank, Runner
from engine.forecast.evidence_memory import ROW_NAMES
from engine.forecast.memory_baselines import MemoryBaselineRunner
from engine.forecast.memtools import ProceduralStore
from engine.forecast.metrics import Row, format_table, reference_rows, score
from engine.forecast.run_support import (RunProgress, RunWorkspace, close_llm, heading, make_llm, model_tag,
                                         use_prompts, write_outputs)
from engine.forecast.sandbox import preflight, report_line
from engine.forecast.search import corpus_from_questions
from engine.forecast.seed_tools import DEFAULT_GUIDE, seed_tool_sources


def _data_path(cfg: ForecastConfig) -> Path:
    p = Path(cfg.data.path).expanduser()
    if not p.exists():
        raise ConfigError(
            f"data.path {cfg.data.path!r} does not exist (resolved to {str(p.resolve())!r}); the engine ships no "
            f"Prophet Arena data: point data.path at your copy, e.g. --set data.path=../shared/data/forecast/prophet_arena"
        )
    return p


def run(config: dict, options) -> int:
    cfg = load_forecast_config(config)
    prompts_entry, prompts_warning = use_prompts(cfg.prompts, config)
    path = _data_path(cfg)
    all_questions = load_prophet_arena(path)
    questions = load_prophet_arena(path, cfg.data.categories) if cfg.data.categories else all_questions
    evo_ids = train_ids_from_files(path) if (cfg.data.use_train_files and path.is_dir()) else None
    splits = category_splits(questions, cfg.data.n_evo, cfg.data.split_seed, evo_ids)
    out = Path(options.out) if getattr(options, "out", None) else None
    t0 = time.perf_counter()

    lines = [heading("ForeDreamer on Prophet Arena"), "",
             f"Data: {path} ({len(all_questions)} unique questions; model rows use {len(splits)} categories)"]
    ref_all = reference_rows(all_questions, cfg.run.scorer)
    lines += ["", "## Reference rows on every loaded question (Brier, lower is better)", "",
              format_table(ref_all, "brier"), "", "Market return (gross, risk-neutral bettor, $1 per event):", "",
              format_table(ref_all, "market_return")]

    evaluated = []
    for s in splits:
        ev = list(s.eval)
        evaluated += ev[: cfg.run.max_questions] if cfg.run.max_questions else ev
    rows: list[Row] = []
    summary = {"config": config, "n_questions": len(all_questions), "splits": {
        s.category: {"evo": [q.qid for q in s.evo], "eval": [q.qid for q in s.eval]} for s in splits},
        "reference_all": [to_dict(r) for r in ref_all], "prompts": prompts_entry}
    if prompts_warning:
        summary["prompts_warning"] = prompts_warning
        lines += ["", f"Warning: {prompts_warning}."]
    if not evaluated:
        lines += ["", "No held-out evaluation questions in the selected categories (every question is in the "
                  "evolution pool); model rows skipped."]
    else:
        if any(m not in ROW_NAMES for m in cfg.run.methods):  # MemTools run: the sandbox must work first
            summary["sandbox"] = preflight(cfg.sandbox)
            lines += ["", report_line(summary["sandbox"])]
        llm, simulated = make_llm(config)
        tag = model_tag(llm, simulated)
        lines[0] = heading("ForeDreamer on Prophet Arena", llm, simulated)
        summary.update(backend=llm.answered_by[0], model=llm.answered_by[1], simulated=simulated)
        embedder = embedder_from_table(config.get("embed"))
        if cfg.data.search == "sources":
            search = corpus_from_questions(questions, embedder)
        else:  # the paper's web providers, behind the same cutoff guard as every provider
            from engine.forecast.search import CutoffGuard
            from engine.forecast.web_search import web_search

            search = CutoffGuard(web_search(cfg.data.search, cfg.agent.context_chars, cfg.data.tavily_url,
                                            cfg.data.firecrawl_url))
        summary["search"] = cfg.data.search
        workspace = RunWorkspace(cfg.run.workspace, out, "foredreamer-")
        ws = workspace.path
        try:
            store = runner = seed_gid = None
            if any(m not in ROW_NAMES for m in cfg.run.methods):  # the memory baselines need no MemGuide store
                store = ProceduralStore(ws / "procedural", cfg.sandbox)
                seed_gid = store.seed(seed_tool_sources(), DEFAULT_GUIDE)
                runner = Runner(llm, search, cfg.agent, ws / "rollouts", store, cfg.subagent.mode,
                                cfg.subagent.max_steps, cfg.sandbox,
                                subagent_tokens=cfg.subagent.max_tokens, subagent_chars=cfg.subagent.max_chars)
            details, notes = {}, []
            progress = RunProgress(len(evaluated) * len(cfg.run.methods), getattr(options, "progress", True),
                                   "forecast")
            llm = progress.watch(llm)
            for method in progress.each_method(cfg.run.methods, len(evaluated)):
                if method in ROW_NAMES:
                    mr = MemoryBaselineRunner(method, llm, search, cfg.agent, cfg.memory_baselines, embedder,
                                              ws / f"rollouts-{method}")
                    eps = mr.rollouts(evaluated)
                    rows.append(score(ROW_NAMES[method] + tag, evaluated, [e.probs for e in eps],
                                      sum(e.failed for e in eps), cfg.run.scorer))
                    details[method] = [{"qid": e.qid, "probs": e.probs, "failed": e.failed, "searches": e.searches,
                                        "evidence": [{k: v for k, v in r.items() if k != "text"} for r in e.evidence],
                                        "experience_visible": [k for k, _ in mr.visible.get(e.qid, [])],
                                        "raw_answer": e.raw_answer[-400:]} for e in eps]
                    seen = [len(mr.visible.get(e.qid, [])) for e in eps]
                    sizes = [len(r["text"]) for e in eps for r in e.evidence]
                    notes.append(f"{ROW_NAMES[method]}: {sum(len(v) for v in mr.written.values())} search results "
                                 f"written to per-question memories, {mr.dropped} after a cutoff dropped; tool results "
                                 f"{sum(sizes) / max(1, len(sizes)):.0f} characters on average; "
                                 + (f"resolved outcomes in the experience memory per question: mean "
                                    f"{sum(seen) / len(seen):.1f}, max {max(seen)}; {len(mr.batches)} batches"
                                    if mr.track is not None else "no experience layer"))
                    continue
                if method == "foredreamer" and cfg.run.evolve:
                    rows += _evolved_rows(cfg, llm, runner, store, splits, tag, details)
                    continue
                acfg = replace(cfg.agent, mode=method)
                r = Runner(llm, search, acfg, ws / f"rollouts-{method}", store, cfg.subagent.mode,
                           cfg.subagent.max_steps, cfg.sandbox,
                                subagent_tokens=cfg.subagent.max_tokens, subagent_chars=cfg.subagent.max_chars)
                eps = r.rollouts(evaluated, store.guides[seed_gid], store.tool_paths(store.guides[seed_gid]["tool_names"]))
                name = {"foredreamer": "ForeDreamer (seed guide, empty bank)", "full_text": "Full Text",
                        "rag": "RAG", "no_information": "No Information (model, no search)",
                        "market_informed": "Market-informed ForeDreamer (engine option)"}[method]
                rows.append(score(name + tag, evaluated, [e.probs for e in eps], sum(e.failed for e in eps), cfg.run.scorer))
                details[method] = [{"qid": e.qid, "probs": e.probs, "failed": e.failed, "searches": e.searches,
                                    "memories": [{"item": str(m.item_dir), "fallback": m.fallback, "calls": m.calls}
                                                 for m in e.memories],
                                    "raw_answer": e.raw_answer[-400:]} for e in eps]
            progress.done(len(evaluated))
            progress.close()
            summary["details"] = details
            summary["usage"] = to_dict(llm.meter.total)
        finally:
            close_llm(llm)
            workspace.cleanup()
        ref_eval = reference_rows(evaluated, cfg.run.scorer)
        table = ref_eval + rows
        lines += ["", f"## Model rows on {len(evaluated)} held-out questions (first {cfg.run.max_questions or 'all'} "
                  "per category), with the reference rows on the same questions", ""]
        if simulated:
            lines += ["Every model row here comes from the SIMULATED forecasting harness (llm.backend = simulated), "
                      "not from a model.", ""]
        lines += [SCORER_NOTE[cfg.run.scorer], ""]
        lines += ["Brier (lower is better):", "", format_table(table, "brier"), "", "Accuracy (market-level):", "",
                  format_table(table, "accuracy"), "", "Market return:", "", format_table(table, "market_return"), "",
                  "Unusable answers (scored as Uniform): " + ", ".join(f"{r.method}: {r.failed}" for r in rows),
                  f"LLM usage: {summary['usage']}"]
        if notes:
            lines += ["", "Memory baselines (evidence):"] + [f"- {n}" for n in notes]
        summary["rows"] = [to_dict(r) for r in table]
    lines += ["", f"Wall time: {time.perf_counter() - t0:.1f} s"]
    write_outputs("\n".join(lines), summary, out)
    return 0


SCORER_NOTE = {
    "pm_rank": "Scores as upstream's scorer computes them (pm-rank 0.3.1, run.scorer = \"pm_rank\"): Brier and return "
               "over the markets with price data, an omitted market at 0, Yes-or-No bets per market; Market's return "
               "is pm-rank's market-price predictor's. Accuracy: p >= 0.5 against the outcome on the same markets.",
    "listed": "Scores by the engine's own definitions (run.scorer = \"listed\"): every listed market, $1 on the Yes "
              "contract with the largest p / ask.",
}


def _category_store(base: ProceduralStore, category: str, cfg) -> ProceduralStore:
    """A fresh procedural store next to ``base``, seeded with the seed tools and guide only."""
    safe = "".join(c if c.isalnum() else "_" for c in category)
    store = ProceduralStore(base.root.parent / f"procedural-{safe}", cfg.sandbox)
    if not store.guides:
        store.seed(seed_tool_sources(), DEFAULT_GUIDE)
    return store


def _evolved_rows(cfg, llm, runner, store, splits, tag, details) -> list[Row]:
    """Per category: evolve on the pool, evaluate the top validated configurations on held-out questions."""
    best_q, best_p, top1_q, top1_p, failed = [], [], [], [], 0
    for s in splits:
        ev_q = list(s.eval)[: cfg.run.max_questions] if cfg.run.max_questions else list(s.eval)
        if not ev_q:
            continue
        if not cfg.evolution.share_across_categories:  # C.3: every category evolves from the seed guide on its own
            store = _category_store(store, s.category, cfg)
            runner = copy.copy(runner)
            runner.store = store
        evo = Evolution(llm, runner, store, s.evo, replace(cfg.evolution, seed=cfg.evolution.seed), ExperienceBank())
        evo.run()
        results = []
        for bank, gid, val in evo.top_configurations():
            eps = runner.rollouts(ev_q, store.guides[gid], store.tool_paths(store.guides[gid]["tool_names"]), bank)
            results.append((score("x", ev_q, [e.probs for e in eps], scorer=cfg.run.scorer).avg_brier, val, gid, bank.version, eps))
        details[f"evolution/{s.category}"] = {"log": evo.log, "tree_edges": evo.tree.edges,
                                               "scores": dict(evo.tree.score), "store": str(store.root),
                                               "categories": {k: list(v) for k, v in evo.categories.items()},
                                               "top": [(r[2], r[3], r[1], r[0]) for r in results]}
        top1 = results[0]
        best = min(results, key=lambda r: r[0])
        for target_q, target_p, r in ((best_q, best_p, best), (top1_q, top1_p, top1)):
            target_q += ev_q
            target_p += [e.probs for e in r[4]]
        failed += sum(e.failed for e in top1[4])
    return [score("ForeDreamer evolved, top-1 by validation" + tag, top1_q, top1_p, failed, cfg.run.scorer),
            score("ForeDreamer evolved, best of top-k on test (C.3)" + tag, best_q, best_p, scorer=cfg.run.scorer)]
