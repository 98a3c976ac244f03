"""LightMem re-implementation, pinned to zjunlp/LightMem@8fc9a91 (lightmem.py, short_term_memory.py, openai.py)."""

import json
from datetime import datetime, timedelta

import numpy as np
import pytest

from engine.baselines import lightmem as lm
from engine.baselines.docmem import drive, run_rule
from engine.baselines.lightmem import LightMemConfig, LightMemMemory
from engine.errors import ConfigError

from .conftest import FixedEmbedder, ScriptedLLM

T = datetime(2025, 3, 1, 12)


def test_extraction_prompt_format_and_fact_timestamps():
    emb = FixedEmbedder({"Alice works at Acme.": (1, 0), "Bob likes tea.": (0, 1)})
    m = LightMemMemory(embedder=emb)
    answer = {"data": [{"source_id": 1, "fact": "Bob likes tea."}, {"source_id": 0, "fact": "Alice works at Acme."}]}
    llm = ScriptedLLM(lambda r: json.dumps(answer))
    drive([m.add(["Alice: I work at Acme", "Bob: tea please"], mode="llm", when=T)], llm)
    (req,) = llm.batches[0]
    assert req.messages[0]["content"] == lm.baseline_prompts.render("lightmem_extraction")
    assert req.messages[1]["content"] == ("--- Topic 1 ---\n[2025-03-01T12:00:00.000, Sat] 0.user: Alice: I work at Acme\n"
                                          "[2025-03-01T12:00:00.500, Sat] 1.user: Bob: tea please")
    by = {e["memory"]: e["time"] for e in m.entries}
    assert by == {"Bob likes tea.": T + timedelta(milliseconds=500), "Alice works at Acme.": T}
    assert len(llm.batches) == 1  # orthogonal facts: no update queue above 0.8, no update call


def test_buffer_overflow_flushes_before_adding_and_force_extract_flushes_the_rest():
    m = LightMemMemory(LightMemConfig(buffer_tokens=5), embedder=FixedEmbedder({"x": (1, 0)}))
    job = m.add(["one two three"], mode="rule", when=T, force_extract=False)
    run_rule(job)
    assert m.entries == [] and m.buffer_tokens == 3  # under the threshold: buffered, no extraction
    llm = ScriptedLLM(lambda r: json.dumps({"data": []}))
    drive([m.add(["four five six"], mode="llm", when=T, force_extract=True)], llm)
    # 3 + 3 > 5: the buffered segment is extracted first, then force_extract sends the new one
    assert [r.messages[1]["content"].count(".user:") for b in llm.batches for r in b] == [1, 1]
    assert "--- Topic 1 ---" in llm.batches[0][0].messages[1]["content"]
    assert "--- Topic 2 ---" in llm.batches[1][0].messages[1]["content"]


def _store(vectors, times):
    emb = FixedEmbedder(vectors)
    m = LightMemMemory(embedder=emb)
    for i, (text, t) in enumerate(zip(vectors, times)):
        m.entries.append({"id": i, "memory": text, "time": t, "source": "rule", "update_queue": [],
                          "vector": emb.embed([text])[0]})
    m.next_id = len(m.entries)
    return m


def test_update_queues_hold_not_newer_neighbours_and_the_threshold_selects_targets():
    m = _store({"old fact": (1, 0), "new fact": (0.9, 0.43589), "unrelated": (0, 1)}, [T, T + timedelta(hours=1), T])
    m.construct_update_queues()
    q = {e["memory"]: [(c["id"], round(c["score"], 3)) for c in e["update_queue"]] for e in m.entries}
    assert q["old fact"] == [(2, 0.0)]  # entry 1 is newer: never in the old entry's queue
    assert q["new fact"][0] == (0, 0.9)  # the newer entry lists the older, similar one
    assert [o["memory"] for o in m.update_sources(m.entries[0])] == ["new fact"]  # 0.9 >= 0.8
    assert m.update_sources(m.entries[2]) == []  # 0.436 < 0.8


@pytest.mark.parametrize("answer, want", [({"action": "delete"}, ["new fact", "unrelated"]),
                                          ({"action": "update", "new_memory": "merged fact"}, ["merged fact", "new fact", "unrelated"]),
                                          ({"action": "ignore"}, ["old fact", "new fact", "unrelated"]),
                                          ("garbage", ["old fact", "new fact", "unrelated"])])
def test_offline_update_applies_the_decision_to_the_target(answer, want):
    m = _store({"old fact": (1, 0), "new fact": (0.9, 0.43589), "unrelated": (0, 1)}, [T, T + timedelta(hours=1), T])
    m.construct_update_queues()
    llm = ScriptedLLM(lambda r: answer if isinstance(answer, str) else json.dumps(answer))
    drive([m.offline_update("llm", "k", 0)], llm)
    (req,) = llm.batches[0]  # one target (the old fact), one call
    assert req.messages[1]["content"] == "Target memory:old fact\nCandidate memories:\n- new fact"
    assert m.texts() == want


def test_retrieval_is_cosine_top_k():
    m = _store({"a": (1, 0), "b": (0.6, 0.8), "c": (0, 1)}, [T, T, T])
    m.config = LightMemConfig(top_k=2)
    m.embedder.vectors["q"] = np.array([1, 0], np.float32)
    assert [h.id for h in m.retrieve("q")] == [0, 1]


def test_rule_answers_equal_the_simulated_replies():
    user = lm.extraction_user_prompt([[(0, "Alpha rose.", T), (1, "Beta fell.", T)]], 1)
    msgs = [{"role": "system", "content": lm.baseline_prompts.render("lightmem_extraction")}, {"role": "user", "content": user}]
    assert json.loads(lm.simulated_reply(msgs)) == {"data": lm.rule_facts(user)}
    assert lm.rule_facts(user) == [{"source_id": 0, "fact": "Alpha rose."}, {"source_id": 1, "fact": "Beta fell."}]
    up = [{"role": "system", "content": lm.baseline_prompts.render("lightmem_update")},
          {"role": "user", "content": lm.update_user_prompt("Alpha rose.", ["alpha  rose.", "x"])}]
    assert json.loads(lm.simulated_reply(up)) == {"action": "delete"}  # a newer identical text supersedes


def test_bad_config_raises():
    with pytest.raises(ConfigError, match="lightmem.keep_top_n"):
        LightMemConfig(keep_top_n=30)
