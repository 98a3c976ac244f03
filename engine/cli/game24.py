"""``toe game24 solve|verify|precompute``: the exact Game-of-24 core from the command line."""

from __future__ import annotations

import time
from pathlib import Path

PUZZLE_SETS = ("all", "tot", "tot-test")


def register(subparsers) -> None:
    """Add ``toe game24 ...`` to the ``toe`` parser."""
    p = subparsers.add_parser("game24", help="Game of 24: exact solver, verifier, offline experience precomputation")
    sub = p.add_subparsers(dest="game24_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    solve = sub.add_parser("solve", help="print a solution of a puzzle (e.g. toe game24 solve 4 9 10 13) or say there is none")
    solve.add_argument("numbers", nargs="+", metavar="N", help="the puzzle's four numbers")
    solve.add_argument("--all", dest="limit", type=int, default=0, metavar="LIMIT",
                       help="print up to LIMIT distinct solutions instead of one")
    solve.add_argument("--steps", action="store_true", help="also print the Tree-of-Thoughts step lines")
    solve.add_argument("--lo", type=int, default=1, help="smallest allowed number (default 1)")
    solve.add_argument("--hi", type=int, default=13, help="largest allowed number (default 13)")
    solve.set_defaults(func=_solve)

    ver = sub.add_parser("verify", help="check an answer line (or a whole ToT output) against a puzzle")
    ver.add_argument("--puzzle", required=True, help="the puzzle, e.g. '4 9 10 13'")
    ver.add_argument("text", help="e.g. 'Answer: (10 - 4) * (13 - 9) = 24' (use - to read stdin)")
    ver.set_defaults(func=_verify)

    pre = sub.add_parser("precompute", help="precompute every reachable 3- and 2-number state with verified suffixes")
    pre.add_argument("--puzzles", default="tot", metavar="all|tot|tot-test|FILE",
                     help="all = the 1,820 multisets of 1..13; tot = the shipped 1,362 ToT puzzles; "
                          "tot-test = ranks 901-1000; FILE = a ToT CSV or one puzzle per line (default tot)")
    pre.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for the Parquet tables")
    pre.add_argument("--store", type=Path, default=None, metavar="STORE_DIR",
                     help="also load the tables into an experience store and save it here")
    pre.set_defaults(func=_precompute)


def _solve(args) -> int:
    from engine.game24 import all_solutions, parse_puzzle, solve_steps, step_lines, steps_to_expression

    puzzle = parse_puzzle(" ".join(args.numbers), lo=args.lo, hi=args.hi)
    steps = solve_steps(puzzle.numbers)
    if steps is None:
        print(f"{puzzle.text}: no solution")
        return 0
    if args.limit > 0:
        for expr in all_solutions(puzzle.numbers, limit=args.limit):
            print(f"{expr} = 24")
    else:
        print(f"{steps_to_expression(puzzle.numbers, steps)} = 24")
    if args.steps:
        for line in step_lines(puzzle.numbers, steps):
            print(line)
    return 0


def _verify(args) -> int:
    import sys

    from engine.game24 import parse_puzzle, verify_trajectory

    puzzle = parse_puzzle(args.puzzle)
    text = sys.stdin.read() if args.text == "-" else args.text
    v = verify_trajectory(text, puzzle.numbers)
    print("ok" if v.ok else f"rejected ({v.reason}): {v.detail}")
    return 0 if v.ok else 1


def _load_set(spec: str):
    from engine.game24 import all_multisets, load_puzzles, test_split

    if spec == "all":
        return all_multisets(), "all 1..13 multisets"
    if spec == "tot":
        return load_puzzles(), "Tree-of-Thoughts 24.csv"
    if spec == "tot-test":
        return test_split(load_puzzles()), "Tree-of-Thoughts 24.csv ranks 901-1000"
    return load_puzzles(spec), str(spec)


def _precompute(args) -> int:
    from engine.game24.precompute import load_into_store, precompute, read_tables, write_tables

    puzzles, source = _load_set(args.puzzles)
    t0 = time.perf_counter()
    pre = precompute(puzzles)
    t1 = time.perf_counter()
    manifest = write_tables(pre, args.out, source=source)
    t2 = time.perf_counter()
    print(f"puzzles: {len(puzzles)} ({source})")
    print(f"{'level':>5} {'states':>8} {'solvable':>9} {'edges out':>10}")
    for n, c in manifest["levels"].items():
        print(f"{n:>5} {c['states']:>8} {c['solvable']:>9} {c['edges_out']:>10}")
    print(f"experiences (verified suffixes, reliability 1): {manifest['experiences']}")
    print(f"compute {t1 - t0:.2f} s (JIT compile included on a cold cache), tables {t2 - t1:.2f} s -> {args.out}")
    if args.store is not None:
        load = load_into_store(read_tables(args.out))
        ck = load.store.save(args.store)
        print(f"store: {load.store.n_experiences} experiences, {load.store.n_nodes - 1} nodes -> {ck}")
    return 0
