"""A-MEM re-implementation, pinned to WujiangXu/A-mem@0c8039f memory_layer.py (add_note, process_memory, retrieval)."""

import json

import numpy as np
import pytest

from engine.baselines import amem
from engine.baselines.amem import AMemConfig, AMemMemory, MemoryNote
from engine.baselines.docmem import drive, run_rule
from engine.embed import HashingEmbedder
from engine.errors import ConfigError

from .conftest import ScriptedLLM


def _llm(analyses, evolutions):
    """Analysis answers by content, evolution answers in call order."""
    evo = iter(evolutions)

    def reply(req):
        if req.prompt.startswith("Generate a structured analysis"):
            content = req.prompt.rsplit("Content for analysis:\n", 1)[-1]
            return json.dumps(analyses[content])
        return next(evo)
    return ScriptedLLM(reply)


A = {"apple pie recipe": {"keywords": ["apple", "pie"], "context": "baking", "tags": ["food"]},
     "apple orchard harvest": {"keywords": ["apple", "orchard"], "context": "farming", "tags": ["agri"]},
     "stock market crash": {"keywords": ["stock"], "context": "finance", "tags": ["money"]}}
NO = json.dumps({"should_evolve": False, "actions": [], "suggested_connections": [], "tags_to_update": [],
                 "new_context_neighborhood": [], "new_tags_neighborhood": []})


def test_note_attributes_and_the_retriever_document():
    m = AMemMemory(embedder=HashingEmbedder(256))
    llm = _llm(A, [NO])
    drive([m.add(["apple pie recipe"], mode="llm", when="202503011200")], llm)
    (note,) = m.notes
    assert (note.keywords, note.context, note.tags, note.source) == (["apple", "pie"], "baking", ["food"], "llm")
    assert m.documents == ["content:apple pie recipe context:baking keywords: apple, pie tags: food"]
    assert [len(b) for b in llm.batches] == [1, 1]  # analysis, then evolution (with no neighbour)
    assert "The number of neighbors is 0." in llm.batches[1][0].prompt


def test_strengthen_links_and_replaces_tags_update_neighbor_rewrites_neighbours_in_order():
    m = AMemMemory(embedder=HashingEmbedder(256))
    strengthen = json.dumps({"should_evolve": True, "actions": ["strengthen", "update_neighbor"],
                             "suggested_connections": [0, 7], "tags_to_update": ["fruit", "apple"],
                             "new_context_neighborhood": ["apple baking"], "new_tags_neighborhood": [["dessert"]]})
    llm = _llm(A, [NO, strengthen, "not json"])
    drive([m.add(["apple pie recipe", "apple orchard harvest", "stock market crash"], mode="llm")], llm)
    first, second, third = m.notes
    assert second.links == [0] and second.tags == ["fruit", "apple"]  # index 7 does not exist: not linked
    assert first.tags == ["dessert"] and first.context == "apple baking"  # neighbour 0 rewritten
    assert third.links == [] and third.tags == ["money"]  # unparseable evolution: no change (original returns False)
    assert m.evo_cnt == 1
    assert "memory index:0\t" in llm.batches[3][0].prompt  # the second note's evolution prompt lists note 0


def test_retrieval_returns_top_k_notes_each_followed_by_its_links():
    m = AMemMemory(AMemConfig(top_k=1), embedder=HashingEmbedder(256))
    m.notes = [MemoryNote("a"), MemoryNote("b"), MemoryNote("c", links=[0, 1])]
    m._index(["zzz", "yyy", "apple orchard"])
    hits = m.retrieve("apple orchard")
    assert [h.id for h in hits] == [2, 0, 1]  # k=1 note, then its links (j >= k break after two)
    assert hits[1].extra["linked_from"] == 2
    m.notes[2].links = [0, 1, 0, 1]
    assert [h.id for h in m.retrieve("apple orchard")] == [2, 0, 1]  # at most k + 1 links


def test_search_is_argsort_tail_reversed():
    m = AMemMemory(embedder=HashingEmbedder(256))
    m.notes = [MemoryNote(t) for t in ("x", "y", "z")]
    m._index(["red apple", "green pear", "red apple pie"])
    sims = m.doc_emb @ m.embedder.embed(["red apple"])[0]
    assert m.search("red apple", 2) == [int(i) for i in np.argsort(sims)[-2:][::-1]]
    assert m.search("red apple", 10) == [int(i) for i in np.argsort(sims)[::-1]]  # fewer than k: all


def test_consolidation_every_evo_threshold_rebuilds_the_documents():
    m = AMemMemory(AMemConfig(evo_threshold=2), embedder=HashingEmbedder(256))
    run_rule(m.add(["Apple pie recipe with apple.", "Apple orchard apple harvest.", "Apple cider apple press."]))
    assert m.evo_cnt == 2  # the rule strengthens links when a neighbour shares a keyword
    assert m.documents[0].startswith("Apple pie recipe with apple. , ")  # consolidated_document format
    assert m.notes[1].links == [0]


def test_rule_answers_equal_the_simulated_replies():
    content = "The Fed raised rates. Markets fell."
    prompt = amem.baseline_prompts.render("amem_analysis", content=content)
    assert json.loads(amem.simulated_reply([{"role": "user", "content": prompt}])) == amem.rule_analysis(content)
    notes = [MemoryNote("n0", keywords=["fed", "bank"]), MemoryNote("n1", keywords=["sports"])]
    evo = amem.baseline_prompts.render("amem_evolution", context="c", content="x", keywords=["fed", "rates"],
                                       nearest_neighbors_memories=amem.neighbour_block(notes, [0, 1]), neighbor_number=2)
    got = json.loads(amem.simulated_reply([{"role": "user", "content": evo}]))
    assert got == amem.rule_evolution(["fed", "rates"], ["fed", "rates"], [(0, ["fed", "bank"]), (1, ["sports"])])
    assert got["suggested_connections"] == [0] and got["tags_to_update"] == ["fed", "rates"]


def test_bad_config_raises():
    with pytest.raises(ConfigError, match="amem.evo_threshold"):
        AMemConfig(evo_threshold=0)
