"""``toe run CONFIG``: run the experiment a TOML config describes.

Before anything starts the whole config is validated with every ``--set``
override (:func:`engine.tasks.resolve`); ``--dry-run`` prints that resolved plan
and exits without starting Ray or a model. A run folder that holds a finished
run (its ``summary.json``) is not written over unless the run resumes from that
folder's checkpoints or ``--overwrite`` is given.
"""

from __future__ import annotations

import json
from dataclasses import replace

from pathlib import Path

from engine import tracking
from engine.config import apply_overrides, load_toml
from engine.errors import ConfigError
from engine.llm.config import ALIASES
from engine.run_folder import default_folder
from engine.tasks import RunOptions, format_plan, prepare, run, with_engine_sections


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run an experiment config (configs/*.toml)")
    p.add_argument("config", type=Path, help="experiment TOML file, e.g. configs/game24.toml")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: runs/<config name>)")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--workers", type=int, default=1, help="number of workers (ray executor)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value, e.g. --set llm.backend=local (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the config with every override, print the resolved plan and exit")
    p.add_argument("--json", action="store_true",
                   help="with --dry-run: print the resolved plan as one JSON object")
    p.add_argument("--overwrite", action="store_true",
                   help="write over a finished run in the run folder (default: refuse)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    tracking.add_arguments(p)
    p.set_defaults(func=_run)


def finished_run(out: Path) -> Path | None:
    """The file that marks ``out`` as holding a finished run (its ``summary.json``), else None."""
    marker = out / "summary.json"
    return marker if marker.is_file() else None


def _run(args) -> int:
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    data = apply_overrides(load_toml(args.config), args.overrides, ALIASES)  # ALIASES: [llm]'s earlier flat names
    out = args.out or default_folder(args.config)
    options = RunOptions(
        config_path=args.config, out=out, executor=args.executor, workers=args.workers,
        address=args.address, overrides=tuple(args.overrides), progress=args.progress,
    )
    options = with_engine_sections(data, options)  # [cluster] and [llm] parsed here, once for the whole run
    prepared = prepare(data, options)  # the task's sections parsed here, once; the runner gets the parsed plan
    plan = prepared.plan
    marker = finished_run(out)
    resumes = plan.get("checkpoint") is not None and Path(plan["checkpoint"]).is_dir()
    if args.json and not args.dry_run:
        raise ConfigError("--json goes with --dry-run (a run writes summary.json and summary.parquet)")
    if args.dry_run and args.json:
        print(json.dumps({**plan, "finished_run": marker is not None, "resumes": bool(resumes)}, default=str))
        return 0
    if args.dry_run:
        print(format_plan(plan))
        if marker is not None:
            print(f"{'note:':<22}{out} holds a finished run ({marker.name}); "
                  + ("it resumes from its checkpoints" if resumes else
                     "the run would refuse to write over it without --overwrite"))
        print("dry run: config valid, nothing started")
        return 0
    if marker is not None and not (resumes or args.overwrite):
        raise ConfigError(
            f"run folder {str(out)!r} already holds a finished run ({marker}); pass --out NEW_FOLDER, "
            f"or --overwrite to replace it")
    with tracking.tracked(args, data, out, plan["task"]) as live:  # no-op without --track
        if live:
            prepared = replace(prepared, options=replace(prepared.options, on_progress=live))
        rc = run(data, prepared.options, prepared)
    return rc
