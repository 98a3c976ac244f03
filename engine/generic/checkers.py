"""Answer checkers of the generic task: ``exact``, ``numeric`` or a Python function named ``"module:attr"``.

A checker is ``check(prediction: str, answer: str) -> bool``. ``exact``: equal
after stripping whitespace (the seed's ``_validate_solution``:
``solution.strip() == ground_truth.strip()``); ``numeric``: both parse as
numbers and ``|p - a| <= rel_tol * max(1, |a|)``; anything else is loaded with
:func:`engine.config.load_named` (it must be importable where the workers run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from engine.config import check, load_named


def exact(prediction: str, answer: str) -> bool:
    return str(prediction).strip() == str(answer).strip()


def numeric(prediction: str, answer: str, rel_tol: float = 1e-6) -> bool:
    try:
        p, a = float(str(prediction).strip().replace(",", "")), float(str(answer).strip().replace(",", ""))
    except ValueError:
        return False
    return math.isfinite(p) and abs(p - a) <= rel_tol * max(1.0, abs(a))


@dataclass(frozen=True)
class CheckerConfig:
    """``[checker]``: ``kind`` = "exact" | "numeric" | "module:attr"; ``rel_tol`` for numeric."""

    kind: str = "exact"
    rel_tol: float = 1e-6

    def __post_init__(self):
        check(self.rel_tol >= 0.0, f"checker.rel_tol must be >= 0, got {self.rel_tol}")
        make_checker(self)  # a name that does not load fails at parse time


def make_checker(cfg: CheckerConfig):
    if cfg.kind == "exact":
        return exact
    if cfg.kind == "numeric":
        return partial(numeric, rel_tol=cfg.rel_tol)
    fn = load_named(cfg.kind, "checker.kind", 'exact, numeric or "module:attr"')
    check(callable(fn), f"checker.kind {cfg.kind!r} must name a function check(prediction, answer) -> bool")
    return fn
