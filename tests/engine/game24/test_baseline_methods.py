"""Game-of-24 adapters: each baseline memory plugged into the same ToT procedure via the hooks."""

import json

import numpy as np
import pytest

from engine.errors import ConfigError
from engine.game24 import prompts as P
from engine.game24.baseline_methods import (
    BASELINES,
    BaselineHooks,
    make_baseline_hooks,
    make_baseline_method,
    puzzle_text,
    trace_outcome,
)
from engine.game24.hooks import EpisodeTrace
from engine.game24.tot import PuzzleTask, ToTMethod
from engine.llm.base import Completion, Response
from engine.game24.simulated_policy import simulated_backend
from engine.rounds import Episode

NAMES = ["memrl", "reme", "flex", "mem0"]
TOT_MARKS = (P.PROPOSE_MARK, P.VALUE_MARK, P.VALUE_LAST_STEP_MARK, P.ANSWER_MARK)


class Scripted:
    """ToT prompts -> the seeded simulated policy; any other prompt -> a scripted extraction reply.

    Named "scripted" (not "simulated"), so extraction "auto" sends the memories' own prompts.
    Records every request it was sent.
    """

    name = "scripted"
    model = "scripted"

    def __init__(self):
        self.sim = simulated_backend(seed=3)
        self.requests = []

    @staticmethod
    def extraction_reply(text: str) -> str:
        if "## Existing Memories" in text:  # mem0's own extraction prompt
            return json.dumps({"memory": [{"id": "0", "text": "scripted mem0 memory", "attributed_to": "assistant"}]})
        if "OUTPUT FORMAT:\nGenerate" in text:  # ReMe's extraction prompts
            return "```json\n" + json.dumps([{"when_to_use": "scripted when", "experience": "scripted lesson"}]) + "\n```"
        return "scripted reflection"  # anything else, incl. ReMe validation (no JSON block: kept, score 0.5)

    def generate(self, requests):
        self.requests.extend(requests)
        out = []
        for r in requests:
            text = r.prompt if r.prompt is not None else "\n".join(m["content"] for m in r.messages)
            if text.startswith(TOT_MARKS):
                out.extend(self.sim.generate([r]))
            else:
                reply = self.extraction_reply(text)
                out.append(Response((Completion(reply, 3),) * r.n, 50, 0.0, self.name, self.model))
        return out


def _episodes(puzzles, phase="warmup", start=0):
    return [Episode(start + i, PuzzleTask(tuple(p), start + i + 1), seed=11, phase=phase) for i, p in enumerate(puzzles)]


def _run(method, episodes, llm):
    res = method.run_episodes(method.snapshot(), episodes, llm)
    method.apply(res)
    return res


PUZZLES = [(4, 9, 10, 13), (1, 1, 4, 6), (2, 3, 4, 5), (1, 2, 3, 4)]


def test_registry_names_and_errors():
    assert set(BASELINES) == {"mem0", "memrl", "reme", "flex"}
    with pytest.raises(ConfigError, match="unknown baseline 'mem1'"):
        make_baseline_hooks("mem1")
    with pytest.raises(ConfigError, match="unknown key"):
        make_baseline_hooks("memrl", {"alpah": 0.3})
    with pytest.raises(ConfigError, match="per_step must be true or false"):
        make_baseline_hooks("flex", {"per_step": "yes"})
    assert make_baseline_hooks("memrl", {"alpha": 0.5}).memory.config.alpha == 0.5


@pytest.mark.parametrize("name", NAMES)
def test_empty_memory_gives_exactly_plain_tot(name, hashing_embedder):
    """Same procedure, prompts and budget: with nothing stored, requests equal plain ToT's."""
    if name == "mem0":
        pytest.importorskip("mem0")
    eps = _episodes(PUZZLES[:1])
    tot_llm, base_llm = Scripted(), Scripted()
    tot = ToTMethod("tot").run_episodes({}, eps, tot_llm)
    method = make_baseline_method(name, {"extraction": "rule"}, embedder=hashing_embedder)
    base = method.run_episodes(method.snapshot(), eps, base_llm)
    assert [(r.prompt, r.n, r.seed) for r in base_llm.requests] == [(r.prompt, r.n, r.seed) for r in tot_llm.requests]
    for key in ("success_any", "success_first", "calls", "samples", "tokens", "n_retrieved"):
        assert base[0].record[key] == tot[0].record[key], key


@pytest.mark.parametrize("name", NAMES)
def test_experience_reaches_propose_prompts_only(name, hashing_embedder):
    if name == "mem0":
        pytest.importorskip("mem0")
    method = make_baseline_method(name, {"extraction": "rule"}, embedder=hashing_embedder)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    llm = Scripted()
    res = _run(method, _episodes([(4, 9, 10, 13)], phase="test", start=2), llm)
    propose = [r.prompt for r in llm.requests if (r.prompt or "").startswith((P.PROPOSE_MARK, P.ANSWER_MARK))]
    value = [r.prompt for r in llm.requests if (r.prompt or "").startswith((P.VALUE_MARK, P.VALUE_LAST_STEP_MARK))]
    assert propose and all(P.EXPERIENCE_HEADER in p for p in propose)
    assert len({p.split(P.EXPERIENCE_HEADER)[1].split("\nInput:")[0] for p in propose}) == 1  # one retrieval per episode
    assert value and not any(P.EXPERIENCE_HEADER in p for p in value)
    rec = res[0].record
    assert rec["n_retrieved"] >= 1  # ids reported once per episode, not once per frontier node
    assert rec["n_retrieved"] <= {"memrl": 3, "reme": 5, "flex": 3, "mem0": 5}[name]


@pytest.mark.parametrize("name, per_episode", [("memrl", 1), ("reme", 3), ("flex", 1), ("mem0", 1)])
def test_llm_extraction_is_counted_in_the_episode(name, per_episode, hashing_embedder):
    if name == "mem0":
        pytest.importorskip("mem0")
    eps = _episodes(PUZZLES[:2])
    tot = ToTMethod("tot").run_episodes({}, eps, Scripted())
    method = make_baseline_method(name, {"extraction": "llm"}, embedder=hashing_embedder)
    llm = Scripted()
    res = _run(method, eps, llm)
    extra = [r for r in llm.requests if not (r.prompt or "").startswith(TOT_MARKS)]
    for t, b in zip(tot, res):
        mine = [r for r in extra if r.episode == str(b.episode_id)]
        want = per_episode if name != "reme" else 2 * len(reme_jobs(b))  # ReMe: each extraction, then its validation
        assert len(mine) == want
        assert b.record["calls"] == t.record["calls"] + want
    snap = method.hooks.snapshot()
    column, text = {"memrl": ("mem_content", "scripted reflection"), "reme": ("content", "scripted lesson"),
                    "flex": ("reflection", "scripted reflection"), "mem0": ("memory", "scripted mem0 memory")}[name]
    assert any(text in t for t in snap[column].tolist())


def test_reme_retrieval_calls_are_counted_in_the_episode(hashing_embedder):
    method = make_baseline_method("reme", {"extraction": "rule"}, embedder=hashing_embedder)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    llm = Scripted()
    res = _run(method, _episodes([(4, 9, 10, 13)], phase="test", start=2), llm)
    mine = [r for r in llm.requests if r.messages is not None and r.episode == "2"]
    assert [("# Candidate Experiences" in r.messages[0]["content"], "# Original Context Content" in r.messages[0]["content"])
            for r in mine] == [(True, False), (False, True)]  # one LLM rerank, one LLM rewrite
    propose = [r.prompt for r in llm.requests if (r.prompt or "").startswith(P.PROPOSE_MARK)]
    assert all("scripted reflection" in p for p in propose)  # the rewrite's raw answer is the experience (not JSON)
    assert res[0].record["calls"] >= 2 + len(propose)


def reme_jobs(result):
    """ReMe extraction jobs of an episode (every distinct output, plus best versus worst): with the scripted
    replies each job yields one memory and validation keeps it, so the stored kinds count the jobs."""
    kinds = result.updates["kind"].tolist()
    assert int(result.updates["extracted"][0]) == len(kinds)
    return kinds


def test_simulated_backend_uses_rule_extraction(hashing_embedder):
    sim = simulated_backend(seed=5)
    method = make_baseline_method("flex", embedder=hashing_embedder)  # extraction "auto"
    res = _run(method, _episodes(PUZZLES[:2]), sim)
    assert method.hooks.snapshot()["source"].tolist() == ["rule", "rule"]
    tot = ToTMethod("tot").run_episodes({}, _episodes(PUZZLES[:2]), simulated_backend(seed=5))
    assert [r.record["calls"] for r in res] == [r.record["calls"] for r in tot]  # no extra calls


def test_run_does_not_mutate_memory_and_apply_orders_by_episode(hashing_embedder):
    method = make_baseline_method("memrl", {"extraction": "rule"}, embedder=hashing_embedder)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    before = method.snapshot()
    res = method.run_episodes(before, _episodes(PUZZLES[2:], start=2), Scripted())
    after = method.snapshot()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    method.hooks.apply([(r.episode_id, r.updates) for r in reversed(res)])
    assert method.snapshot()["key_text"].tolist()[-2:] == [puzzle_text(p) for p in PUZZLES[2:]]


def test_per_step_queries_use_the_state(hashing_embedder):
    hooks = make_baseline_hooks("flex", {"per_step": True, "extraction": "rule"}, embedder=hashing_embedder)
    assert isinstance(hooks, BaselineHooks) and hooks.adapter.per_step
    method = ToTMethod("flex", hooks=hooks)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    llm = Scripted()
    res = _run(method, _episodes([(4, 9, 10, 13)], phase="test", start=2), llm)
    blocks = {p.prompt.split(P.EXPERIENCE_HEADER)[1].split("\nInput:")[0] for p in llm.requests
              if p.prompt.startswith(P.PROPOSE_MARK) and P.EXPERIENCE_HEADER in p.prompt}
    assert len(blocks) >= 1
    assert res[0].record["n_retrieved"] >= 1


def test_trace_outcome():
    trace = EpisodeTrace(
        episode_id=3, episode_key="3", seed=9, puzzle=(4, 9, 10, 13), stream_phase="warmup",
        outputs=("10 - 4 = 6 (left: 6 9 13)\nAnswer: x = 24\n", "bad\n"), verdicts=(True, False), success=True,
        retrieved=(5, 2, 5),
    )
    o = trace_outcome(trace)
    assert o.task == "4 9 10 13" and o.key == "3" and o.reward == 1.0 and o.retrieved == (5, 2)
    assert o.attempts[0].text == "10 - 4 = 6 (left: 6 9 13); Answer: x = 24" and o.attempts[1].success is False


@pytest.fixture
def hashing_embedder():
    from engine.embed import HashingEmbedder

    return HashingEmbedder(64)


@pytest.mark.parametrize("name", ["memrl", "reme", "flex"])
def test_updates_do_not_depend_on_the_worker_split(name, hashing_embedder):
    method = make_baseline_method(name, {"extraction": "llm"}, embedder=hashing_embedder)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    snap = method.snapshot()
    eps = _episodes(PUZZLES + [(3, 3, 8, 8)], start=2)
    whole = method.run_episodes(snap, eps, Scripted())
    parts = method.run_episodes(snap, eps[:2], Scripted()) + method.run_episodes(snap, eps[2:], Scripted())
    for a, b in zip(whole, parts):
        assert a.record["calls"] == b.record["calls"] and a.record["success_any"] == b.record["success_any"]
        assert a.updates.keys() == b.updates.keys()
        assert all(np.array_equal(a.updates[k], b.updates[k]) for k in a.updates)


@pytest.mark.parametrize("name", NAMES)
def test_hooks_survive_pickling_for_remote_workers(name, hashing_embedder):
    """Ray ships the method to workers: a copy reads the same snapshot into the same prompts."""
    import pickle

    if name == "mem0":
        pytest.importorskip("mem0")
    method = make_baseline_method(name, {"extraction": "rule"}, embedder=hashing_embedder)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    snap = method.snapshot()
    copy = pickle.loads(pickle.dumps(method))
    eps = _episodes([(4, 9, 10, 13)], phase="test", start=2)
    a, b = Scripted(), Scripted()
    ra = method.run_episodes(snap, eps, a)
    rb = copy.run_episodes(snap, eps, b)
    assert [r.prompt for r in a.requests] == [r.prompt for r in b.requests]
    assert ra[0].record["n_retrieved"] == rb[0].record["n_retrieved"]


@pytest.mark.parametrize("name", NAMES)
def test_checkpointed_state_is_data_and_resumes_to_the_same_memory(name, hashing_embedder, tmp_path):
    """A checkpoint holds each memory as a data file (engine.codec), without its embedder; a method built from
    the same config and loaded from it snapshots the same arrays and sends the same prompts."""
    from engine import codec
    from engine.embed.hashing import HashingEmbedder

    if name == "mem0":
        pytest.importorskip("mem0")
    method = make_baseline_method(name, {"extraction": "rule"}, embedder=hashing_embedder)
    _run(method, _episodes(PUZZLES[:2]), Scripted())
    method.save_state(tmp_path)
    (state,) = [p for p in tmp_path.iterdir() if p.suffix == ".data"]
    assert state.read_bytes().startswith(codec.MAGIC)
    mine = HashingEmbedder(64)
    fresh = make_baseline_method(name, {"extraction": "rule"}, embedder=mine)
    fresh.load_state(tmp_path)
    assert fresh.hooks.memory.embedder is mine  # the live method's, never the file's
    a, b = method.snapshot(), fresh.snapshot()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tolist() == b[k].tolist() if a[k].dtype == object else a[k].tobytes() == b[k].tobytes(), k
    eps = _episodes([(4, 9, 10, 13)], phase="test", start=2)
    sa, sb = Scripted(), Scripted()
    method.run_episodes(a, eps, sa)
    fresh.run_episodes(b, eps, sb)
    assert [r.prompt for r in sa.requests] == [r.prompt for r in sb.requests]
