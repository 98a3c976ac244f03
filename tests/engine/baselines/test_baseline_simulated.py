"""The simulated Game-of-24 policy answers the baselines' own prompts in the formats their parsers expect."""

import json

import pytest

from engine.baselines import prompts as B
from engine.baselines.memrl import trajectory_text
from engine.baselines.reme import ReMeConfig, extraction_jobs, parse_experiences, parse_rerank, parse_rewrite, parse_validation
from engine.baselines.simulated import arithmetic_ok, reply
from engine.game24.simulated_policy import Game24Policy

POLICY = Game24Policy()
GOOD = "13 - 9 = 4 (left: 4 4 10); 10 - 4 = 6 (left: 4 6); 4 * 6 = 24 (left: 24); Answer: (13 - 9) * (10 - 4) = 24"
BAD = "4 + 9 = 14 (left: 10 13 14); 14 + 10 = 24 (left: 13 24); Answer: 4 + 9 + 10 = 24"


def answer(prompt):
    return POLICY.complete(prompt, seed=0, index=0, temperature=0.6)


def test_arithmetic_check():
    assert arithmetic_ok(GOOD) and not arithmetic_ok(BAD) and not arithmetic_ok("3 / 0 = 1")


def test_memrl_script_and_reflection(make_outcome):
    o = make_outcome("4 9 10 13", (GOOD, True))
    script = answer(B.render("memrl_script", trajectory=trajectory_text(o)))
    assert script.splitlines()[0] == "1. 13 - 9 = 4 (left: 4 4 10)" and script.splitlines()[-1].startswith("4. Answer:")
    refl = answer(B.render("memrl_reflection", task="1 1 1 1", trajectory=trajectory_text(make_outcome("1 1 1 1", ("1 + 1 = 2", False)))))
    assert refl.startswith("1. Incorrect assumptions") and "1 + 1 = 2" in refl


def test_reme_prompts_get_parseable_answers(make_outcome):
    o = make_outcome("4 9 10 13", (GOOD, True), (BAD, False))
    kinds, mems = [], []
    for kind, fields in extraction_jobs(o, ReMeConfig()):
        found = parse_experiences(answer(B.render(f"reme_{kind}", **fields)))
        assert len(found) == 1
        kinds.append(kind)
        mems.append(found[0])
    assert kinds == ["success", "failure", "comparative"]
    verdicts = [parse_validation(answer(B.render("reme_validation", condition=w, content=c)), 0.5)[0] for w, c in mems]
    assert verdicts == [True, False, False]  # the failure and the comparison quote 4 + 9 = 14
    ranked = parse_rerank(answer(B.render("reme_rerank", query="q", candidates="Candidate 0:\n...", num_candidates=3)))
    assert ranked == [0, 1, 2]
    original = "Memory 1 :\n When to use: w\n Content: c\n"
    assert parse_rewrite(answer(B.render("reme_rewrite", query="q", context="", original=original))).strip() == original.strip()


def test_mem0_user_prompt_gets_json():
    pytest.importorskip("mem0")
    from mem0.configs.prompts import generate_additive_extraction_prompt

    user = generate_additive_extraction_prompt(existing_memories=[], new_messages="user: Task: 4 9 10 13\nassistant: x\nResult: solved\n",
                                               last_k_messages=[])
    data = json.loads(answer(user))
    assert data["memory"][0]["text"] == "For Task: 4 9 10 13, the assistant answered: x; Result: solved" and data["memory"][0]["attributed_to"] == "assistant"


def test_other_prompts_are_not_baseline_prompts():
    assert reply("What is the capital of France?") is None
    assert answer("What is the capital of France?") == "I can only play the Game of 24."
