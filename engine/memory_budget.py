"""One memory budget for every memory method in every task: ``[memory] top_k`` and ``max_experience_tokens``.

Every memory method (Mem0, MemRL, ReMe, FLEX; ToE where it applies) gets the
same two limits, from the config's ``[memory]`` table (issue 18 item 2, "equal
budgets that fit the model"):

* ``top_k``: items a retrieval puts in one prompt (Mem0 ``top_k``, MemRL
  ``select_k``, ReMe ``top_k``, FLEX ``k``). 3: FLEX's deployment loop
  (seed 002 step 4, ``k=3``) and MemRL's ``rl_config.topk``; a method whose
  design fixes another value says so in its table's footnote.
* ``max_experience_tokens``: the token cap of the experience block of one
  prompt. An over-long block is **fitted**: the least relevant items (the end of
  a best-first list) are dropped until the block fits; the task text itself is
  never cut.

A prompt must also fit the backend's context window (:func:`context_window`:
``llm.context_window`` when set, else what the backend knows: the embedded
model's ``llm.local.context``, vLLM's ``max_model_len``). :func:`room` is the
experience budget that leaves room for the rest of the prompt and the answer;
:class:`FitStats` counts how often fitting dropped something, and the tables
report the mean experience tokens per prompt of every row.

Tokens are counted by the backend's own tokenizer when it offers one
(``count_tokens(text)``), else by :func:`engine.llm.tokens.count_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

from engine import codec
from engine.config import check, from_dict
from engine.llm.base import through
from engine.llm.tokens import count_prompt_tokens

T = TypeVar("T")

DEFAULT_TOP_K = 3
DEFAULT_MAX_EXPERIENCE_TOKENS = 2048


@codec.data
@dataclass(frozen=True)
class MemoryBudget:
    """``[memory]``: retrieved items per prompt and the experience block's token cap, shared by every method."""

    top_k: int = DEFAULT_TOP_K
    max_experience_tokens: int = DEFAULT_MAX_EXPERIENCE_TOKENS

    def __post_init__(self):
        check(isinstance(self.top_k, int) and self.top_k >= 1, f"memory.top_k must be an integer >= 1, got {self.top_k!r}")
        check(isinstance(self.max_experience_tokens, int) and self.max_experience_tokens >= 16,
              f"memory.max_experience_tokens must be an integer >= 16, got {self.max_experience_tokens!r}")


def load_budget(config: Mapping[str, Any]) -> MemoryBudget:
    """The ``[memory]`` table of a whole config as a :class:`MemoryBudget` (defaults where it is absent)."""
    return from_dict(MemoryBudget, config.get("memory"), "memory")


# --- the backend's limits ------------------------------------------------------------------


def context_window(backend) -> int | None:
    """Tokens the backend's model accepts per request (prompt + completion), or None when unknown/unbounded."""
    value = through(backend, "context_window")
    if value is None:
        return None
    value = int(value)
    return value if value > 0 else None


def token_counter(backend) -> Callable[[str], int]:
    """How ``backend`` counts the tokens of a text: its ``count_tokens`` if it has one, else the estimate
    (looked up once; a caller counting many prompts keeps the function)."""
    counter = through(backend, "count_tokens") if backend is not None else None
    if callable(counter):
        return lambda text: int(counter(text))
    return count_prompt_tokens


def count_tokens_for(backend, text: str) -> int:
    """Tokens of ``text`` as ``backend`` counts them (its ``count_tokens`` if it has one, else the estimate)."""
    return token_counter(backend)(text)


def room(backend, rest_tokens: int, max_tokens: int, cap: int | None = None) -> int | None:
    """Experience tokens one prompt may hold: ``cap`` (None: no cap), less what the context window needs
    for the rest of the prompt (``rest_tokens``) and the answer (``max_tokens``).

    None when neither bounds it. Negative room (the prompt alone does not fit) is 0: the experience
    block is dropped, the task is kept.
    """
    ctx = context_window(backend)
    if ctx is None:
        return cap
    left = max(0, ctx - int(rest_tokens) - int(max_tokens))
    return left if cap is None else min(cap, left)


# --- fitting -------------------------------------------------------------------------------


@dataclass
class FitStats:
    """How often fitting dropped items: ``fitted`` blocks cut, ``dropped`` items left out, ``blocks`` seen."""

    blocks: int = 0
    fitted: int = 0
    dropped: int = 0

    def add(self, other: "FitStats") -> None:
        self.blocks += other.blocks
        self.fitted += other.fitted
        self.dropped += other.dropped

    def as_dict(self) -> dict[str, int]:
        return {"fit_blocks": self.blocks, "fit_cut": self.fitted, "fit_dropped_items": self.dropped}


def fit_items(items: Sequence[T], render: Callable[[Sequence[T]], str], limit: int,
              count: Callable[[str], int] = count_prompt_tokens, stats: FitStats | None = None) -> tuple[str, list[T]]:
    """The longest best-first prefix of ``items`` whose rendered block has at most ``limit`` tokens.

    ``items`` are ordered most relevant first; the least relevant are dropped first. Returns
    ``(rendered block, kept items)``; ``("", [])`` when not even one item fits. Binary search over
    the prefix length: a block's tokens grow with the items it holds.
    """
    items = list(items)
    if stats is not None and items:
        stats.blocks += 1
    if not items:
        return "", []
    text = render(items)
    if count(text) <= limit:
        return text, items
    lo, hi = 0, len(items) - 1  # the largest n in [lo, hi] whose block fits; n = 0 always fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(render(items[:mid])) <= limit:
            lo = mid
        else:
            hi = mid - 1
    if stats is not None:
        stats.fitted += 1
        stats.dropped += len(items) - lo
    kept = items[:lo]
    return (render(kept) if kept else ""), kept
