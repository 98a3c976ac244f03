"""The Game-of-24 task's simulated policy: a seeded, text-in text-out stand-in for an LLM.

``backend = "simulated"`` on this task is ``SimulatedBackend(Game24Policy(...))``
(:mod:`engine.llm.simulated`); this module is the policy, the task's own code.

It is a **test harness, not a model**. It reads the numbers from the ToT-format
prompts of :mod:`engine.game24.prompts` and answers in the same text format
(proposal lines, sure/likely/impossible judgments, answer lines), with an
explicit error model whose parameters are :class:`SimulatedPolicyParams`:

* **propose**: each line is drawn from the moves that keep the puzzle solvable
  with probability ``p_solvable_move`` (else from the other moves), then turned
  into a malformed line (``p_malformed``), a line with wrong arithmetic
  (``p_wrong_arithmetic``; the ``left:`` list follows the wrong result) or a
  line with a wrong ``left:`` list (``p_wrong_left``); these three are
  mutually exclusive. Lines per completion: uniform in
  ``[min_proposals, max_proposals]``, capped by the number of distinct moves.
* **value**: a noisy view of the exact solver: a solvable state is judged
  ``sure``/``likely``/``impossible`` with probabilities
  ``value_sure_if_solvable``, ``value_likely_if_solvable`` and the rest; an
  unsolvable one ``impossible``/``likely``/``sure`` with
  ``value_impossible_if_unsolvable``, ``value_likely_if_unsolvable`` and the
  rest. With ``p_value_malformed`` the completion ends without a judgment.
* **value_last_step**: the judgment matches the exact check of the answer with
  probability ``p_judge_correct``.
* **answer**: when the steps are a valid chain that reaches 24, the answer line
  is the matching expression with probability ``p_answer_correct`` (otherwise an
  operator is changed so it misses 24); invalid steps give the expression the
  steps spell (which almost always misses 24).

* **experience** (the block memory methods insert between the examples and
  the task, headed by ``prompts.EXPERIENCE_HEADER``; only that block is read,
  never the task part): in a propose prompt each line slot copies an
  applicable experience step (``a op b = c (left: ...)`` with a and b among
  the current numbers) with probability ``p_follow_experience``, rewritten on
  the current numbers with correct arithmetic; in an answer prompt an
  experience ``Answer:`` expression over exactly the input numbers is copied
  with probability ``p_copy_experience_answer``. All other draws use a random
  stream seeded from the prompt WITHOUT the experience block, so the block
  changes the output only through this explicit model: with both
  probabilities 0 (or nothing applicable) the completion equals the one for
  the same prompt without experience.

Every completion is a deterministic function of (prompt, seed, sample index)
only, never of the batch composition or call order: the seed is the request's
``seed`` (or the backend's default seed when the request has none), and at
temperature 0 the sample index and seed are ignored (greedy decoding). The
backend labels every :class:`Response` ``backend="simulated"``; figures
produced with it are labelled *simulated*.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from fractions import Fraction
from typing import Sequence

from engine.game24 import prompts as P
from engine.llm.base import Request
from engine.llm.simulated import SimulatedBackend, SimulatedPolicy, prompt_text
from engine.llm.simulated_params import SimulatedPolicyParams
from engine.llm.tokens import count_tokens

__all__ = [
    "MODEL_NAME",
    "SimulatedPolicyParams",
    "Game24Policy",
    "policy_for",
    "simulated_backend",
    "answer_is_correct",
    "applicable_experience_answers",
    "applicable_experience_steps",
    "classify_prompt",
    "count_tokens",
    "is_solvable",
    "split_experience",
]

MODEL_NAME = "simulated-game24-v1"

# ---------------------------------------------------------------- exact arithmetic

_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: a / b,
}


_SOLVABLE: dict[tuple[Fraction, ...], bool] = {}
_SOLVABLE_MAX = 1 << 20


def _solvable_batch(states: Sequence[tuple[Fraction, ...]]) -> list[bool]:
    """Exact solvability of sorted states through engine.game24's solver, memoised here."""
    missing = list(dict.fromkeys(s for s in states if s not in _SOLVABLE))
    if missing:
        from engine.game24 import is_solvable_many

        if len(_SOLVABLE) + len(missing) > _SOLVABLE_MAX:
            _SOLVABLE.clear()
        for s, ok in zip(missing, is_solvable_many(missing)):
            _SOLVABLE[s] = bool(ok)
    return [_SOLVABLE[s] for s in states]


def is_solvable(numbers: Sequence[Fraction]) -> bool:
    """Exact: can ``numbers`` (1 to 4 rationals) reach 24 with + - * /?"""
    return _solvable_batch([tuple(sorted(Fraction(x) for x in numbers))])[0]


def _moves(nums: tuple[Fraction, ...]) -> list[tuple[Fraction, str, Fraction, Fraction, tuple[Fraction, ...]]]:
    """Distinct moves (a, op, b, c, left) the way a model writes them: a >= b for + * -, both ways for /."""
    seen, out = set(), []
    for i, j in itertools.combinations(range(len(nums)), 2):
        x, y = nums[i], nums[j]
        rest = nums[:i] + nums[i + 1:j] + nums[j + 1:]
        hi, lo = (x, y) if x >= y else (y, x)
        cands = [(hi, "+", lo), (hi, "*", lo), (hi, "-", lo)]
        if lo != 0:
            cands.append((hi, "/", lo))
        if hi != 0 and hi != lo:
            cands.append((lo, "/", hi))
        for a, op, b in cands:
            key = (a, op, b)
            if key in seen:
                continue
            seen.add(key)
            c = _OPS[op](a, b)
            out.append((a, op, b, c, tuple(sorted(rest + (c,)))))
    return out


def _fmt(x: Fraction) -> str:
    return P.format_number(x)


def _step_line(a, op, b, c, left) -> str:
    return f"{_fmt(a)} {op} {_fmt(b)} = {_fmt(c)} (left: {P.format_numbers(left)})"


def _parse_numbers(text: str) -> tuple[Fraction, ...] | None:
    try:
        nums = tuple(P.parse_number(t) for t in text.split())
    except (ValueError, ZeroDivisionError):
        return None
    return nums or None


def answer_is_correct(input_numbers: Sequence[Fraction], expr: str | None) -> bool:
    """Exact check through engine.game24's verifier: ``expr`` uses each input once and equals 24."""
    if not expr:
        return False
    from engine.game24 import verify_answer

    return bool(verify_answer(f"Answer: {expr} = 24", [Fraction(x) for x in input_numbers]).ok)


# ---------------------------------------------------------------- prompt reading

_INPUT = re.compile(r"^Input:\s*(.*)$", re.MULTILINE)


def _last_input(prompt: str) -> tuple[Fraction, ...] | None:
    found = _INPUT.findall(prompt)
    return _parse_numbers(found[-1]) if found else None


def classify_prompt(prompt: str) -> str:
    """``'propose'``, ``'value'``, ``'value_last_step'``, ``'answer'`` or ``'unknown'``."""
    if prompt.startswith(P.ANSWER_MARK):
        return "answer"
    if prompt.startswith(P.VALUE_LAST_STEP_MARK):
        return "value_last_step"
    if prompt.startswith(P.VALUE_MARK):
        return "value"
    if prompt.startswith(P.PROPOSE_MARK):
        return "propose"
    return "unknown"


# ---------------------------------------------------------------- experience block


def _rng(prompt: str, seed: int, index: int, tag: bytes) -> random.Random:
    digest = hashlib.blake2b(tag + f"{seed}\x1f{index}\x1f".encode() + prompt.encode(), digest_size=16).digest()
    return random.Random(int.from_bytes(digest, "little"))


def split_experience(prompt: str) -> tuple[str, str]:
    """(experience text, prompt without the experience block) of a propose or answer prompt.

    The block is what :mod:`engine.game24.prompts` inserts: from
    ``EXPERIENCE_HEADER`` up to the task's ``Input:`` line (the last one in the
    prompt). Without a block: ``("", prompt)``. The bare prompt is exactly the
    prompt the same call would have built with ``experience=None``.
    """
    head = prompt.find(P.EXPERIENCE_HEADER)
    task = prompt.rfind("\nInput:")
    if head < 0 or task < head:
        return "", prompt
    text = prompt[head + len(P.EXPERIENCE_HEADER):task]
    return text.strip(), prompt[:head] + prompt[task + 1:]


def _multiset_take(pool: list, values) -> list | None:
    """``pool`` less one copy of each of ``values``; None when some value is missing."""
    rest = list(pool)
    for v in values:
        if v not in rest:
            return None
        rest.remove(v)
    return rest


# Step and answer text anywhere in the experience: memories often hold a whole attempt on one line
# (steps joined by "; ", as engine.game24.baseline_methods.attempt_text writes them) behind a list marker.
_EXP_STEP = re.compile(
    r"-?\d+(?:\.\d+)?(?:/\d+)?\s*[+\-*/x×÷]\s*-?\d+(?:\.\d+)?(?:/\d+)?\s*=\s*-?\d+(?:\.\d+)?(?:/\d+)?"
    r"\s*\(\s*left:[^)\n]*\)",
    re.IGNORECASE,
)
_EXP_ANSWER = re.compile(r"answer:\s*([^;\n=]+?)\s*=\s*24(?![\d./])", re.IGNORECASE)


def applicable_experience_steps(experience: str, nums: Sequence[Fraction]):
    """Experience steps (``a op b = c (left: ...)`` anywhere in the text) whose operands are among ``nums``.

    Each distinct ``a op b`` of the experience (in order of appearance) becomes
    ``(a, op, b, c, left)`` with the correct ``c = a op b`` and ``left`` the
    current numbers less a and b plus c (sorted); the experience's own result
    and left list are ignored. Division by zero is skipped.
    """
    out, seen = [], set()
    for m in _EXP_STEP.finditer(experience):
        parsed = P.parse_step_line(m.group(0))
        if parsed is None:
            continue
        a, op, b = parsed[0], parsed[1], parsed[2]
        if (a, op, b) in seen or (op == "/" and b == 0):
            continue
        rest = _multiset_take(list(nums), (a, b))
        if rest is None:
            continue
        seen.add((a, op, b))
        c = _OPS[op](a, b)
        out.append((a, op, b, c, tuple(sorted(rest + [c]))))
    return out


_EXPR_NUM = re.compile(r"\d+(?:\.\d+)?")


def applicable_experience_answers(experience: str, nums: Sequence[Fraction]) -> list[str]:
    """Distinct ``Answer:`` expressions of the experience whose numbers are exactly ``nums`` (a multiset)."""
    want = sorted(Fraction(x) for x in nums)
    out = []
    for m in _EXP_ANSWER.finditer(experience):
        expr = m.group(1).strip()
        if not expr or expr in out:
            continue
        try:
            used = sorted(Fraction(t) for t in _EXPR_NUM.findall(expr))
        except ValueError:
            continue
        if used == want:
            out.append(expr)
    return out


# ---------------------------------------------------------------- the policy


class Game24Policy(SimulatedPolicy):
    """Text-in, text-out Game-of-24 policy; :meth:`complete` is pure given its arguments."""

    model = MODEL_NAME

    def __init__(self, params: SimulatedPolicyParams | None = None):
        self.params = params or SimulatedPolicyParams()

    # -- public ---------------------------------------------------------------
    def respond(self, request: Request, seed: int, index: int) -> str:
        """:meth:`complete` of the request's prompt (a chat: its last user message)."""
        return self.complete(prompt_text(request), seed, index, request.temperature)

    def complete(self, prompt: str, seed: int, index: int, temperature: float = 0.7) -> str:
        """One completion of ``prompt``; a function of (prompt, seed, index) only (temperature 0: of prompt)."""
        if temperature == 0.0:
            seed, index = 0, 0
        kind = classify_prompt(prompt)
        experience, bare = split_experience(prompt) if kind in ("propose", "answer") else ("", prompt)
        rng = _rng(bare, seed, index, b"")
        if kind == "propose":
            return self._propose(bare, rng, experience, _rng(prompt, seed, index, b"experience\x1f"))
        if kind == "value":
            return self._value(prompt, rng)
        if kind == "value_last_step":
            return self._value_last_step(prompt, rng)
        if kind == "answer":
            return self._answer(bare, rng, experience, _rng(prompt, seed, index, b"experience\x1f"))
        from engine.baselines.simulated import reply  # the baselines' own prompts (mem0, MemRL, ReMe): simulated answers

        answer = reply(prompt)
        return answer if answer is not None else "I can only play the Game of 24."

    # -- propose --------------------------------------------------------------
    def _propose(self, prompt: str, rng: random.Random, experience: str = "", exp_rng: random.Random | None = None) -> str:
        p = self.params
        nums = _last_input(prompt)
        if nums is None or len(nums) < 2:
            return "No two numbers are left to combine."
        moves = _moves(tuple(sorted(nums)))
        flags = _solvable_batch([m[4] for m in moves])
        good = [m for m, ok in zip(moves, flags) if ok]
        bad = [m for m, ok in zip(moves, flags) if not ok]
        k = min(rng.randint(p.min_proposals, p.max_proposals), len(moves))
        follow = applicable_experience_steps(experience, nums) if p.p_follow_experience > 0 else []
        lines = []
        for _ in range(k):
            if follow and exp_rng is not None and exp_rng.random() < p.p_follow_experience:
                a, op, b, c, left = follow.pop(exp_rng.randrange(len(follow)))
                for pool in (good, bad):  # the copied move is not listed twice
                    pool[:] = [m for m in pool if not (m[0] == a and m[1] == op and m[2] == b)]
                lines.append(_step_line(a, op, b, c, left))
                continue
            if not good and not bad:
                break
            want_good = rng.random() < p.p_solvable_move
            pool = good if (want_good and good) or not bad else bad
            move = pool.pop(rng.randrange(len(pool)))
            lines.append(self._corrupt(move, nums, rng))
        return "\n".join(lines)

    def _corrupt(self, move, nums, rng: random.Random) -> str:
        p = self.params
        a, op, b, c, left = move
        u = rng.random()
        if u < p.p_malformed:
            forms = (
                f"{_fmt(a)} {op} {_fmt(b)} = {_fmt(c)}",
                f"Let's try {_fmt(a)} {op} {_fmt(b)} next.",
                f"{_fmt(a)} {op} {_fmt(b)} = {_fmt(c)} (left: {P.format_numbers(left)}",
                f"(left: {P.format_numbers(left)})",
            )
            return forms[rng.randrange(len(forms))]
        if u < p.p_malformed + p.p_wrong_arithmetic:
            wrong = c + rng.choice((-2, -1, 1, 2, 3))
            rest = list(left)
            rest.remove(c)
            return _step_line(a, op, b, wrong, tuple(sorted(rest + [wrong])))
        if u < p.p_malformed + p.p_wrong_arithmetic + p.p_wrong_left:
            return _step_line(a, op, b, c, self._wrong_left(left, a, b, nums, rng))
        return _step_line(a, op, b, c, left)

    @staticmethod
    def _wrong_left(left, a, b, nums, rng: random.Random):
        """A left list that differs from ``left`` as a multiset."""
        options = []
        if len(left) > 1:
            drop = list(left)
            drop.pop(rng.randrange(len(drop)))
            options.append(drop)
        options.append(list(left) + [a])  # kept an operand
        options.append(list(left) + [rng.choice(list(left))])  # duplicated a number
        changed = list(left)
        i = rng.randrange(len(changed))
        changed[i] = changed[i] + rng.choice((-1, 1))
        options.append(changed)
        out = options[rng.randrange(len(options))]
        return tuple(sorted(out))

    # -- value ----------------------------------------------------------------
    def _value(self, prompt: str, rng: random.Random) -> str:
        p = self.params
        body = prompt.rstrip("\n").rsplit("\n", 1)[-1]
        nums = _parse_numbers(body)
        if nums is None:
            return "I cannot read the numbers."
        truth = is_solvable(nums)
        u = rng.random()
        if truth:
            label = "sure" if u < p.value_sure_if_solvable else (
                "likely" if u < p.value_sure_if_solvable + p.value_likely_if_solvable else "impossible")
        else:
            label = "impossible" if u < p.value_impossible_if_unsolvable else (
                "likely" if u < p.value_impossible_if_unsolvable + p.value_likely_if_unsolvable else "sure")
        lines = self._value_reasoning(nums, rng)
        if rng.random() < p.p_value_malformed:
            lines.append("I need more time to decide.")
        else:
            lines.append(label)
        return "\n".join(lines)

    @staticmethod
    def _value_reasoning(nums, rng: random.Random) -> list[str]:
        ordered = sorted(nums)
        if len(ordered) == 1:
            return [f"{_fmt(ordered[0])} {'=' if ordered[0] == 24 else '!='} 24"]
        lines = [" + ".join(_fmt(x) for x in ordered) + f" = {_fmt(sum(ordered))}"]
        prod = Fraction(1)
        for x in ordered:
            prod *= x
        if rng.random() < 0.5:
            lines.append(" * ".join(_fmt(x) for x in ordered) + f" = {_fmt(prod)}")
        return lines

    # -- value of the final answer ----------------------------------------------
    def _value_last_step(self, prompt: str, rng: random.Random) -> str:
        nums = _last_input(prompt)
        expr = P.parse_answer(prompt.rsplit("Input:", 1)[-1])
        truth = nums is not None and answer_is_correct(nums, expr)
        right = rng.random() < self.params.p_judge_correct
        return "sure" if truth == right else "impossible"

    # -- answer -----------------------------------------------------------------
    def _answer(self, prompt: str, rng: random.Random, experience: str = "", exp_rng: random.Random | None = None) -> str:
        nums = _last_input(prompt)
        if nums is None:
            return "Answer: I cannot read the input."
        p = self.params
        if experience and exp_rng is not None and p.p_copy_experience_answer > 0:
            copies = applicable_experience_answers(experience, nums)
            if copies and exp_rng.random() < p.p_copy_experience_answer:
                return f"Answer: {copies[exp_rng.randrange(len(copies))]} = 24"
        steps_text = prompt.rsplit("Steps:\n", 1)[-1] if "Steps:\n" in prompt else ""
        exprs = [(x, _fmt(x)) for x in nums]  # (value, expression) per number still in play
        valid = True
        for line in steps_text.splitlines():
            parsed = P.parse_step_line(line)
            if parsed is None:
                if line.strip():
                    valid = False
                continue
            a, op, b, c, left = parsed
            ia = next((i for i, (v, _) in enumerate(exprs) if v == a), None)
            ib = next((i for i, (v, _) in enumerate(exprs) if v == b and i != ia), None)
            if ia is None or ib is None:
                valid = False
                # the model writes the step as it reads it, with the numbers it saw
                ea, eb = _fmt(a), _fmt(b)
            else:
                ea, eb = exprs[ia][1], exprs[ib][1]
                for i in sorted((ia, ib), reverse=True):
                    exprs.pop(i)
            true_c = _OPS[op](a, b) if not (op == "/" and b == 0) else None
            if true_c != c:
                valid = False
            exprs.append((c, f"({ea} {op} {eb})"))
            if sorted(v for v, _ in exprs) != sorted(left):
                valid = False
        if len(exprs) != 1:
            valid = False
            expr = " + ".join(e for _, e in exprs)
        else:
            expr = exprs[0][1]
        expr = _strip_outer(expr)
        if valid and exprs[0][0] == 24 and rng.random() >= self.params.p_answer_correct:
            expr = _break(expr, nums, rng)
        return f"Answer: {expr} = 24"


def _strip_outer(expr: str) -> str:
    if expr.startswith("(") and expr.endswith(")"):
        depth = 0
        for i, ch in enumerate(expr):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(expr) - 1:
                return expr
        return expr[1:-1]
    return expr


def _break(expr: str, nums, rng: random.Random) -> str:
    """Change one operator so the expression misses 24 (a slip when copying the steps out)."""
    positions = [i for i, ch in enumerate(expr) if ch in "+-*/" and i > 0 and expr[i - 1] == " "]
    rng.shuffle(positions)
    for i in positions:
        for op in rng.sample("+-*/", 4):
            if op == expr[i]:
                continue
            cand = expr[:i] + op + expr[i + 1:]
            if not answer_is_correct(nums, cand):
                return cand
    return expr + " + 1"


# ---------------------------------------------------------------- the task's hooks


def policy_for(llm_cfg) -> Game24Policy:
    """The policy ``backend = "simulated"`` answers with on this task (``engine.game24.task.TASK.policy``):
    the error model of the config's ``[llm.simulated]`` table."""
    return Game24Policy(llm_cfg.simulated)


def simulated_backend(seed: int = 0, params: SimulatedPolicyParams | None = None,
                      model: str | None = None) -> SimulatedBackend:
    """``SimulatedBackend(Game24Policy(params), seed, model)``: this task's simulated backend, for tests and scripts."""
    return SimulatedBackend(Game24Policy(params), seed=seed, model=model)
