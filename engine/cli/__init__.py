"""The ``toe`` command. Each subcommand lives in its own module with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from engine.errors import EngineError

# One module per command group; each defines register(subparsers) and sets args.func.
COMMAND_MODULES = ("run", "sweep", "store", "game24", "llm", "forecast", "flex", "generic")


def build_parser() -> argparse.ArgumentParser:
    from engine import __version__

    parser = argparse.ArgumentParser(
        prog="toe",
        description="Batch engine for experience management in self-evolving LLM agents.",
    )
    parser.add_argument("--version", action="version", version=f"toe {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"engine.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):  # `toe` alone, or a group without its subcommand: the help
        parser.print_help()
        return 0 if args.command is None else 2
    try:
        return int(args.func(args) or 0)
    except EngineError as exc:
        print(f"toe: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("toe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `toe ... | head`: the reader left; the rest of the output goes nowhere, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
