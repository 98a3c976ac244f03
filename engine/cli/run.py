"""``toe run CONFIG``: run the experiment a TOML config describes."""

from __future__ import annotations

from pathlib import Path

from engine import tracking
from engine.config import apply_overrides, load_toml
from engine.errors import ConfigError
from engine.tasks import RunOptions, runner_for


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run an experiment config (configs/*.toml)")
    p.add_argument("config", type=Path, help="experiment TOML file, e.g. configs/game24.toml")
    p.add_argument("--out", type=Path, default=None, help="run folder (default: runs/<config name>)")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--workers", type=int, default=1, help="number of workers (ray executor)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: start a local one)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set llm.backend=local (repeatable)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    tracking.add_arguments(p)
    p.set_defaults(func=_run)


def _run(args) -> int:
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    data = apply_overrides(load_toml(args.config), args.overrides)
    task = data.get("task")
    if not isinstance(task, str):
        raise ConfigError(f"{args.config}: missing top-level key task = \"game24\" | \"finance\" | \"forecast\"")
    out = args.out or Path("runs") / args.config.stem
    options = RunOptions(
        config_path=args.config, out=out, executor=args.executor, workers=args.workers,
        address=args.address, overrides=tuple(args.overrides), progress=args.progress,
    )
    with tracking.tracked(args, data, out, task):  # no-op without --track
        rc = runner_for(task)(data, options)
    return rc
