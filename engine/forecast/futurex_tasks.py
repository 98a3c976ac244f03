"""FutureX items with a question type, their scoring, and the evolution/evaluation split (paper C.2, C.3).

Items file (one JSON object per line, or a JSON list): ``id``, ``question``
(alias ``prompt``), ``end_time`` (ISO-8601, the cutoff), ``ground_truth`` (a
string or a list of accepted strings), optional ``answer_requirements``,
``title``, ``level``, ``type`` (one of :data:`QTYPES`; inferred when absent) and
``options`` (list of option texts; default: the ``A. text`` lines of the question).

Scoring: a choice answer is mapped to option letters (``B``, ``b.``,
``B. Civic Union`` and the option text all mean ``B``); single choice needs the
one letter, multi choice the same set, ranking the same order; numerical
answers are compared as numbers (``rel_tol``); open answers use
:func:`engine.forecast.data.futurex_correct`.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from engine.errors import InputError
from engine.forecast.data import FutureXItem, futurex_correct, normalise_answer, parse_futurex_item, read_json_objects

QTYPES = ("single_choice", "multi_choice", "ranking", "numerical", "open")
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
EXAMPLE_ITEMS = DATA_DIR / "futurex_example.jsonl"
EXAMPLE_DOCS = DATA_DIR / "futurex_example_docs.jsonl"

# --------------------------------------------------------------------------- items


@dataclass(frozen=True)
class FutureXTask(FutureXItem):
    """A FutureX item with its question type and option texts (option ``i`` has letter ``chr(65 + i)``)."""

    qtype: str = "open"
    options: tuple[str, ...] = ()

    @property
    def letters(self) -> tuple[str, ...]:
        return tuple(chr(65 + i) for i in range(len(self.options)))

    def correct(self, answer: str | None) -> bool:
        """:func:`is_correct` with exact numbers (a ranking must keep its order)."""
        return is_correct(answer, self)


_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+(.+?)\s*$", re.M)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def parse_options(question: str) -> tuple[str, ...]:
    """Option texts from ``A. text`` / ``(B) text`` / ``C: text`` lines, in letter order from A without gaps."""
    found = {}
    for letter, text in _OPTION_LINE.findall(question):
        found.setdefault(letter, text)
    out = []
    for i in range(26):
        if chr(65 + i) not in found:
            break
        out.append(found[chr(65 + i)])
    return tuple(out) if len(out) >= 2 else ()


def _strip_latex(text: str) -> str:
    """``\\textbf{B}`` / ``\\text{Civic Union}`` / ``\\mathrm{2.1}`` -> their content (nested wrappers too)."""
    prev = None
    while prev != text:
        prev, text = text, re.sub(r"\\[A-Za-z]+\{([^{}]*)\}", r"\1", text)
    return text


def parse_number(text: str | None) -> float | None:
    """First number in ``text`` (thousands commas, %, units ignored); None when there is none."""
    if text is None:
        return None
    t = _strip_latex(str(text))
    t = re.sub(r"(?<=\d),(?=\d{3}\b)", "", t)
    m = _NUMBER.search(t)
    return float(m.group()) if m else None


def answer_letters(answer: str | None, options: Sequence[str]) -> list[str] | None:
    """A choice answer -> option letters in the order given, or None when a part is not an option.

    ``"B"``, ``"b."``, ``"(B)"``, ``"B. Civic Union"``, ``"Civic Union"`` all give ``["B"]``; parts are
    separated by commas, semicolons, slashes, ``>``, ``&`` or ``and`` (or spaces between single letters).
    """
    if answer is None:
        return None
    t = unicodedata.normalize("NFKC", _strip_latex(str(answer))).strip()
    t = t.strip(" \t\n\"'`.;:")
    if not t:
        return None
    valid = [chr(65 + i) for i in range(len(options))] or [chr(65 + i) for i in range(26)]
    by_text = {normalise_answer(o): chr(65 + i) for i, o in enumerate(options)}
    if normalise_answer(t) in by_text:
        return [by_text[normalise_answer(t)]]
    parts = [p for p in re.split(r"\s*(?:,|;|/|>|&|\band\b)\s*", t) if p.strip()]
    if len(parts) == 1 and re.fullmatch(r"[A-Za-z](?:\s+[A-Za-z])+", t):
        parts = t.split()
    out = []
    for p in parts:
        p = p.strip(" .()[]'\"`")
        m = re.match(r"^\(?([A-Za-z])[.):]\s+\S", p)
        if len(p) == 1 and p.upper() in valid:
            out.append(p.upper())
        elif m and m.group(1).upper() in valid:
            out.append(m.group(1).upper())
        elif normalise_answer(p) in by_text:
            out.append(by_text[normalise_answer(p)])
        else:
            return None
    return out or None


def is_correct(answer: str | None, task: FutureXTask, rel_tol: float = 0.0) -> bool:
    """FutureX accuracy of one answer (paper C.2: the final answer matched to the ground truth)."""
    if answer is None:
        return False
    if task.qtype == "numerical":
        a = parse_number(answer)
        if a is None or not math.isfinite(a):
            return False
        for g in task.ground_truth:
            gv = parse_number(g)
            if gv is not None and abs(a - gv) <= max(rel_tol * abs(gv), 1e-9 * max(1.0, abs(gv))):
                return True
        return False
    if task.qtype in ("single_choice", "multi_choice", "ranking"):
        got = answer_letters(answer, task.options)
        if got is None or len(set(got)) != len(got):
            return False
        for g in task.ground_truth:
            want = answer_letters(g, task.options)
            if task.qtype == "multi_choice" and set(got) == set(want):
                return True
            if task.qtype != "multi_choice" and got == want:
                return True
        return False
    return futurex_correct(answer, task)


def _infer_type(item: FutureXItem, options: tuple[str, ...]) -> str:
    gts = item.ground_truth
    if options and all(answer_letters(g, options) for g in gts):
        n = max(len(answer_letters(g, options)) for g in gts)
        if re.search(r"\brank", item.answer_requirements + " " + item.question, re.I) and n > 1:
            return "ranking"
        if n > 1 or re.search(r"all (?:options )?that apply|one or more|select all", item.answer_requirements, re.I):
            return "multi_choice"
        return "single_choice"
    if all(re.fullmatch(r"\s*[-+]?[\d,]*\.?\d+\s*%?\s*", g) for g in gts):
        return "numerical"
    return "open"


def parse_task(obj: Any, where: str) -> FutureXTask:
    """One raw item -> :class:`FutureXTask`; errors name ``where`` and the field."""
    if isinstance(obj, dict) and "question" not in obj and "prompt" in obj:
        obj = {**obj, "question": obj["prompt"]}
    item = parse_futurex_item(obj, where)
    raw_opts = obj.get("options")
    if raw_opts is None:
        options = parse_options(item.question)
    elif isinstance(raw_opts, list) and len(raw_opts) >= 2 and all(isinstance(o, str) and o.strip() for o in raw_opts):
        options = tuple(o.strip() for o in raw_opts)
    else:
        raise InputError(f"{where} field 'options': expected a list of at least 2 non-empty strings, got {raw_opts!r}")
    qtype = obj.get("type")
    if qtype is None:
        qtype = _infer_type(item, options)
    elif qtype not in QTYPES:
        raise InputError(f"{where} field 'type': expected one of {list(QTYPES)}, got {qtype!r}")
    if qtype in ("single_choice", "multi_choice", "ranking"):
        if not options:
            raise InputError(f"{where}: a {qtype} item needs options (an 'options' list or 'A. text' lines in the "
                             "question), found none")
        for g in item.ground_truth:
            letters = answer_letters(g, options)
            if letters is None or len(set(letters)) != len(letters) or (qtype == "single_choice" and len(letters) != 1):
                raise InputError(f"{where} field 'ground_truth': {g!r} is not a valid {qtype} answer over options "
                                 f"{[chr(65 + i) for i in range(len(options))]}")
    elif qtype == "numerical":
        bad = [g for g in item.ground_truth if parse_number(g) is None]
        if bad:
            raise InputError(f"{where} field 'ground_truth': numerical item needs a number, got {bad[0]!r}")
    fields = {k: getattr(item, k) for k in item.__dataclass_fields__}
    return FutureXTask(**fields, qtype=qtype, options=options)


def load_futurex_tasks(path: str | Path) -> list[FutureXTask]:
    """Every item of a FutureX JSON/JSONL file; a repeated ``id`` raises :class:`InputError`."""
    tasks, seen = [], {}
    for obj, where in read_json_objects(Path(path), "FutureX"):
        t = parse_task(obj, where)
        if t.qid in seen:
            raise InputError(f"{where}: id {t.qid!r} already used at {seen[t.qid]}; ids must be unique")
        seen[t.qid] = where
        tasks.append(t)
    return tasks



# --------------------------------------------------------------------------- split


def futurex_split(tasks: Sequence[FutureXTask], n_evo: int, seed: int = 0) -> tuple[list, list]:
    """Paper C.3: ``n_evo`` items sampled with ``seed`` for evolution + validation, the rest for evaluation.

    Items are ordered by id before sampling (the split does not depend on file order). An evaluation item
    whose normalised question text equals a pool item's is dropped, so no pool question is evaluated.
    """
    if n_evo < 1:
        raise InputError(f"n_evo must be >= 1, got {n_evo}")
    if n_evo >= len(tasks):
        raise InputError(f"data.n_evo = {n_evo} leaves no evaluation items: the file has {len(tasks)} items; "
                         f"set data.n_evo below {len(tasks)}")
    ordered = sorted(tasks, key=lambda t: t.qid)
    evo = sorted(random.Random(f"futurex:{seed}").sample(ordered, n_evo), key=lambda t: t.qid)
    evo_ids = {t.qid for t in evo}
    evo_text = {normalise_answer(t.question) for t in evo}
    ev = [t for t in ordered if t.qid not in evo_ids and normalise_answer(t.question) not in evo_text]
    return evo, ev


