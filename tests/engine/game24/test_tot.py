"""ToT BFS with a scripted backend: requests per step, scoring, selection, batching, seeds."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError, InputError
from engine.game24 import prompts as P
from engine.game24.hooks import EMPTY, NoExperience, Retrieval
from engine.game24.tot import PuzzleTask, ToTConfig, ToTMethod, as_task
from engine.llm.base import Completion, Response
from engine.rounds import Episode, request_seed

# What the scripted "model" says. Propose: by the state's numbers. Value: a label per state.
PROPOSALS = {
    "4 9 10 13": [
        "13 - 9 = 4 (left: 4 4 10)",  # valid
        "10 - 4 = 6 (left: 6 9 13)",  # valid
        "4 + 9 = 14 (left: 10 13 14)",  # wrong arithmetic: dropped
        "this is not a step",  # malformed: dropped
        "13 - 9 = 4 (left: 4 10 13)",  # wrong left list: dropped
        "13 - 9 = 4 (left: 4 4 10)",  # duplicate: value 0 without a call
        "9 + 13 = 22 (left: 4 10 22)",  # valid
    ],
    "4 4 10": ["10 - 4 = 6 (left: 4 6)", "4 + 4 = 8 (left: 8 10)"],
    "6 9 13": ["13 - 9 = 4 (left: 4 6)", "9 + 13 = 22 (left: 6 22)"],
    "4 10 22": ["22 - 10 = 12 (left: 4 12)"],
    "4 6": ["4 * 6 = 24 (left: 24)", "6 - 4 = 2 (left: 2)"],
    "8 10": ["8 + 10 = 18 (left: 18)"],
    "4 12": ["4 + 12 = 16 (left: 16)"],
    "6 22": ["6 + 22 = 28 (left: 28)"],
}
VALUES = {  # three samples each -> sums below
    "4 4 10": ["sure", "sure", "likely"],  # 41
    "6 9 13": ["likely", "likely", "impossible"],  # 2.001
    "4 10 22": ["impossible", "impossible", "impossible"],  # 0.003
    "4 6": ["sure", "sure", "sure"],  # 60
    "8 10": ["impossible", "likely", "impossible"],  # 1.002
    "24": ["sure", "sure", "sure"],
    "2": ["impossible"] * 3,
    "18": ["impossible"] * 3,
}
ANSWER = "Answer: (10 - 4) * (13 - 9) = 24"


def _numbers_of(prompt: str) -> str:
    lines = [ln for ln in prompt.strip().splitlines() if ln.strip()]
    if prompt.startswith(P.PROPOSE_MARK):
        return lines[-2].split(":", 1)[1].strip()
    return lines[-1].strip()


class Scripted:
    """A backend that answers from the tables above and records every batch."""

    name = "scripted"
    model = "scripted-v0"

    def __init__(self):
        self.batches: list[list] = []

    def generate(self, requests):
        self.batches.append(list(requests))
        out = []
        for r in requests:
            p = r.prompt
            if p.startswith(P.PROPOSE_MARK):
                texts = ["\n".join(PROPOSALS.get(_numbers_of(p), []))]
            elif p.startswith(P.ANSWER_MARK):
                texts = [ANSWER]
            elif p.startswith(P.VALUE_LAST_STEP_MARK):
                texts = ["sure" if "(10 - 4) * (13 - 9)" in p else "impossible"] * r.n
            elif p.startswith(P.VALUE_MARK):
                labels = VALUES.get(_numbers_of(p), ["impossible"] * r.n)
                texts = [f"thinking\n{lab}" for lab in labels[: r.n]]
            else:
                raise AssertionError(f"unexpected prompt {p[:60]!r}")
            out.append(Response(tuple(Completion(t, len(t.split())) for t in texts), len(p.split()), 0.0,
                                self.name, self.model))
        return out


def _episodes(puzzles, seed0=7):
    return [Episode(i, PuzzleTask(tuple(p)), seed=seed0 + i) for i, p in enumerate(puzzles)]


def test_bfs_with_drop_invalid_steps():
    llm = Scripted()
    method = ToTMethod(config=ToTConfig(breadth=2, drop_invalid_steps=True))
    (res,) = method.run_episodes(method.snapshot(), _episodes([(4, 9, 10, 13)]), llm)
    # 4 steps x (propose batch, value batch) = 8 generate calls
    assert len(llm.batches) == 8
    kinds = [[_kind(r.prompt) for r in b] for b in llm.batches]
    # step 0: one propose; three distinct valid candidates valued (the duplicate and invalid ones are not)
    assert kinds[0] == ["propose"]
    assert sorted(_numbers_of(r.prompt) for r in llm.batches[1]) == ["4 10 22", "4 4 10", "6 9 13"]
    assert all(r.n == 3 for r in llm.batches[1])
    # step 1: b=2 best states were "4 4 10" (41) and "6 9 13" (2.001); "4 10 22" (0.003) dropped
    assert sorted(_numbers_of(r.prompt) for r in llm.batches[2]) == ["4 4 10", "6 9 13"]
    # step 1 candidates: 4 6 (twice, from two parents: one value request), 8 10, 6 22 (unscripted -> impossible)
    assert sorted(_numbers_of(r.prompt) for r in llm.batches[3]) == ["4 6", "6 22", "8 10"]
    # step 3: answer prompt for the branch at 24
    assert "answer" in kinds[6]
    assert kinds[7] == ["value_last"]
    rec = res.record
    assert rec["success_any"] and rec["success_first"]
    assert rec["calls"] == sum(len(b) for b in llm.batches)
    assert rec["samples"] == sum(r.n for b in llm.batches for r in b)
    assert rec["first_output"] == ANSWER
    assert all(r.episode == "0" for b in llm.batches for r in b)


def _kind(prompt):
    for mark, kind in ((P.PROPOSE_MARK, "propose"), (P.ANSWER_MARK, "answer"),
                       (P.VALUE_LAST_STEP_MARK, "value_last"), (P.VALUE_MARK, "value")):
        if prompt.startswith(mark):
            return kind
    return "?"


def test_value_is_summed_tot_map():
    assert P.value_of_outputs(["x\nsure", "likely", "impossible"]) == pytest.approx(21.001)


def test_breadth_one_keeps_only_best_state():
    llm = Scripted()
    method = ToTMethod(config=ToTConfig(breadth=1))
    (res,) = method.run_episodes(method.snapshot(), _episodes([(4, 9, 10, 13)]), llm)
    assert [_numbers_of(r.prompt) for r in llm.batches[2]] == ["4 4 10"]
    assert [_numbers_of(r.prompt) for r in llm.batches[4]] == ["4 6"]
    assert res.record["success_any"]


def test_one_batch_per_phase_across_episodes_and_batch_independence():
    puzzles = [(4, 9, 10, 13), (1, 2, 3, 4), (4, 9, 10, 13)]
    llm = Scripted()
    method = ToTMethod()
    results = method.run_episodes(method.snapshot(), _episodes(puzzles), llm)
    # all episodes share each batch: the first batch holds one propose request per episode
    assert [r.episode for r in llm.batches[0]] == ["0", "1", "2"]
    assert len(llm.batches) <= 8
    # the same episode alone gets the same requests (prompts and seeds) and the same record
    alone = Scripted()
    (solo,) = method.run_episodes(method.snapshot(), [_episodes(puzzles)[2]], alone)
    mine = [(r.prompt, r.seed, r.n) for b in llm.batches for r in b if r.episode == "2"]
    assert mine == [(r.prompt, r.seed, r.n) for b in alone.batches for r in b]
    drop = {"wall_s"}
    assert {k: v for k, v in results[2].record.items() if k not in drop} == \
        {k: v for k, v in solo.record.items() if k not in drop}
    # different episodes of the same puzzle get different seeds
    s0 = {r.seed for b in llm.batches for r in b if r.episode == "0"}
    s2 = {r.seed for b in llm.batches for r in b if r.episode == "2"}
    assert not s0 & s2


def test_supplied_continuation_completes_branch_without_llm():
    class Supply:
        name = "supply"

        def snapshot(self):
            return {}

        def reader(self, snap):
            return self

        def retrieve(self, queries, llm):
            out = []
            for q in queries:
                if q.state == "4 9 10 13":
                    out.append(Retrieval(
                        continuations=(("13 - 9 = 5 (left: 4 5 10)",),  # wrong: rejected
                                       ("13 - 9 = 4 (left: 4 4 10)", "10 - 4 = 6 (left: 4 6)",
                                        "4 * 6 = 24 (left: 24)")),
                        continuation_ids=(3, 4), experience_ids=(3, 4)))
                else:
                    out.append(EMPTY)
            return out

        def observe(self, traces, llm):
            self.traces = list(traces)
            return [{} for _ in traces]

        def apply(self, updates):
            pass

    hooks = Supply()
    llm = Scripted()
    method = ToTMethod("sup", hooks, ToTConfig(supply_continuations=True))
    (res,) = method.run_episodes(method.snapshot(), _episodes([(4, 9, 10, 13)]), llm)
    assert llm.batches == []  # no LLM call at all
    assert res.record["success_any"] and res.record["by_experience"] and res.record["calls"] == 0
    trace = hooks.traces[0]
    assert trace.used == (4,) and trace.rejected == (3,) and trace.retrieved == (3, 4)
    assert trace.solution[-1].startswith("Answer:")


def test_no_experience_hooks_and_request_seed():
    r = NoExperience().reader({})
    assert r.retrieve([object(), object()], None) == [EMPTY, EMPTY]
    assert request_seed(1, "a") == request_seed(1, "a") != request_seed(2, "a")
    assert 0 <= request_seed("x") < 2**63


def test_bad_inputs():
    with pytest.raises(ConfigError, match=r"tot.breadth must be in \[1, 100\]"):
        ToTConfig(breadth=0)
    with pytest.raises(ConfigError, match="tot.n_evaluate"):
        ToTConfig(n_evaluate=0)
    with pytest.raises(InputError, match="four integers"):
        PuzzleTask((1, 2, 3))
    with pytest.raises(InputError, match="payload must be"):
        as_task("1 2 3 4")
    with pytest.raises(ValueError, match="one id per continuation"):
        Retrieval(continuations=(("a",),))


def test_step_lines_with_list_markup_are_read():
    from engine.game24.checks import normalise_step, step_ok
    from engine.game24.trajectory import Branch

    start = Branch.start((4, 9, 10, 13))
    for line in ("1. 13 - 9 = 4 (left: 4 4 10)", "- 13 - 9 = 4 (left: 4 4 10)", "Step 1: 13 - 9 = 4 (left: 4 4 10)"):
        nxt = step_ok(start, line)
        assert nxt is not None and nxt.state == "4 4 10" and nxt.lines == ("13 - 9 = 4 (left: 4 4 10)",)
    assert normalise_step("  13 - 9 = 4 (left: 4 4 10) ") == "13 - 9 = 4 (left: 4 4 10)"
    assert step_ok(start, "13 - 9 = 5 (left: 4 5 10)") is None
    assert step_ok(start, "13 - 2 = 11 (left: 4 9 10 11)") is None


def test_negative_number_at_line_start_is_not_a_bullet():
    from fractions import Fraction as F

    from engine.game24.checks import step_ok
    from engine.game24.trajectory import Branch

    b = Branch((F(-12), F(-2)), ("(1 - 13)", "(1 - 3)"))
    nxt = step_ok(b, "-2 * -12 = 24 (left: 24)")
    assert nxt is not None and nxt.reached_24 and nxt.answer_line() == "Answer: (1 - 3) * (1 - 13) = 24"


def test_every_request_carries_its_answer_shape_and_format_failures_are_counted():
    import re

    from engine.llm.structured import GAME24_ANSWER, GAME24_STEP, GAME24_VALUE

    llm = Scripted()
    method = ToTMethod(config=ToTConfig(breadth=2))
    (res,) = method.run_episodes(method.snapshot(), _episodes([(4, 9, 10, 13)]), llm)
    want = {"propose": GAME24_STEP, "answer": GAME24_ANSWER, "value": GAME24_VALUE, "value_last": GAME24_VALUE}
    for batch in llm.batches:
        for r in batch:
            assert r.constraint == want[_kind(r.prompt)]
    # the scripted proposals obey the step shape except the one malformed line ("this is not a step");
    # the wrong-arithmetic lines have the right shape: a skill failure, not a format failure
    assert res.record["unusable_lines"] == 1
    assert res.record["unusable_values"] == 0
    assert not re.fullmatch(GAME24_STEP.regex, "this is not a step")
    assert re.fullmatch(GAME24_STEP.regex, "\n".join(PROPOSALS["4 6"]))
    assert re.fullmatch(GAME24_VALUE.regex, "thinking\nsure") and re.fullmatch(GAME24_ANSWER.regex, ANSWER)


def test_value_samples_without_a_label_are_counted_not_raised():
    class NoLabels(Scripted):
        def generate(self, requests):
            out = super().generate(requests)
            return [Response(tuple(Completion(c.text.replace("\nsure", "\nsure.").replace("\nlikely", "\nok"), 1)
                                   for c in r.completions), r.prompt_tokens, 0.0, self.name, self.model)
                    if _kind(q.prompt) == "value" else r for q, r in zip(requests, out)]

    method = ToTMethod(config=ToTConfig(breadth=2))
    (res,) = method.run_episodes(method.snapshot(), _episodes([(4, 9, 10, 13)]), NoLabels())
    assert res.record["unusable_values"] > 0


def test_a_left_list_that_is_no_game24_state_asks_experience_nothing():
    """SmolLM2 wrote "... (left: 11 11 12 12 12)": five numbers are text for the search, not a state to look up."""
    from fractions import Fraction

    from engine.game24.tot import _parsed_numbers

    assert _parsed_numbers("11 11 12 12 12") is None
    assert _parsed_numbers("") is None and _parsed_numbers("1 x") is None
    assert _parsed_numbers("8/3 3") == (Fraction(8, 3), Fraction(3))
