"""``toe run configs/futurex.toml``: ForeDreamer and reference rows on FutureX questions (paper C.2 to C.4).

1. Load a FutureX JSON/JSONL file (``data.path``; ``"example"`` = the fictional
   format example shipped in ``engine/data``) into :class:`FutureXTask` items
   with a question type (single choice, multi choice, ranking, numerical, open)
   and the documents file (``data.documents``) into a cutoff-aware corpus.
2. Split (C.3): ``data.n_evo`` items sampled with ``data.split_seed`` form the
   evolution+validation pool (paper: 20 of 208), every other item is
   evaluation; an item whose question text repeats a pool item's is dropped.
3. Reference rows that need no model on the evaluated items: the expected
   accuracy of a uniform random guess, and the first option / listed order.
4. Model rows on the first ``run.max_questions`` evaluation items:
   ``foredreamer`` (seed MemGuide and empty Experience Bank, or with
   ``run.evolve`` dual-track evolution on the pool ranked by FutureX accuracy,
   then the top validated configurations on the evaluation items),
   ``full_text`` (every document linked to the question and available before
   its cutoff in the prompt), ``rag`` (the top-k cutoff-filtered search hits)
   and the memory baselines applied to the retrieved evidence (``mem0``,
   ``memrl``, ``reme``, ``flex``: :mod:`engine.forecast.memory_baselines`; FutureX
   items get their evidence layer only).
5. Accuracy per question type and overall, printed and written to
   ``summary.json`` / ``table.md`` under ``--out``.

Items file (one JSON object per line, or a JSON list): ``id``, ``question``
(alias ``prompt``), ``end_time`` (ISO-8601, the cutoff), ``ground_truth`` (a
string or a list of accepted strings), optional ``answer_requirements``,
``title``, ``level``, ``type`` (one of :data:`QTYPES`; inferred when absent) and
``options`` (list of option texts; default: the ``A. text`` lines of the question).

Documents file (JSONL or JSON list): ``text`` (alias ``content``),
``available_at`` (ISO-8601: when it became available), optional ``id``,
``title``, ``source`` (URL or name) and ``question_ids`` (the questions whose
Full Text row shows it; every document is searchable by every question, always
subject to the cutoff).

Scoring: a choice answer is mapped to option letters (``B``, ``b.``,
``B. Civic Union`` and the option text all mean ``B``); single choice needs the
one letter, multi choice the same set, ranking the same order; numerical
answers are compared as numbers (``data.numeric_rel_tol``); open answers use
:func:`engine.forecast.data.futurex_correct`. ``llm.backend = "simulated"`` uses
:class:`SimulatedForecastBackend`; every row it produces is labelled ``simulated``.
"""

from __future__ import annotations

import json
import math
import random
import re
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from engine.config import to_dict
from engine.embed import embedder_from_table
from engine.errors import ConfigError, InputError
from engine.forecast import prompts
from engine.forecast.agent import ForecastAgent
from engine.forecast.data import FutureXItem, futurex_correct, normalise_answer, parse_futurex_item, parse_time
from engine.forecast.evolution import Evolution, ExperienceBank, Runner, ValidationMetric
from engine.forecast.futurex_config import (
    EXAMPLE, MEMORY_METHODS, FutureXConfig, load_futurex_config, load_memory_baselines_config,
)
from engine.forecast.memtools import ProceduralStore
from engine.forecast.search import CorpusSearch, CutoffGuard, SearchProvider, SearchResult
from engine.forecast.seed_tools import DEFAULT_GUIDE, seed_tool_sources
from engine.forecast.simulated import SimulatedForecastBackend
from engine.llm.base import MeteredBackend
from engine.llm.config import load_llm_config

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


def _read_objects(path: Path, what: str) -> list[tuple[Any, str]]:
    """(object, where) pairs of a JSON list or JSONL file."""
    if not path.is_file():
        raise InputError(f"{what} file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            objs = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path.name}: not valid JSON ({exc})") from exc
        return [(o, f"{path.name} item {i}") for i, o in enumerate(objs)]
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((json.loads(line), f"{path.name} line {i}"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path.name} line {i}: not valid JSON ({exc})") from exc
    if not out:
        raise InputError(f"{what} file {path.name} holds no items")
    return out


def load_futurex_tasks(path: str | Path) -> list[FutureXTask]:
    """Every item of a FutureX JSON/JSONL file; a repeated ``id`` raises :class:`InputError`."""
    tasks, seen = [], {}
    for obj, where in _read_objects(Path(path), "FutureX"):
        t = parse_task(obj, where)
        if t.qid in seen:
            raise InputError(f"{where}: id {t.qid!r} already used at {seen[t.qid]}; ids must be unique")
        seen[t.qid] = where
        tasks.append(t)
    return tasks


# --------------------------------------------------------------------------- documents and search


@dataclass
class FutureXCorpus:
    """Cutoff-aware search plus each question's linked documents (Full Text).

    ``search`` uses the local BM25 + embedding corpus over ``docs``, or, when
    ``provider`` is given (any :class:`SearchProvider`, e.g. a web-search API
    adapter), that provider wrapped in :class:`CutoffGuard`, which drops any
    result that is undated or later than the cutoff.
    """

    docs: list[SearchResult] = field(default_factory=list)
    linked: dict[str, list[int]] = field(default_factory=dict)  # question id -> doc ids
    embedder: object | None = None
    provider: SearchProvider | None = None

    def __post_init__(self):
        if self.provider is not None:
            self._search = CutoffGuard(self.provider)
        else:
            self._search = CorpusSearch(self.docs, self.embedder) if self.docs else None

    def search(self, query: str, cutoff, k: int = 4) -> list[SearchResult]:
        return self._search.search(query, cutoff, k) if self._search is not None else []

    def question_documents(self, qid: str, cutoff) -> list[SearchResult]:
        """The question's linked documents available at or before ``cutoff``, oldest first."""
        docs = [self.docs[i] for i in self.linked.get(qid, ()) if self.docs[i].available_at <= cutoff]
        return sorted(docs, key=lambda d: (d.available_at, d.doc_id))


def load_futurex_documents(path: str | Path, embedder=None) -> FutureXCorpus:
    """A documents file -> :class:`FutureXCorpus` (doc_id = position, ``origin`` = the document's id)."""
    docs, linked, ids = [], {}, {}
    for obj, where in _read_objects(Path(path), "documents"):
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected an object, got {type(obj).__name__}")
        text = obj.get("text", obj.get("content"))
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: missing required field 'text' (the document body); expected text, "
                             "available_at and optionally id, title, source, question_ids")
        if "available_at" not in obj:
            raise InputError(f"{where}: missing required field 'available_at' (ISO-8601 time the document "
                             "became available)")
        at = parse_time(obj["available_at"], f"{where} field 'available_at'")
        did = str(obj.get("id", "") or f"doc-{len(docs) + 1}")
        if did in ids:
            raise InputError(f"{where}: document id {did!r} already used at {ids[did]}")
        ids[did] = where
        qids = obj.get("question_ids", [])
        if not isinstance(qids, list) or not all(isinstance(q, str) for q in qids):
            raise InputError(f"{where} field 'question_ids': expected a list of question ids, got {qids!r}")
        for q in qids:
            linked.setdefault(q, []).append(len(docs))
        docs.append(SearchResult(len(docs), str(obj.get("title", "") or ""), str(obj.get("source", "") or ""),
                                 text.strip(), at, 0.0, did))
    return FutureXCorpus(docs, linked, embedder)


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


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class AccuracyRow:
    """One method's FutureX accuracy: per question type and overall (micro average over questions)."""

    method: str
    n: dict  # qtype -> questions
    correct: dict  # qtype -> correct answers (expected value for the uniform reference, so may be fractional)
    failed: int = 0  # unusable answers (no boxed answer after the repair turns), scored wrong

    def accuracy(self, qtype: str | None = None) -> float:
        if qtype is None:
            n = sum(self.n.values())
            return sum(self.correct.values()) / n if n else float("nan")
        return self.correct[qtype] / self.n[qtype] if self.n.get(qtype) else float("nan")


def accuracy_row(method: str, tasks: Sequence[FutureXTask], hits: Sequence[float], failed: int = 0) -> AccuracyRow:
    """``hits[i]`` in [0, 1] is task ``i``'s score (1 = correct)."""
    if len(hits) != len(tasks):
        raise InputError(f"accuracy_row: {len(hits)} scores for {len(tasks)} tasks")
    n, c = {}, {}
    for t, h in zip(tasks, hits):
        n[t.qtype] = n.get(t.qtype, 0) + 1
        c[t.qtype] = c.get(t.qtype, 0.0) + float(h)
    return AccuracyRow(method, n, c, failed)


def uniform_expected(task: FutureXTask) -> float:
    """Probability that a uniform random answer is right: 1/n (single), 1/(2^n - 1) (multi: any non-empty
    subset), 1/(n!/(n-k)!) (ranking of k of n options); 0 for numerical and open answers (no finite space)."""
    n = len(task.options)
    if task.qtype == "single_choice" and n:
        return 1.0 / n
    if task.qtype == "multi_choice" and n:
        return min(1.0, len(task.ground_truth) / (2 ** n - 1))
    if task.qtype == "ranking" and n:
        k = len(answer_letters(task.ground_truth[0], task.options) or ())
        return min(1.0, len(task.ground_truth) / math.perm(n, k))
    return 0.0


def first_option_answer(task: FutureXTask) -> str | None:
    """The no-evidence guess: option A (single, multi), the listed order (ranking), none otherwise."""
    if task.qtype in ("single_choice", "multi_choice") and task.options:
        return "A"
    if task.qtype == "ranking" and task.options:
        k = len(answer_letters(task.ground_truth[0], task.options) or task.options)
        return ", ".join(task.letters[:k])
    return None


def reference_rows(tasks: Sequence[FutureXTask], rel_tol: float = 0.0) -> list[AccuracyRow]:
    return [accuracy_row("No Information (uniform random guess, expected)", tasks, [uniform_expected(t) for t in tasks]),
            accuracy_row("First option / listed order", tasks,
                         [float(is_correct(first_option_answer(t), t, rel_tol)) for t in tasks])]


def format_accuracy_table(rows: Sequence[AccuracyRow], digits: int = 4) -> str:
    types = [q for q in QTYPES if any(r.n.get(q) for r in rows)]
    n = rows[0].n if rows else {}
    head = ["Method"] + [f"{q} (n={n.get(q, 0)})" for q in types] + [f"Overall (n={sum(n.values())})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [f"{r.accuracy(q):.{digits}f}" for q in types] + [f"{r.accuracy():.{digits}f}"]
        lines.append("| " + " | ".join([r.method] + cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- agent, runner, metric


def _evidence_text(docs: Sequence[SearchResult], budget: int) -> str:
    text = "\n".join(f"[{d.available_at.date()}] {d.title} ({d.url}): {d.content}" for d in docs)
    return text[:budget]


class FutureXAgent(ForecastAgent):
    """The main agent with FutureX evidence rows: ``full_text`` puts every linked document available before
    the cutoff into the prompt, ``rag`` the top-k cutoff-filtered search hits (no subagent)."""

    def _task_prompt(self, task, bank) -> str:
        if not isinstance(task, FutureXItem) or self.cfg.mode not in ("full_text", "rag"):
            return super()._task_prompt(task, bank)
        if self.search is None:
            docs = []
        elif self.cfg.mode == "full_text":
            docs = getattr(self.search, "question_documents", lambda q, c: [])(task.qid, task.cutoff)
        else:
            docs = self.search.search(task.question, task.cutoff, self.cfg.top_k)
        base = prompts.futurex_prompt(task, bank, "Search is disabled in this run: use the evidence below.")
        evidence = f"Evidence:\n{_evidence_text(docs, self.cfg.context_chars) or '(no documents before the cutoff)'}\n\n"
        marker = "Final answer requirements:"
        return base.replace(marker, evidence + marker, 1) if marker in base else base + "\n\n" + evidence


class FutureXRunner(Runner):
    agent_class = FutureXAgent


class FutureXAccuracy(ValidationMetric):
    """FutureX validation metric (B.6): accuracy over the pool, higher is better; gate items come from the
    cutoff-filtered corpus search with the question text."""

    name = "accuracy"
    lower_is_better = False

    def __init__(self, corpus: FutureXCorpus | None, rel_tol: float = 0.0):
        self.corpus = corpus
        self.rel_tol = rel_tol

    def correct(self, ep) -> bool:
        return is_correct(ep.answer, ep.task, self.rel_tol)

    def score(self, episodes) -> float:
        return sum(self.correct(ep) for ep in episodes) / max(1, len(episodes))

    def episode_result(self, ep) -> dict:
        return {"question": ep.qid, "type": ep.task.qtype, "answer": ep.answer,
                "ground_truth": list(ep.task.ground_truth), "correct": self.correct(ep), "failed": ep.failed}

    def rollout_text(self, ep) -> str:
        return (f"Question: {ep.task.question}\nGround truth: {' | '.join(ep.task.ground_truth)}\n"
                f"Answer: {ep.answer}\nCorrect: {self.correct(ep)}")

    def gate_items(self, task, n: int) -> list[SearchResult]:
        return self.corpus.search(task.question, task.cutoff, max(1, n)) if self.corpus else []


# --------------------------------------------------------------------------- runner


def make_llm(config: dict):
    llm_cfg = load_llm_config(config.get("llm"))
    if llm_cfg.backend == "simulated":
        return MeteredBackend(SimulatedForecastBackend(seed=llm_cfg.seed)), True
    from engine.llm.factory import make_backend

    return MeteredBackend(make_backend(llm_cfg)), False


def _resolve(value: str, key: str, example: Path) -> Path:
    if value == EXAMPLE:
        return example
    p = Path(value).expanduser()
    if not p.is_file():
        raise ConfigError(f"{key} {value!r} is not a file (resolved to {str(p.resolve())!r}); point {key} at your "
                          f"copy, or use {key} = \"example\" for the fictional format example shipped with the engine")
    return p


def load_search_provider(spec: str) -> SearchProvider:
    """``"package.module:factory"`` -> ``factory()``, which must return an object with
    ``search(query, cutoff, k) -> list[SearchResult]`` (a web-search API adapter reads its key from the environment)."""
    import importlib

    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"data.search_provider must look like 'package.module:factory', got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"data.search_provider {spec!r} cannot be loaded: {exc}") from exc
    provider = factory()
    if not callable(getattr(provider, "search", None)):
        raise ConfigError(f"data.search_provider {spec!r} returned {type(provider).__name__}, which has no "
                          "search(query, cutoff, k) method")
    return provider


def late_items(episodes) -> int:
    """Items a search returned with ``published_date`` after the question's cutoff (must be 0)."""
    late = 0
    for ep in episodes:
        for _, _, dirs in ep.searches:
            for d in dirs:
                raw = json.loads((Path(d) / "raw_data.json").read_text(encoding="utf-8"))
                late += parse_time(raw["item"]["published_date"], d) > ep.task.cutoff
    return late


def _details(eps, metric: FutureXAccuracy) -> list[dict]:
    return [{"qid": e.qid, "type": e.task.qtype, "answer": e.answer, "ground_truth": list(e.task.ground_truth),
             "correct": metric.correct(e), "failed": e.failed, "searches": e.searches,
             "memories": [{"item": str(m.item_dir), "fallback": m.fallback, "calls": m.calls} for m in e.memories],
             "raw_answer": e.raw_answer[-400:]} for e in eps]


NAMES = {"foredreamer": "ForeDreamer (seed guide, empty bank)", "full_text": "Full Text", "rag": "RAG"}


def run(config: dict, options) -> int:
    cfg: FutureXConfig = load_futurex_config(config)
    mb_cfg = (load_memory_baselines_config(config)
              if ("memory_baselines" in config or any(m in MEMORY_METHODS for m in cfg.run.methods)) else None)
    items_path = _resolve(cfg.data.path, "data.path", EXAMPLE_ITEMS)
    tasks = load_futurex_tasks(items_path)
    docs_path = _resolve(cfg.data.documents, "data.documents", EXAMPLE_DOCS) if cfg.data.documents else None
    evo, ev = futurex_split(tasks, cfg.data.n_evo, cfg.data.split_seed)
    assert not {t.qid for t in evo} & {t.qid for t in ev}
    evaluated = ev[: cfg.run.max_questions] if cfg.run.max_questions else ev
    out = Path(options.out) if getattr(options, "out", None) else None
    t0 = time.perf_counter()
    example = cfg.data.path == EXAMPLE

    lines = [f"# {config.get('title', 'ForeDreamer on FutureX')}", "",
             f"Items: {items_path} ({len(tasks)} items" + ("; the FICTIONAL format example shipped with the engine, "
                                                            "not FutureX benchmark data" if example else "") + ")",
             f"Documents: {docs_path or 'none'}; search: "
             f"{cfg.data.search_provider + ' behind CutoffGuard' if cfg.data.search_provider else 'local corpus'}",
             f"Split (C.3, seed {cfg.data.split_seed}): {len(evo)} evolution+validation items, {len(ev)} evaluation "
             f"items; model rows use {len(evaluated)}"]
    rel = cfg.data.numeric_rel_tol
    ref_all = reference_rows(ev, rel)
    lines += ["", "## Reference rows on every evaluation item (accuracy, higher is better)", "",
              format_accuracy_table(ref_all)]
    summary: dict = {"config": config, "n_items": len(tasks), "split": {"evo": [t.qid for t in evo],
                                                                        "eval": [t.qid for t in ev]},
                     "evaluated": [t.qid for t in evaluated], "reference_all": [to_dict(r) for r in ref_all]}
    llm, simulated = make_llm(config)
    tag = " [simulated]" if simulated else f" [{llm.name}:{llm.model.rsplit('/', 1)[-1]}]"
    embedder = embedder_from_table(config.get("embed"))
    corpus = load_futurex_documents(docs_path, embedder) if docs_path else FutureXCorpus()
    if cfg.data.search_provider:
        corpus = FutureXCorpus(corpus.docs, corpus.linked, None, load_search_provider(cfg.data.search_provider))
    metric = FutureXAccuracy(corpus, rel)
    rows: list[AccuracyRow] = []
    details: dict = {}
    late = 0
    tmp = None
    if cfg.run.workspace:
        ws = Path(cfg.run.workspace)
    elif out is not None:
        ws = out / "workspace"
    else:
        tmp = tempfile.TemporaryDirectory(prefix="futurex-")
        ws = Path(tmp.name)
    try:
        store = seed_gid = None
        if "foredreamer" in cfg.run.methods:  # only ForeDreamer runs MemTools (sandboxed)
            store = ProceduralStore(ws / "procedural", cfg.sandbox)
            seed_gid = store.seed(seed_tool_sources(), DEFAULT_GUIDE)
        for method in cfg.run.methods:
            if method in MEMORY_METHODS:
                from engine.forecast.memory_baselines import ROW_NAMES, MemoryBaselineRunner

                mr = MemoryBaselineRunner(method, llm, corpus, cfg.agent, mb_cfg, embedder, ws / f"rollouts-{method}")
                eps = mr.rollouts(evaluated)
                rows.append(accuracy_row(ROW_NAMES[method] + tag, evaluated, [float(metric.correct(e)) for e in eps],
                                         sum(e.failed for e in eps)))
                details[method] = _details(eps, metric)
                for d, e in zip(details[method], eps):
                    d["written"] = [h.origin for h in mr.written.get(e.qid, [])]
                late += sum(h.available_at > e.task.cutoff for e in eps for h in mr.written.get(e.qid, []))
                continue
            acfg = replace(cfg.agent, mode=method)
            r = FutureXRunner(llm, corpus, acfg, ws / f"rollouts-{method}", store, cfg.subagent.mode,
                              cfg.subagent.max_steps, cfg.sandbox, metric=metric)
            if method == "foredreamer" and cfg.run.evolve:
                new_rows, late_e = _evolved_rows(cfg, llm, r, store, evo, evaluated, metric, tag, details)
                rows += new_rows
                late += late_e
                continue
            guide = store.guides[seed_gid] if store is not None else DEFAULT_GUIDE
            paths = store.tool_paths(guide["tool_names"]) if store is not None else {}
            eps = r.rollouts(evaluated, guide, paths)
            late += late_items(eps)
            rows.append(accuracy_row(NAMES[method] + tag, evaluated, [float(metric.correct(e)) for e in eps],
                                     sum(e.failed for e in eps)))
            details[method] = _details(eps, metric)
        summary["usage"] = to_dict(llm.meter.total)
    finally:
        close = getattr(getattr(llm, "backend", None), "close", None)
        if close:
            close()
        if tmp is not None:
            tmp.cleanup()
    table = reference_rows(evaluated, rel) + rows
    lines += ["", f"## Model rows on {len(evaluated)} evaluation items, with the reference rows on the same items", ""]
    if simulated:
        lines += ["Every model row here comes from the SIMULATED forecasting harness (llm.backend = simulated), "
                  "not from a model.", ""]
    lines += ["Accuracy (higher is better):", "", format_accuracy_table(table), "",
              "Unusable answers (scored wrong): " + ", ".join(f"{r.method}: {r.failed}" for r in rows),
              f"Search items after their question's cutoff: {late}", f"LLM usage: {summary['usage']}",
              "", f"Wall time: {time.perf_counter() - t0:.1f} s"]
    summary.update(rows=[to_dict(r) for r in table], details=details, late_items=late)
    text = "\n".join(lines)
    print(text)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(text + "\n", encoding="utf-8")
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    return 0


def _evolved_rows(cfg, llm, runner, store, evo, evaluated, metric, tag, details) -> tuple[list[AccuracyRow], int]:
    """Evolve on the pool (ranked by accuracy), evaluate the top validated configurations on the evaluation items."""
    evolution = Evolution(llm, runner, store, evo, cfg.evolution, ExperienceBank())
    evolution.run()
    results, late = [], 0
    for bank, gid, val in evolution.top_configurations():
        eps = runner.rollouts(evaluated, store.guides[gid], store.tool_paths(store.guides[gid]["tool_names"]), bank)
        late += late_items(eps)
        results.append((metric.score(eps), val, gid, bank.version, eps))
    details["evolution"] = {"log": evolution.log, "tree_edges": evolution.tree.edges,
                            "top": [(r[2], r[3], r[1], r[0]) for r in results]}
    if not results:
        return [], late
    top1 = results[0]
    best = max(results, key=lambda r: r[0])
    details["foredreamer_evolved_top1"] = _details(top1[4], metric)
    return [accuracy_row("ForeDreamer evolved, top-1 by validation" + tag, evaluated,
                         [float(metric.correct(e)) for e in top1[4]], sum(e.failed for e in top1[4])),
            accuracy_row("ForeDreamer evolved, best of top-k on test (C.3)" + tag, evaluated,
                         [float(metric.correct(e)) for e in best[4]], sum(e.failed for e in best[4]))], late
