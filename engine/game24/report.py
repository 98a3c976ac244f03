"""Run-folder outputs of the Game-of-24 comparison: Parquet, summary.json, Markdown table, PNG plots.

Every artefact names the backend that produced it; figures from the simulated
policy say "simulated" in the table title, in every summary record, and in
each plot's title.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.game24.metrics import learning_curve
from engine.markdown import table

DISPLAY = {
    "tot": "ToT (Yao et al. 2023)",
    "mem0": "ToT+Mem0",
    "memrl": "ToT+MemRL",
    "reme": "ToT+ReMe",
    "flex": "ToT+FLEX",
    "toe": "ToT+ToE",
    "toe-supply": "ToT+ToE (supply)",
    "toe-guide": "ToT+ToE (guide)",
}


def display_name(method: str) -> str:
    return DISPLAY.get(method, f"ToT+{method}")


def backend_label(backend: str, model: str = "") -> str:
    """``"simulated policy (simulated-game24-v1) - SIMULATED, not a model"`` or ``"local (model)"``."""
    if backend == "simulated":
        return f"simulated policy ({model or 'simulated'}) - figures are SIMULATED, not a language model's"
    return f"{backend} ({model})" if model else backend


def markdown_table(summary: Sequence[Mapping[str, Any]], backend: str, model: str = "",
                   title: str = "Game of 24, ToT test split", notes: Sequence[str] = ()) -> str:
    """The paper's Table 2 layout (Method | Accuracy | Avg. Calls) plus first-output accuracy,
    samples, tokens and wall time per puzzle; mean over seeds, +- std across seeds.

    A record's ``label`` (the method with its ToE mode or search variant) names its row."""
    sim = backend == "simulated"
    lines = [
        f"**{title}** - backend: {backend_label(backend, model)}",
        "",
    ]
    lines += table(
        ("Method", "Accuracy (any of b) ↑", "Accuracy (first) ↑", "Avg. Calls ↓", "Samples", "Tokens", "Wall s",
         "Unusable lines / values ↓", "Exp. tokens / prompt", "Seeds"),
        ((f"{rec.get('label') or display_name(rec['method'])}{' [simulated]' if sim else ''}",
          f"{100 * rec['acc_any']:.1f}% ± {100 * rec['acc_any_std']:.1f}", f"{100 * rec['acc_first']:.1f}%",
          f"{rec['calls']:.1f} ± {rec['calls_std']:.1f}", f"{rec['samples']:.1f}", f"{rec['tokens']:.0f}",
          f"{rec['wall_s']:.3f}", _unusable(rec), experience_tokens(rec), len(rec["seeds"])) for rec in summary))
    n = summary[0]["n_puzzles"] if summary else 0
    lines += ["", f"Per test puzzle ({n} puzzles), mean over seeds ± std across seeds. Unusable: proposal "
              "lines not of the form \"a op b = c (left: ...)\" and value samples without a label on the last "
              "line (format failures, counted, never raised; - where a run did not count them). Exp. tokens / "
              "prompt: the experience block's mean tokens per propose / answer prompt (every memory baseline "
              "retrieves [memory] top_k items under the max_experience_tokens cap; ToE's retrieval sizes are "
              "its own, seed 000)."]
    lines += list(notes)
    if sim:
        lines.append("SIMULATED: produced by the seeded simulated Game-of-24 policy, a test harness, not a model.")
    return "\n".join(lines) + "\n"


def experience_tokens(rec: Mapping[str, Any]) -> str:
    """Mean experience tokens per prompt, with the blocks cut to fit the context window when any; - if not counted."""
    if "experience_tokens" not in rec:
        return "-"
    fitted = rec.get("experience_fitted") or 0.0
    return f"{rec['experience_tokens']:.1f}" + (f" ({fitted:.2f} cut)" if fitted else "")


def _unusable(rec: Mapping[str, Any]) -> str:
    if "unusable_lines" not in rec or "unusable_values" not in rec:
        return "-"
    return f"{rec['unusable_lines']:.1f} / {rec['unusable_values']:.1f}"


def plot_accuracy_vs_calls(summary: Sequence[Mapping[str, Any]], path: Path, backend: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
    markers = "osD^vP*X"
    for i, rec in enumerate(summary):
        # A legend, not point labels: methods with near-equal cost and accuracy overlap.
        ax.errorbar(rec["calls"], 100 * rec["acc_any"], xerr=rec["calls_std"], yerr=100 * rec["acc_any_std"],
                    fmt=markers[i % len(markers)], capsize=3, label=rec.get("label") or display_name(rec["method"]))
    ax.legend(fontsize=8, loc="best")
    ax.set_xlabel("LLM calls per test puzzle")
    ax.set_ylabel("accuracy, any of b (%)")
    model = str(summary[0].get("model") or "") if summary else ""
    ax.set_title(f"Game of 24: accuracy vs calls\n{_plot_label(backend, model)}", fontsize=10)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_learning_curve(records: Sequence[Mapping[str, Any]], methods: Sequence[str], path: Path,
                        backend: str, window: int = 50, test_start: int | None = None,
                        labels: Mapping[str, str] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    for method in methods:
        x, acc = learning_curve(records, method, window)
        label = (labels or {}).get(method) or display_name(method)
        ax.plot(x, 100 * acc, marker=".", label=label)
        x, calls = learning_curve(records, method, window, field="calls")
        ax2.plot(x, calls, marker=".", label=label)
    for a in (ax, ax2):
        if test_start is not None:
            a.axvline(test_start, color="grey", linestyle="--", linewidth=1)
            a.annotate("test split", (test_start, a.get_ylim()[0]), textcoords="offset points", xytext=(4, 4),
                       fontsize=8, color="grey")
        a.set_xlabel("position in the stream (episodes)")
        a.grid(alpha=0.3)
    ax.set_ylabel(f"accuracy (any of b) per window of {window} (%)")
    ax2.set_ylabel(f"LLM calls per puzzle, window of {window}")
    model = next((str(r["model"]) for r in records if r.get("model")), "")
    fig.suptitle(f"Game of 24 over the stream ({_plot_label(backend, model)})", fontsize=11)
    ax.set_title("accuracy", fontsize=10)
    ax2.set_title("LLM calls", fontsize=10)
    ax.legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_label(backend: str, model: str = "") -> str:
    if backend == "simulated":
        return f"SIMULATED policy {model}".rstrip()
    return f"{backend}: {model.rsplit('/', 1)[-1]}" if model else f"backend {backend}"


def summary_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``summary.json`` as one flat record per method (the sweep table's rows, the tracker's metrics):
    every scalar of the method's summary record (means over seeds, ``*_std``, backend, simulated)."""
    return [{k: v for k, v in rec.items() if isinstance(v, (int, float, str, bool)) or v is None}
            for rec in summary.get("methods", [])]
