"""Game-of-24 metrics from per-episode records (the dicts :class:`engine.game24.tot.ToTMethod` writes).

Per (method, seed), over the episodes of one stream phase (the test split by default):

* ``acc_any``: share of puzzles where ANY of the b final outputs passes the
  exact verifier (what ToT reports);
* ``acc_first``: share where the first (highest-valued) output passes;
* ``calls``, ``samples``, ``tokens`` (prompt + completion), ``prompt_tokens``,
  ``completion_tokens``: means per puzzle; a call is one request whatever its n;
* ``wall_s``: mean wall time per puzzle;
* ``experience_tokens``: mean experience tokens per propose / answer prompt (the
  memory's block, 0 for plain ToT), and ``experience_fitted``: blocks per puzzle cut
  to fit the backend's context window (:mod:`engine.memory_budget`); both optional
  like the format-failure counts (records written before them lack them).

:func:`summarize` averages the per-seed figures over seeds (with the standard
deviation across seeds), one record per method; :func:`learning_curve` gives
accuracy over the stream in consecutive windows.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from engine.errors import InputError

METRICS = ("acc_any", "acc_first", "calls", "samples", "tokens", "prompt_tokens", "completion_tokens", "wall_s")
_SOURCE = {
    "acc_any": "success_any", "acc_first": "success_first", "calls": "calls", "samples": "samples",
    "tokens": "tokens", "prompt_tokens": "prompt_tokens", "completion_tokens": "completion_tokens",
    "wall_s": "wall_s",
}
REQUIRED = ("method", "seed", "phase", "episode_id") + tuple(_SOURCE.values())
# Format failures per puzzle (engine.game24.tot): summarized when every record of a group has them
# (records written before they were counted have not; they are left out, not taken as zero)
OPTIONAL = ("unusable_lines", "unusable_values", "experience_tokens", "experience_fitted")


def _check(records: Sequence[Mapping[str, Any]]) -> None:
    for i, rec in enumerate(records):
        missing = [k for k in REQUIRED if k not in rec]
        if missing:
            raise InputError(f"episode record {i} lacks field(s) {missing}; every record needs {list(REQUIRED)}")


def seed_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The :data:`METRICS` of one (method, seed, phase) group of records: means over its episodes."""
    if not records:
        raise InputError("seed_metrics needs at least one episode record, got none")
    _check(records)
    out: dict[str, float] = {"n": float(len(records))}
    for name, src in _SOURCE.items():
        out[name] = float(np.mean(np.asarray([float(r[src]) for r in records], dtype=np.float64)))
    for name in OPTIONAL:
        if all(name in r and r[name] is not None for r in records):
            out[name] = float(np.mean(np.asarray([float(r[name]) for r in records], dtype=np.float64)))
    return out


def group(records: Sequence[Mapping[str, Any]], phase: str | None = "test") -> dict[tuple[str, int], list]:
    """Records by (method, seed), keeping only ``phase`` (all phases if None), in stream order."""
    _check(records)
    out: dict[tuple[str, int], list] = {}
    for rec in records:
        if phase is None or rec["phase"] == phase:
            out.setdefault((str(rec["method"]), int(rec["seed"])), []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: int(r["episode_id"]))
    return out


def summarize(records: Sequence[Mapping[str, Any]], phase: str = "test",
              methods: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One record per method: each metric's mean over seeds and its std across seeds (``<metric>_std``).

    ``methods`` fixes the order (default: first appearance). Accuracies are fractions in [0, 1].
    """
    groups = group(records, phase)
    if methods is None:
        methods = list(dict.fromkeys(m for m, _ in groups))
    out = []
    for method in methods:
        seeds = sorted(s for m, s in groups if m == method)
        if not seeds:
            raise InputError(f"no {phase!r} episodes for method {method!r}; methods present: "
                             f"{sorted({m for m, _ in groups})}")
        per_seed = [seed_metrics(groups[(method, s)]) for s in seeds]
        rec: dict[str, Any] = {"method": method, "seeds": seeds, "n_puzzles": int(per_seed[0]["n"])}
        for name in METRICS + tuple(n for n in OPTIONAL if all(n in p for p in per_seed)):
            vals = np.array([p[name] for p in per_seed])
            rec[name] = float(vals.mean())
            rec[f"{name}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        out.append(rec)
    return out


def learning_curve(records: Sequence[Mapping[str, Any]], method: str, window: int = 50,
                   field: str = "success_any") -> tuple[np.ndarray, np.ndarray]:
    """Mean of ``field`` (default: accuracy, any of b; e.g. ``"calls"``) over the stream in
    consecutive windows of episode ids, pooled over seeds.

    Window k holds the episodes with ``k*window <= episode_id < (k+1)*window``;
    windows without episodes are left out (a method that skips the warm-up has
    points on the test part only). Returns ``x`` f8[w] (the window's end as a
    1-based stream position, capped at the last episode) and ``acc`` f8[w].
    """
    if window < 1:
        raise InputError(f"window must be >= 1, got {window}")
    recs = [r for recs in group(records, None).values() for r in recs if r["method"] == method]
    if not recs:
        raise InputError(f"no episodes for method {method!r}")
    ids = np.array([int(r["episode_id"]) for r in recs], dtype=np.int64)
    if field not in recs[0]:
        raise InputError(f"episode records have no field {field!r}")
    succ = np.array([float(r[field]) for r in recs])
    win = ids // window
    keys = np.unique(win)
    acc = np.array([succ[win == k].mean() for k in keys])
    ends = np.array([min((k + 1) * window, ids[win == k].max() + 1) for k in keys], dtype=np.float64)
    return ends, acc
