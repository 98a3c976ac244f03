"""MemoryOS re-implementation, pinned to BAI-LAB/MemoryOS@1d71706 memoryos-pypi (mid_term.py, updater.py, retriever.py)."""

import json
import math
from datetime import datetime, timedelta

import pytest

from engine.baselines import memoryos as mos
from engine.baselines.docmem import drive, run_rule
from engine.baselines.memoryos import MemoryOSConfig, MemoryOSMemory
from engine.embed import HashingEmbedder
from engine.errors import ConfigError

from .conftest import ScriptedLLM

T = datetime(2025, 3, 1, 12)


def test_heat_is_alpha_visits_plus_beta_length_plus_gamma_recency():
    cfg = MemoryOSConfig()
    sess = {"N_visit": 2, "L_interaction": 3, "last_visit_time": T - timedelta(hours=24)}
    assert mos.segment_heat(sess, cfg, T) == pytest.approx(2 + 3 + math.exp(-1))
    assert sess["R_recency"] == pytest.approx(math.exp(-1))
    cfg2 = MemoryOSConfig(heat_alpha=0.5, heat_beta=2.0, heat_gamma=0.0)
    assert mos.segment_heat(sess, cfg2, T) == pytest.approx(0.5 * 2 + 2.0 * 3)


def _summary_llm(summaries):
    calls = []

    def reply(req):
        calls.append(req.messages[-1]["content"])
        return json.dumps(summaries[min(len(calls), len(summaries)) - 1])
    return reply, calls


def test_full_short_term_memory_moves_its_oldest_page_through_one_summary_call():
    m = MemoryOSMemory(MemoryOSConfig(short_term_capacity=3), embedder=HashingEmbedder(256))
    reply, calls = _summary_llm([[{"theme": "rates", "keywords": ["fed", "rates"], "content": "Fed rates"}],
                                 [{"theme": "rates", "keywords": ["fed", "rates"], "content": "Fed rates"}],
                                 [{"theme": "x", "keywords": ["bananas"], "content": "Bananas are yellow and sweet fruit"}]])
    llm = ScriptedLLM(reply)
    drive([m.add(["p0", "p1", "p2"], mode="llm", when=T, query="q")], llm)
    assert not llm.batches and [p["agent_response"] for p in m.short_term] == ["p0", "p1", "p2"]  # not full yet
    drive([m.add(["p3"], mode="llm", when=T, query="q")], llm)
    # add_memory migrates BEFORE adding: the oldest page leaves (is_full: len >= capacity), one multi-summary call
    assert len(calls) == 1 and "User: q\nAssistant: p0" in calls[0]
    assert [p["agent_response"] for p in m.short_term] == ["p1", "p2", "p3"]
    (sess,) = m.sessions.values()
    assert sess["summary"] == "Fed rates" and sess["summary_keywords"] == ["fed", "rates"]
    assert sess["L_interaction"] == 1 and sess["N_visit"] == 0
    # the same summary scores cos 1 + Jaccard 1 >= 0.6: the next evicted page joins that session
    drive([m.add(["p4"], mode="llm", when=T, query="q")], llm)
    assert len(m.sessions) == 1 and sess["L_interaction"] == 2
    assert [p["agent_response"] for p in sess["details"]] == ["p0", "p1"]
    # an unrelated summary (cosine + Jaccard < 0.6) opens a new session
    drive([m.add(["p5"], mode="llm", when=T, query="q")], llm)
    assert len(m.sessions) == 2


def test_two_summaries_insert_the_pages_under_each_and_garbage_uses_the_fallback():
    m = MemoryOSMemory(MemoryOSConfig(short_term_capacity=1, mid_term_similarity_threshold=5.0), embedder=HashingEmbedder(256))
    two = [{"theme": "a", "keywords": ["a"], "content": "alpha topic"}, {"theme": "b", "keywords": ["b"], "content": "beta topic"}]
    drive([m.add(["p0", "p1"], mode="llm", when=T, query="q")], ScriptedLLM(lambda r: json.dumps(two)))
    assert [s["summary"] for s in m.sessions.values()] == ["alpha topic", "beta topic"]
    assert all([p["agent_response"] for p in s["details"]] == ["p0"] for s in m.sessions.values())
    drive([m.add(["p2"], mode="llm", when=T, query="q")], ScriptedLLM(lambda r: "no json here"))
    last = list(m.sessions.values())[-1]
    assert last["summary"] == "General conversation segment from short-term memory." and last["summary_keywords"] == []


def test_retrieval_thresholds_queue_capacity_and_visit_counts():
    emb = HashingEmbedder(256)
    m = MemoryOSMemory(MemoryOSConfig(short_term_capacity=1, top_k=2, mid_term_similarity_threshold=5.0), embedder=emb)
    texts = ["inflation rose in march", "inflation fell in april", "inflation steady in may", "football scores today"]
    run_rule(m.add(texts, when=T, query="inflation"))
    assert [p["agent_response"] for p in m.short_term] == ["football scores today"]
    hits = m.retrieve("inflation rose", T + timedelta(hours=1))
    mid = [h for h in hits if h.extra["layer"] == "mid-term"]
    assert len(mid) == 2  # retrieval_queue_capacity
    assert [h.score for h in mid] == sorted((h.score for h in mid), reverse=True)
    assert mid[0].text == "inflation rose in march"
    assert all(h.score >= 0.1 for h in mid)
    assert [h.text for h in hits if h.extra["layer"] == "short-term"] == ["football scores today"]  # all of it, after
    visited = [s for s in m.sessions.values() if s["N_visit"] == 1]
    # a visit sets last_visit_time = now, so R_recency = 1: H = 1 visit + L + 1
    assert visited and all(s["H_segment"] == pytest.approx(1 + s["L_interaction"] + 1.0) for s in visited)
    assert all(s["H_segment"] == pytest.approx(s["L_interaction"] + 1.0) for s in m.sessions.values() if s["N_visit"] == 0)


def test_rule_summary_equals_the_simulated_reply():
    text = "User: q\nAssistant: The Fed raised rates. Markets fell."
    msgs = [{"role": "system", "content": mos.baseline_prompts.render("memoryos_multi_summary_system")},
            {"role": "user", "content": mos.baseline_prompts.render("memoryos_multi_summary_user", text=text)}]
    assert json.loads(mos.simulated_reply(msgs)) == mos.rule_summaries(text)
    assert mos.rule_summaries(text)[0]["content"] == "The Fed raised rates."


def test_bad_config_raises():
    with pytest.raises(ConfigError, match="memoryos.short_term_capacity"):
        MemoryOSConfig(short_term_capacity=0)
