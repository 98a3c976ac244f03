"""Memory baselines (Mem0, MemRL, ReMe, FLEX and the paper's HippoRAG 2, MemoryOS, A-MEM, LightMem, LangMem) applied to the retrieved evidence, on the simulated forecaster."""

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from engine.embed import HashingEmbedder
from engine.errors import ConfigError, InputError
from engine.forecast.agent import MEMORY_MODES, AgentConfig, Episode, ForecastAgent
from engine.forecast.config import load_forecast_config
from engine.forecast.data import load_prophet_arena
from engine.forecast.evidence_memory import EvidenceProcessor, MemoryBaselinesConfig, evidence_chunks
from engine.forecast.memory_baselines import MemoryBaselineRunner
from engine.forecast.search import SearchResult, corpus_from_questions
from engine.forecast.simulated import simulated_backend
from engine.llm.base import Completion, MeteredBackend, Response

from .conftest import make_row, write_csv

EMB = HashingEmbedder(128)
T0 = datetime(2025, 8, 1, 12, tzinfo=timezone.utc)


def _iso(t: datetime) -> str:
    return t.isoformat()


def _row(qid: str, day: float, close_day: float):
    sources = [{"url": f"https://example.org/{qid}/{i}", "title": f"{qid} report {i}", "ranking": i,
                "summary": f"Fact{qid}x{i}: team A of {qid} looks strong. Injury news for B before {qid}.",
                "source_id": f"{qid}-{i}"} for i in range(1, 3)]
    r = make_row(qid, snapshot=_iso(T0 + timedelta(days=day)), sources=sources)
    r["close_time"] = _iso(T0 + timedelta(days=close_day))
    return r


# (qid, snapshot day, close day): q0 resolves after q1's snapshot but before q2's; q1 never before another
# snapshot; q2 resolves before q3's; q3 resolves after q4's snapshot and before q5's.
PLAN = [("q0", 0, 1.5), ("q1", 1, 30), ("q2", 2, 2.5), ("q3", 3, 3.2), ("q4", 3.1, 20), ("q5", 4, 25)]


@pytest.fixture(scope="module")
def questions(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mb")
    write_csv(folder / "subset_data_Sports_6.csv", [_row(*p) for p in PLAN])
    qs = load_prophet_arena(folder)
    return sorted(qs, key=lambda q: q.qid)


def _runner(kind, questions, search=None, llm=None, **cfg):
    llm = llm or MeteredBackend(simulated_backend(seed=1))
    search = search or corpus_from_questions(questions, EMB)
    return MemoryBaselineRunner(kind, llm, search, AgentConfig(top_k=2), MemoryBaselinesConfig(**cfg), EMB)


def _tool_results(ep: Episode) -> list[str]:
    return [m["content"] for m in ep.messages if m["role"] == "user" and m["content"].startswith("Tool result")]


@pytest.mark.parametrize("kind", MEMORY_MODES)
def test_each_mode_runs_end_to_end_and_returns_own_evidence(kind, questions):
    tasks = list(reversed(questions))  # input order is kept even though the runner works in cutoff order
    r = _runner(kind, questions)
    eps = r.rollouts(tasks)
    assert [e.qid for e in eps] == [q.qid for q in tasks]
    for ep in eps:
        q = ep.task
        assert not ep.failed and set(ep.probs) == set(q.markets)
        assert all(0.0 <= p <= 1.0 for p in ep.probs.values())
        # the memory received the question's search results ...
        assert len(ep.searches) == 1 and len(ep.evidence) == 1
        assert [h.doc_id for h in r.written[q.qid]] == ep.evidence[0]["written"] and r.written[q.qid]
        # ... and its retrieval, the tool result, returns content of the question's own sources
        (result,) = _tool_results(ep)
        assert any(s.summary.split(":")[0] in result for s in q.sources), (kind, result[:300])
        assert ep.evidence[0]["retrieved"]


def test_evidence_chunks_keep_source_and_respect_size():
    hit = SearchResult(3, "Title", "https://u", "One sentence here. " * 40, T0, 0.0, "x")
    chunks = evidence_chunks(hit, 120)
    assert len(chunks) > 3
    assert all(c.startswith("[2025-08-01] Title (https://u): ") for c in chunks)
    assert all(len(c.split(": ", 1)[1]) <= 120 for c in chunks)
    long = SearchResult(0, "T", "u", "x" * 500, T0)
    assert [len(c.split(": ", 1)[1]) for c in evidence_chunks(long, 200)] == [200, 200, 100]


@dataclass
class _LeakySearch:
    """Ignores the cutoff: returns every document, late ones first."""

    docs: list

    def search(self, query, cutoff, k):
        return sorted(self.docs, key=lambda d: -d.available_at.timestamp())  # more than k, late first


@pytest.mark.parametrize("kind", MEMORY_MODES)
def test_no_document_after_the_cutoff_is_ever_written(kind, questions):
    leaky = _LeakySearch(corpus_from_questions(questions).docs)
    r = _runner(kind, questions, search=leaky)
    eps = r.rollouts(questions)
    assert r.dropped > 0  # the provider did offer late documents
    for ep in eps:
        assert r.written[ep.qid], ep.qid
        assert all(h.available_at <= ep.task.cutoff for h in r.written[ep.qid])
        late = [d for d in leaky.docs if d.available_at > ep.task.cutoff]
        (result,) = _tool_results(ep)
        assert not any(d.content.split(":")[0] in result for d in late)


def test_mem0_store_never_holds_late_evidence(questions):
    q = questions[0]  # earliest snapshot
    docs = corpus_from_questions(questions).docs
    proc = EvidenceProcessor("mem0", MemoryBaselinesConfig(), EMB, simulated_backend(), 5000)
    ep = Episode(q)
    body = proc.process([(ep, q.text, docs)], 1)[0]
    texts = [m["memory"] for m in proc.stores[q.qid].memory.all_memories()]  # the real mem0 library's store
    assert proc.dropped == sum(d.available_at > q.cutoff for d in docs) > 0
    assert texts and all(q.qid in t for t in texts)
    assert not any(other.qid in t for other in questions[1:] for t in texts)
    assert f"Fact{q.qid}x1" in body


def _resolved_before(questions, q):
    """qids of the other questions resolved at or before ``q``'s cutoff (a sequential, by-hand reference)."""
    return {p.qid for p in questions if p.qid != q.qid and p.close_time <= q.cutoff}


@pytest.mark.parametrize("kind", ["memrl", "reme", "flex"])
def test_outcome_observations_never_leak(kind, questions):
    r = _runner(kind, questions)
    eps = r.rollouts(list(reversed(questions)))
    by_qid = {q.qid: q for q in questions}
    for ep in eps:
        q = ep.task
        visible = r.visible[q.qid]
        assert all(t <= q.cutoff for _, t in visible)  # never an outcome not resolved at the cutoff
        # and exactly the ones resolved before it (the batches lose no usable experience)
        assert {k.split(":", 1)[1] for k, _ in visible} == _resolved_before(questions, q)
        # independent check on the prompt: no unresolved question's text appears in its experience section
        prompt = ep.messages[1]["content"]
        for other in questions:
            if other.qid != q.qid and other.close_time > q.cutoff:
                assert f"match {other.qid}?" not in prompt, (q.qid, other.qid)
    # q0 resolves before q2's snapshot: q2 saw it; q1 never resolves in time: nobody saw it
    assert any(k == f"{kind}:q0" for k, _ in r.visible["q2"])
    assert not any(k == f"{kind}:q1" for v in r.visible.values() for k, _ in v)
    assert r.visible["q0"] == [] and r.visible["q1"] == []
    # q3 closes (day 3.2) after q4's snapshot (day 3.1) and before q5's (day 4): q3 and q4 share a batch,
    # q5 runs in a later one and sees q3's outcome, q4 does not
    assert any({"q3", "q4"} <= set(b) for b in r.batches)
    assert not any({"q3", "q5"} <= set(b) for b in r.batches)
    assert any(k == f"{kind}:q3" for k, _ in r.visible["q5"])
    assert not any(k == f"{kind}:q3" for k, _ in r.visible["q4"])
    # reme / flex retrieve any stored experience: it reaches the prompt
    if kind in ("reme", "flex"):
        assert "Past experience" in next(e for e in eps if e.qid == "q2").messages[1]["content"]
        assert "Past experience" not in next(e for e in eps if e.qid == "q1").messages[1]["content"]
    assert set(by_qid) == {e.qid for e in eps}


def test_memrl_outcome_updates_q_of_used_experience(questions):
    from engine.forecast.metrics import brier, uniform_probs

    r = _runner("memrl", questions)
    eps = {e.qid: e for e in r.rollouts(questions)}
    table = r.track.memory.table
    assert len(table) == len(r.track.applied) >= 2  # one memory per resolved, applied outcome
    assert set(table.data["source"].tolist()) == {"rule"}  # simulated backend: rule-based proceduralization
    # MemRL (HLE runner): a new memory starts at Q 1 if its episode succeeded, else 0
    expected = {i: (1.0 if s else 0.0) for i, s in zip(table.id.tolist(), table.data["success"].tolist())}
    for key, _ in r.track.applied:  # independent replay of MemRL's Q <- (1 - a) Q + a r, in resolution order
        qid = key.split(":", 1)[1]
        ep = eps[qid]
        reward = 1.0 if brier(ep.probs, ep.task) < brier(uniform_probs(ep.task), ep.task) else -1.0
        for i in r.shown[qid]:
            expected[i] = 0.7 * expected[i] + 0.3 * reward
    assert any(r.shown.values())  # some question did use earlier experience
    np.testing.assert_allclose(table.data["q"], [expected[i] for i in table.id.tolist()])


def test_resolution_delay_postpones_outcomes(questions):
    # q0 closes at day 1.5, q2's snapshot is day 2: visible with a 12 h delay, not with 13 h (then q3 sees it first)
    r12 = _runner("flex", questions, resolution_delay_h=12.0)
    r12.rollouts(questions)
    assert "flex:q0" in [k for k, _ in r12.visible["q2"]]
    r13 = _runner("flex", questions, resolution_delay_h=13.0)
    r13.rollouts(questions)
    assert "flex:q0" not in [k for k, _ in r13.visible["q2"]] and "flex:q0" in [k for k, _ in r13.visible["q3"]]
    for qid, seen in r13.visible.items():
        cutoff = next(q.cutoff for q in questions if q.qid == qid)
        assert all(t <= cutoff for _, t in seen)
    with pytest.raises(ConfigError, match="memory_baselines.resolution_delay_h must be >= 0, got -1"):
        MemoryBaselinesConfig(resolution_delay_h=-1.0)


def test_experience_can_be_switched_off(questions):
    r = _runner("flex", questions, experience=False)
    eps = r.rollouts(questions)
    assert r.track is None and len(r.batches) == 1
    assert all("Past experience" not in e.messages[1]["content"] for e in eps)


class _Mem0Scripted:
    """Simulated forecaster, except for mem0's extraction prompt, which it answers itself (a 'real' model's path)."""

    name = "scripted"
    model = "scripted"

    def __init__(self, reply):
        self.inner = simulated_backend(seed=2)
        self.reply = reply
        self.mem0_batches = []

    def generate(self, requests):
        mem0 = [r for r in requests if r.messages and "## New Messages" in r.messages[-1]["content"]]
        if mem0:
            assert len(mem0) == len(requests)
            self.mem0_batches.append(len(requests))
            return [Response((Completion(self.reply(r), 5),), 10, 0.0, self.name, self.model) for r in requests]
        return self.inner.generate(requests)


def test_mem0_llm_extraction_is_batched_and_replayed_through_the_library(questions):
    def reply(r):
        qid = r.episode
        return json.dumps({"memory": [{"text": f"Extracted fact EXT-{qid}: who wins match {qid}? Team A is favoured."}]})

    llm = _Mem0Scripted(reply)
    r = _runner("mem0", questions, llm=llm)
    eps = r.rollouts(questions)
    assert llm.mem0_batches == [len(questions)]  # one batched call for every question's first search
    for ep in eps:
        (result,) = _tool_results(ep)
        assert f"EXT-{ep.qid}" in result and "Fact" not in result


@pytest.mark.parametrize("reply", ["no json here", "", '{"memory": "not a list"}'])
def test_mem0_unparseable_extraction_falls_back_to_rule(questions, reply):
    llm = _Mem0Scripted(lambda r: reply)
    proc = EvidenceProcessor("mem0", MemoryBaselinesConfig(), EMB, llm, 5000)
    q = questions[0]
    docs = [d for d in corpus_from_questions(questions).docs if d.origin == q.qid]
    body = proc.process([(Episode(q), q.text, docs)], 1)[0]
    assert proc.stores[q.qid].sources == ["rule-fallback"] and f"Fact{q.qid}x1" in body


def test_bad_mode_and_config_raise_clear_errors(questions):
    with pytest.raises(ConfigError, match=r"agent.mode must be one of foredreamer, .*mem0, memrl, reme, flex, hipporag, memoryos, amem, lightmem, langmem, langmem_reimpl, got 'mem1'"):
        AgentConfig(mode="mem1")
    with pytest.raises(ConfigError, match=r"run.methods must be a non-empty subset of .*'langmem', 'langmem_reimpl'\], got \['memO'\]"):
        load_forecast_config({"data": {"path": "x"}, "run": {"methods": ["memO"]}})
    with pytest.raises(ConfigError, match="memory baseline must be one of mem0, memrl, reme, flex, hipporag, memoryos, amem, lightmem, langmem, langmem_reimpl, got 'rag'"):
        _runner("rag", questions)
    with pytest.raises(ConfigError, match="memory_baselines.top_k must be >= 1, got 0"):
        MemoryBaselinesConfig(top_k=0)
    with pytest.raises(ConfigError, match="memory_baselines.extraction must be auto, llm or rule, got 'gpt'"):
        load_forecast_config({"data": {"path": "x"}, "memory_baselines": {"extraction": "gpt"}})
    with pytest.raises(ConfigError, match="unknown key.*'topk'.*valid keys: chunk_chars"):
        load_forecast_config({"data": {"path": "x"}, "memory_baselines": {"topk": 3}})
    with pytest.raises(InputError, match="agent.mode 'reme' needs an evidence processor"):
        ForecastAgent(simulated_backend(), None, AgentConfig(mode="reme"), ".")


def test_run_is_deterministic(questions):
    a = [e.probs for e in _runner("reme", questions).rollouts(questions)]
    b = [e.probs for e in _runner("reme", questions).rollouts(questions)]
    assert a == b and np.isfinite([p for d in a for p in d.values()]).all()


def test_mem0_prompt_rejected_by_a_small_model_names_the_fix(questions):
    from engine.errors import BackendError

    class _Small(_Mem0Scripted):
        def generate(self, requests):
            if any("## New Messages" in r.messages[-1]["content"] for r in requests if r.messages):
                raise BackendError("prompt of 9000 tokens exceeds the context of 2048")
            return self.inner.generate(requests)

    r = _runner("mem0", questions, llm=_Small(None))
    with pytest.raises(BackendError, match=r'exceeds the context.*\[memory_baselines\] extraction = "rule"'):
        r.rollouts(questions[:1])


class _ExtractionCounter:
    """Simulated forecaster that answers every other prompt (experience extraction) itself and counts the batches."""

    name = "scripted"
    model = "scripted"

    def __init__(self):
        self.inner = simulated_backend(seed=3)
        self.batches = []

    def generate(self, requests):
        forecast = [r for r in requests if r.messages and "Market context" in next(
            (m["content"] for m in r.messages if m["role"] == "user"), "")]
        if forecast:
            assert len(forecast) == len(requests)  # never mixed with extraction requests
            return self.inner.generate(requests)
        self.batches.append([r.episode for r in requests])
        text = json.dumps([{"when_to_use": "similar match questions", "experience": "lean on injury news"}])
        return [Response((Completion(text, 5),), 10, 0.0, self.name, self.model) for _ in requests]


@pytest.mark.parametrize("kind", ["memrl", "reme", "flex"])
def test_llm_outcome_extraction_is_one_batch_per_release(kind, tmp_path):
    # a and b run together (a closes after b's snapshot); both resolve before c's snapshot: ONE extraction call
    write_csv(tmp_path / "subset_data_Sports_3.csv", [_row("a", 0, 0.8), _row("b", 0.5, 0.9), _row("c", 1, 9)])
    qs = load_prophet_arena(tmp_path)
    llm = _ExtractionCounter()
    r = _runner(kind, qs, llm=llm)
    r.rollouts(qs)
    assert r.batches == [["a", "b"], ["c"]]
    # the request's episode is the outcome's key; ReMe validates what it extracted in a second batch
    assert llm.batches == [[f"{kind}:a", f"{kind}:b"]] * (2 if kind == "reme" else 1)
    assert [k for k, _ in r.track.applied] == [f"{kind}:a", f"{kind}:b"]
    assert set(r.track.memory.table.data["source"].tolist()) == {"llm"}


def test_mem0_extraction_prompt_is_fitted_to_the_context_window(questions):
    """mem0's extraction request (its long system prompt + the evidence) keeps the most relevant results that fit."""
    from engine.forecast.evidence_memory import _request_tokens

    seen = []

    class _Window(_Mem0Scripted):
        context_window = 0  # set below, once the request sizes are known

        def generate(self, requests):
            seen.extend(requests)
            return super().generate(requests)

    q = questions[0]
    docs = [d for d in corpus_from_questions(questions).docs if d.origin == q.qid]
    assert len(docs) == 2
    probe = EvidenceProcessor("mem0", MemoryBaselinesConfig(), EMB, None, 5000)
    store = probe.store(q.qid)
    one = _request_tokens(None, store.mem0_request(q.text, docs[:1], q.cutoff, q.qid, 0))
    two = _request_tokens(None, store.mem0_request(q.text, docs, q.cutoff, q.qid, 0))
    assert two > one
    llm = _Window(lambda r: json.dumps({"memory": [{"text": "fact"}]}))
    llm.context_window = (one + two) // 2 + store.memory.config.max_tokens  # room for the first result only
    proc = EvidenceProcessor("mem0", MemoryBaselinesConfig(extraction="llm"), EMB, llm, 5000)
    mem0 = proc.store(q.qid).memory
    captures, library_call = [], mem0.library_call
    mem0.library_call = lambda msgs: captures.append(len(msgs)) or library_call(msgs)
    proc.process([(Episode(q), q.text, docs)], 1)
    assert captures == [2, 1]  # one capture per distinct result list: the fitted one is rendered and sent again
    (req,) = [r for r in seen if r.messages]
    assert _request_tokens(None, req) + store.memory.config.max_tokens <= llm.context_window
    assert (proc.fit.fitted, proc.fit.dropped) == (1, 1)
    assert [h.doc_id for h in proc.stores[q.qid].written] == [docs[0].doc_id]  # the left-out result is not written


class _RecordingLLM:
    """A stand-in for a mem0 LLM provider: records what the library's own add sends, answers with no memories."""

    def __init__(self):
        self.calls = []

    def generate_response(self, messages, response_format=None, **kwargs):
        self.calls.append(([dict(m) for m in messages], response_format))
        return json.dumps({"memory": []})


def test_mem0_request_is_the_library_own_add_call_dated_at_the_cutoff(questions):
    """The second search's request equals what mem0's own ``Memory.add`` sends a provider LLM on the question's
    store (the first write's session messages and extracted fact in it, JSON mode), with the cutoff's date."""
    import pickle

    from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, AGENT_CONTEXT_SUFFIX

    from engine.baselines.mem0 import MEM0_EXTRACTION, dated
    from engine.forecast.evidence_memory import _mem0_messages

    seen = []

    class _Seen(_Mem0Scripted):
        def generate(self, requests):
            seen.append(list(requests))
            return super().generate(requests)

    llm = _Seen(lambda r: json.dumps({"memory": [{"id": "0", "text": f"FIRST fact of {r.episode}", "attributed_to": "user",
                                                  "linked_memory_ids": []}]}))
    proc = EvidenceProcessor("mem0", MemoryBaselinesConfig(extraction="llm"), EMB, llm, 5000)
    q = questions[0]
    docs = [d for d in corpus_from_questions(questions).docs if d.origin == q.qid]
    proc.process([(Episode(q), q.text, docs[:1])], 1)
    store = proc.stores[q.qid]
    reference = pickle.loads(pickle.dumps(store.memory))  # the question's store after the first write
    reference.memory.llm = _RecordingLLM()
    reference.memory.add(_mem0_messages("second query", docs[1:]), agent_id=store.memory.config.agent_id, infer=True)
    ((want, fmt),) = reference.memory.llm.calls
    proc.process([(Episode(q), "second query", docs[1:])], 2)

    (req,) = seen[1]
    day, today = q.cutoff.date().isoformat(), datetime.now(timezone.utc).date().isoformat()
    assert fmt == {"type": "json_object"} and req.constraint == MEM0_EXTRACTION
    assert list(req.messages) == dated(want, day)
    assert req.messages[0]["content"] == ADDITIVE_EXTRACTION_PROMPT + AGENT_CONTEXT_SUFFIX
    assert (req.max_tokens, req.temperature, req.top_p) == (2000, 0.1, 0.1)  # mem0 BaseLlmConfig defaults
    user = req.messages[1]["content"]
    last_k = user.split("## Last k Messages\n", 1)[1].split("\n\n## ", 1)[0]
    assert last_k == "".join(f"user: {m['content']}\n" for m in _mem0_messages(q.text, docs[:1]))
    assert json.loads(user.split("## Existing Memories\n", 1)[1].split("\n\n## ", 1)[0]) == [{"id": "0", "text": f"FIRST fact of {q.qid}"}]
    assert f"## Observation Date\n{day}\n\n## Current Date\n{day}\n" in user and day != today and today not in user
    # the replay inside add rebuilt the same prompt (today's date ignored); a different one would be counted
    assert store.sources == ["llm", "llm"] and store.memory.stale_prompts == 0
    store.write("third query", docs[:1], "{}", digest="0" * 24)
    assert store.memory.stale_prompts == 1


def test_mem0_extraction_does_not_fit_an_8192_token_window(questions):
    """mem0's system prompt alone (~7,800 estimated tokens) plus its 2,000-token answer budget exceeds 8,192
    tokens (configs/futurex.toml on SmolLM2): every search result is left out, nothing is sent or written."""
    seen = []

    class _Window(_Mem0Scripted):
        context_window = 8192

        def generate(self, requests):
            seen.extend(requests)
            return super().generate(requests)

    q = questions[0]
    docs = [d for d in corpus_from_questions(questions).docs if d.origin == q.qid]
    proc = EvidenceProcessor("mem0", MemoryBaselinesConfig(extraction="llm"), EMB, _Window(lambda r: "{}"), 5000)
    body = proc.process([(Episode(q), q.text, docs)], 1)[0]
    assert seen == [] and body == ""
    assert (proc.fit.blocks, proc.fit.fitted, proc.fit.dropped) == (1, 1, len(docs))
    assert proc.stores[q.qid].written == [] and proc.stores[q.qid].memory.all_memories() == []


PAPER_KINDS = ["hipporag", "memoryos", "amem", "lightmem", "langmem", "langmem_reimpl"]


class _Counting:
    """The simulated backend, recording every batch it gets (its policy answers the memories' prompts)."""

    def __init__(self):
        self.inner = MeteredBackend(simulated_backend(seed=1))
        self.name, self.model = self.inner.name, self.inner.model
        self.answers_any_prompt = False
        self.batches = []

    def generate(self, requests):
        self.batches.append(list(requests))
        return self.inner.generate(requests)


def _memory_batches(llm):
    """Batches holding the memories' own prompts (not the forecaster's)."""
    from engine.baselines.paper_simulated import simulated_reply

    out = []
    for b in llm.batches:
        mine = [r for r in b if simulated_reply(list(r.messages) if r.messages else [{"role": "user", "content": r.prompt}])]
        if mine:
            assert len(mine) == len(b)  # never mixed with forecast prompts
            out.append(mine)
    return out


@pytest.mark.parametrize("kind", PAPER_KINDS)
def test_paper_baselines_llm_path_stores_what_the_rule_stores_in_batched_calls(kind, questions):
    rule = _runner(kind, questions, extraction="rule").rollouts(questions)
    llm = _Counting()
    r = _runner(kind, questions, llm=llm, extraction="llm")
    eps = r.rollouts(questions)
    assert [e.evidence for e in eps] == [e.evidence for e in rule]  # the simulated policy answers = the rules
    batches = _memory_batches(llm)
    if kind == "memoryos":  # two pages per question never fill the short-term memory (10): no summary call yet
        assert batches == []
        return
    assert batches, kind  # the memory's prompts went to the LLM
    # every question writes its first search in the same turn: the first step of all of them is ONE call
    assert {req.episode for req in batches[0]} == {q.qid for q in questions}
    assert len(r.batches) == 1  # no experience layer: all questions in flight together


def test_paper_baselines_rows_say_library_or_re_implementation():
    from engine.forecast.evidence_memory import ROW_NAMES

    assert [ROW_NAMES[k] for k in PAPER_KINDS] == [
        "HippoRAG 2 (re-impl., evidence)", "MemoryOS (re-impl., evidence)", "A-MEM (re-impl., evidence)",
        "LightMem (re-impl., evidence)", "LangMem (library, evidence)", "LangMem (re-impl., evidence)"]


def test_memoryos_returns_short_term_pages_and_hipporag_its_top_k(questions):
    q = questions[0]
    docs = [d for d in corpus_from_questions(questions).docs if d.origin == q.qid]
    for kind, want in (("hipporag", 1), ("memoryos", len(docs))):
        proc = EvidenceProcessor(kind, MemoryBaselinesConfig(top_k=1, chunk_chars=80), EMB, simulated_backend(), 5000)
        proc.process([(Episode(q), q.text, docs)], 1)
        mem = proc.stores[q.qid].memory
        n = len(mem.texts())
        found = proc.stores[q.qid].retrieve(q.text)
        if kind == "hipporag":
            assert len(found) == want and n >= len(docs)
        else:  # everything still fits the short-term memory (capacity 10): all of it comes back
            assert n <= 10 and len(found) == n and all(h.extra["layer"] == "short-term" for h in found)
