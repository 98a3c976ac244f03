"""FLEX (seed 002): retrieval k, prompt augmentation in the seed's format, reflection."""

import pytest

from engine.flex.memory import (
    FlexConfig,
    FlexMemory,
    augment,
    failure_reason,
)
from engine.errors import ConfigError


def _library(fixed_embedder, at_sim, sims, **cfg):
    vecs = {"q": (1.0, 0.0)}
    vecs.update({f"p{i}": at_sim(s) for i, s in enumerate(sims)})
    emb = fixed_embedder(vecs)
    mem = FlexMemory(FlexConfig(**{"retrieval": "embedding", **cfg}), embedder=emb)
    n = len(sims)
    if n:
        mem.apply([{
            "problem": [f"p{i}" for i in range(n)], "solution": [f"s{i}" for i in range(n)],
            "correct": [i % 2 == 0 for i in range(n)], "reflection": [f"r{i}" for i in range(n)],
            "failure_reason": ["" if i % 2 == 0 else "Incorrect Logic" for i in range(n)], "source": ["rule"] * n,
        }])
    return mem


def test_retrieval_returns_top_k_by_similarity(fixed_embedder, at_sim):
    mem = _library(fixed_embedder, at_sim, [0.2, 0.9, 0.5, 0.95, 0.7], k=3)
    hits = mem.reader(mem.snapshot()).retrieve(["q"])[0]
    assert [h.id for h in hits] == [3, 1, 4]
    mem5 = _library(fixed_embedder, at_sim, [0.2, 0.9, 0.5, 0.95, 0.7, 0.1], k=5)
    assert [h.id for h in mem5.reader(mem5.snapshot()).retrieve(["q"])[0]] == [3, 1, 4, 2, 0]


def test_retrieval_returns_everything_when_library_is_smaller_than_k(fixed_embedder, at_sim):
    mem = _library(fixed_embedder, at_sim, [0.3, 0.8], k=3)
    assert [h.id for h in mem.reader(mem.snapshot()).retrieve(["q"])[0]] == [1, 0]
    empty = _library(fixed_embedder, at_sim, [], k=3)
    assert empty.reader(empty.snapshot()).retrieve(["q"]) == [[]]


def test_prompt_augmentation_is_the_seeds_format(fixed_embedder, at_sim):
    want = (
        "You have access to relevant past experiences. Use insights from successes:\n\n"
        "Example 1 - Success:\nProblem: P1\nSolution: S1\nKey insight: R1\n\n"
        "Learn from past mistakes:\n\n"
        "Past Mistake 1:\nProblem: P2\nFailed attempt: S2\nWhy it failed: Incorrect Logic\n"
    )
    assert augment([("P1", "S1", "R1")], [("P2", "S2", "Incorrect Logic")]) == want
    assert augment([], []) == ""
    mem = _library(fixed_embedder, at_sim, [0.9, 0.8], k=3)
    reader = mem.reader(mem.snapshot())
    text = reader.format(reader.retrieve(["q"])[0])
    assert "Example 1 - Success:\nProblem: p0\nSolution: s0\nKey insight: r0" in text
    assert "Past Mistake 1:\nProblem: p1\nFailed attempt: s1\nWhy it failed: Incorrect Logic" in text
    no_fail = _library(fixed_embedder, at_sim, [0.9, 0.8], k=3, include_failures=False)
    r2 = no_fail.reader(no_fail.snapshot())
    assert "Past Mistake" not in r2.format(r2.retrieve(["q"])[0])


def test_rule_reflection_is_the_seeds_fallback(hashing, make_outcome, simulated):
    mem = FlexMemory(FlexConfig(), embedder=hashing)
    ups = mem.reader(mem.snapshot()).observe(
        [make_outcome("1 2 3 4", ("1 * 2 = 2; Answer: 1 * 2 * 3 * 4 = 24", True)), make_outcome("1 1 1 1", ("1 + 1 = 2", False)),
         make_outcome("2 2 2 2")], simulated)
    mem.apply(ups)
    snap = mem.snapshot()
    assert snap["reflection"].tolist() == ["Solution approach was sound", "Solution logic was flawed", "Solution logic was flawed"]
    assert snap["failure_reason"].tolist() == ["", "Incorrect Logic", "No Output Generated"]
    assert snap["correct"].tolist() == [True, False, False]
    assert snap["source"].tolist() == ["rule"] * 3
    assert failure_reason("TypeError: x") == "Syntax/Type Error"


def test_llm_reflection_uses_the_seeds_prompts(hashing, make_outcome, scripted):
    llm = scripted(lambda r: "Pairing to 6 and 4 works." if "correct" in r.prompt.splitlines()[0] else "")
    mem = FlexMemory(FlexConfig(), embedder=hashing)
    outs = [make_outcome("4 9 10 13", ("A", True), key="1"), make_outcome("1 1 1 1", ("B", False), key="2")]
    ups = mem.reader(mem.snapshot()).observe(outs, llm)
    prompts = [r.prompt for r in llm.batches[0]]
    # the seed's two reflection prompts, word for word (engine/prompts/baselines.toml)
    assert prompts[0] == ("Analyze why this solution was correct:\n\nProblem: 4 9 10 13\n\nSolution: A\n\n"
                          "Provide a brief reflection on what techniques made this solution work:")
    assert prompts[1] == ("Analyze why this solution failed:\n\nProblem: 1 1 1 1\n\nYour solution: B\n\n"
                          "Correct solution: (not available)\n\nIdentify the key mistake or misconception:")
    assert [r.max_tokens for r in llm.batches[0]] == [200, 200]
    assert ups[0]["reflection"].tolist() == ["Pairing to 6 and 4 works."] and ups[0]["source"].tolist() == ["llm"]
    assert ups[1]["reflection"].tolist() == ["Solution logic was flawed"] and ups[1]["source"].tolist() == ["rule-fallback"]


@pytest.mark.parametrize("k", [2, 6])
def test_k_outside_seed_range_is_rejected(k):
    with pytest.raises(ConfigError, match=r"flex.k must be in \[3, 5\]"):
        FlexConfig(k=k)
