"""The local executor: round semantics, exactly-once updates, atomic checkpoints and resume."""

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from toy_harness import ToyLLMFactory, ToyMethod, toy_episodes, with_harness_path
from engine import codec
from engine.checkpoint import RoundCheckpoints, fingerprint
from engine.errors import ConfigError, InputError, MissingExtraError, PersistenceError
from engine.executor import (
    ClusterConfig, LocalExecutor, cluster_config, freeze, make_executor, progress_bar, round_sizes, rounds,
)
from engine.rounds import Episode

EPISODES = toy_episodes(24, seed=3)


def run_local(episodes=EPISODES, round_size=4, **kw):
    method = ToyMethod()
    executor = LocalExecutor()
    results = executor.run(method, episodes, ToyLLMFactory(), round_size, **kw)
    return method, results, executor


def assert_same_run(a, b):
    (ma, ra), (mb, rb) = a, b
    assert [r.episode_id for r in ra] == [r.episode_id for r in rb]
    assert [r.record for r in ra] == [r.record for r in rb]
    for x, y in zip(ra, rb):
        assert x.updates.keys() == y.updates.keys()
        for k in x.updates:
            np.testing.assert_array_equal(x.updates[k], y.updates[k])
    sa, sb = ma.state(), mb.state()
    assert sa.keys() == sb.keys()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)


def assert_applied_once(method, episodes):
    ledger = method.ledger
    pairs = {(int(e), int(j)) for e, _, j in ledger}
    assert len(pairs) == len(ledger), "an update was applied twice"
    assert sorted({e for e, _ in pairs}) == [e.episode_id for e in episodes]


def sequential(episodes):
    """The obviously-correct reference: one episode at a time, experience updated after each."""
    method, llm = ToyMethod(), ToyLLMFactory()()
    out = []
    for e in episodes:
        res = method.run_episodes(method.snapshot(), [e], llm)
        method.apply(res)
        out.extend(res)
    return method, out


def by_rounds(episodes, size):
    """Reference round semantics: every episode of a round reads the round-start snapshot."""
    method, llm = ToyMethod(), ToyLLMFactory()()
    out = []
    for start in range(0, len(episodes), size):
        snap = method.snapshot()
        res = [method.run_episodes(snap, [e], llm)[0] for e in episodes[start:start + size]]
        method.apply(res)
        out.extend(res)
    return method, out


# --- round semantics ---------------------------------------------------------------------------

def test_round_size_one_is_the_sequential_run():
    m, r, _ = run_local(round_size=1)
    assert_same_run((m, r), sequential(EPISODES))
    assert_applied_once(m, EPISODES)


@pytest.mark.parametrize("size", [3, 4, 24, 100])
def test_rounds_read_the_round_start_snapshot(size):
    m, r, _ = run_local(round_size=size)
    assert_same_run((m, r), by_rounds(EPISODES, size))


def pipelined(episodes, size, depth):
    """Reference pipelining: round k reads the experience of rounds 0 .. k - depth - 1."""
    method, llm = ToyMethod(), ToyLLMFactory()()
    batches = [episodes[s:s + size] for s in range(0, len(episodes), size)]
    snaps, out = {}, []
    for k, batch in enumerate(batches):
        if k - depth - 1 < 0:
            snaps.setdefault(-1, method.snapshot())
        snap = snaps[max(k - depth - 1, -1)]
        res = [method.run_episodes(snap, [e], llm)[0] for e in batch]
        method.apply(res)
        snaps[k] = method.snapshot()
        out.extend(res)
    return method, out


@pytest.mark.parametrize("depth", [1, 2])
def test_pipelined_rounds_read_the_snapshot_depth_rounds_back(depth):
    method, executor = ToyMethod(), LocalExecutor(pipeline_rounds=depth)
    results = executor.run(method, EPISODES, ToyLLMFactory(), 4)
    assert_same_run((method, results), pipelined(EPISODES, 4, depth))
    assert_applied_once(method, EPISODES)
    assert executor.stats["pipeline_rounds"] == depth
    plain, _, _ = run_local(round_size=4)
    assert not np.array_equal(plain.table["score"], method.table["score"])  # staleness is real


def test_pipelined_rounds_refuse_checkpoints_and_bad_depths(tmp_path):
    with pytest.raises(ConfigError, match="pipeline_rounds=1 cannot be combined with checkpoints"):
        LocalExecutor(pipeline_rounds=1).run(ToyMethod(), EPISODES, ToyLLMFactory(), 4,
                                             checkpoint_dir=tmp_path / "ck")
    assert not (tmp_path / "ck").exists()
    with pytest.raises(ConfigError, match="pipeline_rounds must be an integer >= 0, got -1"):
        LocalExecutor(pipeline_rounds=-1)
    with pytest.raises(ConfigError, match="cluster.pipeline_rounds must be >= 0"):
        ClusterConfig(pipeline_rounds=-1)


def test_an_unknown_replica_mode_is_refused():
    with pytest.raises(ConfigError, match="cluster.replicas must be one of 'auto', 'on', 'off', got 'yes'"):
        ClusterConfig(replicas="yes")


def test_round_size_changes_results_so_staleness_is_real():
    m1, _, _ = run_local(round_size=1)
    m8, _, _ = run_local(round_size=8)
    assert not np.array_equal(m1.table["score"], m8.table["score"])


def test_one_batched_llm_call_per_round_and_worker_stats():
    _, _, ex = run_local(round_size=5)
    (w,) = ex.stats["workers"]
    assert ex.stats["rounds"] == 5 and ex.stats["episodes"] == 24
    assert w["worker"] == "local-0" and w["episodes"] == 24 and w["llm_calls"] == 24
    assert w["episodes_per_s"] > 0 and ex.stats["barrier_apply_s"] >= 0


def test_stats_are_appended_to_the_run_folder(tmp_path):
    opts = SimpleNamespace(executor="local", workers=1, address=None, out=tmp_path / "run")
    ex = make_executor(opts)
    for size in (4, 6):
        ex.run(ToyMethod(), EPISODES, ToyLLMFactory(), size)
    lines = [json.loads(x) for x in (tmp_path / "run" / "executor_stats.jsonl").read_text().splitlines()]
    assert [x["rounds"] for x in lines] == [6, 4]
    assert lines[0]["method"] == "toy" and lines[0]["workers"][0]["llm_calls"] == 24


def test_progress_reports_every_episode():
    seen = []
    run_local(round_size=5, progress=seen.append)
    assert seen == [5, 5, 5, 5, 4]
    sink = io.StringIO()
    with progress_bar(24, file=sink) as bar:
        run_local(round_size=5, progress=bar.update)
        assert bar.n == 24
    assert "24/24" in sink.getvalue()


def test_snapshot_is_read_only():
    class Writer(ToyMethod):
        def run_episodes(self, snapshot, episodes, llm):
            snapshot["score"][0] = 1.0
            return super().run_episodes(snapshot, episodes, llm)

    with pytest.raises(ValueError, match="read-only"):
        LocalExecutor().run(Writer(), EPISODES, ToyLLMFactory(), 4)
    arr = np.zeros(3)
    frozen = freeze({"a": arr})["a"]
    assert not frozen.flags.writeable and arr.flags.writeable


# --- bad input ---------------------------------------------------------------------------------

def by_plan(episodes, plan):
    """Reference for a round plan: every episode of a round reads the round-start snapshot."""
    method, llm = ToyMethod(), ToyLLMFactory()()
    out, start = [], 0
    for size in plan:
        snap = method.snapshot()
        res = [method.run_episodes(snap, [e], llm)[0] for e in episodes[start:start + size]]
        method.apply(res)
        out.extend(res)
        start += size
    return method, out


def test_a_round_plan_runs_rounds_of_its_sizes(tmp_path):
    plan = [1, 5, 2, 9, 7]
    m, r, ex = run_local(round_size=plan)
    assert_same_run((m, r), by_plan(EPISODES, plan)) and ex.stats["rounds"] == 5
    assert round_sizes(24, 10) == [10, 10, 4] and round_sizes(24, (24,)) == [24]
    # a plan is part of the run's identity: a checkpoint of another plan is refused
    run_local(round_size=plan, checkpoint_dir=tmp_path)
    with pytest.raises(PersistenceError, match="belongs to another run"):
        run_local(round_size=[1, 5, 2, 9, 6, 1], checkpoint_dir=tmp_path)
    assert fingerprint("m", EPISODES, 4) != fingerprint("m", EPISODES, [4] * 6)
    with progress_bar(24, enabled=False, round_size=plan) as bar:
        bar.update(6)
        assert "rounds 2/5" in str(bar.postfix)


@pytest.mark.parametrize("plan, why", [([1, 5, 2], "summing to 8"), ([24, 0], "bad sizes \\[0\\]"),
                                       ([12.0, 12], "bad sizes"), ([True] * 24, "bad sizes")])
def test_bad_round_plans_name_what_is_wrong(plan, why):
    with pytest.raises(ConfigError, match=f"integers >= 1 summing to the 24 episodes.*{why}"):
        run_local(round_size=plan)


def test_bad_round_size():
    with pytest.raises(ConfigError, match="round_size must be >= 1, got 0"):
        run_local(round_size=0)
    with pytest.raises(ConfigError, match="round_size"):
        list(rounds(EPISODES, -1))


def test_episode_ids_must_increase():
    eps = [Episode(0, 1, 0), Episode(2, 1, 0), Episode(2, 3, 0)]
    with pytest.raises(InputError, match="strictly increasing episode_id.*got 2 then 2"):
        run_local(eps)


def test_wrong_results_are_refused_and_change_nothing():
    class Dropper(ToyMethod):
        def run_episodes(self, snapshot, episodes, llm):
            return super().run_episodes(snapshot, episodes, llm)[:-1]

    m = Dropper()
    with pytest.raises(AssertionError, match="returned results for episodes"):
        LocalExecutor().run(m, EPISODES, ToyLLMFactory(), 4)
    assert len(m.ledger) == 0


def test_make_executor_options():
    opts = SimpleNamespace(executor="local", workers=1, address=None)
    assert isinstance(make_executor(opts), LocalExecutor)
    with pytest.raises(ConfigError, match="local executor runs one worker; got --workers 2"):
        make_executor(SimpleNamespace(executor="local", workers=2, address=None))
    with pytest.raises(ConfigError, match="--address .* needs --executor ray"):
        make_executor(SimpleNamespace(executor="local", workers=1, address="10.0.0.1:6379"))
    with pytest.raises(ConfigError, match="executor must be one of 'local', 'ray', got 'spark'"):
        make_executor(SimpleNamespace(executor="spark", workers=1, address=None))
    with pytest.raises(ConfigError, match="workers must be an integer >= 1, got 0"):
        make_executor(SimpleNamespace(executor="ray", workers=0, address=None))
    with pytest.raises(ConfigError, match="checkpoint_every must be >= 1"):
        make_executor(opts, checkpoint_every=0)


def test_executors_are_found_by_name_in_the_registry(monkeypatch):
    from engine.executor import settings as E

    made = []

    def factory(workers, address, **settings):
        made.append((workers, address, settings["checkpoint_every"]))
        return LocalExecutor(checkpoint_every=settings["checkpoint_every"])

    monkeypatch.setattr(E, "_EXECUTORS", dict(E._EXECUTORS))
    E.register_executor("inline", factory)
    ex = make_executor(SimpleNamespace(executor="inline", workers=3, address="h:1"),
                       config={"cluster": {"checkpoint_every": 2}})
    assert isinstance(ex, LocalExecutor) and made == [(3, "h:1", 2)]
    assert {"local", "inline"} <= set(E.executor_names())
    with pytest.raises(InputError, match="executor name must be an identifier"):
        E.register_executor("no spaces", factory)
    with pytest.raises(InputError, match="needs a callable factory"):
        E.register_executor("x", 42)


def test_the_ray_executor_is_an_entry_point_of_the_package():
    from importlib.metadata import entry_points

    from engine.executor import EXECUTOR_ENTRY_POINTS

    eps = {ep.name: ep.value for ep in entry_points(group=EXECUTOR_ENTRY_POINTS)}
    assert eps.get("ray") == "cluster.ray_executor:RayExecutor", (
        f"installed metadata lacks the executor entry points ({eps}); reinstall: pip install -e '.[dev]'")


def test_cluster_section_configures_the_executor(tmp_path):
    opts = SimpleNamespace(executor="local", workers=1, address=None)
    ex = make_executor(opts, config={"cluster": {"checkpoint_every": 3}})
    assert ex.checkpoint_every == 3 and ex.stats_path is None
    # parsed once upstream (options.cluster): the executor takes it as it is and never reads the file on disk
    cfg = tmp_path / "run.toml"
    cfg.write_text('task = "game24"\n[cluster]\ncheckpoint_every = 2\n')
    parsed = SimpleNamespace(executor="local", workers=1, address=None, config_path=cfg,
                             cluster=ClusterConfig(checkpoint_every=5))
    assert make_executor(parsed, config={"cluster": {"checkpoint_every": 7}}).checkpoint_every == 5
    assert cluster_config(parsed).num_gpus_per_worker == 0.0
    unparsed = SimpleNamespace(executor="local", workers=1, address=None, config_path=cfg)
    assert make_executor(unparsed).checkpoint_every == 1  # no config given: defaults, not the file
    with pytest.raises(InputError, match="options.cluster must be a ClusterConfig"):
        make_executor(SimpleNamespace(executor="local", workers=1, address=None, cluster={"checkpoint_every": 2}))
    with pytest.raises(ConfigError, match="cluster.num_gpus_per_worker must be >= 0, got -1"):
        make_executor(opts, config={"cluster": {"num_gpus_per_worker": -1}})
    with pytest.raises(ConfigError, match="unknown key.*'gpus'.*valid keys"):
        make_executor(opts, config={"cluster": {"gpus": 1}})
    with pytest.raises(ConfigError, match="cluster.tensor_parallel_size must be >= 1, got 0"):
        ClusterConfig(tensor_parallel_size=0)


def test_ray_executor_without_ray_names_the_extra():
    code = textwrap.dedent("""
        import sys
        sys.modules["ray"] = None  # as if the cluster extra were not installed
        from types import SimpleNamespace
        from engine.errors import MissingExtraError
        from engine.executor import make_executor
        try:
            make_executor(SimpleNamespace(executor="ray", workers=2, address=None))
        except MissingExtraError as exc:
            print("EXTRA", exc.extra, exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "EXTRA cluster" in out.stdout and "pip install '.[cluster]'" in out.stdout, out.stderr
    assert issubclass(MissingExtraError, ImportError)


# --- checkpoints and resume --------------------------------------------------------------------

class Crash(Exception):
    pass


def crash_after(n_episodes):
    seen = [0]

    def progress(k):
        seen[0] += k
        if seen[0] >= n_episodes:
            raise Crash

    return progress


def test_a_rerun_replaces_its_line_in_executor_stats(tmp_path):
    path = tmp_path / "executor_stats.jsonl"
    for key in ("a-seed0", "b-seed0", "a-seed0"):  # a-seed0 run again (after an interrupted run of the folder)
        LocalExecutor(stats_path=path).run(ToyMethod(), EPISODES, ToyLLMFactory(), 4, run_key=key)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["run_key"] for x in lines] == ["b-seed0", "a-seed0"]


@pytest.mark.parametrize("every", [1, 2])
def test_resume_after_crash_equals_uninterrupted(tmp_path, every, capsys):
    want = run_local(round_size=4)[:2]
    m = ToyMethod()
    with pytest.raises(Crash):  # dies in round 4, after 3 committed rounds
        LocalExecutor(checkpoint_every=every).run(m, EPISODES, ToyLLMFactory(), 4, crash_after(14),
                                                  checkpoint_dir=tmp_path)
    cursor = RoundCheckpoints(tmp_path, fingerprint("toy", EPISODES, 4)).latest()
    assert cursor.rounds_done == (3 if every == 1 else 2)
    seen = []
    m2 = ToyMethod()
    ex = LocalExecutor(checkpoint_every=every)
    capsys.readouterr()
    got = ex.run(m2, EPISODES, ToyLLMFactory(), 4, seen.append, checkpoint_dir=tmp_path)
    assert ex.stats["resumed_at_round"] == cursor.rounds_done
    assert f"from its checkpoint: round {cursor.rounds_done} of 6 ({4 * cursor.rounds_done} episodes done)" \
        in capsys.readouterr().err
    assert sum(seen) == 24 and seen[0] == 4 * cursor.rounds_done
    assert_same_run((m2, got), want)
    assert_applied_once(m2, EPISODES)
    # a finished run resumes to the same results without running anything
    m3 = ToyMethod()
    ex3 = LocalExecutor(checkpoint_every=every)

    def no_llm():
        raise AssertionError("a finished run must not build an LLM backend")

    again = ex3.run(m3, EPISODES, no_llm, 4, checkpoint_dir=tmp_path)
    assert_same_run((m3, again), want)
    assert ex3.stats["rounds"] == 0 and ex3.stats["episodes"] == 24


def test_checkpoint_of_another_run_is_refused(tmp_path):
    run_local(round_size=4, checkpoint_dir=tmp_path)
    with pytest.raises(PersistenceError, match="belongs to another run"):
        run_local(round_size=6, checkpoint_dir=tmp_path)
    with pytest.raises(PersistenceError, match="belongs to another run"):
        run_local(round_size=4, checkpoint_dir=tmp_path, run_key="lr=0.1")
    m, r, ex = run_local(round_size=6, checkpoint_dir=tmp_path, resume=False)
    assert ex.stats["resumed_at_round"] == 0 and len(r) == 24


def test_corrupted_checkpoint_is_refused(tmp_path):
    run_local(round_size=4, checkpoint_dir=tmp_path)
    (tmp_path / "LATEST").write_text("{not json")
    with pytest.raises(PersistenceError, match="unreadable"):
        run_local(round_size=4, checkpoint_dir=tmp_path)


def test_method_without_state_hooks_is_written_as_data(tmp_path):
    codec.data(ToyMethod)  # its attributes are arrays: the wrapper's whole state is data
    want = run_local(round_size=4)[:2]
    with pytest.raises(Crash):
        LocalExecutor().run(_NoHooks(ToyMethod()), EPISODES, ToyLLMFactory(), 4, crash_after(10),
                            checkpoint_dir=tmp_path)
    latest = json.loads((tmp_path / "LATEST").read_text())["dir"]
    assert (tmp_path / latest / "state" / "method_state.data").read_bytes().startswith(codec.MAGIC)
    wrapper = _NoHooks(ToyMethod())
    got = LocalExecutor().run(wrapper, EPISODES, ToyLLMFactory(), 4, checkpoint_dir=tmp_path)
    assert_same_run((wrapper.inner, got), want)


def test_method_whose_state_is_not_data_is_refused_at_the_first_checkpoint_naming_the_value(tmp_path):
    class Opaque:
        pass

    method = _NoHooks(ToyMethod())
    method.extra = Opaque()
    with pytest.raises(PersistenceError, match=r"_NoHooks cannot be checkpointed: value\['extra'\]: .*Opaque"):
        LocalExecutor().run(method, EPISODES, ToyLLMFactory(), 4, checkpoint_dir=tmp_path)


@codec.data
class _NoHooks:
    """Wraps a method, exposing only the Method protocol (no save_state/load_state); its state is data."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name

    def snapshot(self):
        return self.inner.snapshot()

    def run_episodes(self, snapshot, episodes, llm):
        return self.inner.run_episodes(snapshot, episodes, llm)

    def apply(self, results):
        self.inner.apply(results)


DRIVER = """
import sys
from toy_harness import ToyLLMFactory, ToyMethod, toy_episodes
from engine.executor import LocalExecutor
LocalExecutor().run(ToyMethod(), toy_episodes(24, seed=3), ToyLLMFactory(latency_s=0.15), 2,
                    checkpoint_dir=sys.argv[1])
print("FINISHED")
"""


@pytest.mark.slow
def test_killed_driver_resumes_to_the_uninterrupted_run(tmp_path):
    want = run_local(round_size=2)[:2]
    ckpt = tmp_path / "ckpt"
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(script), str(ckpt)], stdout=subprocess.PIPE, text=True,
                            env=with_harness_path(os.environ))
    store = RoundCheckpoints(ckpt, fingerprint("toy", EPISODES, 2))
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            if (ckpt / "LATEST").is_file() and store.latest().rounds_done >= 3:
                break
            assert proc.poll() is None, "driver ended before it was killed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)  # mid-run: 12 rounds of >= 0.15 s
    finally:
        proc.wait(timeout=30)
    assert "FINISHED" not in proc.stdout.read()
    done = store.latest().rounds_done
    assert 3 <= done < 12
    m = ToyMethod()
    ex = LocalExecutor()
    got = ex.run(m, EPISODES, ToyLLMFactory(), 2, checkpoint_dir=ckpt)
    assert ex.stats["resumed_at_round"] == done and ex.stats["episodes_run"] == 24 - 2 * done
    assert_same_run((m, got), want)
    assert_applied_once(m, EPISODES)


def _flip(path: Path, at: int = -1) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def test_a_flipped_byte_or_a_crafted_file_in_any_checkpoint_file_is_refused_by_name(tmp_path):
    """Every file of a checkpoint is checked against the manifest's sha256 before it is read; a results
    file replaced by a pickle that would run code is refused (checksum, then format), never unpickled; and
    one whose checksum is forged too is refused by the codec, which reads no pickle."""
    import hashlib
    import pickle

    run_local(round_size=4, checkpoint_dir=tmp_path / "c")
    pristine = tmp_path / "pristine"
    shutil.copytree(tmp_path / "c", pristine)
    latest = json.loads((pristine / "LATEST").read_text())["dir"]
    files = [p for p in (pristine / latest).rglob("*") if p.is_file() and p.name != "manifest.json"]
    files += sorted((pristine / "results").glob("*.data"))
    assert len(files) >= 3
    for f in files:
        case = tmp_path / f"case-{f.name}"
        shutil.copytree(pristine, case)
        _flip(case / f.relative_to(pristine))
        with pytest.raises(PersistenceError, match=re.escape(f.name) + ".*(checksum|bytes)"):
            run_local(round_size=4, checkpoint_dir=case)

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    crafted = tmp_path / "crafted"
    shutil.copytree(pristine, crafted)
    evil = pickle.dumps([Boom()])
    (crafted / "results" / files[-1].name).write_bytes(evil)
    with pytest.raises(PersistenceError, match=files[-1].name):
        run_local(round_size=4, checkpoint_dir=crafted)
    # the manifest forged to match: the codec refuses a file that is not its own format
    mpath = crafted / latest / "manifest.json"
    manifest = json.loads(mpath.read_text())
    manifest["result_digests"][files[-1].name] = {"sha256": hashlib.sha256(evil).hexdigest(), "bytes": len(evil)}
    mpath.write_text(json.dumps(manifest))
    with pytest.raises(PersistenceError, match=re.escape(files[-1].name) + ".*pickles are not read"):
        run_local(round_size=4, checkpoint_dir=crafted)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("old", [1, 2])
def test_a_checkpoint_of_an_earlier_format_is_refused_with_the_way_to_restart(tmp_path, old):
    """Format 1 held no checksums, format 2 pickled results: both refused before any file is read."""
    run_local(round_size=4, checkpoint_dir=tmp_path)
    latest = json.loads((tmp_path / "LATEST").read_text())["dir"]
    manifest = tmp_path / latest / "manifest.json"
    m = json.loads(manifest.read_text())
    m["format"] = old
    manifest.write_text(json.dumps(m))
    with pytest.raises(PersistenceError, match=f"format {old}, expected 3 .*no checksums, format 2 pickles.*--out NEW_FOLDER"):
        run_local(round_size=4, checkpoint_dir=tmp_path)


def test_cluster_llm_and_embed_sections_are_parsed_once_per_run(tmp_path, monkeypatch):
    """From the CLI to the executor and the workers' LLM factories, [cluster], [llm] and [embed] go through their
    parsers once (engine.executor.parse_cluster, engine.llm.config.load_llm_config,
    engine.embed.config.load_embed_config): resolve, the task, the runner, every run's executor and factory and
    the run folder read the parsed objects."""
    from engine.cli import main
    from engine.embed import config as embed_config
    from engine.executor import settings
    from engine.llm import config as llm_config

    calls, llm_calls, embed_calls = [], [], []
    real, real_llm, real_embed = settings.parse_cluster, llm_config.load_llm_config, embed_config.load_embed_config

    def counted(config):
        calls.append(dict((config or {}).get("cluster") or {}))
        return real(config)

    def counted_llm(data, where="llm"):
        llm_calls.append(where)
        return real_llm(data, where)

    monkeypatch.setattr(settings, "parse_cluster", counted)
    monkeypatch.setattr(llm_config, "load_llm_config", counted_llm)
    monkeypatch.setattr(embed_config, "load_embed_config",
                        lambda c: embed_calls.append(c.get("embed")) or real_embed(c))
    cfg = tmp_path / "g24.toml"
    cfg.write_text(
        'task = "game24"\nmethods = ["tot", "toe-supply"]\nseeds = [0, 1]\n'
        "[protocol]\nwarmup_sample = 4\ntest_limit = 4\nround_size = 2\n"
        "[cluster]\ncheckpoint_every = 3\nstreams_per_worker = 2\n[llm]\nseed = 3\n[embed]\ndim = 64\n")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    assert calls == [{"checkpoint_every": 3, "streams_per_worker": 2}]  # 4 runs, one parse
    assert llm_calls == ["llm"]
    assert embed_calls == [{"dim": 64}]
    stats = [json.loads(line) for line in (out / "executor_stats.jsonl").read_text().splitlines()]
    assert len(stats) == 4 and {s["streams_per_worker"] for s in stats} == {2}
