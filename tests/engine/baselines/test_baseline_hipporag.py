"""HippoRAG 2 re-implementation, pinned to OSU-NLP-Group/HippoRAG@c617143 (HippoRAG.py, misc_utils.py)."""

import json

import networkx as nx
import numpy as np
import pytest

from engine.baselines import hipporag as hr
from engine.baselines.docmem import drive, run_rule
from engine.baselines.hipporag import HippoRAGConfig, HippoRAGMemory
from engine.embed import HashingEmbedder
from engine.errors import ConfigError

from .conftest import FixedEmbedder, ScriptedLLM


def test_text_processing_min_max_and_triple_filter_follow_the_original():
    assert hr.text_processing("  Radio-City's FM!  ") == "radio city s fm"
    assert hr.min_max_normalize(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert hr.min_max_normalize(np.array([0.3, 0.3])).tolist() == [1.0, 1.0]  # range 0 -> ones
    got = hr.filter_invalid_triples([["a", "b", "c"], ["a", "b"], ["a", "b", "c"], ["x", "y", "z", "w"], ["d", "e", "f"]])
    assert got == [["a", "b", "c"], ["d", "e", "f"]]  # exactly three elements, unique, order kept


@pytest.mark.parametrize("damping", [0.5, 0.85])
def test_personalized_pagerank_matches_networkx(damping):
    # undirected weighted graph with a multi-edge (weights sum) and a dangling node 4
    edges = {(0, 1): 2.0, (1, 0): 1.0, (1, 2): 0.5, (2, 3): 1.0, (0, 3): 0.25}
    w = np.zeros((5, 5))
    g = nx.Graph()
    g.add_nodes_from(range(5))
    for (a, b), v in edges.items():
        w[a, b] += v
        w[b, a] += v
        g.add_edge(a, b, weight=g.get_edge_data(a, b, {"weight": 0.0})["weight"] + v)
    reset = np.array([0.6, 0.0, 0.0, 0.1, 0.3])
    ours = hr.personalized_pagerank(w, reset, damping)
    ref = nx.pagerank(g, alpha=damping, personalization=dict(enumerate(reset)), weight="weight", tol=1e-14, max_iter=10_000)
    np.testing.assert_allclose(ours, [ref[i] for i in range(5)], atol=1e-9)
    assert abs(ours.sum() - 1.0) < 1e-9


def _openie(passages):
    """A scripted OpenIE: NER answers and triple answers per passage text."""
    def reply(req):
        system, last = req.messages[0]["content"], req.messages[-1]["content"]
        for p, (ents, triples) in passages.items():
            if system.startswith("Your task is to extract named entities") and last == p:
                return json.dumps({"named_entities": ents})
            if system.startswith("Your task is to construct an RDF") and p in last:
                return json.dumps({"triples": triples})
        return "not json"
    return reply


P1 = "Alice Smith leads Acme Corp."
P2 = "Acme Corp builds rockets."
P3 = "Bananas are yellow."
SCRIPT = {P1: (["Alice Smith", "Acme Corp"], [["Alice Smith", "leads", "Acme Corp"], ["Alice Smith", "leads"]]),
          P2: (["Acme Corp"], [["Acme Corp", "builds", "rockets"], ["Alice Smith", "leads", "Acme Corp"]]),
          P3: (["Bananas"], [["Bananas", "are", "yellow"]])}


def test_index_builds_the_originals_graph_statistics():
    m = HippoRAGMemory(embedder=HashingEmbedder(256))
    llm = ScriptedLLM(_openie(SCRIPT))
    drive([m.add([P1, P2, P3], mode="llm", key="q")], llm)
    assert [len(b) for b in llm.batches] == [3, 3]  # NER for all passages in one call, then triples in one call
    assert m.facts == [("alice smith", "leads", "acme corp"), ("acme corp", "builds", "rockets"), ("bananas", "are", "yellow")]
    # add_fact_edges: +1 in both directions per (passage, triple); the triple seen in two passages counts twice
    assert m.edges[("e:alice smith", "e:acme corp")] == 2.0 and m.edges[("e:acme corp", "e:alice smith")] == 2.0
    # add_passage_edges: passage -> each phrase of its triples, weight 1
    assert m.edges[("p:1", "e:rockets")] == 1.0 and m.edges[("p:1", "e:alice smith")] == 1.0
    assert m.phrase_passages["acme corp"] == {0, 1} and m.phrase_passages["yellow"] == {2}
    assert [o["source"] for o in m.openie] == ["llm"] * 3
    # the same passage again is not re-indexed (hash-id de-duplication): no LLM call
    drive([m.add([P2], mode="llm", key="q")], llm)
    assert len(llm.batches) == 2 and len(m.passages) == 3


def test_synonymy_edges_need_the_threshold_and_three_alphanumerics():
    vec = {"x1": (1, 0, 0), "x2": (1, 0, 0), "ab": (1, 0, 0), "s1": (0.81, 0.5864, 0), "s2": (0.79, 0.6131, 0)}
    emb = FixedEmbedder(vec)
    m = HippoRAGMemory(HippoRAGConfig(synonymy_edge_sim_threshold=0.8), embedder=emb)
    m.phrases = ["x1", "s1", "s2"]
    m.phrase_emb = emb.embed(m.phrases)
    m._synonymy_edges()
    assert ("e:x1", "e:s1") not in m.edges  # "x1" has only two alphanumerics: no synonymy edges from it
    m.phrases = ["x1aa", "s1", "s2"]
    m.phrase_emb = emb.embed(["x1", "s1", "s2"])
    m.edges.clear()
    m._synonymy_edges()
    assert m.edges[("e:x1aa", "e:s1")] == pytest.approx(0.81, abs=1e-3)  # cosine >= 0.8
    assert ("e:x1aa", "e:s2") not in m.edges  # 0.79 < 0.8


def test_retrieval_reset_weights_and_graph_ranking(monkeypatch):
    m = HippoRAGMemory(HippoRAGConfig(top_k=3), embedder=HashingEmbedder(256))
    drive([m.add([P1, P2, P3], mode="llm")], ScriptedLLM(_openie(SCRIPT)))
    seen = {}
    real = hr.personalized_pagerank

    def spy(w, reset, damping):
        seen["reset"], seen["damping"] = reset.copy(), damping
        return real(w, reset, damping)

    monkeypatch.setattr(hr, "personalized_pagerank", spy)
    query = "Who leads Acme Corp?"
    hits = m.retrieve(query)
    names = m.nodes()
    fs = m.fact_scores(query)
    top = m.top_facts(fs)
    assert top == np.argsort(fs)[::-1].tolist()  # 3 facts <= linking_top_k: all, best first
    # phrase weight = mean over the facts holding it of fact score / passages holding the phrase
    want = {}
    for fi in top:
        s, _, o = m.facts[fi]
        for ph in (s, o):
            want.setdefault(ph, []).append(fs[fi] / len(m.phrase_passages[ph]))
    for ph, vals in want.items():
        assert seen["reset"][names.index(f"e:{ph}")] == pytest.approx(np.mean(vals)) or np.mean(vals) == 0
    dense = hr.min_max_normalize(m.dense_scores(query))
    for i in range(3):  # passage weight = normalised dense score x passage_node_weight
        assert seen["reset"][names.index(f"p:{i}")] == pytest.approx(dense[i] * 0.05)
    assert seen["damping"] == 0.5
    assert [h.id for h in hits][0] in (0, 1) and hits[-1].id == 2  # the Acme passages outrank the banana one
    assert hits[0].extra["graph_seeds"]


def test_no_fact_falls_back_to_dense_passage_retrieval():
    m = HippoRAGMemory(HippoRAGConfig(top_k=2), embedder=HashingEmbedder(256))
    drive([m.add(["alpha beta", "gamma delta"], mode="llm")], ScriptedLLM(lambda r: "{}"))
    assert m.facts == [] or all(o["source"] == "rule-fallback" for o in m.openie)
    m2 = HippoRAGMemory(HippoRAGConfig(top_k=2), embedder=HashingEmbedder(256))
    run_rule(m2.add(["alpha beta", "gamma delta"]))  # no capitalised phrase: no entity, no fact
    assert m2.facts == []
    hits = m2.retrieve("gamma delta")
    assert [h.id for h in hits] == [1, 0]


def test_rule_answers_equal_the_simulated_replies():
    ents = hr.rule_entities(P1)
    assert ents == ["Alice Smith", "Acme Corp"]
    assert json.loads(hr.simulated_reply(list(hr.ner_messages(P1)))) == {"named_entities": ents}
    assert json.loads(hr.simulated_reply(list(hr.triple_messages(P1, ents)))) == {"triples": hr.rule_triples(P1, ents)}
    assert hr.simulated_reply([{"role": "user", "content": "hello"}]) is None


def test_bad_config_raises():
    with pytest.raises(ConfigError, match="hipporag.damping"):
        HippoRAGConfig(damping=1.0)
    with pytest.raises(ConfigError, match="hipporag.top_k"):
        HippoRAGConfig(top_k=0)
