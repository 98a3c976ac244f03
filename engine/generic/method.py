"""One method on the generic task: a prompt per problem, with a memory's experience block or without one.

Every method sends the same prompt (:func:`prompt`) and differs only in the
experience block (the ToE paper's fairness control, seed 000): ``plain`` has
none; ``flex``, ``mem0``, ``memrl``, ``reme`` retrieve ``[memory] top_k`` items
for the problem (FLEX within the problem's domain), formatted by the memory and
fitted to ``[memory] max_experience_tokens`` and the backend's context window
(least relevant first; :mod:`engine.memory_budget`). After the round's batched
call, each answer is checked and becomes an
:class:`~engine.baselines.common.Outcome` (attempt = the answer text, success =
the checker's verdict, reward +1/-1, ground truth = the reference answer) that
the memory observes (its extraction / reflection prompts, one batch) and applies
at the barrier, in episode order.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import numpy as np

from engine.baselines.common import Attempt, Outcome
from engine.llm.base import LLMBackend, MeteredBackend, Request, usage_fields
from engine.memory_budget import MemoryBudget, context_window, count_tokens_for, fit_items, room
from engine.rounds import Episode, EpisodeResult, request_seed

MEMORY_METHODS = ("flex", "mem0", "memrl", "reme")
METHODS = ("plain",) + MEMORY_METHODS
K_KEYS = {"mem0": "top_k", "memrl": "select_k", "reme": "top_k", "flex": "k"}
_ANSWER = re.compile(r"^\s*Answer:\s*(.+?)\s*$", re.M | re.I)


def prompt(problem: str, experience: str = "") -> str:
    """The generic prompt: the experience block (when any), then the problem and the answer format."""
    head = (experience.rstrip() + "\n\n") if experience else ""
    return (f"{head}Solve the problem. Show your work briefly, then end with one line 'Answer: <answer>'.\n\n"
            f"Problem: {problem}\n")


def parse_answer(text: str) -> str:
    """The last ``Answer:`` line's value, or "" when there is none."""
    found = _ANSWER.findall(text or "")
    return found[-1] if found else ""


def make_memory(name: str, table: Mapping[str, Any] | None, budget: MemoryBudget, embedder):
    """The memory of method ``name`` from its config table, ``k`` set by ``[memory] top_k``."""
    from engine.config import from_dict
    from engine.errors import ConfigError

    table = dict(table or {})
    key = K_KEYS[name]
    if key in table:
        raise ConfigError(f"[{name}] {key} is set for every memory method by [memory] top_k, got {table[key]!r}")
    table[key] = budget.top_k
    if name == "flex":
        from engine.flex.memory import FlexConfig, FlexMemory

        return FlexMemory(from_dict(FlexConfig, table, "flex"), embedder=embedder)
    if name == "mem0":
        from engine.baselines.mem0 import Mem0Config, Mem0Memory

        return Mem0Memory(from_dict(Mem0Config, table, "mem0"), embedder=embedder)
    if name == "memrl":
        from engine.baselines.memrl import MemRLConfig, MemRLMemory

        return MemRLMemory(from_dict(MemRLConfig, table, "memrl"), embedder=embedder)
    from engine.baselines.reme import ReMeConfig, ReMeMemory

    return ReMeMemory(from_dict(ReMeConfig, table, "reme"), embedder=embedder)


class GenericMethod:
    """:class:`engine.rounds.Method` for the generic task (``memory`` None: ``plain``)."""

    context_attrs = ("checker",)  # a function from the config: a checkpoint keeps the live method's

    def __init__(self, name: str, memory, checker, budget: MemoryBudget, max_tokens: int = 256,
                 temperature: float = 0.0):
        self.name = name
        self.memory = memory
        self.checker = checker
        self.budget = budget
        self.max_tokens = max_tokens
        self.temperature = temperature

    def key(self, e: Episode) -> str:
        """The episode's key: its requests' ``episode`` tag and its FLEX record's key (unique per method and seed)."""
        return f"{self.name}:{e.seed}:{e.payload.id}"

    def snapshot(self) -> dict[str, np.ndarray]:
        return self.memory.snapshot() if self.memory is not None else {}

    def _retrieve(self, reader, problems, episodes, llm) -> list:
        if reader is None:
            return [[] for _ in problems]
        tasks = [p.problem for p in problems]
        if self.name == "flex":
            return reader.retrieve(tasks, domains=[p.domain for p in problems])
        if getattr(reader, "retrieves_with_llm", False):  # ReMe: its LLM rerank / rewrite, counted per episode
            return reader.retrieve(tasks, llm=llm, episodes=[self.key(e) for e in episodes],
                                   seeds=[e.seed for e in episodes])
        return reader.retrieve(tasks)

    def run_episodes(self, snapshot, episodes: Sequence[Episode], llm: LLMBackend) -> list[EpisodeResult]:
        if not episodes:
            return []
        metered = MeteredBackend(llm)
        reader = self.memory.reader(snapshot) if self.memory is not None else None
        problems = [e.payload for e in episodes]
        found = self._retrieve(reader, problems, episodes, metered)
        fits = context_window(metered) is not None
        reqs, blocks, fitted = [], [], []
        for e, p, hits in zip(episodes, problems, found):
            bare = prompt(p.problem)
            limit = self.budget.max_experience_tokens
            if fits:
                limit = room(metered, count_tokens_for(metered, bare), self.max_tokens, limit)
            kept = []
            text = ""
            if hits and limit > 0:
                text, kept = fit_items(hits, lambda hs: reader.format(hs) if hs else "", limit,
                                       lambda t: count_tokens_for(metered, t))
            blocks.append((text, kept))
            fitted.append(len(kept) < len(hits))
            reqs.append(Request(prompt=prompt(p.problem, text), max_tokens=self.max_tokens,
                                temperature=self.temperature, seed=request_seed(e.seed, "generic", p.id),
                                episode=self.key(e)))
        resps = metered.generate(reqs)
        outcomes, verdicts = [], []
        for e, p, r, (text, kept) in zip(episodes, problems, resps, blocks):
            raw = r.texts[0] if r.completions else ""
            answer = parse_answer(raw)
            ok = bool(answer) and bool(self.checker(answer, p.answer))
            verdicts.append((raw, answer, ok))
            outcomes.append(Outcome(key=self.key(e), seed=int(e.seed), task=p.problem,
                                    attempts=(Attempt(raw.strip() or answer, ok),), success=ok,
                                    reward=1.0 if ok else -1.0, retrieved=tuple(h.id for h in kept),
                                    domain=p.domain, ground_truth=p.answer))
        updates = [{} for _ in episodes]
        if reader is not None:
            updates = [dict(u) for u in reader.observe(outcomes, metered)]
        out = []
        for i, (e, p, (raw, answer, ok)) in enumerate(zip(episodes, problems, verdicts)):
            use = metered.meter.per_episode.get(self.key(e))  # the prompt and the memory's own calls
            rec = {"episode_id": e.episode_id, "problem_id": p.id, "domain": p.domain, "answer": answer,
                   "expected": p.answer, "correct": ok,
                   "experience_tokens": float(count_tokens_for(metered, blocks[i][0])) if blocks[i][0] else 0.0,
                   "experience_fitted": bool(fitted[i]), "n_retrieved": len(blocks[i][1]),
                   "calls": use.calls if use else 0,
                   "tokens": (use.prompt_tokens + use.completion_tokens) if use else 0,
                   "backend": metered.answered_by[0], "model": metered.answered_by[1], **usage_fields(use)}
            out.append(EpisodeResult(e.episode_id, rec, updates[i]))
        return out

    def apply(self, results: Sequence[EpisodeResult]) -> None:
        if self.memory is None:
            return
        ordered = sorted(results, key=lambda r: r.episode_id)
        self.memory.apply([r.updates for r in ordered if r.updates])
