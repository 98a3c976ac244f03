"""``toe sweep CONFIG --grid KEY=V1,V2 [--grid ...]``: every combination as its own ``toe run``."""

from __future__ import annotations

from pathlib import Path

from engine import tracking
from engine.run_folder import default_folder


def register(subparsers) -> None:
    p = subparsers.add_parser("sweep", help="run every combination of a grid of overrides (resumable)")
    p.add_argument("config", type=Path, help="experiment TOML file, e.g. configs/game24.toml")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...", required=True,
                   help="a config key and its values (TOML), e.g. --grid tot.breadth=3,5 (repeatable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value in every run (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="sweep folder (default: runs/<config name>-sweep)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: parallel processes here; ray: one Ray task per run")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (local processes or Ray tasks in flight)")
    p.add_argument("--address", default=None, help="Ray cluster address (--executor ray; default: start one)")
    p.add_argument("--metric", default=None,
                   help="summary column to tabulate and plot (default per task, e.g. acc_any for game24)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide the progress bar")
    tracking.add_arguments(p)  # passed on to every run; default store: <sweep folder>/mlruns (W&B: <sweep folder>/wandb)
    p.set_defaults(func=_sweep)


def _sweep(args) -> int:
    from engine.sweep import SweepOptions, parse_axis, run_sweep

    out = args.out or default_folder(args.config, "-sweep")
    track = _track_args(args, out)
    store = parent = None
    if track:  # one parent for the sweep (MLflow: a run; W&B: a group), each combination's run under it
        where, experiment = track[3], track[5]
        tracking.check_reachable(where)
        store = tracking.open_store(args.track, where, experiment)
        parent = tracking.open_parent(store, out)
        track += ["--track-parent", parent]
    options = SweepOptions(
        config_path=args.config, out=out,
        axes=tuple(parse_axis(g) for g in args.grid), overrides=tuple(args.overrides),
        executor=args.executor, jobs=args.jobs, address=args.address, metric=args.metric,
        progress=args.progress, run_args=tuple(track),
    )
    rc = 1
    try:
        rc = run_sweep(options)
    finally:
        if parent is not None:
            tracking.close_parent(store, out, parent, rc == 0)
            print(f"tracked: sweep parent {store.where(parent)}")
    return rc


def _track_args(args, out: Path) -> list[str]:
    """``toe run`` options that make every run log itself to one tracking store and experiment."""
    if args.track is None:
        return []
    tracking.check_installed(args.track)  # before any run starts
    where = tracking.store_location(args.track, args.track_uri or str(out / tracking.DEFAULT_FOLDER[args.track]))
    return ["--track", args.track, "--track-uri", where, "--track-experiment", args.track_experiment or out.name]
