"""The engine's ``tot`` against an independent reference BFS, on scripted model answers.

``RefToT`` below is written from the Tree-of-Thoughts paper's description of
the Game-of-24 search (Yao et al. 2023, Sec. 4.1 and the released
``bfs.solve``): propose with one request per thought, one new thought per
line of the answer, values from three samples mapped sure/likely/impossible
= 20/1/0.001, a duplicate thought valued 0, value prompts cached, greedy
selection of b, four steps. It shares nothing with ``engine.game24.tot`` but
the prompt texts (``engine.game24.prompts``), which both must send alike.

The scripted model answers from a hash of the prompt: valid steps, decimal
steps, wrong arithmetic, wrong ``left:`` lists, malformed and blank lines,
premature ``left: 24``, duplicates, list markup; value samples that are
right, malformed (``Sure``, ``likely.``, a trailing newline) or missing.
"""

from __future__ import annotations

import hashlib
import random
from fractions import Fraction

import pytest

from engine.game24 import prompts as P
from engine.game24.hooks import NoExperience
from engine.game24.tot import PuzzleTask, ToTConfig, ToTMethod, ToTSearch
from engine.llm.base import Completion, Response
from engine.rounds import Episode

# -- the independent reference -------------------------------------------------------------------

VALUE_MAP = {"impossible": 0.001, "likely": 1, "sure": 20}  # the reference's order


def numbers_of(y: str) -> str:
    last = y.strip().split("\n")[-1]
    return last.split("left: ")[-1].split(")")[0]


class RefToT:
    """The reference BFS, one puzzle at a time, one model call at a time."""

    def __init__(self, model, breadth=5, n_evaluate=3):
        self.model, self.b, self.n = model, breadth, n_evaluate
        self.cache: dict[str, float] = {}
        self.prompts: list[tuple[str, int]] = []

    def ask(self, prompt, n):
        self.prompts.append((prompt, n))
        return self.model(prompt, n)

    def propose_prompt(self, x, y):
        cur = numbers_of(y if y else x)
        if cur == "24":
            return P.answer_prompt(x, y)
        return P.propose_prompt(cur) if cur.strip() else None  # the engine's prompts refuse a blank list

    def value_prompt(self, x, y):
        last = y.strip().split("\n")[-1]
        if "left: " not in last:
            return P.value_last_step_prompt(x, last.lower().replace("answer: ", ""))
        cur = numbers_of(y)
        return P.value_prompt(cur) if cur.strip() else None

    def value(self, x, y):
        prompt = self.value_prompt(x, y)
        if prompt is None:
            return 0
        if prompt in self.cache:
            return self.cache[prompt]
        outs = self.ask(prompt, self.n)
        if len(y.strip().split("\n")) == 4 and "answer" not in y.lower():
            v = 0
        else:
            last = [o.split("\n")[-1] for o in outs]
            v = sum(val * last.count(name) for name, val in VALUE_MAP.items())
        self.cache[prompt] = v
        return v

    def solve(self, x):
        ys, infos = [""], []
        for step in range(4):
            new_ys = []
            for y in ys:
                prompt = self.propose_prompt(x, y)
                if prompt is not None:
                    new_ys += [y + line + "\n" for line in self.ask(prompt, 1)[0].split("\n")]
            seen, values = set(), []
            for y in new_ys:
                if y in seen:
                    values.append(0)
                    continue
                seen.add(y)
                values.append(self.value(x, y))
            order = sorted(range(len(new_ys)), key=lambda i: values[i], reverse=True)[: self.b]
            select = [new_ys[i] for i in order]
            infos.append({"step": step, "ys": ys, "new_ys": new_ys, "values": values, "select_new_ys": select})
            ys = select
        return ys, infos


# -- the scripted model --------------------------------------------------------------------------


def _rng(*parts) -> random.Random:
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(h, "little"))


def _fmt(v: Fraction, decimal: bool) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{float(v):.2f}" if decimal else f"{v.numerator}/{v.denominator}"


def _nums(text: str):
    try:
        return [Fraction(t) for t in text.split()]
    except (ValueError, ZeroDivisionError):
        return None


def _propose_lines(numbers_text: str, rng: random.Random) -> list[str]:
    nums = _nums(numbers_text)
    if not nums or len(nums) < 2:
        return [rng.choice(["No numbers to combine.", "", "1 + 1 = 2 (left: 2)"])]
    lines = []
    for _ in range(rng.randint(1, 7)):
        i, j = rng.sample(range(len(nums)), 2)
        a, b = nums[i], nums[j]
        op = rng.choice("+-*/")
        if op == "/" and b == 0:
            op = "+"
        c = {"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op]
        rest = [v for k, v in enumerate(nums) if k not in (i, j)] + [c]
        dec = rng.random() < 0.3
        kind = rng.random()
        if kind < 0.12:
            c = c + rng.choice((-1, 1, 2))  # wrong arithmetic
        elif kind < 0.22:
            rest = rest[1:] if len(rest) > 1 else rest + [Fraction(3)]  # wrong left list
        elif kind < 0.28:
            rest = [Fraction(24)]  # premature "left: 24"
        left = " ".join(_fmt(v, dec) for v in sorted(rest))
        line = f"{_fmt(a, dec)} {op} {_fmt(b, dec)} = {_fmt(c, dec)} (left: {left})"
        u = rng.random()
        if u < 0.06:
            line = f"{_fmt(a, dec)} {op} {_fmt(b, dec)} = {_fmt(c, dec)}"  # no left list
        elif u < 0.1:
            line = line[:-1]  # unclosed parenthesis
        elif u < 0.13:
            line = "1. " + line
        elif u < 0.16:
            line = "(left: )"
        elif u < 0.2:
            line = ""
        lines.append(line)
        if rng.random() < 0.15:
            lines.append(line)  # duplicate
    return lines


def _answer_lines(prompt: str, rng: random.Random) -> list[str]:
    lines = [rng.choice(["Answer: (1 + 2) * 8 = 24", "Answer: 4 * 6 = 24", "answer: 3 * 8 = 24",
                         "The answer is 24", "Answer: (13 - 9) * (10 - 4) = 24"])]
    if rng.random() < 0.3:
        lines.append(rng.choice(["", "Answer: 2 * 12 = 24", "Steps done."]))
    return lines


def _value_sample(prompt: str, i: int) -> str:
    rng = _rng("value", prompt, i)
    word = rng.choice(["sure", "likely", "impossible", "sure", "likely", "impossible",
                       "Sure", "likely.", "sure\n", "I do not know"])
    return f"some reasoning = {rng.randint(1, 30)}\n{word}"


def scripted(prompt: str, n: int) -> list[str]:
    if prompt.startswith(P.PROPOSE_MARK):
        numbers = prompt.rsplit("Input: ", 1)[1].split("\n", 1)[0]
        rng = _rng("propose", prompt)
        text = "\n".join(_propose_lines(numbers, rng))
        return [text + ("\n" if rng.random() < 0.2 else "")]  # sometimes a trailing newline
    if prompt.startswith(P.ANSWER_MARK):
        return ["\n".join(_answer_lines(prompt, _rng("answer", prompt)))]
    if prompt.startswith(P.VALUE_LAST_STEP_MARK):
        return [_rng("last", prompt, i).choice(["sure", "impossible", "impossible\n"]) for i in range(n)]
    if prompt.startswith(P.VALUE_MARK):
        return [_value_sample(prompt, i) for i in range(n)]
    raise AssertionError(f"unexpected prompt {prompt[:60]!r}")


class ScriptedBackend:
    name = "scripted"
    model = "scripted-reference"

    def __init__(self):
        self.prompts: list[tuple[str, int]] = []

    def generate(self, requests):
        out = []
        for r in requests:
            self.prompts.append((r.prompt, r.n))
            texts = scripted(r.prompt, r.n)
            out.append(Response(tuple(Completion(t, len(t.split())) for t in texts), 1, 0.0, self.name, self.model))
        return out


def _puzzles(n: int, seed: int):
    rng = random.Random(seed)
    return [tuple(sorted(rng.randint(1, 13) for _ in range(4))) for _ in range(n)]


# -- the comparisons -----------------------------------------------------------------------------


@pytest.mark.parametrize("breadth", [5, 2])
def test_engine_search_equals_reference_on_random_scripted_puzzles(breadth):
    puzzles = _puzzles(120, seed=breadth)
    kinds = {"decimal": 0, "illegal": 0, "blank": 0, "answer_early": 0}
    for k, puzzle in enumerate(puzzles):
        ref = RefToT(scripted, breadth=breadth)
        x = " ".join(map(str, puzzle))
        ref_ys, ref_infos = ref.solve(x)
        llm = ScriptedBackend()
        cfg = ToTConfig(breadth=breadth)
        (run,) = ToTSearch(cfg, NoExperience().reader({})).run([Episode(k, PuzzleTask(puzzle), seed=k)], llm)
        assert run.steps == ref_infos, f"puzzle {x}: the explored states differ"
        assert [n.text for n in run.frontier] == ref_ys
        assert llm.prompts == ref.prompts, f"puzzle {x}: the prompts sent differ"
        lines = [y for info in ref_infos for y in info["new_ys"]]
        kinds["decimal"] += any("." in y and "left" in y for y in lines)
        kinds["illegal"] += any(v == 0 for info in ref_infos for v in info["values"])
        kinds["blank"] += any(y.endswith("\n\n") for y in lines)
        kinds["answer_early"] += any(numbers_of(y) == "24" and y.count("\n") < 3 for y in lines)
    # the scripts did reach every corner the comparison is about
    assert all(v >= 5 for v in kinds.values()), kinds


def test_method_outputs_and_run_wide_cache_equal_reference():
    """ToTMethod over a stream, one episode per round: outputs, calls, and the reference's one cache per run."""
    puzzles = _puzzles(40, seed=11)
    ref = RefToT(scripted)  # one RefToT for the whole stream: its cache is the run's, as in the reference
    method = ToTMethod(config=ToTConfig(value_cache="run"))
    for k, puzzle in enumerate(puzzles):
        before = len(ref.prompts)
        ref_ys, _ = ref.solve(" ".join(map(str, puzzle)))
        llm = ScriptedBackend()
        (res,) = method.run_episodes(method.snapshot(), [Episode(k, PuzzleTask(puzzle), seed=k)], llm)
        method.apply([res])
        assert llm.prompts == ref.prompts[before:]
        assert res.record["calls"] == len(ref.prompts) - before
        assert res.record["n_outputs"] == len(ref_ys)
    assert len(method.value_cache) == len(ref.cache) > 0


def test_episode_cache_scope_forgets_between_puzzles():
    puzzle = (4, 9, 10, 13)
    method = ToTMethod(config=ToTConfig(value_cache="episode"))
    calls = []
    for k in range(2):
        llm = ScriptedBackend()
        (res,) = method.run_episodes(method.snapshot(), [Episode(k, PuzzleTask(puzzle), seed=0)], llm)
        method.apply([res])
        calls.append(res.record["calls"])
    assert calls[0] == calls[1] > 0  # the same puzzle asks again: nothing carried over
    run_method = ToTMethod(config=ToTConfig(value_cache="run"))
    run_calls = []
    for k in range(2):
        (res,) = run_method.run_episodes(run_method.snapshot(), [Episode(k, PuzzleTask(puzzle), seed=0)],
                                         ScriptedBackend())
        run_method.apply([res])
        run_calls.append(res.record["calls"])
    assert run_calls[0] == calls[0] and run_calls[1] < run_calls[0]  # the second reads the run's cache


def test_run_wide_cache_survives_a_checkpoint(tmp_path):
    method = ToTMethod(config=ToTConfig(value_cache="run"))
    (res,) = method.run_episodes(method.snapshot(), [Episode(0, PuzzleTask((4, 9, 10, 13)), seed=0)],
                                 ScriptedBackend())
    method.apply([res])
    assert len(method.value_cache) > 0
    method.save_state(tmp_path)
    again = ToTMethod(config=ToTConfig(value_cache="run"))
    again.load_state(tmp_path)
    assert (again.value_cache.keys == method.value_cache.keys).all()
    assert (again.value_cache.values == method.value_cache.values).all()
