"""``toe sweep``: every combination of a grid as an independent ``toe run``, resumable, in parallel.

Each combination runs the unchanged ``toe run CONFIG --out OUT/runs/<name> --set KEY=VALUE ...`` in its own
process (``--executor local``: up to ``--jobs`` at once on this machine; ``--executor ray``: one Ray task
per run, see :mod:`cluster.ray_sweep`), so a sweep run is exactly the single run its overrides describe.

Resume. The sweep records each run in ``<run folder>/sweep_run.json`` (status, exit code, wall time and a
fingerprint of the run's resolved config). A run whose record says ``finished`` and whose ``summary.json``
parses is skipped; any other run is started again in its folder, where the task's own checkpoints (Game of
24: ``protocol.checkpoint``, which the sweep turns on unless the config sets it) let it continue from its
last committed round. A folder whose fingerprint differs from the run's config (the config file or the
common ``--set`` changed) is an error before anything starts: pick another ``--out``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from engine.atomic_io import write_bytes as atomic_write_bytes
from engine.config import apply_overrides, load_toml, renamed
from engine.errors import ConfigError, MissingExtraError
from engine.llm.config import ALIASES
from engine.sweep.grid import Axis, Combination, combinations, lookup
from engine.tasks import load_task, task_of

RUN_RECORD = "sweep_run.json"
RUN_LOG = "run.log"


@dataclass(frozen=True)
class SweepOptions:
    """What ``toe sweep`` was asked to do."""

    config_path: Path
    out: Path
    axes: tuple[Axis, ...]
    overrides: tuple[str, ...] = ()  # --set items applied to every run
    executor: str = "local"  # "local" | "ray"
    jobs: int = 1
    address: str | None = None
    metric: str | None = None
    progress: bool = True
    run_args: tuple[str, ...] = ()  # extra ``toe run`` options for every run (e.g. --track mlflow)


@dataclass(frozen=True)
class SweepRun:
    """One planned run: its combination, folder, command line and config fingerprint."""

    combo: Combination
    path: Path
    argv: tuple[str, ...]
    fingerprint: str
    finished: bool = False
    # what the run's own process needs from a Ray cluster (toe sweep --executor ray): its config's
    # [cluster] num_cpus_per_worker / num_gpus_per_worker x tensor_parallel_size when it runs locally
    # (one worker: the process itself); an inner --executor ray run asks for its workers itself
    resources: dict = field(default_factory=lambda: {"num_cpus": 1.0, "num_gpus": 0.0, "tensor_parallel_size": 1})


@dataclass
class Sweep:
    """The planned sweep (:func:`plan`): task, base config and every run, finished ones marked."""

    options: SweepOptions
    task: str
    config: dict[str, Any]
    runs: list[SweepRun] = field(default_factory=list)

    @property
    def todo(self) -> list[SweepRun]:
        return [r for r in self.runs if not r.finished]


def plan(options: SweepOptions) -> Sweep:
    """Validate the sweep and find which runs are finished; writes nothing."""
    if options.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {options.jobs}")
    if options.executor not in ("local", "ray"):
        raise ConfigError(f"--executor must be 'local' or 'ray', got {options.executor!r}")
    if not options.axes:
        raise ConfigError("toe sweep needs at least one --grid KEY=V1,V2,...")
    base = apply_overrides(load_toml(options.config_path), options.overrides, ALIASES)
    task = task_of(base, str(options.config_path))
    clash = sorted({k for a in options.axes for k in renamed(a.key, ALIASES)}
                   & {k for o in options.overrides for k in renamed(o.partition("=")[0].strip(), ALIASES)})
    if clash:
        raise ConfigError(f"key(s) {clash} given both as --grid and as --set; give each key once")
    if any(a.key == "task" for a in options.axes):
        raise ConfigError("--grid task=... is not supported: a sweep runs one task")
    resume = [f"{k}={json.dumps(v)}" for k, v in load_task(task).resume_overrides.items()
              if lookup(base, k) is None]
    sweep = Sweep(options, task, base)
    for combo in combinations(options.axes, base):
        sets = (*options.overrides, *resume, *combo.overrides)
        resolved = apply_overrides(load_toml(options.config_path), sets, ALIASES)
        fp = hashlib.sha256(json.dumps(resolved, sort_keys=True, default=str).encode()).hexdigest()[:16]
        path = options.out / "runs" / combo.name
        argv = ("run", str(options.config_path), "--out", str(path), "--no-progress",
                *(x for s in sets for x in ("--set", s)), *options.run_args)
        planned = _preflight(resolved, options, path, sets)
        record = read_record(path)
        if record is not None and record.get("fingerprint") != fp:
            raise ConfigError(
                f"run folder {str(path)!r} holds a run of another config (fingerprint {record.get('fingerprint')}, "
                f"this sweep's run has {fp}): the config file or the common --set changed; use another --out")
        finished = record is not None and record.get("status") == "finished" and read_summary(path) is not None
        sweep.runs.append(SweepRun(combo, path, argv, fp, finished, _resources(planned, options.run_args)))
    return sweep


def _resources(plan: dict | None, run_args: Sequence[str]) -> dict:
    """What one run's process asks a Ray cluster for (see :attr:`SweepRun.resources`)."""
    if plan is None:
        return {"num_cpus": 1.0, "num_gpus": 0.0, "tensor_parallel_size": 1}
    if "--executor" in run_args and list(run_args)[list(run_args).index("--executor") + 1:][:1] == ["ray"]:
        return {"num_cpus": 0.0, "num_gpus": 0.0, "tensor_parallel_size": 1}  # a driver; its workers ask
    return {"num_cpus": float(plan["num_cpus_per_worker"]), "num_gpus": float(plan["num_gpus_per_worker"]),
            "tensor_parallel_size": int(plan["tensor_parallel_size"])}


def _preflight(resolved: dict, options: SweepOptions, path: Path, sets) -> dict | None:
    """Validate the run's whole config the way ``toe run`` will, where the engine can (``engine.tasks.resolve``);
    the resolved plan."""
    try:
        from engine.tasks import RunOptions, resolve
    except ImportError:  # an engine without a resolved-plan check: each run validates itself
        return None
    return resolve(resolved, RunOptions(config_path=options.config_path, out=path, executor="local",
                                        overrides=tuple(sets), progress=False))


def read_record(path: Path) -> dict | None:
    try:
        return json.loads((path / RUN_RECORD).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_summary(path: Path) -> dict | None:
    """The run's summary.json, or None if it is missing or incomplete."""
    try:
        return json.loads((path / "summary.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_record(run: SweepRun, status: str, **extra) -> None:
    run.path.mkdir(parents=True, exist_ok=True)
    old = read_record(run.path) or {}
    rec = {"name": run.combo.name, "overrides": list(run.combo.overrides), "values": run.combo.values,
           "fingerprint": run.fingerprint, "status": status, "attempts": old.get("attempts", 0),
           "command": ["toe", *run.argv], **extra}
    if status == "running":
        rec["attempts"] += 1
    atomic_write_bytes(run.path / RUN_RECORD, (json.dumps(rec, indent=1, default=str) + "\n").encode())


# what a run's process on another node needs of the driver's environment (toe sweep --executor ray): the
# engine's, the model servers' and libraries' settings, and the variable its config names (llm.openai.api_key_env)
SHIPPED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
SHIPPED_ENV_PREFIXES = ("TOE_", "OPENAI_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "VLLM_", "CUDA_", "NCCL_",
                        "MLFLOW_", "RAY_", "OMP_", "MKL_", "NUMBA_", "TOKENIZERS_")


def child_env(only_shipped: bool = False, names: Sequence[str] = ()) -> dict[str, str]:
    """The environment of a run's process: this one (``only_shipped``: only :data:`SHIPPED_ENV`, the
    :data:`SHIPPED_ENV_PREFIXES` and ``names``, for a process on another node), with this engine first on
    PYTHONPATH."""
    env = dict(os.environ)
    if only_shipped:
        env = {k: v for k, v in env.items() if k in SHIPPED_ENV or k in names or k.startswith(SHIPPED_ENV_PREFIXES)}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


Finish = Callable[[SweepRun, int, float], None]


def run_local(runs: Sequence[SweepRun], jobs: int, on_start: Callable[[SweepRun], None], on_finish: Finish) -> None:
    """Up to ``jobs`` runs at once as ``python -m engine run ...`` processes; output in each run's run.log."""
    pending, running = deque(runs), {}
    env = child_env()
    try:
        while pending or running:
            while pending and len(running) < jobs:
                run = pending.popleft()
                on_start(run)
                log = open(run.path / RUN_LOG, "ab")
                proc = subprocess.Popen([sys.executable, "-m", "engine", *run.argv], stdout=log,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
                running[proc] = (run, log, time.perf_counter())
            for proc in [p for p in running if p.poll() is not None]:
                run, log, t0 = running.pop(proc)
                log.close()
                on_finish(run, proc.returncode, time.perf_counter() - t0)
            time.sleep(0.05)
    finally:  # interrupted: stop the runs this sweep started (their checkpoints let them resume)
        for proc, (_, log, _) in running.items():
            proc.terminate()
        for proc, (_, log, _) in running.items():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def execute(sweep: Sweep) -> list[tuple[SweepRun, int]]:
    """Run every unfinished run; returns (run, exit code) for those that ran. Records each run's status."""
    opts = sweep.options
    todo = sweep.todo
    failed: list[tuple[SweepRun, int]] = []
    bar = None
    if opts.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(sweep.runs), initial=len(sweep.runs) - len(todo), desc="sweep", unit="run")

    def on_finish(run: SweepRun, rc: int, wall: float) -> None:
        ok = rc == 0 and read_summary(run.path) is not None
        write_record(run, "finished" if ok else "failed", rc=rc, wall_s=round(wall, 3), ended=time.time())
        if not ok:
            failed.append((run, rc))
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(f"{run.combo.name} {'ok' if ok else f'FAILED rc={rc}'}")

    def on_start(run: SweepRun) -> None:
        # an unfinished run's summary.json (killed between writing it and its record) is stale: the run
        # starts again (from its checkpoint where there is one) and writes a new one
        (run.path / "summary.json").unlink(missing_ok=True)
        write_record(run, "running", started=time.time())

    try:
        if opts.executor == "local":
            run_local(todo, opts.jobs, on_start, on_finish)
        else:
            run_ray = _sweep_runner(opts.executor)
            # the API key's variable, where the config names its own (its flat name was moved by apply_overrides)
            key = lookup(sweep.config, "llm.openai.api_key_env")
            run_ray(todo, opts.jobs, on_start, on_finish, address=opts.address,
                    env=child_env(only_shipped=True, names=(key,) if isinstance(key, str) else ()))
    finally:
        if bar is not None:
            bar.close()
    return failed



SWEEP_ENTRY_POINTS = "toe_engine.sweep_runners"  # like engine.executor's registry: engine never imports cluster


def _sweep_runner(name: str):
    """The sweep runner called ``name`` (``ray``: ``cluster.ray_sweep:run_ray``, an entry point in pyproject.toml)."""
    from importlib.metadata import entry_points

    eps = {ep.name: ep for ep in entry_points(group=SWEEP_ENTRY_POINTS)}
    if name not in eps:
        raise ConfigError(f"no sweep runner {name!r}; installed: {sorted(eps) or 'none'} (the Ray one comes with "
                          f"pip install -e '.[cluster]', to be rerun after updating a checkout)")
    try:
        return eps[name].load()
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == "ray" or exc.name.startswith("ray.")):
            raise MissingExtraError("ray", "cluster") from exc
        raise
