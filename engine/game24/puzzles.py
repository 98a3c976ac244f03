"""Game-of-24 puzzles: parsing with bounds, the Tree-of-Thoughts puzzle file, the test split.

The puzzle file ships in the package (``engine/data/game24/24.csv``, a byte copy
of the Tree-of-Thoughts repository's ``src/tot/data/24/24.csv``): 1,362 puzzles
ranked by average human solve time, columns ``Rank,Puzzles,AMT (s),Solved
rate,1-sigma Mean (s),1-sigma STD (s)``. The standard test split is ranks 901
to 1000. :func:`all_multisets` enumerates all 1,820 multisets of four numbers
from 1 to 13 with exact solvable flags from the compiled solver.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from engine.errors import PersistenceError, PuzzleError

DEFAULT_LO = 1
DEFAULT_HI = 13
PUZZLE_SIZE = 4
TEST_RANKS = (901, 1000)  # inclusive, the Tree-of-Thoughts test split
TOT_COLUMNS = ("Rank", "Puzzles")

_INT = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class Puzzle:
    """A puzzle: four integers, with its rank in the source file when it has one.

    ``rank`` is the 1-based Tree-of-Thoughts rank (None for puzzles not from a
    ranked file); ``solvable`` is filled by :func:`all_multisets` and
    :func:`load_puzzles` callers that ask for it.
    """

    rank: int | None
    numbers: tuple[int, ...]
    amt_s: float | None = None
    solved_rate: float | None = None
    solvable: bool | None = None

    @property
    def text(self) -> str:
        """The Tree-of-Thoughts input form: ``"4 9 10 13"``."""
        return " ".join(str(n) for n in self.numbers)

    def __str__(self) -> str:
        return self.text


def _check_bounds(lo, hi):
    for name, v in (("lo", lo), ("hi", hi)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise PuzzleError(f"{name} must be an int, got {v!r}")
    if lo > hi:
        raise PuzzleError(f"bounds must satisfy lo <= hi, got lo={lo}, hi={hi}")


def parse_puzzle(text_or_seq, lo: int = DEFAULT_LO, hi: int = DEFAULT_HI, size: int = PUZZLE_SIZE) -> Puzzle:
    """Parse ``"4 9 10 13"`` (spaces or commas) or a sequence of ints into a :class:`Puzzle`.

    The numbers keep their given order. Raises :class:`PuzzleError`, naming the
    input, for non-numeric or non-integer items, a count other than ``size``, or
    a number outside ``lo..hi``.
    """
    _check_bounds(lo, hi)
    if isinstance(text_or_seq, Puzzle):
        text_or_seq = text_or_seq.numbers
    if isinstance(text_or_seq, (str, bytes)):
        text = text_or_seq.decode() if isinstance(text_or_seq, bytes) else text_or_seq
        items: list = [t for t in re.split(r"[\s,;]+", text.strip()) if t]
    else:
        try:
            items = list(text_or_seq)
        except TypeError:
            raise PuzzleError(
                f"puzzle must be text like '4 9 10 13' or a sequence of ints, got {type(text_or_seq).__name__} {text_or_seq!r}"
            ) from None
    numbers = []
    for item in items:
        if isinstance(item, bool):
            raise PuzzleError(f"puzzle {text_or_seq!r}: {item!r} is not an integer")
        if isinstance(item, (int, np.integer)):
            numbers.append(int(item))
        elif isinstance(item, str) and _INT.match(item.strip()):
            numbers.append(int(item))
        else:
            raise PuzzleError(f"puzzle {text_or_seq!r}: {item!r} is not an integer")
    if len(numbers) != size:
        raise PuzzleError(f"puzzle {text_or_seq!r} must have exactly {size} numbers, got {len(numbers)}")
    bad = [n for n in numbers if not lo <= n <= hi]
    if bad:
        raise PuzzleError(f"puzzle {text_or_seq!r}: numbers must be in {lo}..{hi}, got {bad}")
    return Puzzle(rank=None, numbers=tuple(numbers))


def default_puzzle_file():
    """The shipped Tree-of-Thoughts puzzle file (a Traversable inside the package)."""
    return resources.files("engine").joinpath("data", "game24", "24.csv")


def _float_or_none(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip().rstrip("%")
    try:
        return float(text)
    except ValueError:
        return None


def parse_puzzle_text(content: str, source: str = "<text>", lo: int = DEFAULT_LO, hi: int = DEFAULT_HI) -> list[Puzzle]:
    """Puzzles from file content: a ToT CSV (``Rank,Puzzles,...``) or one puzzle per line.

    In the plain format blank lines and ``#`` comments are skipped and ranks are
    the 1-based line numbers of the puzzles.
    """
    first = content.lstrip("\ufeff").split("\n", 1)[0]
    out: list[Puzzle] = []
    if first.strip().lower().startswith("rank"):
        reader = csv.DictReader(io.StringIO(content.lstrip("\ufeff")))
        fields = [f.strip() for f in (reader.fieldnames or [])]
        missing = [c for c in TOT_COLUMNS if c not in fields]
        if missing:
            raise PersistenceError(f"puzzle file {source}: missing columns {missing}; got {fields}")
        for lineno, row in enumerate(reader, start=2):
            row = {(k or "").strip(): v for k, v in row.items()}
            try:
                rank = int(str(row["Rank"]).strip())
            except ValueError:
                raise PersistenceError(f"puzzle file {source} line {lineno}: Rank {row['Rank']!r} is not an integer") from None
            try:
                p = parse_puzzle(row["Puzzles"] or "", lo, hi)
            except PuzzleError as exc:
                raise PuzzleError(f"puzzle file {source} line {lineno}: {exc}") from None
            rate = _float_or_none(row.get("Solved rate"))
            out.append(
                Puzzle(
                    rank=rank,
                    numbers=p.numbers,
                    amt_s=_float_or_none(row.get("AMT (s)")),
                    solved_rate=None if rate is None else rate / 100.0,
                )
            )
    else:
        rank = 0
        for lineno, line in enumerate(content.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            rank += 1
            try:
                p = parse_puzzle(line, lo, hi)
            except PuzzleError as exc:
                raise PuzzleError(f"puzzle file {source} line {lineno}: {exc}") from None
            out.append(Puzzle(rank=rank, numbers=p.numbers))
    if not out:
        raise PersistenceError(f"puzzle file {source} holds no puzzles")
    return out


def load_puzzles(path: str | Path | None = None, lo: int = DEFAULT_LO, hi: int = DEFAULT_HI) -> list[Puzzle]:
    """Load a puzzle file; by default the shipped Tree-of-Thoughts file (1,362 puzzles, rank order)."""
    if path is None:
        content = default_puzzle_file().read_text(encoding="utf-8")
        source = "engine/data/game24/24.csv"
    else:
        p = Path(path)
        if not p.is_file():
            raise PersistenceError(f"puzzle file {str(p)!r} does not exist")
        try:
            content = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise PersistenceError(f"puzzle file {str(p)!r} is not UTF-8 text: {exc}") from None
        source = str(p)
    return parse_puzzle_text(content, source, lo, hi)


def test_split(puzzles: Sequence[Puzzle], first: int = TEST_RANKS[0], last: int = TEST_RANKS[1]) -> list[Puzzle]:
    """Puzzles whose rank is in ``first..last`` (default the ToT test split, ranks 901-1000)."""
    if first > last:
        raise PuzzleError(f"test split needs first <= last, got first={first}, last={last}")
    return [p for p in puzzles if p.rank is not None and first <= p.rank <= last]


test_split.__test__ = False  # not a pytest test when imported into a test module


def all_multisets(lo: int = DEFAULT_LO, hi: int = DEFAULT_HI, size: int = PUZZLE_SIZE) -> list[Puzzle]:
    """Every multiset of ``size`` numbers from ``lo..hi`` (ascending, lexicographic order),
    each with its exact ``solvable`` flag (1,820 multisets, 1,362 solvable, for 1..13).
    ``rank`` is None: these are not ranked by difficulty."""
    _check_bounds(lo, hi)
    from engine.game24.solver import is_solvable_many

    combos = list(itertools.combinations_with_replacement(range(lo, hi + 1), size))
    flags = is_solvable_many(combos) if combos else np.zeros(0, bool)
    return [Puzzle(rank=None, numbers=tuple(c), solvable=bool(f)) for c, f in zip(combos, flags)]


def with_solvable(puzzles: Iterable[Puzzle]) -> list[Puzzle]:
    """Copies of ``puzzles`` with their ``solvable`` flag filled in (one compiled batch)."""
    from dataclasses import replace

    from engine.game24.solver import is_solvable_many

    puzzles = list(puzzles)
    flags = is_solvable_many([p.numbers for p in puzzles]) if puzzles else []
    return [replace(p, solvable=bool(f)) for p, f in zip(puzzles, flags)]
