"""The simulated Game-of-24 policy: determinism, format, and error rates that match its parameters."""

import math
import random
from fractions import Fraction

import pytest

from engine.errors import ConfigError
from engine.game24 import prompts as P
from engine.llm.base import MeteredBackend, Request
from engine.game24.simulated_policy import (
    simulated_backend,
    SimulatedPolicyParams,
    answer_is_correct,
    classify_prompt,
    is_solvable,
)

PUZZLES = ["4 9 10 13", "1 1 4 6", "2 3 5 12", "3 3 8 8", "1 2 3 4", "5 5 5 11", "6 7 8 9", "1 5 6 7"]


def _within(observed, n, p, sigmas=4.5):
    sd = math.sqrt(max(p * (1 - p), 1e-12) / n)
    return abs(observed / n - p) <= sigmas * sd + 1e-9


def test_outputs_do_not_depend_on_batch_composition_or_order():
    b = simulated_backend(seed=3)
    reqs = [Request(prompt=P.propose_prompt(p), n=2, seed=7) for p in PUZZLES]
    reqs += [Request(prompt=P.value_prompt(p), n=3, seed=i) for i, p in enumerate(PUZZLES)]
    together = [r.texts for r in b.generate(reqs)]
    rng = random.Random(0)
    order = list(range(len(reqs)))
    rng.shuffle(order)
    alone = {}
    for k in order[:5]:
        alone[k] = b.generate([reqs[k]])[0].texts
    rest = order[5:]
    for k, resp in zip(rest, simulated_backend(seed=3).generate([reqs[k] for k in rest])):
        alone[k] = resp.texts
    assert [alone[k] for k in range(len(reqs))] == together


def test_seed_and_sample_index_matter_and_default_seed_applies():
    prompt = P.propose_prompt("4 9 10 13")
    b = simulated_backend(seed=0)
    texts = b.generate([Request(prompt=prompt, n=6, seed=1)])[0].texts
    assert len(set(texts)) > 1
    other = b.generate([Request(prompt=prompt, n=6, seed=2)])[0].texts
    assert other != texts
    # a request without a seed uses the backend's seed
    assert b.generate([Request(prompt=prompt, n=2)])[0].texts == b.generate([Request(prompt=prompt, n=2, seed=0)])[0].texts
    assert simulated_backend(seed=5).generate([Request(prompt=prompt, n=2)])[0].texts != \
        b.generate([Request(prompt=prompt, n=2)])[0].texts


def test_temperature_zero_is_greedy():
    prompt = P.propose_prompt("2 3 5 12")
    b = simulated_backend()
    r1 = b.generate([Request(prompt=prompt, n=3, temperature=0.0, seed=1)])[0]
    r2 = b.generate([Request(prompt=prompt, n=1, temperature=0.0, seed=99)])[0]
    assert len(set(r1.texts)) == 1 and r2.texts[0] == r1.texts[0]


def test_format_without_errors_is_exact():
    params = SimulatedPolicyParams(p_malformed=0, p_wrong_arithmetic=0, p_wrong_left=0, min_proposals=4, max_proposals=8)
    b = simulated_backend(params=params)
    for p in PUZZLES:
        nums = sorted(P.parse_number(t) for t in p.split())
        resp = b.generate([Request(prompt=P.propose_prompt(p), n=3, seed=1)])[0]
        assert resp.backend == "simulated" and resp.prompt_tokens > 0
        for text in resp.texts:
            lines = text.splitlines()
            assert 4 <= len(lines) <= 8
            for line in lines:
                a, op, bb, c, left = P.parse_step_line(line)
                assert {"+": a + bb, "-": a - bb, "*": a * bb, "/": a / bb if bb else None}[op] == c
                rest = list(nums)
                rest.remove(a)
                rest.remove(bb)
                assert sorted(rest + [c]) == sorted(left)
    v = b.generate([Request(prompt=P.value_prompt("4 4 10"), n=4)])[0]
    assert all(P.parse_value_output(t) in ("sure", "likely", "impossible") for t in v.texts)


def _classify(line, nums):
    parsed = P.parse_step_line(line)
    if parsed is None:
        return "malformed", None
    a, op, b, c, left = parsed
    true_c = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else None}[op]
    if true_c != c:
        return "arith", None
    rest = list(nums)
    rest.remove(a)
    rest.remove(b)
    if sorted(rest + [c]) != sorted(left):
        return "left", None
    return "ok", tuple(sorted(left))


def test_line_error_rates_match_parameters():
    params = SimulatedPolicyParams(p_malformed=0.1, p_wrong_arithmetic=0.15, p_wrong_left=0.05,
                                   min_proposals=5, max_proposals=5)
    b = simulated_backend(params=params)
    counts = {"malformed": 0, "arith": 0, "left": 0, "ok": 0}
    reqs = [Request(prompt=P.propose_prompt(p), n=25, seed=s) for p in PUZZLES for s in range(3)]
    for req, resp in zip(reqs, b.generate(reqs)):
        nums = [P.parse_number(t) for t in P.current_numbers("(left: " + req.prompt.rsplit("Input: ", 1)[1].split("\n")[0] + ")").split()]
        for text in resp.texts:
            for line in text.splitlines():
                counts[_classify(line, nums)[0]] += 1
    n = sum(counts.values())
    assert n == len(reqs) * 25 * 5
    assert _within(counts["malformed"], n, 0.1)
    assert _within(counts["arith"], n, 0.15)
    assert _within(counts["left"], n, 0.05)


def test_solvable_move_rate_matches_parameter():
    params = SimulatedPolicyParams(p_solvable_move=0.3, p_malformed=0, p_wrong_arithmetic=0, p_wrong_left=0,
                                   min_proposals=1, max_proposals=1)
    b = simulated_backend(params=params)
    good = n = 0
    for p in ["4 9 10 13", "1 1 4 6", "2 3 5 12", "1 5 6 7"]:
        resp = b.generate([Request(prompt=P.propose_prompt(p), n=400, seed=11)])[0]
        for text in resp.texts:
            _, left = _classify(text, [P.parse_number(t) for t in p.split()])
            good += is_solvable(left)
            n += 1
    assert _within(good, n, 0.3)


def test_value_judgments_are_a_noisy_view_of_the_solver():
    params = SimulatedPolicyParams(value_sure_if_solvable=0.6, value_likely_if_solvable=0.3,
                                   value_impossible_if_unsolvable=0.7, value_likely_if_unsolvable=0.2,
                                   p_value_malformed=0.05)
    b = simulated_backend(params=params)
    cases = {"4 6": True, "2 5 7": True, "1 2 3": False, "13 14": False}
    for nums, truth in cases.items():
        texts = b.generate([Request(prompt=P.value_prompt(nums), n=1500, seed=4)])[0].texts
        labels = [P.parse_value_output(t) for t in texts]
        n = len(labels)
        assert _within(labels.count(None), n, 0.05)
        parsed = n - labels.count(None)
        if truth:
            assert _within(labels.count("sure"), parsed, 0.6)
            assert _within(labels.count("likely"), parsed, 0.3)
        else:
            assert _within(labels.count("impossible"), parsed, 0.7)
            assert _within(labels.count("likely"), parsed, 0.2)


def test_answer_and_last_step_judgment_rates():
    params = SimulatedPolicyParams(p_answer_correct=0.7, p_judge_correct=0.8)
    b = simulated_backend(params=params)
    steps = "13 - 9 = 4 (left: 4 4 10)\n10 - 4 = 6 (left: 4 6)\n4 * 6 = 24 (left: 24)"
    nums = [4, 9, 10, 13]
    texts = b.generate([Request(prompt=P.answer_prompt("4 9 10 13", steps), n=2000, seed=1)])[0].texts
    assert all(t.startswith("Answer: ") and t.endswith(" = 24") for t in texts)
    ok = sum(answer_is_correct(nums, P.parse_answer(t)) for t in texts)
    assert _within(ok, len(texts), 0.7)
    bad_steps = "13 + 9 = 20 (left: 4 10 20)\n20 - 10 = 10 (left: 4 10)\n4 * 10 = 24 (left: 24)"
    bad = b.generate([Request(prompt=P.answer_prompt("4 9 10 13", bad_steps), n=200, seed=1)])[0].texts
    assert not any(answer_is_correct(nums, P.parse_answer(t)) for t in bad)
    for expr, truth in [("(10 - 4) * (13 - 9)", True), ("(10 + 4) * (13 - 9)", False)]:
        texts = b.generate([Request(prompt=P.value_last_step_prompt("4 9 10 13", expr), n=2000, seed=2)])[0].texts
        agree = sum((P.parse_value_output(t) == "sure") == truth for t in texts)
        assert _within(agree, len(texts), 0.8)


def test_exact_helpers():
    assert is_solvable([Fraction(3), Fraction(3), Fraction(8), Fraction(8)])
    assert not is_solvable([1, 1, 1, 1])
    assert answer_is_correct([3, 3, 8, 8], "8 / (3 - 8 / 3)")
    assert not answer_is_correct([3, 3, 8, 8], "8 * 3")
    assert not answer_is_correct([1, 2, 3, 4], "__import__('os')")
    assert not answer_is_correct([1, 2, 3, 4], "1 / 0 + 2 + 3 + 4")
    assert classify_prompt("hello") == "unknown"


def test_limits_chat_and_unknown_prompts():
    b = MeteredBackend(simulated_backend())
    r = b.generate([
        Request(prompt=P.value_prompt("4 4 10"), max_tokens=2, episode="e1"),
        Request(messages=[{"role": "user", "content": P.propose_prompt("4 9 10 13")}], stop=["\n"], episode="e1"),
        Request(prompt="What is the capital of France?"),
    ])
    assert r[0].completions[0].finish_reason == "length" and r[0].completions[0].completion_tokens <= 2
    assert "\n" not in r[1].texts[0] and P.parse_step_line(r[1].texts[0]) is not None or r[1].texts[0]
    assert r[2].texts[0] and r[2].backend == "simulated"
    assert b.meter.total.calls == 3 and b.meter.per_episode["e1"].calls == 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"p_malformed": 1.5}, "p_malformed must be in"),
        ({"p_malformed": 0.5, "p_wrong_left": 0.6}, "must be <= 1"),
        ({"value_sure_if_solvable": 0.8, "value_likely_if_solvable": 0.3}, "value_sure_if_solvable"),
        ({"value_impossible_if_unsolvable": 0.8, "value_likely_if_unsolvable": 0.3}, "value_impossible_if_unsolvable"),
        ({"min_proposals": 0}, "min_proposals must be >= 1"),
        ({"min_proposals": 5, "max_proposals": 3}, "max_proposals must be >="),
    ],
)
def test_bad_params(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SimulatedPolicyParams(**kwargs)
