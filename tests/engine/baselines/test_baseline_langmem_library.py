"""LangMem through its real library (langmem 0.0.30): its prompts, tools and store, driven by the engine's LLM."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("langmem")

from engine.baselines import langmem_library as ll  # noqa: E402
from engine.baselines.docmem import drive, run_rule  # noqa: E402
from engine.baselines.langmem_library import LangMemLibraryConfig, LangMemLibraryMemory  # noqa: E402
from engine.embed import HashingEmbedder  # noqa: E402
from engine.errors import ConfigError  # noqa: E402

from .conftest import ScriptedLLM  # noqa: E402

_IDS = re.compile(r'<instance id=([0-9a-f]+) schema_type="Memory">\n(.*)\n</instance>')


def _tool_names(request) -> list[str]:
    calls = request.constraint.schema["properties"]["tool_calls"]["items"]
    return [c["properties"]["name"]["enum"][0] for c in calls.get("anyOf", [calls])]


def _memory(top_k: int = 10) -> LangMemLibraryMemory:
    return LangMemLibraryMemory(LangMemLibraryConfig(top_k=top_k), embedder=HashingEmbedder(128))


def _answer(*calls) -> str:
    return json.dumps({"content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]})


def _existing(request) -> dict[str, str]:
    """content -> store key of the instances trustcall shows in the system message."""
    return {eval(body)["content"]: key for key, body in _IDS.findall(request.messages[0]["content"])}  # noqa: S307


def test_the_first_call_is_langmems_own_prompt_with_the_memory_tool():
    from langmem.knowledge.extraction import _MEMORY_INSTRUCTIONS

    m = _memory()
    llm = ScriptedLLM(lambda r: _answer(("Memory", {"content": "Rates held at 5.25%."})))
    drive([m.add(["The Fed held rates at 5.25%.", "CPI rose 0.4%."], mode="llm", key="q1", seed=3)], llm)
    ((req,),) = llm.batches
    system, user = req.messages
    assert system["content"].startswith("You are a memory subroutine for an AI.\n\n# Tools")
    assert user["content"].startswith(_MEMORY_INSTRUCTIONS + "\n\nEnrich, prune, and organize memories")
    assert "The Fed held rates at 5.25%.\nCPI rose 0.4%." in user["content"]  # merge_message_runs: one human turn
    assert _tool_names(req) == ["Memory"] and req.constraint.kind == "tool_calls"
    assert req.episode == "q1" and req.seed == 3 and req.temperature == 0.0
    assert m.texts() == ["Rates held at 5.25%."] and m.calls == 1


def test_tool_calls_insert_patch_and_remove_through_trustcall():
    m = _memory()
    drive([m.add(["a"], mode="llm")], ScriptedLLM(lambda r: _answer(("Memory", {"content": "Rates are 5%."}),
                                                                     ("Memory", {"content": "Oil is $80."}))))
    assert sorted(m.texts()) == ["Oil is $80.", "Rates are 5%."]
    seen = []

    def update(req):
        seen.append(req)
        ids = _existing(req)
        return _answer(("PatchDoc", {"json_doc_id": ids["Rates are 5%."], "planned_edits": "new rate",
                                     "patches": [{"op": "replace", "path": "/content", "value": "Rates are 5.5%."}]}),
                       ("RemoveDoc", {"json_doc_id": ids["Oil is $80."]}),
                       ("Memory", {"content": "Gold rose."}))

    drive([m.add(["Rates rose to 5.5%; oil is no longer tracked; gold rose."], mode="llm")], ScriptedLLM(update))
    (req,) = seen
    assert _tool_names(req) == ["PatchDoc", "Memory", "RemoveDoc"]  # _ExtractUpdates with inserts and deletes
    assert req.constraint.schema["properties"]["tool_calls"]["minItems"] == 1  # its tool_choice "any"
    assert "Generate JSONPatches to update the existing schema instances." in req.messages[0]["content"]
    assert sorted(m.texts()) == ["Gold rose.", "Rates are 5.5%."]
    assert m.tool_stats.as_dict() == {"answers": 2, "calls": 5, "dropped": 0, "failed": 0}


def test_an_unusable_answer_writes_nothing_and_is_counted():
    m = _memory()
    drive([m.add(["x"], mode="llm")], ScriptedLLM(lambda r: "I cannot use tools."))
    assert m.texts() == [] and m.tool_stats.failed == 1
    drive([m.add(["x"], mode="llm")], ScriptedLLM(lambda r: _answer(("Forget", {}), ("Memory", {"text": "no"}))))
    assert m.texts() == [] and m.tool_stats.dropped == 2


def test_prompts_are_reproducible_from_the_seed():
    def first_request(seed):
        m, llm = _memory(), ScriptedLLM(lambda r: _answer())
        drive([m.add(["same session"], mode="llm", seed=seed)], llm)
        return llm.batches[0][0]

    a, b, c = first_request(1), first_request(1), first_request(2)
    assert a.messages == b.messages and a.messages != c.messages  # the <session_uuid> tag is seeded
    assert re.search(r"<session_[0-9a-f-]{36}>", a.messages[1]["content"])


def test_rule_mode_is_the_simulated_answer_through_the_library():
    sessions = [["Rates rose.", "Oil fell."], ["Oil fell.", "Gold rose."]]
    rule, llm_mem = _memory(), _memory()
    for i, s in enumerate(sessions):
        run_rule(rule.add(s, seed=i))
        drive([llm_mem.add(s, mode="llm", seed=i)], ScriptedLLM(lambda r: ll.simulated_reply(r.messages)))
    assert sorted(rule.texts()) == sorted(llm_mem.texts()) == ["Gold rose.", "Oil fell.", "Rates rose."]
    assert ll.simulated_reply([{"role": "system", "content": "You are a memory subroutine for an AI."}]) is None


def test_retrieve_is_search_memory_over_the_stores_cosine():
    m = _memory(top_k=2)
    facts = ["Rates rose in March.", "Oil fell sharply.", "Rates may fall in June."]
    drive([m.add(facts, mode="llm")], ScriptedLLM(lambda r: _answer(*[("Memory", {"content": f}) for f in facts])))
    hits = m.retrieve("rates")
    emb = m.embedder
    # InMemoryStore embeds the whole value (index fields "$"): json.dumps(value, sort_keys=True)
    docs = {f: json.dumps({"content": {"content": f}, "kind": "Memory"}, sort_keys=True) for f in facts}
    want = sorted(facts, key=lambda f: -float(emb.embed([docs[f]])[0] @ emb.embed(["rates"])[0]))[:2]
    assert [h.text for h in hits] == want
    assert hits[0].score == pytest.approx(float(emb.embed([docs[want[0]]])[0] @ emb.embed(["rates"])[0]), abs=1e-6)
    assert len({h.id for h in hits}) == 2 and all(isinstance(h.id, int) for h in hits)


def test_each_llm_call_is_one_batched_step_across_memories():
    mems = [_memory() for _ in range(3)]
    llm = ScriptedLLM(lambda r: _answer(("Memory", {"content": "fact"})))
    drive([m.add([f"q{i}"], mode="llm", key=f"q{i}") for i, m in enumerate(mems)], llm)
    assert [len(b) for b in llm.batches] == [3] and {r.episode for r in llm.batches[0]} == {"q0", "q1", "q2"}
    assert all(m.texts() == ["fact"] for m in mems)
    # trustcall's tool_choice: none for a first extraction (zero or more calls), "any" for updates (test above)
    assert "minItems" not in llm.batches[0][0].constraint.schema["properties"]["tool_calls"]


@pytest.mark.parametrize("kw, match", [({"top_k": 0}, "langmem.top_k must be >= 1"),
                                       ({"max_steps": 0}, "langmem.max_steps must be >= 1"),
                                       ({"max_calls": 0}, "langmem.max_calls must be >= 1")])
def test_bad_config_is_named(kw, match):
    with pytest.raises(ConfigError, match=match):
        LangMemLibraryConfig(**kw)


def test_empty_session_calls_nothing():
    m = _memory()
    assert run_rule(m.add(["", "  "])) == {"memories": 0}
    assert np.asarray(m.texts()).size == 0
