"""Executors run a :class:`~engine.rounds.Method` over a stream of episodes in rounds.

This module holds the executor interface and the local (no Ray) executor, the
embedded default. ``cluster/`` provides the Ray executor with the same
interface. See :mod:`engine.rounds` for the round semantics.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol, Sequence

from engine.errors import ConfigError
from engine.llm.base import LLMBackend
from engine.rounds import Episode, EpisodeResult, Method

LLMFactory = Callable[[], LLMBackend]
ProgressFn = Callable[[int], None]  # called with the number of episodes just finished


class Executor(Protocol):
    def run(
        self,
        method: Method,
        episodes: Sequence[Episode],
        llm_factory: LLMFactory,
        round_size: int = 1,
        progress: ProgressFn | None = None,
    ) -> list[EpisodeResult]: ...


def rounds(episodes: Sequence[Episode], round_size: int) -> Iterable[list[Episode]]:
    """Split the stream into consecutive rounds of ``round_size`` episodes (the last may be shorter)."""
    if round_size < 1:
        raise ConfigError(f"round_size must be >= 1, got {round_size}")
    for start in range(0, len(episodes), round_size):
        yield list(episodes[start : start + round_size])


class LocalExecutor:
    """Runs every round in this process with one LLM backend."""

    name = "local"

    def run(self, method, episodes, llm_factory, round_size=1, progress=None):
        llm = llm_factory()
        results: list[EpisodeResult] = []
        for batch in rounds(episodes, round_size):
            snap = method.snapshot()
            out = sorted(method.run_episodes(snap, batch, llm), key=lambda r: r.episode_id)
            if [r.episode_id for r in out] != [e.episode_id for e in batch]:
                raise AssertionError(f"{method.name} returned results for the wrong episodes")
            method.apply(out)
            results.extend(out)
            if progress is not None:
                progress(len(batch))
        return results
