"""Mem0 on the real mem0ai library, offline: add/search round trip, replayed extraction, telemetry off."""

import json
import os
import pickle

import numpy as np
import pytest

pytest.importorskip("mem0")
pytest.importorskip("qdrant_client")
pytest.importorskip("faiss")

from engine.baselines.common import Attempt, Outcome  # noqa: E402
from engine.baselines.mem0 import Mem0Config, Mem0Memory  # noqa: E402
from engine.errors import StoreError  # noqa: E402


class Simulated:
    """With the simulated backend's capability: extraction 'auto' resolves to the rule, no LLM call."""

    name = "simulated"
    answers_any_prompt = False

    def generate(self, requests):  # pragma: no cover - must not be called
        raise AssertionError("rule-based extraction must not call the LLM")


def outcome(task, *attempts, key="0"):
    ok = any(a[1] for a in attempts)
    return Outcome(key=key, seed=1, task=task, attempts=tuple(Attempt(t, s) for t, s in attempts), success=ok, reward=1.0 if ok else -1.0)

OUTCOMES = [
    ("1 2 3 4", "1 * 2 = 2; 2 * 3 = 6; 6 * 4 = 24", True),
    ("4 9 10 13", "10 - 4 = 6; 13 - 9 = 4; 6 * 4 = 24", True),
    ("1 1 1 1", "1 + 1 = 2; 2 + 1 = 3; 3 + 1 = 4", False),
]


@pytest.fixture(scope="module")
def filled():
    from engine.embed import HashingEmbedder


    mem = Mem0Memory(Mem0Config(), embedder=HashingEmbedder(64))
    ups = mem.reader(mem.snapshot()).observe([outcome(t, (a, ok), key=str(i)) for i, (t, a, ok) in enumerate(OUTCOMES)], Simulated())
    mem.apply(ups)
    return mem, ups


def test_telemetry_is_off_and_memories_are_stored(filled):
    from mem0.memory import telemetry

    mem, ups = filled
    assert telemetry.MEM0_TELEMETRY is False
    snap = mem.snapshot()
    assert snap["id"].tolist() == [0, 1, 2]
    assert snap["memory"][1] == "For the task 4 9 10 13, the approach '10 - 4 = 6; 13 - 9 = 4; 6 * 4 = 24' solved it."
    assert [u["source"].tolist() for u in ups] == [["rule"]] * 3


@pytest.mark.parametrize("query", ["1 2 3 4", "4 9 10 12", "1 1 1 2", "7 7 8 8"])
def test_snapshot_retrieval_equals_live_mem0_search(filled, query):
    mem, _ = filled
    got = mem.reader(mem.snapshot()).retrieve([query])[0]
    live = mem.search_live(query)
    assert [h.id for h in got] == [h.id for h in live]
    assert [h.score for h in got] == pytest.approx([h.score for h in live], abs=1e-4)
    if query == "1 2 3 4":
        assert got and got[0].id == 0


def test_mem0_deduplicates_a_repeated_memory(filled):
    mem, ups = filled
    before = len(mem.snapshot()["id"])
    mem.apply(ups[:1])
    assert len(mem.snapshot()["id"]) == before


def test_llm_extraction_is_the_library_own_call_and_is_replayed(hashing, scripted):
    from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, AGENT_CONTEXT_SUFFIX

    from engine.baselines.mem0 import MEM0_EXTRACTION

    llm = scripted(lambda r: json.dumps({"memory": [{"id": "0", "text": "Pair 6 with 4 to multiply to 24", "attributed_to": "assistant"}]})
                   if "4 9 10 13" in r.messages[1]["content"] else "not json")
    mem = Mem0Memory(Mem0Config(extraction="llm"), embedder=hashing)
    ups = mem.reader(mem.snapshot()).observe([outcome("4 9 10 13", ("x", True), key="5"), outcome("2 2 2 2", ("y", False), key="6")], llm)
    (batch,) = llm.batches
    assert [r.episode for r in batch] == ["5", "6"]
    r = batch[0]
    assert r.messages[0] == {"role": "system", "content": ADDITIVE_EXTRACTION_PROMPT + AGENT_CONTEXT_SUFFIX}  # agent-scoped
    assert "## New Messages\nuser: Task: 4 9 10 13\nassistant: x\nResult: solved\n" in r.messages[1]["content"]
    assert (r.max_tokens, r.temperature, r.top_p) == (2000, 0.1, 0.1)  # mem0 BaseLlmConfig defaults
    assert r.constraint == MEM0_EXTRACTION  # the library asked for response_format json_object
    assert [u["source"].tolist() for u in ups] == [["llm"], ["rule-fallback"]]
    mem.apply(ups)
    texts = mem.snapshot()["memory"].tolist()
    assert texts[0] == "Pair 6 with 4 to multiply to 24"
    assert texts[1].startswith("For the task 2 2 2 2")
    assert mem.memory.llm.queue == [] and mem.stale_prompts == 1  # episode 6's prompt was built before episode 5 wrote


def test_next_round_prompt_holds_the_session_messages_and_existing_memories(hashing, scripted):
    llm = scripted(lambda r: json.dumps({"memory": [{"id": "0", "text": "a fact about " + r.episode, "attributed_to": "assistant"}]}))
    mem = Mem0Memory(Mem0Config(extraction="llm"), embedder=hashing)
    mem.apply(mem.reader(mem.snapshot()).observe([outcome("4 9 10 13", ("x", True), key="a")], llm))
    mem.apply(mem.reader(mem.snapshot()).observe([outcome("4 9 10 12", ("y", False), key="b")], llm))
    user = llm.batches[1][0].messages[1]["content"]
    last_k = user.split("## Last k Messages\n", 1)[1].split("\n\n## ", 1)[0]
    assert last_k == "user: Task: 4 9 10 13\nassistant: x\nResult: solved\n"  # mem0's session history (last 10)
    existing = user.split("## Existing Memories\n", 1)[1].split("\n\n## ", 1)[0]
    assert json.loads(existing) == [{"id": "0", "text": "a fact about a"}]
    assert mem.stale_prompts == 0 and len(mem.snapshot()["memory"]) == 2


def test_pickled_copy_rebuilds_the_same_store(filled):
    mem, ups = filled
    copy = pickle.loads(pickle.dumps(mem))
    assert copy.memory is not None and copy.memory is not mem.memory
    a, b = mem.snapshot(), copy.snapshot()
    assert a["mem0_id"].tolist() == b["mem0_id"].tolist() and a["memory"].tolist() == b["memory"].tolist()
    assert [h.id for h in copy.search_live("1 2 3 4")] == [h.id for h in mem.search_live("1 2 3 4")]
    copy.apply(ups[:1])  # mem0's hash de-duplication survives the copy
    assert len(copy.snapshot()["id"]) == len(a["id"])
    copy.memory = None
    with pytest.raises(StoreError, match="no live mem0 store"):
        copy.apply(ups)


@pytest.mark.embed
def test_round_trip_with_minilm():
    pytest.importorskip("sentence_transformers")
    from engine.embed import EmbedConfig, make_embedder


    try:
        emb = make_embedder(EmbedConfig(backend="minilm"))
        emb.embed(["probe"])
    except Exception as exc:  # the model package is absent on this machine
        pytest.skip(f"MiniLM not available: {exc}")
    mem = Mem0Memory(Mem0Config(), embedder=emb)
    mem.apply(mem.reader(mem.snapshot()).observe([outcome("4 9 10 13", ("(10 - 4) * (13 - 9) = 24", True))], Simulated()))
    hits = mem.reader(mem.snapshot()).retrieve(["4 9 10 13"])[0]
    assert [h.id for h in hits] == [0] and hits[0].score > 0.5
    assert [h.id for h in mem.search_live("4 9 10 13")] == [0]


def test_context_overflow_names_the_remedy(hashing):
    from engine.errors import BackendError

    class Small:
        name = "local"

        def generate(self, requests):
            raise BackendError("request (8796 tokens) exceeds the available context size (2048 tokens)")

    mem = Mem0Memory(Mem0Config(extraction="auto"), embedder=hashing)
    with pytest.raises(BackendError, match=r'extraction = "rule"'):
        mem.reader(mem.snapshot()).observe([outcome("1 2 3 4", ("x", True))], Small())


def _rounds(mem, n_rounds=4, per_round=3):
    """Rounds of rule-extracted outcomes, one repeated task per round (mem0's hash de-duplication)."""
    for r in range(n_rounds):
        outs = [outcome(f"{r} {i} {i + 1} {2 * i}", (f"step {r}.{i}", (r + i) % 2 == 0), key=f"{r}.{i}") for i in range(per_round)]
        outs.append(outcome("1 2 3 4", ("1 * 2 = 2; 2 * 3 = 6; 6 * 4 = 24", True), key=f"{r}.dup"))
        mem.apply(mem.reader(mem.snapshot()).observe(outs, Simulated()))
    return mem


def test_kept_snapshot_equals_the_library_export(hashing):
    mem = _rounds(Mem0Memory(Mem0Config(), embedder=hashing))
    kept, full = mem.snapshot(), mem.export()
    assert len(kept["id"]) == 13  # 4 rounds x 3 new + the repeated memory once
    assert set(kept) == set(full)
    for k in kept:
        if kept[k].dtype.kind == "f":
            np.testing.assert_allclose(kept[k], full[k], atol=1e-6, err_msg=k)
        else:
            assert kept[k].tolist() == full[k].tolist(), k
    assert mem.snapshot() is kept  # unchanged version: the same arrays, no re-export


def test_faiss_and_qdrant_stores_agree(hashing):
    a = _rounds(Mem0Memory(Mem0Config(vector_store="faiss"), embedder=hashing))
    b = _rounds(Mem0Memory(Mem0Config(vector_store="qdrant"), embedder=hashing))
    assert a.snapshot()["memory"].tolist() == b.snapshot()["memory"].tolist()
    for q in ("1 2 3 4", "2 1 2 2", "0 0 1 0"):
        ha, hb = a.search_live(q), b.search_live(q)
        assert [h.id for h in ha] == [h.id for h in hb]
        assert [h.score for h in ha] == pytest.approx([h.score for h in hb], abs=1e-5)
        assert [h.id for h in a.reader(a.snapshot()).retrieve([q])[0]] == [h.id for h in ha]


def test_faiss_store_writes_nothing_to_disk(hashing):
    mem = _rounds(Mem0Memory(Mem0Config(vector_store="faiss"), embedder=hashing), n_rounds=1)
    store = mem.memory.vector_store
    assert type(store).__mro__[1].__name__ == "FAISS" and store.distance_strategy == "cosine"
    assert len(store.docstore) == 4
    assert not os.path.exists(os.path.dirname(os.path.dirname(store.path)))  # the private folder is gone


def test_vector_store_is_checked():
    with pytest.raises(ValueError, match="mem0.vector_store must be one of faiss, qdrant, got 'chroma'"):
        Mem0Config(vector_store="chroma")


class RecordingLLM:
    """A stand-in for a mem0 LLM provider: records what the library's add sends and answers with no memories."""

    def __init__(self):
        self.calls = []

    def generate_response(self, messages, response_format=None, **kwargs):
        self.calls.append(([dict(m) for m in messages], response_format))
        return json.dumps({"memory": []})


def test_captured_call_equals_the_library_own_add_and_changes_nothing(filled):
    """One capture mechanism (engine.baselines.mem0.capture_add) for the live store and a snapshot's scratch
    store; both equal what ``Memory.add`` sends a provider LLM, and neither store changes."""
    from engine.baselines.mem0 import conversation

    mem, _ = filled
    msgs = [{"role": "user", "content": "Task: 3 3 8 8"}, {"role": "assistant", "content": "8 / (3 - 8 / 3) = 24\nResult: solved"}]
    before = (mem._records(), mem._session())
    live = mem.library_call(msgs)
    assert (mem._records(), mem._session()) == before and mem.memory.llm.mode == "replay"
    reader = mem.reader(mem.snapshot())
    assert reader.library_call(msgs) == live  # the scratch store holds the same memories and session
    o = outcome("3 3 8 8", ("8 / (3 - 8 / 3) = 24", True))
    assert reader.library_messages(o) == reader.library_call(conversation(o))

    reference = pickle.loads(pickle.dumps(mem))  # the same records and session in a second Memory
    reference.memory.llm = RecordingLLM()
    reference.memory.add(msgs, agent_id=mem.config.agent_id, infer=True)
    ((messages, fmt),) = reference.memory.llm.calls
    assert live == (messages, fmt) and fmt == {"type": "json_object"}
    user = messages[1]["content"]
    assert "## Last k Messages\nuser: Task: 1 2 3 4\n" in user  # the earlier adds' session messages
    assert "For the task 4 9 10 13" in user.split("## Existing Memories\n", 1)[1].split("\n\n## ", 1)[0]


def test_dated_replaces_the_prompt_dates_and_the_digest_ignores_them(filled):
    from engine.baselines.mem0 import dated, prompt_digest
    from engine.errors import BackendError, InputError

    mem, _ = filled
    messages, _ = mem.library_call([{"role": "user", "content": "Task: 2 3 4 6"}])
    got = dated(messages, "2024-03-05")
    assert got[0] == messages[0]  # the system prompt is untouched
    assert got[1]["content"].endswith("## Observation Date\n2024-03-05\n\n## Current Date\n2024-03-05\n\n# Output:")
    assert messages[1]["content"] != got[1]["content"] and prompt_digest(messages) == prompt_digest(got)
    assert prompt_digest(got) != prompt_digest([got[0], {"role": "user", "content": got[1]["content"] + " "}])
    with pytest.raises(InputError, match="mem0 prompt date must be YYYY-MM-DD, got '5 March'"):
        dated(messages, "5 March")
    with pytest.raises(BackendError, match="has 0 date sections"):
        dated([{"role": "user", "content": "no dates here"}], "2024-03-05")
