"""The exact verifier: accepts every solver output, rejects planted errors, never raises on text."""

import itertools
import random
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.game24 import (
    all_multisets,
    solve_steps_many,
    step_lines,
    steps_to_expression,
    verify_answer,
    verify_step,
    verify_trajectory,
)
from engine.game24 import verifier as V

PUZZLE = (4, 9, 10, 13)


@pytest.fixture(scope="module")
def solved():
    ms = [m.numbers for m in all_multisets() if m.solvable]
    return list(zip(ms, solve_steps_many(ms)))


def test_accepts_every_solver_output(solved):
    assert len(solved) == 1362
    for nums, steps in solved:
        expr = steps_to_expression(nums, steps)
        v = verify_answer(f"Answer: {expr} = 24", nums)
        assert v.ok and v.reason == V.OK and v.value == 24, (nums, expr, v)
        text = "\n".join(step_lines(nums, steps) + [f"Answer: {expr} = 24"])
        assert verify_trajectory(text, nums).ok, text
        state = nums
        for line in step_lines(nums, steps):
            sv = verify_step(line, state)
            assert sv.ok, (line, state, sv)
            state = sv.state
        assert state == (Fraction(24),)


@pytest.mark.parametrize(
    "line",
    [
        "Answer: (10 - 4) * (13 - 9) = 24",
        "answer:(10-4)*(13-9)=24",
        "Answer: (10 - 4) x (13 - 9) = 24",
        "Answer: (10 − 4) × (13 − 9) = 24.",
        "**Answer:** [10 - 4] * {13 - 9} = 24 which is correct",
        "Answer: 24 = (10 - 4) * (13 - 9)",
        "Answer: (10 - 4) * (13 - 9)",
        "Input: 4 9 10 13\nSteps...\nAnswer: (13 - 9) * (10 - 4) = 24",
        "Answer: (10 - 4) * (13 - 9) = 6 * 4 = 24",
        "Answer: `(13 - 9) * (10 - 4) = 24`",
    ],
)
def test_answer_variants_accepted(line):
    v = verify_answer(line, PUZZLE)
    assert v.ok, v


def test_fractional_answers_are_exact():
    assert verify_answer("Answer: 8 / (3 - 8 / 3) = 24", [3, 3, 8, 8]).ok
    assert verify_answer("Answer: 5 * (5 - 1 / 5) = 24", "1 5 5 5").ok
    # the same shape off by a little: exactly wrong, whatever a float would say
    v = verify_answer("Answer: 8 / (3 - 8 / 3.0001) = 24", [3, 3, 8, 8])
    assert not v.ok


@pytest.mark.parametrize(
    "line, reason",
    [
        ("Answer: (10 - 4) * (13 - 8) = 24", V.EXTRA),  # 8 is not in the puzzle
        ("Answer: (10 - 4) * (13 - 10) = 24", V.REUSED),  # 10 used twice, 9 missing
        ("Answer: (10 - 4) * 13 = 24", V.MISSING),  # 9 missing
        ("Answer: (10 - 4) * (13 - 9) * 1 = 24", V.EXTRA),  # a number that is not there
        ("Answer: (10 + 4) * (13 - 9) = 24", V.NOT_24),  # wrong arithmetic
        ("Answer: (10 - 4) * (13 - 9) = 25", V.ARITHMETIC),  # wrong stated result
        ("Answer: (10 - 4) * (13 - 9) = 6 * 5 = 24", V.ARITHMETIC),  # wrong intermediate
        ("Answer: 4 * 9 / (10 - 10) = 24", V.DIVISION_BY_ZERO),
        ("Answer: -(4 - 10) * (13 - 9) = 24", V.UNARY_MINUS),
        ("Answer: (10 - 4 * (13 - 9) = 24", V.PARSE),
        ("Answer: (10 - 4) (13 - 9) = 24", V.PARSE),
        ("Answer: (10 - 4) * (13 - 9) = twenty-four", V.PARSE),
        ("Answer: 10 4 13 9 = 24", V.PARSE),
        ("I cannot solve this puzzle.", V.EMPTY),
        ("", V.EMPTY),
        ("Answer:", V.EMPTY),
        ("Answer: ((((", V.PARSE),
        ("Answer: 2 ** 3 * 3 = 24", V.PARSE),
    ],
)
def test_answer_planted_errors(line, reason):
    v = verify_answer(line, PUZZLE)
    assert not v.ok and v.reason == reason, v
    assert v.detail


@pytest.mark.parametrize(
    "line, state, after",
    [
        ("4 + 9 = 13 (left: 10 13 13)", "4 9 10 13", "10 13 13"),
        ("13 - 9 = 4 (left: 4 4 10)", [4, 9, 10, 13], "4 4 10"),
        ("Step 1: 10 - 4 = 6 (left: 6 9 13)", PUZZLE, "6 9 13"),
        ("2. 10 x 4 = 40 (left: 9 13 40)", PUZZLE, "9 13 40"),
        ("13 ÷ 4 = 13/4 (left: 9 10 13/4)", PUZZLE, "9 10 13/4"),
        ("13 / 3 = 13/3 (left: 13/3 4 5)", "13 3 4 5", "4 5 13/3"),
        ("13/3 + 5 = 28/3 (left: 4, 28/3)", "4 5 13/3", "4 28/3"),
        ("13/3/2 = 13/6 (left: 13/6)", "13/3 2", "13/6"),  # read as (13/3) / 2
        ("4 - 9 = -5 (left: -5 10 13)", PUZZLE, "-5 10 13"),
        ("-5 + 10 = 5 (left: 5 13)", "-5 10 13", "5 13"),
        ("4 * 6 = 24 (left: 24)", "4 6", "24"),
        ("4 + 9 = 13 [left: 10 13 13]", PUZZLE, "10 13 13"),
        ("4+9=13 (left:10 13 13) good", PUZZLE, "10 13 13"),
    ],
)
def test_step_variants_accepted(line, state, after):
    v = verify_step(line, state)
    assert v.ok, v
    want = tuple(sorted(Fraction(x) for x in after.split()))
    assert v.state == want


@pytest.mark.parametrize(
    "line, state, reason",
    [
        ("4 + 9 = 14 (left: 10 13 14)", PUZZLE, V.ARITHMETIC),
        ("4 + 4 = 8 (left: 8 10 13)", PUZZLE, V.REUSED),
        ("4 + 5 = 9 (left: 9 9 10 13)", PUZZLE, V.EXTRA),
        ("4 + 9 = 13 (left: 10 13)", PUZZLE, V.LEFT),
        ("4 + 9 = 13 (left: 10 13 13 4)", PUZZLE, V.LEFT),
        ("4 + 9 = 13 (left: 9 10 13)", PUZZLE, V.LEFT),
        ("4 + 9 = 13", PUZZLE, V.NO_LEFT),
        ("10 / 0 = 0 (left: 0 4)", "10 0 4", V.DIVISION_BY_ZERO),
        ("13 / 3 = 4.33 (left: 4.33 4 5)", "13 3 4 5", V.ARITHMETIC),
        ("4 + 9 + 10 = 23 (left: 13 23)", PUZZLE, V.PARSE),
        ("4 + 9 = 13 = 13 (left: 10 13 13)", PUZZLE, V.PARSE),
        ("4 + 9 = thirteen (left: 10 13 13)", PUZZLE, V.PARSE),
        ("4 + 9 = 13 (left: ten 13 13)", PUZZLE, V.PARSE),
        ("Let's think step by step.", PUZZLE, V.PARSE),
        ("", PUZZLE, V.EMPTY),
    ],
)
def test_step_planted_errors(line, state, reason):
    v = verify_step(line, state)
    assert not v.ok and v.reason == reason, v


def test_step_verdict_keeps_real_state_on_left_error():
    v = verify_step("4 + 9 = 13 (left: 10 13)", PUZZLE)
    assert v.state == (10, 13, 13) and v.value == 13


def test_trajectory_planted_error_in_the_middle():
    good = "4 + 9 = 13 (left: 10 13 13)\n13 - 10 = 3 (left: 3 13)\n"
    assert not verify_trajectory(good + "Answer: (13 - 10) * 13 = 24", PUZZLE).ok
    bad = "10 - 4 = 6 (left: 6 9 13)\n13 - 9 = 4 (left: 4 4)\n6 * 4 = 24 (left: 24)\nAnswer: (10 - 4) * (13 - 9) = 24"
    v = verify_trajectory(bad, PUZZLE)
    assert not v.ok and v.reason == V.LEFT
    fine = bad.replace("(left: 4 4)", "(left: 4 6)")
    assert verify_trajectory(fine, PUZZLE).ok


def test_malformed_calls_raise():
    with pytest.raises(InputError, match="line must be text"):
        verify_answer(None, PUZZLE)
    with pytest.raises(InputError, match="line must be text"):
        verify_step(b"4 + 9 = 13", PUZZLE)
    with pytest.raises(InputError, match="state must hold 1 to 4 numbers, got 5"):
        verify_step("4 + 9 = 13 (left: 10 13 13)", [1, 2, 3, 4, 5])
    with pytest.raises(InputError, match=r"state\[1\] must be a number"):
        verify_step("4 + 9 = 13 (left: 10 13 13)", "4 nine 10 13")
    with pytest.raises(InputError, match="puzzle_numbers must hold 1 to 4 numbers, got 0"):
        verify_answer("Answer: 24", [])
    with pytest.raises(InputError, match="puzzle_numbers must be a sequence"):
        verify_answer("Answer: 24", 24)
    with pytest.raises(InputError, match=r"expr '1 \+': expression ends"):
        V.evaluate("1 +")


ALPHABET = "0123456789 +-*/x×÷()[]=.:,leftAnswr\n²٣½−·{}*_`$"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=60))
@example("=-\n0")  # a sign, a line break, a digit: the literal kept the line break (CI, 2026-12-07)
def test_never_raises_on_model_text(text):
    for fn, arg in ((verify_answer, PUZZLE), (verify_step, PUZZLE), (verify_trajectory, PUZZLE)):
        v = fn(text, arg)
        assert isinstance(v, V.Verdict) and v.reason in V.REASONS


def test_random_mutations_of_correct_answers_are_judged_exactly():
    """Change one number of a correct answer: verdict ok iff the multiset and value still work."""
    rng = random.Random(3)
    combos = list(itertools.combinations_with_replacement(range(1, 14), 4))
    from engine.game24 import solve_many

    picks = rng.sample(combos, 120)
    for nums, expr in zip(picks, solve_many(picks)):
        if expr is None:
            continue
        tokens = expr.split(" ")
        idx = [i for i, t in enumerate(tokens) if t.strip("()").isdigit()]
        i = rng.choice(idx)
        t = tokens[i]
        digits = t.strip("()")
        new = str(int(digits) % 13 + 1)
        tokens[i] = t.replace(digits, new)
        v = verify_answer("Answer: " + " ".join(tokens) + " = 24", nums)
        assert not v.ok and v.reason in (V.EXTRA, V.REUSED, V.MISSING)
