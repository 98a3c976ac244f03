"""Experiment tracking: ``toe run ... --track mlflow`` (or ``--track wandb``) logs the run to a tracker.

The tracked run is opened when the run starts (params, tags) and every finished round is logged as it comes
(``progress/<run key>``), so a run is visible while it goes; the rest is logged from the run folder once the
runner has returned, so a tracked run is the same run as an untracked one. What is logged is one mapping
(:mod:`engine.tracking.mapping`); each tracker is a store that keeps it its own way
(:mod:`engine.tracking.mlflow_store`, :mod:`engine.tracking.wandb_store`).

MLflow's tracking URI defaults to a local file store, ``./mlruns`` (no server to start); any other URI works
with ``--track-uri`` (``http://HOST:5000``, ``sqlite:///mlflow.db``; the latter needs the full ``mlflow``
package). W&B writes offline runs under ``--track-uri`` (a folder; default ``.``: ``./wandb/offline-run-*``).
Tracker packages are imported lazily; without one ``--track`` fails before the run starts, naming the ``track``
extra.
"""

from __future__ import annotations

import argparse
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from engine.errors import BackendError, ConfigError, MissingExtraError
from engine.tracking.mapping import (ARTIFACT_SUFFIXES, Live, Store, close_parent, flatten, log_run,  # noqa: F401
                                     metric_key, open_parent, provenance_tags)

TRACKERS = ("mlflow", "wandb")
DEFAULT_URI = "mlruns"  # MLflow's local file store
DEFAULT_FOLDER = {"mlflow": DEFAULT_URI, "wandb": "."}  # W&B writes <folder>/wandb/offline-run-*


def add_arguments(parser) -> None:
    """The ``--track*`` options of ``toe run`` and ``toe sweep``."""
    parser.add_argument("--track", choices=TRACKERS, default=None,
                        help="log the run (config, metrics, throughput, artifacts) to an experiment tracker")
    parser.add_argument("--track-uri", default=None,
                        help=f"mlflow: tracking URI (default: a local file store, ./{DEFAULT_URI}), e.g. "
                             f"http://HOST:5000; wandb: the folder its offline runs go to (default: .)")
    parser.add_argument("--track-experiment", default=None,
                        help="experiment (W&B: project) name (default: the config file's name)")
    parser.add_argument("--track-parent", default=None, help=argparse.SUPPRESS)  # toe sweep: its parent


def tracking_uri(uri: str | None) -> str:
    """``None`` -> ``file:///abs/mlruns``; a plain path -> its ``file:`` URI; anything with a scheme unchanged."""
    uri = uri or DEFAULT_URI
    if _has_scheme(uri) or uri.startswith(("file:", "databricks")):
        return uri
    return Path(uri).expanduser().resolve().as_uri()


def store_location(kind: str, uri: str | None) -> str:
    """Where ``kind`` keeps runs: MLflow's tracking URI, or W&B's folder (absolute)."""
    if kind == "mlflow":
        return tracking_uri(uri)
    if uri and (_has_scheme(uri) or uri.startswith("file:")):
        raise ConfigError(f"--track wandb takes a folder as --track-uri (its offline runs go to FOLDER/wandb), "
                          f"got {uri!r}; upload them with `wandb sync`")
    return str(Path(uri or DEFAULT_FOLDER[kind]).expanduser().resolve())


def check_installed(kind: str) -> None:
    """A known tracker whose package imports, else a clear error (before any run starts)."""
    if kind not in TRACKERS:
        raise ConfigError(f"--track must be one of {TRACKERS}, got {kind!r}")
    if kind == "mlflow":
        from engine.tracking.mlflow_store import client_class

        client_class()
    else:
        from engine.errors import require

        require("wandb", "track")


def open_store(kind: str, where: str, experiment: str) -> Store:
    """The tracker ``kind`` on its location (:func:`store_location`) and experiment."""
    check_installed(kind)
    if kind == "mlflow":
        from engine.tracking.mlflow_store import MlflowStore

        return MlflowStore(where, experiment)
    from engine.tracking.wandb_store import WandbStore

    return WandbStore(where, experiment)


@contextmanager
def tracked(args, config: Mapping[str, Any], out: Path, task: str) -> Iterator[Any]:
    """Around a runner: checks the tracker, opens the tracked run at the start (params and tags, so the run is
    visible while it goes), yields the live progress callback (``RunOptions.on_progress``: every finished
    round's episodes as ``progress/<run key>``), and logs the run folder into the same run after it. Yields
    None without ``--track``."""
    kind = getattr(args, "track", None)
    if kind is None:
        yield None
        return
    check_installed(kind)
    where = store_location(kind, getattr(args, "track_uri", None))
    check_reachable(where)
    experiment = getattr(args, "track_experiment", None) or Path(args.config).stem
    store = open_store(kind, where, experiment)
    live = Live(store, out, config, task, getattr(args, "track_parent", None))
    ok = False
    try:
        yield live
        ok = True
    finally:
        if not ok:
            live.end(False)
    try:
        run_id = log_run(store, out, config, task, parent=live.parent, run_id=live.run_id)
    except MissingExtraError:
        raise
    except Exception as exc:  # noqa: BLE001 - the run is saved; say so, and why its logging failed
        live.end(False)
        raise BackendError(f"the run finished and its results are in {out}, but logging it to {where} failed: "
                           f"{type(exc).__name__}: {str(exc)[:300]}") from None
    print(f"tracked: {store.where(run_id)}")


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


def _has_scheme(uri: str) -> bool:
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", uri) is not None
