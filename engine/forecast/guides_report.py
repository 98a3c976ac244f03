"""``toe forecast guides RUN``: the evolved MemGuides and MemTools of a run (paper Figures 5, 7, S3; E.1, E.2).

For each category the run evolved (``summary.json`` -> ``meta`` -> ``evolution`` -> ``<category>``, and
the procedural store the run left in its folder, ``procedural/<run key>``): every guide with its lineage (parent, the iteration and track that
admitted it, its validation score), its pipeline archetype, how often each tool was chosen for reuse,
and the E.1 cluster ratios of the category's tool sources.

Archetypes (Appendix E.2) are assigned by rules read from E.2's definitions, applied to the guide's
prompt, its tools' names and schemas, not by hand as in the paper:

* **Planning and validation**: the guide plans, builds queries or parses options *and* validates,
  scores or ranks evidence (words of both kinds in its prompt or tool names).
* **Specification-content decomposition**: separate tools for the task specification / requirements
  and for the content / data, joined by the model.
* **Evidence-first LLM synthesis**: a tool extracts evidence into an intermediate file or cache, and a
  writer tool takes the text the model synthesised (a required string argument).
* **Tool-Orchestrated Processing**: otherwise: MemTools read, clean, extract and write the output.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from engine.errors import InputError
from engine.markdown import table

ARCHETYPES = ("Tool-Orchestrated Processing", "Evidence-first LLM synthesis", "Specification-content decomposition",
              "Planning and validation")
_PLAN = re.compile(r"\b(plan\w*|query|queries|parse options?|option pars\w*)\b|plan|query", re.I)
_CHECK = re.compile(r"validat\w*|verif\w*|scor\w*|rank\w*|check\w*", re.I)
_SPEC = re.compile(r"spec\w*|requirement\w*", re.I)
_CONTENT = re.compile(r"content|data|evidence", re.I)
_CACHE = re.compile(r"cache|intermediate|extract", re.I)


def _text_args(spec: dict) -> list[str]:
    params = (spec.get("function") or {}).get("parameters") or {}
    props = params.get("properties") or {}
    return [n for n in params.get("required") or [] if (props.get(n) or {}).get("type") == "string"]


def archetype(guide: dict, specs: dict) -> str:
    """The E.2 archetype of one guide (module doc); ``specs``: tool name -> TOOL_SPEC."""
    names = " ".join(guide.get("tool_names", []))
    text = f"{guide.get('prompt', '')} {names}"
    if _PLAN.search(text) and _CHECK.search(text):
        return ARCHETYPES[3]
    tools = guide.get("tool_names", [])
    if any(_SPEC.search(t) for t in tools) and any(_CONTENT.search(t) and not _SPEC.search(t) for t in tools):
        return ARCHETYPES[2]
    writers = [t for t in tools if _text_args(specs.get(t, {}))]
    if writers and any(_CACHE.search(t) for t in tools if t not in writers):
        return ARCHETYPES[1]
    return ARCHETYPES[0]


def guides_report(run_dir: str | Path) -> dict:
    """Per category: guides with lineage and archetype, reuse counts, cluster ratios (JSON-ready)."""
    from engine.forecast.memtools import ProceduralStore
    from engine.forecast.similarity import cluster_ratio

    run_dir = Path(run_dir)
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{run_dir}: no readable summary.json ({exc})") from exc
    evos = (summary.get("meta") or {}).get("evolution") or {}
    if not evos:
        raise InputError(f"{run_dir}: the run evolved no guides (run it with run.evolve = true)")
    out = {}
    for cat, d in sorted(evos.items()):
        store_dir = run_dir / d.get("store", "")
        if not (store_dir / "manifest.json").is_file():
            raise InputError(f"{run_dir}: the procedural store of {cat!r} is not at {store_dir} (the run folder "
                             f"holds it as procedural/<run key>)")
        store = ProceduralStore(store_dir)
        admitted = {}
        for e in d.get("log", []):
            m = re.match(r"admitted (\S+)", str(e.get("result", "")))
            if m:
                admitted[m.group(1)] = (e.get("iteration"), e.get("kind", e.get("track")))
        reuse = Counter(t for e in d.get("log", []) for t in e.get("reuse", []) or [])
        specs = {n: t.spec for n, t in store.tools.items()}
        guides = []
        for gid, g in store.guides.items():
            it, kind = admitted.get(gid, (None, "seed" if store.manifest["guides"][gid].get("parent") is None else "?"))
            guides.append({"guide": gid, "name": g["guide_name"], "parent": store.manifest["guides"][gid].get("parent"),
                           "iteration": it, "how": kind, "validation": d.get("scores", {}).get(gid),
                           "archetype": archetype(g, specs), "tools": list(g["tool_names"])})
        sources = [t.source for t in store.tools.values()]
        ratios = {m: (cluster_ratio(sources, m, 0.5) if len(sources) > 1 else None)
                  for m in ("token_jaccard", "normalized_sequence", "ast_sequence")}
        out[cat] = {"guides": guides, "reuse": dict(reuse.most_common()), "cluster_ratio": ratios,
                    "archetypes": dict(Counter(g["archetype"] for g in guides))}
    return out


def format_report(report: dict) -> str:
    lines = []
    for cat, r in report.items():
        lines += [f"## {cat}", ""]
        lines += table(("Guide", "Name", "Parent", "Iteration", "How", "Validation", "Archetype"),
                       ((g["guide"], g["name"], g["parent"] or "-", "-" if g["iteration"] is None else g["iteration"],
                         g["how"], "-" if g["validation"] is None else f"{g['validation']:.4f}", g["archetype"])
                        for g in r["guides"]))
        lines += ["", "Tool reuse: " + (", ".join(f"{k} x{v}" for k, v in r["reuse"].items()) or "none"),
                  "Cluster ratio (tau = 0.5, E.1): " + ", ".join(
                      f"{m} {'-' if v is None else f'{v:.3f}'}" for m, v in r["cluster_ratio"].items()),
                  "Archetypes (E.2, rule-based): " + ", ".join(f"{k} {v}" for k, v in r["archetypes"].items()), ""]
    return "\n".join(lines)


def plot_archetypes(report: dict, path: str | Path) -> Path:
    """Figure S3-style bars: guides per archetype, one group per category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cats = list(report)
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(cats) + 3), 3.6))
    w = 0.8 / len(ARCHETYPES)
    for i, a in enumerate(ARCHETYPES):
        ax.bar(np.arange(len(cats)) + i * w, [report[c]["archetypes"].get(a, 0) for c in cats], w, label=a)
    ax.set_xticks(np.arange(len(cats)) + 0.4 - w / 2, cats)
    ax.set_ylabel("MemGuides")
    ax.set_title("MemGuide pipeline archetypes (E.2, rule-based)")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
