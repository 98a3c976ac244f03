"""``toe sweep --executor ray``: one Ray task per run of the grid, each the unchanged ``toe run`` process.

A task runs ``python -m engine run ...`` on whichever node Ray places it, with the run's output in the run
folder's ``run.log``; the config file and the sweep folder must therefore be on a filesystem every node
sees (the driver reads every run's summary.json at the end). ``jobs`` caps the tasks in flight; each task
asks Ray for what its run's config asks of one worker (``[cluster] num_cpus_per_worker`` and
``num_gpus_per_worker``, times ``tensor_parallel_size``: a run on in-process vLLM gets its GPU), so Ray
never runs more at once than the cluster holds, and a combination that asks more than the whole cluster has
is refused before any run starts. The task's environment is the driver's engine, model-server and library
settings only (``engine.sweep.runs.child_env``), not its whole environment. The driver records each run as
it finishes, so a killed sweep resumes exactly like a local one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Callable, Sequence

import ray

from cluster.resources import check_cluster_resources


@ray.remote(num_cpus=1)
def _run_one(argv: Sequence[str], log_path: str, env: dict) -> tuple[int, float]:
    t0 = time.perf_counter()
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # the GPUs Ray gave this task go to the run's process
        env = {**env, "CUDA_VISIBLE_DEVICES": os.environ["CUDA_VISIBLE_DEVICES"]}
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
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    for need in {tuple(sorted(r.resources.items())) for r in pending}:  # each distinct request, checked once
        need = dict(need)
        check_cluster_resources(1, need["num_cpus"], need["num_gpus"], need["tensor_parallel_size"], nodes)
    try:
        while pending or in_flight:
            while pending and len(in_flight) < jobs:
                run = pending.pop(0)
                on_start(run)
                need = run.resources
                ref = _run_one.options(num_cpus=need["num_cpus"] * need["tensor_parallel_size"],
                                       num_gpus=need["num_gpus"] * need["tensor_parallel_size"]).remote(
                    list(run.argv), str(run.path / "run.log"), dict(env or os.environ))
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
