"""Calls from several threads share one modelled engine's batch (continuous batching across calls)."""

import threading

import numpy as np
import pytest

from engine.llm.base import Completion, Request, Response
from engine.llm.server_model import ServerModelBackend, ServerProfile, _Call, _EngineState, plan_call

from server_fakes import TOY, FakeClock  # noqa: E402  (tests/engine/llm/server_fakes.py)


class Fixed:
    name, model = "fixed", "fixed-model"

    def __init__(self, tokens, prompt_tokens):
        self.tokens, self.prompt_tokens = tokens, prompt_tokens

    def generate(self, requests):
        return [Response(tuple(Completion(f"{i}.{j}", self.tokens[i][j]) for j in range(len(self.tokens[i]))),
                         self.prompt_tokens[i], 0.0, self.name, self.model) for i in range(len(requests))]


@pytest.mark.parametrize("seed", range(6))
def test_one_call_at_a_time_is_exactly_plan_call(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    tokens = [[int(x) for x in rng.integers(0, 30, size=int(rng.integers(1, 4)))] for _ in range(n)]
    prompts = [int(x) for x in rng.integers(0, 200, size=n)]
    clock = FakeClock(5.0)
    server = ServerModelBackend(Fixed(tokens, prompts), TOY, clock=clock)
    out = server.generate([Request(prompt=str(i), n=len(tokens[i])) for i in range(n)])
    plan = plan_call(TOY, prompts, tokens)
    assert sum(clock.slept) == pytest.approx(plan.duration_s)
    assert [r.latency_s for r in out] == pytest.approx(list(plan.finish_s))
    st = server.server_stats()
    assert st["busy_s"] == pytest.approx(plan.duration_s) and st["decode_tokens"] == plan.decode_tokens
    assert st["max_in_flight"] == plan.max_in_flight


def test_a_call_arriving_mid_step_joins_the_batch_at_the_next_step_boundary():
    engine = _EngineState(TOY)
    a = _Call(0.0, [0], [[5]])
    engine.add(a, [[5]])
    engine.advance(0.015)  # A decodes alone at 11 ms per step; nothing has finished yet
    b = _Call(0.015, [0], [[2]])
    engine.add(b, [[2]])
    assert engine.projected_end(b) == pytest.approx(0.046)
    engine.advance(1.0)
    # A alone: steps end at 0.011, 0.022 (B waits for the boundary); A+B: 2 steps of 12 ms -> 0.046, B done;
    # A's last token alone: 0.057
    assert b.pending == 0 and b.finish == pytest.approx([0.046 - 0.015])
    assert a.pending == 0 and a.finish == pytest.approx([0.057])
    assert engine.books["busy_s"] == pytest.approx(0.057) and engine.books["decode_tokens"] == 7


def test_concurrent_calls_from_threads_share_the_engine_and_keep_exact_books():
    # 2 calls of 2 sequences x 20 tokens on 4 slots; time_scale 0.05 keeps the test short
    prof = ServerProfile(decode_step_s=0.010, decode_step_per_seq_s=0.001, prefill_tokens_per_s=1e6, max_num_seqs=4)
    server = ServerModelBackend(Fixed([[20], [20]], [0, 0]), prof, time_scale=0.05)
    alone = plan_call(prof, [0, 0], [[20], [20]]).duration_s  # 20 steps at b=2
    start = threading.Barrier(2)

    def call():
        start.wait()
        server.generate([Request(prompt="a"), Request(prompt="b")])

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    st = server.server_stats()
    assert st["calls"] == 2 and st["decode_tokens"] == 80 and st["max_concurrent_calls"] == 2
    assert st["max_in_flight"] == 4  # both calls' sequences in one batch
    # one shared batch of 4 (20 steps at 14 ms) takes less engine time than the two calls one after the other
    assert st["busy_s"] < 2 * alone * 0.05 * 0.9


def test_callers_are_not_woken_by_each_other(monkeypatch):
    """A caller sleeps until its projected end (arrivals only delay it): each call projects its end a few times,
    not once per arrival and departure of every other call (that cost O(calls in flight) per event)."""
    projections = []
    real = _EngineState.projected_end
    monkeypatch.setattr(_EngineState, "projected_end", lambda self, call: projections.append(1) or real(self, call))
    prof = ServerProfile(decode_step_s=0.010, decode_step_per_seq_s=0.001, prefill_tokens_per_s=1e6, max_num_seqs=4)
    n = 24
    server = ServerModelBackend(Fixed([[5 + i % 7] for i in range(n)], [0] * n), prof, time_scale=0.05)
    start = threading.Barrier(n)

    def call(i):
        start.wait()
        server.generate([Request(prompt=str(i))])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert server.server_stats()["calls"] == n and server.server_stats()["max_concurrent_calls"] > 1
    # woken at every other call's arrival and departure, each of the 24 would project about 2 x 24 times
    assert len(projections) <= 4 * n, len(projections)


@pytest.mark.parametrize("seed", range(40))
def test_a_projection_is_the_engine_run_ahead_to_the_float(seed):
    """projected_end (one light loop, no copy) gives every pending call the end the engine reaches when it runs
    on with no other arrival, equal to the bit: random engines, calls of 1-3 requests of 1-3 sequences, 0-120
    tokens, prompts of 1-3000 tokens, arrivals in bursts and gaps."""
    import random

    rng = random.Random(seed)
    prof = ServerProfile(decode_step_s=rng.uniform(1e-3, 2e-2), decode_step_per_seq_s=rng.uniform(0, 1e-3),
                         prefill_tokens_per_s=rng.uniform(1e3, 5e4), max_num_seqs=rng.randint(1, 16))
    engine, now, calls, checked = _EngineState(prof), 0.0, [], 0
    for _ in range(30):
        now += rng.expovariate(20)
        engine.advance(now)
        decode = [[rng.randint(0, 120) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
        call = _Call(now, [rng.randint(1, 3000) for _ in decode], decode)
        engine.add(call, decode)
        calls.append(call)
        for c in calls:
            if c.pending:
                assert engine.projected_end(c) == engine.run_ahead_end(c)
                checked += 1
    assert checked > 30
