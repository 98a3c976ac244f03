"""LLM interface overhead (simulated policy) and local-model throughput, one run.

1. **Interface overhead** per request: the batched path
   ``MeteredBackend(SimulatedGame24Backend).generate(requests)`` (request
   handling, seeds, stop/max-token limits, Completion/Response objects, usage
   metering) against the policy's own time: ``policy.complete`` on the same
   (prompt, seed, sample) triples plus counting the prompt's and each sample's
   tokens (what any model does when it reads and writes text), measured in the same run, interleaved,
   process time with the garbage collector off (as timeit does), 15 pairs.
   Overhead = median over pairs of
   (interface time - policy time) / policy time; target < 5%. The requests are
   one ToT step's mix: propose, value (n=3), answer and last-step value prompts.
2. **Local model throughput**: SmolLM2-135M-Instruct through llama.cpp
   (xllamacpp, ``TOE_LLM_THREADS`` threads, default 1: on a shared machine
   llama.cpp's spin-waiting threads starve, see benchmarks/results/llm.md) generating 8 chat requests of up to 48 tokens
   (counts are the server's) with 1 and with 4 parallel slots; tokens/s and
   the 4-slot / 1-slot ratio. Marked local_model; skipped without xllamacpp.

Figures from the simulated policy are SIMULATED (a test harness, not a model).

Command (figures in benchmarks/results/llm.md)::

    python -m pytest benchmarks/test_llm.py --benchmark-only --benchmark-timer=time.process_time -s

(process time, not wall time: the machine is shared, and both paths are single-threaded).
"""

from __future__ import annotations

import gc
import os
import statistics
import time

import pytest

from engine.game24 import prompts as P
from engine.llm.base import MeteredBackend, Request
from engine.llm.simulated_game24 import SimulatedGame24Backend
from engine.llm.tokens import count_prompt_tokens, count_tokens

PUZZLES = ["4 9 10 13", "1 1 4 6", "2 3 5 12", "3 3 8 8", "1 2 3 4", "5 5 5 11", "6 7 8 9", "1 5 6 7",
           "2 2 6 6", "1 3 4 6", "4 4 7 7", "1 1 11 11"]
STEPS = "13 - 9 = 4 (left: 4 4 10)\n10 - 4 = 6 (left: 4 6)\n4 * 6 = 24 (left: 24)"


def _requests(copies: int = 40) -> list[Request]:
    reqs = []
    for c in range(copies):
        for i, p in enumerate(PUZZLES):
            seed = 1000 * c + i
            reqs.append(Request(prompt=P.propose_prompt(p), seed=seed, episode=str(i)))
            nums = p.split()
            reqs.append(Request(prompt=P.value_prompt(" ".join(nums[1:])), n=3, seed=seed, episode=str(i)))
        reqs.append(Request(prompt=P.answer_prompt("4 9 10 13", STEPS), seed=c, episode="a"))
        reqs.append(Request(prompt=P.value_last_step_prompt("4 9 10 13", "(10 - 4) * (13 - 9) = 24"),
                            n=3, seed=c, episode="a"))
    return reqs


def test_interface_overhead_simulated(benchmark):
    reqs = _requests(20)
    backend = SimulatedGame24Backend()
    policy = backend.policy
    triples = [(r.prompt, r.seed, i, r.temperature) for r in reqs for i in range(r.n)]
    MeteredBackend(backend).generate(reqs)  # warm the solver memo and caches on both paths

    def policy_only():
        # the model's own work: read (tokenize) each prompt once, write (and count) each sample
        for r in reqs:
            count_prompt_tokens(r.prompt)
            for i in range(r.n):
                count_tokens(policy.complete(r.prompt, r.seed, i, r.temperature))

    def interface():
        MeteredBackend(backend).generate(reqs)

    # reference and interface interleaved, GC off (as timeit does), min of each
    ref, ifc = [], []
    gc.collect()
    gc.disable()
    try:
        for _ in range(15):
            t0 = time.process_time()
            policy_only()
            ref.append(time.process_time() - t0)
            t0 = time.process_time()
            interface()
            ifc.append(time.process_time() - t0)
    finally:
        gc.enable()
    benchmark.pedantic(interface, rounds=3, iterations=1, warmup_rounds=0)
    policy_s = statistics.median(ref)
    iface_s = statistics.median(ifc)
    # median over interleaved pairs: robust to load spikes on a shared machine
    overhead = statistics.median(i / r - 1.0 for i, r in zip(ifc, ref))
    per_req_us = (iface_s - policy_s) / len(reqs) * 1e6
    benchmark.extra_info.update({"requests": len(reqs), "samples": len(triples), "policy_s": policy_s,
                                 "interface_s": iface_s, "overhead": overhead, "overhead_per_request_us": per_req_us})
    print(f"\n[llm overhead] SIMULATED policy: {len(reqs)} requests / {len(triples)} samples; "
          f"policy {policy_s * 1e3:.1f} ms, interface {iface_s * 1e3:.1f} ms, "
          f"overhead {overhead * 100:.2f}% ({per_req_us:.1f} us/request; target < 5%)")
    assert overhead < 0.05


@pytest.mark.local_model
def test_local_model_tokens_per_second(benchmark):
    pytest.importorskip("xllamacpp")
    from engine.llm.local_backend import LocalLlamaBackend

    reqs = [Request(messages=[{"role": "user", "content": f"Write a long story about a robot named R{i}."}],
                    max_tokens=48, temperature=0.8, seed=i) for i in range(8)]
    threads = int(os.environ.get("TOE_LLM_THREADS", "1"))
    results = {}
    for parallel in (1, 4):
        b = LocalLlamaBackend(parallel=parallel, threads=threads, context=256)
        try:
            b.generate(reqs[:1])  # warm-up
            t0 = time.perf_counter()
            out = b.generate(reqs)
            wall = time.perf_counter() - t0
        finally:
            b.close()
        toks = sum(r.completion_tokens for r in out)
        results[parallel] = (toks, wall, toks / wall)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    ratio = results[4][2] / results[1][2]
    benchmark.extra_info.update({f"tok_s_{p}": v[2] for p, v in results.items()} | {"ratio_4_vs_1": ratio})
    for p, (toks, wall, tps) in results.items():
        print(f"\n[llm local] SmolLM2-135M Q4_1, {threads} thread(s), {p} slot(s): {toks} tokens in {wall:.1f} s = {tps:.1f} tokens/s")
    print(f"[llm local] 4 slots / 1 slot = {ratio:.2f}x")
    assert results[1][0] > 0 and results[4][0] > 0
