"""The run folder every ``toe run`` writes, whatever the task (see :mod:`engine.runner`).

``episodes.parquet`` (one row per episode record), ``summary.json``
(``{"meta": {...}, "methods": [one record per table row]}``), ``table.md`` and
``config.toml`` (the config as resolved: ``--set`` overrides applied, every default of the task's
sections and ``[llm]`` filled in; ``toe run OUT/config.toml`` runs the same run).
``summary.json``'s ``meta.provenance`` (also the Parquet schema metadata of
``episodes.parquet``, key ``toe.provenance``) says what made the run: the command
line, the git commit (and whether the tree had uncommitted changes), the versions
of the engine and the libraries results depend on, the machine, the start and end
times (UTC). Every file is written atomically (temporary file, fsync, rename, fsync the folder),
so a crash mid-write leaves the earlier file or none, never half of one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from engine import atomic_io


def default_folder(config_path, suffix: str = "") -> Path:
    """Where a run (or, with ``suffix = "-sweep"``, a sweep) of ``config_path`` writes without ``--out``:
    ``runs/<config name><suffix>``."""
    return Path("runs") / f"{Path(config_path).stem}{suffix}"


def run_folder(options) -> Path:
    """The run folder of ``options`` (an :class:`engine.tasks.RunOptions`): ``--out``, else :func:`default_folder`."""
    return Path(options.out) if options.out else default_folder(options.config_path)


def answered_by(records: Sequence[Mapping[str, Any]], llm_cfg) -> tuple[str, str]:
    """``(backend, model)`` that answered the records; several are joined with ``+``; none: the run's ``[llm]``
    (``llm_cfg``, an :class:`engine.llm.config.LLMConfig`).

    Methods fill ``backend`` and ``model`` in each record from ``llm.answered_by``, so a
    replay names the backend that recorded its trace, not "replay".
    """
    seen = sorted({(str(r.get("backend") or ""), str(r.get("model") or "")) for r in records} - {("", "")})
    fallback_backend = llm_cfg.answering
    fallback_model = llm_cfg.model or llm_cfg.backend
    if not seen:
        return fallback_backend, fallback_model
    backend = "+".join(dict.fromkeys(b or fallback_backend for b, _ in seen))
    model = "+".join(dict.fromkeys(m or fallback_model for _, m in seen))
    return backend, model


PROVENANCE_PACKAGES = ("toe-engine", "numpy", "numba", "pyarrow", "ray", "vllm", "mem0ai", "hnswlib", "xllamacpp")


def provenance(started_at: str, command: Sequence[str] | None = None) -> dict[str, Any]:
    """What made a run: command line, git commit (``dirty``: uncommitted changes), package versions
    (None: not installed), machine, start and end time (UTC, ISO 8601)."""
    import datetime
    import importlib.metadata
    import os
    import platform
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    git: dict[str, Any] | None = None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            git = {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        git = None
    versions = {}
    for name in PROVENANCE_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "command": list(sys.argv if command is None else command),
        "git": git,
        "versions": versions,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "started_at": started_at,
        "ended_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_records(records: Sequence[Mapping[str, Any]], path: str | Path,
                  provenance: Mapping[str, Any] | None = None) -> None:
    """Records as one Parquet table, written atomically (columns = the union of the records' keys, a missing
    key null); ``provenance`` goes into the schema metadata (key ``toe.provenance``, JSON). The writer of
    ``episodes.parquet`` (every episode) and ``summary.parquet`` (every method x seed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in records for k in r))
    table = pa.table({k: [_plain(r.get(k)) for r in records] for k in keys})
    if provenance is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               b"toe.provenance": json.dumps(provenance).encode()})
    with atomic_io.atomic_writer(path, "wb") as fh:
        pq.write_table(table, fh)


def write_summary(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, Any], path: str | Path) -> None:
    """``summary.json``: ``{"meta": {...}, "methods": [one record per table row]}``."""
    text = json.dumps({"meta": dict(meta), "methods": list(rows)}, indent=2, default=_json_default) + "\n"
    atomic_io.write_text(path, text)


def write_config(config: Mapping[str, Any], path: str | Path) -> None:
    """The config as the run resolved it (:func:`engine.runner.resolved_config`), as TOML."""
    import tomli_w

    atomic_io.write_text(path, tomli_w.dumps(_toml_ready(config)))


def unmark_finished(out: Path) -> None:
    """Remove ``summary.json`` (the mark of a finished run) before a run writes anything into ``out``."""
    (out / "summary.json").unlink(missing_ok=True)
    atomic_io.fsync_dir(out)


def write_run(out: Path, *, task: str, config: Mapping[str, Any], options, summary, records, tables: str,
              backend: str, model: str, wall: Mapping[str, float], errors: Sequence[str] = (),
              started_at: str = "", seed_rows: Sequence[Mapping[str, Any]] | None = None
              ) -> list[tuple[str, BaseException]]:
    """The whole run folder; ``meta`` gets what answered and the executor beside the task's own fields.

    Each artefact is written on its own: one that fails (a full disk, a value Arrow cannot hold) is
    returned as ``(name, error)`` and the others are still written; ``summary.json`` comes last, with
    every failure listed in ``meta.artefact_errors``, so a failure at the end costs that artefact, not
    the run's results.
    """
    simulated = backend == "simulated" or backend.startswith("simulated+")
    meta = {"task": task, "title": config.get("title", ""), "backend": backend, "model": model,
            "simulated": simulated, "executor": getattr(options, "executor", "local"),
            "workers": getattr(options, "workers", 1), "wall_s": dict(wall), **summary.meta,
            "provenance": {**provenance(started_at), **summary.meta.pop("provenance", {})}}
    def labelled(row):
        row = dict(row)
        row.setdefault("backend", backend)
        row.setdefault("model", model)
        row.setdefault("simulated", simulated)
        return row

    rows = [labelled(r) for r in summary.rows]
    # summary.json marks a finished run (``toe run`` refuses to write over one): it goes first and
    # comes back last, so a failure in between leaves a folder that claims nothing, never a mix
    unmark_finished(out)
    failed: list[tuple[str, BaseException]] = []
    steps = [("episodes.parquet", lambda: write_records(records, out / "episodes.parquet", meta["provenance"])),
             ("config.toml", lambda: write_config(config, out / "config.toml"))]
    if seed_rows is not None:  # flat: one row per method x seed, nested values as JSON text
        flat = [{"task": task, **{k: json.dumps(v, default=_json_default) if isinstance(v, Mapping) else v
                                  for k, v in labelled(r).items()}} for r in seed_rows]
        steps.insert(1, ("summary.parquet", lambda: write_records(flat, out / "summary.parquet", meta["provenance"])))
    if tables:
        steps.insert(1, ("table.md", lambda: atomic_io.write_text(out / "table.md",
                                                                  tables if tables.endswith("\n") else tables + "\n")))
    for name, write in steps:
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - collected: the summary is still written
            failed.append((name, exc))
    errors = [*errors, *(f"{name}: {type(exc).__name__}: {exc}" for name, exc in failed)]
    if errors:
        meta["artefact_errors"] = errors
    write_summary(rows, meta, out / "summary.json")
    return failed


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        x = float(o)
        return None if not math.isfinite(x) else x
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _toml_ready(value):
    """TOML has no null: drop None values (a missing key means the default everywhere in the engine)."""
    if isinstance(value, Mapping):
        return {str(k): _toml_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_toml_ready(v) for v in value if v is not None]
    return _plain(value)
