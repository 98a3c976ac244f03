"""Scaling study: 1..32 Ray workers, each with its own modelled vLLM engine (figures are SIMULATED).

Every worker's LLM is ``llm.backend = "server_model"`` (engine/llm/server_model.py): one
continuous-batching engine with the ``llama3.1-8b-h100`` constants (fitted to a public vLLM
sweep), answering with the task's SIMULATED policy and sleeping as long as the engine would
have taken. So the workers wait on their engines as they would on GPUs, and 32 of them fit on
a 2-core machine. Per task and worker count W (weak scaling: the episodes in flight grow with W):

* Game of 24 ToT and ToT+ToE: rounds of ``PER_WORKER x W`` puzzles (2 per worker: 64 at 32
  workers with ``pipeline_rounds = 1``, the largest setting the staleness table prices at <= 1
  point), ``ROUNDS`` rounds, each worker's share in ``STREAMS`` streams (2: one puzzle each);
* finance Pipe+ToE: rounds of ``PER_WORKER x W`` episodes (4 per worker; a trading day is 8
  episodes, one per industry: half a day at 1 worker, 16 days at 32) with ``pipeline_rounds = 1`` (``TOE_SCALE_FIN_PIPELINE``; 256 in flight at 32
  workers, priced by the staleness table), each worker's share in 4 streams (one episode each);
* Prophet Arena MemRL: the task's leak-free rounds (a round ends before any outcome would resolve:
  84 questions in 29 rounds, the sequential records), ``pipeline_rounds = ceil(W / 2.9) - 1`` keeps
  about W questions in flight, at most 7 (24 in flight: the staleness table's 0.01 Brier budget); the first ``max(2 W, 8) x 3`` questions (all 84 from 16 workers on).

Reported: episodes/s, efficiency ``eps(W) / (W x eps(1))``, each engine's utilization (tokens
served over what it could have served in the run's wall time: ``work_s / wall``) and busy fraction
(``busy_s / wall``), the mean barrier (driver + store owner apply), the per-round overhead, the
machine's load average and memory, the workers' CPU time, and the engines' calls in flight at
once. Every configuration's records are compared with the local executor's (one stream) at the
same round size and ``pipeline_rounds`` (plain simulated backend: the server model changes no text). A second test measures snapshots of 10^5..10^7-experience stores: size,
``snapshot()`` time and distribution to W workers through Ray's object store. ``test_experiment_at_once``
runs the Prophet Arena experiment with every run at once; ``test_context_memory_per_run`` measures what each
run at once adds to a worker's memory (``TOE_SCALE_CONTEXT_RUNS`` methods, 48); ``test_store_owner_load`` what
the store owner pays to take one run at once, against its former deep copy in the same run.

    python -m pytest benchmarks/test_scaling.py -s -p no:cacheprovider

Environment: ``TOE_SCALE_WORKERS`` (default ``1,2,4,8,16,32``), ``TOE_SCALE_TASKS``
(``game24-tot,game24-toe,finance,prophet-arena``), ``TOE_SCALE_PER_WORKER`` (2 for Game of 24, 4
for finance), ``TOE_SCALE_STREAMS`` (``streams_per_worker``: 2 for Game of 24, 4 for finance, 1 for Prophet
Arena), ``TOE_SCALE_SHARES`` (``shares_per_worker``, 1), ``TOE_SCALE_CHUNKS`` (``chunks_per_worker``, default
the shares),
``TOE_SCALE_ROUNDS`` (2), ``TOE_SCALE_PIPELINE`` (1 for Game of 24; finance and Prophet Arena
set their own), ``TOE_SCALE_TIME`` (the engine's ``time_scale``, 1.0), ``TOE_SCALE_STORES``
(``100000,1000000,10000000``), ``TOE_PA_DATA`` (the Prophet Arena CSV folder).
Results go to ``benchmarks/results/scaling.json`` and ``benchmarks/results/scaling_efficiency.png``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads as W  # noqa: E402
from _results import read_sections, write_sections  # noqa: E402
from engine.executor import LocalExecutor  # noqa: E402
from engine.markdown import table as markdown_table  # noqa: E402

WORKERS = [int(x) for x in os.environ.get("TOE_SCALE_WORKERS", "1,2,4,8,16,32").split(",")]
TASKS = os.environ.get("TOE_SCALE_TASKS", "game24-tot,game24-toe,finance,prophet-arena").split(",")
PER_WORKER = {"game24": 2, "finance": 4}
if os.environ.get("TOE_SCALE_PER_WORKER"):
    PER_WORKER = dict.fromkeys(PER_WORKER, int(os.environ["TOE_SCALE_PER_WORKER"]))
STREAMS = {"game24": 2, "finance": 4, "prophet-arena": 1}
if os.environ.get("TOE_SCALE_STREAMS"):
    STREAMS = dict.fromkeys(STREAMS, int(os.environ["TOE_SCALE_STREAMS"]))
# shares a worker runs at once (shares_per_worker), each round cut into that many shares per worker
# (chunks_per_worker); 1 everywhere: on finance 4 one-episode shares at once measured no better than
# one share in 4 streams (docs/cluster.md), and 2 at once of 4 balanced the engines but halved the batch
SHARES = {"game24": 1, "finance": 1, "prophet-arena": 1}
if os.environ.get("TOE_SCALE_SHARES"):
    SHARES = dict.fromkeys(SHARES, int(os.environ["TOE_SCALE_SHARES"]))
CHUNKS = int(os.environ["TOE_SCALE_CHUNKS"]) if os.environ.get("TOE_SCALE_CHUNKS") else None  # None: = shares
ROUNDS = int(os.environ.get("TOE_SCALE_ROUNDS", 2))
PIPELINE = int(os.environ.get("TOE_SCALE_PIPELINE", 1))
TIME_SCALE = float(os.environ.get("TOE_SCALE_TIME", 1.0))
STORES = [int(x) for x in os.environ.get("TOE_SCALE_STORES", "100000,1000000,10000000").split(",")]
SERVER = {"reference": "llama3.1-8b-h100", "time_scale": TIME_SCALE}
RESULTS = Path(__file__).parent / "results"
# finance: rounds of 4 W episodes with one more in flight (256 at 32 workers: the staleness table's (128, 1) row)
FIN_PIPELINE = int(os.environ.get("TOE_SCALE_FIN_PIPELINE", 1))
# Prophet Arena: the most pipelined leak-free rounds the staleness table prices within 0.01 Brier (24 in flight)
PA_PIPELINE_MAX = 7


def _mem_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


@pytest.fixture(scope="module")
def ray_cluster():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.setdefault("RAY_worker_niceness", "0")
    # CPUs are scheduling labels here: workers ask for 0 (they sleep on their engines); a small object store
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             object_store_memory=3 * 2**30)
    yield
    ray.shutdown()


def plan(task: str, w: int):
    """``(workload with server model, the same without, round size, pipeline_rounds)`` for ``w`` workers."""
    if task.startswith("game24"):
        method = "tot" if task == "game24-tot" else "toe"
        size = PER_WORKER["game24"] * w
        n = size * ROUNDS
        return W.game24(method, SERVER, n), W.game24(method, None, n), size, PIPELINE
    if task == "finance":  # rounds of 4 W episodes (half a trading day at W = 1): the same load per worker
        size = PER_WORKER["finance"] * w
        days = math.ceil(ROUNDS * size / 8) + 2  # the evaluation keeps days whose every horizon is known
        wl = W.finance("Pipe+ToE", SERVER, days)
        wl.episodes = wl.episodes[:ROUNDS * size]
        ref = W.finance("Pipe+ToE", None, days)
        ref.episodes = ref.episodes[:len(wl.episodes)]
        return wl, ref, size, FIN_PIPELINE
    if task == "prophet-arena":  # the task's leak-free rounds (2.9 questions on average), about W in flight
        wl, ref = W.prophet_arena("memrl", SERVER), W.prophet_arena("memrl", None)
        mean = len(wl.episodes) / len(wl.default_round)
        n = min(len(wl.episodes), max(2 * w, 8) * 3)
        wl.episodes, ref.episodes = wl.episodes[:n], ref.episodes[:n]
        return wl, ref, W.cut_plan(wl.default_round, n), min(PA_PIPELINE_MAX, max(0, math.ceil(w / mean) - 1))
    raise ValueError(f"unknown task {task!r}")


def _plain(results) -> str:
    """The records without timings (keys ending in _s), as JSON text (NaN compares equal to NaN)."""
    return json.dumps([{k: v for k, v in r.record.items() if not k.endswith("_s")} for r in results],
                      sort_keys=True, default=str)


def measure(task: str, w: int) -> dict:
    from cluster.ray_executor import RayExecutor

    wl, ref, size, pipeline = plan(task, w)
    first = size * (pipeline + 1) if isinstance(size, int) else sum(size[:pipeline + 1])
    kind = task.split("-")[0] if task.startswith("game24") else task
    streams, shares = STREAMS[kind], SHARES[kind]
    want = LocalExecutor(pipeline_rounds=pipeline).run(ref.method(), ref.episodes, ref.llm_factory, size)
    ex = RayExecutor(workers=w, num_cpus_per_worker=0, pipeline_rounds=pipeline, startup_timeout_s=600,
                     streams_per_worker=streams, shares_per_worker=shares, chunks_per_worker=CHUNKS or shares)
    mem0 = _mem_available_gib()
    try:
        warm = size if isinstance(size, int) else size[:pipeline + 1]
        ex.run(wl.method(), wl.episodes[:first], wl.llm_factory, warm)  # start-up, JIT, caches
        mem1 = _mem_available_gib()
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        got = ex.run(wl.method(), wl.episodes, wl.llm_factory, size)
        wall = time.perf_counter() - t0
        st = ex.stats
    finally:
        ex.close()
    assert _plain(got) == _plain(want), f"{task} W={w}: Ray results differ from the local executor's"
    servers = [x["server"] for x in st["workers"] if "server" in x]
    util = [s["work_s"] / wall for s in servers]
    busy = [s["busy_s"] / wall for s in servers]
    return {"task": task, "workers": w, "episodes": len(wl.episodes),
            "round_size": size if isinstance(size, int) else max(size),
            "rounds_planned": None if isinstance(size, int) else len(size),
            "pipeline_rounds": pipeline, "streams_per_worker": streams, "shares_per_worker": shares,
            "chunks_per_worker": CHUNKS or shares,
            "wall_s": wall, "episodes_per_s": len(wl.episodes) / wall,
            "utilization_mean": float(np.mean(util)), "utilization_min": float(np.min(util)),
            "busy_mean": float(np.mean(busy)), "busy_min": float(np.min(busy)),
            "seqs_per_call": sum(s["sequences"] for s in servers) / max(1, sum(s["calls"] for s in servers)),
            "work_per_busy": float(np.mean([s["work_s"] / s["busy_s"] for s in servers if s["busy_s"] > 0])),
            "max_concurrent_calls": max(s.get("max_concurrent_calls", 1) for s in servers),
            "barrier_s": st["barrier_apply_s"] + st["store_apply_s"], "round_overhead_s": st["round_overhead_s"],
            "round_s": st["round_s"], "rounds": st["rounds"],
            "worker_cpu_s": sum(x["cpu_s"] for x in st["workers"]),
            "worker_cores": sum(x["cpu_s"] for x in st["workers"]) / wall,  # cores the workers used together
            "load_average": load, "mem_available_gib": mem1, "workers_mem_gib": mem0 - mem1,
            "identical_to_local": True}


def test_scaling(ray_cluster):
    rows = []
    for task in TASKS:
        for w in WORKERS:
            row = measure(task, w)
            base = next((r for r in rows if r["task"] == task and r["workers"] == 1), None)
            row["efficiency"] = (row["episodes_per_s"] / (w * base["episodes_per_s"])) if base else float("nan")
            rows.append(row)
            print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    meta = {"simulated": True, "server": SERVER, "per_worker": PER_WORKER, "streams_per_worker": STREAMS,
            "shares_per_worker": SHARES,
            "rounds": ROUNDS,
            "game24_pipeline_rounds": PIPELINE, "cores": os.cpu_count(),
            "command": "python -m pytest benchmarks/test_scaling.py -s -p no:cacheprovider"}
    old = read_sections("scaling")
    # a run of some tasks (TOE_SCALE_TASKS) replaces their rows and keeps the other tasks' rows
    rows = [r for r in old.get("rows", []) if r["task"] not in TASKS] + rows
    write_sections("scaling", meta=meta, rows=rows)
    _plot(rows, RESULTS / "scaling_efficiency.png", old.get("experiment", {}).get("rows", []))
    print("\n" + table(rows))
    assert all(r["identical_to_local"] for r in rows)


# -- the whole experiment at once (cluster.concurrent_runs) ---------------------------------------------------
EXP_WORKERS = [int(x) for x in os.environ.get("TOE_SCALE_EXP_WORKERS", "1,4,16,32").split(",")]
EXP_TASKS = os.environ.get("TOE_SCALE_EXP_TASKS", "prophet-arena").split(",")
EXP_METHODS = os.environ.get("TOE_SCALE_EXP_METHODS", "memrl,reme,full_text").split(",")
EXP_SEEDS_PER_WORKER = int(os.environ.get("TOE_SCALE_EXP_SEEDS", 1))
# streams per share: a finance share is up to a trading day of 8 episodes of two sequences each, all in flight
EXP_STREAMS = {"prophet-arena": 4, "game24": 4, "finance": 8}
if os.environ.get("TOE_SCALE_EXP_STREAMS"):
    EXP_STREAMS = dict.fromkeys(EXP_STREAMS, int(os.environ["TOE_SCALE_EXP_STREAMS"]))
EXP_QUESTIONS = int(os.environ.get("TOE_SCALE_EXP_QUESTIONS", 84))
# Game of 24: ToT and ToT+ToE (supply), each run the first 50 puzzles of its stream in the config's rounds of 25
EXP_G24_METHODS = ["tot", "toe"]
EXP_PUZZLES = int(os.environ.get("TOE_SCALE_EXP_PUZZLES", 50))
# finance: the config's three ToE rows, each run on a stream cut at 5 days (``max_days``: 280 episodes with the
# pre-test span, 35 rounds of one trading day)
EXP_FIN_METHODS = ["Pipe+ToE", "Pipe+ToE (LLM update)", "Pipe+ToE (no retrieval)"]
EXP_DAYS = int(os.environ.get("TOE_SCALE_EXP_DAYS", 5))
# one run at a time has the same pace whichever run it is: measured on the first runs only
EXP_ONE_BY_ONE_RUNS = int(os.environ.get("TOE_SCALE_EXP_ONE_BY_ONE", 1))


# the finance experiment's machine-wide embedding cache (``[embed] disk_cache``): a new, empty folder for each
# worker count (measure_experiment), so every row starts cold as a first run does
EXP_EMBED_CACHE: dict = {}


def experiment_workload(task: str, method: str, seed: int, n: int, server: dict | None = SERVER):
    """One run of ``task``'s experiment: ``method`` at ``seed`` on its first ``n`` episodes, in the task's own
    round plan (Prophet Arena's leak-free rounds, Game of 24's ``round_size``, finance's trading day), no
    pipelining. ``n`` counts questions, puzzles or (finance) trading days."""
    if task == "prophet-arena":
        return W.prophet_arena(method, server, questions=n, seed=seed)
    if task == "game24":
        return W.game24(method, server, n, seed=seed)
    if task == "finance":
        return W.finance(method, server, n, seed=seed, disk_cache=EXP_EMBED_CACHE.get("dir"))
    raise ValueError(f"unknown experiment task {task!r}")


EXP_SIZES = {"prophet-arena": (EXP_METHODS, EXP_QUESTIONS), "game24": (EXP_G24_METHODS, EXP_PUZZLES),
             "finance": (EXP_FIN_METHODS, EXP_DAYS)}


def experiment_runs(task: str, w: int):
    """``task``'s experiment for ``w`` workers (weak scaling): its methods x ``EXP_SEEDS_PER_WORKER * w`` seeds,
    each run on the task's first episodes (Prophet Arena: ``EXP_QUESTIONS`` questions of every category;
    Game of 24: ``EXP_PUZZLES`` puzzles; finance: ``EXP_DAYS`` days), the records of running the runs one by one."""
    methods, n = EXP_SIZES[task]
    return [(m, s, experiment_workload(task, m, s, n))
            for s in range(EXP_SEEDS_PER_WORKER * w) for m in methods]


_LOCAL_RECORDS: dict = {}


def _local_records(task: str, method: str, seed: int, n: int) -> str:
    if (task, method, seed, n) not in _LOCAL_RECORDS:
        ref = experiment_workload(task, method, seed, n, None)
        _LOCAL_RECORDS[task, method, seed, n] = _plain(LocalExecutor().run(ref.method(), ref.episodes,
                                                                           ref.llm_factory, ref.default_round))
    return _LOCAL_RECORDS[task, method, seed, n]


def _proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc (the workers' own CPU, whichever run's thread used it)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RoleCPU:
    """CPU seconds of this machine's processes by role over a pass, sampled from /proc every ``interval_s`` (a
    store owner of a run that ends mid-pass is killed then: its last sample counts): the driver (this process:
    the runs' threads), the store owners, the workers, and the rest of Ray (raylet, GCS, idle processes)."""

    ROLES = ("driver", "store_owners", "workers", "ray_other")

    def __init__(self, interval_s: float = 0.5):
        import threading

        self._seen: dict[int, tuple[str, float, float]] = {}  # pid -> (role, first cpu, last cpu)
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        me = os.getpid()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            pid = int(d.name)
            try:
                if pid == me:
                    role = "driver"
                else:
                    cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    role = ("store_owners" if "StoreOwner" in cmd else "workers" if "EpisodeWorker" in cmd
                            else "ray_other" if "ray" in cmd else None)
                if role is None:
                    continue
                cpu = _proc_cpu_s(pid)
            except (OSError, ValueError, IndexError):
                continue
            old = self._seen.get(pid)
            self._seen[pid] = (role, cpu if old is None else old[1], cpu)

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self._sample()

    def stop(self, wall_s: float) -> dict[str, float]:
        """Cores each role used on average over ``wall_s`` (processes that started during the pass count from 0)."""
        self._stop.set()
        self._thread.join()
        self._sample()
        out = dict.fromkeys(self.ROLES, 0.0)
        for role, first, last in self._seen.values():
            out[role] += last - first
        return {k: v / wall_s for k, v in out.items()}


def _proc_rss_gb(pid: int) -> float:
    """Resident memory of a process now, from /proc (GB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e9
    return float("nan")


def measure_experiment(task: str, w: int) -> list[dict]:
    """``task``'s experiment over ``w`` Ray workers, through the runner's own :func:`engine.runner.run_at_once` on
    one set of workers: every run at once (``concurrent_runs`` = the runs), then the first
    ``EXP_ONE_BY_ONE_RUNS`` runs one at a time (``concurrent_runs = 1``, today's default). Each run's
    records are compared with its local run."""
    from types import SimpleNamespace

    import tempfile

    from cluster.ray_executor import RayExecutor
    from engine.runner import RunSpec, run_at_once

    # TOE_SCALE_EXP_EMBED_CACHE=off: each worker embeds what it meets (the engine before 999dfe0)
    off = os.environ.get("TOE_SCALE_EXP_EMBED_CACHE", "on") == "off"
    EXP_EMBED_CACHE["dir"] = "" if off else tempfile.mkdtemp(prefix=f"toe-embed-{w}-")
    # TOE_SCALE_EXP_AFFINITY=-1: every share to the least loaded worker (the placement before e2915d2)
    import cluster.workers

    cluster.workers.AFFINITY = int(os.environ.get("TOE_SCALE_EXP_AFFINITY", cluster.workers.AFFINITY))
    runs = experiment_runs(task, w)
    got: dict = {}

    def one(k, spec, executor, position=None):
        wl = todo[k][2]
        got[spec.key] = executor.run(wl.method(), wl.episodes, wl.llm_factory, wl.default_round)

    parent = RayExecutor(workers=w, num_cpus_per_worker=0, startup_timeout_s=600,
                         streams_per_worker=EXP_STREAMS[task], concurrent_runs=len(runs))
    rows = []
    try:
        # untimed: actor start-up, JIT, caches (a round of each of the first runs on every worker)
        todo = [(m, s, experiment_workload(task, m, s, 4)) for m, s, _ in runs[:w]]
        run_at_once([RunSpec(m, s) for m, s, _ in todo], one, parent, len(todo), SimpleNamespace(out=None))
        pids = ray.get([x.pid.remote() for x in parent.workers])
        for at_once in (len(runs), 1):
            todo = runs if at_once > 1 else runs[:EXP_ONE_BY_ONE_RUNS]
            got.clear()
            load, c0 = os.getloadavg()[0], sum(map(_proc_cpu_s, pids))
            roles = RoleCPU()
            line = run_at_once([RunSpec(m, s) for m, s, _ in todo], one, parent, at_once,
                               SimpleNamespace(out=None))
            cores = (sum(map(_proc_cpu_s, pids)) - c0) / line["wall_s"]
            by_role = roles.stop(line["wall_s"])
            rss = [_proc_rss_gb(p) for p in pids]  # every run's method still cached in the workers
            for m, s, _ in todo:
                assert _plain(got[RunSpec(m, s).key]) == _local_records(task, m, s, EXP_SIZES[task][1]), \
                    f"{task} W={w}: {m} seed {s} differs"
            engines = line["engines"]
            calls = sum(e["calls"] for e in engines)
            rows.append({"task": f"{task} experiment", "workers": w, "at_once": at_once, "runs": len(todo),
                         "episodes_per_run": len(todo[0][2].episodes), "episodes": line["episodes_run"],
                         "wall_s": line["wall_s"], "episodes_per_s": line["episodes_per_s"],
                         "streams_per_worker": EXP_STREAMS[task],
                         "utilization_mean": float(np.mean([e["utilization"] for e in engines])),
                         "utilization_min": float(np.min([e["utilization"] for e in engines])),
                         "busy_mean": float(np.mean([e["busy"] for e in engines])),
                         "seqs_per_call": sum(e["sequences"] for e in engines) / max(1, calls),
                         "seqs_in_flight_mean": float(np.mean([e.get("seqs_in_flight_mean", np.nan)
                                                               for e in engines])),
                         "seqs_in_flight_p95": float(np.max([e.get("seqs_in_flight_p95", np.nan) for e in engines])),
                         "worker_cores": cores, "worker_rss_gb_mean": float(np.mean(rss)),
                         "worker_rss_gb_max": float(np.max(rss)),
                         **{f"cores_{k}": v for k, v in by_role.items()},
                         "load_average": load, "identical_to_local": True})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        parent.close()
    return rows


def experiment_table(rows) -> str:
    """One row per (task, workers, mode): x one at a time against the same workers' one-at-a-time row; efficiency
    (weak scaling) = episodes/s over W x the same task's and mode's episodes/s at 1 worker."""
    cells = []
    for r in rows:
        same = [b for b in rows if b["task"] == r["task"]]
        base = next((b for b in same if b["workers"] == r["workers"] and b["at_once"] == 1), None)
        gain = r["episodes_per_s"] / base["episodes_per_s"] if base else float("nan")
        one = next((b for b in same if b["workers"] == 1 and (b["at_once"] == 1) == (r["at_once"] == 1)), None)
        eff = r["episodes_per_s"] / (r["workers"] * one["episodes_per_s"]) if one and r["workers"] > 1 else float("nan")
        cells.append([r["task"].removesuffix(" experiment"), r["workers"], r["at_once"], r["runs"], r["episodes"],
                      f"{r['episodes_per_s']:.2f}", f"{gain:.1f}", f"{eff:.2f}",
                      f"{r['utilization_mean']:.2f} ({r['utilization_min']:.2f})", f"{r['busy_mean']:.2f}",
                      f"{r['seqs_in_flight_mean']:.1f} ({r['seqs_in_flight_p95']:.0f})", f"{r['seqs_per_call']:.1f}",
                      f"{r['worker_cores']:.2f}",
                      f"{r['worker_rss_gb_mean']:.2f} ({r['worker_rss_gb_max']:.2f})" if "worker_rss_gb_mean" in r
                      else "not measured", f"{r['load_average']:.1f}"])
    return "\n".join(markdown_table(
        ["task", "workers", "runs at once", "runs", "episodes", "episodes/s", "x one at a time", "efficiency",
         "engine util mean (min)", "engine busy mean", "seqs in flight mean (max p95)", "seqs/call", "worker cores",
         "worker RSS GB mean (max)", "load avg"], cells, align="lrrrrrrrlrlrrlr"))


def test_experiment_at_once(ray_cluster):
    """Each task's experiment (methods x seeds: Prophet Arena's runs in leak-free rounds of 2.9 questions, Game of
    24's in rounds of 25) with every run at once over W workers against one run at a time: the records identical,
    the engines fuller."""
    rows = []
    for task in EXP_TASKS:
        for w in EXP_WORKERS:
            rows += measure_experiment(task, w)
    old = read_sections("scaling")
    meta = {"simulated": True, "server": SERVER, "seeds_per_worker": EXP_SEEDS_PER_WORKER,
            "streams_per_worker": EXP_STREAMS, "cores": os.cpu_count(),
            "tasks": {"prophet-arena": {"methods": EXP_METHODS, "episodes_per_run": EXP_QUESTIONS},
                      "game24": {"methods": EXP_G24_METHODS, "episodes_per_run": EXP_PUZZLES},
                      "finance": {"methods": EXP_FIN_METHODS, "max_days": EXP_DAYS}},
            "command": "python -m pytest benchmarks/test_scaling.py -k experiment -s -p no:cacheprovider"}
    # a run of some tasks at some worker counts (TOE_SCALE_EXP_TASKS, TOE_SCALE_EXP_WORKERS) replaces their rows
    mine = {(r["task"], r["workers"]) for r in rows}
    kept = [r for r in old.get("experiment", {}).get("rows", []) if (r["task"], r["workers"]) not in mine]
    rows = sorted(kept + rows, key=lambda r: (r["task"], r["workers"], -r["at_once"]))
    write_sections("scaling", experiment={"meta": meta, "rows": rows})
    _plot([r for r in old.get("rows", [])], RESULTS / "scaling_efficiency.png", rows)
    print("\n" + experiment_table(rows))
    for task in EXP_TASKS:
        for w in EXP_WORKERS:
            mine = {r["at_once"]: r for r in rows if r["task"] == f"{task} experiment" and r["workers"] == w}
            if len(mine) == 2 and w > 1:  # every run at once serves more episodes per second than one at a time
                assert mine[max(mine)]["episodes_per_s"] > mine[1]["episodes_per_s"], f"{task} W={w}"


def table(rows) -> str:
    cells = [[r["task"], r["workers"],
              f"leak-free: {r['rounds_planned']} rounds, max {r['round_size']}" if r.get("rounds_planned") else r["round_size"],
              r["pipeline_rounds"], r.get("streams_per_worker", 1), r.get("shares_per_worker", 1),
              f"{r['episodes_per_s']:.2f}", f"{r['efficiency']:.2f}", f"{r['utilization_mean']:.2f} ({r['utilization_min']:.2f})",
              f"{r['busy_mean']:.2f} ({r['busy_min']:.2f})", f"{r.get('work_per_busy', float('nan')):.2f}",
              f"{r['seqs_per_call']:.1f}", r.get("max_concurrent_calls", 1), f"{r['barrier_s']:.3f}",
              f"{r['round_overhead_s']:.3f}", f"{r.get('worker_cores', float('nan')):.2f}", f"{r['load_average']:.1f}",
              f"{r['mem_available_gib']:.1f}"] for r in rows]
    return "\n".join(markdown_table(
        ["task", "workers", "round size", "pipeline", "streams", "shares", "episodes/s", "efficiency",
         "engine util mean (min)", "engine busy mean (min)", "work/busy", "seqs/call", "calls at once", "barrier s",
         "round overhead s", "worker cores", "load avg", "mem avail GiB"], cells, align="lrrrrrrrllrrrrrrrr"))


def _plot(rows, path: Path, experiment=()) -> None:
    """Efficiency and utilization against workers: one run per task (solid), and each experiment with every
    run at once (dashed; its efficiency is weak scaling against its own 1-worker row)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for task in dict.fromkeys(r["task"] for r in rows):
        rs = [r for r in rows if r["task"] == task]
        axes[0].plot([r["workers"] for r in rs], [r["efficiency"] for r in rs], "o-", label=task)
        axes[1].plot([r["workers"] for r in rs], [r["utilization_mean"] for r in rs], "o-", label=task)
    for task in dict.fromkeys(r["task"] for r in experiment):
        rs = sorted((r for r in experiment if r["task"] == task and r["at_once"] > 1), key=lambda r: r["workers"])
        one = next((r for r in rs if r["workers"] == 1), None)
        if one is None:
            continue
        label = f"{task}, every run at once"
        axes[0].plot([r["workers"] for r in rs], [r["episodes_per_s"] / (r["workers"] * one["episodes_per_s"])
                                                  for r in rs], "s--", label=label)
        axes[1].plot([r["workers"] for r in rs], [r["utilization_mean"] for r in rs], "s--", label=label)
    axes[0].axhline(0.9, color="grey", ls=":", lw=1)
    axes[1].axhline(0.9, color="grey", ls=":", lw=1)
    axes[0].set(xscale="log", xlabel="Ray workers (one modelled engine each)", ylabel="eps(W) / (W x eps(1))",
                title="Scaling efficiency [SIMULATED engines]", ylim=(0, 1.2))
    axes[1].set(xscale="log", xlabel="Ray workers", ylabel="engine utilization (work / wall)",
                title="Engine utilization [SIMULATED engines]", ylim=(0, 1.05))
    for ax in axes:
        ax.set_xticks(WORKERS, [str(w) for w in WORKERS])
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def test_snapshot_size_and_distribution(ray_cluster):
    """Snapshot of 10^5..10^7-experience stores: bytes, ``snapshot()`` time, ``ray.put``, and W workers
    mapping it (zero-copy on one node) — the per-round cost a store owner pays without deltas."""
    from test_store_update import build_store

    @ray.remote(num_cpus=0)
    def touch(*parts):
        return sum(int(a.nbytes) for p in parts for a in p.values())

    w = max(WORKERS)
    ray.get([touch.remote({"x": np.zeros(1)}) for _ in range(w)])  # start the task processes first: not timed
    rows = []
    for n in STORES:
        st = build_store(n)
        t0 = time.perf_counter()
        snap = st.snapshot(copy=True)
        t1 = time.perf_counter()
        ref = ray.put(snap)
        t2 = time.perf_counter()
        sizes = ray.get([touch.remote(ref) for _ in range(w)])
        t3 = time.perf_counter()
        nbytes = sum(int(np.asarray(a).nbytes) for a in snap.values())
        assert sizes == [nbytes] * w
        del ref
        # what the Ray store owner sends now (engine.rounds.ViewSnapshots): zero-copy views, serialized once
        t4 = time.perf_counter()
        views = st.snapshot(copy=False)
        t5 = time.perf_counter()
        vref = ray.put(views)
        t6 = time.perf_counter()
        assert ray.get(touch.remote(vref)) == nbytes
        rows.append({"experiences": n, "snapshot_mib": nbytes / 2**20, "snapshot_s": t1 - t0, "put_s": t2 - t1,
                     "distribute_s": t3 - t2, "views_snapshot_s": t5 - t4, "views_put_s": t6 - t5, "workers": w})
        print(json.dumps(rows[-1]), flush=True)
        del snap, views, vref, st
    RESULTS.mkdir(exist_ok=True)
    write_sections("scaling", stores=rows)


def test_idle_worker_overhead(ray_cluster):
    """CPU that W idle Ray actors (one process each) use while doing nothing: the floor under the
    ``worker cores`` column, which on a 2-core machine the 32-worker rows start from."""

    @ray.remote(num_cpus=0)
    class Idle:
        def pid(self):
            return os.getpid()

    rows = []
    for w in sorted({min(WORKERS), 8, max(WORKERS)}):
        actors = [Idle.remote() for _ in range(w)]
        pids = ray.get([a.pid.remote() for a in actors])
        time.sleep(5)  # start-up done
        c0, t0, load = sum(map(_proc_cpu_s, pids)), time.perf_counter(), os.getloadavg()[0]
        time.sleep(20)
        cores = (sum(map(_proc_cpu_s, pids)) - c0) / (time.perf_counter() - t0)
        rows.append({"workers": w, "idle_cores": cores, "ms_per_s_each": 1000 * cores / w, "load_average": load})
        print(json.dumps(rows[-1]), flush=True)
        for a in actors:
            ray.kill(a)
        time.sleep(3)
    assert all(r["idle_cores"] >= 0 for r in rows)
    write_sections("scaling", idle_workers=rows)


_CONTEXT_PROBE = """
import gc, pickle, sys, time
import engine.forecast.round_methods as rm
blobs = pickle.loads(open(sys.argv[1], "rb").read())
copies = sys.argv[2] == "copies"
def rss_mib():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) / 1024
gc.collect(); r0 = rss_mib(); methods = []; cpu = []
for b in blobs:
    t = time.process_time()
    methods.append(pickle.loads(b))
    cpu.append(time.process_time() - t)
    if copies:
        rm._SHARED.clear()  # the reference: every unpickled method keeps its own context, as before
gc.collect()
print(rss_mib() - r0, len({id(m.ctx) for m in methods}), 1e3 * sum(cpu[1:]) / max(1, len(cpu) - 1))
"""


def test_context_memory_per_run(tmp_path):
    """What each run at once adds to a worker's memory: ``RUNS`` Prophet Arena methods, each pickled on its own
    as Ray ships them, unpickled in a fresh process with the experiment's context shared (the engine) and, as
    the reference in the same run, with every copy kept."""
    import pickle
    import subprocess

    runs = int(os.environ.get("TOE_SCALE_CONTEXT_RUNS", 48))
    methods = EXP_METHODS
    blobs = [pickle.dumps(wl.method()) for wl in (W.prophet_arena(m, None, questions=EXP_QUESTIONS, seed=0)
                                                  for m in methods) for _ in range(runs // len(methods))]
    path = tmp_path / "methods.pkl"
    path.write_bytes(pickle.dumps(blobs))
    row = {"runs": len(blobs), "method_pickle_mb": len(blobs[0]) / 1e6}
    for mode in ("shared", "copies"):
        out = subprocess.run([sys.executable, "-c", _CONTEXT_PROBE, str(path), mode], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parents[1]).stdout.split()
        row[f"{mode}_mib"], row[f"{mode}_contexts"], row[f"{mode}_unpickle_ms"] = float(out[0]), int(out[1]), float(out[2])
    print(json.dumps(row), flush=True)
    assert row["shared_contexts"] == 1 and row["copies_contexts"] == len(blobs)
    assert row["shared_mib"] < row["copies_mib"]
    assert row["shared_unpickle_ms"] < row["copies_unpickle_ms"]  # a held context is not decoded again
    write_sections("scaling", context_memory=row)


def test_store_owner_loads_at_once(tmp_path):
    """What one process pays to load every run at once and hold them (a store owner at the start of runs at once;
    a worker does the same with each run it meets), CPU time of ``TOE_SCALE_OWNER_LOADS`` (96) loads, 3 repeats
    interleaved, medians: ``StoreOwner.load`` (the collector off during the unpickle, the result frozen:
    :func:`cluster.store_actors.freeze_held`) against, in the same run, the unpickle with the collector on as
    before. Each repeat starts from nothing held, nothing frozen. Finance's three ToE rows and Game of 24's ToT
    and ToT+ToE, 4 seeds each (Prophet Arena's three methods too with ``TOE_PA_DATA``)."""
    import gc
    import pickle

    from cluster.store_actors import StoreOwner, pickle_method

    EXP_EMBED_CACHE["dir"] = str(tmp_path / "embed")
    n = int(os.environ.get("TOE_SCALE_OWNER_LOADS", 96))
    tasks = ["game24", "finance"] + (["prophet-arena"] if os.environ.get("TOE_PA_DATA") else [])
    rows = []
    for task in tasks:
        methods, size = EXP_SIZES[task]
        blobs = [pickle_method(experiment_workload(task, m, s, size).method()) for s in range(4) for m in methods]

        def engine():
            owner = StoreOwner()
            for k in range(n):
                owner.load(f"run{k}", None, blobs[k % len(blobs)])
            return owner

        def before():
            return [pickle.loads(blobs[k % len(blobs)]) for k in range(n)]

        cpu = {"engine": [], "before": []}
        for _ in range(3):
            for name, fn in (("engine", engine), ("before", before)):
                gc.unfreeze()
                gc.collect()
                t = time.process_time()
                held = fn()
                cpu[name].append(time.process_time() - t)
                del held
        gc.unfreeze()
        gc.collect()
        row = {"task": task, "loads": n, "pickle_mb": float(np.mean([len(b) for b in blobs])) / 1e6,
               **{f"{k}_ms_per_load": 1e3 * float(np.median(v)) / n for k, v in cpu.items()}}
        row["before_over_engine"] = row["before_ms_per_load"] / row["engine_ms_per_load"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    assert all(r["engine_ms_per_load"] > 0 for r in rows)
    write_sections("scaling", store_owner_loads_at_once=rows)


def test_store_owner_load(ray_cluster, tmp_path):
    """What the store owner pays to take one run at once (it loads every run in turn while they start), through
    Ray's object store as on the cluster, CPU time, interleaved, medians: the engine (the driver pickles the method,
    ``StoreOwner.load`` unpickles its own writable copy) against, in the same run, the owner before d1127c7 (the
    method as the call's argument, deserialized with read-only arrays, then deep-copied). Game of 24 ToT+ToE and
    finance Pipe+ToE (Prophet Arena's too with ``TOE_PA_DATA``)."""
    import copy

    from cluster.store_actors import StoreOwner, pickle_method

    EXP_EMBED_CACHE["dir"] = str(tmp_path / "embed")
    tasks = [("game24", "toe"), ("finance", "Pipe+ToE")]
    if os.environ.get("TOE_PA_DATA"):
        tasks.append(("prophet-arena", "memrl"))
    owner, rows = StoreOwner(), []
    for task, method in tasks:
        m = experiment_workload(task, method, 0, EXP_SIZES[task][1]).method()

        def engine():
            owner.load("run", None, ray.get(ray.put(pickle_method(m))))

        def before():
            copy.deepcopy(ray.get(ray.put(m)))

        cpu = {"engine": [], "before": []}
        for _ in range(int(os.environ.get("TOE_SCALE_OWNER_REPEATS", 15))):
            for name, fn in (("engine", engine), ("before", before)):
                t = time.process_time()
                fn()
                cpu[name].append(time.process_time() - t)
        held = owner.runs["run"].method
        assert type(held) is type(m) and held is not m
        row = {"task": task, "method": method, "pickle_mb": len(pickle_method(m)) / 1e6,
               **{f"{k}_ms": 1e3 * float(np.median(v)) for k, v in cpu.items()}}
        row["before_over_engine"] = row["before_ms"] / row["engine_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    assert all(r["engine_ms"] > 0 for r in rows)
    write_sections("scaling", store_owner_load=rows)
