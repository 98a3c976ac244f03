"""`toe llm ...` subcommands (not yet implemented in this checkout)."""


def register(subparsers) -> None:
    """Add this module's subcommands to the `toe` parser."""
