"""Exact verifier for Game-of-24 model output (ToE eq. (A2): r_t = 1[Verify(a_t, x_t)]).

Two line kinds, in the Tree-of-Thoughts format:

* answer lines ``Answer: (10 - 4) * (13 - 9) = 24``: a parenthesised infix
  expression that must use every puzzle number exactly once, no other number,
  and evaluate exactly to 24;
* step lines ``4 + 9 = 13 (left: 10 13 13)``: two numbers of the current state,
  an operator, the claimed result and the numbers left, which must be exactly
  the state minus the two operands plus the result.

Parsing never uses ``eval``: a small tokenizer and a recursive-descent parser
over exact :class:`~fractions.Fraction` values. Model text never raises: every
failure is a :class:`Verdict` whose ``reason`` names the failed check. Only a
malformed *call* (a line that is not text, an unusable state) raises
:class:`~engine.errors.InputError`.

Accepted variants: ``*``, ``x``, ``X``, ``×``, ``·`` for multiplication; ``/``
and ``÷`` for division; unicode minus signs; ``[ ]``/``{ }`` as brackets; any
spacing; Markdown emphasis and trailing text after the result; the result on
either side of ``=``; step prefixes such as ``Step 2:`` or ``2.``.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from engine.errors import InputError
from engine.game24.rational import format_fraction, to_fraction, value_order

TARGET = Fraction(24)

# reason codes (stable: other modules and metrics count them)
OK = "ok"
EMPTY = "empty"  # no expression / step found in the text
PARSE = "parse"  # text that is not a well-formed expression or step
UNARY_MINUS = "unary_minus"  # a negated number or bracket: not a Game-of-24 operation
DIVISION_BY_ZERO = "division_by_zero"
ARITHMETIC = "arithmetic"  # a claimed result that is not what the operation gives
NOT_24 = "not_24"  # an answer whose expression is not 24
REUSED = "reused"  # a number used more often than it is available
MISSING = "missing"  # an answer that leaves a puzzle number unused
EXTRA = "extra"  # a number that is not available at all
NO_LEFT = "no_left"  # a step without a ``left:`` list
LEFT = "left"  # a ``left:`` list that is not what the step leaves

REASONS = (OK, EMPTY, PARSE, UNARY_MINUS, DIVISION_BY_ZERO, ARITHMETIC, NOT_24, REUSED, MISSING, EXTRA, NO_LEFT, LEFT)


@dataclass(frozen=True)
class Verdict:
    """The verifier's answer.

    ok: every check passed; reason: OK or the code of the failed check;
    detail: a human-readable explanation; state: for a step, the numbers the
    step really leaves (value-sorted; set whenever the operands and arithmetic
    are legal, even if the ``left:`` list is wrong); value: the exact value of an
    answer expression or a step result; expression: the normalised expression.
    """

    ok: bool
    reason: str
    detail: str = ""
    state: tuple[Fraction, ...] | None = None
    value: Fraction | None = None
    expression: str | None = None

    def __bool__(self) -> bool:
        return self.ok

    @property
    def reward(self) -> int:
        """ToE eq. (A2): 1 if verified, else 0."""
        return int(self.ok)


def _fail(reason: str, detail: str, **kw) -> Verdict:
    return Verdict(False, reason, detail, **kw)


# ---------------------------------------------------------------- text normalisation

_MUL_CHARS = "×·∗⋅✕"
_MINUS_CHARS = "−–—‐"
_NUM = r"\d+(?:\.\d+)?"
_LITERAL = re.compile(rf"^\(?\s*(-?\s?{_NUM})(?:/({_NUM}))?\s*\)?$")
_STEP_PREFIX = re.compile(r"^\s*(?:step\s*\d+\s*[:.)]|\d+[.)](?=\s)|[-*•>](?=\s))\s*", re.IGNORECASE)


def _normalise(text: str) -> str:
    for ch in _MUL_CHARS:
        text = text.replace(ch, "*")
    for ch in _MINUS_CHARS:
        text = text.replace(ch, "-")
    text = text.replace("÷", "/").replace("\\times", "*").replace("\\div", "/")
    text = text.replace("[", "(").replace("]", ")").replace("{", "(").replace("}", ")")
    # x/X between operands means multiplication
    text = re.sub(r"(?<=[\d)\s])[xX](?=[\s\d(])", "*", text)
    return text


def _strip_markup(text: str) -> str:
    text = text.strip()
    text = re.sub(r"^[\s*_`$]+", "", text)
    text = re.sub(r"(?<![\d)])[\s*_`$.]+$", "", text)
    return text.strip()


def _check_line(line, name: str = "line") -> str:
    if not isinstance(line, str):
        raise InputError(f"{name} must be text (str), got {type(line).__name__} {line!r}")
    return line


def _check_numbers(numbers, name: str) -> tuple[Fraction, ...]:
    if hasattr(numbers, "numbers") and not isinstance(numbers, (str, bytes)):
        numbers = numbers.numbers  # a Puzzle
    if isinstance(numbers, str):
        parts = [p for p in re.split(r"[\s,]+", numbers.strip()) if p]
    else:
        try:
            parts = list(numbers)
        except TypeError:
            raise InputError(f"{name} must be a sequence of numbers or text like '4 9 10 13', got {numbers!r}") from None
    if not 1 <= len(parts) <= 4:
        raise InputError(f"{name} must hold 1 to 4 numbers, got {len(parts)}: {numbers!r}")
    return tuple(to_fraction(p, f"{name}[{i}]") for i, p in enumerate(parts))


# ---------------------------------------------------------------- expression parser


class _ParseFailure(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_TOKEN = re.compile(rf"\s*(?:({_NUM})|([-+*/()]))")


def _tokenize(expr: str) -> list[tuple[str, object]]:
    tokens: list[tuple[str, object]] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            raise _ParseFailure(PARSE, f"unexpected text {expr[pos:pos + 12]!r} in expression")
        if m.group(1) is not None:
            tokens.append(("num", Fraction(m.group(1))))
        else:
            tokens.append(("op", m.group(2)))
        pos = m.end()
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*; factor := NUM | '(' expr ')'"""

    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0
        self.leaves: list[Fraction] = []

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def take(self):
        tok = self.peek()
        self.pos += 1
        return tok

    def expr(self):
        value, text = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            rv, rt = self.term()
            value = value + rv if op == "+" else value - rv
            text = f"{text} {op} {rt}"
        return value, text

    def term(self):
        value, text = self.factor()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            rv, rt = self.factor()
            if op == "*":
                value = value * rv
            else:
                if rv == 0:
                    raise _ParseFailure(DIVISION_BY_ZERO, f"division by zero in {text} / {rt}")
                value = value / rv
            text = f"{text} {op} {rt}"
        return value, text

    def factor(self):
        kind, tok = self.take()
        if kind == "num":
            self.leaves.append(tok)
            return tok, format_fraction(tok) if tok.denominator == 1 else str(float(tok))
        if (kind, tok) == ("op", "("):
            value, text = self.expr()
            if self.take() != ("op", ")"):
                raise _ParseFailure(PARSE, "unbalanced parentheses")
            return value, f"({text})"
        if (kind, tok) in (("op", "-"), ("op", "+")):
            raise _ParseFailure(UNARY_MINUS, f"unary {tok} is not a Game-of-24 operation")
        if kind is None:
            raise _ParseFailure(PARSE, "expression ends where a number was expected")
        raise _ParseFailure(PARSE, f"unexpected {tok!r} where a number was expected")


def evaluate(expr: str) -> tuple[Fraction, list[Fraction], str]:
    """Exact value, leaf numbers and normalised text of an infix expression.

    Raises :class:`InputError` for text that is not a well-formed expression
    (use :func:`verify_answer` for model text: it never raises).
    """
    _check_line(expr, "expr")
    try:
        return _evaluate(_normalise(expr))
    except _ParseFailure as exc:
        raise InputError(f"expr {expr!r}: {exc.detail}") from None


def _evaluate(expr: str) -> tuple[Fraction, list[Fraction], str]:
    tokens = _tokenize(expr)
    if not tokens:
        raise _ParseFailure(EMPTY, "no expression")
    p = _Parser(tokens)
    value, text = p.expr()
    if p.pos != len(tokens):
        raise _ParseFailure(PARSE, f"unexpected {tokens[p.pos][1]!r} after a complete expression")
    return value, p.leaves, text


def _multiset_problem(used: Sequence[Fraction], available: Sequence[Fraction], what: str) -> tuple[str, str] | None:
    """(reason, detail) when ``used`` is not exactly ``available`` as multisets, else None."""
    u, a = Counter(used), Counter(available)
    extra = u - a
    missing = a - u
    if extra:
        v = next(iter(extra))
        if v in a:
            return REUSED, f"{format_fraction(v)} is used {u[v]} times but {what} has it {a[v]} time(s)"
        return EXTRA, f"{format_fraction(v)} is not in {what}"
    if missing:
        return MISSING, f"{', '.join(format_fraction(v) for v in sorted(missing.elements()))} of {what} not used"
    return None


def _answer_part(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    with_answer = [ln for ln in lines if re.search(r"answer\s*[:：]", ln, re.IGNORECASE)]
    line = with_answer[-1] if with_answer else lines[-1]
    m = None
    for m in re.finditer(r"answer\s*[:：]", line, re.IGNORECASE):
        pass
    if m is not None:
        line = line[m.end():]
    return line


def verify_answer(line: str, puzzle_numbers, target: Fraction | int = TARGET) -> Verdict:
    """Verify an answer line against the puzzle's numbers; never raises on model text.

    ``line`` may be a whole model output: the last line containing ``Answer:``
    (else the last non-empty line) is checked. The expression must be binary
    + - * / over the puzzle numbers, each used exactly once, and equal ``target``
    exactly; a stated result (``= 24``) must be ``target``.
    """
    _check_line(line)
    numbers = _check_numbers(puzzle_numbers, "puzzle_numbers")
    target = to_fraction(target, "target")
    part = _normalise(_answer_part(line))
    sides = [_strip_markup(s) for s in part.split("=")]
    if not sides or not any(sides):
        return _fail(EMPTY, "no expression found")
    expr = sides[0]
    stated = None
    if len(sides) > 1:
        # result on either side: "... = 24" or "24 = ..."
        m0 = re.fullmatch(rf"\(?\s*({_NUM})\s*\)?", sides[0])
        if m0 and len(sides) == 2 and not re.fullmatch(rf"\(?\s*({_NUM})\s*\)?", sides[1] or "x"):
            expr, stated_text = sides[1], sides[0]
        else:
            stated_text = sides[-1]
        m = re.match(rf"^\s*(-?\s*{_NUM})(?:/({_NUM}))?(?!\d|\.\d|\s*[-+*/(]\s*\d)", stated_text)
        if m:
            stated = Fraction("".join(m.group(1).split()))
            if m.group(2):
                den = Fraction(m.group(2))
                stated = stated / den if den else None
    expr = _cut_trailing(expr)
    try:
        value, leaves, text = _evaluate(expr)
    except _ParseFailure as exc:
        return _fail(exc.reason, exc.detail)
    problem = _multiset_problem(leaves, numbers, "the puzzle")
    if problem:
        return _fail(*problem, value=value, expression=text)
    if len(sides) > 2:
        for mid in sides[1:-1]:
            try:
                mv = _evaluate(_cut_trailing(mid))[0]
            except _ParseFailure as exc:
                return _fail(exc.reason, f"intermediate {mid!r}: {exc.detail}", value=value, expression=text)
            if mv != value:
                return _fail(ARITHMETIC, f"{mid.strip()} is {format_fraction(mv)}, not {format_fraction(value)}", value=value, expression=text)
    if value != target:
        return _fail(NOT_24, f"{text} = {format_fraction(value)}, not {format_fraction(target)}", value=value, expression=text)
    if len(sides) > 1 and stated is not None and stated != target:
        return _fail(ARITHMETIC, f"stated result {format_fraction(stated)} is not {format_fraction(target)}", value=value, expression=text)
    if len(sides) > 1 and stated is None:
        return _fail(PARSE, f"stated result {sides[-1]!r} is not a number", value=value, expression=text)
    return Verdict(True, OK, "", value=value, expression=text)


def _cut_trailing(expr: str) -> str:
    """Drop trailing prose after an expression (``(1 + 2) * 8 which works``)."""
    m = re.search(r"[A-Za-z]", expr)
    if m:
        expr = expr[: m.start()]
    return _strip_markup(expr)


# ---------------------------------------------------------------- step lines


def _literal(text: str) -> Fraction | None:
    text = text.strip()
    if text.isascii() and text.isdigit():
        return Fraction(int(text))
    m = _LITERAL.fullmatch(text)
    if not m:
        return None
    num = Fraction("".join(m.group(1).split()))
    if m.group(2) is None:
        return num
    den = Fraction(m.group(2))
    return None if den == 0 else num / den


def _step_candidates(lhs: str) -> list[tuple[Fraction, str, Fraction]]:
    """Every reading of ``lhs`` as ``literal op literal`` (``13/3/2`` has two)."""
    out = []
    for k, ch in enumerate(lhs):
        if ch in "+-*/":
            a = _literal(lhs[:k])
            b = _literal(lhs[k + 1 :])
            if a is not None and b is not None:
                out.append((a, ch, b))
    return out


def _left_numbers(text: str) -> list[Fraction] | None:
    text = text.strip()
    text = re.sub(r"[)\]}]+\s*[.,;]?\s*$", "", text)
    text = re.sub(r"[)\]}].*$", "", text)
    parts = [p for p in re.split(r"[\s,]+", text) if p]
    out = []
    for p in parts:
        v = _literal(p)
        if v is None:
            return None
        out.append(v)
    return out


def _apply(a: Fraction, op: str, b: Fraction) -> Fraction | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return None if b == 0 else a / b


def verify_step(line: str, state, require_left: bool = True) -> Verdict:
    """Verify one ToT step line ``a op b = c (left: x y z)`` from ``state``.

    ``state``: the numbers before the step (1..4 ints/Fractions/numeric text, or
    text like ``"4 9 10 13"`` or ``"4 13/3 10"``, or a Puzzle). On success
    ``Verdict.state`` is the value-sorted multiset the step leaves and
    ``Verdict.value`` the step result. Never raises on model text.
    """
    _check_line(line)
    before = _check_numbers(state, "state")
    text = _normalise(line.strip())
    text = _STEP_PREFIX.sub("", text, count=1)
    text = re.sub(r"^[*_`]+|(?<=\))[*_`]+$", "", text).strip()
    if not text:
        return _fail(EMPTY, "empty step line")
    m_left = re.search(r"[(\[{]?\s*(?:numbers\s+)?left\s*:?", text, re.IGNORECASE)
    left_list = None
    if m_left:
        left_list = _left_numbers(text[m_left.end():])
        text = text[: m_left.start()]
        if left_list is None:
            return _fail(PARSE, f"left: list {line[line.lower().find('left'):]!r} is not a list of numbers")
    body = _strip_markup(text)
    if body.count("=") != 1:
        return _fail(PARSE, f"step must read 'a op b = c', got {body!r}")
    lhs, rhs = body.split("=")
    m_rhs = re.match(rf"^\s*(\(?-?\s?{_NUM}(?:/{_NUM})?\)?)(?:\s+\D.*)?\s*$", rhs)
    claimed = _literal(m_rhs.group(1)) if m_rhs else None
    if claimed is None:
        return _fail(PARSE, f"step result {rhs.strip()!r} is not a number")
    cands = _step_candidates(lhs.strip())
    if not cands:
        return _fail(PARSE, f"step must combine two numbers with + - * /, got {lhs.strip()!r}")
    best: Verdict | None = None
    for a, op, b in cands:
        verdict = _check_step(a, op, b, claimed, left_list, before, require_left)
        if verdict.ok:
            return verdict
        if best is None or _RANK[verdict.reason] > _RANK[best.reason]:
            best = verdict
    return best


# how far a reading got before failing (a later check failing means a better reading)
_RANK = {EXTRA: 0, REUSED: 0, DIVISION_BY_ZERO: 1, ARITHMETIC: 2, NO_LEFT: 3, LEFT: 3, OK: 9}


def _check_step(a, op, b, claimed, left_list, before, require_left) -> Verdict:
    expr = f"{format_fraction(a)} {op} {format_fraction(b)}"
    remaining = list(before)
    for v in (a, b):
        if v in remaining:
            remaining.remove(v)
        elif v in before:
            return _fail(REUSED, f"{format_fraction(v)} is used twice but the state {_fmt(before)} has it once", expression=expr)
        else:
            return _fail(EXTRA, f"{format_fraction(v)} is not in the state {_fmt(before)}", expression=expr)
    result = _apply(a, op, b)
    if result is None:
        return _fail(DIVISION_BY_ZERO, f"{expr}: division by zero", expression=expr)
    after = value_order(remaining + [result])
    if result != claimed:
        return _fail(
            ARITHMETIC,
            f"{expr} = {format_fraction(result)}, not {format_fraction(claimed)}",
            state=after,
            value=result,
            expression=expr,
        )
    if left_list is None:
        if require_left:
            return _fail(NO_LEFT, "step has no (left: ...) list", state=after, value=result, expression=expr)
    elif Counter(left_list) != Counter(after):
        return _fail(
            LEFT,
            f"left: {_fmt(left_list)} but the step leaves {_fmt(after)}",
            state=after,
            value=result,
            expression=expr,
        )
    return Verdict(True, OK, "", state=after, value=result, expression=expr)


def _fmt(values) -> str:
    return " ".join(format_fraction(v) for v in values)


def verify_trajectory(text: str, puzzle_numbers) -> Verdict:
    """Verify a whole ToT output: step lines (with ``left:``) from the puzzle, then an answer line.

    Each step must be legal from the state the previous one left; the last
    ``Answer:`` line must be a correct answer for the puzzle. Never raises on
    model text.
    """
    _check_line(text, "text")
    state = _check_numbers(puzzle_numbers, "puzzle_numbers")
    start = state
    for ln in text.splitlines():
        if re.search(r"answer\s*[:：]", ln, re.IGNORECASE):
            break
        if not re.search(r"left\s*:", ln, re.IGNORECASE):
            continue
        v = verify_step(ln, state)
        if not v.ok:
            return v
        state = v.state
    return verify_answer(text, start)
