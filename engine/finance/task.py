"""Finance (FinEvolveBench-style news stream) as a :class:`engine.runner.Task`.

Runs are methods x seeds; a run's episodes are one per (evaluated day,
industry) and a round is one trading day (``round_size`` = the number of
industries), so every prediction of a day reads the same snapshot and the
barrier applies the day's updates in episode order (see
:mod:`engine.finance.methods` and :mod:`engine.finance.toe`). The records
(one per day and industry: the prediction ``s`` per horizon, prompt counters)
become the paper's tables here; the store checkpoint of each Pipe+ToE run is
written by :meth:`FinanceTask.after_run`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from engine.finance.config import KEYS, FinanceConfig
from engine.finance.methods import STAT_KEYS, StreamContext, stream_episodes
from engine.runner import RunSpec, Summary

TOE_TAGS = {"Pipe+ToE": "formula", "Pipe+ToE (LLM update)": "llm", "Pipe+ToE (no retrieval)": "noretrieval"}


@dataclass
class FinanceRun:
    """A parsed finance config with what every run shares."""

    cfg: FinanceConfig
    config: Mapping[str, Any]
    llm_cfg: Any
    market: Any
    plan: Any  # engine.finance.experiment.DayPlan
    days: np.ndarray  # plan.days: the pre-test span's days, then the evaluated ones
    embedder: Any
    n_channels: int
    prompt_sets: list
    prompts_warning: str | None


def retrieval_cosines(run: FinanceRun) -> dict | None:
    """Own- vs other-channel cosines of every retained (news, industry) item of the walked days under the
    run's embedder (engine.finance.retrieval.channel_cosines; synthetic data only)."""
    from engine.finance.retrieval import channel_cosines

    ctx = StreamContext(run.market, run.cfg.protocol, run.cfg.sampling, 0, run.embedder)
    pairs = {(k, i) for d in run.days.tolist() for i in range(run.market.n_industries) for k in ctx.retained(i, d)}
    return channel_cosines(run.market, pairs, ctx.news_text, run.embedder, run.cfg.toe.lam)


def tree_dir(spec: RunSpec) -> str:
    """Folder (in the run folder) of the store checkpoint a Pipe+ToE run leaves."""
    return f"tree_{TOE_TAGS[spec.method]}_seed{spec.seed}"


class FinanceTask:
    name = "finance"
    keys = KEYS
    policy = "engine.finance.simulated:policy_for"
    default_metric = "tsIC_20d_Exploitation"
    resume_overrides = {"protocol.checkpoint": True}

    def resolved(self, run: FinanceRun) -> dict:
        """The task's own sections with every default filled in (engine.runner.resolved_config)."""
        from dataclasses import fields

        return {f.name: getattr(run.cfg, f.name) for f in fields(run.cfg)}

    def parse(self, config, options) -> FinanceRun:
        import engine.baselines.prompts  # noqa: F401  (registers the baselines' prompts)
        from engine import templates
        from engine.embed import make_embedder
        from engine.finance import prompts as _prompts  # noqa: F401  (registers the finance prompts)
        from engine.finance.config import check_executor, load_finance_config
        from engine.finance.experiment import build_market, day_plan
        from engine.run_options import run_embed, run_llm

        cfg = load_finance_config(config)
        check_executor(cfg, options)
        llm_cfg = run_llm(config, options)
        sets, warning = templates.activate_for_run(
            [("finance", cfg.prompts.file), ("baselines", cfg.prompts.baselines)], llm_cfg)
        market = build_market(cfg)
        plan = day_plan(market, cfg)
        n_channels = len(market.truth["channels"]) if market.truth else 0
        return FinanceRun(cfg, config, llm_cfg, market, plan, plan.days, make_embedder(run_embed(config, options)),
                          n_channels, sets, warning)

    def plan(self, run: FinanceRun, options) -> dict[str, Any]:
        from engine.finance.experiment import EXPERIENCE_METHODS
        from engine.finance.simulated import MODEL_NAME
        from engine.run_folder import run_folder

        cfg, market, dp = run.cfg, run.market, run.plan
        days = dp.evaluated
        n_exp = sum(m in EXPERIENCE_METHODS for m in cfg.methods)
        return {
            "methods": list(cfg.methods), "seeds": list(cfg.seeds),
            "episodes": {"data": cfg.data.source, "trading days": int(days.size),
                         "evaluated": f"{market.dates[days[0]]}..{market.dates[days[-1]]}",
                         "exploitation from": str(market.dates[days[dp.exploitation]]),
                         "pre-test days": dp.n_pretest,
                         "method-days in all": (int(days.size) * len(cfg.methods) + dp.n_pretest * n_exp) * len(cfg.seeds),
                         "rounds per run": int(days.size) + (dp.n_pretest if n_exp else 0),
                         "episodes per round": int(market.n_industries)},
            "model": MODEL_NAME if run.llm_cfg.backend == "simulated" else run.llm_cfg.model,
            "checkpoint": str(run_folder(options) / "checkpoint") if cfg.protocol.checkpoint else None,
        }

    @staticmethod
    def summary_rows(summary: dict) -> list[dict]:
        from engine.finance.report import summary_rows

        return summary_rows(summary)

    def runs(self, run: FinanceRun) -> list[RunSpec]:
        return [RunSpec(m, s) for s in run.cfg.seeds for m in run.cfg.methods]

    def make_method(self, run: FinanceRun, spec: RunSpec):
        from engine.finance.experiment import build_method

        ctx = StreamContext(run.market, run.cfg.protocol, run.cfg.sampling, spec.seed, run.embedder)
        return build_method(spec.method, ctx, run.days, run.cfg, run.n_channels, run.plan.n_pretest)

    def episodes(self, run: FinanceRun, spec: RunSpec):
        """Every day for the methods that keep experience (the pre-test span first); the others skip it."""
        from engine.finance.experiment import EXPERIENCE_METHODS

        eps = stream_episodes(run.days, run.market.n_industries, spec.seed)
        if spec.method in EXPERIENCE_METHODS:
            return eps
        return [e for e in eps if e.payload[0] >= run.plan.n_pretest]

    def round_size(self, run: FinanceRun, spec: RunSpec) -> int:
        return run.market.n_industries  # one round = one trading day

    def llm_factory(self, run: FinanceRun, spec: RunSpec):
        from engine.finance.experiment import FinanceLLMFactory

        return FinanceLLMFactory(run.llm_cfg, run.cfg, spec.seed)

    def checkpoint(self, run: FinanceRun) -> bool:
        return run.cfg.protocol.checkpoint

    def after_run(self, run: FinanceRun, spec: RunSpec, method, results, out: Path) -> dict[str, Any]:
        if spec.method not in TOE_TAGS:
            return {}
        folder = out / tree_dir(spec)
        method.store.save(folder)
        extra: dict[str, Any] = {"tree": folder.name, "toe_init": method.init_report}
        if run.market.truth is not None:
            extra["reliability_truth"] = reliability_truth(method, run.market.truth)
        return extra

    def summarize(self, run: FinanceRun, records, extras) -> Summary:
        from engine import templates
        from engine.config import to_dict
        from engine.finance.experiment import EXPERIENCE_METHODS
        from engine.finance.metrics import period_ics
        from engine.run_folder import answered_by

        cfg, market, plan = run.cfg, run.market, run.plan
        days = plan.evaluated
        backend, model = answered_by(records, run.llm_cfg)
        simulated = backend == "simulated"
        labels = {
            "data": "synthetic" if cfg.data.source == "synthetic" else "files",
            "policy": "simulated" if simulated else f"{backend}:{model}",
            "label": (f"{cfg.data.source} data, SIMULATED policy ({model})" if simulated
                      else f"{cfg.data.source} data, backend {backend}:{model}"),
        }
        preds = predictions(records, cfg, market.n_industries, days.size, len(market.horizons), plan.n_pretest)
        alpha = market.alpha[:, days, :]
        rows = []
        for name in cfg.methods:
            per_seed = {s: period_ics(p, alpha, split=plan.exploitation) for s, p in preds[name].items()}
            for period in ("Exploitation", "Overall"):
                for k, hz in enumerate(market.horizons):
                    ts = np.array([per_seed[s][period]["tsIC"][k] for s in cfg.seeds])
                    cs = np.array([per_seed[s][period]["csIC"][k] for s in cfg.seeds])
                    rows.append({
                        "method": name, "horizon": int(hz), "period": period,
                        "tsIC": _f(np.nanmean(ts)), "csIC": _f(np.nanmean(cs)),
                        "tsIC_std": _f(np.nanstd(ts)), "csIC_std": _f(np.nanstd(cs)),
                        "tsIC_per_seed": [_f(x) for x in ts], "csIC_per_seed": [_f(x) for x in cs],
                        "backend": backend, "model": model, "simulated": simulated, "seeds": list(cfg.seeds),
                        "label": labels["label"],
                    })
        usage: dict[str, dict] = {}
        for r in records:  # the pre-test span included
            u = usage.setdefault(r["method"], {k: 0 for k in STAT_KEYS})
            for k in STAT_KEYS:
                u[k] += int(r.get(k) or 0)
        for key, e in extras.items():
            name = key.rsplit("-seed", 1)[0]
            if name in usage:
                usage[name]["wall_s"] = usage[name].get("wall_s", 0.0) + float(e.get("wall_s", 0.0))
        for row in rows:  # mean experience tokens per prediction prompt (engine.memory_budget), every row
            u = usage.get(row["method"], {})
            n = u.get("prompts_predict", 0)
            row["experience_tokens"] = u.get("experience_tokens", 0) / n if n else 0.0
            row["experience_fitted"] = u.get("experience_fitted", 0)
        truth = {}
        trees = {}
        inits = {}
        for spec in self.runs(run):
            e = extras.get(spec.key, {})
            if "toe_init" in e:
                inits.setdefault(spec.method, {})[str(spec.seed)] = e["toe_init"]
            if "reliability_truth" in e:
                truth.setdefault(spec.method, {})[str(spec.seed)] = e["reliability_truth"]
            if "tree" in e:
                trees.setdefault(spec.method, {})[str(spec.seed)] = e["tree"]
        meta = {
            **labels, "configured_backend": run.llm_cfg.backend,
            "n_industries": market.n_industries, "n_days": int(days.size), "first_day": str(market.dates[days[0]]),
            "exploitation_start": str(market.dates[days[plan.exploitation]]), "last_day": str(market.dates[days[-1]]),
            "n_exploitation_days": int(days.size - plan.exploitation),
            "pretest": ({"first_day": str(market.dates[plan.days[0]]),
                         "last_day": str(market.dates[plan.days[plan.n_pretest - 1]]), "n_days": plan.n_pretest,
                         "methods": [m for m in cfg.methods if m in EXPERIENCE_METHODS]}
                        if plan.n_pretest else None),
            "news_pairs_dropped": news_pairs_dropped(market, cfg.protocol, plan.days),
            "horizons": list(market.horizons), "seeds": list(cfg.seeds), "reliability_truth": truth,
            "trees": trees, "toe_init": inits, "usage": usage, "prompts": templates.summary_entry(run.prompt_sets),
            "embedder": getattr(run.embedder, "name", type(run.embedder).__name__),
            "retrieval_cosines": (retrieval_cosines(run) if any(m in TOE_TAGS for m in cfg.methods) else None),
            **({"prompts_warning": run.prompts_warning} if run.prompts_warning else {}),
            "config": to_dict(cfg),
        }
        return Summary(rows, meta)

    def report(self, run: FinanceRun, summary: Summary, records, out: Path) -> tuple[str, list[str]]:
        from engine import atomic_io
        from engine.finance.report import markdown_tables, plot_relative_bars, plot_tree, plot_tsic

        cfg, market, plan = run.cfg, run.market, run.plan
        days = plan.evaluated
        tables = markdown_tables(summary.rows, summary.meta)
        preds = predictions(records, cfg, market.n_industries, days.size, len(market.horizons), plan.n_pretest)
        alpha = market.alpha[:, days, :]
        with atomic_io.atomic_writer(out / "predictions.npz", "wb") as fh:
            np.savez_compressed(fh, alpha=alpha, days=days,
                                **{f"{m}|seed{s}": p for m, d in preds.items() for s, p in d.items()})
        pngs = ["predictions.npz"]
        if not cfg.plots:
            return tables, pngs
        label = summary.meta["label"]
        plot_tsic(preds, alpha, market.horizons, out / "tsic_over_time.png", label, split=plan.exploitation)
        plot_relative_bars(summary.rows, out / "tsic_bars.png", label)
        pngs += ["tsic_over_time.png", "tsic_bars.png"]
        trees = summary.meta.get("trees", {})
        first = next((m for m in ("Pipe+ToE", "Pipe+ToE (LLM update)") if m in trees), None)
        if first is not None:
            from engine.store import ExperienceStore

            seed = str(cfg.seeds[0]) if str(cfg.seeds[0]) in trees[first] else next(iter(trees[first]))
            plot_tree(ExperienceStore.load(out / trees[first][seed]), out / "tree.png",
                      title=f"{first} tree, seed {seed} ({label})")
            pngs.append("tree.png")
        return tables, pngs


def predictions(records, cfg: FinanceConfig, n: int, t: int, h: int, n_pretest: int = 0) -> dict[str, dict[int, np.ndarray]]:
    """``s f8[N, T, H]`` per method and seed over the evaluated days from the episode records (NaN: no
    retained news); records of the pre-test span (``day < n_pretest``) are left out."""
    out = {m: {s: np.full((n, t, h), np.nan) for s in cfg.seeds} for m in cfg.methods}
    for r in records:
        if r["day"] >= n_pretest:
            out[r["method"]][r["seed"]][r["industry"], r["day"] - n_pretest] = r["s"]
    return out


def news_pairs_dropped(market, protocol, days) -> int:
    """(news item, industry, day) pairs the ``protocol.max_news`` cap leaves out of the walked days' prompts."""
    from engine.finance.methods import retained_news

    _, dropped = retained_news(market, protocol)
    walked = set(int(d) for d in days)
    return int(sum(v for (_, d), v in dropped.items() if d in walked))


def reliability_truth(method, truth: dict) -> dict:
    """Spearman correlation of final reliabilities with the generator's ``reading_truth``, per horizon.

    An experience's channel is the channel of most news items that selected it;
    experiences never selected (or merged away) are left out (they hold the prior q0).
    """
    from engine.finance.metrics import spearman

    st = method.store
    ch = method.channel_hits[: st.n_experiences]
    ok = st.active & (ch.sum(axis=1) > 0)
    eids = np.flatnonzero(ok)
    chan = ch[eids].argmax(axis=1)
    rt = np.asarray(truth["reading_truth"])
    q = st.reliability
    out = {"n_experiences": int(eids.size), "spearman": {}, "mean_q_by_role": {}}
    for k, h in enumerate(method.ctx.horizons):
        out["spearman"][str(h)] = spearman(q[eids, k], rt[chan, k])
        roles = {}
        for role in ("predictive", "noise", "misleading"):
            m = np.asarray([truth["roles"][c] == role for c in chan], dtype=bool)
            roles[role] = float(q[eids[m], k].mean()) if m.any() else None
        out["mean_q_by_role"][str(h)] = roles
    return out


def _f(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else round(x, 6)


TASK = FinanceTask()
