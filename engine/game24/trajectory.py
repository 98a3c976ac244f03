"""Exact bookkeeping of one ToT branch: remaining numbers and the expression behind each.

A branch of the Game-of-24 search is the multiset of numbers left plus, for
each, the expression over the puzzle's input numbers that produced it. Applying
a step line ``a op b = c (left: ...)`` checks it exactly (operands present,
arithmetic right, ``left:`` equal to what the step leaves, no division by zero)
and returns the new branch; a continuation that reaches ``24`` yields the
answer line ``Answer: expr = 24`` without asking a model.

Numbers are :class:`fractions.Fraction`; nothing here uses floating point.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from fractions import Fraction
from typing import Sequence

from engine.game24.prompts import format_number, format_numbers, parse_step_line

_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b if b != 0 else None,
}
TARGET = Fraction(24)


def canonical_numbers(xs: Sequence) -> tuple[Fraction, ...]:
    """The canonical form of a state: its numbers as reduced fractions, sorted."""
    return tuple(sorted(x if type(x) is Fraction else Fraction(x) for x in xs))


@dataclass(frozen=True)
class Branch:
    """Numbers left (canonical order), the expression of each, and the step lines taken."""

    numbers: tuple[Fraction, ...]
    exprs: tuple[str, ...]
    lines: tuple[str, ...] = ()

    @classmethod
    def start(cls, puzzle: Sequence[int]) -> "Branch":
        nums = canonical_numbers(puzzle)
        return cls(nums, tuple(format_number(x) for x in nums), ())

    @property
    def state(self) -> str:
        """The numbers left as prompt text, canonical order (``"4 6 10"``)."""
        return format_numbers(self.numbers)

    @property
    def reached_24(self) -> bool:
        return len(self.numbers) == 1 and self.numbers[0] == TARGET

    def answer_line(self) -> str | None:
        """``Answer: expr = 24`` once the branch is at 24, else None."""
        if not self.reached_24:
            return None
        expr = self.exprs[0]
        if expr.startswith("(") and _balanced(expr[1:-1]):
            expr = expr[1:-1]
        return f"Answer: {expr} = 24"


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


@lru_cache(maxsize=1 << 18)
def transition(numbers: tuple[Fraction, ...], line: str) -> tuple[tuple[Fraction, ...], int, int, str, tuple[int, ...]] | None:
    """Exact check of step ``line`` from canonical ``numbers`` (memoized: a pure function).

    Returns ``(new_numbers, i, j, op, order)``: the canonical numbers left, the
    positions of the operands ``a`` and ``b`` in ``numbers``, the operator, and
    for each new position the old position it came from (-1 for the result);
    None when the line is malformed or wrong in any way.
    """
    parsed = parse_step_line(line)
    if parsed is None:
        return None
    a, op, b, c, left = parsed
    if op not in _OPS:
        return None
    value = _OPS[op](a, b)
    if value is None or value != c:
        return None
    pos = list(range(len(numbers)))
    nums = list(numbers)
    picked = []
    for operand in (a, b):
        try:
            k = nums.index(operand)
        except ValueError:
            return None
        picked.append(pos[k])
        del nums[k], pos[k]
    nums.append(c)
    pos.append(-1)
    if canonical_numbers(left) != canonical_numbers(nums):
        return None
    order = sorted(range(len(nums)), key=lambda k: nums[k])
    return tuple(nums[k] for k in order), picked[0], picked[1], op, tuple(pos[k] for k in order)


def apply_step(branch: Branch, line: str) -> Branch | None:
    """The branch after step ``line``, or None if the line is malformed or wrong in any way."""
    line = line.strip()
    got = transition(branch.numbers, line)
    if got is None:
        return None
    new_numbers, i, j, op, order = got
    combined = f"({branch.exprs[i]} {op} {branch.exprs[j]})"
    exprs = tuple(combined if k < 0 else branch.exprs[k] for k in order)
    return Branch(new_numbers, exprs, branch.lines + (line,))


def step_line(a: Fraction, op: str, b: Fraction, rest: Sequence[Fraction]) -> str | None:
    """Write ``a op b = c (left: ...)`` for exact operands, or None (division by zero)."""
    c = _OPS[op](a, b)
    if c is None:
        return None
    left = canonical_numbers(list(rest) + [c])
    return f"{format_number(a)} {op} {format_number(b)} = {format_number(c)} (left: {format_numbers(left)})"
