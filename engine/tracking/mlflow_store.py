"""``--track mlflow``: the mapping (:mod:`engine.tracking.mapping`) kept by an MLflow tracking store.

Params are text (``tot.breadth = "5"``), tags are MLflow tags (the git commit under MLflow's own
``mlflow.source.git.commit``), every point is a metric at its step (a final value at step 0), files are
artifacts of the run, a sweep's parent is a run whose children carry ``mlflow.parentRunId``, and a run ends
``FINISHED`` or ``FAILED``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.errors import require
from engine.tracking.mapping import Point, as_text

MAX_PARAM = 6000  # MLflow's limit on a param value
RENAMED = {"git.commit": "mlflow.source.git.commit"}  # MLflow's own name shows in its UI


def client_class():
    """MLflow's client class; :class:`~engine.errors.MissingExtraError` naming the ``track`` extra without it."""
    require("mlflow", "track")
    from mlflow.tracking import MlflowClient

    return MlflowClient


class MlflowStore:
    kind = "mlflow"

    def __init__(self, uri: str, experiment: str):
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: the file store is opt-in
        self.uri = uri
        self.client = client_class()(tracking_uri=uri)
        self.experiment_id = _experiment_id(self.client, experiment)

    def start(self, name: str, params: Mapping[str, Any], tags: Mapping[str, str], parent: str | None) -> str:
        from mlflow.entities import Param

        tags = {RENAMED.get(k, k): v for k, v in tags.items()}
        run = self.client.create_run(self.experiment_id, run_name=name,
                                     tags={**tags, **({"mlflow.parentRunId": parent} if parent else {})})
        rid = run.info.run_id
        batch = [Param(k[:250], as_text(v)[:MAX_PARAM]) for k, v in params.items()]
        for i in range(0, len(batch), 100):
            self.client.log_batch(rid, params=batch[i:i + 100])
        return rid

    def log(self, run_id: str, points: Sequence[Point]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(p.key, p.value, now, p.step or 0) for p in points]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(run_id, metrics=metrics[i:i + 1000])

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        for k, v in tags.items():
            self.client.set_tag(run_id, RENAMED.get(k, k), v)

    def log_files(self, run_id: str, paths: Sequence[Path], kind: str) -> None:
        for path in paths:
            self.client.log_artifact(run_id, str(path))

    def end(self, run_id: str, ok: bool) -> None:
        self.client.set_terminated(run_id, status="FINISHED" if ok else "FAILED")

    def start_parent(self, name: str, tags: Mapping[str, str]) -> str:
        return self.client.create_run(self.experiment_id, run_name=name, tags=dict(tags)).info.run_id

    def resume_parent(self, parent: str, name: str) -> bool:
        self.client.get_run(parent)
        self.client.update_run(parent, status="RUNNING")
        return True

    def where(self, run_id: str) -> str:
        return f"mlflow run {run_id} in {self.uri}"


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
