"""What a tracked run logs, whichever tracker holds it: the one mapping from a run folder to params, tags,
metrics and artifacts. A tracker is a :class:`Store` (``engine.tracking.mlflow_store``,
``engine.tracking.wandb_store``) that only says how its service keeps each of them.

- params: the resolved config (after ``--set``) flattened to ``section.key`` (also the artifact ``config.json``);
- tags: ``task``, ``backend``, ``model``, ``simulated``, ``run_folder`` and what made the run (``git.commit``,
  ``git.dirty``, ``command``, ``version.<package>``, ``python``, ``machine``, ``started_at``, ``ended_at``,
  ``token_counter``);
- progress, live: every finished round of a method x seed run as ``progress/<run key>`` (episodes done) and
  ``progress/<run key>_share``, stepped by that run's round;
- summary: every numeric column of the task's per-method summary records as ``<method>/<column>`` (final values);
- throughput: each line of ``executor_stats.jsonl`` (one per executor run) as a step of ``throughput/<field>``;
- artifacts: the run folder's ``*.md``, ``*.png``, ``*.json``, ``*.jsonl``, ``*.parquet``, ``*.toml``.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

from engine.config import lookup

ARTIFACT_SUFFIXES = (".md", ".png", ".json", ".jsonl", ".parquet", ".toml")
THROUGHPUT = ("episodes_per_s", "round_s", "rounds", "episodes_run", "wall_s", "round_overhead_s",
              "barrier_apply_s", "checkpoint_s")
_KEY = re.compile(r"[^A-Za-z0-9_\-. /]")


@dataclass(frozen=True)
class Point:
    """One metric value. ``step`` None: a final value (MLflow: step 0; W&B: the run summary). ``axis``: what
    the step counts, as a key of its own (W&B plots ``key`` against it; MLflow's step is the step)."""

    key: str
    value: float
    step: int | None = None
    axis: str | None = None


class Store(Protocol):
    """A tracker's way of keeping the mapping. Run ids are the tracker's own; ``parent`` is a sweep's
    parent id from :meth:`start_parent` (MLflow: the parent run; W&B: the group)."""

    kind: str

    def start(self, name: str, params: Mapping[str, Any], tags: Mapping[str, str], parent: str | None) -> str: ...
    def log(self, run_id: str, points: Sequence[Point]) -> None: ...
    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None: ...
    def log_files(self, run_id: str, paths: Sequence[Path], kind: str) -> None: ...
    def end(self, run_id: str, ok: bool) -> None: ...
    def start_parent(self, name: str, tags: Mapping[str, str]) -> str: ...
    def resume_parent(self, parent: str, name: str) -> bool: ...
    def where(self, run_id: str) -> str: ...


def flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"tot": {"breadth": 5}}`` -> ``{"tot.breadth": 5}``: the params, values as they are."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flat(v, key + "."))
        else:
            out[key] = v
    return out


def as_text(v: Any) -> str:
    """A param value as text: strings as they are, the rest (lists too) as JSON."""
    return v if isinstance(v, str) else json.dumps(v, default=str)


def flatten(config: Mapping[str, Any]) -> dict[str, str]:
    """``{"tot": {"breadth": 5}}`` -> ``{"tot.breadth": "5"}`` (lists and values as JSON text)."""
    return {k: as_text(v) for k, v in flat(config).items()}


def metric_key(name: str) -> str:
    """Keys keep letters, digits, ``_ - . / `` and space (MLflow's rule, used for every tracker so both hold the
    same names): ``Pipe+ToE (LLM)`` -> ``Pipe_ToE _LLM_``."""
    return _KEY.sub("_", name)[:250]


def provenance_tags(prov: Mapping[str, Any]) -> dict[str, str]:
    """What made the run (``summary.json`` ``meta.provenance``) as tags: the git commit and whether the tree
    was dirty, the command, the package versions (``version.<package>``), Python, the machine, the start and
    end times and who counted tokens."""
    git = prov.get("git") or {}
    tags = {"git.commit": git.get("commit"), "git.dirty": git.get("dirty"),
            "command": " ".join(prov.get("command") or []) or None, "python": prov.get("python"),
            "machine": prov.get("machine"), "started_at": prov.get("started_at"), "ended_at": prov.get("ended_at"),
            "token_counter": prov.get("token_counter"),
            **{f"version.{k}": v for k, v in (prov.get("versions") or {}).items()}}
    return {k: str(v)[:5000] for k, v in tags.items() if v is not None}


def start_tags(out: Path, task: str) -> dict[str, str]:
    return {"task": task, "run_folder": str(Path(out).resolve())}


def progress_points(run_key: str, done: int, total: int, step: int) -> list[Point]:
    """One finished round of the run ``run_key``: episodes done and their share of the run's total."""
    key = metric_key(f"progress/{run_key}")
    axis = f"{key}_round"
    return [Point(key, float(done), step, axis), Point(f"{key}_share", done / total if total else 1.0, step, axis)]


def folder_points(out: Path, rows: Sequence[Mapping[str, Any]]) -> list[Point]:
    """The finished run's summary (one final value per method and numeric column) and its throughput (a step
    per line of ``executor_stats.jsonl``)."""
    points = [Point(metric_key(f"{r.get('method')}/{k}"), float(v)) for r in rows for k, v in r.items()
              if _is_number(v)]
    stats = Path(out) / "executor_stats.jsonl"
    if stats.is_file():
        for step, line in enumerate(stats.read_text().splitlines()):
            rec = json.loads(line)
            points += [Point(f"throughput/{k}", float(rec[k]), step, "throughput/executor_run")
                       for k in THROUGHPUT if _is_number(rec.get(k))]
    return points


def artifact_paths(out: Path) -> list[Path]:
    return [p for p in sorted(Path(out).iterdir()) if p.is_file() and p.suffix in ARTIFACT_SUFFIXES]


class Live:
    """The tracked run of one ``toe run`` while it goes: opened with the config as params; each finished round
    logged as it comes (the callback of ``RunOptions.on_progress``, called from the runs' threads). A logging
    failure while the run goes is reported once and never stops the run (the run folder is logged at the end)."""

    def __init__(self, store: Store, out: Path, config: Mapping[str, Any], task: str, parent: str | None):
        self.store, self.parent, self.out = store, parent, out
        self.run_id = store.start(Path(out).name, flat(config), start_tags(out, task), parent)
        self.steps: dict[str, int] = {}
        self.failed = False
        self._lock = threading.Lock()

    def __call__(self, run_key: str, done: int, total: int) -> None:
        with self._lock:
            step = self.steps[run_key] = self.steps.get(run_key, -1) + 1
            try:
                self.store.log(self.run_id, progress_points(run_key, done, total, step))
            except Exception as exc:  # noqa: BLE001 - live logging is best effort; the run goes on
                if not self.failed:
                    self.failed = True
                    print(f"warning: live tracking failed ({type(exc).__name__}: {str(exc)[:200]}); the run goes "
                          f"on and is logged when it ends", file=sys.stderr)

    def end(self, ok: bool) -> None:
        try:
            self.store.end(self.run_id, ok)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


def log_run(store: Store, out: Path, config: Mapping[str, Any], task: str, parent: str | None = None,
            run_id: str | None = None) -> str:
    """Log the finished run folder ``out`` (``parent``: a sweep's parent id; ``run_id``: the run opened when
    the run started, whose params are logged already) and end the run; returns the run id."""
    from engine.tasks import summary_rows

    summary = json.loads((Path(out) / "summary.json").read_text())
    rows = summary_rows(task, summary)
    first = rows[0] if rows else {}
    tags = {**start_tags(out, task),
            "backend": str(first.get("backend", lookup(config, "llm.backend") or "")),
            "model": str(first.get("model", "")), "simulated": str(bool(any(r.get("simulated") for r in rows))),
            **provenance_tags(summary.get("meta", {}).get("provenance") or {})}
    if run_id is None:
        run_id = store.start(Path(out).name, flat(config), tags, parent)
    else:
        store.set_tags(run_id, tags)
    try:
        store.log(run_id, folder_points(out, rows))
        with tempfile.TemporaryDirectory() as tmp:
            cfg = Path(tmp) / "config.json"
            cfg.write_text(json.dumps(config, indent=1, default=str))
            store.log_files(run_id, [cfg, *artifact_paths(out)], "run-folder")
    except BaseException:
        store.end(run_id, ok=False)
        raise
    store.end(run_id, ok=True)
    return run_id


def open_parent(store: Store, out: Path) -> str:
    """``toe sweep --track``: the sweep's parent (its id kept in ``out/<tracker>_parent_run``, so a resumed
    sweep keeps one parent); every combination's run is logged under it."""
    mark = Path(out) / f"{store.kind}_parent_run"
    if mark.is_file():
        parent = mark.read_text().strip()
        try:
            if store.resume_parent(parent, Path(out).name):
                return parent
        except Exception:  # noqa: BLE001 - a store that lost it: a new parent
            pass
    parent = store.start_parent(Path(out).name, {"sweep_folder": str(Path(out).resolve()), "kind": "sweep"})
    Path(out).mkdir(parents=True, exist_ok=True)
    mark.write_text(parent)
    return parent


def close_parent(store: Store, out: Path, parent: str, ok: bool) -> None:
    """The sweep's combined table, Parquet and plots as the parent's artifacts; ended, ok or failed."""
    try:
        store.log_files(parent, artifact_paths(out), "sweep-folder")
    finally:
        store.end(parent, ok)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
