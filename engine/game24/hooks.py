"""Experience hooks: the one seam between the Tree-of-Thoughts procedure and an experience method.

ToT (:mod:`engine.game24.tot`) is the same breadth-first search for every method
on Game of 24; a method differs only in how it represents, retrieves and updates
experience (the ToE paper's fairness control, seed 000 "Compared methods").
Plain ToT uses :class:`NoExperience`; ToT+ToE (:mod:`engine.game24.toe_method`)
and the baselines (Mem0, MemRL, ReMe, FLEX in
:mod:`engine.game24.baseline_methods`) implement :class:`ExperienceHooks`.

Life cycle, fitted to the round contract of :mod:`engine.rounds`
-----------------------------------------------------------------

Main process, once per round::

    snap = hooks.snapshot()                      # dict[str, np.ndarray], read-only
    ...workers run the round's episodes...
    hooks.apply(updates)                         # [(episode_id, dict[str, np.ndarray])], id order

Worker, once per call of ``Method.run_episodes(snap, episodes, llm)``::

    reader = hooks.reader(snap)                  # read-only view over the snapshot arrays
    for each BFS step (all episodes of the call in lockstep):
        rets = reader.retrieve(queries, llm)     # one query per frontier state ("propose")
        ...one batched propose call...
        rets = reader.retrieve(queries, llm)     # one query per new candidate state ("value")
        ...one batched value call...
    upd = reader.observe(traces, llm)            # one trace per finished episode -> updates

Rules an implementation must keep
---------------------------------
* **Experience is read only from the snapshot.** ``snapshot()`` returns a dict of
  NumPy arrays (numeric, or fixed-width unicode ``U``/``object`` arrays of str for
  text). It must hold everything ``reader`` needs, because on the Ray executor
  the reader is built in another process from those arrays alone. The reader
  never mutates the hooks object nor the arrays (treat them as read-only; Ray
  maps them read-only).
* **Experience changes only in ``apply()``.** ``observe`` returns per-trace
  updates as ``dict[str, np.ndarray]`` (they travel in
  ``EpisodeResult.updates``); ``apply`` receives every update of the round,
  sorted by episode id, exactly once, and must produce the same experience
  whatever the worker split (so never depend on which traces shared an
  ``observe`` call). Counter updates (recall, hit) travel the same way.
* **Determinism.** Given the snapshot, a query and its ``seed``, ``retrieve``
  returns the same answer whatever other queries share the batch.
* **LLM calls made by hooks** (an LLM reranker, a reflection or extraction
  prompt) go through the ``llm`` argument, batched into ONE ``llm.generate``
  per ``retrieve``/``observe`` call, each :class:`~engine.llm.base.Request`
  with ``episode=query.episode_key`` (or ``trace.episode_key``) and a
  per-request seed derived from ``query.seed`` (use :func:`request_seed`), so
  they are counted in that episode's calls, samples and tokens.
* **Continuations are checked, never trusted.** ``Retrieval.continuations``
  are candidate step suffixes; when the method lets experience supply
  continuations, ToT checks them in order with the exact verifier and uses
  the first that legally reaches 24 from the query's state; those checked
  before it and rejected are reported in ``EpisodeTrace.rejected``.

Everything here is plain data; the concrete experience lives in the
implementation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from engine.llm.base import LLMBackend

Snapshot = Mapping[str, np.ndarray]
Updates = dict[str, np.ndarray]

PHASE_PROPOSE = "propose"  # a frontier state, before its propose (or answer) prompt is built
PHASE_VALUE = "value"  # a new candidate state, before its value prompt is built


@dataclass(frozen=True)
class StepQuery:
    """One state of one episode at which ToT asks for experience.

    ``step`` counts the BFS steps already taken (0: the four input numbers;
    3: the answer step, one number left). ``numbers`` is the canonical
    (sorted, exact) multiset the model's own ``left:`` text names (the numbers
    the next prompt is built on; ToT does not check them, so after an illegal
    step they may differ from the true ones); ``state`` is its text as written in the
    prompts (e.g. ``"4 6 10"``) and ``key`` its 64-bit canonical key
    (:func:`engine.game24.state_key`); equality of states must be decided on
    ``numbers``, never on ``key`` alone. ``history`` holds the step lines taken
    so far (``"a op b = c (left: ...)"``), oldest first.
    """

    episode_id: int
    episode_key: str  # put this in Request.episode for calls made on this episode's behalf
    seed: int  # the episode's seed; derive per-request seeds with request_seed(seed, ...)
    puzzle: tuple[int, ...]  # the four input numbers, as given
    step: int  # 0..3
    phase: str  # PHASE_PROPOSE | PHASE_VALUE
    numbers: tuple[Fraction, ...]
    state: str
    key: int
    history: tuple[str, ...] = ()
    stream_phase: str = "test"  # the Episode.phase: "warmup" | "test"


@dataclass(frozen=True)
class Retrieval:
    """What experience offers for one :class:`StepQuery`.

    * ``experience``: text for the prompt's experience slot (propose and answer
      prompts at PHASE_PROPOSE; ignored at PHASE_VALUE). ``""`` = no experience,
      the prompt is then exactly plain ToT's.
    * ``continuations``: candidate suffixes from this state, each a tuple of step
      lines ``"a op b = c (left: ...)"`` ending with ``left: 24``; ToT verifies
      each and, when the method is configured to let experience supply
      continuations, uses the first verified one instead of asking the LLM.
    * ``continuation_ids``: the experience id behind each continuation (same
      length as ``continuations``), reported back as used or rejected.
    * ``experience_ids``: every experience retrieved for this query (recall).
    * ``value``: if not ``None`` at PHASE_VALUE, the candidate's value is taken
      from experience (e.g. ToE: a verified suffix exists, so the state is
      "sure" for every sample) and no value request is sent for it.
    * ``refit``: ``refit(limit) -> str`` re-renders ``experience`` in at most ``limit``
      tokens by dropping its least relevant items (engine.memory_budget.fit_items);
      None: the block is all or nothing. ToT calls it when a prompt would not fit
      the backend's context window.
    """

    experience: str = ""
    continuations: tuple[tuple[str, ...], ...] = ()
    continuation_ids: tuple[int, ...] = ()
    experience_ids: tuple[int, ...] = ()
    value: float | None = None
    refit: Callable[[int], str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if len(self.continuations) != len(self.continuation_ids):
            raise ValueError(
                f"Retrieval.continuation_ids must have one id per continuation "
                f"({len(self.continuations)}), got {len(self.continuation_ids)}"
            )


EMPTY = Retrieval()


@dataclass(frozen=True)
class EpisodeTrace:
    """What one finished episode did, handed to :meth:`ExperienceReader.observe`.

    ``outputs`` are the final b trajectories (full text: step lines then the
    answer line), best first; ``verdicts[i]`` is the exact verifier's verdict on
    ``outputs[i]`` (reward r_t of ToE eq. (A2)). ``success`` = any verdict true;
    ``solution`` = the step lines and answer of the first verified output (empty
    if none). ``retrieved``/``used``/``rejected`` are experience ids: recalled as
    candidates, continuation actually used, continuation that failed the verifier.
    """

    episode_id: int
    episode_key: str
    seed: int
    puzzle: tuple[int, ...]
    stream_phase: str
    outputs: tuple[str, ...]
    verdicts: tuple[bool, ...]
    success: bool
    solution: tuple[str, ...] = ()
    retrieved: tuple[int, ...] = ()
    used: tuple[int, ...] = ()
    rejected: tuple[int, ...] = ()
    extra: Mapping[str, object] = field(default_factory=dict)


class ExperienceReader(Protocol):
    """Read-only view of one snapshot, used inside a worker."""

    def retrieve(self, queries: Sequence[StepQuery], llm: LLMBackend) -> list[Retrieval]:
        """One :class:`Retrieval` per query, in order (:data:`EMPTY` when nothing applies)."""
        ...

    def observe(self, traces: Sequence[EpisodeTrace], llm: LLMBackend) -> list[Updates]:
        """One update dict per trace, in order (``{}`` for none); nothing is mutated here."""
        ...


class ExperienceHooks(Protocol):
    """An experience method plugged into ToT. See the module docstring for the rules."""

    name: str

    def snapshot(self) -> dict[str, np.ndarray]: ...

    def reader(self, snapshot: Snapshot) -> ExperienceReader: ...

    def apply(self, updates: Sequence[tuple[int, Updates]]) -> None:
        """Apply a round's updates, ``(episode_id, updates)`` sorted by episode id, exactly once."""
        ...


class _NoExperienceReader:
    def retrieve(self, queries, llm):
        return [EMPTY] * len(queries)

    def observe(self, traces, llm):
        return [{} for _ in traces]


class NoExperience:
    """Plain ToT: no experience, no updates. Prompts are exactly ToT's."""

    name = "tot"

    def snapshot(self) -> dict[str, np.ndarray]:
        return {}

    def reader(self, snapshot: Snapshot) -> ExperienceReader:
        return _NoExperienceReader()

    def apply(self, updates) -> None:
        return None
