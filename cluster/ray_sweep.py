"""``toe sweep --executor ray``: one Ray task per run of the grid, each the unchanged ``toe run`` process.

A task runs ``python -m engine run ...`` on whichever node Ray places it, with the run's output in the run
folder's ``run.log``; the config file and the sweep folder must therefore be on a filesystem every node
sees (the driver reads every run's summary.json at the end). ``jobs`` caps the tasks in flight; each task
asks Ray for one CPU, so Ray also never runs more at once than the cluster has CPUs for. The driver records
each run as it finishes, so a killed sweep resumes exactly like a local one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Callable, Sequence

import ray


@ray.remote(num_cpus=1)
def _run_one(argv: Sequence[str], log_path: str, env: dict) -> tuple[int, float]:
    t0 = time.perf_counter()
    with open(log_path, "ab") as log:
        rc = subprocess.call([sys.executable, "-m", "engine", *argv], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env)
    return rc, time.perf_counter() - t0


def run_ray(runs: Sequence, jobs: int, on_start: Callable, on_finish: Callable, address: str | None = None,
            env: dict | None = None) -> None:
    """Run ``runs`` (:class:`engine.sweep.runs.SweepRun`) as Ray tasks, at most ``jobs`` in flight."""
    started_here = not ray.is_initialized()
    if started_here:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address=address, include_dashboard=False)
    pending, in_flight = list(runs), {}
    try:
        while pending or in_flight:
            while pending and len(in_flight) < jobs:
                run = pending.pop(0)
                on_start(run)
                ref = _run_one.remote(list(run.argv), str(run.path / "run.log"), dict(env or os.environ))
                in_flight[ref] = run
            done, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in done:
                run = in_flight.pop(ref)
                try:
                    rc, wall = ray.get(ref)
                except ray.exceptions.RayError:  # the task or its node died: a failed run, retried on rerun
                    rc, wall = -1, 0.0
                on_finish(run, rc, wall)
    finally:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()
