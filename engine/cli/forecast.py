"""`toe forecast ...`: ForeDreamer helpers that need no model.

    toe forecast baselines DATA [--categories A,B] [--metric brier|accuracy|market_return|all] [--json]
        Uniform and Market rows on every question of a Prophet Arena CSV file or folder.
    toe forecast splits DATA [--n-evo 5] [--seed 0]
        Per-category evolution/validation pool and held-out evaluation sizes (train files fix the pool).
    toe forecast guides RUN
        The evolved MemGuides of a run: lineage, validation scores, E.2 archetypes, tool reuse, E.1 ratios (+ PNG).
    toe forecast tools [DIR]
        Validate MemTools (seed tools by default) in the bubblewrap sandbox and print the E.1 cluster ratios.
"""

from __future__ import annotations

import json
from pathlib import Path


def _baselines(args) -> int:
    from engine.forecast.data import load_prophet_arena
    from engine.forecast.metrics import format_table, reference_rows

    cats = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else ()
    qs = load_prophet_arena(args.data, cats)
    rows = reference_rows(qs)
    metrics = ["brier", "accuracy", "market_return"] if args.metric == "all" else [args.metric]
    counts: dict[str, int] = {}
    for q in qs:
        counts[q.category] = counts.get(q.category, 0) + 1
    mean = {"brier": lambda r: r.avg_brier, "accuracy": lambda r: r.avg_accuracy, "market_return": lambda r: r.avg_return}
    if args.json:  # one object: the rows per metric (per category and their mean), questions per category
        print(json.dumps({"data": str(args.data), "questions": len(qs), "per_category": dict(sorted(counts.items())),
                          "rows": [{"method": r.method, **{m: {**getattr(r, m), "mean": mean[m](r)} for m in metrics}}
                                   for r in rows]}))
        return 0
    print(f"{len(qs)} unique questions from {args.data}")
    for m in metrics:
        print(f"\n{m}:\n{format_table(rows, m)}")
    print("\nquestions per category: " + ", ".join(f"{c}: {n}" for c, n in sorted(counts.items())))
    return 0


def _splits(args) -> int:
    from engine.forecast.data import category_splits, load_prophet_arena, train_ids_from_files

    qs = load_prophet_arena(args.data)
    path = Path(args.data)
    evo_ids = train_ids_from_files(path) if path.is_dir() else None
    for s in category_splits(qs, args.n_evo, args.seed, evo_ids or None):
        print(f"{s.category}: evolution/validation {len(s.evo)}, held-out evaluation {len(s.eval)}")
    return 0


def _tools(args) -> int:
    from engine.forecast.memtools import inspect_tool
    from engine.forecast.seed_tools import seed_tool_sources
    from engine.forecast.similarity import cluster_ratio

    if args.dir:
        srcs = {p.stem: p.read_text(encoding="utf-8") for p in sorted(Path(args.dir).glob("*.py"))}
    else:
        srcs = seed_tool_sources()
    for stem, src in srcs.items():
        name, _ = inspect_tool(src)
        print(f"ok  {name}  ({stem}.py)")
    if len(srcs) > 1:
        for metric in ("token_jaccard", "normalized_sequence", "ast_sequence"):
            print(f"cluster ratio ({metric}, tau=0.5): {cluster_ratio(list(srcs.values()), metric, 0.5):.3f}")
    return 0


def _guides(args) -> int:
    from engine.forecast.guides_report import format_report, guides_report, plot_archetypes

    report = guides_report(args.run)
    print(format_report(report))
    png = Path(args.png) if args.png else Path(args.run) / "guides_archetypes.png"
    plot_archetypes(report, png)
    (Path(args.run) / "guides.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {png} and {Path(args.run) / 'guides.json'}")
    return 0


def register(subparsers) -> None:
    """Add this module's subcommands to the `toe` parser."""
    p = subparsers.add_parser("forecast", help="ForeDreamer / Prophet Arena helpers (no model needed)")
    sub = p.add_subparsers(dest="forecast_command", metavar="SUBCOMMAND")
    b = sub.add_parser("baselines", help="Uniform and Market reference rows on a Prophet Arena file or folder")
    b.add_argument("data", help="Prophet Arena CSV file or folder")
    b.add_argument("--categories", default="", help="comma-separated categories (default: all)")
    b.add_argument("--metric", default="brier", choices=["brier", "accuracy", "market_return", "all"])
    b.add_argument("--json", action="store_true", help="print the rows as one JSON object")
    b.set_defaults(func=_baselines)
    s = sub.add_parser("splits", help="per-category evolution/evaluation split sizes")
    s.add_argument("data")
    s.add_argument("--n-evo", type=int, default=5)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_splits)
    t = sub.add_parser("tools", help="validate MemTools in the sandbox and print E.1 cluster ratios")
    t.add_argument("dir", nargs="?", default="", help="folder of MemTool .py files (default: the seed tools)")
    t.set_defaults(func=_tools)
    g = sub.add_parser("guides", help="evolved MemGuides of a run: lineage, archetypes (E.2), reuse, E.1 ratios")
    g.add_argument("run", help="run folder of an evolved run (toe run ... --set run.evolve=true --out RUN)")
    g.add_argument("--png", default="", help="archetype chart (default: RUN/guides_archetypes.png)")
    g.set_defaults(func=_guides)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
