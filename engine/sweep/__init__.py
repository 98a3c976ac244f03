"""``toe sweep``: a grid of whole experiments, each an independent ``toe run``; see :mod:`engine.sweep.runs`.

Outputs in the sweep folder: ``runs/<name>/`` (each run's own folder, named by its overrides),
``sweep.json`` (the grid and every run's status), ``sweep.parquet`` (one row per run x method, swept keys
as columns), ``sweep.md`` and ``sweep_<metric>.png``.
"""

from __future__ import annotations

import json

from engine.atomic_io import write_bytes as atomic_write_bytes
from engine.sweep.grid import Axis, Combination, parse_axis, run_name
from engine.sweep.runs import Sweep, SweepOptions, execute, plan, read_record, read_summary

__all__ = ["Axis", "Combination", "Sweep", "SweepOptions", "parse_axis", "plan", "run_name", "run_sweep"]


def run_sweep(options: SweepOptions) -> int:
    """Plan, run what is unfinished, write the combined outputs; 0 when every run finished."""
    from engine.sweep import report
    from engine.tasks import load_task

    sweep = plan(options)
    metric = options.metric or load_task(sweep.task).default_metric
    out = options.out
    keys = [a.key for a in options.axes]
    done = [r for r in sweep.runs if r.finished]
    if done:  # a bad --metric is an error before anything runs when some runs already finished
        report.check_metric(report.combined_rows(sweep.task, done, read_summary), metric)
    out.mkdir(parents=True, exist_ok=True)
    print(f"sweep: {len(sweep.runs)} runs ({len(done)} finished, {len(sweep.todo)} to run) in {out}/runs")
    failed = execute(sweep)
    rows = report.combined_rows(sweep.task, sweep.runs, read_summary)
    records = [read_record(r.path) or {} for r in sweep.runs]
    manifest = {"config": str(options.config_path), "task": sweep.task, "grid": {a.key: list(a.raw) for a in options.axes},
                "overrides": list(options.overrides), "metric": metric,
                "runs": [{"name": r.combo.name, "values": r.combo.values, "status": rec.get("status"),
                          "rc": rec.get("rc"), "wall_s": rec.get("wall_s"), "attempts": rec.get("attempts")}
                         for r, rec in zip(sweep.runs, records)]}
    atomic_write_bytes(out / "sweep.json", (json.dumps(manifest, indent=1, default=str) + "\n").encode())
    if not rows:
        print("sweep: no run finished; nothing to tabulate")
        return 1
    report.write_parquet(rows, out / "sweep.parquet")
    report.check_metric(rows, metric)
    title = f"Sweep of {options.config_path} ({sweep.task}), {len(sweep.runs)} runs"
    lost = [(r.combo.name, rc, str(r.path / "run.log")) for r, rc in failed]
    text = report.markdown(rows, keys, metric, title, lost)
    (out / "sweep.md").write_text(text)
    png = out / f"sweep_{metric}.png"
    report.plot(rows, keys, metric, png, title)
    print(text)
    print(f"results: {out}/ (sweep.parquet, sweep.md, {png.name}, sweep.json, runs/)")
    if failed:
        print(f"sweep: {len(failed)} run(s) failed; see their run.log; rerun the same command to retry them")
    return 1 if failed else 0
