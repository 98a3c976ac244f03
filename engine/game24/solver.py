"""Exact Game-of-24 solving on top of the compiled kernels.

:class:`SolverMemo` owns the compiled memo table (kernels.game24_solver) and
grows it between roots, so every call in a process shares the work done for
earlier states: solving all 1,820 multisets memoises about 9,200 states once.
States whose values leave the kernels' int64 range (or whose compiled search
met an overflow and found nothing) are answered by an exact Fraction search.

Public helpers take 1..4 numbers as ints, Fractions or numeric text.
"""

from __future__ import annotations

import hashlib
import io
import threading
import warnings
from array import array
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain, combinations_with_replacement
from pathlib import Path
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
from kernels import pyobj as kpy

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


    def seed_arrays(self) -> dict[str, np.ndarray]:
        """The memoised states as compact arrays (the format of :data:`SEED_PATH`)."""
        used = self.t_used.astype(bool)
        order = np.argsort(self.t_key[used], kind="stable")  # independent of the table's capacity
        return {"num": self.t_num[used][order].astype(np.int16), "den": self.t_den[used][order].astype(np.int16),
                "size": self.t_size[used][order].astype(np.int8), "status": self.t_status[used][order],
                "move": self.t_move[used][order].astype(np.int16)}

    def load_seed(self, arrays: dict[str, np.ndarray]) -> None:
        """Insert solved states (:meth:`seed_arrays`' format) into this (empty) memo.

        The rows must be canonical, 3 or 4 numbers, each state once, statuses SOLVABLE or
        UNSOLVABLE and a move exactly where solvable; anything else raises :class:`InputError`
        and leaves the memo empty.
        """
        if self.size:
            raise InputError("a seed goes into an empty memo")
        try:
            num = np.asarray(arrays["num"]).astype(np.int64)
            den = np.asarray(arrays["den"]).astype(np.int64)
            size = np.asarray(arrays["size"]).astype(np.int64)
            status = np.asarray(arrays["status"]).astype(np.int8)
            move = np.asarray(arrays["move"]).astype(np.int64)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"solver seed: missing or non-numeric array ({exc})") from exc
        n = size.shape[0]
        if num.shape != (n, kst.WIDTH) or den.shape != (n, kst.WIDTH) or status.shape != (n,) or move.shape != (n,):
            raise InputError("solver seed: arrays of inconsistent shapes")
        if n and (size.min() < 3 or size.max() > kst.WIDTH or den.min() < 1
                  or not np.isin(status, (ks.SOLVABLE, ks.UNSOLVABLE)).all()
                  or ((move >= 0) != (status == ks.SOLVABLE)).any()):
            raise InputError("solver seed: a size, denominator, status or move out of its domain")
        cn, cd, _, key = _canonical(num, den, size)
        if not (np.array_equal(cn, num) and np.array_equal(cd, den)):
            raise InputError("solver seed: a row is not in canonical form")
        if np.unique(key).size != n:  # same keys are possible in principle; the seed is checked by state
            if len({(tuple(r), tuple(d)) for r, d in zip(num.tolist(), den.tolist())}) != n:
                raise InputError("solver seed: a state appears twice")
        while n > self._max_used():
            self._alloc(self.capacity * 4)
        ks.rehash(np.ones(n, np.uint8), key, num, den, size, status, move, *self.tables())
        self.meta[0] = n


SEED_PATH = Path(__file__).resolve().parent.parent / "data" / "game24" / "solver_memo.npz"
# sha256 of SEED_PATH; scripts/build_solver_seed.py rewrites the file and prints its digest
SEED_SHA256 = "b97603a93bb1aa6816e27eab2df8fce7b522e4e75cafc89c62e91abc5b7aba00"


def domain_memo() -> SolverMemo:
    """A memo holding every state the search of the 1,820 puzzles of 1..13 memoises, built now."""
    memo = SolverMemo()
    multisets = [[Fraction(v) for v in m] for m in combinations_with_replacement(range(1, 14), 4)]
    num, den, size, _ = canonicalize_batch(multisets)
    memo.solve_canonical(num, den, size)
    return memo


def _seeded_memo() -> SolverMemo:
    """A fresh memo holding the shipped seed (the puzzles' domain solved once, offline).

    The seed is a cache, not a source of truth: the same states, statuses and moves as a search
    from scratch (tests/kernels/test_solver_seed.py compares the shipped file with a fresh build).
    A missing file, a digest that differs from :data:`SEED_SHA256` or a failed check leaves the
    memo empty with a warning: answers are the same, only the first calls slower.
    """
    memo = SolverMemo()
    try:
        raw = SEED_PATH.read_bytes()
        if hashlib.sha256(raw).hexdigest() != SEED_SHA256:
            raise InputError(f"digest differs from the one recorded in {__name__}")
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            memo.load_seed({k: z[k] for k in z.files})
    except (OSError, ValueError, InputError) as exc:
        warnings.warn(f"{SEED_PATH}: solver seed not used ({exc}); the memo starts empty", stacklevel=3)
        return SolverMemo()
    return memo


_MEMO: SolverMemo | None = None


def shared_memo() -> SolverMemo:
    """The process-wide memo every public helper uses (seeded with the puzzles' domain)."""
    global _MEMO
    if _MEMO is None:
        _MEMO = _seeded_memo()
    return _MEMO


def _pack_fast(states: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Padded ``(num i8[b, 4], den i8[b, 4], size i8[b])`` of states of Fractions and ints, or None.

    The fast door of :func:`state_keys` and the solver. A list or tuple of tuples/lists is read
    by one compiled pass over the objects themselves (:func:`kernels.pyobj.read_states`, where
    this interpreter's layout verified at import); otherwise Fractions' slots and ints' own
    numerator/denominator are read in C-level loops into ``array('q')`` buffers (no Fraction
    is built). None when anything else is there (text, NumPy scalars, bool, floats), a state
    is empty or longer than 4, or a value leaves the kernels' range: the caller then takes the
    checked path, which converts each number and names what is wrong.
    """
    rows = kpy.read_states(states)
    if rows is not None:
        return rows
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
    out_num = np.empty((size_a.shape[0], kst.WIDTH), np.int64)
    out_den = np.empty((size_a.shape[0], kst.WIDTH), np.int64)
    kst.pack_rows(num_a, den_a, size_a, out_num, out_den)
    return out_num, out_den, size_a


_EXACT_TYPES = frozenset((int, Fraction))


def _canonical(num, den, size):
    cn = np.empty_like(num)
    cd = np.empty_like(den)
    key = np.empty(size.shape[0], np.int64)
    kst.canonical_keys(num, den, size, cn, cd, key)
    return cn, cd, size, key


def canonicalize_batch(states: Sequence[Sequence[Fraction]]):
    """Pack and canonicalise Fraction states: (num i8[b, 4], den i8[b, 4], size i8[b], key i8[b])."""
    b = len(states)
    fast = _pack_fast(states) if b else None
    if fast is not None:
        return _canonical(*fast)
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
        return _canonical(*fast)[3]
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
    """Solution steps for many states in one compiled batch (None where unsolvable).

    States of ints and Fractions within the kernels' range take the vectorised door
    (:func:`_pack_fast`); any other state is converted and checked number by number, and a bad
    one raises :class:`InputError` naming its index. The steps' Fractions are built once per
    distinct value of the batch (Fractions are immutable, so steps may share them).
    """
    if not isinstance(states, (list, tuple)):
        states = list(states)
    out: list[tuple[Step, ...] | None] = [None] * len(states)
    rows = _pack_fast(states) if states else None
    if rows is not None:
        fast, slow_values = list(range(len(states))), {}
        num, den, size, _ = _canonical(*rows)
    else:
        values = [_state(s, f"states[{i}]") for i, s in enumerate(states)]
        fast = [i for i, v in enumerate(values) if fits_int64(v)]
        slow_values = {i: v for i, v in enumerate(values) if not fits_int64(v)}
        if fast:
            num, den, size, _ = canonicalize_batch([values[i] for i in fast])
    if fast:
        memo = shared_memo()
        status = memo.solve_canonical(num, den, size).tolist()
        steps, count = memo.steps_canonical(num, den, size)
        steps, count = steps.tolist(), count.tolist()
        fractions: dict[tuple[int, int], Fraction] = {}

        def frac(n: int, d: int) -> Fraction:
            f = fractions.get((n, d))
            if f is None:
                f = fractions[(n, d)] = Fraction(n, d)
            return f

        for r, i in enumerate(fast):
            if status[r] == ks.SOLVABLE:
                if count[r] < 0:  # pragma: no cover - would be a kernel bug
                    raise RuntimeError(f"memo lost the solution path of {states[i]!r}")
                out[i] = tuple(Step(frac(x, xd), SYMBOLS[op], frac(y, yd), frac(z, zd))
                               for x, xd, op, y, yd, z, zd in steps[r][: count[r]])
            elif status[r] == ks.UNKNOWN:
                slow_values[i] = None
    for i, v in slow_values.items():
        out[i] = _py_steps(tuple(sorted(v if v is not None else _state(states[i], f"states[{i}]"))), _PY_MEMO)
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

