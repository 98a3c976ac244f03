"""Calibrate the simulated Game-of-24 policy against plain ToT (engine/game24/tot.py).

Runs ToT (breadth 5, n_evaluate 3: ToT's Game-of-24 settings) with the
simulated policy on a slice of the ToT puzzle file, for several episode-seed
offsets, and prints accuracy (any of b / first output) and LLM calls per
puzzle. Targets: the published ToT figures (about 65-74% accuracy, about 50
calls per puzzle; the ToE paper's ToT baseline: 64.9%, 51.7 calls).

Figures are SIMULATED (the policy is a test harness, not a model).

    python scripts/llm_calibrate_sim.py --csv ../shared/data/game24/24.csv --start 900 --count 100 --offsets 0 1000 2000
    python scripts/llm_calibrate_sim.py ... --set p_solvable_move=0.4 --set max_proposals=7
"""

from __future__ import annotations

import argparse
import csv
import time

from engine.config import from_dict, parse_value
from engine.game24.tot import PuzzleTask, ToTConfig, ToTMethod
from engine.game24.simulated_policy import SimulatedPolicyParams, simulated_backend
from engine.rounds import Episode


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", required=True, help="ToT's 24.csv (columns Rank, Puzzles)")
    ap.add_argument("--start", type=int, default=900)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--breadth", type=int, default=5)
    ap.add_argument("--offsets", type=int, nargs="+", default=[0, 1000, 2000], help="episode-seed offsets")
    ap.add_argument("--set", action="append", default=[], help="policy parameter KEY=VALUE")
    args = ap.parse_args(argv)
    with open(args.csv) as fh:
        rows = list(csv.DictReader(fh))[args.start:args.start + args.count]
    overrides = {}
    for item in args.set:
        k, _, v = item.partition("=")
        overrides[k.strip()] = parse_value(v.strip())
    params = from_dict(SimulatedPolicyParams, overrides, "llm.simulated")
    tasks = [PuzzleTask(tuple(int(x) for x in r["Puzzles"].split()), rank=int(r["Rank"])) for r in rows]
    totals = {"any": 0, "first": 0, "calls": 0, "n": 0}
    t0 = time.perf_counter()
    for off in args.offsets:
        method = ToTMethod(config=ToTConfig(breadth=args.breadth))
        eps = [Episode(i, t, seed=off + i) for i, t in enumerate(tasks)]
        res = method.run_episodes(method.snapshot(), eps, simulated_backend(params=params))
        n = len(res)
        a = sum(r.record["success_any"] for r in res)
        f = sum(r.record["success_first"] for r in res)
        c = sum(r.record["calls"] for r in res)
        print(f"  offset {off}: any={a / n:.3f} first={f / n:.3f} calls/puzzle={c / n:.1f}")
        totals["any"] += a
        totals["first"] += f
        totals["calls"] += c
        totals["n"] += n
    n = totals["n"]
    print(
        f"SIMULATED ToT b={args.breadth} puzzles {args.start}..{args.start + len(rows) - 1} x {len(args.offsets)} seeds: "
        f"any-of-b acc={totals['any'] / n:.3f} first acc={totals['first'] / n:.3f} "
        f"calls/puzzle={totals['calls'] / n:.1f} ({time.perf_counter() - t0:.1f}s) overrides={overrides}"
    )


if __name__ == "__main__":
    main()
