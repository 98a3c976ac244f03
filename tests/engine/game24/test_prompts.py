"""ToT-format Game-of-24 prompts and their parsers."""

from fractions import Fraction

import pytest

from engine.errors import InputError
from engine.game24 import prompts as P


def test_propose_prompt_ends_with_task_and_keeps_one_shot():
    p = P.propose_prompt("4 9 10 13")
    assert p.startswith(P.PROPOSE_MARK)
    assert "Input: 2 8 8 14\nPossible next steps:\n" in p
    assert p.endswith("Input: 4 9 10 13\nPossible next steps:\n")
    # every example line parses as a step
    example = p.split("Possible next steps:\n")[1].split("\n\n")[0]
    for line in example.strip().splitlines():
        assert P.parse_step_line(line) is not None, line


def test_experience_goes_before_the_task():
    p = P.propose_prompt([4, 9, 10, 13], experience="From 4 9 10 13 try 10 - 4 first.\nInput: 1 1 1 1")
    assert P.EXPERIENCE_HEADER in p
    assert p.index(P.EXPERIENCE_HEADER) < p.rindex("Input: 4 9 10 13")
    assert p.rindex("Input:") == p.rindex("Input: 4 9 10 13")
    assert P.propose_prompt("1 2", experience="  ") == P.propose_prompt("1 2")
    a = P.answer_prompt("4 9 10 13", ["10 - 4 = 6 (left: 6 9 13)"], experience="hint")
    assert a.index("hint") < a.rindex("Input: 4 9 10 13")


def test_value_prompts():
    v = P.value_prompt("5 6 9")
    assert v.startswith(P.VALUE_MARK) and v.endswith("\n5 6 9\n")
    last = P.value_last_step_prompt("4 9 10 13", "Answer: (10 - 4) * (13 - 9) = 24")
    assert last.startswith(P.VALUE_LAST_STEP_MARK)
    assert last.endswith("Input: 4 9 10 13\nAnswer: (10 - 4) * (13 - 9) = 24\nJudge:\n")


def test_answer_prompt_lists_steps():
    steps = "13 - 9 = 4 (left: 4 4 10)\n10 - 4 = 6 (left: 4 6)\n4 * 6 = 24 (left: 24)\n"
    a = P.answer_prompt("4 9 10 13", steps)
    assert a.startswith(P.ANSWER_MARK)
    assert a.endswith("Input: 4 9 10 13\nSteps:\n" + steps)


def test_empty_numbers_rejected():
    with pytest.raises(InputError, match="numbers_text"):
        P.propose_prompt("   ")


@pytest.mark.parametrize(
    "text, label",
    [
        ("9 + 15 = 24\nsure", "sure"),
        ("blah\nLikely\n\n", "likely"),
        ("impossible.", "impossible"),
        ("sure\nunlikely", None),
        ("sure or impossible", None),
        ("", None),
        (None, None),
        ("no judgment here", None),
    ],
)
def test_parse_value_output(text, label):
    assert P.parse_value_output(text) == label


def test_value_map_and_sum():
    assert P.VALUE_MAP == {"sure": 20.0, "likely": 1.0, "impossible": 0.001}
    assert P.value_of_outputs(["sure", "x\nlikely", "garbage"]) == pytest.approx(21.0)


def test_step_and_answer_parsers():
    assert P.parse_step_line("8 / 3 = 8/3 (left: 3 8 8/3)") == (
        Fraction(8), "/", Fraction(3), Fraction(8, 3), (Fraction(3), Fraction(8), Fraction(8, 3)))
    assert P.parse_step_line("2 x 8 = 16 (left: 8 14 16)")[1] == "*"
    assert P.parse_step_line("2 + 8 = 10") is None
    assert P.parse_step_line("two plus eight (left: 1)") is None
    assert P.current_numbers("a\n2 + 8 = 10 (left: 8 10 14)\n") == "8 10 14"
    assert P.current_numbers("no left here") is None
    assert P.parse_answer("steps...\nAnswer: (10 - 4) * (13 - 9) = 24") == "(10 - 4) * (13 - 9)"
    assert P.parse_answer("nothing") is None
    assert P.format_numbers([Fraction(8, 3), 4, Fraction(6, 2)]) == "8/3 4 3"
    assert P.parse_number("2.5") == Fraction(5, 2)
    with pytest.raises(ValueError, match="zero denominator"):
        P.parse_number("1/0")
