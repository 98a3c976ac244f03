"""Experiment tracking: ``toe run ... --track mlflow`` logs the run to MLflow.

The MLflow run is opened when the run starts (params, tags) and every finished round is logged as it comes
(``progress/<run key>``: episodes done in that method x seed run, and ``..._share``), so a run is visible
while it goes. The rest is logged from the run folder once the runner has returned, so a tracked run is the
same run as an untracked one:

- params: the resolved config (after ``--set``), flattened to ``section.key`` (also as ``config.json``);
- tags: ``task``, ``backend``, ``model``, ``simulated``, ``run_folder``, and what made the run (the git commit
  as ``mlflow.source.git.commit``, ``git.dirty``, ``command``, ``version.<package>``, Python, machine, times);
- metrics: every numeric column of the task's per-method summary records (:func:`engine.tasks.summary_rows`)
  as ``<method>/<column>``;
- throughput: each line of the run folder's ``executor_stats.jsonl`` (one per executor run, i.e. method x
  seed) as steps of ``throughput/episodes_per_s``, ``throughput/round_s``, ``throughput/rounds``, ...;
- artifacts: the run folder's tables, plots, JSON, Parquet and the resolved ``config.toml`` (``*.md``, ``*.png``,
  ``*.json``, ``*.jsonl``, ``*.parquet``, ``*.toml``).

The tracking URI defaults to a local file store, ``./mlruns`` (no server to start). MLflow 3 keeps the file
store in maintenance mode behind ``MLFLOW_ALLOW_FILE_STORE``; the engine sets it for ``file:`` URIs it is
given. Any other URI works with ``--track-uri`` (``http://HOST:5000``, ``sqlite:///mlflow.db``; the latter
needs the full ``mlflow`` package). ``mlflow`` is imported lazily; without it ``--track`` fails before the
run starts, naming the ``track`` extra.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from engine.config import lookup
from engine.errors import BackendError, ConfigError, MissingExtraError

TRACKERS = ("mlflow",)
DEFAULT_URI = "mlruns"
ARTIFACT_SUFFIXES = (".md", ".png", ".json", ".jsonl", ".parquet", ".toml")
_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")
MAX_PARAM = 6000  # MLflow's limit on a param value


def add_arguments(parser) -> None:
    """The ``--track*`` options of ``toe run`` and ``toe sweep``."""
    parser.add_argument("--track", choices=TRACKERS, default=None,
                        help="log the run (config, metrics, throughput, artifacts) to an experiment tracker")
    parser.add_argument("--track-uri", default=None,
                        help=f"tracking URI (default: a local file store, ./{DEFAULT_URI}); e.g. http://HOST:5000")
    parser.add_argument("--track-experiment", default=None,
                        help="experiment name (default: the config file's name)")
    parser.add_argument("--track-parent", default=None, help=argparse.SUPPRESS)  # toe sweep: its parent run


def tracking_uri(uri: str | None) -> str:
    """``None`` -> ``file:///abs/mlruns``; a plain path -> its ``file:`` URI; anything with a scheme unchanged."""
    uri = uri or DEFAULT_URI
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", uri) or uri.startswith(("file:", "databricks")):
        return uri
    return Path(uri).expanduser().resolve().as_uri()


def _mlflow():
    try:
        import mlflow  # noqa: F401
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise MissingExtraError("mlflow", "track") from exc
    return MlflowClient


def check_installed(kind: str) -> None:
    """A known tracker whose package imports, else a clear error (before any run starts)."""
    if kind not in TRACKERS:
        raise ConfigError(f"--track must be one of {TRACKERS}, got {kind!r}")
    _mlflow()


@contextmanager
def tracked(args, config: Mapping[str, Any], out: Path, task: str) -> Iterator[Any]:
    """Around a runner: checks the tracker, opens the MLflow run at the start (params and tags, so the run is
    visible while it goes), yields the live progress callback (``RunOptions.on_progress``: every finished
    round's episodes as ``progress/<run key>`` and ``progress/episodes``), and logs the run folder into the
    same run after it. Yields None without ``--track``."""
    kind = getattr(args, "track", None)
    if kind is None:
        yield None
        return
    check_installed(kind)
    uri = tracking_uri(getattr(args, "track_uri", None))
    check_reachable(uri)
    experiment = getattr(args, "track_experiment", None) or Path(args.config).stem
    live = Live(uri, experiment, out, config, task, getattr(args, "track_parent", None))
    ok = False
    try:
        yield live
        ok = True
    finally:
        if not ok:
            live.end("FAILED")
    try:
        run_id = log_run(out, config, task, uri=uri, experiment=experiment, parent=live.parent, run_id=live.run_id)
    except MissingExtraError:
        raise
    except Exception as exc:  # noqa: BLE001 - the run is saved; say so, and why its logging failed
        live.end("FAILED")
        raise BackendError(f"the run finished and its results are in {out}, but logging it to {uri} failed: "
                           f"{type(exc).__name__}: {str(exc)[:300]}") from None
    print(f"tracked: mlflow run {run_id} in {uri}")


class Live:
    """The MLflow run of one ``toe run`` while it goes: opened with the config as params; each finished round
    logged as it comes. A logging failure while the run goes is reported once and never stops the run (the
    run folder is logged again at the end)."""

    def __init__(self, uri: str, experiment: str, out: Path, config: Mapping[str, Any], task: str,
                 parent: str | None):
        from mlflow.entities import Param

        self.client, self.parent, self.out = _client(uri), parent, out
        tags = {"task": task, "run_folder": str(Path(out).resolve()), **({"mlflow.parentRunId": parent} if parent else {})}
        run = self.client.create_run(_experiment_id(self.client, experiment), run_name=Path(out).name, tags=tags)
        self.run_id = run.info.run_id
        params = [Param(k[:250], v[:MAX_PARAM]) for k, v in flatten(config).items()]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.steps: dict[str, int] = {}
        self.total = 0
        self.failed = False

    def __call__(self, run_key: str, done: int, total: int) -> None:
        from mlflow.entities import Metric

        step = self.steps[run_key] = self.steps.get(run_key, -1) + 1
        try:
            now = int(time.time() * 1000)
            self.client.log_batch(self.run_id, metrics=[
                Metric(metric_key(f"progress/{run_key}"), float(done), now, step),
                Metric(metric_key(f"progress/{run_key}_share"), done / total if total else 1.0, now, step)])
        except Exception as exc:  # noqa: BLE001 - live logging is best effort; the run goes on
            if not self.failed:
                self.failed = True
                print(f"warning: live tracking failed ({type(exc).__name__}: {str(exc)[:200]}); the run goes on "
                      f"and is logged when it ends", file=sys.stderr)

    def end(self, status: str) -> None:
        try:
            self.client.set_terminated(self.run_id, status=status)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


def check_reachable(uri: str, timeout_s: float = 5.0) -> None:
    """An ``http(s)://`` tracking server that accepts no connection fails before the run starts (MLflow's own
    client retries for minutes, and only after the run)."""
    from urllib.parse import urlsplit

    from engine.http import unreachable

    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return
    why = unreachable(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), timeout_s)
    if why:
        raise BackendError(f"no tracking server answers at {uri} ({why}): start it (`mlflow server --port "
                           f"{parts.port or 80}`), fix --track-uri, or leave it out for a local file store "
                           f"(./{DEFAULT_URI})")


def provenance_tags(prov: Mapping[str, Any]) -> dict[str, str]:
    """What made the run (``summary.json`` ``meta.provenance``) as MLflow tags: MLflow's own git commit tag
    (``mlflow.source.git.commit``), whether the tree was dirty, the command, the package versions
    (``version.<package>``), Python, the machine, the start and end times and who counted tokens."""
    git = prov.get("git") or {}
    tags = {"mlflow.source.git.commit": git.get("commit"), "git.dirty": git.get("dirty"),
            "command": " ".join(prov.get("command") or []) or None, "python": prov.get("python"),
            "machine": prov.get("machine"), "started_at": prov.get("started_at"), "ended_at": prov.get("ended_at"),
            "token_counter": prov.get("token_counter"),
            **{f"version.{k}": v for k, v in (prov.get("versions") or {}).items()}}
    return {k: str(v)[:5000] for k, v in tags.items() if v is not None}


def _client(uri: str | None):
    MlflowClient = _mlflow()
    uri = tracking_uri(uri)
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


def open_parent(out: Path, uri: str, experiment: str) -> str:
    """``toe sweep --track``: the sweep's parent run (its id kept in ``out/mlflow_parent_run``, so a resumed
    sweep keeps one parent); every combination's run is logged as its child."""
    client = _client(uri)
    mark = Path(out) / "mlflow_parent_run"
    if mark.is_file():
        rid = mark.read_text().strip()
        try:
            client.get_run(rid)
            client.update_run(rid, status="RUNNING")
            return rid
        except Exception:  # noqa: BLE001 - a store that lost it: a new parent
            pass
    run = client.create_run(_experiment_id(client, experiment), run_name=Path(out).name,
                            tags={"sweep_folder": str(Path(out).resolve()), "kind": "sweep"})
    Path(out).mkdir(parents=True, exist_ok=True)
    mark.write_text(run.info.run_id)
    return run.info.run_id


def close_parent(out: Path, uri: str, run_id: str, ok: bool) -> None:
    """The sweep's combined table, Parquet and plots as the parent's artifacts; FINISHED or FAILED."""
    client = _client(uri)
    for path in sorted(Path(out).iterdir()):
        if path.is_file() and path.suffix in ARTIFACT_SUFFIXES:
            client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, status="FINISHED" if ok else "FAILED")


def log_run(out: Path, config: Mapping[str, Any], task: str, uri: str | None = None,
            experiment: str = "toe", run_name: str | None = None, parent: str | None = None,
            run_id: str | None = None) -> str:
    """Log the finished run folder ``out`` to MLflow (``parent``: a sweep's parent run id; ``run_id``: the run
    opened when the run started, whose params are logged already); returns the run id."""
    from engine.tasks import summary_rows

    client = _client(uri)
    exp_id = _experiment_id(client, experiment)
    summary = json.loads((out / "summary.json").read_text())
    rows = summary_rows(task, summary)
    first = rows[0] if rows else {}
    tags = {"task": task, "run_folder": str(Path(out).resolve()),
            "backend": str(first.get("backend", lookup(config, "llm.backend") or "")),
            "model": str(first.get("model", "")), "simulated": str(bool(any(r.get("simulated") for r in rows))),
            **provenance_tags(summary.get("meta", {}).get("provenance") or {}),
            **({"mlflow.parentRunId": parent} if parent else {})}
    if run_id is None:
        rid = client.create_run(exp_id, run_name=run_name or Path(out).name, tags=tags).info.run_id
    else:
        rid = run_id
        for k, v in tags.items():
            client.set_tag(rid, k, v)
    try:
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)

        params = [Param(k[:250], v[:MAX_PARAM]) for k, v in flatten(config).items()]
        metrics = [Metric(metric_key(f"{r.get('method')}/{k}"), float(v), now, 0)
                   for r in rows for k, v in r.items() if _is_number(v)]
        stats = out / "executor_stats.jsonl"
        if stats.is_file():
            for step, line in enumerate(stats.read_text().splitlines()):
                rec = json.loads(line)
                metrics += [Metric(f"throughput/{k}", float(rec[k]), now, step)
                            for k in ("episodes_per_s", "round_s", "rounds", "episodes_run", "wall_s",
                                      "round_overhead_s", "barrier_apply_s", "checkpoint_s") if _is_number(rec.get(k))]
        for i in range(0, len(params) if run_id is None else 0, 100):  # an opened run has its params already
            client.log_batch(rid, params=params[i:i + 100])
        for i in range(0, len(metrics), 1000):
            client.log_batch(rid, metrics=metrics[i:i + 1000])
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "config.json"
            cfg.write_text(json.dumps(config, indent=1, default=str))
            client.log_artifact(rid, str(cfg))
        for path in sorted(Path(out).iterdir()):
            if path.is_file() and path.suffix in ARTIFACT_SUFFIXES:
                client.log_artifact(rid, str(path))
    except BaseException:
        client.set_terminated(rid, status="FAILED")
        raise
    client.set_terminated(rid)
    return rid


def _experiment_id(client, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # a parallel run of the same sweep created it first
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"tot": {"breadth": 5}}`` -> ``{"tot.breadth": "5"}`` (lists and values as JSON text)."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, str) else json.dumps(v, default=str)
    return out


def metric_key(name: str) -> str:
    """MLflow keys allow letters, digits, ``_ - . / `` and space: ``Pipe+ToE (LLM)`` -> ``Pipe_ToE _LLM_``."""
    return _KEY.sub("_", name)[:250]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
