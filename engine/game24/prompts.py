"""Tree-of-Thoughts prompts for the Game of 24, in ToT's text format (our own wording).

The text of every prompt lives in ``engine/prompts/game24.toml`` (a Jinja2
template per prompt, see :mod:`engine.templates` and docs/prompts.md); the
functions here prepare the placeholders and render the active templates.

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

from engine import templates

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

# The prompts' text lives in engine/prompts/game24.toml (engine.templates); these are the placeholders
# each one takes. The functions below keep their signatures and render the active templates.
TEMPLATE_SET = "game24"
PLACEHOLDERS: dict[str, set[str]] = {
    "propose": {"numbers", "experience"},
    "value": {"numbers"},
    "value_last_step": {"numbers", "answer"},
    "answer": {"numbers", "steps", "experience"},
}
templates.register(TEMPLATE_SET, PLACEHOLDERS)


def _render(prompt: str, **values) -> str:
    return templates.active(TEMPLATE_SET).render(prompt, **values)


def _experience_text(experience: str | None) -> str:
    """The stripped experience block, or "" (the templates add :data:`EXPERIENCE_HEADER` when non-empty)."""
    if experience is None or not str(experience).strip():
        return ""
    return str(experience).strip()


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
    return _render("propose", numbers=_numbers_line(numbers_text), experience=_experience_text(experience))


def value_prompt(numbers_text: str | Sequence) -> str:
    """ToT value prompt: can these remaining numbers reach 24? Output ends with sure/likely/impossible."""
    return _render("value", numbers=_numbers_line(numbers_text))


def value_last_step_prompt(input: str | Sequence, answer: str) -> str:
    """ToT value prompt for a finished path: judge the ``Answer:`` line (sure/impossible).

    ``answer`` is the answer line with or without its ``Answer:`` prefix.
    """
    numbers = _numbers_line(input)
    answer = str(answer).strip()
    if answer.lower().startswith("answer:"):
        answer = answer[len("answer:"):].strip()
    return _render("value_last_step", numbers=numbers, answer=answer)


def answer_prompt(input: str | Sequence, steps: str | Iterable[str], experience: str | None = None) -> str:
    """Chain-of-thought final prompt: the input and the steps taken; the model writes ``Answer: (expr) = 24``.

    ``steps`` is the newline-joined step lines or a sequence of them.
    """
    numbers = _numbers_line(input)
    if not isinstance(steps, str):
        steps = "\n".join(str(s).strip() for s in steps)
    steps = "\n".join(line.strip() for line in steps.strip().splitlines() if line.strip())
    return _render("answer", numbers=numbers, steps=steps, experience=_experience_text(experience))


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
