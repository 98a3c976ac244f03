"""Render every table of measured figures in README.md, docs/ and benchmarks/ from what measured them.

Each table sits between marker comments ``<!-- NAME -->`` and ``<!-- /NAME -->``; what lies
between them is produced here, together with the command that made the figures, from one of

* a run's ``summary.json``: the shipped config's run, committed as ``docs/results/<run>/summary.json``
  (``RUNS`` names the command that made each one);
* a benchmark's ``benchmarks/results/<topic>.json``, which the suites write themselves
  (``benchmarks/_results.py``; renderers in ``benchmarks/_tables.py``).

``benchmarks/RESULTS.md`` is generated too: the prose of ``benchmarks/results/*.md`` (with their
rendered blocks) under one heading. Nothing in a marked block is typed by hand, so a table
cannot drift from the code that measured it.

    .venv/bin/python scripts/doc_tables.py            # rewrite the marked blocks and RESULTS.md in place
    .venv/bin/python scripts/doc_tables.py --check    # exit 1, listing stale blocks, if any differ

(``.venv/bin/python benchmarks/build_results.py`` is the same.) To refresh a run's figures, rerun the
command printed in its block, copy its summary.json to ``docs/results/<run>/`` and run this script;
to refresh a benchmark's, rerun its command (it rewrites its JSON) and run this script.
``tests/test_doc_tables.py`` fails when a block or RESULTS.md is stale; its ``slow`` test reruns the
small shipped runs and compares them with the committed summaries.

Adding a table:

1. From a run: add the run to ``RUNS`` (name -> command), commit its ``docs/results/<name>/summary.json``,
   write ``render(summary) -> list[str]`` below and register ``"marker": ("doc.md", "name", render)``
   in ``TABLES``; add the run to ``SMALL_RUNS`` in the test if it takes seconds, not minutes.
2. From a benchmark: have the suite call ``record(topic, key, figures)`` (``benchmarks/_results.py``),
   write ``render(data) -> list[str]`` in ``benchmarks/_tables.py`` and register it in that file's
   ``TABLES`` (and ``KEYS``: the run keys it reads, for the commands in the footer).
3. Put ``<!-- marker -->`` and ``<!-- /marker -->`` on their own lines where the table goes and run
   this script: it fills the block.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
BENCH_RESULTS = ROOT / "benchmarks" / "results"

sys.path.insert(0, str(ROOT / "benchmarks"))
import _tables as bench  # noqa: E402  (benchmarks/_tables.py)

sys.path.insert(0, str(ROOT))
from engine.finance.report import RETRIEVAL_HEAD, cosine_table, unusable_answers  # noqa: E402  (the run's table.md writes the same)
from engine.finance.retrieval import format_retrieval  # noqa: E402
from engine.markdown import table  # noqa: E402

# run name -> the command that made docs/results/<name>/summary.json
RUNS = {
    "game24": ".venv/bin/toe run configs/game24.toml --out runs/game24",
    # the shipped config: all-MiniLM-L6-v2, retrieval on, the no-retrieval ablation among the methods
    "finance": ".venv/bin/toe run configs/finance-synthetic.toml --out runs/finance",
    # its reference rows need no model; the model rows of this run are the simulated harness's
    "prophet-arena": ".venv/bin/toe run configs/prophet-arena.toml --set llm.backend=\"simulated\" --out runs/pa",
    "game24-filtered": (".venv/bin/toe run configs/game24.toml --set tot.drop_invalid_steps=true "
                        "--set 'methods=[\"tot\",\"toe-supply\",\"toe-guide\"]' --out runs/game24-filtered"),
    "forecast-baselines": (".venv/bin/toe run configs/prophet-arena.toml --set llm.backend=simulated "
                           "--set 'run.methods=[\"foredreamer\",\"full_text\",\"rag\",\"mem0\",\"memrl\",\"reme\",\"flex\","
                           "\"hipporag\",\"memoryos\",\"amem\",\"lightmem\",\"langmem\"]' --set run.max_questions=3 "
                           "--set 'data.categories=[]' --set agent.top_k=4 --set agent.context_chars=30000 --out runs/pa-baselines"),
    # the real embedded model (SmolLM2-135M through llama.cpp, structured outputs on): 145 s on an idle 2-core machine
    "prophet-arena-smollm2": (".venv/bin/toe run configs/prophet-arena.toml --set 'data.categories=[]' "
                              "--set 'run.methods=[\"no_information\",\"foredreamer\"]' --set run.max_questions=1 "
                              "--set llm.threads=1 --out runs/pa-smollm2"),
    "game24-smollm2": (".venv/bin/toe run configs/game24-local.toml --set protocol.test_limit=5 --set llm.threads=1 "
                       "--out runs/g24-smollm2"),
    "futurex": (".venv/bin/toe run configs/futurex.toml --set llm.backend=simulated --set run.max_questions=0 "
                "--set 'run.methods=[\"foredreamer\",\"full_text\",\"rag\",\"mem0\",\"memrl\",\"reme\",\"flex\"]' "
                "--out runs/futurex"),
}

# rows no model produced (uniform, market prices, first option): they carry no [simulated] tag
REFERENCE_ROWS = {"Uniform (0.5 on every market)", "Market", "No Information (uniform random guess, expected)",
                  "First option / listed order"}

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
    return table(("Method", "Accuracy (any of b)", "Avg. LLM calls", "Tokens", "Unusable lines / values",
                  "Exp. tokens / prompt"),
                 ((f"{GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)}",
                   f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f}", f"{r['calls']:.1f}",
                   f"{r['tokens']:,.0f}", _unusable(r), _exp_tokens(r)) for r in summary["methods"]))


def game24_full(summary: dict) -> list[str]:
    """docs/game24.md: the Table 2 layout with first-output accuracy and samples."""
    return table(("Method", "Accuracy (any of b)", "Accuracy (first)", "Avg. Calls", "Samples", "Tokens",
                  "Unusable lines / values", "Exp. tokens / prompt"),
                 ((f"{GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)}",
                   f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f}", f"{100 * r['acc_first']:.1f}%",
                   f"{r['calls']:.1f} ± {r['calls_std']:.1f}", f"{r['samples']:.1f}", f"{r['tokens']:.0f}",
                   _unusable(r), _exp_tokens(r)) for r in summary["methods"]))


def game24_baselines(summary: dict) -> list[str]:
    """docs/baselines.md: what each memory costs next to plain ToT, from the same run."""
    base = next((r["tokens"] for r in summary["methods"] if r["method"] == "tot"), None)
    return table(("Method", "Accuracy (any of b)", "Avg. calls", "Tokens per puzzle", "Tokens vs ToT",
                  "Exp. tokens / prompt"),
                 ((f"{GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)}",
                   f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f}", f"{r['calls']:.1f}",
                   f"{r['tokens']:,.0f}", f"{r['tokens'] / base:.2f}x" if base else "-", _exp_tokens(r))
                  for r in summary["methods"]))


def _finance_tag(summary: dict) -> str:
    row = summary["methods"][0]  # the run folder's summary.json: every row names what answered
    if row.get("backend") == "simulated":
        return " [simulated]"
    return f" [{row['backend']}:{str(row['model']).rsplit('/', 1)[-1]}]"


def _finance_get(summary: dict):
    return {(r["method"], r["horizon"], r["period"]): r for r in summary["methods"]}


def _f(x) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def finance_exploitation(summary: dict, retrieval: bool = False) -> list[str]:
    """docs/commands.md: Exploitation-period tsIC per horizon, mean over seeds (README: with the retrieval rate)."""
    get, hs = _finance_get(summary), summary["meta"]["horizons"]
    methods = list(dict.fromkeys(r["method"] for r in summary["methods"]))
    usage = summary["meta"].get("usage", {})
    return table(["Method"] + [f"{h}d" for h in hs] + ["Exp. tokens / prompt", "Unusable answers"]
                 + (["Retrieval rate"] if retrieval else []),
                 ([m + _finance_tag(summary)] + [f"{get[(m, h, 'Exploitation')]['tsIC']:.3f}" for h in hs]
                  + [_exp_tokens(get[(m, hs[0], 'Exploitation')]), unusable_answers(summary["meta"], m)]
                  + ([format_retrieval(usage.get(m))[0]] if retrieval else []) for m in methods))


def finance_readme(summary: dict) -> list[str]:
    """README: Exploitation-period tsIC per horizon with each ToE row's retrieval rate."""
    return finance_exploitation(summary, retrieval=True)


def _finance_metric(metric: str, retrieval: bool = False) -> Callable[[dict], list[str]]:
    def render(summary: dict) -> list[str]:
        get, hs = _finance_get(summary), summary["meta"]["horizons"]
        methods = list(dict.fromkeys(r["method"] for r in summary["methods"]))
        usage = summary["meta"].get("usage", {})
        head = (["Method"] + [f"{h}d {p}" for h in hs for p in ("Exploitation", "Overall")]
                + ["Exp. tokens / prompt", "Unusable answers"] + (list(RETRIEVAL_HEAD) if retrieval else []))
        return table(head, ([m + _finance_tag(summary)]
                            + [_f(get[(m, h, p)][metric]) for h in hs for p in ("Exploitation", "Overall")]
                            + [_exp_tokens(get[(m, hs[0], 'Exploitation')]), unusable_answers(summary["meta"], m)]
                            + (list(format_retrieval(usage.get(m))) if retrieval else [])
                            for m in methods))

    render.__doc__ = (f"docs/finance.md: {metric}, mean over seeds, Exploitation and Overall per horizon"
                      + (", with each ToE row's retrieval figures (engine.finance.retrieval)." if retrieval else "."))
    return render


def finance_relative(summary: dict) -> list[str]:
    """docs/finance.md: relative tsIC improvement over Pipe, mean over the settings of each period and of all
    (the paper's aggregate; ``engine.finance.report.relative_improvement`` computes the same for table.md)."""
    get = {(r["method"], r["horizon"], r["period"]): r["tsIC"] for r in summary["methods"]}
    methods = [m for m in dict.fromkeys(r["method"] for r in summary["methods"]) if m != "Pipe"]
    rows = []
    for m in methods:
        per = {"Exploitation": [], "Overall": []}
        for (mm, h, p), v in get.items():
            ref = get.get(("Pipe", h, p))
            if mm == m and v is not None and ref and p in per:
                per[p].append((v - ref) / abs(ref))
        cells = [per["Exploitation"], per["Overall"], per["Exploitation"] + per["Overall"]]
        rows.append([m + _finance_tag(summary)] + ["n/a" if not c else f"{100 * sum(c) / len(c):+.2f}%" for c in cells])
    return table(("Method", "Exploitation", "Overall", "All settings"), rows)


def finance_cosines(summary: dict) -> list[str]:
    """docs/finance.md: cosine of each retained (news, industry) item with its own channel's direction and with
    the other channels' (meta.retrieval_cosines, engine.finance.retrieval.channel_cosines)."""
    return cosine_table(summary["meta"]["retrieval_cosines"])


def prophet_reference(summary: dict) -> list[str]:
    """README: Brier of the Market and Uniform reference rows per category on every loaded question."""
    rows = {r["method"]: r for r in summary["meta"]["reference_all"]}
    uni, mkt = rows["Uniform (0.5 on every market)"], rows["Market"]
    avg = lambda d: sum(d.values()) / len(d)  # noqa: E731
    return table(("Category", "Market", "Uniform"),
                 [(c, f"{mkt['brier'][c]:.4f}", f"{uni['brier'][c]:.2f}") for c in sorted(mkt["brier"])]
                 + [("**Average**", f"**{avg(mkt['brier']):.4f}**", f"**{avg(uni['brier']):.2f}**")])


def prophet_reference_full(summary: dict) -> list[str]:
    """docs/forecast.md: Brier of the reference rows, one column per category (paper Table 1 layout)."""
    refs = summary["meta"]["reference_all"]
    cats = sorted(refs[0]["brier"])
    return table(["Method", *cats, "Avg."],
                 ([r["method"]] + [f"{r['brier'][c]:.4f}" for c in cats]
                  + [f"{sum(r['brier'][c] for c in cats) / len(cats):.4f}"] for r in refs))


def game24_filtered(summary: dict) -> list[str]:
    """docs/game24.md: the engine's filtered ToT variant (each row's own label names the option)."""
    return table(("Method", "Accuracy (any of b)", "Avg. Calls", "Tokens"),
                 ((f"{r.get('label') or GAME24_NAMES.get(r['method'], r['method'])}{_game24_tag(r)}",
                   f"{100 * r['acc_any']:.1f}% ± {100 * r['acc_any_std']:.1f}",
                   f"{r['calls']:.1f} ± {r['calls_std']:.1f}", f"{r['tokens']:.0f}") for r in summary["methods"]))


def forecast_brier_accuracy(summary: dict) -> list[str]:
    """docs/forecast_baselines.md: Brier per category, average Brier and accuracy, reference and model rows."""
    rows = summary["methods"]
    cats = list(rows[0]["brier"])
    out = []
    for r in rows:
        b = [r["brier"][c] for c in cats]
        acc = [r["accuracy"][c] for c in cats]
        out.append([r["method"]] + [f"{v:.4f}" for v in b] + [f"{sum(b) / len(b):.4f}", f"{sum(acc) / len(acc):.4f}"])
    return table(["Method", *cats, "Avg. Brier", "Avg. accuracy"], out)


def futurex_accuracy(summary: dict) -> list[str]:
    """docs/futurex.md: accuracy per question type and overall, reference rows first (higher is better)."""
    rows = summary["methods"]
    types = list(rows[0]["n"])
    n_all = sum(rows[0]["n"].values())
    return table(["Method"] + [f"{t} (n={rows[0]['n'][t]})" for t in types] + [f"Overall (n={n_all})"],
                 ([r["method"]] + [f"{r['correct'][t] / r['n'][t]:.4f}" for t in types]
                  + [f"{sum(r['correct'].values()) / sum(r['n'].values()):.4f}"] for r in rows))


def forecast_real_model(summary: dict) -> list[str]:
    """README: a real model's rows on the held-out questions (Brier and accuracy per category, unusable answers)."""
    rows = summary["methods"]
    cats = list(rows[0]["brier"])
    n = sum(rows[0]["n"].values())
    out = []
    for r in rows:
        b, acc = [r["brier"][c] for c in cats], [r["accuracy"][c] for c in cats]
        bad = f"{r['failed']} of {n}" if r["row"] == "model" else "-"
        out.append([r["method"]] + [f"{v:.4f}" for v in b] + [f"{sum(b) / len(b):.4f}", f"{sum(acc) / len(acc):.4f}", bad])
    return table(["Method", *cats, "Avg. Brier", "Avg. accuracy", "Unusable answers"], out)


# tables of reference rows that no model produced (no [simulated] tag: nothing was simulated)
NO_MODEL_TABLES = {"prophet-reference-table", "prophet-reference-full-table",
                   "finance-cosine-table"}  # cosines of the synthetic texts under the embedder: no LLM answered

# marker name -> (document, run in RUNS, renderer)
TABLES: dict[str, tuple[str, str, Callable[[dict], list[str]]]] = {
    "prophet-reference-table": ("docs/commands.md", "prophet-arena", prophet_reference),
    "prophet-reference-full-table": ("docs/forecast.md", "prophet-arena", prophet_reference_full),
    "game24-table": ("README.md", "game24", game24_short),
    "finance-table": ("docs/commands.md", "finance", finance_exploitation),
    "finance-readme-table": ("README.md", "finance", finance_readme),
    "game24-full-table": ("docs/game24.md", "game24", game24_full),
    "game24-baselines-table": ("docs/baselines.md", "game24", game24_baselines),
    "finance-tsic-table": ("docs/finance.md", "finance", _finance_metric("tsIC", retrieval=True)),
    "finance-csic-table": ("benchmarks/results/finance.md", "finance", _finance_metric("csIC")),
    "finance-relative-table": ("docs/finance.md", "finance", finance_relative),
    "finance-cosine-table": ("docs/finance.md", "finance", finance_cosines),
    "game24-filtered-table": ("docs/game24.md", "game24-filtered", game24_filtered),
    "forecast-baselines-table": ("docs/forecast_baselines.md", "forecast-baselines", forecast_brier_accuracy),
    "futurex-table": ("docs/futurex.md", "futurex", futurex_accuracy),
    "prophet-smollm2-table": ("docs/commands.md", "prophet-arena-smollm2", forecast_real_model),
    "game24-smollm2-table": ("docs/game24.md", "game24-smollm2", game24_short),
}
# the benchmarks' tables: the source is "bench:<topic>" (benchmarks/results/<topic>.json; "bench:*" every topic)
_CLASH = sorted(set(TABLES) & set(bench.TABLES))
if _CLASH:  # one name, one block: a run's table and a benchmark's must not share a marker
    raise SystemExit(f"doc_tables: marker(s) {_CLASH} named both in scripts/doc_tables.py and benchmarks/_tables.py")
TABLES.update({name: (doc, f"bench:{topic}", render) for name, (doc, topic, render) in bench.TABLES.items()})


def load_summary(run: str, results: Path = RESULTS) -> dict:
    path = results / run / "summary.json"
    if not path.is_file():
        raise SystemExit(f"doc_tables: {path} is missing; run `{RUNS[run]}` and copy its summary.json there")
    return json.loads(path.read_text(encoding="utf-8"))


def load_bench(topic: str, bench_results: Path = BENCH_RESULTS) -> dict:
    path = bench_results / f"{topic}.json"
    if not path.is_file():
        raise SystemExit(f"doc_tables: {path} is missing; rerun its benchmark (benchmarks/test_*.py) to write it")
    return json.loads(path.read_text(encoding="utf-8"))


def _machine(m: dict) -> str:
    return m.get("description") or f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB"


def _span(loads: list[str]) -> str:
    """Load averages as one range where they are all numbers (``1.0-3.1``), else as recorded."""
    try:
        xs = [float(x) for x in loads]
    except ValueError:
        return ", ".join(loads)
    return f"{min(xs):.1f}" if min(xs) == max(xs) else f"{min(xs):.1f}-{max(xs):.1f}"


def _load(m: dict) -> str | None:
    return m.get("load_average") or (f"{m['load_average_1_5_15'][0]:.1f}" if m.get("load_average_1_5_15") else None)


def _bench_footer(name: str, data: dict) -> str:
    """The commands, dates and machines of the runs a benchmark table reads."""
    uses = getattr(bench.TABLES[name][2], "uses", None)  # a renderer that reads only some runs of its keys
    used = [r for key in bench.KEYS.get(name, list(data["runs"])) for r in bench.runs(data, key)
            if uses is None or uses(r)]
    by_cmd: dict[str, list[dict]] = {}
    for r in used:
        by_cmd.setdefault(r["command"], []).append(r)
    parts = []
    for cmd, rs in by_cmd.items():
        dates = sorted({r["date"][:10] for r in rs})
        loads = list(dict.fromkeys(x for x in (_load(r["machine"]) for r in rs) if x))
        parts.append(f"`{cmd}` ({len(rs)} run{'s' if len(rs) > 1 else ''}, {', '.join(dates)}"
                     + (f", load average {_span(loads)}" if loads else "") + ")")
    machines = list(dict.fromkeys(_machine(r["machine"]) for r in used))  # once per table, not once per run
    sim = any(r["figures"].get("simulated") for r in used)
    return (f"<sub>Rendered by `benchmarks/build_results.py` from `benchmarks/results/{data['topic']}.json`, measured by "
            + "; ".join(parts) + f" on {'; '.join(machines)}."
            + (" SIMULATED policy: a test harness, not a model." if sim else "") + "</sub>")


def render_block(name: str, results: Path = RESULTS, bench_results: Path = BENCH_RESULTS) -> str:
    """What goes between ``<!-- name -->`` and ``<!-- /name -->``: the table and the command that made it."""
    doc, source, render = TABLES[name]
    if source == "bench:*":
        topics = {p.stem: load_bench(p.stem, bench_results) for p in sorted(bench_results.glob("*.json"))}
        link = os.path.relpath("benchmarks/RESULTS.md", os.path.dirname(doc) or ".")  # from the document's folder
        return "\n".join(render(topics) + [
            "", "<sub>Rendered by `benchmarks/build_results.py` from `benchmarks/results/*.json`; the command, machine "
                f"and date of every figure are under its table in [benchmarks/RESULTS.md]({link}).</sub>"])
    if source.startswith("bench:"):
        data = load_bench(source[len("bench:"):], bench_results)
        return "\n".join(render(data) + ["", _bench_footer(name, data)])
    summary = load_summary(source, results)
    label = summary.get("meta", summary).get("label") or summary.get("label", "")
    lines = render(summary)
    lines += ["", f"<sub>Rendered by `scripts/doc_tables.py` from `docs/results/{source}/summary.json`, made by "
                  f"`{RUNS[source]}`" + (f"; {label}" if label else "") + ".</sub>"]
    return "\n".join(lines)


RESULTS_MD = "benchmarks/RESULTS.md"
RESULTS_ORDER = ["store", "game24_core", "llm", "index", "finance_retrieval", "cluster", "finance", "sandbox"]
RESULTS_HEAD = """# Benchmark results

Every figure below was measured with pytest-benchmark on the shared 2-core, 24 GiB development
machine (other jobs running, unless a section says the machine was idle), as a ratio against a
reference measured in the same run. Figures from the simulated LLM policy are labelled SIMULATED:
it is a test harness, not a model. Generated by `.venv/bin/python benchmarks/build_results.py`:
the prose of `benchmarks/results/*.md`, with every table rendered from the JSON the suites write
(`benchmarks/results/<topic>.json`: command, machine, date and figures of each run).
"""


def assemble_results(texts: dict[Path, str], root: Path = ROOT) -> str:
    """benchmarks/RESULTS.md: every benchmarks/results/*.md (as rendered in ``texts``) under one heading."""
    parts = sorted((root / "benchmarks" / "results").glob("*.md"),
                   key=lambda p: (RESULTS_ORDER.index(p.stem) if p.stem in RESULTS_ORDER else 99, p.stem))
    body = [RESULTS_HEAD]
    for p in parts:
        lines = (texts.get(p) or p.read_text(encoding="utf-8")).strip().splitlines()
        if lines and lines[0].startswith("# "):
            lines[0] = "#" + lines[0]
        body.append("\n".join(lines) + "\n")
    return "\n".join(body)


def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- {re.escape(name)} -->\n)(.*?)(\n<!-- /{re.escape(name)} -->)", re.S)


def update(root: Path = ROOT, results: Path = RESULTS, check: bool = False,
           bench_results: Path = BENCH_RESULTS) -> list[str]:
    """Rewrite (or, with ``check``, only compare) every marked block and RESULTS.md; returns the stale names."""
    stale = []
    texts: dict[Path, str] = {}
    for name, (doc, _, _) in TABLES.items():
        path = root / doc
        text = texts.get(path) or path.read_text(encoding="utf-8")
        m = _pattern(name).search(text)
        if m is None:
            raise SystemExit(f"doc_tables: {doc} has no <!-- {name} --> ... <!-- /{name} --> block")
        want = render_block(name, results, bench_results)
        if m.group(2) != want:
            stale.append(f"{doc}: {name}")
            text = text[: m.start(2)] + want + text[m.end(2):]
        texts[path] = text
    want = assemble_results(texts, root)
    path = root / RESULTS_MD
    if not path.is_file() or path.read_text(encoding="utf-8") != want:
        stale.append(RESULTS_MD)
    texts[path] = want
    if not check:
        for path, text in texts.items():
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
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
