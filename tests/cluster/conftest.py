"""One local Ray cluster for the whole tests/cluster session (Ray takes ~6 s and ~1.2 GiB to start)."""

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0"}})
    try:
        yield ray
    finally:
        ray.shutdown()
