"""Exact Game-of-24 solving on top of the compiled kernels.

:class:`SolverMemo` owns the compiled memo table (kernels.game24_solver) and
grows it between roots, so every call in a process shares the work done for
earlier states: solving all 1,820 multisets memoises about 9,200 states once.
States whose values leave the kernels' int64 range (or whose compiled search
met an overflow and found nothing) are answered by an exact Fraction search.

Public helpers take 1..4 numbers as ints, Fractions or numeric text.
"""

from __future__ import annotations

import threading
from array import array
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from typing import Iterable, Sequence

import numpy as np

from engine.errors import InputError
from engine.game24.rational import (
    INT64_SAFE,
    fits_int64,
    format_fraction,
    to_fractions,
    value_order,
)
from kernels import game24_solver as ks
from kernels import game24_state as kst

TARGET = Fraction(24)
SYMBOLS = ("+", "-", "*", "/")  # kernel symbol codes SYM_ADD..SYM_DIV


@dataclass(frozen=True)
class Step:
    """One move ``x op y = result`` of a solution, with exact values."""

    x: Fraction
    op: str
    y: Fraction
    result: Fraction

    def text(self) -> str:
        return f"{format_fraction(self.x)} {self.op} {format_fraction(self.y)} = {format_fraction(self.result)}"


def _state(numbers, name: str = "numbers") -> tuple[Fraction, ...]:
    values = to_fractions(numbers, name)
    if not 1 <= len(values) <= kst.WIDTH:
        raise InputError(f"{name} must hold 1 to {kst.WIDTH} numbers, got {len(values)}: {list(numbers)!r}")
    return values


def canonical_pairs(values: Sequence[Fraction]) -> tuple[tuple[int, int], ...]:
    """The kernels' canonical form: reduced (numerator, denominator) pairs, sorted."""
    return tuple(sorted((v.numerator, v.denominator) for v in values))


def apply(x: Fraction, op: str, y: Fraction) -> Fraction | None:
    """Exact ``x op y``; None for division by zero."""
    if op == "+":
        return x + y
    if op == "-":
        return x - y
    if op == "*":
        return x * y
    if op == "/":
        return None if y == 0 else x / y
    raise InputError(f"op must be one of + - * /, got {op!r}")


class SolverMemo:
    """A growable compiled memo of solved canonical states (see kernels.game24_solver)."""

    def __init__(self, capacity: int = 1 << 16):
        if capacity < 1024 or capacity & (capacity - 1):
            raise InputError(f"capacity must be a power of two >= 1024, got {capacity}")
        self._alloc(capacity)
        self.lock = threading.Lock()

    def _alloc(self, cap: int) -> None:
        self.t_used = np.zeros(cap, np.uint8)
        self.t_key = np.zeros(cap, np.int64)
        self.t_num = np.zeros((cap, kst.WIDTH), np.int64)
        self.t_den = np.ones((cap, kst.WIDTH), np.int64)
        self.t_size = np.zeros(cap, np.int64)
        self.t_status = np.zeros(cap, np.int8)
        self.t_move = np.full(cap, -1, np.int64)
        self.meta = np.zeros(2, np.int64)

    @property
    def capacity(self) -> int:
        return int(self.t_key.shape[0])

    @property
    def size(self) -> int:
        """Number of memoised states (2..4 numbers)."""
        return int(self.meta[0])

    def tables(self):
        return (self.t_used, self.t_key, self.t_num, self.t_den, self.t_size, self.t_status, self.t_move)

    def _max_used(self) -> int:
        return self.capacity // 2  # load factor <= 1/2

    def grow(self) -> None:
        old = self.tables()
        meta = self.meta.copy()
        self._alloc(self.capacity * 4)
        self.meta[:] = meta
        ks.rehash(*old, *self.tables())

    def solve_canonical(self, num: np.ndarray, den: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Status (kernels.game24_solver SOLVABLE/UNSOLVABLE/UNKNOWN) of canonical rows i8[b, 4]."""
        status = np.zeros(size.shape[0], np.int8)
        with self.lock:
            start = 0
            while start < size.shape[0]:
                while self.size + ks.MAX_NEW_PER_ROOT > self._max_used():
                    self.grow()
                start = ks.solve_batch(num, den, size, start, self._max_used(), *self.tables(), self.meta, status)
        return status

    def steps_canonical(self, num, den, size):
        """Solution steps of solvable canonical rows: (i8[b, 3, 7], count i8[b])."""
        steps = np.zeros((size.shape[0], 3, 7), np.int64)
        count = np.zeros(size.shape[0], np.int64)
        with self.lock:
            ks.extract_batch(num, den, size, *self.tables(), steps, count)
        return steps, count


_MEMO: SolverMemo | None = None


def shared_memo() -> SolverMemo:
    """The process-wide memo every public helper uses."""
    global _MEMO
    if _MEMO is None:
        _MEMO = SolverMemo()
    return _MEMO


def _pack_fast(states: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Flat ``(num i8[m], den i8[m], size i8[b])`` of states of Fractions and ints, or None.

    The fast door of :func:`state_keys` and the solver: Fractions' slots and ints' own
    numerator/denominator are read in C-level loops into ``array('q')`` buffers (no Fraction
    is built). None when anything else is there (text, NumPy scalars, bool, floats), a state
    is empty or longer than 4, or a value leaves the kernels' range: the caller then takes the
    checked path, which converts each number and names what is wrong.
    """
    try:
        size = array("q", map(len, states))
        try:  # every number a Fraction: read its slots (the common case inside the engine)
            num = array("q", [v._numerator for s in states for v in s])
            den = array("q", [v._denominator for s in states for v in s])
        except AttributeError:  # ints among them: both types have numerator/denominator
            flat = list(chain.from_iterable(states))
            if not set(map(type, flat)) <= _EXACT_TYPES:
                return None
            num = array("q", [v.numerator for v in flat])
            den = array("q", [v.denominator for v in flat])
    except (TypeError, OverflowError):  # unsized states, non-integer slots, values beyond int64
        return None
    size_a = np.frombuffer(size, np.int64)
    num_a = np.frombuffer(num, np.int64)
    den_a = np.frombuffer(den, np.int64)
    if not size_a.size or not num_a.size:
        return None
    if (size_a.min() < 1 or size_a.max() > kst.WIDTH or den_a.min() < 1 or den_a.max() >= INT64_SAFE
            or num_a.max() >= INT64_SAFE or num_a.min() <= -INT64_SAFE):
        return None
    return num_a, den_a, size_a


_EXACT_TYPES = frozenset((int, Fraction))


def _canonical(num, den, size):
    cn = np.empty_like(num)
    cd = np.empty_like(den)
    key = np.empty(size.shape[0], np.int64)
    kst.canonical_keys(num, den, size, cn, cd, key)
    return cn, cd, size, key


def _canonical_flat(flat_num, flat_den, size):
    num = np.empty((size.shape[0], kst.WIDTH), np.int64)
    den = np.empty((size.shape[0], kst.WIDTH), np.int64)
    kst.pack_rows(flat_num, flat_den, size, num, den)
    return _canonical(num, den, size)


def canonicalize_batch(states: Sequence[Sequence[Fraction]]):
    """Pack and canonicalise Fraction states: (num i8[b, 4], den i8[b, 4], size i8[b], key i8[b])."""
    b = len(states)
    fast = _pack_fast(states) if b else None
    if fast is not None:
        return _canonical_flat(*fast)
    num = np.zeros((b, kst.WIDTH), np.int64)
    den = np.ones((b, kst.WIDTH), np.int64)
    size = np.zeros(b, np.int64)
    for r, state in enumerate(states):
        for c, v in enumerate(state):
            num[r, c] = v.numerator
            den[r, c] = v.denominator
        size[r] = len(state)
    return _canonical(num, den, size)


def canonical_state(numbers) -> tuple[Fraction, ...]:
    """The state as a canonical tuple of Fractions (sorted by value).

    Two inputs are the same Game-of-24 state exactly when their canonical states
    are equal: ``canonical_state([Fraction(26, 6), 4]) == canonical_state(["4", "13/3"])``.
    """
    return value_order(_state(numbers))


def state_key(numbers) -> int:
    """The 64-bit key (a signed int64 as a Python int) of the state's canonical form.

    Computed by the compiled kernel; equal states always get equal keys. Keys
    index tables only: compare :func:`canonical_state` to decide equality.
    """
    values = _state(numbers)
    if not fits_int64(values):
        raise InputError(f"numbers {list(map(format_fraction, values))} exceed the int64 key range (|x| < 2**62)")
    return int(canonicalize_batch([values])[3][0])


def state_keys(states: Iterable) -> np.ndarray:
    """Keys i8[b] of many states at once (one kernel call).

    States of Fractions and ints take a vectorised door (no per-number conversion, see
    :func:`_pack_fast`); anything else (text, NumPy integers) is converted number by number,
    and a bad state raises :class:`InputError` naming its index.
    """
    if not isinstance(states, (list, tuple)):
        states = list(states)
    if not states:
        return np.zeros(0, np.int64)
    fast = _pack_fast(states)
    if fast is not None:
        return _canonical_flat(*fast)[3]
    packed = [_state(s, f"states[{i}]") for i, s in enumerate(states)]
    for i, s in enumerate(packed):
        if not fits_int64(s):
            raise InputError(f"states[{i}] exceeds the int64 key range (|x| < 2**62)")
    return canonicalize_batch(packed)[3]


# ---------------------------------------------------------------- exact Python fallback


def _py_steps(values: tuple[Fraction, ...], memo: dict) -> tuple[Step, ...] | None:
    """Exact Fraction search used when the int64 kernels cannot represent a state."""
    if len(values) == 1:
        return () if values[0] == TARGET else None
    key = tuple(sorted(values))
    if key in memo:
        return memo[key]
    found = None
    n = len(key)
    for i in range(n):
        for j in range(i + 1, n):
            rest = key[:i] + key[i + 1 : j] + key[j + 1 :]
            a, b = key[i], key[j]
            for x, op, y in ((a, "+", b), (a, "-", b), (b, "-", a), (a, "*", b), (a, "/", b), (b, "/", a)):
                r = apply(x, op, y)
                if r is None:
                    continue
                tail = _py_steps(rest + (r,), memo)
                if tail is not None:
                    found = (Step(x, op, y, r),) + tail
                    break
            if found is not None:
                break
        if found is not None:
            break
    memo[key] = found
    return found


_PY_MEMO: dict = {}


# ---------------------------------------------------------------- public solving API


def solve_steps_many(states: Sequence) -> list[tuple[Step, ...] | None]:
    """Solution steps for many states in one compiled batch (None where unsolvable)."""
    values = [_state(s, f"states[{i}]") for i, s in enumerate(states)]
    out: list[tuple[Step, ...] | None] = [None] * len(values)
    fast = [i for i, v in enumerate(values) if fits_int64(v)]
    slow = [i for i, v in enumerate(values) if not fits_int64(v)]
    if fast:
        memo = shared_memo()
        num, den, size, _ = canonicalize_batch([values[i] for i in fast])
        status = memo.solve_canonical(num, den, size)
        steps, count = memo.steps_canonical(num, den, size)
        for r, i in enumerate(fast):
            if status[r] == ks.SOLVABLE:
                if count[r] < 0:  # pragma: no cover - would be a kernel bug
                    raise RuntimeError(f"memo lost the solution path of {values[i]}")
                out[i] = tuple(
                    Step(
                        Fraction(int(steps[r, k, 0]), int(steps[r, k, 1])),
                        SYMBOLS[int(steps[r, k, 2])],
                        Fraction(int(steps[r, k, 3]), int(steps[r, k, 4])),
                        Fraction(int(steps[r, k, 5]), int(steps[r, k, 6])),
                    )
                    for k in range(int(count[r]))
                )
            elif status[r] == ks.UNKNOWN:
                slow.append(i)
    for i in slow:
        out[i] = _py_steps(tuple(sorted(values[i])), _PY_MEMO)
    return out


def solve_steps(numbers) -> tuple[Step, ...] | None:
    """One solution as exact steps (``()`` if the state is already ``[24]``), or None."""
    return solve_steps_many([numbers])[0]


def is_solvable(numbers) -> bool:
    """Whether 24 is reachable from the 1..4 numbers with + - * / (exact)."""
    return solve_steps(numbers) is not None


def is_solvable_many(states: Sequence) -> np.ndarray:
    """bool[b]: :func:`is_solvable` for each state, one compiled batch."""
    return np.array([s is not None for s in solve_steps_many(states)], dtype=bool)


def steps_to_expression(numbers, steps: Sequence[Step]) -> str:
    """Build one infix expression from a step sequence starting at ``numbers``.

    Each operand is matched to a not-yet-used item of equal value; sub-results
    are parenthesised, the outermost operation is not.
    """
    items: list[tuple[Fraction, str]] = [(v, format_fraction(v)) for v in _state(numbers)]
    for step in steps:
        exprs = []
        for operand in (step.x, step.y):
            for k, (v, e) in enumerate(items):
                if v == operand:
                    exprs.append(e)
                    del items[k]
                    break
            else:
                raise InputError(f"step {step.text()!r} uses {format_fraction(operand)} which is not left")
        items.append((step.result, f"({exprs[0]} {step.op} {exprs[1]})"))
    if len(items) != 1:
        raise InputError(f"steps leave {len(items)} numbers, expected 1")
    expr = items[0][1]
    if expr.startswith("(") and expr.endswith(")") and steps:
        expr = expr[1:-1]
    return expr


def step_lines(numbers, steps: Sequence[Step]) -> list[str]:
    """Tree-of-Thoughts step lines ``a op b = c (left: x y z)`` for a step sequence.

    The ``left:`` numbers are value-sorted, as :func:`canonical_state` orders them.
    """
    state = list(_state(numbers))
    lines = []
    for step in steps:
        for operand in (step.x, step.y):
            if operand not in state:
                raise InputError(f"step {step.text()!r} uses {format_fraction(operand)} which is not left")
            state.remove(operand)
        state.append(step.result)
        left = " ".join(format_fraction(v) for v in value_order(state))
        lines.append(f"{step.text()} (left: {left})")
    return lines


def solve(numbers) -> str | None:
    """One solution expression such as ``"(10 - 4) * (13 - 9)"``, or None.

    ``numbers`` are 1..4 ints/Fractions/numeric text; the expression uses each
    exactly once and evaluates exactly to 24.
    """
    steps = solve_steps(numbers)
    if steps is None:
        return None
    return steps_to_expression(numbers, steps)


def solve_many(states: Sequence) -> list[str | None]:
    """:func:`solve` for many states with one compiled batch."""
    all_steps = solve_steps_many(states)
    return [None if st is None else steps_to_expression(s, st) for s, st in zip(states, all_steps)]


def all_solutions(numbers, limit: int = 100) -> list[str]:
    """Up to ``limit`` distinct solution expressions (distinct as normalised text).

    Enumerates every move sequence whose child states the compiled memo says are
    solvable (so dead branches are pruned), building expressions with commutative
    operands ordered, so ``4 * 6`` and ``6 * 4`` count once.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InputError(f"limit must be a positive int, got {limit!r}")
    start = [(v, format_fraction(v), True) for v in _state(numbers)]
    found: list[str] = []
    seen: set[str] = set()

    def rec(items):
        if len(found) >= limit:
            return
        if len(items) == 1:
            if items[0][0] == TARGET:
                expr = items[0][1]
                if not items[0][2]:
                    expr = expr[1:-1]
                if expr not in seen:
                    seen.add(expr)
                    found.append(expr)
            return
        n = len(items)
        children = []
        for i in range(n):
            for j in range(i + 1, n):
                rest = items[:i] + items[i + 1 : j] + items[j + 1 :]
                (a, ea, _), (b, eb, _) = items[i], items[j]
                cands = [(a + b, "+", ea, eb), (a * b, "*", ea, eb), (a - b, "-", ea, eb), (b - a, "-", eb, ea)]
                if b != 0:
                    cands.append((a / b, "/", ea, eb))
                if a != 0:
                    cands.append((b / a, "/", eb, ea))
                for r, op, e1, e2 in cands:
                    if op in "+*" and e2 < e1:
                        e1, e2 = e2, e1
                    children.append(rest + [(r, f"({e1} {op} {e2})", False)])
        ok = is_solvable_many([[c[0] for c in ch] for ch in children]) if children else []
        for ch, good in zip(children, ok):
            if good:
                rec(ch)

    rec(start)
    return found
