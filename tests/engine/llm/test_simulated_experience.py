"""The simulated Game-of-24 policy's experience-use model (p_follow_experience, p_copy_experience_answer)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from engine.errors import ConfigError
from engine.game24 import prompts as P
from engine.game24.simulated_policy import (
    Game24Policy,
    applicable_experience_answers,
    applicable_experience_steps,
    split_experience,
)
from engine.llm.simulated_params import SimulatedPolicyParams

NUMS = "4 9 10 13"
# "4 - 9" is never proposed by the policy on its own (it writes hi - lo), so every line
# starting with it was copied from the experience.
APPLICABLE = "Input: 1 4 9 9\nSteps:\n4 - 9 = 7 (left: 1 7 9)\n"
NOT_APPLICABLE = "Input: 1 2 3 5\nSteps:\n2 - 5 = -3 (left: 1 -3 3)\n5 * 3 = 15 (left: 1 2 15)\n"
ANSWER_EXP = "Input: 4 9 10 13\nAnswer: (13 - 9) * (10 - 4) = 24\n"
STEPS = ["13 - 9 = 4 (left: 4 4 10)"]
N = 2000


def _policy(**kw) -> Game24Policy:
    return Game24Policy(SimulatedPolicyParams(**kw))


def test_split_experience_gives_the_prompt_without_experience():
    for exp in (APPLICABLE, NOT_APPLICABLE):
        text, bare = split_experience(P.propose_prompt(NUMS, experience=exp))
        assert bare == P.propose_prompt(NUMS)
        assert text == exp.strip()
        text, bare = split_experience(P.answer_prompt(NUMS, STEPS, experience=exp))
        assert bare == P.answer_prompt(NUMS, STEPS)
        assert text == exp.strip()
    assert split_experience(P.propose_prompt(NUMS)) == ("", P.propose_prompt(NUMS))


def test_applicable_steps_use_current_numbers_and_correct_arithmetic():
    nums = tuple(Fraction(x) for x in NUMS.split())
    (a, op, b, c, left), = applicable_experience_steps(APPLICABLE, nums)
    assert (a, op, b, c) == (4, "-", 9, -5)  # the experience's wrong "= 7" is not copied
    assert left == (-5, 10, 13)
    assert applicable_experience_steps(NOT_APPLICABLE, nums) == []
    # both operands must be present as a multiset: 9 - 9 needs two 9s
    assert applicable_experience_steps("9 - 9 = 0 (left: 0)", nums) == []
    assert applicable_experience_steps("4 / 0 = 0 (left: 0)", nums + (Fraction(0),)) == []


def test_only_the_experience_block_is_read_never_the_task():
    # the task's own step lines (answer prompt) are not experience
    text, _ = split_experience(P.answer_prompt(NUMS, ["4 - 9 = -5 (left: -5 10 13)"], experience="nothing useful"))
    assert text == "nothing useful"


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_follow_rate_matches_p_follow_experience(p):
    pol = _policy(p_follow_experience=p)
    prompt = P.propose_prompt(NUMS, experience=APPLICABLE)
    first = [pol.complete(prompt, seed, 0).splitlines()[0] for seed in range(N)]
    rate = sum(line == "4 - 9 = -5 (left: -5 10 13)" for line in first) / N
    assert abs(rate - p) < 0.04, rate
    # the step appears at most once per completion
    out = pol.complete(prompt, 3, 1)
    assert sum(line.startswith("4 - 9 =") for line in out.splitlines()) <= 1


def test_copied_step_is_not_listed_twice():
    exp = "13 - 9 = 4 (left: 4 4 10)"  # a move the policy also draws by itself
    pol = _policy(p_follow_experience=1.0)
    prompt = P.propose_prompt(NUMS, experience=exp)
    for seed in range(200):
        lines = pol.complete(prompt, seed, 0).splitlines()
        assert lines[0] == "13 - 9 = 4 (left: 4 4 10)"
        assert sum(line.startswith("13 - 9 =") for line in lines[1:]) == 0


def test_non_applicable_experience_changes_nothing():
    pol = _policy(p_follow_experience=1.0, p_copy_experience_answer=1.0)
    for seed in range(100):
        for i in range(2):
            assert pol.complete(P.propose_prompt(NUMS, experience=NOT_APPLICABLE), seed, i) == pol.complete(
                P.propose_prompt(NUMS), seed, i
            )
            assert pol.complete(P.answer_prompt(NUMS, STEPS, experience=NOT_APPLICABLE), seed, i) == pol.complete(
                P.answer_prompt(NUMS, STEPS), seed, i
            )


def test_p_zero_equals_the_no_experience_output():
    pol = _policy(p_follow_experience=0.0, p_copy_experience_answer=0.0)
    for seed in range(100):
        assert pol.complete(P.propose_prompt(NUMS, experience=APPLICABLE), seed, 1) == pol.complete(
            P.propose_prompt(NUMS), seed, 1
        )
        assert pol.complete(P.answer_prompt(NUMS, STEPS, experience=ANSWER_EXP), seed, 1) == pol.complete(
            P.answer_prompt(NUMS, STEPS), seed, 1
        )


@pytest.mark.parametrize("p", [0.3, 0.8])
def test_answer_copy_rate_matches_p(p):
    pol = _policy(p_copy_experience_answer=p)
    prompt = P.answer_prompt(NUMS, ["13 + 9 = 22 (left: 4 10 22)"], experience=ANSWER_EXP)
    rate = sum(pol.complete(prompt, s, 0) == "Answer: (13 - 9) * (10 - 4) = 24" for s in range(N)) / N
    assert abs(rate - p) < 0.04, rate


def test_answer_needs_exactly_the_input_numbers():
    nums = [Fraction(x) for x in NUMS.split()]
    assert applicable_experience_answers(ANSWER_EXP, nums) == ["(13 - 9) * (10 - 4)"]
    assert applicable_experience_answers("Answer: (13 - 9) * (10 - 4) + 1 = 24", nums) == []
    assert applicable_experience_answers("Answer: (13 - 9) * 6 = 24", nums) == []


def test_deterministic_per_prompt_seed_index():
    pol = _policy()
    prompt = P.propose_prompt(NUMS, experience=APPLICABLE)
    outs = {(s, i): pol.complete(prompt, s, i) for s in range(20) for i in range(3)}
    again = {(s, i): Game24Policy().complete(prompt, s, i) for s, i in reversed(list(outs))}
    assert outs == again
    assert len(set(outs.values())) > 10  # seeds and indices do matter


@pytest.mark.parametrize("name", ["p_follow_experience", "p_copy_experience_answer"])
def test_bad_probability_is_rejected(name):
    with pytest.raises(ConfigError, match=name):
        SimulatedPolicyParams(**{name: 1.5})


def test_steps_and_answers_inside_one_line_attempts_are_found():
    # the baselines store an attempt as one line, steps joined by "; " (baseline_methods.attempt_text)
    exp = ("1. 4 9 10 13: 13 - 9 = 4 (left: 4 4 10); 10 - 4 = 6 (left: 4 6); 4 * 6 = 24 (left: 24); "
           "Answer: (13 - 9) * (10 - 4) = 24 [correct]")
    nums = [Fraction(x) for x in NUMS.split()]
    steps = applicable_experience_steps(exp, nums)
    assert [(a, op, b) for a, op, b, _, _ in steps] == [(13, "-", 9), (10, "-", 4)]
    assert applicable_experience_answers(exp, nums) == ["(13 - 9) * (10 - 4)"]
    pol = _policy(p_follow_experience=1.0)
    first = pol.complete(P.propose_prompt(NUMS, experience=exp), 0, 0).splitlines()[:2]
    assert sorted(first) == ["10 - 4 = 6 (left: 6 9 13)", "13 - 9 = 4 (left: 4 4 10)"]
