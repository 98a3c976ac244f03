"""Does a Ray cluster hold what a run asks of it? Checked on the cluster's totals before anything starts
(the Ray executor's workers, a Ray sweep's combinations)."""

from __future__ import annotations

from typing import Mapping, Sequence

from engine.errors import ConfigError


def check_cluster_resources(workers: int, num_cpus: float, num_gpus: float, tensor_parallel_size: int,
                            nodes: Sequence[Mapping[str, float]]) -> None:
    """Fail at once when a cluster with ``nodes`` (each node's total resources, e.g. ``{"CPU": 2.0}``)
    can never hold ``workers`` workers of ``tensor_parallel_size`` bundles of ``num_cpus`` CPUs and
    ``num_gpus`` GPUs (a tensor-parallel group is packed on one node).

    The check is on totals, not on what is free now: resources held by another job free up, resources
    the cluster lacks never come. Raises ConfigError saying what was asked, what the cluster has and
    which setting to change.
    """
    tp = tensor_parallel_size
    per_worker = {"CPU": num_cpus * tp, "GPU": num_gpus * tp}
    total = {r: float(sum(n.get(r, 0.0) for n in nodes)) for r in per_worker}
    fits = 0  # workers the nodes hold, each worker on one node (STRICT_PACK for tp > 1; one actor otherwise)
    for n in nodes:
        caps = [n.get(r, 0.0) / need for r, need in per_worker.items() if need > 0]
        fits += int(min(caps) + 1e-9) if caps else workers
    if fits >= workers:
        return
    asked = (f"{workers} workers x (num_cpus_per_worker={num_cpus:g}, num_gpus_per_worker={num_gpus:g}"
             + (f", tensor_parallel_size={tp}" if tp > 1 else "") + ")"
             + f" = {per_worker['CPU'] * workers:g} CPUs, {per_worker['GPU'] * workers:g} GPUs")
    has = (f"{len(nodes)} node(s) with {total['CPU']:g} CPUs, {total['GPU']:g} GPUs in all "
           f"(largest node: {max((n.get('CPU', 0.0) for n in nodes), default=0):g} CPUs, "
           f"{max((n.get('GPU', 0.0) for n in nodes), default=0):g} GPUs); room for {fits} worker(s)")
    fix = [f"--workers {max(fits, 1)}" if fits else None]
    if num_gpus > 0 and total["GPU"] < per_worker["GPU"] * workers:
        fix.append("--set cluster.num_gpus_per_worker=0 (no GPUs) or a cluster with GPUs")
    if num_cpus > 0 and total["CPU"] < per_worker["CPU"] * workers:
        fix.append(f"--set cluster.num_cpus_per_worker={total['CPU'] / (workers * tp):g}")
    if tp > 1:
        fix.append("a smaller cluster.tensor_parallel_size")
    raise ConfigError(f"the Ray cluster cannot hold the workers asked for: asked {asked}; the cluster has {has}. "
                      f"Change {' or '.join(f for f in fix if f)}.")

