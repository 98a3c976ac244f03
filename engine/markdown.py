"""Markdown tables: the one renderer every report, sweep and doc table uses."""

from __future__ import annotations

from typing import Any, Iterable, Sequence


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table's lines: the header, the ``|---|`` separator and one line per row (cells as ``str``)."""
    head = [str(h) for h in head]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [str(c) for c in row]
        if len(cells) != len(head):
            raise ValueError(f"a table row has {len(cells)} cells for {len(head)} columns: {cells[:3]}")
        lines.append("| " + " | ".join(cells) + " |")
    return lines
