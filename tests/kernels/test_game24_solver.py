"""Compiled Game-of-24 search against a slow pure-Python Fraction reference."""

import ast
import itertools
import random
from collections import Counter
from fractions import Fraction
from functools import lru_cache

import pytest

from engine.game24 import all_solutions, is_solvable, solve, solve_many, solve_steps
from engine.game24.solver import SolverMemo, canonicalize_batch
from kernels import game24_solver as ks

# ---------------------------------------------------------------- independent reference


@lru_cache(maxsize=None)
def ref_solvable(values):
    """values: a sorted tuple of Fractions. Plain exhaustive search over pairs and ops."""
    if len(values) == 1:
        return values[0] == 24
    for i, j in itertools.combinations(range(len(values)), 2):
        a, b = values[i], values[j]
        rest = [values[k] for k in range(len(values)) if k not in (i, j)]
        results = [a + b, a - b, b - a, a * b]
        if b != 0:
            results.append(a / b)
        if a != 0:
            results.append(b / a)
        if any(ref_solvable(tuple(sorted(rest + [r]))) for r in results):
            return True
    return False


def ref_eval(expr):
    """Exact value and leaf numbers of an infix expression via the ast module."""
    leaves = []

    def ev(node):
        if isinstance(node, ast.BinOp):
            x, y = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return x + y
            if isinstance(node.op, ast.Sub):
                return x - y
            if isinstance(node.op, ast.Mult):
                return x * y
            if isinstance(node.op, ast.Div):
                return x / y
            raise AssertionError(f"operator {node.op}")
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            leaves.append(Fraction(node.value))
            return Fraction(node.value)
        raise AssertionError(f"unexpected node {ast.dump(node)}")

    value = ev(ast.parse(expr, mode="eval").body)
    return value, leaves


MULTISETS = list(itertools.combinations_with_replacement(range(1, 14), 4))


# ---------------------------------------------------------------- tests


def test_all_1820_multisets_match_reference_and_solutions_are_valid():
    exprs = solve_many(MULTISETS)
    flags = [e is not None for e in exprs]
    assert len(MULTISETS) == 1820
    assert sum(flags) == 1362
    for nums, expr in zip(MULTISETS, exprs):
        want = ref_solvable(tuple(sorted(Fraction(n) for n in nums)))
        assert (expr is not None) == want, nums
        if expr is not None:
            value, leaves = ref_eval(expr)
            assert value == 24, (nums, expr)
            assert Counter(leaves) == Counter(Fraction(n) for n in nums), (nums, expr)


def test_kernel_batch_matches_reference_on_random_fraction_states():
    rng = random.Random(5)
    states = []
    for _ in range(80):
        n = rng.choice((1, 2, 3, 4, 4, 4, 4))
        states.append([Fraction(rng.randint(-15, 30), rng.randint(1, 6)) for _ in range(n)])
    memo = SolverMemo(capacity=1024)  # forces growth and rehashing
    num, den, size, _ = canonicalize_batch(states)
    status = memo.solve_canonical(num, den, size)
    steps, count = memo.steps_canonical(num, den, size)
    assert memo.capacity > 1024
    for r, s in enumerate(states):
        want = ref_solvable(tuple(sorted(s)))
        assert (status[r] == ks.SOLVABLE) == want, s
        assert status[r] != ks.UNKNOWN
        if want:
            assert count[r] == len(s) - 1
            assert ks.verify_steps(num[r], den[r], size[r], steps[r], count[r])
        else:
            assert count[r] == -1


def test_verify_steps_rejects_planted_errors():
    num, den, size, _ = canonicalize_batch([[Fraction(n) for n in (4, 9, 10, 13)]])
    memo = SolverMemo()
    memo.solve_canonical(num, den, size)
    steps, count = memo.steps_canonical(num, den, size)
    assert ks.verify_steps(num[0], den[0], 4, steps[0], count[0])
    bad = steps[0].copy()
    bad[0, 5] += 1  # wrong result
    assert not ks.verify_steps(num[0], den[0], 4, bad, count[0])
    bad = steps[0].copy()
    bad[0, 0] = 7  # operand not in the state
    assert not ks.verify_steps(num[0], den[0], 4, bad, count[0])
    assert not ks.verify_steps(num[0], den[0], 4, steps[0], 2)  # too few steps


@pytest.mark.parametrize(
    "a, b, op, want",
    [
        ((1, 2), (1, 3), ks.OP_ADD, (5, 6)),
        ((1, 2), (1, 3), ks.OP_SUB, (1, 6)),
        ((1, 2), (1, 3), ks.OP_RSUB, (-1, 6)),
        ((2, 3), (9, 4), ks.OP_MUL, (3, 2)),
        ((2, 3), (-4, 9), ks.OP_DIV, (-3, 2)),
        ((2, 3), (-4, 9), ks.OP_RDIV, (-2, 3)),
        ((0, 1), (5, 1), ks.OP_MUL, (0, 1)),
        ((3, 1), (3, 1), ks.OP_SUB, (0, 1)),
    ],
)
def test_apply_op_exact(a, b, op, want):
    st, rn, rd = ks.apply_op(a[0], a[1], b[0], b[1], op)
    assert st == 0 and (rn, rd) == want


def test_apply_op_division_by_zero_and_overflow():
    assert ks.apply_op(3, 1, 0, 1, ks.OP_DIV)[0] == 1
    assert ks.apply_op(0, 1, 3, 1, ks.OP_RDIV)[0] == 1
    assert ks.apply_op(2**40, 1, 2**40, 1, ks.OP_MUL)[0] == 2
    assert ks.apply_op(2**61, 1, 2**61, 1, ks.OP_ADD)[0] == 2
    assert ks.apply_op(1, 2**40, 1, 2**40 - 1, ks.OP_ADD)[0] == 2
    # gcd reduction before multiplying keeps large but cancelling values exact
    assert ks.apply_op(2**40, 3, 3, 2**40, ks.OP_MUL) == (0, 1, 1)


def test_overflowing_states_fall_back_to_exact_python():
    big = 2**40
    cases = [
        [big, big, Fraction(24, 2**60)],  # kernel path, overflow on some branches
        [2**62, Fraction(24, 2**62)],  # beyond the int64 range: Python path
        [big, big, big],  # unsolvable, overflow met: must not report solvable
    ]
    for state in cases:
        want = ref_solvable(tuple(sorted(Fraction(v) for v in state)))
        assert is_solvable(state) == want
        steps = solve_steps(state)
        assert (steps is not None) == want
        if steps:
            assert steps[-1].result == 24


def test_trivial_and_small_states():
    assert is_solvable([24]) and not is_solvable([23])
    assert solve([24]) == "24"
    assert solve([Fraction(48), Fraction(2)]) == "48 / 2"
    assert solve([1, 1, 1, 1]) is None
    assert solve(["8", "3", "8", "3"]) is not None  # 8 / (3 - 8/3)


def test_all_solutions_are_distinct_valid_and_limited():
    sols = all_solutions([4, 9, 10, 13], limit=50)
    assert len(sols) == len(set(sols)) >= 2
    for e in sols:
        value, leaves = ref_eval(e)
        assert value == 24 and sorted(leaves) == [4, 9, 10, 13]
    assert len(all_solutions([1, 2, 3, 4], limit=3)) == 3
    assert all_solutions([1, 1, 1, 1]) == []
    from engine.errors import InputError

    with pytest.raises(InputError, match="limit must be a positive int"):
        all_solutions([1, 2, 3, 4], limit=0)


def test_memo_is_shared_and_reused():
    memo = SolverMemo()
    num, den, size, _ = canonicalize_batch([[Fraction(n) for n in m] for m in MULTISETS[:200]])
    memo.solve_canonical(num, den, size)
    first = memo.size
    memo.solve_canonical(num, den, size)
    assert memo.size == first > 200
    with pytest.raises(ValueError, match="power of two"):
        SolverMemo(capacity=1000)


@pytest.mark.parametrize(
    "a, b",
    [
        (Fraction(2**21), Fraction(24, 2**21)),  # beyond the cross-product fast path: a * b
        (Fraction(2**25 + 24), Fraction(2**25)),  # a - b
        (Fraction(48 * 2**22, 7), Fraction(2 * 2**22, 7)),  # a / b
        (Fraction(2**21), Fraction(2**21 + 1)),  # no move gives 24
        (Fraction(-5, 3), Fraction(77, 3)),  # fast path: a + b
        (Fraction(3, 7), Fraction(72, 7)),  # fast path: b / a
        (Fraction(0), Fraction(24)),  # 0 + 24; 24 / 0 is not a move
    ],
)
def test_solve_pair_matches_reference(a, b):
    (x, y) = sorted((a, b))
    mv = ks.solve_pair(x.numerator, x.denominator, y.numerator, y.denominator)
    assert (mv >= 0) == ref_solvable((x, y))
    if mv >= 0:
        st, rn, rd = ks.apply_op(x.numerator, x.denominator, y.numerator, y.denominator, mv % 8)
        assert st == 0 and (rn, rd) == (24, 1)
