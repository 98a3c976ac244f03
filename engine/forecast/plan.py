"""``toe run configs/prophet-arena.toml|futurex.toml --dry-run``: the forecast runs' plans, nothing run.

Every section is parsed as the runner parses it and the data files are read (the
split decides how many questions the model rows use); no model, sandbox or
search index is built.
"""

from __future__ import annotations

from typing import Any, Mapping

PROPHET_ARENA_KEYS = ("data", "run", "agent", "subagent", "sandbox", "evolution", "memory_baselines", "memory",
                      "prompts")
FUTUREX_KEYS = PROPHET_ARENA_KEYS


def _model(config: Mapping[str, Any], options) -> str:
    from engine.forecast.simulated import MODEL_NAME
    from engine.tasks import run_llm

    llm = run_llm(config, options)
    return MODEL_NAME if llm.backend == "simulated" else llm.model


def _workspace(configured: str, options) -> str:
    """Where the agent writes item folders: ``run.workspace``, else the run folder's ``workspace``."""
    from engine.run_folder import run_folder

    return configured or str(run_folder(options) / "workspace")


def plan_prophet_arena(config: Mapping[str, Any], options) -> dict[str, Any]:
    from engine.config import from_dict
    from engine.forecast.config import load_forecast_config
    from engine.forecast.data import category_splits, load_prophet_arena, train_ids_from_files
    from engine.forecast.evidence_memory import MemoryBaselinesConfig
    from engine.forecast.task import data_path as _data_path

    cfg = load_forecast_config(config)
    from engine.forecast.evidence_memory import memory_baselines_table

    from_dict(MemoryBaselinesConfig, memory_baselines_table(config), "forecast.memory_baselines")
    path = _data_path(cfg)
    questions = load_prophet_arena(path, cfg.data.categories) if cfg.data.categories else load_prophet_arena(path)
    evo_ids = train_ids_from_files(path) if (cfg.data.use_train_files and path.is_dir()) else None
    splits = category_splits(questions, cfg.data.n_evo, cfg.data.split_seed, evo_ids)
    n_eval = sum(min(len(s.eval), cfg.run.max_questions) if cfg.run.max_questions else len(s.eval) for s in splits)
    return {
        "methods": list(cfg.run.methods), "seeds": [load_llm_seed(config, options)],
        "episodes": {"questions loaded": len(questions), "categories": len(splits),
                     "held-out questions per method": n_eval, "evolve": cfg.run.evolve,
                     "workspace": _workspace(cfg.run.workspace, options)},
        "model": _model(config, options), "checkpoint": _checkpoint(cfg, options),
    }


def _checkpoint(cfg, options) -> str | None:
    if not cfg.run.checkpoint:
        return None
    from engine.run_folder import run_folder

    return str(run_folder(options) / "checkpoint")


def plan_futurex(config: Mapping[str, Any], options) -> dict[str, Any]:
    from engine.forecast.futurex_config import EXAMPLE, load_futurex_config, load_memory_baselines_config
    from engine.forecast.futurex_task import _resolve
    from engine.forecast.futurex_tasks import EXAMPLE_DOCS, EXAMPLE_ITEMS, futurex_split, load_futurex_tasks

    cfg = load_futurex_config(config)
    load_memory_baselines_config(config)
    tasks = load_futurex_tasks(_resolve(cfg.data.path, "data.path", EXAMPLE_ITEMS))
    if cfg.data.documents:
        _resolve(cfg.data.documents, "data.documents", EXAMPLE_DOCS)
    evo, ev = futurex_split(tasks, cfg.data.n_evo, cfg.data.split_seed)
    n_eval = min(len(ev), cfg.run.max_questions) if cfg.run.max_questions else len(ev)
    return {
        "methods": list(cfg.run.methods), "seeds": [load_llm_seed(config, options)],
        "episodes": {"items": len(tasks) if cfg.data.path != EXAMPLE else f"{len(tasks)} (fictional example)",
                     "evolution pool": len(evo), "evaluation items per method": n_eval, "evolve": cfg.run.evolve,
                     "workspace": _workspace(cfg.run.workspace, options)},
        "model": _model(config, options), "checkpoint": _checkpoint(cfg, options),
    }


def load_llm_seed(config: Mapping[str, Any], options) -> int:
    """The forecast runners run once, with ``llm.seed``."""
    from engine.tasks import run_llm

    return run_llm(config, options).seed
