"""What every baseline memory shares: task-agnostic records, text arrays, scoring helpers.

The four baseline memories (Mem0, MemRL, ReMe, FLEX) are task-agnostic: text in,
text out. A task adapter (Game of 24 in :mod:`engine.game24.baseline_methods`,
news in the finance task) turns its episodes into

* a **task text** (the retrieval query, e.g. ``"4 9 10 13"``), and
* an :class:`Outcome` once the episode is over: the task text, the attempts
  (trajectory texts with their verdicts), the ids of the memories that were put
  in the prompt, and the episode's success.

Every memory follows the round contract of :mod:`engine.rounds`:

* ``memory.snapshot() -> dict[str, np.ndarray]``: everything retrieval needs;
* ``memory.reader(snapshot)``: a read-only view with ``retrieve(tasks)`` and
  ``observe(outcomes, llm) -> list[dict[str, np.ndarray]]`` (extraction and
  reflection prompts go to the LLM as ONE batched call; nothing is mutated);
* ``memory.apply(updates)``: the round's updates, in episode order, exactly once.

Extraction modes (``extraction`` config key):

* ``"llm"``: the memory's own extraction / reflection prompt goes to the LLM;
* ``"rule"``: a deterministic, rule-based extraction (templates over the
  outcome's texts). It is what runs under the **simulated** backend, whose
  task policy only understands its task's prompts; every memory written this
  way carries ``source = "rule"`` and the docs label such runs as simulated;
* ``"auto"``: ``"rule"`` when the backend cannot answer a memory's own prompts
  (its capability :func:`engine.llm.base.answers_any_prompt` is False: a
  simulated policy), else ``"llm"``. The backend's name is never read.
  (The Game-of-24 configuration sets ``"llm"`` for Mem0, MemRL and ReMe: its
  simulated policy answers their prompts through :mod:`engine.baselines.simulated`.)

A completion that cannot be parsed falls back to the rule for that outcome
(``source = "rule-fallback"``), so a small model never breaks a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from engine import codec
from engine.errors import InputError
from engine.llm.base import answers_any_prompt
from engine.llm.structured import first_json_value

EXTRACTION_MODES = ("auto", "llm", "rule")


@codec.data
@dataclass(frozen=True)
class Attempt:
    """One attempt at a task: what the agent did, as text, and whether it succeeded."""

    text: str
    success: bool


@codec.data
@dataclass(frozen=True)
class Outcome:
    """A finished episode as a memory sees it (task-agnostic).

    ``key`` goes into ``Request.episode`` for LLM calls made on the episode's
    behalf; ``seed`` seeds them. ``retrieved`` are the ids of the memories put in
    the episode's prompts; ``attempts`` are best first. ``reward`` is the
    environment's scalar feedback (Game of 24: +1 solved, -1 not).
    """

    key: str
    seed: int
    task: str
    attempts: tuple[Attempt, ...]
    success: bool
    reward: float
    retrieved: tuple[int, ...] = ()
    domain: str = ""  # the problem's domain where a task has several (FLEX filters by it); "" = the memory's
    ground_truth: str = ""  # the reference answer where the task has one (FLEX's failure reflection)

    def __post_init__(self):
        if not isinstance(self.task, str) or not self.task.strip():
            raise InputError(f"Outcome.task must be a non-empty string, got {self.task!r}")
        if not np.isfinite(self.reward):
            raise InputError(f"Outcome.reward must be finite, got {self.reward!r}")
        object.__setattr__(self, "attempts", tuple(self.attempts))
        object.__setattr__(self, "retrieved", tuple(int(i) for i in self.retrieved))

    @property
    def successes(self) -> list[Attempt]:
        return [a for a in self.attempts if a.success]

    @property
    def failures(self) -> list[Attempt]:
        return [a for a in self.attempts if not a.success]


@codec.data
@dataclass(frozen=True)
class Hit:
    """One retrieved memory: its id, the text it contributes, its ranking score and extras."""

    id: int
    text: str
    score: float
    extra: dict[str, Any] = field(default_factory=dict)


def resolve_extraction(mode: str, llm) -> str:
    """``"llm"`` or ``"rule"`` for a configured ``mode`` and the backend at hand (``llm``, any wrapper)."""
    if mode not in EXTRACTION_MODES:
        raise InputError(f"extraction must be one of {', '.join(EXTRACTION_MODES)}, got {mode!r}")
    if isinstance(llm, str):
        raise InputError(f"resolve_extraction takes the backend, not a name, got {llm!r}")
    if mode == "auto":
        return "llm" if answers_any_prompt(llm) else "rule"
    return mode


# --- text arrays (snapshots and updates hold text as fixed-width unicode arrays) --------


def str_array(texts: Iterable[str]) -> np.ndarray:
    """``U[n]`` array of ``texts`` (``U1`` when empty, never a float array)."""
    texts = [str(t) for t in texts]
    return np.array(texts, dtype=str) if texts else np.zeros(0, dtype="U1")


def texts_of(arr: np.ndarray | None) -> list[str]:
    """Python strings back from a ``U``/``S``/``object`` array (missing key -> [])."""
    if arr is None:
        return []
    return [str(t) for t in np.asarray(arr).tolist()]


def one_line(text: str, limit: int = 400) -> str:
    """Collapse whitespace to single spaces and cut at ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- scoring -----------------------------------------------------------------------------


def cosine_scores(index: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``f4[q, n]`` dot products of unit rows ``queries f4[q, d]`` with ``index f4[n, d]``.

    One matrix-vector product per query, so a query's scores never depend on which
    other queries share the batch (a matrix-matrix product may block differently).
    """
    if index.shape[0] == 0:
        return np.zeros((queries.shape[0], 0), dtype=np.float32)
    if index.shape[1] != queries.shape[1]:
        raise InputError(f"embedding widths differ: index has {index.shape[1]}, queries have {queries.shape[1]}")
    out = np.empty((queries.shape[0], index.shape[0]), dtype=np.float32)
    for i in range(queries.shape[0]):
        out[i] = index @ queries[i]
    return out


def top_k(scores: np.ndarray, k: int, mask: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` largest ``scores f[n]`` (where ``mask``), best first, ties by lower index."""
    idx = np.arange(scores.shape[0]) if mask is None else np.flatnonzero(mask)
    if idx.size == 0 or k <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((idx, -scores[idx]))  # primary: score desc; tie: index asc
    return idx[order[:k]].astype(np.int64)


def zscore(x: np.ndarray) -> np.ndarray:
    """``(x - mean) / std`` over ``x f8[n]`` (population std); all zeros when std is 0 or n < 2."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2:
        return np.zeros_like(x)
    sd = x.std()
    if sd <= 1e-12:
        return np.zeros_like(x)
    return (x - x.mean()) / sd


# --- parsing LLM output --------------------------------------------------------------------

def parse_json(text: str) -> Any | None:
    """The first JSON value in ``text`` (inside a ```json fence or bare), or None; an array is tried before an
    object (:func:`engine.llm.structured.first_json_value`)."""
    return first_json_value(text, objects_first=False)


def first_text(texts: Sequence[str]) -> str:
    """The first completion text, or ``""`` when there is none."""
    return texts[0] if texts else ""


def observe_with(reader, outcomes: Sequence[Outcome], llm, extraction: str) -> list[dict]:
    """Shared observe(): build each outcome's requests, send them in ONE batch, parse into updates."""
    mode = resolve_extraction(extraction, llm)
    per = reader.requests(outcomes, mode)
    flat = [r for rs in per for r in rs]
    responses = llm.generate(flat) if flat else []
    completions, at = [], 0
    for rs in per:
        completions.append([responses[at + i].texts for i in range(len(rs))])
        at += len(rs)
    return reader.updates(outcomes, completions, mode)
