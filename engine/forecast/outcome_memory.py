"""Experience layer of MemRL, ReMe and FLEX: forecast outcomes released only once a question has resolved.

See :mod:`engine.forecast.memory_baselines` for the release rule and why it is leak-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Sequence

from engine.baselines.common import Attempt, Outcome
from engine.errors import ConfigError
from engine.forecast.agent import Episode
from engine.forecast.data import Question
from engine.forecast.evidence_memory import DISPLAY, MemoryBaselinesConfig
from engine.forecast.metrics import brier, uniform_probs

EXPERIENCE_MODES = ("memrl", "reme", "flex")


@dataclass
class _Pending:
    resolved_at: datetime  # close_time + resolution_delay_h
    outcome: Outcome


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
        if not isinstance(q, Question):
            return None
        return q.close_time + timedelta(hours=self.cfg.resolution_delay_h)

    def release(self, cutoff: datetime, llm) -> int:
        """Observe and apply (one batched call) every queued outcome resolved at or before ``cutoff``."""
        due = sorted((p for p in self.pending if p.resolved_at <= cutoff), key=lambda p: p.resolved_at)
        if not due:
            return 0
        self.pending = [p for p in self.pending if p.resolved_at > cutoff]
        reader = self.memory.reader(self.memory.snapshot())
        self.memory.apply(reader.observe([p.outcome for p in due], llm))
        self.applied += [(p.outcome.key, p.resolved_at) for p in due]
        return len(due)

    def preambles(self, tasks: Sequence) -> tuple[dict, dict]:
        """(qid -> experience section, qid -> retrieved ids) from the current memory."""
        reader = self.memory.reader(self.memory.snapshot())
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


def experience_task(task) -> str:
    """The retrieval text of a question for the experience layer."""
    if isinstance(task, Question):
        return f"{task.text} [{task.category}]"
    return str(getattr(task, "question", "")) or task.qid


