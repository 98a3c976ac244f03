"""``toe run configs/finance-synthetic.toml``: every method, every seed, IC tables, plots, the tree.

Writes into ``--out DIR``:

- ``summary.json``: ``records`` (one per method x horizon x period: tsIC, csIC
  as the mean over seeds, their standard deviations, backend, model, seeds),
  ``reliability_truth`` (synthetic data: Spearman correlation between each
  Pipe+ToE variant's final reliabilities and the generator's ground truth,
  per seed and horizon), usage per method, the config and the data labels;
- ``table.md``: the tables in the paper's layout (Table 1: tsIC; Table A2:
  Exploitation csIC; Table 3: update-rule ablation at 20 days);
- ``predictions.npz``: ``s f8[N, T, H]`` per method and seed, ``alpha``, ``days``;
- ``tree.csv`` (Pipe+ToE, first seed) and ``tree_<variant>_seed<k>.csv``: the
  path tables; ``tsic_over_time.png`` and ``tree.png``.

Figures produced with ``llm.backend = "simulated"`` are labelled simulated in
every output.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from engine.config import to_dict
from engine.embed import embedder_from_table
from engine.errors import ConfigError
from engine.finance.config import FinanceConfig, load_finance_config
from engine.finance.data import Market, load_market
from engine.finance.methods import Baseline, Pipe, PipeMemory, StreamContext
from engine.finance.metrics import period_ics, spearman
from engine.finance.simulated import FinancePolicy
from engine.finance.synthetic import eval_days, generate_market
from engine.finance.toe import PipeToE
from engine.llm.base import MeteredBackend
from engine.llm.config import load_llm_config


def build_market(cfg: FinanceConfig) -> Market:
    if cfg.data.source == "synthetic":
        return generate_market(cfg.synthetic, cfg.protocol.horizons)
    return load_market(cfg.data.news, cfg.data.prices, cfg.protocol.horizons)


def evaluation_days(market: Market, cfg: FinanceConfig) -> np.ndarray:
    days = eval_days(market)
    if cfg.protocol.max_days:
        days = days[: cfg.protocol.max_days]
    if days.size < 3:
        raise ConfigError(f"the stream has {days.size} evaluable trading days; need at least 3 "
                          f"(days with every horizon's return known)")
    return days


def make_llm(config: dict, cfg: FinanceConfig, seed: int):
    """The ``[llm]`` backend; ``simulated`` answers with this task's policy (``[simulated_finance]``), seeded by the run."""
    from dataclasses import replace

    from engine.llm.factory import make_backend

    return make_backend(replace(load_llm_config(config.get("llm")), seed=seed), policy=FinancePolicy(cfg.simulated_finance))


def build_method(name: str, ctx: StreamContext, cfg: FinanceConfig, n_channels: int):
    if name == "Baseline":
        return Baseline(ctx)
    if name == "Pipe":
        return Pipe(ctx)
    if name == "Pipe+Mem0":
        return PipeMemory(ctx, "mem0", cfg.memory)
    if name == "Pipe+MemRL":
        return PipeMemory(ctx, "memrl", cfg.memory)
    if name == "Pipe+ToE":
        return PipeToE(ctx, cfg.toe, "formula", n_channels)
    if name == "Pipe+ToE (LLM update)":
        return PipeToE(ctx, cfg.toe, "llm", n_channels)
    raise ConfigError(f"unknown method {name!r}")


def run_method(method, llm, days: np.ndarray, n_industries: int, n_h: int, progress=None) -> np.ndarray:
    """Step ``method`` through ``days`` in order; returns predictions ``f8[N, len(days), H]``."""
    preds = np.full((n_industries, days.size, n_h), np.nan)
    for j, d in enumerate(days.tolist()):
        preds[:, j] = method.step(d, llm)
        if progress is not None:
            progress(1)
    return preds


def reliability_truth(method: PipeToE, truth: dict) -> dict:
    """Spearman correlation of final reliabilities with the generator's ``reading_truth``, per horizon.

    An experience's channel is the channel of most news items that selected it;
    experiences never selected are left out (they hold the prior q0).
    """
    tree = method.tree
    ch = method.channel_hits
    ok = tree.active & (ch.sum(axis=1) > 0)
    eids = np.flatnonzero(ok)
    chan = ch[eids].argmax(axis=1)
    rt = np.asarray(truth["reading_truth"])
    out = {"n_experiences": int(eids.size), "spearman": {}, "mean_q_by_role": {}}
    for k, h in enumerate(tree.horizons):
        out["spearman"][str(h)] = spearman(tree.q[eids, k], rt[chan, k])
        roles = {}
        for role in ("predictive", "noise", "misleading"):
            m = np.asarray([truth["roles"][c] == role for c in chan], dtype=bool)
            roles[role] = float(tree.q[eids[m], k].mean()) if m.any() else None
        out["mean_q_by_role"][str(h)] = roles
    return out


def run(config: dict, options) -> int:
    t_start = time.perf_counter()
    if getattr(options, "executor", "local") != "local":
        raise ConfigError(
            f"task 'finance' runs day by day in one process (each day's merges need the LLM before the next "
            f"day); --executor must be 'local', got {options.executor!r}")
    cfg = load_finance_config(config)
    llm_cfg = load_llm_config(config.get("llm"))  # validate before any work
    import engine.baselines.prompts  # noqa: F401  (registers the baselines' prompts)
    from engine import templates
    from engine.finance import prompts as _prompts  # noqa: F401  (registers the finance prompts)

    prompt_sets, prompts_warning = templates.activate_for_run(
        [("finance", cfg.prompts.file), ("baselines", cfg.prompts.baselines)], llm_cfg)
    embedder = embedder_from_table(config.get("embed"))
    market = build_market(cfg)
    days = evaluation_days(market, cfg)
    out_dir = Path(options.out) if options.out is not None else Path("runs") / Path(options.config_path).stem
    out_dir.mkdir(parents=True, exist_ok=True)
    n, h = market.n_industries, len(market.horizons)
    n_channels = len(market.truth["channels"]) if market.truth else 0

    bar = None
    if options.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cfg.seeds) * len(cfg.methods) * days.size, desc="finance", unit="day")
    preds: dict[str, dict[int, np.ndarray]] = {m: {} for m in cfg.methods}
    usage: dict[str, dict] = {}
    truth_corr: dict[str, dict] = {}
    trees = {}
    backend, model = "", ""
    for seed in cfg.seeds:
        for name in cfg.methods:
            llm = MeteredBackend(make_llm(config, cfg, seed))
            backend, model = llm.answered_by  # a replay: the backend that recorded the trace
            ctx = StreamContext(market, cfg.protocol, cfg.sampling, seed, embedder)
            method = build_method(name, ctx, cfg, n_channels)
            t0 = time.perf_counter()
            preds[name][seed] = run_method(method, llm, days, n, h, bar.update if bar else None)
            u = usage.setdefault(name, {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "wall_s": 0.0,
                                        "stats": {}})
            u["calls"] += llm.meter.total.calls
            u["prompt_tokens"] += llm.meter.total.prompt_tokens
            u["completion_tokens"] += llm.meter.total.completion_tokens
            u["wall_s"] += time.perf_counter() - t0
            for k, v in method.stats.items():
                u["stats"][k] = u["stats"].get(k, 0) + int(v)
            if isinstance(method, PipeToE):
                trees[(name, seed)] = method.tree
                tag = "formula" if method.update == "formula" else "llm"
                method.tree.save_csv(out_dir / f"tree_{tag}_seed{seed}.csv")
                if name == "Pipe+ToE" and seed == cfg.seeds[0]:
                    method.tree.save_csv(out_dir / "tree.csv")
                if market.truth is not None:
                    truth_corr.setdefault(name, {})[str(seed)] = reliability_truth(method, market.truth)
    if bar is not None:
        bar.close()

    alpha = market.alpha[:, days, :]
    simulated = backend == "simulated"
    labels = {
        "data": "synthetic" if cfg.data.source == "synthetic" else "files",
        "policy": "simulated" if simulated else f"{backend}:{model}",
        "label": (f"{cfg.data.source} data, SIMULATED policy ({model})" if simulated
                  else f"{cfg.data.source} data, backend {backend}:{model}"),
    }
    records = []
    for name in cfg.methods:
        per_seed = {s: period_ics(p, alpha) for s, p in preds[name].items()}
        for period in ("Exploitation", "Overall"):
            for k, hz in enumerate(market.horizons):
                ts = np.array([per_seed[s][period]["tsIC"][k] for s in cfg.seeds])
                cs = np.array([per_seed[s][period]["csIC"][k] for s in cfg.seeds])
                records.append({
                    "method": name, "horizon": int(hz), "period": period,
                    "tsIC": _f(np.nanmean(ts)), "csIC": _f(np.nanmean(cs)),
                    "tsIC_std": _f(np.nanstd(ts)), "csIC_std": _f(np.nanstd(cs)),
                    "tsIC_per_seed": [_f(x) for x in ts], "csIC_per_seed": [_f(x) for x in cs],
                    "backend": backend, "model": model, "seeds": list(cfg.seeds), "label": labels["label"],
                })
    summary = {
        "task": "finance", **labels, "backend": backend, "model": model, "simulated": simulated,
        "configured_backend": load_llm_config(config.get("llm")).backend,
        "n_industries": n, "n_days": int(days.size), "first_day": str(market.dates[days[0]]),
        "exploitation_start": str(market.dates[days[days.size // 3]]), "last_day": str(market.dates[days[-1]]),
        "horizons": list(market.horizons), "records": records, "reliability_truth": truth_corr,
        "usage": usage, "wall_s": time.perf_counter() - t_start,
        "prompts": templates.summary_entry(prompt_sets),
        **({"prompts_warning": prompts_warning} if prompts_warning else {}),
        "config": {k: v for k, v in to_dict(cfg).items()},
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default))
    np.savez_compressed(out_dir / "predictions.npz", alpha=alpha, days=days,
                        **{f"{m}|seed{s}": p for m, d in preds.items() for s, p in d.items()})
    from engine.finance.report import markdown_tables, plot_tree, plot_tsic

    table = markdown_tables(summary)
    (out_dir / "table.md").write_text(table)
    if cfg.plots:
        plot_tsic(preds, alpha, market.horizons, out_dir / "tsic_over_time.png", labels["label"])
        first = trees.get(("Pipe+ToE", cfg.seeds[0])) or next(iter(trees.values()), None)
        if first is not None:
            plot_tree(first, out_dir / "tree.png", title=f"Pipe+ToE tree, seed {cfg.seeds[0]} ({labels['label']})")
    print(table)
    print(f"results in {out_dir} ({summary['wall_s']:.0f} s)")
    return 0


def _f(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else round(x, 6)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return _f(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
