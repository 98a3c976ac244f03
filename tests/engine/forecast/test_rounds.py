"""Forecasting on the round loop: episodes, round sizes, store files in snapshots, resume after a killed driver."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.cli import main as toe_main
from engine.errors import InputError
from engine.forecast.memtools import ProceduralStore
from engine.forecast.round_methods import EvolutionMethod, MemoryBaselineMethod, RolloutMethod, pack, unpack
from engine.forecast.task import ProphetArenaTask
from engine.runner import RunSpec
from engine.tasks import RunOptions, load_task

from .conftest import needs_bwrap

ROOT = Path(__file__).resolve().parents[3]


def _toml(pa_folder, tmp_path, **run) -> Path:
    import tomli_w

    cfg = {"task": "forecast", "data": {"path": str(pa_folder), "n_evo": 2, "categories": ["Economics"]},
           "run": {"methods": ["foredreamer", "memrl"], "max_questions": 2, "evolve": True, **run},
           "agent": {"top_k": 1}, "evolution": {"iterations": 6, "top_k": 2, "items_per_example": 1},
           "memory": {"top_k": 2}, "llm": {"backend": "simulated"}}
    path = tmp_path / "pa.toml"
    path.write_text(tomli_w.dumps(cfg))
    return path


def _records(out: Path) -> list[dict]:
    rows = pq.read_table(out / "episodes.parquet").to_pylist()
    return [{k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items() if k != "llm_latency_s"}
            for r in rows]


def test_episode_streams_and_round_sizes(pa_folder, tmp_path):
    from engine.config import load_toml

    task = ProphetArenaTask()
    exp = task.parse(load_toml(_toml(pa_folder, tmp_path)), RunOptions(config_path=tmp_path / "pa.toml",
                                                                       out=tmp_path / "o"))
    task.prepare(exp)
    runs = task.runs(exp)
    assert runs == [RunSpec("foredreamer", 0, "Economics"), RunSpec("memrl", 0)]  # C.3: a run per category
    evo = task.episodes(exp, runs[0])
    # init, one episode per evolution iteration, then (rank, question) evaluations; one episode per round
    assert [e.payload[0] for e in evo] == ["init"] + ["iterate"] * 6 + ["eval"] * 4
    assert [e.phase for e in evo] == ["evolve"] * 7 + ["test"] * 4 and task.round_size(exp, runs[0]) == 1
    mem = task.episodes(exp, runs[1])  # MemRL's experience track: leak-free rounds, in cutoff order
    cutoffs = [exp.ctx.items[e.payload[1]].cutoff for e in mem]
    # the first question closes 12 hours after its cutoff (09-01 12:00), before the second's (09-02 12:00): two rounds
    assert cutoffs == sorted(cutoffs) and task.round_size(exp, runs[1]) == [1, 1]
    assert [e.payload[2] for e in mem] == [True, True]
    assert isinstance(task.make_method(exp, runs[1]), MemoryBaselineMethod)
    plain = RunSpec("full_text", 0)
    assert isinstance(task.make_method(exp, plain), RolloutMethod)
    assert task.round_size(exp, plain) == len(task.episodes(exp, plain)) == 2  # no experience: one round


@needs_bwrap
def test_store_files_round_trip_and_bad_names(seeded_store_dir, tmp_path):
    store = ProceduralStore(seeded_store_dir)
    files = unpack(pack(store.files()))
    copy = ProceduralStore.from_files(tmp_path / "copy", files)
    assert copy.state_fingerprint() == store.state_fingerprint() and copy.guides == store.guides
    with pytest.raises(InputError, match=r"procedural store file '\.\./evil' is not manifest.json"):
        ProceduralStore.from_files(tmp_path / "bad", {"../evil": "x"})
    assert not (tmp_path / "evil").exists()


@needs_bwrap
def test_evolution_method_snapshot_is_the_whole_experience(pa_folder, tmp_path):
    """An iteration run from a snapshot, applied at the barrier, moves the method's state; eval does not."""
    from engine.config import load_toml
    from engine.forecast.simulated import simulated_backend

    task = ProphetArenaTask()
    exp = task.parse(load_toml(_toml(pa_folder, tmp_path)), RunOptions(config_path=tmp_path / "pa.toml",
                                                                       out=tmp_path / "o"))
    task.prepare(exp)
    run = task.runs(exp)[0]
    method = task.make_method(exp, run)
    assert isinstance(method, EvolutionMethod) and method.state is None
    episodes = task.episodes(exp, run)
    llm = simulated_backend()
    for ep in episodes[:2]:  # init, iteration 0
        snap = method.snapshot()
        (res,) = method.run_episodes(snap, [ep], llm)
        assert res.record["backend"] == "simulated" and res.record["llm_calls"] > 0
        method.apply([res])
    assert [e["iteration"] for e in method.state["log"]] == [0]
    before = state_bytes(method)
    (res,) = method.run_episodes(method.snapshot(), [episodes[-1]], llm)
    assert res.updates == {} and state_bytes(method) == before
    with pytest.raises(AssertionError, match="one episode per round"):
        method.run_episodes(method.snapshot(), episodes[1:3], llm)


def state_bytes(method) -> bytes:
    return bytes(pack((method.files, method.state, method.category)))


def test_forecast_resume_overrides_exist():
    assert load_task("forecast").resume_overrides == {"run.checkpoint": True}
    assert load_task("futurex").resume_overrides == {"run.checkpoint": True}


@needs_bwrap
@pytest.mark.slow
def test_killed_driver_resumes_to_the_uninterrupted_run(pa_folder, tmp_path, capsys):
    cfg = _toml(pa_folder, tmp_path)
    args = ["run", str(cfg), "--no-progress", "--set", "run.checkpoint=true"]
    assert toe_main(args + ["--out", str(tmp_path / "whole")]) == 0
    want = _records(tmp_path / "whole")
    out = tmp_path / "killed"
    latest = out / "checkpoint" / "foredreamer-seed0-Economics" / "LATEST"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "engine", *args, "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            if latest.is_file() and int(json.loads(latest.read_text())["dir"].split("-")[1]) >= 3:
                break
            assert proc.poll() is None, "the driver ended before it was killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)  # mid-evolution: 11 rounds
    finally:
        proc.wait(timeout=30)
    assert "results:" not in proc.stdout.read() and not (out / "summary.json").exists()
    done = int(json.loads(latest.read_text())["dir"].split("-")[1])
    assert 3 <= done < 11
    capsys.readouterr()
    assert toe_main(args + ["--out", str(out)]) == 0  # the same command: resumes
    stats = [json.loads(line) for line in (out / "executor_stats.jsonl").read_text().splitlines()]
    assert stats[-2]["run_key"] == "foredreamer-seed0-Economics" and stats[-2]["resumed_at_round"] == done
    assert _records(out) == want
    got, whole = (json.loads((p / "summary.json").read_text()) for p in (out, tmp_path / "whole"))
    assert got["methods"] == whole["methods"] and got["meta"]["evolution"] == whole["meta"]["evolution"]


def test_runs_of_one_experiment_share_one_context_per_process(pa_folder, tmp_path):
    """Each run's method is pickled to a worker on its own; every copy of the experiment's context resolves to one
    object per process (a worker serving many runs at once held a corpus per run), and only to its own."""
    import dataclasses
    import pickle

    from engine.config import load_toml

    task = ProphetArenaTask()
    exp = task.parse(load_toml(_toml(pa_folder, tmp_path)), RunOptions(config_path=tmp_path / "pa.toml",
                                                                       out=tmp_path / "o"))
    task.prepare(exp)
    blobs = [pickle.dumps(task.make_method(exp, run)) for run in task.runs(exp)]
    assert len(blobs) == 2 and all(pickle.loads(b).ctx is exp.ctx for b in blobs)  # this process: the original
    other = dataclasses.replace(exp.ctx, rel_tol=0.5)  # another context: its own token, its own object
    assert other.token != exp.ctx.token and pickle.loads(pickle.dumps(other)) is other
    # the state is pickled once per context, at its first pickling, and not into itself
    assert exp.ctx.__reduce_ex__(4)[1][1] is exp.ctx.__reduce_ex__(4)[1][1] is not other.__reduce_ex__(4)[1][1]
    probe = tmp_path / "blobs.pkl"
    probe.write_bytes(pickle.dumps(blobs))
    code = ("import pickle, sys; blobs = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "ms = [pickle.loads(b) for b in blobs]; "
            "print(len({id(m.ctx) for m in ms}), len(ms[0].ctx.items), ms[0].ctx.token, '_pickled' in vars(ms[0].ctx))")
    out = subprocess.run([sys.executable, "-c", code, str(probe)], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.split()
    assert out == ["1", str(len(exp.ctx.items)), exp.ctx.token, "False"]  # a fresh process (a worker): one copy


def test_a_context_travels_out_of_band_where_the_pickler_allows_it(pa_folder, tmp_path):
    """At protocol 5 with a buffer callback (how Ray ships a run's method) the context's state leaves the stream
    as one out-of-band buffer: a process that holds the context resolves it without reading the buffer, one that
    does not builds it from the buffer; a plain pickle keeps the state in the stream."""
    import pickle

    from engine.config import load_toml

    task = ProphetArenaTask()
    exp = task.parse(load_toml(_toml(pa_folder, tmp_path)), RunOptions(config_path=tmp_path / "pa.toml",
                                                                       out=tmp_path / "o"))
    task.prepare(exp)
    method = task.make_method(exp, task.runs(exp)[0])
    buffers = []
    stream = pickle.dumps(method, protocol=5, buffer_callback=buffers.append)
    state = exp.ctx._state_blob()
    assert [b.raw().nbytes for b in buffers] == [len(state)] and len(stream) < len(state) // 10
    assert pickle.loads(stream, buffers=buffers).ctx is exp.ctx  # held here: the buffer is not read
    with pytest.raises(pickle.UnpicklingError):  # the stream alone does not carry the state
        pickle.loads(stream)
    plain = pickle.dumps(method, protocol=5)
    assert len(plain) > len(state) and pickle.loads(plain).ctx is exp.ctx
    assert pickle.loads(pickle.dumps(method, protocol=4)).ctx is exp.ctx
    probe = tmp_path / "oob.pkl"
    probe.write_bytes(pickle.dumps((stream, [bytes(b.raw()) for b in buffers])))
    code = ("import pickle, sys; stream, bufs = pickle.loads(open(sys.argv[1], 'rb').read()); "
            "m = pickle.loads(stream, buffers=[memoryview(b) for b in bufs]); print(len(m.ctx.items), m.ctx.token)")
    out = subprocess.run([sys.executable, "-c", code, str(probe)], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout.split()
    assert out == [str(len(exp.ctx.items)), exp.ctx.token]  # a fresh process builds it from the buffer


def test_a_share_makes_its_workspace_only_when_it_writes_there(pa_folder, tmp_path, monkeypatch):
    """A share's folder under ``run.workspace`` exists only if something writes there (ForeDreamer's seeded tools
    and item folders; MemRL on evidence writes nothing), is kept, and a rerun of the round starts it clean."""
    from engine.config import load_toml
    from engine.forecast import round_methods as rm
    from engine.forecast.simulated import simulated_backend

    removed = []
    real_rmtree = rm.shutil.rmtree

    def rmtree(p, *a, **k):  # the share folders removed (the sandbox's own temporary folders aside)
        if Path(p).name.startswith("ep"):
            removed.append(Path(p))
        return real_rmtree(p, *a, **k)

    monkeypatch.setattr(rm.shutil, "rmtree", rmtree)
    task = ProphetArenaTask()
    exp = task.parse(load_toml(_toml(pa_folder, tmp_path)), RunOptions(config_path=tmp_path / "pa.toml",
                                                                       out=tmp_path / "o"))
    task.prepare(exp)
    llm = simulated_backend()
    kept = Path(exp.ctx.workspace)

    def share():
        for run in task.runs(exp):  # foredreamer, then memrl
            method = task.make_method(exp, run)
            (res,) = method.run_episodes(method.snapshot(), [task.episodes(exp, run)[0]], llm)
            assert res.record["llm_calls"] > 0

    share()
    runs = sorted(p.name for p in kept.iterdir())
    assert len(runs) == 1 and runs[0].startswith("foredreamer")  # MemRL's share made no folder
    (folder,) = (kept / runs[0]).iterdir()
    stale = folder / "stale.txt"
    stale.write_text("left by a crashed share")
    assert removed == []  # nothing to clean the first time
    share()  # the round again: starts clean, writes its folder again
    assert folder.is_dir() and not stale.exists() and removed == [folder]
