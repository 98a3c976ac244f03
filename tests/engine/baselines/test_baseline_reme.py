"""ReMe against modelscope/ReMe@4dd90e4: what is extracted, what validation rejects, retrieval order, counters, pruning."""

import json

import numpy as np
import pytest

from engine.baselines.reme import (
    ReMeConfig,
    ReMeMemory,
    apply_rerank,
    extraction_jobs,
    format_memories,
    parse_experiences,
    parse_rerank,
    parse_rewrite,
    parse_validation,
    prune_mask,
)
from engine.errors import ConfigError


def fenced(value) -> str:
    return "```json\n" + json.dumps(value) + "\n```"


def test_prune_mask_matches_delete_memory_op():
    freq = np.array([5, 5, 4, 10, 0])
    util = np.array([2, 3, 0, 4, 0])
    assert prune_mask(freq, util, 5, 0.5).tolist() == [True, False, False, True, False]


def test_every_trajectory_is_extracted_plus_best_versus_worst(make_outcome):
    o = make_outcome("t", ("s1", True), ("f1", False), ("s2", True), ("f2", False), ("f1", False))  # f1 repeated
    jobs = extraction_jobs(o, ReMeConfig())
    assert [k for k, _ in jobs] == ["success", "failure", "success", "failure", "comparative"]
    hi, lo = jobs[-1][1]["higher"], jobs[-1][1]["lower"]
    # sorted(score, reverse=True) is stable: highest = the first success, lowest = the LAST failure
    assert hi.endswith("content=\ns1\n") and lo.endswith("content=\nf2\n")
    assert (jobs[-1][1]["higher_score"], jobs[-1][1]["lower_score"]) == ("1.00", "0.00")
    assert [k for k, _ in extraction_jobs(o, ReMeConfig(comparative=False))][-1] == "failure"
    assert [k for k, _ in extraction_jobs(make_outcome("t", ("a", True), ("b", True)), ReMeConfig())] == ["success", "success"]
    assert extraction_jobs(make_outcome("t"), ReMeConfig()) == []


def test_parse_experiences_like_parse_json_experience_response():
    good = fenced([{"when_to_use": "w", "experience": "e", "tags": []}, {"condition": "c2", "experience": "e2"}, {"experience": "no cond"}])
    assert parse_experiences(good) == [("w", "e"), ("c2", "e2")]
    assert parse_experiences(fenced({"when_to_use": "w", "experience": "e"})) == [("w", "e")]
    assert parse_experiences("no json at all") == []
    assert parse_experiences(json.dumps([{"when_to_use": "w", "experience": "e"}])) == [("w", "e")]  # bare JSON fallback


def test_validation_keeps_score_at_least_half_and_rejects_the_rest():
    assert parse_validation(fenced({"is_valid": True, "score": 0.5}), 0.5) == (True, 0.5)
    assert parse_validation(fenced({"is_valid": True, "score": 0.49}), 0.5) == (False, 0.49)
    assert parse_validation(fenced({"is_valid": False, "score": 0.9}), 0.5) == (False, 0.9)
    assert parse_validation("looks fine to me", 0.5) == (True, 0.5)  # no json block: the original's defaults
    assert parse_validation("```json\n{not json}\n```", 0.5) == (False, 0.0)  # parse error: rejected
    assert parse_validation(fenced([1, 2]), 0.5) == (False, 0.0)


def test_rerank_and_rewrite_parsing():
    assert parse_rerank(fenced({"ranked_indices": [2, 0], "reasoning": "r"})) == [2, 0]
    assert parse_rerank("best is 1 then 0") == [1, 0]
    assert apply_rerank(4, [2, 9, 0, 2]) == [2, 0, 2, 1, 3]  # out of range dropped (a repeat repeats), unranked appended
    assert parse_rewrite(fenced({"rewritten_context": "use 6 * 4"})) == "use 6 * 4"
    assert parse_rewrite("plain prose") == "plain prose"  # not JSON: the raw text
    assert parse_rewrite(fenced({"other": 1})) == fenced({"other": 1})  # no key: falls through to the raw text
    assert parse_rewrite(json.dumps({"other": 1})) == ""
    assert format_memories([("w", "c")]) == "Memory 1 :\n When to use: w\n Content: c\n"


def _stored(fixed_embedder, at_sim, rows, **cfg):
    vecs = {"q": (1.0, 0.0)}
    for k, (w, c) in rows.items():
        vecs[f"w{k}"], vecs[f"c{k}"] = at_sim(w), at_sim(c)
    emb = fixed_embedder(vecs)
    mem = ReMeMemory(ReMeConfig(**cfg), embedder=emb)
    names = list(rows)
    n = len(names)
    mem.table.append(emb.embed([f"w{k}" for k in names]), when_to_use=[f"w{k}" for k in names], content=[f"c{k}" for k in names],
                     kind=["success"] * n, source=["rule"] * n, score=[0.8] * n, freq=[0] * n, utility=[0] * n)
    mem.content.append(emb.embed([f"c{k}" for k in names]))
    return mem, names


ROWS = {"a": (0.9, 0.1), "b": (0.8, 0.9), "c": (0.7, 0.95), "d": (0.2, 1.0)}


def test_default_retrieval_recall_then_llm_rerank_then_rewrite(fixed_embedder, at_sim, scripted):
    mem, names = _stored(fixed_embedder, at_sim, ROWS, recall_k=3, top_k=2)

    def reply(r):
        text = r.messages[0]["content"]
        if "# Candidate Experiences (Total: 3)" in text:
            return fenced({"ranked_indices": [2, 1, 0]})
        return fenced({"rewritten_context": "REWRITTEN"})

    llm = scripted(reply)
    hits = mem.reader(mem.snapshot()).retrieve(["q"], llm=llm, episodes=["ep"], seeds=[3])[0]
    assert [names[h.id] for h in hits] == ["c", "b"]  # recall a, b, c by when_to_use; the LLM reverses; top 2
    assert [len(b) for b in llm.batches] == [1, 1] and llm.batches[0][0].episode == "ep"
    assert "Candidate 0:\nCondition: wa\nExperience: ca\n" in llm.batches[0][0].messages[0]["content"]
    assert "Memory 1 :\n When to use: wc\n Content: cc\n" in llm.batches[1][0].messages[0]["content"]
    assert mem.reader(mem.snapshot()).format(hits) == "REWRITTEN"


def test_recall_retrieval_and_the_engine_dense_option(fixed_embedder, at_sim):
    mem, names = _stored(fixed_embedder, at_sim, ROWS, recall_k=3, top_k=2, retrieval="recall")
    reader = mem.reader(mem.snapshot())
    hits = reader.retrieve(["q"])[0]
    assert [names[h.id] for h in hits] == ["a", "b"]
    assert reader.format(hits) == format_memories([("wa", "ca"), ("wb", "cb")])
    dense, _ = _stored(fixed_embedder, at_sim, ROWS, recall_k=3, top_k=2, retrieval="dense", rerank_weight=0.5)
    dh = dense.reader(dense.snapshot()).retrieve(["q"])[0]
    assert [names[h.id] for h in dh] == ["b", "c"] and [h.score for h in dh] == pytest.approx([0.85, 0.825], abs=1e-5)
    assert dh[0].text == "When to use: wb\nExperience: cb"


def test_summary_extracts_then_validates_in_two_batches(hashing, make_outcome, scripted):
    def reply(r):
        text = r.messages[0]["content"]
        if "# Task Memory to Validate" in text:
            return fenced({"is_valid": True, "score": 0.2 if "bad lesson" in text else 0.9})
        if "part of a successful trajectory" in text:
            return fenced([{"when_to_use": "numbers with 6 and 4", "experience": "multiply 6 by 4"}])
        if "part of a failed trajectory" in text:
            return fenced([{"when_to_use": "any", "experience": "bad lesson"}])
        return "no JSON here"  # the comparison: unusable -> rule fallback

    llm = scripted(reply)
    mem = ReMeMemory(ReMeConfig(), embedder=hashing)
    ups = mem.reader(mem.snapshot()).observe([make_outcome("4 6 1 1", ("6 * 4 = 24", True), ("6 + 4 = 10", False), key="3")], llm)
    assert [len(b) for b in llm.batches] == [3, 3]  # success, failure, comparison; then one validation per memory
    assert {r.episode for b in llm.batches for r in b} == {"3"}
    u = ups[0]
    assert u["kind"].tolist() == ["success", "comparative"]  # the failure memory scored 0.2 < 0.5: rejected
    assert u["source"].tolist() == ["llm", "rule-fallback"] and u["score"].tolist() == [0.9, 0.9]
    assert int(u["rejected"][0]) == 1 and int(u["extracted"][0]) == 3
    mem.apply(ups)
    assert len(mem.table) == 2 and mem.rejected == 1 and mem.snapshot()["content"][0] == "multiply 6 by 4"


def test_counters_and_pruning_over_rounds(hashing, make_outcome, simulated):
    mem = ReMeMemory(ReMeConfig(freq_threshold=5, utility_threshold=0.5, comparative=False), embedder=hashing)
    mem.apply(mem.reader(mem.snapshot()).observe([make_outcome("1 2 3 4", ("1 * 2 * 3 * 4 = 24", True))], simulated))
    assert len(mem.table) == 1 and mem.snapshot()["kind"].tolist() == ["success"]
    target = int(mem.table.id[0])
    empty = np.zeros(0, "U1")
    for ok in [True, False, False, True]:
        mem.apply([{"retrieved": np.array([target, target]), "success": np.array([ok]),
                    "when_to_use": empty, "content": empty, "kind": empty, "source": empty}])
    row = mem.table.rows([target])[0]
    assert mem.table.data["freq"][row] == 4 and mem.table.data["utility"][row] == 2  # once per episode
    mem.apply([{"retrieved": np.array([target]), "success": np.array([False]),
                "when_to_use": empty, "content": empty, "kind": empty, "source": empty}])
    assert target not in mem.table.id.tolist() and mem.pruned == 1  # freq 5, utility 2: 0.4 < 0.5
    assert len(mem.content) == len(mem.table)


@pytest.mark.parametrize("kw, match", [({"top_k": 0}, "top_k"), ({"freq_threshold": 0}, "freq_threshold"),
                                       ({"utility_threshold": 1.5}, "utility_threshold"), ({"rerank_weight": -0.1}, "rerank_weight"),
                                       ({"retrieval": "llm-rerank"}, "retrieval"), ({"validation_threshold": 2.0}, "validation_threshold")])
def test_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        ReMeConfig(**kw)
