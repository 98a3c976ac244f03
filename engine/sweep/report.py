"""The sweep's combined outputs: ``sweep.parquet``, ``sweep.md`` and ``sweep_<metric>.png``.

Rows are the task's own per-method summary records (:func:`engine.tasks.summary_rows`, the same records
the single run's summary.json holds), one per finished run x method, with the swept keys as the first
columns and ``run`` (the folder name). Rows of simulated runs carry ``simulated = True`` and every title
says SIMULATED when any row is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from engine.errors import ConfigError
from engine.tasks import summary_rows
from engine.markdown import table


def combined_rows(task: str, runs: Sequence, read_summary) -> list[dict[str, Any]]:
    """One record per finished run x method, in grid order; swept keys first, then ``run``."""
    rows = []
    for run in runs:
        summary = read_summary(run.path)
        if summary is None:
            continue
        for rec in summary_rows(task, summary):
            rows.append({**{k: _cell(v) for k, v in run.combo.values.items()}, "run": run.combo.name,
                         **{k: v for k, v in rec.items() if k not in run.combo.values}})
    return rows


def write_parquet(rows: Sequence[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in rows for k in r))
    cols = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        try:
            cols[k] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: keep them as text
            cols[k] = pa.array([None if v is None else str(v) for v in vals])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table(cols), tmp)
    tmp.replace(path)


def check_metric(rows: Sequence[dict[str, Any]], metric: str) -> None:
    numeric = sorted({k for r in rows for k, v in r.items() if _is_number(v)})
    if rows and metric not in numeric:
        raise ConfigError(f"--metric {metric!r} is not a numeric column of the runs' summaries; "
                          f"valid: {', '.join(numeric)}")


def markdown(rows: Sequence[dict[str, Any]], keys: Sequence[str], metric: str, title: str,
             failed: Sequence[tuple[str, int, str]] = ()) -> str:
    """Every run x method with ``metric`` (and unusable answers where the task counts them), then the
    metric's mean per value of each swept key (over the other keys), per method."""
    sim = any(r.get("simulated") for r in rows)
    extra = [c for c in ("failed", "parse_failures") if any(c in r for r in rows)]
    lines = [f"**{title}**" + (" - figures are SIMULATED (seeded test policy), not a language model's" if sim else ""),
             ""]
    lines += table([*keys, "method", metric, *extra],
                   ([_fmt(r.get(k)) for k in keys] + [str(r.get("method")), _fmt(r.get(metric))]
                    + [_fmt(r.get(c)) for c in extra] for r in rows))
    methods = list(dict.fromkeys(r.get("method") for r in rows))
    for key in keys:
        values = list(dict.fromkeys(r.get(key) for r in rows))
        lines += ["", f"{metric} by {key} (mean over the other swept keys):", ""]
        lines += table(["method"] + [f"{key}={_fmt(v)}" for v in values],
                       ([m] + [_fmt(_mean([r.get(metric) for r in rows if r.get("method") == m and r.get(key) == v]))
                               for v in values] for m in methods))
    if failed:
        lines += ["", "Runs that did not finish (not in the table): "
                  + "; ".join(f"{name} (exit {rc}, log {log})" for name, rc, log in failed)]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[dict[str, Any]], keys: Sequence[str], metric: str, path: Path, title: str) -> None:
    """One panel per swept key: ``metric`` against the key's values, one line per method (mean over the
    other keys, the standard deviation over those runs as error bars), every run's value as a faint point.
    Seeds are replicates, not a setting: a swept ``seeds`` / ``*.seed`` key gets no panel of its own, its
    spread is in the error bars (a sweep of seeds alone: one panel of the methods)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim = any(r.get("simulated") for r in rows)
    replicates = [k for k in keys if k in ("seeds", "seed") or k.endswith((".seed", ".seeds"))]
    panels = [k for k in keys if k not in replicates] or ["method"]
    fig, axes = plt.subplots(1, len(panels), figsize=(max(6.0, 4.5 * len(panels)), 4.0), squeeze=False, layout="constrained")
    methods = list(dict.fromkeys(r.get("method") for r in rows))
    for ax, key in zip(axes[0], panels):
        values = list(dict.fromkeys(r.get(key) for r in rows))
        numeric = all(_is_number(v) for v in values)
        order = sorted(values) if numeric else values
        xs = {v: (float(v) if numeric else i) for i, v in enumerate(order)}
        for j, m in enumerate(methods):
            mine = [r for r in rows if r.get("method") == m and _is_number(r.get(metric))]
            ax.scatter([xs[r.get(key)] for r in mine], [r[metric] for r in mine], s=12, alpha=0.35, color=f"C{j}")
            at = [(v, [r[metric] for r in mine if r.get(key) == v]) for v in order]
            at = [(v, a) for v, a in at if a]
            ax.errorbar([xs[v] for v, _ in at], [_mean(a) for _, a in at], yerr=[float(np.std(a)) for _, a in at],
                        marker="o", color=f"C{j}", label=str(m), capsize=3)
        if numeric:
            ax.set_xticks([xs[v] for v in order], [_fmt(v) for v in order])
        else:
            ax.set_xticks(range(len(order)), [_fmt(v) for v in order], rotation=30, ha="right")
        ax.set_xlabel(key)
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    spread = f"error bars: std over {', '.join(replicates)} and the other swept keys" if replicates else \
        "error bars: std over the other swept keys"
    fig.suptitle(title + (" (SIMULATED policy)" if sim else "") + "\n" + spread, fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell(v: Any) -> Any:
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _mean(vals) -> float | None:
    vals = [float(v) for v in vals if _is_number(v)]
    return sum(vals) / len(vals) if vals else None


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
