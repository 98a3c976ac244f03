"""Tree-of-Thoughts prompts for the Game of 24, in ToT's text format (our own wording).

The format follows Yao et al. (2023), "Tree of Thoughts", Game of 24 setup:

* **propose** (one-shot): ``Input: a b c d`` then ``Possible next steps:``; the
  model answers with lines ``a op b = c (left: x y z)``.
* **value** (few-shot): a list of remaining numbers; the model reasons in a few
  lines and ends with one word, ``sure``, ``likely`` or ``impossible``.
  :data:`VALUE_MAP` turns judgments into scores (ToT: sure 20, likely 1,
  impossible 0.001) and :func:`value_of_outputs` sums them over samples.
* **value_last_step** (few-shot): input plus a final ``Answer:`` line; the model
  judges ``sure``/``impossible``.
* **answer** (chain-of-thought, few-shot): input plus the three steps taken;
  the model writes ``Answer: (expr) = 24``.

Memory methods pass ``experience=`` (a block of text) to :func:`propose_prompt`
and :func:`answer_prompt`; it is inserted after the examples and before the
task, so the task's ``Input:`` line is always the last one in the prompt.

Numbers in step lines are integers, decimals or fractions ``p/q``
(:func:`format_number` writes integers and reduced fractions; :func:`parse_number`
reads all three).
"""

from __future__ import annotations

import re
from functools import lru_cache
from fractions import Fraction
from typing import Iterable, Sequence

__all__ = [
    "VALUE_MAP",
    "PROPOSE_MARK",
    "VALUE_MARK",
    "VALUE_LAST_STEP_MARK",
    "ANSWER_MARK",
    "propose_prompt",
    "value_prompt",
    "value_last_step_prompt",
    "answer_prompt",
    "parse_value_output",
    "value_of_outputs",
    "current_numbers",
    "parse_answer",
    "parse_step_line",
    "format_number",
    "parse_number",
    "format_numbers",
]

# ToT's value map (Yao et al. 2023, Game of 24 value_outputs_unwrap).
VALUE_MAP: dict[str, float] = {"sure": 20.0, "likely": 1.0, "impossible": 0.001}

# First lines of each prompt kind; the simulated policy and tests recognise prompts by them.
PROPOSE_MARK = "Combine two of the numbers with + - * / to get a new number."
VALUE_MARK = "Judge whether the given numbers can reach 24 (sure/likely/impossible)."
VALUE_LAST_STEP_MARK = "Judge whether the answer solves the Game of 24 (sure/impossible)."
ANSWER_MARK = "Use the numbers and + - * / to reach 24, combining two numbers per step."

EXPERIENCE_HEADER = "Experience from earlier puzzles (use it if it helps):"

_PROPOSE_EXAMPLE = """Input: 2 8 8 14
Possible next steps:
8 + 14 = 22 (left: 2 8 22)
14 - 2 = 12 (left: 8 8 12)
8 / 2 = 4 (left: 4 8 14)
2 * 8 = 16 (left: 8 14 16)
14 - 8 = 6 (left: 2 6 8)
8 - 2 = 6 (left: 6 8 14)
2 + 8 = 10 (left: 8 10 14)
8 * 2 = 16 (left: 8 14 16)
"""

_VALUE_EXAMPLES = """9 15
9 + 15 = 24
sure
13 14
13 + 14 = 27
14 - 13 = 1
13 * 14 = 182
14 / 13 = 1.08
impossible
2 5 7
5 + 7 = 12
12 * 2 = 24
sure
5 6 9
9 - 5 = 4
6 * 4 = 24
sure
4 7 9
4 + 7 + 9 = 20
9 * 4 - 7 = 29
(9 - 7) * 4 = 8
24 is not reached yet, but the numbers are in a workable range
likely
2 6 9
6 + 9 * 2 = 6 + 18 = 24
sure
1 2 3
1 + 2 + 3 = 6
1 * 2 * 3 = 6
(1 + 2) * 3 = 9
all numbers are too small to reach 24
impossible
11 11 12
11 + 11 + 12 = 34
12 - 11 + 11 = 12
11 * 11 - 12 = 109
all numbers are too large and do not combine to 24
impossible
3 4 10
3 * 4 + 10 = 22
(10 - 4) * 3 = 18
24 is not reached yet, but 22 and 18 are close
likely
"""

_VALUE_LAST_STEP_EXAMPLES = """Input: 2 4 5 9
Answer: (2 + 4) * (9 - 5) = 24
Judge:
sure
Input: 1 6 7 12
Answer: 12 + 7 + 6 - 1 = 24
Judge:
sure
Input: 3 3 8 8
Answer: 8 / (3 - 8 / 3) = 24
Judge:
sure
Input: 2 4 5 9
Answer: (9 - 5) * 4 + 2 = 18
Judge:
impossible
Input: 1 6 7 12
Answer: (12 - 6) * (7 - 1) = 36
Judge:
impossible
Input: 3 5 7 13
Answer: 3 * 7 + 5 - 13 + 11 = 24
Judge:
impossible
"""

_ANSWER_EXAMPLES = """Input: 2 4 5 9
Steps:
2 + 4 = 6 (left: 5 6 9)
9 - 5 = 4 (left: 4 6)
6 * 4 = 24 (left: 24)
Answer: (2 + 4) * (9 - 5) = 24
Input: 1 6 7 12
Steps:
12 + 7 = 19 (left: 1 6 19)
6 - 1 = 5 (left: 5 19)
19 + 5 = 24 (left: 24)
Answer: (12 + 7) + (6 - 1) = 24
Input: 3 5 7 13
Steps:
5 * 13 = 65 (left: 3 7 65)
65 + 7 = 72 (left: 3 72)
72 / 3 = 24 (left: 24)
Answer: (5 * 13 + 7) / 3 = 24
Input: 3 3 8 8
Steps:
8 / 3 = 8/3 (left: 3 8 8/3)
3 - 8/3 = 1/3 (left: 8 1/3)
8 / 1/3 = 24 (left: 24)
Answer: 8 / (3 - 8 / 3) = 24
"""


def _experience_block(experience: str | None) -> str:
    if experience is None or not str(experience).strip():
        return ""
    return f"{EXPERIENCE_HEADER}\n{str(experience).strip()}\n\n"


def _numbers_line(numbers_text: str | Sequence) -> str:
    if not isinstance(numbers_text, str):
        numbers_text = format_numbers(numbers_text)
    text = " ".join(str(numbers_text).split())
    if not text:
        from engine.errors import InputError

        raise InputError("numbers_text must name at least one number, got an empty string")
    return text


def propose_prompt(numbers_text: str | Sequence, experience: str | None = None) -> str:
    """ToT propose prompt for the remaining numbers (e.g. ``"4 9 10 13"``).

    The model continues after ``Possible next steps:`` with lines
    ``a op b = c (left: x y z)``. ``experience`` is inserted before the task.
    """
    numbers = _numbers_line(numbers_text)
    return (
        f"{PROPOSE_MARK} List possible next steps, one per line, as "
        "'a op b = c (left: remaining numbers)'.\n"
        f"{_PROPOSE_EXAMPLE}\n"
        f"{_experience_block(experience)}"
        f"Input: {numbers}\n"
        "Possible next steps:\n"
    )


def value_prompt(numbers_text: str | Sequence) -> str:
    """ToT value prompt: can these remaining numbers reach 24? Output ends with sure/likely/impossible."""
    numbers = _numbers_line(numbers_text)
    return f"{VALUE_MARK}\n{_VALUE_EXAMPLES}{numbers}\n"


def value_last_step_prompt(input: str | Sequence, answer: str) -> str:
    """ToT value prompt for a finished path: judge the ``Answer:`` line (sure/impossible).

    ``answer`` is the answer line with or without its ``Answer:`` prefix.
    """
    numbers = _numbers_line(input)
    answer = str(answer).strip()
    if answer.lower().startswith("answer:"):
        answer = answer[len("answer:"):].strip()
    return (
        f"{VALUE_LAST_STEP_MARK} A correct answer uses each input number exactly once, "
        "no other numbers, and equals 24.\n"
        f"{_VALUE_LAST_STEP_EXAMPLES}"
        f"Input: {numbers}\n"
        f"Answer: {answer}\n"
        "Judge:\n"
    )


def answer_prompt(input: str | Sequence, steps: str | Iterable[str], experience: str | None = None) -> str:
    """Chain-of-thought final prompt: the input and the steps taken; the model writes ``Answer: (expr) = 24``.

    ``steps`` is the newline-joined step lines or a sequence of them.
    """
    numbers = _numbers_line(input)
    if not isinstance(steps, str):
        steps = "\n".join(str(s).strip() for s in steps)
    steps = "\n".join(line.strip() for line in steps.strip().splitlines() if line.strip())
    return (
        f"{ANSWER_MARK} Finish with one line 'Answer: expression = 24'.\n"
        f"{_ANSWER_EXAMPLES}\n"
        f"{_experience_block(experience)}"
        f"Input: {numbers}\n"
        "Steps:\n"
        f"{steps}\n"
    )


_VALUE_WORD = re.compile(r"\b(sure|likely|impossible)\b", re.IGNORECASE)


def parse_value_output(text: str | None) -> str | None:
    """The judgment of a value completion: ``'sure'``, ``'likely'``, ``'impossible'`` or None.

    Like ToT, reads the last line (here: the last non-empty one); the line must
    contain exactly one of the three words (``unlikely`` does not count).
    """
    if not text:
        return None
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    if not lines:
        return None
    found = {m.group(1).lower() for m in _VALUE_WORD.finditer(lines[-1])}
    return found.pop() if len(found) == 1 else None


def value_of_outputs(texts: Iterable[str]) -> float:
    """ToT's value of a state: the sum of :data:`VALUE_MAP` over the parsed samples (unparsed count 0)."""
    total = 0.0
    for text in texts:
        label = parse_value_output(text)
        if label is not None:
            total += VALUE_MAP[label]
    return total


_LEFT = re.compile(r"\(\s*left:\s*([^)]*)\)", re.IGNORECASE)
_NUM = r"-?\d+(?:\.\d+)?(?:/\d+(?:\.\d+)?)?"
_STEP = re.compile(
    rf"^\s*({_NUM})\s*([+\-*/x×÷])\s*({_NUM})\s*=\s*({_NUM})\s*\(\s*left:\s*([^)]*)\)\s*$",
    re.IGNORECASE,
)


def current_numbers(line_or_text: str) -> str | None:
    """The ``left:`` numbers of the last step line (ToT's get_current_numbers), or None if absent."""
    lines = [line for line in str(line_or_text).strip().splitlines() if line.strip()]
    if not lines:
        return None
    m = _LEFT.search(lines[-1])
    return " ".join(m.group(1).split()) if m else None


def parse_step_line(line: str) -> tuple[Fraction, str, Fraction, Fraction, tuple[Fraction, ...]] | None:
    """Parse ``a op b = c (left: x y z)`` into fractions; None when the line is malformed.

    ``op`` is normalised to one of ``+ - * /``. Arithmetic is NOT checked here.
    """
    m = _STEP.match(str(line))
    if not m:
        return None
    try:
        a, b, c = (parse_number(m.group(i)) for i in (1, 3, 4))
        left = tuple(parse_number(t) for t in m.group(5).split())
    except ValueError:
        return None
    op = {"x": "*", "×": "*", "÷": "/"}.get(m.group(2).lower(), m.group(2))
    return a, op, b, c, left


_ANSWER = re.compile(r"answer:\s*(.+?)\s*=\s*([-\d./]+)\s*$", re.IGNORECASE)


def parse_answer(text: str) -> str | None:
    """The expression of the last ``Answer: expr = 24`` line (left of the final ``=``), or None."""
    for line in reversed(str(text).strip().splitlines()):
        if "answer:" in line.lower():
            m = _ANSWER.search(line.strip())
            if m:
                return m.group(1).strip()
            expr = line.split(":", 1)[1].strip()
            return expr or None
    return None


def format_number(x) -> str:
    """Integers as ``12``, other rationals as reduced ``p/q`` (``8/3``)."""
    f = Fraction(x)
    return str(f.numerator) if f.denominator == 1 else f"{f.numerator}/{f.denominator}"


def format_numbers(xs: Iterable) -> str:
    """Space-separated :func:`format_number` of each value, in the given order."""
    return " ".join(format_number(x) for x in xs)


def parse_number(text: str) -> Fraction:
    """Read ``12``, ``2.67`` or ``8/3`` exactly; raises ValueError on anything else."""
    return _parse_number(str(text).strip())


@lru_cache(maxsize=1 << 14)  # model text repeats a few hundred number tokens; Fractions are immutable
def _parse_number(text: str) -> Fraction:
    if "/" in text:
        p, _, q = text.partition("/")
        den = Fraction(q)
        if den == 0:
            raise ValueError(f"number {text!r} has a zero denominator")
        return Fraction(p) / den
    return Fraction(text)
