"""Problems of the generic task: a JSONL file, one ``{"id", "problem", "answer", "domain"?}`` object per line.

``path = "example"`` is :func:`example_problems`, which the engine generates
(``toe generic example OUT.jsonl`` writes the same lines): small integer
arithmetic in two domains, deterministic for a seed. It is a format example
for your own file, not a benchmark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.errors import InputError

EXAMPLE = "example"


@dataclass(frozen=True)
class Problem:
    id: str
    problem: str
    answer: str
    domain: str = "general"


def load_problems(path: str | Path) -> list[Problem]:
    """The problems of a JSONL file; an error names the line and the field that is wrong."""
    if str(path) == EXAMPLE:
        return example_problems()
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data.path {str(path)!r} is not a file (a JSONL file of problems, or \"example\")")
    out, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{n}: not a JSON object ({exc})") from exc
        if not isinstance(d, dict):
            raise InputError(f"{path}:{n}: expected a JSON object, got {type(d).__name__}")
        unknown = sorted(set(d) - {"id", "problem", "answer", "domain"})
        if unknown:
            raise InputError(f"{path}:{n}: unknown field(s) {unknown}; valid: id, problem, answer, domain")
        for key in ("problem", "answer"):
            if not isinstance(d.get(key), (str, int, float)) or isinstance(d.get(key), bool) or not str(d[key]).strip():
                raise InputError(f"{path}:{n}: {key!r} must be a non-empty string or number, got {d.get(key)!r}")
        pid = str(d.get("id", n))
        if pid in seen:
            raise InputError(f"{path}:{n}: id {pid!r} appears more than once")
        seen.add(pid)
        out.append(Problem(pid, str(d["problem"]), str(d["answer"]), str(d.get("domain") or "general")))
    if not out:
        raise InputError(f"{path}: no problems")
    return out


def example_problems(n: int = 60, seed: int = 0) -> list[Problem]:
    """``n`` generated problems: two-number sums ("addition") and products ("multiplication"), alternating."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a, b = (int(x) for x in rng.integers(2, 50, size=2))
        if i % 2 == 0:
            out.append(Problem(f"add-{i}", f"Compute {a} + {b}.", str(a + b), "addition"))
        else:
            out.append(Problem(f"mul-{i}", f"Compute {a} * {b}.", str(a * b), "multiplication"))
    return out


def write_problems(problems, path: str | Path) -> Path:
    from engine import atomic_io

    text = "".join(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer, "domain": p.domain}) + "\n"
                   for p in problems)
    return atomic_io.write_text(path, text)
