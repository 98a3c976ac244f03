"""FutureX accuracy rows: per question type and overall, and the reference rows that need no model."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from engine.errors import InputError
from engine.forecast.futurex_tasks import QTYPES, FutureXTask, answer_letters, is_correct
from engine.markdown import table



@dataclass(frozen=True)
class AccuracyRow:
    """One method's FutureX accuracy: per question type and overall (micro average over questions)."""

    method: str
    n: dict  # qtype -> questions
    correct: dict  # qtype -> correct answers (expected value for the uniform reference, so may be fractional)
    failed: int = 0  # unusable answers (no boxed answer after the repair turns), scored wrong
    experience_tokens: float | None = None  # mean memory tokens per main-agent prompt (None: reference rows)

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
    exp = any(r.experience_tokens is not None for r in rows)
    head = ["Method"] + [f"{q} (n={n.get(q, 0)})" for q in types] + [f"Overall (n={sum(n.values())})"]
    head += ["Exp. tokens / prompt"] if exp else []
    out = []
    for r in rows:
        cells = [r.method] + [f"{r.accuracy(q):.{digits}f}" for q in types] + [f"{r.accuracy():.{digits}f}"]
        if exp:
            cells.append("-" if r.experience_tokens is None else f"{r.experience_tokens:.1f}")
        out.append(cells)
    return "\n".join(table(head, out))




def summary_rows(summary: dict) -> list[dict]:
    """``summary.json`` (``{"meta", "methods"}``, :mod:`engine.run_folder`) as one flat record per row of its
    table: overall accuracy, accuracy per question type (``accuracy_<type>``), items scored and unusable answers."""
    out = []
    for r in summary.get("methods", []):
        row = AccuracyRow(r["method"], r["n"], r["correct"], r.get("failed", 0))
        rec = {"method": row.method, "accuracy": row.accuracy(), "n_items": int(sum(row.n.values())),
               "failed": int(row.failed), "simulated": bool(r.get("simulated"))}
        rec.update({f"accuracy_{q}": row.accuracy(q) for q in row.n})
        out.append(rec)
    return out
