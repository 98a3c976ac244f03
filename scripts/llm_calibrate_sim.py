"""Calibrate the simulated Game-of-24 policy with a minimal Tree-of-Thoughts BFS.

A stand-in for engine/game24/tot.py: ToT's BFS (Yao et al. 2023) with breadth
``b`` (5), one propose call per frontier state, ``n_evaluate`` (3) value samples
per new state in one call (deduplicated per puzzle by prompt, like ToT's value
cache), 4 steps (3 proposals, then the answer), greedy top-b selection. All
puzzles of a step are batched into one ``generate`` call.

Figures are SIMULATED (the policy is a test harness, not a model).

    python scripts/llm_calibrate_sim.py --csv ../shared/data/game24/24.csv --start 900 --count 100
    python scripts/llm_calibrate_sim.py ... --set p_solvable_move=0.4 --set max_proposals=7
"""

from __future__ import annotations

import argparse
import csv
import time

from engine.config import from_dict, parse_value
from engine.game24 import prompts as P
from engine.llm.base import MeteredBackend, Request
from engine.llm.simulated_game24 import SimulatedGame24Backend, SimulatedPolicyParams, answer_is_correct


def tot_bfs(backend, puzzles: list[str], breadth: int = 5, n_evaluate: int = 3, seed: int = 0):
    """Run ToT BFS on all puzzles in lockstep; returns (top1 correct, any correct, calls) per puzzle."""
    states = {i: [""] for i in range(len(puzzles))}  # per puzzle: list of step texts y
    calls = [0] * len(puzzles)
    for step in range(4):
        reqs, owners = [], []
        for i, ys in states.items():
            for y in ys:
                cur = P.current_numbers(y) if y else puzzles[i]
                if cur == "24":
                    prompt = P.answer_prompt(puzzles[i], y)
                else:
                    prompt = P.propose_prompt(cur if cur is not None else y.strip().splitlines()[-1])
                reqs.append(Request(prompt=prompt, n=1, temperature=0.7, seed=seed * 1_000_003 + i, episode=str(i)))
                owners.append((i, y))
        outs = backend.generate(reqs)
        cands: dict[int, list[str]] = {i: [] for i in states}
        for (i, y), r in zip(owners, outs):
            calls[i] += 1
            for line in r.texts[0].splitlines():
                if line.strip():
                    cands[i].append(y + line.strip() + "\n")
        # value: one call per unique prompt per puzzle, n_evaluate samples
        vreqs, vkeys = [], []
        prompt_of = {}
        for i, ys in cands.items():
            seen = {}
            for y in ys:
                last = y.strip().splitlines()[-1]
                if "left:" not in last.lower():
                    prompt = P.value_last_step_prompt(puzzles[i], last)
                else:
                    prompt = P.value_prompt(P.current_numbers(last) or last)
                prompt_of[(i, y)] = prompt
                if prompt not in seen:
                    seen[prompt] = True
                    vreqs.append(Request(prompt=prompt, n=n_evaluate, temperature=0.7, seed=seed * 1_000_003 + i))
                    vkeys.append((i, prompt))
        vouts = backend.generate(vreqs)
        value = {}
        for (i, prompt), r in zip(vkeys, vouts):
            calls[i] += 1
            value[(i, prompt)] = P.value_of_outputs(r.texts)
        new_states = {}
        for i, ys in cands.items():
            uniq = list(dict.fromkeys(ys))  # duplicates of a path count once (ToT's local cache)
            scored = sorted(uniq, key=lambda y: -value[(i, prompt_of[(i, y)])])
            new_states[i] = scored[:breadth]
        states = new_states
    top1, anyc = [], []
    for i, ys in states.items():
        nums = [P.parse_number(t) for t in puzzles[i].split()]
        ok = [answer_is_correct(nums, P.parse_answer(y)) for y in ys]
        top1.append(bool(ok and ok[0]))
        anyc.append(any(ok))
    return top1, anyc, calls


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True)
    ap.add_argument("--start", type=int, default=900)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--breadth", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="policy parameter KEY=VALUE")
    args = ap.parse_args(argv)
    with open(args.csv) as fh:
        puzzles = [row["Puzzles"] for row in csv.DictReader(fh)][args.start:args.start + args.count]
    overrides = {}
    for item in args.set:
        k, _, v = item.partition("=")
        overrides[k.strip()] = parse_value(v.strip())
    params = from_dict(SimulatedPolicyParams, overrides, "llm.simulated")
    t0 = time.perf_counter()
    tops, anys, calls = [], [], []
    for s in range(args.seeds):
        backend = MeteredBackend(SimulatedGame24Backend(params, seed=s))
        t, a, c = tot_bfs(backend, puzzles, breadth=args.breadth, seed=s)
        tops += t
        anys += a
        calls += c
    n = len(tops)
    print(
        f"SIMULATED ToT b={args.breadth} puzzles={args.start}..{args.start + args.count - 1} seeds={args.seeds}: "
        f"top1 acc={sum(tops) / n:.3f} any-of-b acc={sum(anys) / n:.3f} "
        f"calls/puzzle={sum(calls) / n:.1f} ({time.perf_counter() - t0:.1f}s) params={overrides}"
    )


if __name__ == "__main__":
    main()
