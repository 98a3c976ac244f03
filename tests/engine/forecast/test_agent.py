import json

import pytest

from engine.forecast.agent import AgentConfig, ForecastAgent
from engine.forecast.data import load_prophet_arena
from engine.forecast.memtools import ProceduralStore
from engine.forecast.metrics import uniform_probs
from engine.forecast.search import corpus_from_questions
from engine.forecast.simulated import simulated_backend
from engine.forecast.subagent import MemoryProcessor
from engine.forecast.toolcalls import parse_boxed, parse_prophet_answer, parse_tool_calls
from engine.llm.base import Completion, Response
from engine.errors import ConfigError

from .conftest import needs_bwrap


def test_parse_prophet_answer_reads_answers_as_upstream_scores_them():
    ok, why = parse_prophet_answer('```json\n{"rationale": "r", "probabilities": {"A": 0.7, "B": 0}}\n```', ["A", "B"])
    assert ok == {"A": 0.7, "B": 0.0} and why == ""
    # pm-rank: an omitted outcome is 0, an unknown name ignored, a value outside [0, 1] clipped
    assert parse_prophet_answer('noise {"probabilities": {"A": 0.7, "b": 0.1}} tail', ["A", "B"])[0] == {"A": 0.7, "B": 0.0}
    assert parse_prophet_answer('{"probabilities": {"A": 1.2, "B": -0.1}}', ["A", "B"])[0] == {"A": 1.0, "B": 0.0}
    assert parse_prophet_answer('{"probabilities": {"a": 0.5}}', ["A", "B"])[1].startswith("no listed outcome name")
    assert "must be numbers" in parse_prophet_answer('{"probabilities": {"A": "0.2", "B": 0.1}}', ["A", "B"])[1]
    assert parse_prophet_answer("no json here", ["A"])[0] is None


def test_parse_tool_calls_and_boxed():
    t = 'x <tool_call>{"name": "web_search_and_process", "arguments": {"query": "q"}}</tool_call>'
    assert parse_tool_calls(t) == [("web_search_and_process", {"query": "q"})]
    assert parse_tool_calls("<tool_call>{bad</tool_call>") == []
    assert parse_boxed(r"Rationale... \boxed{A} then \boxed{\text{B}}") == r"\text{B}"
    assert parse_boxed("none") is None


@pytest.fixture
def setup(pa_folder, seeded_store_dir):
    qs = load_prophet_arena(pa_folder)
    store = ProceduralStore(seeded_store_dir)
    return qs, store, next(iter(store.guides.values()))


def _factory(store, guide, llm, mode="llm"):
    return lambda: MemoryProcessor(guide, store.tool_paths(guide["tool_names"]),
                                   {n: store.tools[n].spec for n in guide["tool_names"]}, llm=llm, mode=mode)


@needs_bwrap
def test_two_turn_loop_search_memory_answer(setup, tmp_path):
    qs, store, guide = setup
    qs = sorted(qs, key=lambda q: q.snapshot_time)[-2:]
    llm = simulated_backend(seed=1)
    agent = ForecastAgent(llm, corpus_from_questions(qs), AgentConfig(top_k=2), tmp_path / "ws",
                          _factory(store, guide, llm))
    eps = agent.run(qs)
    for ep in eps:
        assert not ep.failed and set(ep.probs) == set(ep.task.markets)
        (turn, query, dirs), = ep.searches
        assert turn == 1 and len(dirs) == 2
        assert len(ep.memories) == 2
        for m in ep.memories:  # traceable: memory file sits next to its raw item
            raw = json.loads((m.item_dir / "raw_data.json").read_text())
            assert raw["task_id"] == ep.qid and raw["item"]["url"] == m.source_url
            assert raw["item"]["url"] in m.text and m.calls[0][0] == "tool_read_raw_item"
            assert raw["item"]["published_date"] <= ep.task.cutoff.isoformat()
        assert any(msg["content"].startswith("Tool result (web_search_and_process)") for msg in ep.messages)
        assert ep.messages[-2]["content"].startswith("This is your last allowed turn")
    assert agent.fallback_items == 0


class _Scripted:
    name, model = "scripted", "scripted"

    def __init__(self, replies):
        self.replies = list(replies)

    def generate(self, requests):
        return [Response((Completion(self.replies.pop(0), 1),), 1, 0.0, self.name, self.model) for _ in requests]


def test_malformed_answer_retried_then_fallback(setup, tmp_path):
    qs, _, _ = setup
    q = qs[0]
    good = json.dumps({"rationale": "r", "probabilities": {m: 0.3 for m in q.markets}})
    agent = ForecastAgent(_Scripted(["garbage", good]), None, AgentConfig(turns=1), tmp_path)
    (ep,) = agent.run([q])
    assert not ep.failed and ep.probs == {m: 0.3 for m in q.markets}
    assert "could not be used" in ep.messages[-2]["content"]
    agent = ForecastAgent(_Scripted(["garbage", '{"probabilities": {"Nope": 1}}']), None, AgentConfig(turns=1), tmp_path)
    (ep,) = agent.run([q])
    assert ep.failed and ep.probs == uniform_probs(q)


@needs_bwrap
def test_subagent_refuses_tools_outside_guide(setup, tmp_path):
    qs, store, guide = setup
    narrow = {"guide_name": "narrow", "prompt": "p", "tool_names": ["tool_read_raw_item"]}
    llm = _Scripted(['<tool_call>{"name": "tool_write_final_text", "arguments": {"text": "x"}}</tool_call>'])
    from engine.forecast.subagent import write_item
    from engine.forecast.search import SearchResult
    q = qs[0]
    s = q.sources[0]
    d = write_item(tmp_path, q.qid, 1, 1, SearchResult(0, s.title, s.url, s.summary, q.cutoff), "q", q.text, "", q.cutoff)
    proc = MemoryProcessor(narrow, store.tool_paths(["tool_read_raw_item"]),
                           {"tool_read_raw_item": store.tools["tool_read_raw_item"].spec}, llm=llm, max_steps=1)
    (m,) = proc.process([d])
    assert m.calls[0][:2] == ("tool_write_final_text", "refused")
    assert not (d / "final_data.txt").exists() and not m.ok and m.fallback


def test_agent_config_errors():
    with pytest.raises(ConfigError, match="agent.turns must be >= 1, got 0"):
        AgentConfig(turns=0)
    with pytest.raises(ConfigError, match="agent.mode must be"):
        AgentConfig(mode="chat")


@needs_bwrap
def test_force_first_search_runs_search_without_asking_the_model(setup, tmp_path):
    qs, store, guide = setup
    q = qs[0]
    good = json.dumps({"rationale": "r", "probabilities": {m: 0.4 for m in q.markets}})
    llm = _Scripted([good])  # only the final turn reaches the model; the subagent runs its pipeline
    agent = ForecastAgent(llm, corpus_from_questions(qs), AgentConfig(top_k=1, force_first_search=True), tmp_path,
                          _factory(store, guide, None, mode="pipeline"))
    (ep,) = agent.run([q])
    assert not ep.failed and ep.searches[0][1] == q.text and len(ep.memories) == 1
    assert ep.messages[2]["content"].startswith("<tool_call>")


def test_futurex_boxed_answer_and_unusable_answer(tmp_path):
    from datetime import datetime, timezone

    from engine.forecast.data import FutureXItem

    item = FutureXItem("fx1", "Which options will happen? A) x B) y", datetime(2026, 2, 1, tzinfo=timezone.utc),
                       ("A, B",), "Answer with the letters.")
    agent = ForecastAgent(_Scripted(["Rationale: both.\n\n\\boxed{b,a}"]), None, AgentConfig(turns=1), tmp_path)
    (ep,) = agent.run([item])
    assert ep.answer == "b,a" and ep.correct() and not ep.failed
    assert "Event to predict:" in ep.messages[1]["content"]
    agent = ForecastAgent(_Scripted(["no box", "still none"]), None, AgentConfig(turns=1), tmp_path)
    (ep,) = agent.run([item])
    assert ep.failed and not ep.correct()


class _CountingSearch:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def search(self, *args, **kwargs):
        self.calls += 1
        return self.inner.search(*args, **kwargs)


def test_no_information_is_the_model_alone_without_search(pa_folder, tmp_path):
    qs = load_prophet_arena(pa_folder)[:3]
    search = _CountingSearch(corpus_from_questions(qs))
    llm = simulated_backend(seed=1)
    seen = []
    real = llm.generate
    llm.generate = lambda reqs: seen.extend(reqs) or real(reqs)
    eps = ForecastAgent(llm, search, AgentConfig(mode="no_information", top_k=2), tmp_path).run(qs)
    assert search.calls == 0 and all(not ep.searches and not ep.memories for ep in eps)
    assert len(seen) == len(qs)  # one turn, no tool loop
    for req, q in zip(seen, qs):
        prompt = "\n".join(m["content"] for m in req.messages)
        assert "forecast from the question alone" in prompt
        assert all(s.url not in prompt for s in q.sources)  # no pre-collected sources either


def test_market_informed_states_the_market_prior_and_is_its_own_row(pa_folder, tmp_path):
    q = load_prophet_arena(pa_folder)[0]
    base = ForecastAgent(None, None, AgentConfig(mode="foredreamer"), tmp_path)._task_prompt(q, ())
    informed = ForecastAgent(None, None, AgentConfig(mode="market_informed"), tmp_path)._task_prompt(q, ())
    assert "implied probability" not in base and "as your prior" not in base
    quote = q.market_data[q.markets[0]]
    assert f"implied probability {(quote['yes_bid'] + quote['yes_ask']) / 200:.3f}" in informed
    assert "as your prior" in informed
