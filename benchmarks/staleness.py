"""What staleness costs: each task's metric against the number of episodes that run without each other's experience.

SIMULATED policies only (seeded test harnesses, not models): the figures say how much a method's
*learning* loses when episodes run in parallel, on the harness's error model, not what a model scores.

* Game of 24, ToT+ToE (``configs/game24.toml`` as shipped, seed 0, the 300 warm-up + 100 test
  puzzles): test accuracy (``acc_any``) and LLM calls per test puzzle against ``round_size``
  1 (the sequential run) .. 400 (the whole stream in one round: nothing learned is seen). Plain ToT,
  which learns nothing, is the floor.
* Finance, Pipe+ToE (``configs/finance-synthetic.toml``, seed 0, 300 days x 8 industries): the task's
  round is one trading day (8 episodes); here ``round_size`` runs 1 (industry by industry) .. 2,400 (the
  whole stream), and day-sized and larger rounds with ``pipeline_rounds = 1``: tsIC of the
  exploitation period at each horizon.
* Prophet Arena, MemRL (``configs/prophet-arena.toml``, every category, every held-out question):
  the experience track in cutoff order, one question per round (the sequential run) or in its
  leak-free rounds (the task's own plan: a round ends before any outcome would resolve, so the
  records are the sequential ones); staleness from ``pipeline_rounds = p`` (a round reads the
  experience of the rounds before the last ``p``). Brier score over all questions (lower is better).

    python benchmarks/staleness.py            # writes docs/results/staleness/{staleness.json,staleness.md,staleness.png}

``TOE_STALENESS_TASKS=game24`` reruns only that task's rows and keeps the others.

Prophet Arena reads its CSV files from ``TOE_PA_DATA`` (default: the config's ``data.path``).
The local executor runs everything; the Ray executor gives the same figures at the same round
size and ``pipeline_rounds`` (tests/cluster).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads as W  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402
from engine.markdown import table  # noqa: E402

OUT = W.ROOT / "docs" / "results" / "staleness"
# (round_size, pipeline_rounds): round sizes 1 .. the whole stream, and the pipelined settings of the scaling study
GAME24_CONFIGS = [(1, 0), (5, 0), (25, 0), (50, 0), (100, 0), (400, 0), (25, 1), (64, 1), (128, 1)]
TASKS = os.environ.get("TOE_STALENESS_TASKS", "game24,finance,prophet-arena").split(",")
# (round_size, pipeline_rounds): round sizes 1 .. the whole stream, and pipelined days
FIN_CONFIGS = [(1, 0), (8, 0), (16, 0), (40, 0), (200, 0), (2400, 0), (8, 1), (32, 1), (128, 1)]
# (rounds, pipeline_rounds): "one" = one question per round, "plan" = the task's leak-free rounds
PA_CONFIGS = [("one", 0), ("one", 1), ("one", 3), ("one", 7), ("plan", 0), ("plan", 1), ("plan", 3), ("plan", 7),
              ("plan", 11)]


def _records(wl, results):
    extra = {"part": wl.spec.part} if getattr(wl.spec, "part", None) else {}
    return [{**r.record, "method": wl.spec.method, "seed": wl.spec.seed, **extra} for r in results]


def _run(wl, round_size, pipeline=0):
    t0 = time.perf_counter()
    results = LocalExecutor(pipeline_rounds=pipeline).run(wl.method(), wl.episodes, wl.llm_factory, round_size)
    wall = time.perf_counter() - t0
    return wl.task.summarize(wl.exp, _records(wl, results), {wl.spec.key: {"wall_s": wall}}).rows, wall


def game24_rows():
    rows = []
    tot = W.game24("tot")
    (base,), _ = _run(tot, 25)
    rows.append({"task": "game24", "method": "ToT", "round_size": 25, "pipeline_rounds": 0, "in_flight": 25,
                 "accuracy": base["acc_any"], "calls": base["calls"]})
    wl = W.game24("toe")
    for size, p in GAME24_CONFIGS:
        (row,), wall = _run(wl, size, p)
        rows.append({"task": "game24", "method": "ToT+ToE", "round_size": size, "pipeline_rounds": p,
                     "in_flight": size * (p + 1), "accuracy": row["acc_any"], "calls": row["calls"], "wall_s": wall})
        print(rows[-1], flush=True)
    return rows


def finance_rows():
    rows = []
    wl = W.finance("Pipe+ToE")
    for size, p in FIN_CONFIGS:
        out, wall = _run(wl, min(size, len(wl.episodes)), p)
        tsic = {f"h{r['horizon']}": r["tsIC"] for r in out if r.get("period") == "Exploitation"}
        rows.append({"task": "finance", "method": "Pipe+ToE", "round_size": size, "pipeline_rounds": p,
                     "in_flight": size * (p + 1), "tsIC": tsic, "wall_s": wall})
        print(rows[-1], flush=True)
    return rows


def in_flight(plan: list[int], pipeline: int) -> tuple[float, int]:
    """Questions in flight (mean, max) when ``pipeline + 1`` consecutive rounds of ``plan`` run at once."""
    k = pipeline + 1
    windows = [sum(plan[i:i + k]) for i in range(max(1, len(plan) - k + 1))]
    return sum(windows) / len(windows), max(windows)


def prophet_arena_rows():
    rows = []
    wl = W.prophet_arena("memrl")
    for rounds, p in PA_CONFIGS:
        plan = wl.default_round if rounds == "plan" else [1] * len(wl.episodes)
        out, wall = _run(wl, plan, p)
        (row,) = [r for r in out if r.get("row") == "model"]
        n = sum(row["n"].values())
        brier = sum(row["brier"][c] * row["n"][c] for c in row["n"]) / n
        mean, most = in_flight(plan, p)
        rows.append({"task": "prophet-arena", "method": "MemRL", "rounds": rounds, "n_rounds": len(plan),
                     "round_size": max(plan), "pipeline_rounds": p, "in_flight": mean, "in_flight_max": most,
                     "brier": brier, "questions": n, "wall_s": wall})
        print(rows[-1], flush=True)
    return rows


NAMES = {"one": "one question each", "plan": "leak-free"}


def markdown(rows) -> str:
    g = [r for r in rows if r["task"] == "game24"]
    f = [r for r in rows if r["task"] == "finance"]
    p = [r for r in rows if r["task"] == "prophet-arena"]
    lines = ["SIMULATED policies (test harnesses, not models); local executor, seed 0.", ""]
    lines += table(["Game of 24", "round size", "pipeline_rounds", "episodes in flight", "accuracy (test, acc_any)",
                    "LLM calls / test puzzle"],
                   [[r["method"], r["round_size"], r["pipeline_rounds"], r["in_flight"], f"{r['accuracy']:.3f}",
                     f"{r['calls']:.1f}"] for r in g], align="lrrrrr")
    if f:
        hs = list(f[0]["tsIC"])
        lines += ["", *table(["Finance", "round size (8 = one day, the task's)", "pipeline_rounds", "episodes in flight",
                              *(f"tsIC {h} (exploitation)" for h in hs)],
                             [["Pipe+ToE", r["round_size"], r.get("pipeline_rounds", 0), r["in_flight"],
                               *(f"{r['tsIC'][h]:.4f}" for h in hs)] for r in f], align="lrrr" + "r" * len(hs))]
    if p:
        lines += ["", *table(["Prophet Arena MemRL", "rounds", "pipeline_rounds", "questions in flight, mean (max)",
                              "Brier (all questions)"],
                             [["MemRL", f"{NAMES[r.get('rounds', 'one')]} ({r.get('n_rounds', r['questions'])})",
                               r["pipeline_rounds"], f"{r['in_flight']:.1f} ({r.get('in_flight_max', r['in_flight'])})",
                               f"{r['brier']:.4f}"] for r in p], align="llrrr")]
    return "\n".join(lines) + "\n"


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    g = [r for r in rows if r["task"] == "game24" and r["method"] == "ToT+ToE" and not r["pipeline_rounds"]]
    gp = [r for r in rows if r["task"] == "game24" and r["method"] == "ToT+ToE" and r["pipeline_rounds"]]
    tot = [r for r in rows if r["task"] == "game24" and r["method"] == "ToT"]
    ax = axes[0]
    ax.plot([r["in_flight"] for r in g], [r["accuracy"] for r in g], "o-", label="ToT+ToE, round size")
    if gp:
        ax.plot([r["in_flight"] for r in gp], [r["accuracy"] for r in gp], "s", label="ToT+ToE, pipeline_rounds=1")
    if tot:
        ax.axhline(tot[0]["accuracy"], color="grey", ls="--", label="ToT (learns nothing)")
    ax.set(xscale="log", xlabel="episodes in flight (round size x (pipeline_rounds+1))",
           ylabel="test accuracy", title="Game of 24 [SIMULATED]")
    ax.legend(fontsize=8)
    f = [r for r in rows if r["task"] == "finance" and not r.get("pipeline_rounds")]
    fp = [r for r in rows if r["task"] == "finance" and r.get("pipeline_rounds")]
    ax = axes[1]
    for h in (f[0]["tsIC"] if f else []):
        line, = ax.plot([r["in_flight"] for r in f], [r["tsIC"][h] for r in f], "o-", label=h)
        ax.plot([r["in_flight"] for r in fp], [r["tsIC"][h] for r in fp], "s", color=line.get_color(),
                label=f"{h}, pipeline_rounds=1")
    ax.set(xscale="log", xlabel="episodes in flight (round size x (pipeline_rounds+1); 8 = one day)",
           ylabel="tsIC (exploitation)",
           title="Finance Pipe+ToE [SIMULATED]")
    ax.legend(fontsize=8)
    ax = axes[2]
    for rounds, mark in (("one", "o-"), ("plan", "s-")):
        p = [r for r in rows if r["task"] == "prophet-arena" and r.get("rounds", "one") == rounds]
        ax.plot([r["in_flight"] for r in p], [r["brier"] for r in p], mark, label=f"{NAMES[rounds]} rounds")
    ax.legend(fontsize=8)
    ax.set(xscale="log", xlabel="questions in flight (mean)", ylabel="Brier (lower is better)",
           title="Prophet Arena MemRL [SIMULATED]")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    old = json.loads((OUT / "staleness.json").read_text())["rows"] if (OUT / "staleness.json").exists() else []
    rows = [r for r in old if r["task"] not in TASKS]  # TOE_STALENESS_TASKS reruns some tasks, keeps the others
    rows += game24_rows() if "game24" in TASKS else []
    rows += finance_rows() if "finance" in TASKS else []
    if "prophet-arena" in TASKS:
        try:
            rows += prophet_arena_rows()
        except FileNotFoundError as exc:
            print(f"Prophet Arena skipped: {exc}", file=sys.stderr)
    order = {"game24": 0, "finance": 1, "prophet-arena": 2}
    rows.sort(key=lambda r: order[r["task"]])
    meta = {"simulated": True, "load_average_before": os.getloadavg()[0],
            "command": "python benchmarks/staleness.py"}
    (OUT / "staleness.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (OUT / "staleness.md").write_text(markdown(rows))
    plot(rows, OUT / "staleness.png")
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
