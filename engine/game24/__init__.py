"""Game of 24: puzzles, exact solver, verifier and offline experience precomputation.

Public API (stable names; other modules build on them)::

    Puzzle, parse_puzzle, load_puzzles, test_split, all_multisets
    solve, is_solvable, solve_steps, all_solutions, canonical_state, state_key
    verify_step, verify_answer, verify_trajectory, Verdict

States are multisets of 1..4 exact rationals (ints, Fractions or text like
``"13/3"``); nothing decides equality with floating point. Solving runs in
compiled Numba kernels (kernels.game24_state, kernels.game24_solver) with a
process-wide memo shared by every call.
"""

from engine.game24.puzzles import (
    Puzzle,
    all_multisets,
    load_puzzles,
    parse_puzzle,
    test_split,
    with_solvable,
)
from engine.game24.solver import (
    Step,
    all_solutions,
    canonical_state,
    is_solvable,
    is_solvable_many,
    solve,
    solve_many,
    solve_steps,
    solve_steps_many,
    state_key,
    state_keys,
    step_lines,
    steps_to_expression,
)
from engine.game24.verifier import Verdict, verify_answer, verify_step, verify_trajectory

__all__ = [
    "Puzzle",
    "Step",
    "Verdict",
    "all_multisets",
    "all_solutions",
    "canonical_state",
    "is_solvable",
    "is_solvable_many",
    "load_puzzles",
    "parse_puzzle",
    "solve",
    "solve_many",
    "solve_steps",
    "solve_steps_many",
    "state_key",
    "state_keys",
    "step_lines",
    "steps_to_expression",
    "test_split",
    "verify_answer",
    "verify_step",
    "verify_trajectory",
    "with_solvable",
]
