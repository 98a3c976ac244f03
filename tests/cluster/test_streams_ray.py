"""Ray workers with streams (``streams_per_worker`` 2 and 4) and several shares at once (``shares_per_worker``):
the local executor's records for three tasks (Prophet Arena twice: one round, and MemRL's leak-free rounds)."""

import time

import pytest

pytest.importorskip("ray")

import stream_workloads as SW  # noqa: E402
from cluster.ray_executor import RayExecutor  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # ~100 s: three Ray settings x four workloads


def test_ray_workers_with_streams_equal_the_local_executor(ray_cluster, tmp_path):
    workloads = [SW.game24("toe", 16), SW.finance("Pipe+ToE"), SW.prophet_arena(tmp_path / "pa", "full_text"),
                 SW.prophet_arena(tmp_path / "pa-memrl", "memrl")]
    assert isinstance(workloads[3][4], list)  # a round plan
    want = {}
    for name, make_method, episodes, llm_factory, size in workloads:
        ex = LocalExecutor()
        want[name] = (SW.plain(ex.run(make_method(), episodes, llm_factory, size)), ex.stats["workers"][0]["llm_calls"])
    for streams, shares, chunks in ((2, 1, 1), (4, 1, 1), (2, 2, 4)):
        ex = RayExecutor(workers=2, num_cpus_per_worker=0.5, streams_per_worker=streams, shares_per_worker=shares,
                         chunks_per_worker=chunks)
        try:
            for name, make_method, episodes, llm_factory, size in workloads:
                t0 = time.perf_counter()
                got = SW.plain(ex.run(make_method(), episodes, llm_factory, size))
                wall = time.perf_counter() - t0
                setting = f"{streams} streams, {shares} shares at once, {chunks} chunks per worker"
                assert got == want[name][0], f"{name}: Ray with {setting} differs from local"
                assert sum(w["llm_calls"] for w in ex.stats["workers"]) == want[name][1], name
                assert ex.stats["streams_per_worker"] == streams and ex.stats["shares_per_worker"] == shares
                # busy time is the union of a worker's shares: never more than the run's wall time
                assert all(0 < w["busy_s"] <= wall for w in ex.stats["workers"] if w["episodes"]), name
        finally:
            ex.close()


def test_runs_at_once_on_one_set_of_ray_workers_equal_the_local_executor(ray_cluster, tmp_path):
    """``concurrent_runs``: four runs of three tasks, each on a fork of one Ray executor (the same two workers, each
    run with its own LLM config), started together in four threads: each run's records equal its local run's, and
    the shares of the runs spread over both workers (the fleet's load), none left idle."""
    import threading

    import ray

    workloads = [SW.game24("toe", 16), SW.finance("Pipe+ToE"), SW.prophet_arena(tmp_path / "pa", "full_text"),
                 SW.prophet_arena(tmp_path / "pa-memrl", "memrl")]
    want = {name: SW.plain(LocalExecutor().run(make(), eps, llm, size)) for name, make, eps, llm, size in workloads}
    parent = RayExecutor(workers=2, num_cpus_per_worker=0, streams_per_worker=2, concurrent_runs=len(workloads))
    got, stats, start = {}, {}, threading.Barrier(len(workloads))

    def one(name, make, eps, llm, size):
        ex = parent.fork()
        try:
            start.wait()
            got[name] = SW.plain(ex.run(make(), eps, llm, size))
            stats[name] = ex.stats
        finally:
            ex.close()

    try:
        errors = SW.together(one, workloads)
        assert not errors, errors
        assert got == want
        assert all(not s["replicas"] for s in stats.values())  # replicas are one run's: off when runs share workers
        served = [sum(s["workers"][i]["episodes"] for s in stats.values()) for i in range(2)]
        assert min(served) > 0, served
        assert len(parent.fleet_books()) == 2  # the workers outlive the forks until the parent closes
        # one store owner held every run's experience (store_actors), and let each go with its run
        assert len(parent.stores) == 1 and ray.get(parent.stores[0].held.remote()) == []
    finally:
        parent.close()
    assert parent.workers == []
