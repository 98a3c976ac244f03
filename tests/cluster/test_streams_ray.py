"""Ray workers with streams (``streams_per_worker`` 2 and 4): the local executor's records for three tasks."""

import pytest

pytest.importorskip("ray")

import stream_workloads as SW  # noqa: E402
from cluster.ray_executor import RayExecutor  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]  # ~70 s: two executors x three tasks


def test_ray_workers_with_streams_equal_the_local_executor(ray_cluster, tmp_path):
    workloads = [SW.game24("toe", 16), SW.finance("Pipe+ToE"), SW.prophet_arena(tmp_path / "pa", "full_text")]
    want = {}
    for name, make_method, episodes, llm_factory, size in workloads:
        ex = LocalExecutor()
        want[name] = (SW.plain(ex.run(make_method(), episodes, llm_factory, size)), ex.stats["workers"][0]["llm_calls"])
    for streams in (2, 4):
        ex = RayExecutor(workers=2, num_cpus_per_worker=0.5, streams_per_worker=streams)
        try:
            for name, make_method, episodes, llm_factory, size in workloads:
                got = SW.plain(ex.run(make_method(), episodes, llm_factory, size))
                assert got == want[name][0], f"{name}: Ray with {streams} streams differs from local"
                assert sum(w["llm_calls"] for w in ex.stats["workers"]) == want[name][1], name
                assert ex.stats["streams_per_worker"] == streams
        finally:
            ex.close()
