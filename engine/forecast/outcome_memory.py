"""Experience layer of MemRL, ReMe and FLEX: forecast outcomes released only once a question has resolved.

See :mod:`engine.forecast.memory_baselines` for the release rule and why it is leak-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from engine import codec
from engine.baselines.common import Attempt, Outcome
from engine.errors import ConfigError
from engine.forecast.agent import Episode
from engine.forecast.data import Question
from engine.forecast.evidence_memory import DISPLAY, MemoryBaselinesConfig
from engine.forecast.metrics import brier, uniform_probs

EXPERIENCE_MODES = ("memrl", "reme", "flex")


@codec.data
@dataclass
class _Pending:
    resolved_at: datetime  # close_time + resolution_delay_h
    outcome: Outcome


@codec.data
@dataclass
class Release:
    """The outcomes one release applied (keys, in application order) and their observed memory updates."""

    keys: tuple[str, ...]
    updates: list[dict]


def resolved_at(q, delay_h: float) -> datetime | None:
    """When a question's outcome counts as known: its ``close_time`` plus ``delay_h`` hours (None: never,
    e.g. FutureX items, whose resolution time is not in the format)."""
    if not isinstance(q, Question):
        return None
    return q.close_time + timedelta(hours=delay_h)


def batch_end(cutoffs: Sequence[datetime], resolved: Sequence[datetime | None], queued: Sequence[datetime],
              start: int = 0) -> int:
    """Where the batch starting at ``start`` of a stream in cutoff order ends (exclusive): before the first
    question at whose cutoff an outcome would have resolved since the batch's first cutoff, whether queued
    before the batch (``queued``: resolution times) or of a question of the batch. Every question of a batch
    then sees exactly the outcomes released at the batch's start."""
    c0, mates = cutoffs[start], []
    for j in range(start, len(cutoffs)):
        c = cutoffs[j]
        if j > start and (any(c0 < t <= c for t in queued) or any(t <= c for t in mates)):
            return j
        if resolved[j] is not None:
            mates.append(resolved[j])
    return len(cutoffs)


def leak_free_rounds(tasks: Sequence, delay_h: float) -> list[int]:
    """Sizes of the consecutive batches a stream of questions in cutoff order runs in (:func:`batch_end`,
    with the outcomes of the earlier batches queued and released at each batch's start), planned before
    the run: each question of a batch sees the outcomes resolved before its cutoff, as if run alone.

    Planned from every question's resolution time; a question whose forecast fails queues no outcome
    at run time, so the run's own batching (``MemoryBaselineRunner``) may only merge planned batches,
    never cut one."""
    cutoffs = [t.cutoff for t in tasks]
    resolved = [resolved_at(t, delay_h) for t in tasks]
    sizes, queued, start = [], [], 0
    while start < len(tasks):
        queued = [t for t in queued if t > cutoffs[start]]  # released at the batch's start
        end = batch_end(cutoffs, resolved, queued, start)
        sizes.append(end - start)
        queued += [t for t in resolved[start:end] if t is not None]
        start = end
    return sizes


@codec.data
class ExperienceTrack:
    """One cross-question MemRL / ReMe / FLEX memory fed with outcomes only once they have resolved."""

    def __init__(self, kind: str, cfg: MemoryBaselinesConfig, embedder):
        self.kind = kind
        self.cfg = cfg
        if kind == "memrl":
            from engine.baselines.memrl import MemRLConfig, MemRLMemory

            self.memory = MemRLMemory(MemRLConfig(extraction=cfg.extraction), embedder=embedder)
        elif kind == "reme":
            from engine.baselines.reme import ReMeConfig, ReMeMemory

            self.memory = ReMeMemory(ReMeConfig(extraction=cfg.extraction), embedder=embedder)
        elif kind == "flex":
            from engine.flex.memory import FlexConfig, FlexMemory

            self.memory = FlexMemory(FlexConfig(extraction=cfg.extraction, retrieval="embedding"), embedder=embedder)
        else:
            raise ConfigError(f"experience track needs one of {', '.join(EXPERIENCE_MODES)}, got {kind!r}")
        self.pending: list[_Pending] = []
        self.applied: list[tuple[str, datetime]] = []  # (outcome key, resolution time), in application order

    def resolved_at(self, q) -> datetime | None:
        """When a question's outcome counts as known (None: never, e.g. FutureX items)."""
        return resolved_at(q, self.cfg.resolution_delay_h)

    def release(self, cutoff: datetime, llm) -> Release | None:
        """Observe and apply (one batched call) every queued outcome resolved at or before ``cutoff``;
        what was released (None: nothing was due), for :meth:`install` on another copy of this track."""
        due = sorted((p for p in self.pending if p.resolved_at <= cutoff), key=lambda p: p.resolved_at)
        if not due:
            return None
        reader = self.reader()
        release = Release(tuple(p.outcome.key for p in due), reader.observe([p.outcome for p in due], llm))
        self.install(release)
        return release

    def install(self, release: Release) -> int:
        """Apply a release's observed updates for the outcomes still queued here (an outcome applied
        already is skipped: a release is applied once however many copies of it arrive); the number applied."""
        todo = {p.outcome.key: p for p in self.pending}
        keep = [k for k, key in enumerate(release.keys) if key in todo]
        if not keep:
            return 0
        self.memory.apply([release.updates[k] for k in keep])
        done = {release.keys[k] for k in keep}
        self.pending = [p for p in self.pending if p.outcome.key not in done]
        self.applied += [(release.keys[k], todo[release.keys[k]].resolved_at) for k in keep]
        return len(keep)

    def reader(self):
        """A reader of the memory as it is now (what retrieval and observation read)."""
        return self.memory.reader(self.memory.snapshot())

    def fork(self, shared: dict | None = None) -> "TrackFork":
        """A copy for one stream of a round: this track's memory shared, its own queue (:class:`TrackFork`);
        ``shared``: one dict given to every fork of this track (where the forks keep the memory's reader)."""
        return TrackFork(self, {} if shared is None else shared)

    def preambles(self, tasks: Sequence) -> tuple[dict, dict]:
        """(qid -> experience section, qid -> retrieved ids) from the current memory."""
        reader = self.reader()
        hits = reader.retrieve([experience_task(t) for t in tasks])
        text, ids = {}, {}
        for t, hs in zip(tasks, hits):
            ids[t.qid] = tuple(h.id for h in hs)
            body = reader.format(hs).strip()
            if body:
                text[t.qid] = (f"Past experience ({DISPLAY[self.kind]} memory, from forecasts resolved before this "
                               f"question's snapshot):\n{body}")[: self.cfg.experience_chars]
        return text, ids

    def record(self, ep: Episode, retrieved: Sequence[int]) -> None:
        q = ep.task
        if not isinstance(q, Question) or ep.probs is None:
            return
        b, u = brier(ep.probs, q), brier(uniform_probs(q), q)
        success = b < u
        yes = ", ".join(m for m in q.markets if q.outcome.get(m) == 1) or "none"
        seen = ep.evidence[-1]["text"][:300] if ep.evidence else "(no evidence)"
        attempt = (f"Forecast {json.dumps(ep.probs)}; resolved Yes: {yes}; Brier {b:.4f} "
                   f"(No Information {u:.4f}). Evidence used: {' '.join(seen.split())}")
        out = Outcome(key=f"{self.kind}:{q.qid}", seed=0, task=experience_task(q), attempts=(Attempt(attempt, success),),
                      success=success, reward=1.0 if success else -1.0, retrieved=tuple(retrieved))
        self.pending.append(_Pending(self.resolved_at(q), out))


class TrackFork(ExperienceTrack):
    """One stream's copy of a round's released track, in one process: the memory (read-only) and its reader are the
    base track's, shared by every fork of it; the queue of outcomes and the list of those applied are the fork's own.

    Every stream and share of a forecasting round reads the same released memory and queues its own questions'
    outcomes (:meth:`engine.forecast.round_methods.MemoryBaselineMethod.run_episodes`), so a round's track is
    decoded, released and read (its reader: a snapshot of every memory column) once per process instead of once per
    stream. The base must not change while forked. A release that applies outcomes here (a stream whose questions
    span an outcome's resolution, which the round plan rules out) first takes a private copy of the memory (copy on
    write). Not a data type: a fork is never written."""

    def __init__(self, base: ExperienceTrack, shared: dict):
        self.__dict__.update(vars(base))  # every attribute the base has, the memory by reference
        self.pending, self.applied = list(base.pending), list(base.applied)
        self._base_memory, self._shared = base.memory, shared

    def reader(self):
        if self.memory is not self._base_memory:  # its own copy since a release applied here
            return super().reader()
        reader = self._shared.get("reader")
        return reader if reader is not None else self._shared.setdefault("reader", super().reader())

    def install(self, release: Release) -> int:
        if self.memory is self._base_memory and {p.outcome.key for p in self.pending} & set(release.keys):
            self.memory = codec.loads(codec.dumps(self.memory), "a forked track's memory", live=self.memory)
        return super().install(release)


def experience_task(task) -> str:
    """The retrieval text of a question for the experience layer."""
    if isinstance(task, Question):
        return f"{task.text} [{task.category}]"
    return str(getattr(task, "question", "")) or task.qid


