"""Tables in the paper's layout and the plots of a finance run (tsIC over time; the tree: engine.store.plot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.finance.metrics import rolling_ts_ic
from engine.finance.retrieval import format_retrieval
from engine.markdown import table
from engine.store.plot import plot_tree  # noqa: F401  (the tree.png of a run)


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def unusable_answers(meta: dict, method: str) -> str:
    """``"failures of prompts"``: the answers of ``method`` no parser could read (each then counts as
    a neutral 0; ``meta.usage``, pre-test span included), of all its prompts; ``-`` if not counted."""
    u = (meta.get("usage") or {}).get(method)
    if not u or "parse_failures" not in u:
        return "-"
    prompts = sum(int(v) for k, v in u.items() if k.startswith("prompts_"))
    return f"{int(u['parse_failures'])} of {prompts}"


def markdown_tables(rows: list[dict], meta: dict) -> str:
    """Table 1 (tsIC, Exploitation and Overall per horizon), Table A2 (csIC), Table 3, truth check.

    ``rows`` and ``meta`` are summary.json's ``methods`` and ``meta``.
    """
    recs = rows
    hs = meta["horizons"]
    methods = list(dict.fromkeys(r["method"] for r in recs))
    get = {(r["method"], r["horizon"], r["period"]): r for r in recs}
    label = meta.get("label", "")
    backend = recs[0]["backend"] if recs else meta.get("backend")
    model = recs[0]["model"] if recs else meta.get("model")
    # every row names what answered: [simulated], else [backend:model]
    tag = (" [simulated]" if backend == "simulated"
           else f" [{backend}:{str(model or '').rsplit('/', 1)[-1]}]")
    seeds = recs[0]["seeds"] if recs else []
    lines = [f"### tsIC ({label}; backend {backend}; mean of {len(seeds)} seeds)", ""]
    head = (["Method"] + [f"{h}d {p}" for h in hs for p in ("Exploitation", "Overall")]
            + ["Exp. tokens / prompt", "Unusable answers"] + list(RETRIEVAL_HEAD))
    usage = meta.get("usage") or {}
    rows = []
    for m in methods:
        row = [m + tag] + [_fmt(get[(m, h, p)]["tsIC"]) for h in hs for p in ("Exploitation", "Overall")]
        r0 = get[(m, hs[0], "Exploitation")]  # per method: mean experience tokens per prediction prompt
        row.append(f"{r0['experience_tokens']:.1f}" if "experience_tokens" in r0 else "-")
        row.append(unusable_answers(meta, m))
        row += format_retrieval(usage.get(m))
        rows.append(row)
    lines += table(head, rows)
    lines += ["", RETRIEVAL_NOTE.format(lam=(meta.get("config") or {}).get("toe", {}).get("lam", "lam"),
                                        embedder=meta.get("embedder", "?"))]
    cos = meta.get("retrieval_cosines")
    if cos:
        lines += ["", f"### Cosine of a news item with its own channel's direction vs the other channels' ({label})", "",
                  *cosine_table(cos)]
    lines += ["", f"### csIC ({label})", ""]
    head = ["Method"] + [f"{h}d {p}" for h in hs for p in ("Exploitation", "Overall")]
    lines += table(head, ([m + tag] + [_fmt(get[(m, h, p)]["csIC"]) for h in hs for p in ("Exploitation", "Overall")]
                          for m in methods))
    ab = [m for m in ("Pipe+ToE", "Pipe+ToE (LLM update)") if m in methods]
    h20 = 20 if 20 in hs else hs[len(hs) // 2]
    if len(ab) == 2:
        lines += ["", f"### Reliability update ablation, {h20}-day horizon, Overall ({label})", ""]
        lines += table(("Strategy", "tsIC", "csIC"), ((f"{strat}{tag}", _fmt(get[(m, h20, "Overall")]["tsIC"]),
                                                      _fmt(get[(m, h20, "Overall")]["csIC"]))
                                                     for m, strat in zip(ab, ("formula-based", "LLM-based"))))
    rel = relative_improvement(recs)
    if rel:
        lines += ["", f"### Relative tsIC improvement over Pipe, mean over settings ({label})", ""]
        lines += table(("Method", "Exploitation", "Overall", "All settings"),
                       ([m + tag] + [_pct(v[k]) for k in ("Exploitation", "Overall", "all")] for m, v in rel.items()))
        lines += ["", "<sub>Per setting (horizon x period): (tsIC - tsIC of Pipe) / |tsIC of Pipe|, then the mean "
                  "(the paper's aggregate over its settings, Section \"Performance on FinEvolveBench\").</sub>"]
    rt = meta.get("reliability_truth") or {}
    if rt:
        lines += ["", f"### Final reliability vs. generator ground truth (Spearman; {label})", ""]
        lines += table(["Method", "seed", "experiences"] + [f"{h}d" for h in hs],
                       ([m + tag, s, v["n_experiences"]] + [_fmt(v["spearman"].get(str(h))) for h in hs]
                        for m, per in rt.items() for s, v in per.items()))
    return "\n".join(lines) + "\n"


RETRIEVAL_HEAD = ("Retrieval rate", "Candidates / item", "Updates from retrieval / proposer")
RETRIEVAL_NOTE = ("<sub>Retrieval rate: share of the (news, industry) items with at least one candidate at the leaf "
                  "level (cosine >= {lam} under {embedder}); candidates per item; share of the used experiences "
                  "(each one delayed update per horizon, eq. (7)) that the reranker selected among retrieved "
                  "candidates vs that the proposer wrote. Pre-test span included; - : not a ToE method.</sub>")


def cosine_table(cos: dict) -> list[str]:
    """``meta.retrieval_cosines`` (engine.finance.retrieval.channel_cosines) as a markdown table."""
    lam = cos["lam"]
    rows = ((f"{name} ({cos['embedder']})", d["n"], f"{d['median']:.3f}", f"{d['p5']:.3f}", f"{d['p95']:.3f}",
             f"{d['max']:.3f}", f"{100 * d['share_at_or_above_lam']:.1f}%")
            for key, name in (("own", "own channel"), ("other", "other channels")) for d in (cos[key],))
    lines = table(("Direction", "Pairs", "Median", "p5", "p95", "Max", f"Share >= lam = {lam:g}"), rows)
    return lines


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:+.2f}%"


def relative_improvement(rows: list[dict], reference: str = "Pipe") -> dict[str, dict]:
    """Each method's relative tsIC improvement over ``reference`` (ToE "Performance on FinEvolveBench": "an
    average relative improvement of 41.24% across all 12 settings"): per setting (horizon, period)
    ``(tsIC - tsIC_ref) / |tsIC_ref|``, averaged per period and over all settings. Settings where either
    value is missing or the reference is 0 are left out; ``{}`` without the reference."""
    get = {(r["method"], r["horizon"], r["period"]): r["tsIC"] for r in rows}
    if not any(m == reference for m, _, _ in get):
        return {}
    out: dict[str, dict] = {}
    for m in dict.fromkeys(r["method"] for r in rows):
        if m == reference:
            continue
        per: dict[str, list[float]] = {"Exploitation": [], "Overall": []}
        for (mm, h, p), v in get.items():
            ref = get.get((reference, h, p))
            if mm == m and v is not None and ref is not None and ref != 0 and p in per:
                per[p].append((v - ref) / abs(ref))
        both = per["Exploitation"] + per["Overall"]
        out[m] = {k: (float(np.mean(v)) if v else None) for k, v in (*per.items(), ("all", both))}
        out[m]["n_settings"] = len(both)
    return out


def plot_relative_bars(rows: list[dict], path: Path, label: str) -> None:
    """Figure-3-style grouped bars: tsIC per setting (horizon x period), one bar per method (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"] for r in rows))
    settings = list(dict.fromkeys((r["period"], r["horizon"]) for r in rows))
    get = {(r["method"], r["period"], r["horizon"]): (r["tsIC"], r.get("tsIC_std")) for r in rows}
    x = np.arange(len(settings))
    w = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(settings), 3.8), layout="constrained")
    for k, m in enumerate(methods):
        vals = [get.get((m, p, h), (None, None)) for p, h in settings]
        ax.bar(x + (k - (len(methods) - 1) / 2) * w, [np.nan if v is None else v for v, _ in vals], w, label=m,
               yerr=[0.0 if sd is None or v is None else sd for v, sd in vals], capsize=2, error_kw={"lw": 0.8})
    ax.set_xticks(x, [f"{h}d\n{p}" for p, h in settings])
    ax.axhline(0, color="black", lw=0.5)
    ax.set_ylabel("tsIC (mean over seeds, bars: std)")
    ax.legend(fontsize=7, ncol=2)
    ax.set_title(f"tsIC by setting ({label})", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_tsic(preds: dict, alpha: np.ndarray, horizons, path: Path, label: str, window: int = 60,
              split: int | None = None) -> None:
    """Trailing-window tsIC over the stream, one panel per horizon, one line per method (mean over seeds);
    the dashed line marks the first Exploitation day (``split``, default the first third)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(horizons), figsize=(5 * len(horizons), 3.6), sharey=True, layout="constrained")
    axes = np.atleast_1d(axes)
    t = alpha.shape[1]
    for name, per_seed in preds.items():
        curves = np.stack([rolling_ts_ic(p, alpha, window) for p in per_seed.values()])
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(curves, axis=0)
        for k, h in enumerate(horizons):
            axes[k].plot(np.arange(t), mean[:, k], label=name, lw=1.3)
    for k, h in enumerate(horizons):
        axes[k].axvline(t // 3 if split is None else split, color="grey", ls="--", lw=0.8)
        axes[k].axhline(0, color="black", lw=0.5)
        axes[k].set_title(f"{h}-day horizon")
        axes[k].set_xlabel("trading day (dashed: start of Exploitation)")
    axes[0].set_ylabel(f"tsIC, trailing {window} days")
    axes[-1].legend(fontsize=7, loc="best")
    fig.suptitle(f"tsIC over time ({label})", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summary_rows(summary: dict) -> list[dict]:
    """``summary.json`` as one flat record per method: ``tsIC_<h>d_<period>`` and ``csIC_<h>d_<period>``
    (means over seeds) for every horizon and period, plus backend, model and the simulated label."""
    rows: dict[str, dict] = {}
    meta = summary.get("meta", {})
    for r in summary.get("methods", []):
        row = rows.setdefault(r["method"], {
            "method": r["method"], "backend": r.get("backend"), "model": r.get("model"),
            "simulated": bool(r.get("simulated")), "label": r.get("label", meta.get("label"))})
        for metric in ("tsIC", "csIC"):
            row[f"{metric}_{r['horizon']}d_{r['period']}"] = r[metric]
    return list(rows.values())
