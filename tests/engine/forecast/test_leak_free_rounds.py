"""Leak-free rounds of the forecasting experience track: planned ahead, run in parallel, the sequential records."""

import json
import math
from dataclasses import replace

import pytest

from engine.executor import LocalExecutor
from engine.forecast.task import ProphetArenaTask
from engine.rounds import Episode
from engine.tasks import RunOptions

from .conftest import make_row, write_csv

# (snapshot = cutoff, close_time = resolution): day of August 2025 at 12:00 (5.25: 18:00)
QUESTIONS = [(1, 4), (2, 10), (3, 5), (4, 6), (5, 20), (5.25, 30), (7, 8), (8, 30), (9, 30)]
# worked by hand: q3 starts a round (q0 resolved on day 4); q4 (q2 on day 5); q6 (q3 on day 6); q7 (q6 on day 8)
PLAN = [3, 1, 2, 1, 2]


def _when(day: float) -> str:
    return f"2025-08-{int(day):02d}T{12 + round((day % 1) * 24):02d}:00:00+00:00"


def _experiment(tmp_path, extraction="llm"):
    folder = tmp_path / "pa"
    folder.mkdir()
    rows = []
    for i, (snap, close) in enumerate(QUESTIONS):
        row = make_row(f"q{i}", snapshot=_when(snap), outcome=(i % 2, 1 - i % 2))
        row["close_time"] = _when(close)
        rows.append(row)
    pool = [make_row(f"p{i}", snapshot=_when(1)) for i in range(2)]
    write_csv(folder / "subset_data_Sports_11.csv", rows + pool)
    write_csv(folder / "subset_data_Sports_train_2.csv", pool)
    cfg = {"task": "forecast", "data": {"path": str(folder), "n_evo": 2, "categories": ["Sports"]},
           "run": {"methods": ["memrl"], "max_questions": len(QUESTIONS)}, "agent": {"top_k": 1},
           "memory": {"top_k": 2}, "memory_baselines": {"experience": True, "extraction": extraction},
           "llm": {"backend": "simulated"}}
    task = ProphetArenaTask()
    exp = task.parse(cfg, RunOptions(config_path=tmp_path / "pa.toml", out=tmp_path / "o"))
    task.prepare(exp)
    return task, exp, task.runs(exp)[0]


def _plain(results):
    return [{k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.record.items()
             if k != "llm_latency_s"} for r in results]


def _track(method):
    return [k for k, _ in method.track.applied], [p.outcome.key for p in method.track.pending]


def test_the_plan_is_the_hand_worked_one(tmp_path):
    task, exp, run = _experiment(tmp_path)
    episodes = task.episodes(exp, run)
    assert [e.payload[1] for e in episodes] == [f"q{i}" for i in range(len(QUESTIONS))]  # cutoff order
    assert task.round_size(exp, run) == PLAN
    assert [k for k, e in enumerate(episodes) if e.payload[2]] == [0, 3, 4, 6, 7]


@pytest.mark.parametrize("extraction", ["llm", "rule"])
def test_leak_free_rounds_give_the_sequential_records_for_any_split(tmp_path, extraction):
    """The plan's rounds, whole or cut into 2 and 3 shares (streams), against one question per round."""
    task, exp, run = _experiment(tmp_path, extraction)
    episodes = task.episodes(exp, run)
    factory = task.llm_factory(exp, run)
    alone = [replace(e, payload=(*e.payload[:2], True)) for e in episodes]  # every question opens its round
    ref = task.make_method(exp, run)
    want = LocalExecutor().run(ref, alone, factory, round_size=1)
    sources = set(ref.track.memory.snapshot()["mem_source"].tolist())
    assert sources == ({"llm"} if extraction == "llm" else {"rule"})  # the releases observed by the LLM, or by rule
    seen = [len(json.loads(r.record["experience_visible"])) for r in want]
    assert seen == [0, 0, 0, 1, 2, 2, 3, 4, 4]  # each question sees the outcomes resolved before its cutoff
    for streams in (1, 2, 3):
        method = task.make_method(exp, run)
        got = LocalExecutor(streams_per_worker=streams).run(method, episodes, factory,
                                                            round_size=task.round_size(exp, run))
        assert _plain(got) == _plain(want), f"streams={streams}"
        assert _track(method) == _track(ref)


class _Counting:
    """The backend of a factory, counting the requests that reach it (from every stream)."""

    def __init__(self, inner, seen):
        self.inner, self.seen = inner, seen

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, requests):
        self.seen.extend(str(r.prompt or r.messages) for r in requests)
        return self.inner.generate(requests)


def test_a_shares_streams_make_the_rounds_release_once(tmp_path):
    """Streams of one share read one snapshot: the release's requests reach the backend once, not once per stream."""
    task, exp, run = _experiment(tmp_path, "llm")
    episodes = task.episodes(exp, run)
    factory = task.llm_factory(exp, run)
    sent = {}
    for streams in (1, 3):
        seen = sent[streams] = []
        LocalExecutor(streams_per_worker=streams).run(task.make_method(exp, run), episodes,
                                                      lambda: _Counting(factory(), seen),
                                                      round_size=task.round_size(exp, run))
    assert len(sent[1]) > len(episodes)  # the releases' extraction requests came on top of the forecasts
    assert sorted(sent[3]) == sorted(sent[1])


def test_a_round_across_a_resolution_is_refused(tmp_path):
    task, exp, run = _experiment(tmp_path)
    episodes = task.episodes(exp, run)
    with pytest.raises(AssertionError, match="leak_free_rounds"):
        LocalExecutor().run(task.make_method(exp, run), episodes, task.llm_factory(exp, run), round_size=4)


def test_pipelined_rounds_lose_no_outcome(tmp_path):
    """Rounds in flight read an older snapshot (staleness) but every outcome is queued and released once."""
    task, exp, run = _experiment(tmp_path)
    episodes = task.episodes(exp, run)
    method = task.make_method(exp, run)
    got = LocalExecutor(pipeline_rounds=2).run(method, episodes, task.llm_factory(exp, run),
                                               round_size=task.round_size(exp, run))
    applied, pending = _track(method)
    assert sorted(applied + pending) == sorted(f"memrl:q{i}" for i in range(len(QUESTIONS)))
    assert len(set(applied)) == len(applied)
    # the last round read the snapshot after round 2 (q4, q5): q6's outcome, queued by round 3 and resolved
    # on day 8, was not in it, so it stays queued (sequentially it would have been released on day 9)
    assert applied == ["memrl:q0", "memrl:q2", "memrl:q3"] and "memrl:q6" in pending
    assert len(got) == len(episodes)


def test_episode_payloads_without_the_flag_open_their_round(tmp_path):
    """An episode list built by hand (payload ``("question", qid)``) runs one question per round as before."""
    task, exp, run = _experiment(tmp_path)
    bare = [Episode(e.episode_id, e.payload[:2], e.seed, e.phase) for e in task.episodes(exp, run)]
    got = LocalExecutor().run(task.make_method(exp, run), bare, task.llm_factory(exp, run), round_size=1)
    assert [r.record["qid"] for r in got] == [f"q{i}" for i in range(len(QUESTIONS))]


def test_the_release_memo_computes_a_key_once_keeps_no_failure_and_is_bounded():
    import threading

    from engine.memo import Memo

    memo, calls, gate = Memo(size=2), [], threading.Barrier(4)

    def slow():
        calls.append(1)
        return "release"

    def ask():
        gate.wait()
        got.append(memo.get("k", slow))

    got = []
    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and sorted(made for _, made in got) == [False, False, False, True]
    assert {value for value, _ in got} == {"release"}

    def fail():
        raise RuntimeError("model reply")

    with pytest.raises(RuntimeError):
        memo.get("bad", fail)
    assert memo.get("bad", lambda: "retried") == ("retried", True)  # a failure is not kept
    memo.get("third", lambda: 3)
    assert memo.get("k", lambda: "again") == ("again", True)  # the oldest entry went (size 2)


def test_a_rounds_streams_decode_and_read_its_track_once(tmp_path, monkeypatch):
    """The streams of a round fork one released track per process: the track is decoded once a round and its
    memory's reader built once for the release and once for the round's retrievals, however many streams."""
    from engine.forecast import outcome_memory, round_methods

    task, exp, run = _experiment(tmp_path, "llm")
    episodes = task.episodes(exp, run)
    counts = {}
    decode, read = round_methods.unpack, outcome_memory.ExperienceTrack.reader
    for streams in (1, 3):
        n = counts[streams] = {"decode": 0, "reader": 0}

        def counted_unpack(arr, live=None, n=n):
            n["decode"] += live is not None  # only the track is decoded against a live one
            return decode(arr, live)

        def counted_reader(track, n=n):
            n["reader"] += 1
            return read(track)

        monkeypatch.setattr(round_methods, "unpack", counted_unpack)
        monkeypatch.setattr(outcome_memory.ExperienceTrack, "reader", counted_reader)
        LocalExecutor(streams_per_worker=streams).run(task.make_method(exp, run), episodes,
                                                      task.llm_factory(exp, run), round_size=PLAN)
    assert counts[3] == counts[1]
    assert counts[1]["decode"] == len(PLAN)
    assert counts[1]["reader"] == len(PLAN) + 4  # each round's retrievals, and the four rounds that release


def test_a_fork_shares_the_memory_until_a_release_applies_in_it(tmp_path):
    """A fork reads its base's memory; a release that applies in the fork copies the memory first (the base and
    the other forks keep theirs); a fork is never written."""
    from engine import codec
    from engine.forecast.outcome_memory import TrackFork
    from engine.forecast.round_methods import pack, unpack

    task, exp, run = _experiment(tmp_path, "rule")
    method = task.make_method(exp, run)
    LocalExecutor().run(method, task.episodes(exp, run), task.llm_factory(exp, run), round_size=PLAN)
    base = unpack(pack(method.track), live=method.track)
    before = {k: v.tolist() for k, v in base.memory.snapshot().items()}
    shared = {}
    a, b = base.fork(shared), base.fork(shared)
    assert isinstance(a, TrackFork) and a.memory is base.memory and a.reader() is b.reader()
    assert a.pending == base.pending and a.pending is not base.pending
    release = a.release(max(p.resolved_at for p in a.pending), task.llm_factory(exp, run)())
    assert release is not None and not a.pending and len(a.applied) > len(base.applied)
    assert a.memory is not base.memory and b.memory is base.memory  # copied on write
    assert {k: v.tolist() for k, v in base.memory.snapshot().items()} == before and base.pending == b.pending
    assert b.install(release) == len(release.keys) and b.memory is not base.memory
    assert {k: v.tolist() for k, v in b.memory.snapshot().items()} == {k: v.tolist() for k, v in a.memory.snapshot().items()}
    with pytest.raises(TypeError, match="TrackFork cannot be written"):
        codec.dumps(a)
