"""LangMem re-implementation, pinned to langchain-ai/langmem@b5dbe4a (knowledge/extraction.py, utils.py)."""

import json

import pytest

from engine.baselines import langmem as lg
from engine.baselines.docmem import drive, run_rule
from engine.baselines.langmem import LangMemConfig, LangMemMemory
from engine.embed import HashingEmbedder
from engine.errors import ConfigError

from .conftest import ScriptedLLM


def test_dilated_windows_and_query_limit_four_use_the_last_message():
    msgs = ["m1", "m2", "m3", "m4", "m5"]
    assert lg.dilated_windows(msgs, 5 // 4) == [lg.conversation(["m5"])]
    assert lg.dilated_windows(msgs, 3) == [lg.conversation(m) for m in (["m5"], ["m4", "m5"], ["m2", "m3", "m4", "m5"])]
    assert lg.conversation(["hi"]).startswith("================================ Human Message")


def _store(texts):
    m = LangMemMemory(embedder=HashingEmbedder(256))
    run_rule(m.add(texts))
    return m


def test_rule_inserts_each_new_message_once():
    m = _store(["rates rose", "rates rose", "bananas"])
    assert m.texts() == ["rates rose", "bananas"] and m.ids == [0, 1]
    run_rule(m.add(["Rates   rose", "tea"]))
    assert m.texts() == ["rates rose", "bananas", "tea"]


def test_manager_sees_the_query_limit_best_memories_and_its_operations_apply():
    m = _store([f"fact number {i} about rates" for i in range(7)])
    seen = {}

    def reply(req):
        seen["user"] = req.messages[1]["content"]
        existing = json.loads(seen["user"].split('"content"}):\n', 1)[1].split("\n\n", 1)[0])
        seen["existing"] = existing
        a, b = existing[0]["id"], existing[1]["id"]
        return json.dumps({"operations": [{"action": "update", "id": a, "content": "updated rates fact"},
                                          {"action": "delete", "id": b}, {"action": "insert", "content": "new fact"},
                                          {"action": "delete", "id": "999"}]})

    llm = ScriptedLLM(reply)
    drive([m.add(["what about rates"], mode="llm")], llm)
    assert len(llm.batches) == 1 and len(seen["existing"]) == 5  # query_limit
    assert llm.batches[0][0].messages[0]["content"] == "You are a memory subroutine for an AI."
    assert lg.baseline_prompts.render("langmem_instructions").strip()[:60] in seen["user"]
    assert "<session>\n================================ Human Message" in seen["user"]
    a, b = int(seen["existing"][0]["id"]), int(seen["existing"][1]["id"])
    assert m.contents[m.ids.index(a)] == "updated rates fact"
    assert b not in m.ids and "new fact" in m.texts()
    assert len(m.ids) == 7  # 7 + 1 insert - 1 delete; the delete of an id it was not shown is refused
    assert [o["action"] for o in m.operations[7:]] == ["update", "delete", "insert"]  # after the 7 rule inserts


def test_deletes_can_be_disabled_and_garbage_falls_back_to_the_rule():
    m = LangMemMemory(LangMemConfig(enable_deletes=False), embedder=HashingEmbedder(256))
    run_rule(m.add(["a fact"]))
    drive([m.add(["b fact"], mode="llm")], ScriptedLLM(lambda r: json.dumps({"operations": [{"action": "delete", "id": "0"}]})))
    assert m.texts() == ["a fact"]
    drive([m.add(["c fact"], mode="llm")], ScriptedLLM(lambda r: "sorry"))
    assert m.texts() == ["a fact", "c fact"] and m.operations[-1]["source"] == "rule-fallback"


def test_retrieval_is_cosine_top_k():
    m = LangMemMemory(LangMemConfig(top_k=2), embedder=HashingEmbedder(256))
    run_rule(m.add(["inflation rose sharply", "football results", "inflation fell"]))
    hits = m.retrieve("inflation rose")
    assert [h.id for h in hits][0] == 0 and len(hits) == 2 and hits[0].score >= hits[1].score


def test_rule_answer_equals_the_simulated_reply():
    existing = [{"id": "3", "content": "b"}]
    msgs = list(lg.manager_messages(["a", "b"], existing))
    assert json.loads(lg.simulated_reply(msgs)) == {"operations": lg.rule_operations(["a", "b"], existing)}
    assert lg.rule_operations(["a", "b"], existing) == [{"action": "insert", "content": "a"}]


def test_bad_config_raises():
    with pytest.raises(ConfigError, match="langmem.query_limit"):
        LangMemConfig(query_limit=0)
