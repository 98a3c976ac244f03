"""Render every table of measured run figures in README.md and docs/ from a run's summary.json.

Each table sits between marker comments ``<!-- NAME -->`` and ``<!-- /NAME -->``; what lies
between them is produced here, from the committed ``summary.json`` of the shipped config's run
(``docs/results/<run>/summary.json``), together with the command that made that run. Nothing in
a marked block is typed by hand, so a table cannot drift from the code that measured it.

    .venv/bin/python scripts/doc_tables.py            # rewrite the marked blocks in place
    .venv/bin/python scripts/doc_tables.py --check    # exit 1, listing stale blocks, if any differ

To refresh the figures, rerun the run's command (printed in each block), copy its summary.json
to ``docs/results/<run>/`` and run this script. ``tests/test_doc_tables.py`` checks the docs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"

# run name -> the command that made docs/results/<name>/summary.json
RUNS = {
    "game24": ".venv/bin/toe run configs/game24.toml --out runs/game24",
    "finance": ".venv/bin/toe run configs/finance-synthetic.toml --out runs/finance",
    # its reference rows need no model; the model rows of this run are the simulated harness's
    "prophet-arena": ".venv/bin/toe run configs/prophet-arena.toml --set llm.backend=\"simulated\" --out runs/pa",
}

GAME24_NAMES = {"tot": "ToT", "toe": "ToT+ToE", "toe-supply": "ToT+ToE (supply)", "toe-guide": "ToT+ToE (guide)",
                "mem0": "ToT+Mem0", "memrl": "ToT+MemRL", "reme": "ToT+ReMe", "flex": "ToT+FLEX"}


def _game24_tag(rec: dict) -> str:
    return " [simulated]" if rec.get("simulated") else f" [{rec['backend']}:{str(rec['model']).rsplit('/', 1)[-1]}]"


def _unusable(r: dict) -> str:
    """Format failures per puzzle: proposal lines / value samples (engine.game24.tot); - if not counted."""
    if "unusable_lines" not in r:
        return "-"
    return f"{r['unusable_lines']:.1f} / {r['unusable_values']:.1f}"


def _exp_tokens(r: dict) -> str:
    """Mean experience tokens per propose / answer prompt (engine.memory_budget); - if not counted."""
    if "experience_tokens" not in r:
        return "-"
    fitted = r.get("experience_fitted") or 0.0
    return f"{r['experience_tokens']:.1f}" + (f" ({fitted:.2f} cut)" if fitted else "")


def game24_short(summary: dict) -> list[str]:
    """README: accuracy, calls, tokens and format failures per test puzzle, mean over seeds (± std)."""
    lines = ["| Method | Accuracy (any of b) | Avg. LLM calls | Tokens | Unusable lines / values | Exp. tokens / prompt |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in summary["methods"]:
        lines.append(f"| {GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)} | "
                     f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f} | {r['calls']:.1f} | {r['tokens']:,.0f} "
                     f"| {_unusable(r)} | {_exp_tokens(r)} |")
    return lines


def game24_full(summary: dict) -> list[str]:
    """docs/game24.md: the Table 2 layout with first-output accuracy and samples."""
    lines = ["| Method | Accuracy (any of b) | Accuracy (first) | Avg. Calls | Samples | Tokens | Unusable lines / values "
             "| Exp. tokens / prompt |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in summary["methods"]:
        lines.append(f"| {GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)} | "
                     f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f} | {100 * r['acc_first']:.1f}% | "
                     f"{r['calls']:.1f} ± {r['calls_std']:.1f} | {r['samples']:.1f} | {r['tokens']:.0f} "
                     f"| {_unusable(r)} | {_exp_tokens(r)} |")
    return lines


def game24_baselines(summary: dict) -> list[str]:
    """docs/baselines.md: what each memory costs next to plain ToT, from the same run."""
    lines = ["| Method | Accuracy (any of b) | Avg. calls | Tokens per puzzle | Tokens vs ToT | Exp. tokens / prompt |",
             "| --- | --- | --- | --- | --- | --- |"]
    base = next((r["tokens"] for r in summary["methods"] if r["method"] == "tot"), None)
    for r in summary["methods"]:
        ratio = f"{r['tokens'] / base:.2f}x" if base else "-"
        lines.append(f"| {GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)} | "
                     f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f} | {r['calls']:.1f} | "
                     f"{r['tokens']:,.0f} | {ratio} | {_exp_tokens(r)} |")
    return lines


def _finance_tag(summary: dict) -> str:
    row = summary["methods"][0]  # the run folder's summary.json: every row names what answered
    if row.get("backend") == "simulated":
        return " [simulated]"
    return f" [{row['backend']}:{str(row['model']).rsplit('/', 1)[-1]}]"


def _finance_get(summary: dict):
    return {(r["method"], r["horizon"], r["period"]): r for r in summary["methods"]}


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def finance_exploitation(summary: dict) -> list[str]:
    """README: Exploitation-period tsIC per horizon, mean over seeds."""
    get, hs = _finance_get(summary), summary["meta"]["horizons"]
    methods = list(dict.fromkeys(r["method"] for r in summary["methods"]))
    lines = ["| Method | " + " | ".join(f"{h}d" for h in hs) + " | Exp. tokens / prompt |",
             "| --- |" + " --- |" * (len(hs) + 1)]
    for m in methods:
        lines.append(f"| {m}{_finance_tag(summary)} | "
                     + " | ".join(f"{get[(m, h, 'Exploitation')]['tsIC']:.3f}" for h in hs)
                     + f" | {_exp_tokens(get[(m, hs[0], 'Exploitation')])} |")
    return lines


def _finance_metric(metric: str) -> Callable[[dict], list[str]]:
    def render(summary: dict) -> list[str]:
        get, hs = _finance_get(summary), summary["meta"]["horizons"]
        methods = list(dict.fromkeys(r["method"] for r in summary["methods"]))
        head = ["Method"] + [f"{h}d {p}" for h in hs for p in ("Exploitation", "Overall")] + ["Exp. tokens / prompt"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for m in methods:
            lines.append(f"| {m}{_finance_tag(summary)} | "
                         + " | ".join(_f(get[(m, h, p)][metric]) for h in hs for p in ("Exploitation", "Overall"))
                         + f" | {_exp_tokens(get[(m, hs[0], 'Exploitation')])} |")
        return lines

    render.__doc__ = f"docs/finance.md: {metric}, mean over seeds, Exploitation and Overall per horizon."
    return render


# marker name -> (document, run, renderer)
def prophet_reference(summary: dict) -> list[str]:
    """README: Brier of the Market and Uniform reference rows per category on every loaded question."""
    rows = {r["method"]: r for r in summary["meta"]["reference_all"]}
    uni, mkt = rows["Uniform (0.5 on every market)"], rows["Market"]
    lines = ["| Category | Market | Uniform |", "| --- | --- | --- |"]
    for c in sorted(mkt["brier"]):
        lines.append(f"| {c} | {mkt['brier'][c]:.4f} | {uni['brier'][c]:.2f} |")
    avg = lambda d: sum(d.values()) / len(d)  # noqa: E731
    lines.append(f"| **Average** | **{avg(mkt['brier']):.4f}** | **{avg(uni['brier']):.2f}** |")
    return lines


def prophet_reference_full(summary: dict) -> list[str]:
    """docs/forecast.md: Brier of the reference rows, one column per category (paper Table 1 layout)."""
    refs = summary["meta"]["reference_all"]
    cats = sorted(refs[0]["brier"])
    lines = ["| Method | " + " | ".join(cats) + " | Avg. |", "|---" * (len(cats) + 2) + "|"]
    for r in refs:
        vals = [r["brier"][c] for c in cats]
        lines.append(f"| {r['method']} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {sum(vals) / len(vals):.4f} |")
    return lines


# tables of reference rows that no model produced (no [simulated] tag: nothing was simulated)
NO_MODEL_TABLES = {"prophet-reference-table", "prophet-reference-full-table"}

TABLES: dict[str, tuple[str, str, Callable[[dict], list[str]]]] = {
    "prophet-reference-table": ("README.md", "prophet-arena", prophet_reference),
    "prophet-reference-full-table": ("docs/forecast.md", "prophet-arena", prophet_reference_full),
    "game24-table": ("README.md", "game24", game24_short),
    "finance-table": ("README.md", "finance", finance_exploitation),
    "game24-full-table": ("docs/game24.md", "game24", game24_full),
    "game24-baselines-table": ("docs/baselines.md", "game24", game24_baselines),
    "finance-tsic-table": ("docs/finance.md", "finance", _finance_metric("tsIC")),
    "finance-csic-table": ("docs/finance.md", "finance", _finance_metric("csIC")),
}


def load_summary(run: str, results: Path = RESULTS) -> dict:
    path = results / run / "summary.json"
    if not path.is_file():
        raise SystemExit(f"doc_tables: {path} is missing; run `{RUNS[run]}` and copy its summary.json there")
    return json.loads(path.read_text(encoding="utf-8"))


def render_block(name: str, results: Path = RESULTS) -> str:
    """What goes between ``<!-- name -->`` and ``<!-- /name -->``: the table and the command that made it."""
    _, run, render = TABLES[name]
    summary = load_summary(run, results)
    label = summary.get("meta", summary).get("label") or summary.get("label", "")
    lines = render(summary)
    lines += ["", f"<sub>Rendered by `scripts/doc_tables.py` from `docs/results/{run}/summary.json`, made by "
                  f"`{RUNS[run]}`" + (f"; {label}" if label else "") + ".</sub>"]
    return "\n".join(lines)


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {re.escape(name)} -->\n)(.*?)(\n<!-- /{re.escape(name)} -->)", re.S)


def update(root: Path = ROOT, results: Path = RESULTS, check: bool = False) -> list[str]:
    """Rewrite (or, with ``check``, only compare) every marked block; returns the stale block names."""
    stale = []
    texts: dict[Path, str] = {}
    for name, (doc, _, _) in TABLES.items():
        path = root / doc
        text = texts.get(path) or path.read_text(encoding="utf-8")
        m = _pattern(name).search(text)
        if m is None:
            raise SystemExit(f"doc_tables: {doc} has no <!-- {name} --> ... <!-- /{name} --> block")
        want = render_block(name, results)
        if m.group(2) != want:
            stale.append(f"{doc}: {name}")
            text = text[: m.start(2)] + want + text[m.end(2):]
        texts[path] = text
    if not check:
        for path, text in texts.items():
            if path.read_text(encoding="utf-8") != text:
                path.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 if a block is stale")
    args = ap.parse_args(argv)
    stale = update(check=args.check)
    if args.check and stale:
        print("stale tables (run scripts/doc_tables.py):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    print(("stale: " if args.check else "rewritten: ") + (", ".join(stale) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
