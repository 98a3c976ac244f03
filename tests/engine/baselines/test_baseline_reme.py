"""ReMe: extraction kinds, recall + rerank, freq/utility counters and utility-based pruning."""

import json

import numpy as np
import pytest

from engine.baselines.reme import ReMeConfig, ReMeMemory, extraction_jobs, prune_mask
from engine.errors import ConfigError


def test_prune_mask_matches_rule():
    freq = np.array([5, 5, 4, 10, 0])
    util = np.array([2, 3, 0, 4, 0])
    # delete when freq >= 5 and utility / freq < 0.5
    assert prune_mask(freq, util, 5, 0.5).tolist() == [True, False, False, True, False]


def test_extraction_kinds(make_outcome):
    both = make_outcome("t", ("good", True), ("bad", False))
    assert [k for k, _ in extraction_jobs(both, True)] == ["success", "failure", "comparative"]
    assert [k for k, _ in extraction_jobs(both, False)] == ["success", "failure"]
    assert [k for k, _ in extraction_jobs(make_outcome("t", ("bad", False)), True)] == ["failure"]
    assert extraction_jobs(make_outcome("t"), True) == []


def test_counters_and_pruning_over_rounds(hashing, make_outcome, simulated):
    mem = ReMeMemory(ReMeConfig(freq_threshold=5, utility_threshold=0.5, comparative=False), embedder=hashing)
    mem.apply(mem.reader(mem.snapshot()).observe([make_outcome("1 2 3 4", ("1 * 2 * 3 * 4 = 24", True))], simulated))
    assert len(mem.table) == 1 and mem.snapshot()["kind"].tolist() == ["success"]
    target = int(mem.table.id[0])
    # Five later episodes retrieved that memory; successes T F F T F -> freq 5, utility 2 -> 0.4 < 0.5.
    for i, ok in enumerate([True, False, False, True]):
        upd = {"retrieved": np.array([target, target]), "success": np.array([ok]),
               "when_to_use": np.zeros(0, "U1"), "content": np.zeros(0, "U1"), "kind": np.zeros(0, "U1"), "source": np.zeros(0, "U1")}
        mem.apply([upd])
    row = mem.table.rows([target])[0]
    assert mem.table.data["freq"][row] == 4 and mem.table.data["utility"][row] == 2  # counted once per episode
    upd["success"] = np.array([False])
    mem.apply([upd])
    assert target not in mem.table.id.tolist() and mem.pruned == 1
    assert len(mem.content) == len(mem.table)


def test_recall_then_rerank(fixed_embedder, at_sim):
    # when_to_use similarity w and content similarity c to the query; score = 0.5 w + 0.5 c.
    rows = {"a": (0.9, 0.1), "b": (0.8, 0.9), "c": (0.7, 0.95), "d": (0.2, 1.0)}
    vecs = {"q": (1.0, 0.0)}
    for k, (w, c) in rows.items():
        vecs[f"w{k}"], vecs[f"c{k}"] = at_sim(w), at_sim(c)
    emb = fixed_embedder(vecs)
    mem = ReMeMemory(ReMeConfig(recall_k=3, top_k=2, rerank_weight=0.5), embedder=emb)
    names = list(rows)
    mem.table.append(emb.embed([f"w{k}" for k in names]), when_to_use=[f"w{k}" for k in names], content=[f"c{k}" for k in names],
                     kind=["success"] * 4, source=["rule"] * 4, freq=[0] * 4, utility=[0] * 4)
    mem.content.append(emb.embed([f"c{k}" for k in names]))
    hits = mem.reader(mem.snapshot()).retrieve(["q"])[0]
    # recall top 3 by when_to_use: a, b, c (d's 1.0 content never counts); rerank: b 0.85, c 0.825, a 0.5
    assert [names[h.id] for h in hits] == ["b", "c"]
    assert [h.score for h in hits] == pytest.approx([0.85, 0.825], abs=1e-5)
    assert hits[0].text == "When to use: wb\nExperience: cb"


def test_llm_extraction_parses_json_and_falls_back(hashing, make_outcome, scripted):
    def reply(r):
        if "SUCCESSFUL" in r.prompt:
            return "```json\n" + json.dumps([{"when_to_use": "numbers with a 6 and a 4", "experience": "multiply 6 by 4"}]) + "\n```"
        return "I cannot answer in JSON"

    llm = scripted(reply)
    mem = ReMeMemory(ReMeConfig(), embedder=hashing)
    ups = mem.reader(mem.snapshot()).observe([make_outcome("4 6 1 1", ("6 * 4 = 24", True), ("6 + 4 = 10", False), key="3")], llm)
    assert len(llm.batches) == 1 and len(llm.batches[0]) == 3 and {r.episode for r in llm.batches[0]} == {"3"}
    u = ups[0]
    assert u["kind"].tolist() == ["success", "failure", "comparative"]
    assert u["source"].tolist() == ["llm", "rule-fallback", "rule-fallback"]
    assert u["when_to_use"][0] == "numbers with a 6 and a 4" and u["content"][0] == "multiply 6 by 4"
    mem.apply(ups)
    assert len(mem.table) == 3


@pytest.mark.parametrize(
    "kw, match",
    [({"top_k": 11}, "top_k"), ({"freq_threshold": 0}, "freq_threshold"), ({"utility_threshold": 1.5}, "utility_threshold"),
     ({"rerank_weight": -0.1}, "rerank_weight")],
)
def test_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        ReMeConfig(**kw)
