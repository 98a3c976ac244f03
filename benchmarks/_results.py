"""One writer for the benchmarks' measured figures: ``benchmarks/results/<topic>.json``.

Every suite calls :func:`record` at the end of a measurement with the figures it measured (numbers,
not formatted text). The file holds, per run key (a workload: ``"n=100000,dim=384"``,
``"cold-300x60"``), a list of recorded runs, each with the command that made it, the machine, the
UTC time and the figures::

    {"topic": "index", "runs": {"n=100000,dim=384": [
        {"command": "...", "date": "2026-11-29T22:22Z", "machine": {...}, "note": "...", "figures": {...}}]}}

``keep="last"`` (the default) replaces the key's list with this run; ``keep="all"`` appends, for
figures quoted as a median over repeated runs (the Ray executor's speed-up). ``benchmarks/build_results.py``
renders ``benchmarks/RESULTS.md``, the README's speed table and the docs' benchmark tables from these
files (through ``scripts/doc_tables.py``), so no quoted figure is typed by hand.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path

from engine.atomic_io import write_text

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    """What the figures were measured on: CPU model, cores, memory, load average at the time."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": mem, "load_average_1_5_15": load,
            "python": platform.python_version(), "system": platform.system()}


def command_line() -> str:
    """The command as run: ``python -m pytest ARGS`` for a pytest session, with the TOE_BENCH_* settings."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items())
                   if k.startswith(("TOE_BENCH", "TOE_LLM")))
    argv = sys.argv[1:] if Path(sys.argv[0]).name in ("pytest", "__main__.py", "pytest.py") else sys.argv
    py = ".venv/bin/python" if ".venv" in Path(sys.executable).parts else "python"
    cmd = f"{py} -m pytest " + " ".join(shlex.quote(a) for a in argv)
    return f"{env} {cmd}".strip()


def record(topic: str, key: str, figures: dict, *, command: str | None = None, note: str = "",
           keep: str = "last", results: Path = RESULTS) -> Path:
    """Write one run's ``figures`` under ``runs[key]`` of ``results/<topic>.json``; returns the path."""
    if keep not in ("last", "all"):
        raise ValueError(f"keep must be 'last' or 'all', got {keep!r}")
    if not isinstance(figures, dict) or not figures:
        raise ValueError(f"figures of {topic}/{key} must be a non-empty dict, got {figures!r}")
    path = Path(results) / f"{topic}.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"topic": topic, "runs": {}}
    run = {"command": command or command_line(),
           "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
           "machine": machine(), "note": note, "figures": json.loads(json.dumps(figures))}
    runs = data.setdefault("runs", {})
    runs[key] = (runs.get(key, []) if keep == "all" else []) + [run]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(data, indent=1) + "\n")
    print(f"\n[benchmark results] {topic}/{key} written to {path}")
    return path


def read_sections(name: str, *, results: Path = RESULTS) -> dict:
    """The sections of ``results/<name>.json`` written by :func:`write_sections` ({} when there is none yet)."""
    path = Path(results) / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def write_sections(name: str, *, results: Path = RESULTS, **sections) -> Path:
    """Replace ``sections`` of ``results/<name>.json`` and keep its other sections (the scaling study's file:
    ``rows``, ``experiment``, ``stores``, ... each written by its own benchmark); written atomically."""
    if not sections:
        raise ValueError(f"write_sections({name!r}) needs at least one section")
    path = Path(results) / f"{name}.json"
    data = {**read_sections(name, results=results), **json.loads(json.dumps(sections))}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(data, indent=2) + "\n")
    return path
