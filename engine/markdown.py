"""Markdown tables: the one renderer every report, sweep and doc table uses."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

_SEPARATOR = {"l": "---|", "r": "---:|", "c": ":---:|"}


def table(head: Sequence[Any], rows: Iterable[Sequence[Any]], align: str | Sequence[str] | None = None) -> list[str]:
    """A Markdown table's lines: the header, the ``|---|`` separator and one line per row (cells as ``str``).

    ``align`` gives each column's alignment, one letter per column ("lrr" or ``["l", "r", "r"]``): "l"
    (the default, ``---``), "r" (``---:``) or "c" (``:---:``)."""
    head = [str(h) for h in head]
    letters = ["l"] * len(head) if align is None else list(align)
    if len(letters) != len(head):
        raise ValueError(f"align has {len(letters)} letters for {len(head)} columns: {align!r}")
    for a in letters:
        if a not in _SEPARATOR:
            raise ValueError(f"align letters are 'l', 'r' or 'c', got {a!r} in {align!r}")
    lines = [_line(head), "|" + "".join(_SEPARATOR[a] for a in letters)]
    for row in rows:
        cells = [str(c) for c in row]
        if len(cells) != len(head):
            raise ValueError(f"a table row has {len(cells)} cells for {len(head)} columns: {cells[:3]}")
        lines.append(_line(cells))
    return lines


def _line(cells: list[str]) -> str:
    return "|" + "".join(f" {c} |" if c else " |" for c in cells)
