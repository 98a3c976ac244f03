"""The Ray executor's fail-fast check: resources asked for against what the cluster's nodes hold."""

import pytest

from engine.errors import ConfigError
from cluster.resources import check_cluster_resources

TWO_CORES = [{"CPU": 2.0, "memory": 1e9}]


def test_fits():
    check_cluster_resources(2, 1.0, 0.0, 1, TWO_CORES)
    check_cluster_resources(8, 1.0, 1.0, 1, [{"CPU": 16.0, "GPU": 4.0}, {"CPU": 16.0, "GPU": 4.0}])
    check_cluster_resources(2, 1.0, 1.0, 2, [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0, "GPU": 2.0}])
    check_cluster_resources(5, 0.0, 0.0, 1, TWO_CORES)  # zero-resource workers always fit


def test_too_many_workers_names_asked_available_and_fix():
    with pytest.raises(ConfigError) as err:
        check_cluster_resources(4, 1.0, 0.0, 1, TWO_CORES)
    msg = str(err.value)
    assert "asked 4 workers x (num_cpus_per_worker=1, num_gpus_per_worker=0) = 4 CPUs, 0 GPUs" in msg
    assert "1 node(s) with 2 CPUs, 0 GPUs" in msg and "room for 2 worker(s)" in msg
    assert "--workers 2" in msg and "cluster.num_cpus_per_worker=0.5" in msg


def test_gpus_asked_on_a_cpu_cluster():
    with pytest.raises(ConfigError, match=r"0 GPUs in all.*cluster.num_gpus_per_worker=0"):
        check_cluster_resources(1, 1.0, 1.0, 1, TWO_CORES)


def test_tensor_parallel_group_must_fit_one_node():
    # 4 GPUs in all, but a group of 4 bundles needs one node with 4 (STRICT_PACK)
    with pytest.raises(ConfigError, match="tensor_parallel_size=4.*room for 0 worker"):
        check_cluster_resources(1, 1.0, 1.0, 4, [{"CPU": 8.0, "GPU": 2.0}, {"CPU": 8.0, "GPU": 2.0}])


def test_per_node_packing():
    # 3 CPUs in all but no node holds a 2-CPU worker
    with pytest.raises(ConfigError, match="room for 0"):
        check_cluster_resources(1, 2.0, 0.0, 1, [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}])
