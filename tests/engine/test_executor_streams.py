"""Streams inside a worker (``[cluster] streams_per_worker``): the same results, exact usage, concurrent calls."""

import threading
from pathlib import Path

import pytest

import stream_workloads as SW
from engine.config import from_dict
from engine.errors import ConfigError
from engine.executor import ClusterConfig, LocalExecutor, check_streams, run_streams, stream_bounds
from engine.llm.base import Completion, MeteredBackend, Request, Response
from engine.rounds import Episode, EpisodeResult


@pytest.fixture(scope="module", params=["game24", "finance", "prophet-arena"])
def workload(request, tmp_path_factory):
    if request.param == "game24":
        return SW.game24("toe", 16)
    if request.param == "finance":
        return SW.finance("Pipe+ToE")
    return SW.prophet_arena(tmp_path_factory.mktemp("pa"), "full_text")


def test_any_number_of_streams_gives_the_one_stream_records_and_usage(workload):
    name, make_method, episodes, llm_factory, size = workload
    assert size >= 4, f"{name}: rounds of {size} do not split into streams"
    runs = {}
    for s in (1, 2, 4):
        ex = LocalExecutor(streams_per_worker=s)
        method = make_method()
        results = ex.run(method, episodes, llm_factory, size)
        w = ex.stats["workers"][0]
        runs[s] = (SW.plain(results), w["llm_calls"], ex.stats["streams_per_worker"])
    assert runs[1][0] == runs[2][0] == runs[4][0], f"{name}: records differ between 1, 2 and 4 streams"
    assert runs[1][1] == runs[2][1] == runs[4][1] > 0, f"{name}: LLM calls metered differently"
    assert [runs[s][2] for s in (1, 2, 4)] == [1, 2, 4]


def test_streams_are_contiguous_and_balanced():
    assert stream_bounds(10, 4).tolist() == [0, 2, 5, 8, 10]
    assert stream_bounds(3, 8).tolist() == [0, 1, 2, 3]  # never an empty stream
    assert stream_bounds(0, 4).tolist() == [0, 0]


class _Barrier:
    """A backend whose calls return only when ``parties`` calls are in flight at once (or fail after 10 s)."""

    name, model = "barrier", "barrier-model"

    def __init__(self, parties):
        self.barrier = threading.Barrier(parties, timeout=10)

    def generate(self, requests):
        self.barrier.wait()
        return [Response((Completion(r.prompt.upper(), 3),), 5, 0.0, self.name, self.model) for r in requests]


class _Echo:
    """One batched call per ``run_episodes``: the episodes' payloads upper-cased."""

    name = "echo"

    def run_episodes(self, snapshot, episodes, llm):
        out = llm.generate([Request(prompt=str(e.payload), episode=str(e.episode_id)) for e in episodes])
        return [EpisodeResult(e.episode_id, {"text": r.texts[0]}) for e, r in zip(episodes, out)]


def test_streams_call_the_backend_concurrently_and_meter_every_call_once():
    llm = MeteredBackend(_Barrier(3))  # three streams must be in flight together, or the barrier breaks
    eps = [Episode(i, f"p{i}", 0) for i in range(7)]
    out = run_streams(_Echo(), {}, eps, llm, streams=3)
    assert [r.episode_id for r in out] == list(range(7)) and out[4].record == {"text": "P4"}
    assert llm.meter.total.calls == 7 and llm.meter.total.completion_tokens == 21
    assert sorted(llm.meter.per_episode) == [str(i) for i in range(7)]


def test_a_failing_stream_fails_the_share():
    class Fails(_Echo):
        def run_episodes(self, snapshot, episodes, llm):
            if episodes[0].episode_id == 2:
                raise RuntimeError("stream of episode 2 failed")
            return super().run_episodes(snapshot, episodes, llm)

    llm = MeteredBackend(_Barrier(1))
    with pytest.raises(RuntimeError, match="episode 2"):
        run_streams(Fails(), {}, [Episode(i, "p", 0) for i in range(4)], llm, streams=2)


def test_streams_are_refused_over_a_backend_that_is_not_reentrant():
    class Offline(_Barrier):
        name = "vllm"
        concurrent_calls = False

    llm = MeteredBackend(Offline(1))
    check_streams(llm, 1)  # one stream: fine
    with pytest.raises(ConfigError, match=r"streams_per_worker=2 .*'vllm' does not"):
        check_streams(llm, 2)
    class Recorder:  # a replay in record mode calls its inner backend outside its lock
        name, model, backend_name = "replay", "m", "vllm"

        def __init__(self, inner):
            self.inner = inner

        def generate(self, requests):
            return self.inner.generate(requests)

    with pytest.raises(ConfigError, match="'vllm' does not"):
        check_streams(MeteredBackend(Recorder(Offline(1))), 4)
    with pytest.raises(ConfigError, match="streams_per_worker must be an integer >= 1, got 0"):
        LocalExecutor(streams_per_worker=0)
    with pytest.raises(ConfigError, match="cluster.streams_per_worker must be >= 1, got 0"):
        from_dict(ClusterConfig, {"streams_per_worker": 0}, "cluster")
    assert from_dict(ClusterConfig, {"streams_per_worker": 4}, "cluster").streams_per_worker == 4


def test_the_cluster_section_sets_the_local_executors_streams():
    from types import SimpleNamespace

    from engine.executor import make_executor

    opts = SimpleNamespace(executor="local", workers=1, address=None)
    assert make_executor(opts, config={"cluster": {"streams_per_worker": 3}}).streams_per_worker == 3
    assert make_executor(opts, config={}).streams_per_worker == 1
