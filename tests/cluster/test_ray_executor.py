"""The Ray executor: same results as the local executor, exactly-once updates through faults."""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("ray")

from cluster.ray_executor import RayExecutor  # noqa: E402
from toy_harness import ToyLLMFactory, ToyMethod, toy_episodes, with_harness_path  # noqa: E402
from engine.checkpoint import RoundCheckpoints, fingerprint  # noqa: E402
from engine.errors import BackendError, ConfigError  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402

pytestmark = pytest.mark.ray

EPISODES = toy_episodes(20, seed=7)
ROUND = 4


def local_run(episodes=EPISODES):
    m = ToyMethod()
    return m, LocalExecutor().run(m, episodes, ToyLLMFactory(), ROUND)


def assert_same_run(a, b):
    (ma, ra), (mb, rb) = a, b
    assert [r.record for r in ra] == [r.record for r in rb]
    for x, y in zip(ra, rb):
        for k in x.updates:
            np.testing.assert_array_equal(x.updates[k], y.updates[k])
    sa, sb = ma.state(), mb.state()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def assert_applied_once(method, episodes):
    pairs = {(int(e), int(j)) for e, _, j in method.ledger}
    assert len(pairs) == len(method.ledger), "an update was applied twice"
    assert sorted({e for e, _ in pairs}) == [e.episode_id for e in episodes]


@pytest.fixture(scope="module")
def two_workers(ray_cluster):
    """One 2-worker executor shared by the tests: its actors (and LLM backends) outlive each run."""
    ex = RayExecutor(workers=2, num_cpus_per_worker=0.5)  # leaves 1 of the 2 CPUs to other executors
    try:
        yield ex
    finally:
        ex.close()


def test_local_and_ray_with_1_and_2_workers_and_2_store_shards_agree(two_workers, tmp_path):
    want = local_run()
    one = RayExecutor(workers=1, num_cpus_per_worker=0.5)
    for workers, shards in [(1, 1), (2, 1), (2, 2)]:
        m = ToyMethod()
        ex = one if workers == 1 else two_workers
        ex.store_shards = shards
        ckpt = tmp_path / f"w{workers}s{shards}"
        got = ex.run(m, EPISODES, ToyLLMFactory(), ROUND, checkpoint_dir=ckpt)
        assert_same_run((m, got), want)
        assert_applied_once(m, EPISODES)
        stats = ex.stats
        assert [w["worker"] for w in stats["workers"]] == [f"ray-{i}" for i in range(workers)]
        assert sum(w["episodes"] for w in stats["workers"]) == len(EPISODES)
        assert all(w["episodes"] > 0 and w["llm_calls"] > 0 for w in stats["workers"])
        assert stats["rounds"] == 5 and stats["store_shards"] == shards
        cursor = RoundCheckpoints(ckpt, fingerprint("toy", EPISODES, ROUND, shards), shards).latest()
        assert cursor.rounds_done == 5
        if shards == 2:  # each store owner checkpointed only its own subtrees (subtree % 2 == k)
            parts = []
            for k in range(2):
                with np.load(cursor.state_dir(k) / "toy_state.npz") as z:
                    assert (z["subtree"] % 2 == k).all()
                    parts.append(z["node_id"])
            assert sorted(np.concatenate(parts).tolist()) == list(range(32))
    one.close()
    assert not one.workers and two_workers.workers


def test_pipelined_rounds_on_ray_equal_the_local_executor(ray_cluster):
    """pipeline_rounds=1: workers start round k+1 (on the experience of rounds < k) while round k finishes
    (4 shares per round on 2 workers: two rounds' shares queue in the pool together). Same results as local."""
    want_m = ToyMethod()
    want = LocalExecutor(pipeline_rounds=1).run(want_m, EPISODES, ToyLLMFactory(), ROUND)
    ex = RayExecutor(workers=2, num_cpus_per_worker=0.5, chunks_per_worker=2, pipeline_rounds=1)
    try:
        m = ToyMethod()
        got = ex.run(m, EPISODES, ToyLLMFactory(), ROUND)
    finally:
        ex.close()
    assert_same_run((m, got), (want_m, want))
    assert_applied_once(m, EPISODES)
    assert ex.stats["pipeline_rounds"] == 1 and sum(w["episodes"] for w in ex.stats["workers"]) == len(EPISODES)


def test_tensor_parallel_workers_get_a_placement_group(two_workers):
    ex = RayExecutor(workers=1, tensor_parallel_size=2, num_cpus_per_worker=0.25)
    try:
        m = ToyMethod()
        got = ex.run(m, EPISODES[:8], ToyLLMFactory(), ROUND)
        assert_same_run((m, got), local_run(EPISODES[:8]))
        import ray

        assert ray.get(ex.workers[0].placement.remote()) == 2  # the engine's TP workers would land here
        assert ray.get(two_workers.workers[0].placement.remote()) == 0
    finally:
        ex.close()
    assert not ex._groups


def test_bad_options_are_refused(ray_cluster):
    with pytest.raises(ConfigError, match="workers must be an integer >= 1, got 0"):
        RayExecutor(workers=0)
    with pytest.raises(ConfigError, match="tensor_parallel_size must be an integer >= 1, got 0"):
        RayExecutor(tensor_parallel_size=0)
    with pytest.raises(ConfigError, match="store_shards=2 needs a method with split.*lacks split"):
        RayExecutor(store_shards=2).run(_Unshardable(), EPISODES, ToyLLMFactory(), ROUND)


class _Unshardable:
    name = "plain"


def test_replicas_on_auto_and_off_equal_the_local_executor(two_workers, tmp_path):
    """Replica mode (workers apply the rounds themselves, no store owner) gives the store owners' results;
    'auto' takes it for a run without checkpoint and leaves it for a checkpointed one; 'on' refuses that run."""
    want = local_run()
    ex = two_workers
    ex.store_shards = 1
    try:
        for mode, ckpt, used in (("on", None, True), ("off", None, False), ("auto", None, True),
                                 ("auto", tmp_path / "ckpt", False)):
            ex.replicas = mode
            m = ToyMethod()
            got = ex.run(m, EPISODES, ToyLLMFactory(), ROUND, checkpoint_dir=ckpt)
            assert_same_run((m, got), want)
            assert_applied_once(m, EPISODES)
            assert ex.stats["replicas"] is used, mode
            assert sum(w["episodes"] for w in ex.stats["workers"]) == len(EPISODES)
        ex.replicas = "on"
        with pytest.raises(ConfigError, match="replicas='on' needs one store shard.*this run has a checkpoint"):
            ex.run(ToyMethod(), EPISODES, ToyLLMFactory(), ROUND, checkpoint_dir=tmp_path / "refused")
        assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    finally:
        ex.replicas = "auto"
    with pytest.raises(ConfigError, match="replicas must be one of 'auto', 'on', 'off', got 'yes'"):
        RayExecutor(replicas="yes")


def test_replicas_catch_up_on_rounds_a_worker_had_no_share_of(two_workers):
    """Rounds of one episode leave a worker without a share; its next share brings the rounds it missed,
    with no lost share and no retry. Same results as the local executor at the same round plan."""
    plan = [4, 1, 1, 4, 2, 1, 3, 4]
    want_m = ToyMethod()
    want = LocalExecutor().run(want_m, EPISODES, ToyLLMFactory(), plan)
    ex = two_workers
    ex.store_shards, ex.replicas = 1, "on"
    try:
        m = ToyMethod()
        got = ex.run(m, EPISODES, ToyLLMFactory(), plan)
    finally:
        ex.replicas = "auto"
    assert_same_run((m, got), (want_m, want))
    assert_applied_once(m, EPISODES)
    assert ex.stats["replicas"] and ex.stats["retried_chunks"] == 0


@pytest.mark.parametrize("replicas", ["on", "off"])
def test_worker_killed_mid_round_is_retried_and_applied_once(two_workers, replicas):
    """With replicas the restarted worker's replica is rebuilt from the applied rounds before its next share."""
    import ray

    episodes = EPISODES[:12]
    want = local_run(episodes)
    m = ToyMethod(think_s=0.8)
    ex = two_workers
    ex.store_shards = 1
    ex.replicas = replicas
    ex.rounds_done = 0  # before the killer starts watching it
    killed = []

    def killer():
        deadline = time.time() + 60
        while ex.rounds_done < 1 and time.time() < deadline:
            time.sleep(0.01)
        while not ex.pool._future_to_task and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # round 2's shares are in their 0.8 s think time
        ray.kill(ex.workers[0], no_restart=False)
        killed.append(ex.rounds_done)

    t = threading.Thread(target=killer)
    t.start()
    try:
        got = ex.run(m, episodes, ToyLLMFactory(), ROUND)
    finally:
        t.join()
        ex.replicas = "auto"
    assert killed == [1]
    assert ex.stats["retried_chunks"] >= 1 and ex.stats["replicas"] is (replicas == "on")
    assert_same_run((m, got), want)
    assert_applied_once(m, episodes)


class FlakyGet:
    """``ray.get`` that raises a transient Ray error in place of chosen results (fault injection).

    ``when(args, kwargs)`` picks the calls; each of the first ``times`` picked calls raises
    ``make()`` instead of returning (the task itself ran: the caller must treat it as lost).
    """

    def __init__(self, ray, when, make, times=1):
        self.real, self.when, self.make, self.left, self.raised = ray.get, when, make, times, 0

    def __call__(self, *args, **kwargs):
        if self.left and self.when(args, kwargs):
            self.left -= 1
            self.real(*args, **kwargs)
            self.raised += 1
            raise self.make()
        return self.real(*args, **kwargs)


def _run_with_get(ex, monkeypatch, flaky):
    """``ex.run`` of a fresh ToyMethod over EPISODES while ``ray.get`` is ``flaky``."""
    import ray

    monkeypatch.setattr(ray, "get", flaky)
    m = ToyMethod()
    try:
        return m, ex.run(m, EPISODES, ToyLLMFactory(), ROUND)
    finally:
        monkeypatch.undo()


def _unavailable():
    import ray

    return ray.exceptions.ActorUnavailableError("The actor is temporarily unavailable: IOError: The actor is "
                                                "restarting (injected)", None)


@pytest.mark.parametrize("replicas", ["off", "on"])
def test_actor_unavailable_mid_round_is_a_lost_share(two_workers, monkeypatch, replicas):
    """An actor that Ray reports restarting (ActorUnavailableError) while a round is in flight: its share is
    run again, the run ends with local's records and every update applied once."""
    import ray

    ex = two_workers
    ex.store_shards, ex.replicas = 1, replicas
    ex.rounds_done = 0
    # the pool's result fetch (one ref, no timeout) of a share of round 3, after two rounds were applied
    flaky = FlakyGet(ray, lambda a, kw: "timeout" not in kw and len(a) == 1 and not isinstance(a[0], list)
                     and ex.rounds_done >= 2, _unavailable, times=2)
    try:
        m, got = _run_with_get(ex, monkeypatch, flaky)
    finally:
        ex.replicas = "auto"
    assert flaky.raised == 2 and ex.stats["retried_chunks"] >= 2
    assert_same_run((m, got), local_run())
    assert_applied_once(m, EPISODES)


def test_restarting_worker_at_start_is_awaited(two_workers, monkeypatch):
    """A reused worker still restarting when the next run starts (its ping answers ActorUnavailableError
    twice) is asked again, not counted as a failed run."""
    import ray

    ex = two_workers
    ex.store_shards = 1
    ex.run(ToyMethod(), EPISODES[:4], ToyLLMFactory(), ROUND)  # the workers exist and are reused below
    pids = [ray.get(w.pid.remote()) for w in ex.workers]
    flaky = FlakyGet(ray, lambda a, kw: "timeout" in kw and len(a) == 1 and not isinstance(a[0], list),
                     _unavailable, times=2)
    m, got = _run_with_get(ex, monkeypatch, flaky)
    assert flaky.raised == 2
    assert [ray.get(w.pid.remote()) for w in ex.workers] == pids  # the same workers, awaited
    assert_same_run((m, got), local_run())


def test_share_that_keeps_killing_workers_fails_cleanly(two_workers):
    ex = RayExecutor(workers=1, num_cpus_per_worker=0.5, max_restarts=1, max_attempts=2)
    m = ToyMethod(crash_on=5)
    with pytest.raises(BackendError, match="failed 2 times \\(max_attempts=2\\)"):
        ex.run(m, EPISODES[:8], ToyLLMFactory(), ROUND)
    assert ex.rounds_done == 1 and ex.stats["rounds"] == 1  # round 1 was applied, round 2 never
    assert not ex.workers and not ex.stores  # the failed run's actors are gone
    assert len(m.ledger) == 0  # the driver's method only takes the owners' state from a finished run


DRIVER = """
import sys
import ray
from cluster.ray_executor import RayExecutor
from toy_harness import ToyLLMFactory, ToyMethod, toy_episodes
ray.init(address=sys.argv[2])
ex = RayExecutor(workers=2, store_shards=2, num_cpus_per_worker=0.5)
ex.run(ToyMethod(think_s=0.3), toy_episodes(20, seed=7), ToyLLMFactory(), 4, checkpoint_dir=sys.argv[1])
print("FINISHED")
"""


def test_killed_driver_resumes_to_the_uninterrupted_run(ray_cluster, two_workers, tmp_path):
    want = local_run()
    ckpt = tmp_path / "ckpt"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    address = ray_cluster.get_runtime_context().gcs_address
    env = with_harness_path({**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    proc = subprocess.Popen([sys.executable, str(script), str(ckpt), address], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    store = RoundCheckpoints(ckpt, fingerprint("toy", EPISODES, ROUND, 2), shards=2)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            if (ckpt / "LATEST").is_file() and store.latest().rounds_done >= 2:
                break
            assert proc.poll() is None, "driver ended before it was killed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert "FINISHED" not in proc.stdout.read()
    done = store.latest().rounds_done
    assert 2 <= done < 5
    m = ToyMethod()
    ex = two_workers
    ex.store_shards = 2
    got = ex.run(m, EPISODES, ToyLLMFactory(), ROUND, checkpoint_dir=ckpt)
    assert ex.stats["resumed_at_round"] == done
    assert ex.stats["episodes_run"] == len(EPISODES) - ROUND * done
    assert_same_run((m, got), want)
    assert_applied_once(m, EPISODES)
    # rerunning the finished run joins the two shard checkpoints in the driver and starts no actor
    m2 = ToyMethod()
    fresh = RayExecutor(workers=2, store_shards=2)
    again = fresh.run(m2, EPISODES, ToyLLMFactory(), ROUND, checkpoint_dir=ckpt)
    assert not fresh.workers and not fresh.stores
    assert_same_run((m2, again), want)


def test_pool_hands_a_rounds_shares_to_workers_in_index_order():
    from cluster.workers import EpisodePool

    pool = EpisodePool(["w0", "w1", "w2"])
    pool._idle = [2, 0, 1]  # the order the actors finished their last shares in
    calls = []
    pool.sort_idle()
    for share in ("s0", "s1", "s2", "s3"):
        pool.submit(lambda actor, value: calls.append((actor, value)) or f"ref-{value}", share)
    assert calls == [("w0", "s0"), ("w1", "s1"), ("w2", "s2")]  # s3 waits for the first idle worker
    assert pool.has_next() and pool._pending and pool._pending[0][1] == "s3"


def test_a_run_at_once_goes_back_to_the_workers_that_hold_it_unless_they_are_busier():
    """No cluster needed: runs at once share the workers' load; a run's next share goes to a worker that already
    ran one of its shares (it holds the run's method) unless that worker has more than ``affinity`` shares more
    in flight than the least loaded one."""
    from cluster.workers import EpisodePool

    load = [0, 0, 0]
    calls = []
    run = lambda actor, value: calls.append(actor) or f"ref-{value}-{len(calls)}"  # noqa: E731
    a = EpisodePool(["w0", "w1", "w2"], slots=4, load=load, affinity=1)
    b = EpisodePool(["w0", "w1", "w2"], slots=4, load=load, affinity=1)
    a.submit(run, "a0")  # all idle: the least loaded, first in index order
    assert calls == ["w0"] and a.held == {0} and load == [1, 0, 0]
    b.submit(run, "b0")  # another run: the least loaded
    assert calls[-1] == "w1" and load == [1, 1, 0]
    a.submit(run, "a1")  # w0 holds run a but runs a0 now: a round's shares spread, to the least loaded
    assert calls[-1] == "w2" and a.held == {0, 2} and load == [1, 1, 1]
    a._future_to_task.clear()  # run a's round is in (its shares came back): its workers hold it, idle for it
    load[:] = [2, 1, 1]  # other runs keep w0 busy
    a.submit(run, "a2")  # of the workers holding run a, the least loaded (w2; w1 as loaded but without it)
    assert calls[-1] == "w2" and load == [2, 1, 2]
    a._future_to_task.clear()
    a.submit(run, "a3")  # w0 and w2 hold it, both one busier than w1: back to one of them (w0, idle order)
    assert calls[-1] == "w0" and load == [3, 1, 2]
    a._future_to_task.clear()
    a.submit(run, "a4")  # w2 (load 2) is one busier than w1 and holds it; w0 (3) is two busier
    assert calls[-1] == "w2" and a.held == {0, 2}
    a._future_to_task.clear()
    load[:] = [3, 0, 2]
    a.submit(run, "a5")  # every worker holding it is two or more busier than w1: w1, which now holds it too
    assert calls[-1] == "w1" and a.held == {0, 1, 2}
    plain = EpisodePool(["w0", "w1", "w2"], slots=4, load=[2, 0, 0], affinity=-1)  # affinity off: least loaded
    plain.held = {0}
    plain.submit(run, "c0")
    assert calls[-1] == "w1"


def test_a_refused_apply_fails_the_run_even_when_no_checkpoint_waits_for_it(two_workers):
    # Without a checkpoint the driver does not wait for the store owners' acknowledgements (the next
    # round's snapshot queues behind the apply); a refused apply must still fail the run.
    from engine.errors import StoreError

    ex = RayExecutor(workers=1, num_cpus_per_worker=0.5)
    for refuse_on in (5, 19):  # a middle round, and the last round (caught before the owners' state is taken)
        m = ToyMethod(refuse_on=refuse_on)
        with pytest.raises(StoreError, match=f"refuses the update of episode {refuse_on}"):
            ex.run(m, EPISODES, ToyLLMFactory(), ROUND)
        assert len(m.ledger) == 0  # the driver's method took nothing from the failed run
        assert not ex.workers and not ex.stores


def test_a_failed_run_at_once_leaves_the_shared_store_owner_to_the_other_runs(two_workers):
    """Runs at once share one store owner per shard: a fork whose run fails forgets its state there and kills
    nothing; its sibling runs on, and equals its local run."""
    import ray

    from engine.errors import StoreError

    parent = RayExecutor(workers=1, num_cpus_per_worker=0.5, concurrent_runs=2)
    try:
        failing = parent.fork()
        with pytest.raises(StoreError, match="refuses the update of episode 5"):
            failing.run(ToyMethod(refuse_on=5), EPISODES, ToyLLMFactory(), ROUND)
        owner = parent.stores
        assert len(owner) == 1 and ray.get(owner[0].held.remote()) == [] and parent.workers
        m = ToyMethod()
        assert_same_run((m, parent.fork().run(m, EPISODES, ToyLLMFactory(), ROUND)), local_run())
        assert parent.stores == owner  # the same owner process served the sibling
    finally:
        parent.close()
    assert not parent.workers and not parent.stores


def test_a_run_at_once_asks_the_workers_again_only_after_one_was_lost(two_workers, monkeypatch):
    """The first run at once asks every worker under the fleet's lock; a later one waits for its own store owner
    only, until a pool reports a lost worker: then the next run asks (and replaces a dead worker) again. The
    records are the local run's either way."""
    asked = []
    original = RayExecutor._await_actors

    def spy(self, loaded, llm_factory, ask=True):
        asked.append(ask)
        return original(self, loaded, llm_factory, ask)

    monkeypatch.setattr(RayExecutor, "_await_actors", spy)
    parent = RayExecutor(workers=1, num_cpus_per_worker=0.5, concurrent_runs=2)
    try:
        for lose in (False, True, False):
            fork, m = parent.fork(), ToyMethod()
            assert_same_run((m, fork.run(m, EPISODES, ToyLLMFactory(), ROUND)), local_run())
            if lose:
                fork._lost(0)  # what its pool calls when a worker dies under a share
        assert asked == [True, False, True]
    finally:
        parent.close()
    assert not parent._fleet.answered  # killed with the workers


def test_runs_at_once_cut_a_round_for_their_part_of_the_workers():
    """No cluster needed: one run cuts a round into workers x chunks shares; R runs at once cut it into
    workers x chunks / R, but into no share smaller than the streams while workers allow; every episode in
    exactly one contiguous share."""
    from cluster.ray_executor import share_bounds

    assert share_bounds(64, 32, 1).tolist() == list(range(0, 66, 2))  # one run: a share per worker
    assert share_bounds(64, 32, 1, streams=4).tolist() == list(range(0, 66, 2))  # one run: streams do not merge
    assert share_bounds(8, 32, 1).tolist() == list(range(9))  # never more shares than episodes
    assert share_bounds(8, 32, 1, runs=96).tolist() == list(range(9))  # one stream each: a share per episode
    assert share_bounds(8, 32, 1, runs=96, streams=8).tolist() == [0, 8]  # the day in one share, 8 streams
    assert np.diff(share_bounds(25, 32, 1, runs=64, streams=4)).tolist() == [4, 3, 4, 3, 4, 3, 4]
    assert len(share_bounds(25, 4, 1, runs=8, streams=4)) - 1 == 4  # no more shares than workers x chunks
    assert len(share_bounds(100, 32, 2, runs=3, streams=4)) - 1 == 25
    for n, w, c, r, s in [(1, 1, 1, 1, 1), (3, 32, 1, 96, 4), (100, 8, 2, 3, 2), (7, 16, 1, 0, 0)]:
        b = share_bounds(n, w, c, r, s)
        assert b[0] == 0 and b[-1] == n and all(np.diff(b) >= 1)


def test_a_worker_with_several_slots_is_idle_once_per_slot_and_busy_time_is_a_union():
    """No cluster needed: the pool's slot order and the busy-time union of overlapping shares."""
    from cluster.ray_executor import union_s
    from cluster.workers import EpisodePool

    pool = EpisodePool(["a", "b", "c"], slots=2)
    pool._idle = [2, 0, 2, 1, 0, 1]  # the order the slots freed up in
    pool.sort_idle()
    assert pool._idle == [0, 1, 2, 0, 1, 2]  # a round's first three shares go to three workers
    assert union_s([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0
    assert union_s([(0.0, 4.0), (1.0, 2.0)]) == 4.0 and union_s([]) == 0.0


def test_a_worker_without_its_replica_says_so_and_is_rebuilt_from_the_applied_rounds(ray_cluster):
    """The worker side of replica mode, in this process: a replica applies the rounds it lacks, however
    many; one older than the rounds it is sent (a restarted worker) raises ReplicaLost (the pool then
    sends every round again); a rebuilt replica gives the share the results a store owner's snapshot gives."""
    import ray

    from cluster.workers import EpisodePool, EpisodeWorker, ReplicaLost

    ref = [ray.put(ToyMethod())]
    rounds = [EPISODES[k:k + ROUND] for k in range(0, 16, ROUND)]
    owner = ToyMethod()
    want = []
    for batch in rounds:  # what store owners would serve: the local executor's snapshots
        out = owner.run_episodes(owner.snapshot(), batch, ToyLLMFactory()())
        want.append([r.record for r in out])
        owner.apply(out)
    w = EpisodeWorker(0, ToyLLMFactory())
    shares = []
    for k, batch in enumerate(rounds[:3]):  # round k sends round k - 1 (round 0: a new replica)
        results, st = w.run_on_replica(ref, k, batch, max(k - 1, 0), [1] if k else [], *shares[k - 1:k])
        assert [r.record for r in results] == want[k] and (st["apply_s"] > 0) is (k > 0)
        shares.append((results, st))
    fresh = EpisodeWorker(1, ToyLLMFactory())  # a restarted worker: no replica
    with pytest.raises(ReplicaLost, match="holds no replica of this run at round 2"):
        fresh.run_on_replica(ref, 3, rounds[3], 2, [1], shares[2])
    results, _ = fresh.run_on_replica(ref, 3, rounds[3], 0, [1, 1, 1], *shares)  # every round from 0
    assert [r.record for r in results] == want[3]
    shares.append((results, {}))
    final = w.finish_replica(ref, 4, 2, [1, 1], *shares[2:])  # w lacks rounds 2 and 3: applies both
    owner_state, final_state = owner.state(), final.state()
    for key in owner_state:
        np.testing.assert_array_equal(final_state[key], owner_state[key], err_msg=key)

    @ray.remote(num_cpus=0)
    class LosesItsReplicaOnce:
        def __init__(self):
            self.calls = 0

        def run(self, x):
            self.calls += 1
            if self.calls == 1:
                raise ReplicaLost("restarted")
            return x

    lost = []
    pool = EpisodePool([LosesItsReplicaOnce.remote()], max_restarts=2, max_attempts=3, on_lost=lost.append)
    pool.submit(lambda actor, x: actor.run.remote(x), 7)
    assert pool.get_next_unordered() == 7 and lost == [0] and pool.retried == [1]


def test_an_equal_llm_factory_keeps_the_workers_and_a_different_one_restarts_them(two_workers):
    import ray

    def pids():
        return ray.get([w.pid.remote() for w in two_workers.workers])

    m = ToyMethod()
    two_workers.run(m, EPISODES[:8], ToyLLMFactory(), ROUND)
    first = pids()
    two_workers.run(ToyMethod(), EPISODES[:8], ToyLLMFactory(), ROUND)  # a new object, equal by value
    assert pids() == first
    two_workers.run(ToyMethod(), EPISODES[:8], ToyLLMFactory(work=1), ROUND)
    assert not set(pids()) & set(first)


def test_a_store_owner_unpickles_its_own_writable_copy_of_the_method():
    """The owner loads a run from the driver's pickle: its own objects, arrays it can write, the driver's
    method untouched by its applies; anything but a pickle is refused by name."""
    from cluster.store_actors import StoreOwner, pickle_method

    driver = ToyMethod()
    owner = StoreOwner()
    owner.load("a", None, pickle_method(driver))
    held = owner.runs["a"].method
    assert held is not driver and all(v.flags.writeable for v in held.table.values())
    assert all(np.array_equal(held.table[k], v) for k, v in driver.table.items())
    held.table["score"][:] = 0.0
    assert driver.table["score"][0] == 0.5
    with pytest.raises(TypeError, match="pickled .*ToyMethod"):
        owner.load("b", None, driver)


class _Cycle:
    """Garbage only the cyclic collector frees (it refers to itself)."""

    def __init__(self):
        self.me = self


def test_a_store_owner_keeps_its_runs_out_of_the_collectors_scans_until_a_run_ends():
    """A loaded run is frozen (gc.freeze: no collection scans it again); its method is freed when the run is
    exported, and garbage frozen with it goes back to the collector then."""
    import gc
    import weakref

    from cluster.store_actors import StoreOwner, pickle_method

    owner = StoreOwner()
    collecting = gc.isenabled()
    gc.disable()  # the cycle below stays garbage until a collection this test controls
    try:
        gc.unfreeze()
        gc.collect()
        junk = _Cycle()
        cycle = weakref.ref(junk)
        del junk
        owner.load("a", None, pickle_method(ToyMethod()))
        assert gc.get_freeze_count() > 0 and not gc.isenabled()  # frozen; the caller's setting restored
        method = weakref.ref(owner.runs["a"].method)
        gc.collect()
        assert cycle() is not None  # frozen with the run: no collection frees it
        owner.export("a")
        assert method() is None and gc.get_freeze_count() == 0  # freed by reference counting; all thawed
        gc.collect()
        assert cycle() is None  # back under the collector
        owner.load("b", None, pickle_method(ToyMethod()))
        owner.drop("b")
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        if collecting:
            gc.enable()


def test_a_store_owner_refuses_a_run_it_does_not_hold():
    """Each call names its run: one never loaded, or already exported, is a clear error, not another run's state."""
    from cluster.store_actors import StoreOwner, pickle_method
    from engine.errors import StoreError

    owner = StoreOwner()
    owner.load("a", None, pickle_method(ToyMethod()))
    assert owner.held() == ["a"]
    with pytest.raises(StoreError, match="holds no run 'b'"):
        owner.snapshot("b")
    owner.export("a")
    with pytest.raises(StoreError, match="holds no run 'a' .*already exported"):
        owner.apply("a", 0, [], None)
    owner.drop("a")  # forgetting a run it no longer holds is fine
    assert owner.held() == []
