"""The memoized step check's fast path agrees with the core verifier."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

from engine.game24 import verify_step
from engine.game24.checks import _core_step_ok
from engine.game24.trajectory import canonical_numbers, step_line, transition
from engine.game24.puzzles import load_puzzles

OPS = "+-*/"


def _states(n_puzzles: int, seed: int = 0):
    """Canonical 4-, 3- and 2-number states reached by random legal steps from real puzzles."""
    rng = random.Random(seed)
    puzzles = load_puzzles()
    out = []
    for p in rng.sample(list(puzzles), n_puzzles):
        nums = canonical_numbers([Fraction(x) for x in p.numbers])
        while len(nums) >= 2:
            out.append(nums)
            i, j = rng.sample(range(len(nums)), 2)
            line = step_line(nums[i], rng.choice(OPS), nums[j], [x for k, x in enumerate(nums) if k not in (i, j)])
            got = None if line is None else transition(nums, line)
            if got is None:
                break
            nums = got[0]
    return out


def test_every_canonical_rendering_of_a_legal_step_is_accepted_by_the_core_verifier():
    checked = 0
    for nums in _states(120):
        for i, j in itertools.permutations(range(len(nums)), 2):
            rest = [x for k, x in enumerate(nums) if k not in (i, j)]
            for op in OPS:
                line = step_line(nums[i], op, nums[j], rest)
                if line is None or transition(nums, line) is None:
                    continue
                assert verify_step(line, nums).ok, (nums, line)
                assert _core_step_ok(line, nums)
                checked += 1
    assert checked > 2000


def test_fast_path_agrees_with_the_verifier_on_wrong_and_reformatted_lines():
    nums = canonical_numbers([Fraction(4), Fraction(9), Fraction(10), Fraction(13)])
    lines = [
        "13 - 9 = 4 (left: 4 4 10)",  # canonical, right
        "13 - 9 = 4 (left: 4 10 4)",  # right, left list unsorted: not the rendering, full verifier
        "13-9=4 (left: 4 4 10)",  # right, other spacing
        "13 - 9 = 5 (left: 4 5 10)",  # wrong arithmetic
        "13 - 9 = 4 (left: 4 10 13)",  # wrong left list
        "13 - 2 = 11 (left: 4 9 10 11)",  # number not in the state
        "not a step",
    ]
    for line in lines:
        assert _core_step_ok(line, nums) == bool(verify_step(line, nums).ok), line
