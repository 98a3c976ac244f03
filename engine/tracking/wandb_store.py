"""``--track wandb``: the mapping (:mod:`engine.tracking.mapping`) kept by Weights & Biases, offline.

``WANDB_MODE`` is set to ``offline`` unless already set, so a run is written to ``<folder>/wandb/offline-run-*``
with no network and no account (``wandb sync`` uploads it later). The project is the experiment name. Params
are the run's config (flattened keys, values as they are); tags are W&B tags ``key=value`` where they fit W&B's
64 characters, and every tag is also a summary string ``tag/<key>`` (long ones: the command, the run folder);
a stepped point is a history row with its step as its own key (``progress/<run key>_round``,
``throughput/executor_run``, each declared with ``define_metric`` as the step of its series), a final value
goes to the run summary; files are one ``wandb.Artifact`` per run (type ``run-folder``, named after the run
folder); a sweep is a W&B group whose combinations are runs of job type ``run`` and whose own run (job type
``sweep``, id = the group) holds the sweep's files; a run that fails exits with code 1 (W&B: failed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from engine.errors import require
from engine.tracking.mapping import Point

MAX_TAG = 64  # W&B's limit on a tag
_NAME = re.compile(r"[^A-Za-z0-9_\-.]")


class WandbStore:
    kind = "wandb"

    def __init__(self, folder: str, project: str):
        self.wandb = require("wandb", "track")
        os.environ.setdefault("WANDB_MODE", "offline")
        self.folder, self.project = Path(folder), project
        self.runs: dict[str, Any] = {}
        self.steps: dict[str, set[str]] = {}  # run id -> keys declared with their step

    def _init(self, **kwargs) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        settings = self.wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False)
        run = self.wandb.init(project=self.project, dir=str(self.folder), reinit="create_new", settings=settings,
                              **kwargs)
        self.runs[run.id] = run
        self.steps[run.id] = set()
        return run.id

    def start(self, name: str, params: Mapping[str, Any], tags: Mapping[str, str], parent: str | None) -> str:
        rid = self._init(name=name, config=dict(params), group=parent, job_type="run", tags=labels(tags))
        self.runs[rid].summary.update({f"tag/{k}": v for k, v in tags.items()})
        return rid

    def log(self, run_id: str, points: Sequence[Point]) -> None:
        run, declared = self.runs[run_id], self.steps[run_id]
        final = {p.key: p.value for p in points if p.step is None}
        if final:
            run.summary.update(final)
        rows: dict[tuple[str, int], dict[str, float]] = {}
        for p in points:
            if p.step is None:
                continue
            if p.key not in declared:
                run.define_metric(p.key, step_metric=p.axis)
                declared.add(p.key)
            rows.setdefault((p.axis, p.step), {p.axis: p.step})[p.key] = p.value
        for row in rows.values():
            run.log(row)

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        run = self.runs[run_id]
        run.tags = tuple(dict.fromkeys([*run.tags, *labels(tags)]))
        run.summary.update({f"tag/{k}": v for k, v in tags.items()})

    def log_files(self, run_id: str, paths: Sequence[Path], kind: str) -> None:
        run = self.runs[run_id]
        artifact = self.wandb.Artifact(_NAME.sub("_", run.name or run_id)[:128], type=kind)
        for path in paths:
            artifact.add_file(str(path), name=Path(path).name)
        run.log_artifact(artifact)

    def end(self, run_id: str, ok: bool) -> None:
        run = self.runs.pop(run_id)
        self.steps.pop(run_id, None)
        run.finish(exit_code=0 if ok else 1)

    def start_parent(self, name: str, tags: Mapping[str, str]) -> str:
        import secrets

        group = f"{_NAME.sub('_', name)[:40]}-{secrets.token_hex(4)}"
        return self._init(id=group, name=name, group=group, job_type="sweep", tags=labels(tags))

    def resume_parent(self, parent: str, name: str) -> bool:
        self._init(id=parent, name=name, group=parent, job_type="sweep", resume="allow")
        return True

    def where(self, run_id: str) -> str:
        return (f"wandb run {run_id} (project {self.project}) in {self.folder / 'wandb'}, "
                f"{os.environ.get('WANDB_MODE', 'online')}")


def labels(tags: Mapping[str, str]) -> list[str]:
    """W&B tags are labels: ``key=value`` for the tags that fit."""
    return [t for t in (f"{k}={v}" for k, v in tags.items()) if len(t) <= MAX_TAG]
