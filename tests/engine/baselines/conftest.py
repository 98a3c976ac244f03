"""Fixtures for the baseline memories: a controllable embedder and a scripted LLM."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.baselines.common import Attempt, Outcome
from engine.embed import HashingEmbedder
from engine.llm.base import Completion, Response


class FixedEmbedder:
    """Texts -> given vectors (normalised); unknown texts raise, so tests see every embedding made."""

    name = "fixed"

    def __init__(self, vectors: dict[str, tuple[float, ...]]):
        self.vectors = {k: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for k, v in vectors.items()}
        self.dim = len(next(iter(vectors.values())))

    def embed(self, texts):
        return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def unit2(sim: float) -> tuple[float, float]:
    """A 2-D unit vector whose cosine with (1, 0) is ``sim``."""
    return (sim, math.sqrt(max(0.0, 1.0 - sim * sim)))


class ScriptedLLM:
    """Answers every request with ``reply(request)``; records the batches it received."""

    def __init__(self, reply, name: str = "scripted"):
        self.reply = reply
        self.name = name
        self.model = "scripted"
        self.batches: list[list] = []

    def generate(self, requests):
        self.batches.append(list(requests))
        return [
            Response(
                completions=tuple(Completion(self.reply(r), 5) for _ in range(r.n)),
                prompt_tokens=10, latency_s=0.0, backend=self.name, model=self.model,
            )
            for r in requests
        ]


class Simulated:
    """A stand-in with the simulated backend's capability (extraction 'auto' resolves to 'rule')."""

    name = "simulated"
    answers_any_prompt = False
    model = "none"

    def generate(self, requests):  # pragma: no cover - must never be called in rule mode
        raise AssertionError("rule-based extraction must not call the LLM")


def outcome(task: str, *attempts: tuple[str, bool], retrieved=(), key=None, seed=1) -> Outcome:
    success = any(ok for _, ok in attempts)
    return Outcome(
        key=key or f"ep-{task}", seed=seed, task=task,
        attempts=tuple(Attempt(t, ok) for t, ok in attempts),
        success=success, reward=1.0 if success else -1.0, retrieved=tuple(retrieved),
    )


@pytest.fixture
def hashing():
    return HashingEmbedder(64)


@pytest.fixture
def simulated():
    return Simulated()


@pytest.fixture
def fixed_embedder():
    return FixedEmbedder


@pytest.fixture
def scripted():
    return ScriptedLLM


@pytest.fixture
def make_outcome():
    return outcome


@pytest.fixture
def at_sim():
    return unit2
