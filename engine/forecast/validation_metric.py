"""What evolution validates against (paper B.6): the task's metric over the validation pool.

Prophet Arena ranks candidates by mean Brier score (lower is better); FutureX by
accuracy (higher is better). :class:`engine.forecast.evolution.Evolution` reads
the metric from its :class:`~engine.forecast.evolution.Runner` (``metric=``).
"""

from __future__ import annotations

import json

import numpy as np

from engine.forecast.metrics import brier
from engine.forecast.search import SearchResult


class ValidationMetric:
    """What validation measures and how the evolution prompts describe a rollout (B.6).

    The default, :class:`BrierMetric`, is Prophet Arena's (mean Brier, lower is
    better). A task plugs in its own by subclassing and passing it to
    :class:`Runner` (``metric=``); :class:`Evolution` reads ``runner.metric``.
    """

    name = "score"
    lower_is_better = True

    def score(self, episodes) -> float:
        """Validation score of a pool's episodes (every episode answered)."""
        raise NotImplementedError

    def episode_result(self, ep) -> dict:
        """One rollout's result for the editor prompt (Prompt 7)."""
        raise NotImplementedError

    def rollout_text(self, ep) -> str:
        """One rollout's question, truth, answer and score for the critic prompt (Prompt 8)."""
        raise NotImplementedError

    def gate_items(self, task, n: int) -> list[SearchResult]:
        """Up to ``n`` items of one evolution example for the strict sandboxed admission run (B.4)."""
        raise NotImplementedError

    def better(self, a: float, b: float) -> bool:
        """True when score ``a`` beats score ``b`` (eq. 4's strict improvement)."""
        return a < b if self.lower_is_better else a > b

    def sort_key(self, s: float) -> float:
        """Ascending sort key that puts the best score first."""
        return s if self.lower_is_better else -s


class BrierMetric(ValidationMetric):
    """Prophet Arena: mean Brier over the pool (lower is better); items come from the question's sources."""

    name = "brier"

    def score(self, episodes) -> float:
        return float(np.mean([brier(ep.probs, ep.task) for ep in episodes]))

    def episode_result(self, ep) -> dict:
        q = ep.task
        return {"question": q.qid, "brier": brier(ep.probs, q), "failed": ep.failed,
                "outcome": q.outcome, "probabilities": ep.probs}

    def rollout_text(self, ep) -> str:
        q = ep.task
        return (f"Question: {q.text}\nOutcome: {json.dumps(q.outcome)}\nForecast: {json.dumps(ep.probs)}\n"
                f"Brier: {brier(ep.probs, q):.4f}")

    def gate_items(self, task, n: int) -> list[SearchResult]:
        return [SearchResult(0, s.title, s.url, s.summary, task.snapshot_time, 0.0, task.qid)
                for s in task.sources[: max(1, n)]]


BRIER = BrierMetric()
