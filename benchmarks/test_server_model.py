"""Modelled engine: a call's projected end (``_EngineState.projected_end``) against the engine run ahead, same run.

Every caller on a modelled engine projects its call's end at its arrival; this is the simulator's CPU on each Ray
worker of the scaling study. The reference is the engine itself run ahead event by event on a deep copy of its
state (``advance``'s own ``_next`` / ``_do``). Before 3f0761f the projection ran those events on a lighter copy (the
queue copied entry by entry, the calls' progress kept in overlays); the deep copy here also copies the calls, so the
ratio overstates the gain over that code (a stand-alone run of 48 threads x 15 calls gave 0.65 -> 0.25 s of CPU).
Engines of the ``llama3.1-8b-h100`` reference (16 slots) are filled by a seeded stream of calls (1-2 requests of
1-2 sequences, 20-200 tokens, prompts of 300-800 tokens, ``TOE_BENCH_RATE`` arrivals a second: a queue builds as
on a busy worker), and every pending call's end is projected both ways after each arrival: asserted equal to the bit, timed in CPU seconds,
``TOE_BENCH_REPEATS`` (5) interleaved passes, best of each and their ratio.

    python -m pytest benchmarks/test_server_model.py -s -p no:cacheprovider
"""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import record  # noqa: E402
from engine.llm.server_model import REFERENCES, _Call, _EngineState  # noqa: E402

REPEATS = int(os.environ.get("TOE_BENCH_REPEATS", 5))
CALLS = int(os.environ.get("TOE_BENCH_CALLS", 200))
RATE = float(os.environ.get("TOE_BENCH_RATE", 12.0))  # calls arriving per second


def _states(seed: int = 0):
    """(engine, pending calls) after each arrival of the seeded stream (deep copies: each pass reads the same)."""
    rng = random.Random(seed)
    engine, now, calls, out = _EngineState(REFERENCES["llama3.1-8b-h100"]), 0.0, [], []
    for _ in range(CALLS):
        now += rng.expovariate(RATE)
        engine.advance(now)
        decode = [[rng.randint(20, 200) for _ in range(rng.randint(1, 2))] for _ in range(rng.randint(1, 2))]
        call = _Call(now, [rng.randint(300, 800) for _ in decode], decode)
        engine.add(call, decode)
        calls.append(call)
        memo: dict = {}
        snap = copy.deepcopy(engine, memo)
        out.append((snap, [memo[id(c)] for c in calls if c.pending]))
    return out


def _pass(project, states) -> tuple[float, list[float]]:
    t = time.process_time()
    ends = [project(engine, c) for engine, pending in states for c in pending]
    return time.process_time() - t, ends


def test_projection_against_running_the_engine_ahead():
    states = _states()
    projections = sum(len(p) for _, p in states)
    times = {"run_ahead": [], "projected_end": []}
    ends = {}
    for _ in range(REPEATS):
        t, ends["run_ahead"] = _pass(lambda e, c: e.run_ahead_end(c), states)
        times["run_ahead"].append(t)
        t, ends["projected_end"] = _pass(lambda e, c: e.projected_end(c), states)
        times["projected_end"].append(t)
    assert ends["projected_end"] == ends["run_ahead"]  # to the bit
    best = {k: min(v) for k, v in times.items()}
    figures = {"calls": CALLS, "projections": projections,
               "mean_pending": projections / len(states),
               "us_per_projection": {k: 1e6 * v / projections for k, v in best.items()},
               "speedup": best["run_ahead"] / best["projected_end"], "repeats": REPEATS}
    print(figures)
    record("server_model", "projection", figures, note="SIMULATED engine (the modelled vLLM engine's own CPU)")
    assert figures["speedup"] > 1
