"""One local Ray cluster for the whole tests/cluster session (Ray takes ~6 s and ~1.2 GiB to start)."""

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from toy_harness import with_harness_path

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray workers (of this job and of drivers that join the cluster) unpickle the test harness:
    # the raylet, started by ray.init, passes this PYTHONPATH on to every worker.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = with_harness_path(os.environ)["PYTHONPATH"]
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
    try:
        yield ray
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
