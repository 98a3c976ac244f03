"""``toe generic example OUT.jsonl``: write the generic task's generated example problems (engine.generic.data)."""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("generic", help="the generic task: write the example problem file")
    sub = p.add_subparsers(dest="generic_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    ex = sub.add_parser("example", help="write the generated example problems (what data.path = \"example\" runs)")
    ex.add_argument("out", type=Path, help="the JSONL file to write")
    ex.add_argument("-n", type=int, default=60, help="number of problems (default 60)")
    ex.add_argument("--seed", type=int, default=0)
    ex.set_defaults(func=_example)


def _example(args) -> int:
    from engine.errors import InputError
    from engine.generic.data import example_problems, write_problems

    if args.n < 1:
        raise InputError(f"-n must be >= 1, got {args.n}")
    path = write_problems(example_problems(args.n, args.seed), args.out)
    print(f"wrote {args.n} problems to {path}")
    return 0
