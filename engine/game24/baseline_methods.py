"""Game-of-24 adapters for the baseline memories: ToT + Mem0 / MemRL / ReMe / FLEX.

Every baseline runs the SAME ToT procedure, prompts and budget as plain ToT
(:mod:`engine.game24.tot`); it differs only in experience representation,
retrieval and update (the ToE paper's fairness controls, seed 000). The
task-agnostic memories live in :mod:`engine.baselines`; this module plugs them
into ToT through :mod:`engine.game24.hooks`:

* **retrieve**: at PHASE_PROPOSE, the memory is queried with the episode's
  task text (the puzzle, ``"4 9 10 13"``; with ``per_step = true`` the current
  state instead) and the formatted memories fill the experience slot of the
  propose and answer prompts. A memory whose retrieval calls the LLM (ReMe's
  rerank and rewrite) gets the LLM and the episode's key and seed, so those
  calls count for the episode. Per-episode retrieval happens once and is reused
  for every frontier node of that episode; the ids are reported on the
  episode's first query only, so ``retrieved`` lists each memory once. At
  PHASE_VALUE nothing is retrieved (value prompts stay exactly ToT's), and no
  baseline supplies continuations or values.
* **observe**: each finished episode becomes an :class:`~engine.baselines.Outcome`
  (task text, the b final outputs with their verifier verdicts, success,
  reward +1/-1, the retrieved ids); the memory's extraction / reflection
  prompts go to the LLM as one batch (rule-based under the simulated backend).
* **apply**: the memory's own update, in episode order.

Registry: :data:`BASELINES` maps ``"mem0"``, ``"memrl"``, ``"reme"``, ``"flex"``
to their config class and memory class; :func:`make_baseline_method` builds a
ready :class:`~engine.game24.tot.ToTMethod`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines.common import Attempt, Hit, Outcome
from engine.flex.memory import FlexConfig, FlexMemory
from engine.baselines.memrl import MemRLConfig, MemRLMemory
from engine.baselines.reme import ReMeConfig, ReMeMemory
from engine.config import check, from_dict
from engine.errors import ConfigError
from engine.game24.hooks import EMPTY, PHASE_PROPOSE, EpisodeTrace, Retrieval, StepQuery, Updates
from engine.llm.base import LLMBackend
from engine.memory_budget import MemoryBudget, fit_items

__all__ = [
    "BASELINES",
    "AdapterConfig",
    "BaselineHooks",
    "BaselineReader",
    "make_baseline_hooks",
    "make_baseline_method",
    "puzzle_text",
    "trace_outcome",
]


def _mem0_classes():
    from engine.baselines.mem0 import Mem0Config, Mem0Memory  # imports mem0ai lazily, at build time

    return Mem0Config, Mem0Memory


# name -> (config class, memory class); mem0 resolves lazily so that the registry never needs mem0ai.
BASELINES: dict[str, Any] = {
    "mem0": _mem0_classes,
    "memrl": lambda: (MemRLConfig, MemRLMemory),
    "reme": lambda: (ReMeConfig, ReMeMemory),
    "flex": lambda: (FlexConfig, FlexMemory),
}

# Each memory's own name for "items per prompt"; every one is set from ``[memory] top_k`` (engine.memory_budget).
TOP_K_KEYS = {"mem0": "top_k", "memrl": "select_k", "reme": "top_k", "flex": "k"}


def with_budget(name: str, table: Mapping[str, Any], budget: MemoryBudget) -> dict[str, Any]:
    """``table`` with the memory's items-per-prompt key set from ``[memory] top_k``.

    The key is not the memory table's to set: one value for every method (issue 18, equal budgets).
    """
    key = TOP_K_KEYS[name]
    if key in table:
        raise ConfigError(f"[{name}] {key} is set for every memory method by [memory] top_k "
                          f"(one budget for all), got [{name}] {key} = {table[key]!r}; set [memory] top_k instead")
    return {**table, key: budget.top_k}


@codec.data
@dataclass(frozen=True)
class AdapterConfig:
    """How a memory is queried from ToT: per episode (the puzzle, default) or per step (the state)."""

    per_step: bool = False

    def __post_init__(self):
        check(isinstance(self.per_step, bool), f"per_step must be true or false, got {self.per_step!r}")


def puzzle_text(puzzle: Sequence[int]) -> str:
    """The task text of a puzzle: its numbers as given, space-separated (``"4 9 10 13"``)."""
    return " ".join(str(int(x)) for x in puzzle)


def attempt_text(output: str) -> str:
    """One final output (step lines + answer line) as a single line, steps joined by ``"; "``."""
    return "; ".join(line.strip() for line in str(output).splitlines() if line.strip())


def trace_outcome(trace: EpisodeTrace, success_reward: float = 1.0, failure_reward: float = -1.0) -> Outcome:
    """The task-agnostic :class:`Outcome` of a finished ToT episode."""
    attempts = tuple(Attempt(attempt_text(o), bool(v)) for o, v in zip(trace.outputs, trace.verdicts))
    retrieved = tuple(dict.fromkeys(int(i) for i in trace.retrieved))  # unique, first-seen order
    return Outcome(
        key=trace.episode_key,
        seed=int(trace.seed),
        task=puzzle_text(trace.puzzle),
        attempts=attempts,
        success=bool(trace.success),
        reward=success_reward if trace.success else failure_reward,
        retrieved=retrieved,
    )


class BaselineReader:
    """The hooks' read-only side: memory retrieval into the experience slot, outcomes into updates."""

    def __init__(self, memory_reader, adapter: AdapterConfig, budget: MemoryBudget | None = None):
        self.memory_reader = memory_reader
        self.adapter = adapter
        self.budget = budget or MemoryBudget()
        self._cache: dict[str, list[Hit]] = {}
        self._reported: set[str] = set()

    def _task(self, q: StepQuery) -> str:
        return q.state if self.adapter.per_step else puzzle_text(q.puzzle)

    def retrieve(self, queries: Sequence[StepQuery], llm: LLMBackend) -> list[Retrieval]:
        first: dict[str, StepQuery] = {}
        for q in queries:
            if q.phase == PHASE_PROPOSE:
                first.setdefault(self._task(q), q)
        todo = [t for t in first if t not in self._cache]
        if todo:
            if getattr(self.memory_reader, "retrieves_with_llm", False):  # ReMe: LLM rerank + rewrite, counted per episode
                found = self.memory_reader.retrieve(todo, llm=llm, episodes=[first[t].episode_key for t in todo],
                                                    seeds=[first[t].seed for t in todo])
            else:
                found = self.memory_reader.retrieve(todo)
            for task, hits in zip(todo, found):
                self._cache[task] = hits
        out = []
        for q in queries:
            if q.phase != PHASE_PROPOSE:
                out.append(EMPTY)
                continue
            hits = self._cache[self._task(q)]
            text = self._fit(hits, self.budget.max_experience_tokens)
            report = self.adapter.per_step or q.episode_key not in self._reported
            self._reported.add(q.episode_key)
            ids = tuple(h.id for h in hits) if report else ()
            refit = (lambda limit, hits=hits: self._fit(hits, limit)) if hits else None
            out.append(Retrieval(experience=text, experience_ids=ids, refit=refit) if (text or ids) else EMPTY)
        return out

    def _fit(self, hits: Sequence[Hit], limit: int) -> str:
        """The memory's block for ``hits`` (best first) in at most ``limit`` tokens: least relevant dropped first."""
        if not hits:
            return ""
        fmt = self.memory_reader.format
        return fit_items(hits, lambda hs: fmt(hs) if hs else "", limit)[0]

    def observe(self, traces: Sequence[EpisodeTrace], llm: LLMBackend) -> list[Updates]:
        if not traces:
            return []
        outcomes = [trace_outcome(t) for t in traces]
        return [dict(u) for u in self.memory_reader.observe(outcomes, llm)]


class BaselineHooks:
    """:class:`~engine.game24.hooks.ExperienceHooks` over one task-agnostic baseline memory."""

    def __init__(self, memory, adapter: AdapterConfig | None = None, name: str | None = None,
                 budget: MemoryBudget | None = None):
        self.memory = memory
        self.adapter = adapter or AdapterConfig()
        self.name = name or memory.name
        self.budget = budget or MemoryBudget()

    def snapshot(self) -> dict[str, np.ndarray]:
        return self.memory.snapshot()

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> BaselineReader:
        return BaselineReader(self.memory.reader(snapshot), self.adapter, self.budget)

    def apply(self, updates: Sequence[tuple[int, Updates]]) -> None:
        ordered = sorted(updates, key=lambda item: item[0])
        self.memory.apply([u for _, u in ordered])


def _default_embedder():
    from engine.embed import EmbedConfig, make_embedder

    return make_embedder(EmbedConfig())


def make_baseline_hooks(name: str, table: Mapping[str, Any] | None = None, *, embedder=None,
                        budget: MemoryBudget | None = None) -> BaselineHooks:
    """Hooks for baseline ``name`` from its TOML table (memory keys plus ``per_step``).

    ``embedder`` is any :class:`engine.embed.Embedder` (default: ``[embed]``'s
    default, the hashing embedder); give every method of a comparison the same one.
    ``budget`` is the run's ``[memory]`` (items per prompt, experience token cap), the same for all.
    """
    if name not in BASELINES:
        raise ConfigError(f"unknown baseline {name!r}; valid baselines: {', '.join(sorted(BASELINES))}")
    budget = budget or MemoryBudget()
    table = dict(table or {})
    adapter = from_dict(AdapterConfig, {"per_step": table.pop("per_step")} if "per_step" in table else {}, name)
    config_cls, memory_cls = BASELINES[name]()
    config = from_dict(config_cls, with_budget(name, table, budget), name)
    memory = memory_cls(config, embedder=embedder if embedder is not None else _default_embedder())
    return BaselineHooks(memory, adapter, name, budget)


def make_baseline_method(
    name: str,
    table: Mapping[str, Any] | None = None,
    *,
    embedder=None,
    tot_config=None,
    learn_phases: Sequence[str] = ("warmup", "test"),
    budget: MemoryBudget | None = None,
):
    """A :class:`~engine.game24.tot.ToTMethod` named ``name`` running ToT with baseline ``name``'s memory."""
    from engine.game24.tot import ToTMethod

    hooks = make_baseline_hooks(name, table, embedder=embedder, budget=budget)
    return ToTMethod(name=name, hooks=hooks, config=tot_config, learn_phases=learn_phases)
