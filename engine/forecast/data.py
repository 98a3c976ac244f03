"""Prophet Arena and FutureX task loaders and the evolution/evaluation split.

Prophet Arena CSV (upstream ForeDreamer ``data/Prophet-arena``; 12 columns):
``submission_id, event_ticker, title, snapshot_time, close_time, market_data,
market_outcome, category, markets, augmented_title, rules, sources``.
``markets`` is a Python-list literal, ``market_data`` / ``market_outcome`` /
``sources`` are JSON. Every malformed cell raises :class:`InputError` naming
the file, the 1-based data row and the column.

FutureX items (JSON list or JSONL): ``id``, ``question`` (the forecasting
prompt), ``answer_requirements`` (optional), ``end_time`` (ISO-8601, the
cutoff), ``ground_truth`` (a string or a list of strings), optional
``title``/``level``. Answers are compared after :func:`normalise_answer`.

Split (paper C.3): per category, ``n_evo`` questions are used for evolution AND
validation, every other question of that category is evaluation. The upstream
``*_train_5.csv`` rows also appear in the evaluation files, so questions are
deduplicated by ``submission_id`` (and ``event_ticker``) before splitting and
the evaluation set excludes every question in the evolution pool.
"""

from __future__ import annotations

import ast
import csv
import json
import math
import random
import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from engine.errors import InputError

PA_COLUMNS = (
    "submission_id", "event_ticker", "title", "snapshot_time", "close_time", "market_data",
    "market_outcome", "category", "markets", "augmented_title", "rules", "sources",
)


def parse_time(text: str, where: str) -> datetime:
    """ISO-8601 timestamp -> aware UTC datetime (naive values are taken as UTC)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{where}: expected an ISO-8601 timestamp, got {text!r}")
    t = text.strip().replace("Z", "+00:00")
    try:
        dt = datetime.fromisoformat(t)
    except ValueError as exc:
        raise InputError(f"{where}: expected an ISO-8601 timestamp, got {text!r}") from exc
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


@dataclass(frozen=True)
class Source:
    """One source document of a question (Prophet Arena: a search result with an LLM summary)."""

    url: str
    title: str
    summary: str
    ranking: int = 0
    source_id: str = ""


@dataclass(frozen=True)
class Question:
    """One Prophet Arena event: probabilities are asked for every entry of ``markets``."""

    qid: str
    event_ticker: str
    title: str
    category: str
    snapshot_time: datetime  # the cutoff tau_q: market data and sources were taken then
    close_time: datetime
    markets: tuple[str, ...]
    market_data: dict  # market -> {yes_ask, yes_bid, no_ask, no_bid, liquidity} (cents)
    outcome: dict  # market -> 0 | 1 (1 = resolved Yes)
    rules: str = ""
    augmented_title: str = ""
    sources: tuple[Source, ...] = ()
    origin: str = ""  # "file:row" for error messages and traceability

    @property
    def cutoff(self) -> datetime:
        return self.snapshot_time

    @property
    def text(self) -> str:
        return self.augmented_title or self.title


def _cell_json(value: str, where: str, kind: type) -> Any:
    try:
        out = json.loads(value)
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply to read") from None
    except (json.JSONDecodeError, TypeError) as exc:
        raise InputError(f"{where}: expected JSON {kind.__name__}, could not parse ({exc}); got {value[:80]!r}") from exc
    if not isinstance(out, kind):
        raise InputError(f"{where}: expected JSON {kind.__name__}, got {type(out).__name__}")
    return out


# C0 and C1 controls but tab, newline and return (ESC and CSI start terminal escape sequences); DEL, which
# terminals ignore, occurs in real source titles and is kept
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x80-\x9f]")
_LINE_BREAK = re.compile(r"[\t\n\r]")
_PRICE_KEYS = ("yes_ask", "yes_bid", "no_ask", "no_bid")  # cents, 0..100
_MAX_CELL = 16 * 2**20  # bytes of one CSV cell (the csv module's own default is 128 KiB)


def _text(value: str, where: str, one_line: bool = False) -> str:
    """Text without control characters (an ANSI escape would reach the terminal and the prompts)."""
    bad = _CONTROL.search(value) or (_LINE_BREAK.search(value) if one_line else None)
    if bad:
        raise InputError(f"{where}: control character {bad.group()!r} at offset {bad.start()} "
                         f"(text fields hold printable text{' on one line' if one_line else ''})")
    return value


def _quote(name: str, quote: dict, where: str) -> dict:
    """A market's quote: prices in cents within [0, 100], liquidity >= 0, every value a finite number."""
    for key, v in quote.items():
        if key not in _PRICE_KEYS and key != "liquidity":
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise InputError(f"{where}: {name!r} {key} must be a finite number, got {v!r}")
        if key in _PRICE_KEYS and not 0 <= v <= 100:
            raise InputError(f"{where}: {name!r} {key} must be a price in cents within [0, 100], got {v!r}")
        if key == "liquidity" and v < 0:
            raise InputError(f"{where}: {name!r} liquidity must be >= 0, got {v!r}")
    return dict(quote)


def _cell_list(value: str, where: str) -> list:
    """A list cell written as a Python literal (upstream) or JSON."""
    try:
        out = ast.literal_eval(value)
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        try:
            out = json.loads(value)
        except RecursionError:
            raise InputError(f"{where}: list nested too deeply to read") from None
        except (json.JSONDecodeError, TypeError) as exc:
            raise InputError(f"{where}: expected a list literal like \"['A', 'B']\", got {value[:80]!r}") from exc
    if not isinstance(out, (list, tuple)) or not all(isinstance(m, str) for m in out):
        raise InputError(f"{where}: expected a list of strings, got {value[:80]!r}")
    return list(out)


def parse_row(row: dict, where: str) -> Question:
    """Validate one CSV row (a dict of strings) into a :class:`Question`."""
    missing = [c for c in PA_COLUMNS if c not in row or row[c] is None]
    if missing:
        raise InputError(f"{where}: missing column(s) {missing}; expected {list(PA_COLUMNS)}")
    markets = _cell_list(row["markets"], f"{where} column 'markets'")
    if not markets:
        raise InputError(f"{where} column 'markets': expected at least one market, got []")
    if len(set(markets)) != len(markets):
        raise InputError(f"{where} column 'markets': duplicate market names in {markets}")
    md = _cell_json(row["market_data"], f"{where} column 'market_data'", dict)
    for name, quote in md.items():
        if not isinstance(quote, dict):
            raise InputError(f"{where} column 'market_data': entry {name!r} must be an object, got {type(quote).__name__}")
        md[name] = _quote(name, quote, f"{where} column 'market_data'")
    outcome = _cell_json(row["market_outcome"], f"{where} column 'market_outcome'", dict)
    if set(outcome) != set(markets):
        raise InputError(
            f"{where} column 'market_outcome': keys must equal markets {markets}, got {sorted(outcome)}"
        )
    for name, v in outcome.items():
        if v not in (0, 1):
            raise InputError(f"{where} column 'market_outcome': {name!r} must be 0 or 1, got {v!r}")
    raw_sources = _cell_json(row["sources"] or "[]", f"{where} column 'sources'", list)
    sources = []
    for i, s in enumerate(raw_sources):
        if not isinstance(s, dict):
            raise InputError(f"{where} column 'sources': item {i} must be an object, got {type(s).__name__}")
        sources.append(Source(
            url=str(s.get("url", "")), title=str(s.get("title", "")),
            summary=str(s.get("summary", "") or s.get("content", "")),
            ranking=int(s.get("ranking", i + 1) or 0), source_id=str(s.get("source_id", "")),
        ))
    qid = (row["submission_id"] or "").strip()
    if not qid:
        raise InputError(f"{where} column 'submission_id': expected a non-empty id, got ''")
    for c in ("submission_id", "event_ticker", "title", "category", "augmented_title"):
        _text(row[c] or "", f"{where} column {c!r}", one_line=True)
    _text(row["rules"] or "", f"{where} column 'rules'")
    for m in markets:
        _text(m, f"{where} column 'markets'", one_line=True)
    for m in md:
        _text(m, f"{where} column 'market_data'", one_line=True)
    for k, src in enumerate(sources):  # decoded: a JSON escape such as "\u001b" is checked as the character
        for field in ("url", "title", "summary", "source_id"):
            _text(getattr(src, field), f"{where} column 'sources' item {k} {field}")
    snapshot = parse_time(row["snapshot_time"], f"{where} column 'snapshot_time'")
    close = parse_time(row["close_time"], f"{where} column 'close_time'")
    if close < snapshot:
        raise InputError(f"{where}: close_time {row['close_time']} is before snapshot_time {row['snapshot_time']} "
                         "(a question closes after the market snapshot it is forecast from)")
    return Question(
        qid=qid, event_ticker=row["event_ticker"].strip(), title=row["title"].strip(),
        category=row["category"].strip(), snapshot_time=snapshot, close_time=close,
        markets=tuple(markets), market_data=md,
        outcome={k: int(v) for k, v in outcome.items()}, rules=row["rules"] or "",
        augmented_title=(row["augmented_title"] or "").strip(), sources=tuple(sources), origin=where,
    )


def load_prophet_arena_file(path: str | Path) -> list[Question]:
    """Read one Prophet Arena CSV file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Prophet Arena file {str(path)!r} does not exist")
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in PA_COLUMNS if c not in header]
        if missing:
            raise InputError(f"{path.name}: missing column(s) {missing} in the header; got {header}")
        out, i = [], 0
        limit = csv.field_size_limit()
        csv.field_size_limit(max(limit, _MAX_CELL))
        try:
            for i, row in enumerate(reader, start=1):
                out.append(parse_row(row, f"{path.name} row {i}"))
        except csv.Error as exc:  # a cell over _MAX_CELL, a NUL byte, ...
            raise InputError(f"{path.name} row {i + 1}: not a readable CSV row ({exc}; cells hold at most "
                             f"{_MAX_CELL // 2**20} MiB)") from exc
        finally:
            csv.field_size_limit(limit)
        return out


def load_prophet_arena(path: str | Path, categories: Sequence[str] = ()) -> list[Question]:
    """All questions of a CSV file or a folder of them, deduplicated by ``submission_id``.

    Files are read in name order; a question seen twice (train_5 rows repeat in
    the eval files) is kept once. Two rows with the same ``submission_id`` but
    different contents raise :class:`InputError`. ``categories`` filters by
    the ``category`` column (empty = all).
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.csv"))
        if not files:
            raise InputError(f"Prophet Arena folder {str(path)!r} holds no .csv files")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(
            f"Prophet Arena data path {str(path)!r} does not exist; point data.path at a folder of "
            f"Prophet Arena CSV files (e.g. ../shared/data/forecast/prophet_arena)"
        )
    seen: dict[str, Question] = {}
    for f in files:
        for q in load_prophet_arena_file(f):
            old = seen.get(q.qid)
            if old is None:
                seen[q.qid] = q
            elif (old.event_ticker, old.markets, old.outcome, old.snapshot_time) != (
                q.event_ticker, q.markets, q.outcome, q.snapshot_time
            ):
                raise InputError(f"{q.origin}: submission_id {q.qid} already seen in {old.origin} with different content")
    out = list(seen.values())
    if categories:
        want = set(categories)
        known = {q.category for q in out}
        unknown = want - known
        if unknown:
            raise InputError(f"categories {sorted(unknown)} not found; the data has {sorted(known)}")
        out = [q for q in out if q.category in want]
    return out


@dataclass(frozen=True)
class Split:
    """One category's evolution/validation pool and its held-out evaluation questions."""

    category: str
    evo: tuple[Question, ...]
    eval: tuple[Question, ...]


def category_splits(questions: Iterable[Question], n_evo: int = 5, seed: int = 0,
                    evo_ids: dict[str, Sequence[str]] | None = None) -> list[Split]:
    """Per-category splits (paper C.3): ``n_evo`` random questions for evolution+validation, the rest eval.

    ``evo_ids`` (category -> submission ids) fixes the evolution pool instead of
    sampling, e.g. the upstream ``*_train_5.csv`` ids. Questions are
    deduplicated by ``submission_id`` and by ``event_ticker`` (an event in the
    pool never reappears in evaluation). A category with fewer than
    ``n_evo + 1`` questions gets an empty evaluation set.
    """
    if n_evo < 1:
        raise InputError(f"n_evo must be >= 1, got {n_evo}")
    by_cat: dict[str, dict[str, Question]] = {}
    for q in questions:
        by_cat.setdefault(q.category, {}).setdefault(q.qid, q)
    out = []
    for cat in sorted(by_cat):
        qs = sorted(by_cat[cat].values(), key=lambda q: q.qid)
        if evo_ids and cat in evo_ids:
            want = set(evo_ids[cat])
            evo = [q for q in qs if q.qid in want]
            if len(evo) != len(want):
                raise InputError(f"evo_ids[{cat!r}]: {sorted(want - {q.qid for q in evo})} are not questions of {cat!r}")
        else:
            rng = random.Random(f"{seed}:{cat}")
            evo = rng.sample(qs, min(n_evo, len(qs)))
        evo_q = {q.qid for q in evo}
        evo_t = {q.event_ticker for q in evo}
        ev = [q for q in qs if q.qid not in evo_q and q.event_ticker not in evo_t]
        out.append(Split(cat, tuple(sorted(evo, key=lambda q: q.qid)), tuple(ev)))
    return out


def train_ids_from_files(folder: str | Path) -> dict[str, list[str]]:
    """category -> submission ids of the upstream ``*_train_*.csv`` files in ``folder``."""
    out: dict[str, list[str]] = {}
    for f in sorted(Path(folder).glob("*_train_*.csv")):
        for q in load_prophet_arena_file(f):
            out.setdefault(q.category, []).append(q.qid)
    return out


# --------------------------------------------------------------------------- FutureX


@dataclass(frozen=True)
class FutureXItem:
    """One FutureX question; ``ground_truth`` holds the accepted normalised answers."""

    qid: str
    question: str
    end_time: datetime
    ground_truth: tuple[str, ...]
    answer_requirements: str = ""
    title: str = ""
    level: int = 0

    @property
    def cutoff(self) -> datetime:
        return self.end_time

    def correct(self, answer: str | None) -> bool:
        """Exact match after :func:`normalise_answer` (order-free for short option lists: an untyped item
        cannot tell a ranking from a multi choice; :class:`engine.forecast.futurex_tasks.FutureXTask` can)."""
        return futurex_correct(answer, self)


_WS = re.compile(r"\s+")


def normalise_answer(text: str) -> str:
    """Canonical form of a discrete answer: NFKC, casefold, no surrounding quotes/punctuation,
    option lists ("B, a") sorted as ``a,b``, internal whitespace collapsed."""
    if not isinstance(text, str):
        text = str(text)
    t = unicodedata.normalize("NFKC", text).casefold().strip()
    t = t.strip(" \t\n\"'`.;:")
    t = _WS.sub(" ", t)
    parts = [p.strip() for p in re.split(r"[,，;]", t) if p.strip()]
    if len(parts) > 1 and all(len(p) <= 3 for p in parts):
        return ",".join(sorted(parts))
    return t


def futurex_correct(answer: str | None, item: FutureXItem) -> bool:
    """True when the normalised answer equals one of the normalised ground truths."""
    if answer is None:
        return False
    a = normalise_answer(answer)
    return any(a == normalise_answer(g) for g in item.ground_truth)


def parse_futurex_item(obj: Any, where: str) -> FutureXItem:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected an object, got {type(obj).__name__}")
    for key in ("id", "question", "end_time", "ground_truth"):
        if key not in obj or obj[key] in (None, "", []):
            raise InputError(f"{where}: missing required field {key!r}; expected id, question, end_time, ground_truth")
    gt = obj["ground_truth"]
    gts = tuple(str(g) for g in gt) if isinstance(gt, (list, tuple)) else (str(gt),)
    level = obj.get("level", 0) or 0
    if isinstance(level, bool) or not isinstance(level, (int, str)) or not str(level).strip().isdigit():
        raise InputError(f"{where} field 'level': expected a non-negative integer, got {level!r}")
    item = FutureXItem(
        qid=str(obj["id"]), question=str(obj["question"]),
        end_time=parse_time(str(obj["end_time"]), f"{where} field 'end_time'"), ground_truth=gts,
        answer_requirements=str(obj.get("answer_requirements", "") or ""), title=str(obj.get("title", "") or ""),
        level=int(level),
    )
    _text(item.qid, f"{where} field 'id'", one_line=True)
    _text(item.title, f"{where} field 'title'", one_line=True)
    for field in ("question", "answer_requirements"):
        _text(getattr(item, field), f"{where} field {field!r}")
    for g in gts:
        _text(g, f"{where} field 'ground_truth'")
    return item


def read_json_objects(path: str | Path, what: str = "FutureX") -> list[tuple[Any, str]]:
    """(object, where) pairs of a JSON list or JSONL file; ``where`` names the file and item/line for errors."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{what} file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            objs = json.loads(text)
        except RecursionError:
            raise InputError(f"{path.name}: JSON nested too deeply to read") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"{path.name}: not valid JSON ({exc})") from exc
        return [(o, f"{path.name} item {i}") for i, o in enumerate(objs)]
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((json.loads(line), f"{path.name} line {i}"))
        except RecursionError:
            raise InputError(f"{path.name} line {i}: JSON nested too deeply to read") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"{path.name} line {i}: not valid JSON ({exc})") from exc
    if not out:
        raise InputError(f"{what} file {path.name} holds no items")
    return out
