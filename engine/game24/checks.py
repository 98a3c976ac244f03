"""The exact checks ToT and ToT+ToE rely on, from the Game-of-24 core (:mod:`engine.game24`).

A step is accepted only if both the core verifier (:func:`engine.game24.verify_step`)
and the exact bookkeeping of :mod:`engine.game24.trajectory` (which also tracks
the expression behind each number) accept it; answers are checked by
:func:`engine.game24.verify_answer` (ToE eq. (A2)).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Sequence

from engine.game24 import state_key as _core_state_key
from engine.game24 import verify_answer as _core_verify_answer
from engine.game24 import verify_step as _core_verify_step
from engine.game24.trajectory import Branch, apply_step, canonical_numbers, step_line, transition


@lru_cache(maxsize=1 << 18)
def _core_step_ok(line: str, numbers: tuple) -> bool:
    """The core verifier's verdict on ``line`` from canonical ``numbers``.

    Fast path: a line that is exactly the canonical rendering (:func:`step_line`)
    of a step the exact bookkeeping accepts is accepted without re-parsing; the
    core verifier accepts every such rendering (tests/engine/game24/test_checks.py
    checks it for every legal step of sampled states). Any other line goes to the
    full verifier. Cuts the cost of a cache miss about 5x for well-formed lines.
    """
    got = transition(numbers, line)
    if got is not None:
        _, i, j, op, _ = got
        rest = [x for k, x in enumerate(numbers) if k != i and k != j]
        if line == step_line(numbers[i], op, numbers[j], rest):
            return True
    return bool(_core_verify_step(line, numbers).ok)


_ENUM = re.compile(r"^\s*(?:[-*\u2022]\s+|\d+\s*[.)]\s+|step\s*\d+\s*[:.)]\s*)", re.IGNORECASE)


def normalise_step(line: str) -> str:
    """A model's step line without list markup (``"1. "``, ``"- "``, ``"Step 2: "``) or surrounding spaces."""
    return _ENUM.sub("", line.strip(), count=1).strip()


def step_ok(branch: Branch, line: str) -> Branch | None:
    """The branch after ``line`` (list markup stripped) if the exact verifier accepts the step, else None.

    Both checks are pure functions of (state, line) and are memoized.
    """
    line = normalise_step(line)
    nxt = apply_step(branch, line)
    if nxt is None or not _core_step_ok(line.strip(), branch.numbers):
        return None
    return nxt


def answer_ok(puzzle: Sequence[int], text: str) -> bool:
    """Reward r_t of ToE eq. (A2): does the last answer line of ``text`` use the puzzle's numbers legally and equal 24?"""
    return bool(_core_verify_answer(text, tuple(puzzle)).ok)


def state_key(numbers: Sequence) -> int:
    """64-bit key of a canonical state (the core's kernel)."""
    return int(_core_state_key(canonical_numbers(numbers)))
