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
    return tuple(sorted(Fraction(x) for x in xs))


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


def apply_step(branch: Branch, line: str) -> Branch | None:
    """The branch after step ``line``, or None if the line is malformed or wrong in any way."""
    parsed = parse_step_line(line)
    if parsed is None:
        return None
    a, op, b, c, left = parsed
    if op not in _OPS:
        return None
    value = _OPS[op](a, b)
    if value is None or value != c:
        return None
    nums = list(branch.numbers)
    exprs = list(branch.exprs)
    picked = []
    for operand in (a, b):
        try:
            i = nums.index(operand)
        except ValueError:
            return None
        picked.append(exprs[i])
        del nums[i], exprs[i]
    nums.append(c)
    exprs.append(f"({picked[0]} {op} {picked[1]})")
    if canonical_numbers(left) != canonical_numbers(nums):
        return None
    order = sorted(range(len(nums)), key=lambda i: nums[i])
    return Branch(
        tuple(nums[i] for i in order),
        tuple(exprs[i] for i in order),
        branch.lines + (line.strip(),),
    )


def apply_steps(branch: Branch, lines: Sequence[str]) -> Branch | None:
    """Apply several step lines in order; None as soon as one fails."""
    for line in lines:
        branch = apply_step(branch, line)
        if branch is None:
            return None
    return branch


def step_line(a: Fraction, op: str, b: Fraction, rest: Sequence[Fraction]) -> str | None:
    """Write ``a op b = c (left: ...)`` for exact operands, or None (division by zero)."""
    c = _OPS[op](a, b)
    if c is None:
        return None
    left = canonical_numbers(list(rest) + [c])
    return f"{format_number(a)} {op} {format_number(b)} = {format_number(c)} (left: {format_numbers(left)})"
