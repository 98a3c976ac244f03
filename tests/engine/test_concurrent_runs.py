"""Runs at once (``[cluster] concurrent_runs``): every run of an experiment scheduled together over the same
workers and engines gives the records of running them one by one, on every task; a failed run stops the
others; what the engines saw over the whole experiment is reported once."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import stream_workloads as SW
from test_runner import CONFIG, ToyTask, options
from toy_harness import ToyMethod

from engine.errors import ConfigError
from engine.executor import ClusterConfig, LocalExecutor, RunCancelled
from engine.runner import run_task
from engine.tasks import RunOptions

ROOT = Path(__file__).resolve().parents[2]


def _plain_table(path: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in pq.read_table(path).to_pylist()]


def test_forks_of_one_executor_run_every_task_at_once_with_the_one_by_one_records(tmp_path):
    """Four runs of three tasks (game24, finance, Prophet Arena twice: one round and MemRL's leak-free rounds)
    in four threads on forks of one local executor: each run's records equal its run alone."""
    workloads = [SW.game24("toe", 16), SW.finance("Pipe+ToE"), SW.prophet_arena(tmp_path / "pa", "full_text"),
                 SW.prophet_arena(tmp_path / "pa-memrl", "memrl")]
    want = {name: SW.plain(LocalExecutor().run(make(), eps, llm, size)) for name, make, eps, llm, size in workloads}
    parent = LocalExecutor(concurrent_runs=len(workloads))
    got, start = {}, threading.Barrier(len(workloads))

    def one(name, make, eps, llm, size):
        start.wait()  # every run starts together: their calls interleave on the shared backends
        got[name] = SW.plain(parent.fork().run(make(), eps, llm, size))

    errors = SW.together(one, workloads)
    assert not errors, errors
    assert got == want


def test_the_runner_runs_a_game24_experiment_at_once_with_the_same_table(tmp_path):
    """``toe run`` with ``cluster.concurrent_runs = 0`` (every run at once): episodes.parquet equal to the one-by-one
    run's but for timings, the same table rows, and one experiment line in executor_stats.jsonl."""
    from engine.cli import main

    args = ["run", str(ROOT / "configs/game24.toml"), "--no-progress", "--set", "protocol.warmup_sample=10",
            "--set", "protocol.test_last=915", "--set", 'methods=["tot","toe-supply","memrl"]', "--set", "seeds=[0,1]"]
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    assert main([*args, "--set", "cluster.concurrent_runs=0", "--out", str(tmp_path / "all")]) == 0
    assert _plain_table(tmp_path / "one/episodes.parquet") == _plain_table(tmp_path / "all/episodes.parquet")
    rows = [json.loads((tmp_path / d / "summary.json").read_text())["methods"] for d in ("one", "all")]
    drop = lambda r: {k: v for k, v in r.items() if "_s" not in k and "per_s" not in k}  # noqa: E731
    assert [drop(r) for r in rows[0]] == [drop(r) for r in rows[1]]
    lines = [json.loads(x) for x in (tmp_path / "all/executor_stats.jsonl").read_text().splitlines()]
    assert sorted(x["run_key"] for x in lines) == sorted(
        ["experiment"] + [f"{m}-seed{s}" for m in ("tot", "toe-supply", "memrl") for s in (0, 1)])
    experiment = next(x for x in lines if x["run_key"] == "experiment")
    assert experiment["concurrent_runs"] == 6 and experiment["episodes_run"] == sum(
        x["episodes_run"] for x in lines if x["run_key"] != "experiment")


@dataclass(frozen=True)
class ModelledToyLLM:
    """The toy policy on a modelled H100 engine, one per seed (equal factories build one backend)."""

    seed: int

    def __call__(self):
        from engine.llm.server_model import REFERENCES, ServerModelBackend
        from engine.llm.simulated import SimulatedBackend
        from toy_harness import ToyPolicy

        return ServerModelBackend(SimulatedBackend(ToyPolicy()), REFERENCES["llama3.1-8b-h100"], time_scale=0.01)


def test_runs_at_once_share_one_modelled_engine_and_report_it(tmp_path, capsys):
    """Runs with their own LLM configs (one per seed) on one worker: their calls fill one modelled engine (one set
    of books); the experiment's engine line counts every run's calls, several runs' calls in flight together."""
    class ModelledToy(ToyTask):
        def llm_factory(self, exp, spec):
            return ModelledToyLLM(spec.seed)

    config = {**CONFIG, "episodes": 6, "cluster": {"concurrent_runs": 4}}
    assert run_task(ModelledToy(), config, options(tmp_path)) == 0
    err = capsys.readouterr().err
    assert "experiment (4 runs, 4 at once): 1 engine, utilization" in err
    lines = [json.loads(x) for x in (tmp_path / "run/executor_stats.jsonl").read_text().splitlines()]
    experiment = next(x for x in lines if x["run_key"] == "experiment")
    (engine,) = experiment["engines"]
    calls = sum(w["llm_calls"] for x in lines if x["run_key"] != "experiment" for w in x["workers"])
    assert engine["requests"] == calls > 0  # the meters count requests
    assert engine["max_concurrent_calls"] >= 2  # calls of different runs on the engine together


def test_a_failed_run_stops_the_others_and_nothing_claims_to_be_finished(tmp_path):
    class Failing(ToyTask):
        def make_method(self, exp, spec):
            self.made.append(spec.key)
            return ToyMethod(name=spec.method, refuse_on=3 if spec.key == "b-seed0" else -1)

    config = {**CONFIG, "episodes": 30, "cluster": {"concurrent_runs": 4}}
    with pytest.raises(Exception) as info:
        run_task(Failing(), config, options(tmp_path))
    assert not isinstance(info.value, RunCancelled)  # the run that failed is named, not a sibling's stop
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_cancelled_run_stops_between_rounds():
    from toy_harness import ToyLLMFactory, toy_episodes

    ex = LocalExecutor()
    ex.cancel = threading.Event()
    ex.cancel.set()
    with pytest.raises(RunCancelled, match="another run of the experiment failed"):
        ex.run(ToyMethod(), toy_episodes(6), ToyLLMFactory(), 3)


def test_runs_that_share_a_library_file_run_one_at_a_time(tmp_path, capsys):
    from engine.config import load_toml
    from engine.generic.task import GenericTask, parse
    from engine.runner import concurrent_runs

    cfg = load_toml(ROOT / "configs/generic-example.toml")
    cfg["methods"], cfg["seeds"] = ["flex"], [0, 1]
    plain, shared = parse(cfg), parse({**cfg, "flex": {"library": str(tmp_path / "lib.jsonl")}})
    assert GenericTask().independent_runs(plain) and not GenericTask().independent_runs(shared)
    opts = RunOptions(config_path=tmp_path / "g.toml", out=tmp_path / "g", progress=False)
    at_once = {**cfg, "cluster": {"concurrent_runs": 0}}
    assert concurrent_runs(GenericTask(), plain, at_once, opts, 2) == 2
    assert concurrent_runs(GenericTask(), shared, at_once, opts, 2) == 1
    assert "depend on each other" in capsys.readouterr().err


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ConfigError, match="cluster.concurrent_runs must be >= 0"):
        ClusterConfig(concurrent_runs=-1)
    with pytest.raises(ConfigError, match="concurrent_runs must be an integer >= 1"):
        LocalExecutor(concurrent_runs=-2)


def test_server_models_that_share_an_engine_keep_one_set_of_books():
    from engine.llm.base import Request
    from engine.llm.server_model import REFERENCES, ServerModelBackend

    a, b = ModelledToyLLM(0)(), ModelledToyLLM(1)()
    b.share_engine(a)
    a.generate([Request("p1", n=2)])
    b.generate([Request("p2", n=3)])
    assert a.server_stats()["calls"] == b.server_stats()["calls"] == 2
    assert a.server_stats()["sequences"] == 5
    other = ServerModelBackend(a.backend, REFERENCES["llama3.1-8b-a100"], time_scale=0.01)
    with pytest.raises(ConfigError, match="server_model settings must match"):
        other.share_engine(a)
