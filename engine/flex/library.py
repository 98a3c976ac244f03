"""FLEX's experience library on disk: one JSON record per line, appended, fsynced, reloaded (seed 002 step 1).

The seed's ``ExperienceLibrary`` appends ``json.dumps(exp.to_dict())`` to
``experience_library.jsonl`` and reloads it on start. Here the same file, made
durable:

* **append** writes whole lines with one ``write`` on a file opened
  ``O_APPEND``, then ``fsync``; a record is on disk when ``append`` returns.
* **torn last line**: a crash mid-append can leave a last line without its
  newline (or not valid JSON). :func:`read_library` refuses such a file with
  :class:`TornLibraryError` naming the byte offset; ``repair=True`` (``toe flex
  prune --repair``) cuts the torn tail explicitly, atomically
  (:mod:`engine.atomic_io`), and says how many bytes went. A bad line that is
  NOT the last is corruption, never repaired: the error names its line.
* **restart**: records are keyed (``key``: the episode that made them); a key
  already in the file is not appended again, so a resumed run does not double it.
* **archival** (pitfall 3, library bloat): :meth:`ExperienceLibrary.archive`
  moves records out of the library into ``NAME.archive.jsonl`` (appended
  first, then the library rewritten atomically without them), so nothing is lost.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Sequence

from engine import codec
from engine import atomic_io
from engine.errors import PersistenceError


class TornLibraryError(PersistenceError):
    """The library's last line is incomplete (a crash mid-append); repair cuts it explicitly."""


@codec.data
@dataclass(frozen=True)
class Experience:
    """One interaction record: the seed's ``Experience`` fields (step 1) plus ``key`` and ``step``.

    ``key``: the episode that made it (unique in a library); ``step``: its admission order (recency).
    """

    key: str
    step: int
    problem: str
    solution_attempt: str
    ground_truth: str
    is_correct: bool
    domain: str
    difficulty: str
    timestamp: str
    techniques_used: tuple[str, ...] = ()
    failure_reason: str = ""
    reflection: str = ""
    metadata: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["techniques_used"] = list(self.techniques_used)
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "record") -> "Experience":
        names = {f.name for f in fields(cls)}
        if not isinstance(d, dict):
            raise PersistenceError(f"{where} must be a JSON object, got {type(d).__name__}")
        missing = sorted(n for n in names - set(d) if n not in ("techniques_used", "failure_reason", "reflection",
                                                                 "metadata"))
        unknown = sorted(set(d) - names)
        if missing or unknown:
            raise PersistenceError(f"{where}: missing field(s) {missing}, unknown field(s) {unknown}")
        if not isinstance(d["is_correct"], bool) or not isinstance(d["step"], int):
            raise PersistenceError(f"{where}: is_correct must be true/false and step an integer, got "
                                   f"{d['is_correct']!r}, {d['step']!r}")
        return cls(**{**d, "techniques_used": tuple(d.get("techniques_used") or ()),
                      "metadata": dict(d.get("metadata") or {})})


def _line(exp: Experience) -> bytes:
    return (json.dumps(exp.to_dict(), ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


def read_library(path: str | Path, repair: bool = False) -> tuple[list[Experience], int]:
    """The records of the library at ``path`` ([] when missing) and the bytes a repair cut (0 if none).

    A torn last line raises :class:`TornLibraryError` unless ``repair``; any other bad line raises
    :class:`PersistenceError` naming it.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    good_end = data.rfind(b"\n") + 1  # everything after the last newline is a torn tail
    lines = data[:good_end].split(b"\n")[:-1] if good_end else []
    tail = data[good_end:]
    torn_at = None
    if tail.strip():
        torn_at = good_end
    records: list[Experience] = []
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            d = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if n == len(lines) and torn_at is None and not tail:  # the last full line is itself cut
                torn_at = good_end - len(raw) - 1
                break
            raise PersistenceError(f"FLEX library {str(path)!r} line {n} is not a JSON record ({exc}); "
                                   "the file is corrupt (only a torn LAST line can be repaired)") from exc
        records.append(Experience.from_dict(d, f"FLEX library {str(path)!r} line {n}"))
    if torn_at is not None:
        cut = len(data) - torn_at
        if not repair:
            raise TornLibraryError(f"FLEX library {str(path)!r} ends with a torn line at byte {torn_at} ({cut} bytes, "
                                   "a crash mid-append); run `toe flex prune --repair LIBRARY` to cut it")
        atomic_io.write_bytes(path, data[:torn_at])
        return records, cut
    return records, 0


@codec.data
class ExperienceLibrary:
    """The seed's ``ExperienceLibrary``: ``experiences`` in memory, mirrored by an append-only JSONL file."""

    def __init__(self, path: str | Path, repair: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.experiences, self.repaired_bytes = read_library(self.path, repair)
        self.keys = {e.key for e in self.experiences}
        if len(self.keys) != len(self.experiences):
            raise PersistenceError(f"FLEX library {str(self.path)!r} holds a key more than once")

    @property
    def archive_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".archive.jsonl")

    def next_step(self) -> int:
        return max((e.step for e in self.experiences), default=-1) + 1

    def add(self, exps: Sequence[Experience]) -> list[Experience]:
        """Append the records whose key is new (in order), fsynced; returns those appended."""
        new = []
        for e in exps:
            if e.key not in self.keys:
                self.keys.add(e.key)
                new.append(e)
        if new:
            _append(self.path, b"".join(_line(e) for e in new))
            self.experiences.extend(new)
        return new

    def archive(self, keys: Iterable[str], reason: str) -> int:
        """Move the records of ``keys`` to the archive file (appended first, fsynced), then rewrite the library."""
        keys = set(keys)
        gone = [e for e in self.experiences if e.key in keys]
        if not gone:
            return 0
        _append(self.archive_path, b"".join(_line(_with_meta(e, archived=reason)) for e in gone))
        self.experiences = [e for e in self.experiences if e.key not in keys]
        atomic_io.write_bytes(self.path, b"".join(_line(e) for e in self.experiences))
        return len(gone)


def _with_meta(e: Experience, **meta) -> Experience:
    from dataclasses import replace

    return replace(e, metadata={**e.metadata, **meta})


def _append(path: Path, payload: bytes) -> None:
    """One ``write`` of whole lines to ``path`` (O_APPEND), then fsync (the folder too when the file is new)."""
    new = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(payload)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        atomic_io.fsync_dir(path.parent)


def stats(records: Sequence[Experience]) -> dict[str, Any]:
    """Counts for ``toe flex stats``: records, successes, per domain and difficulty, reflections' mean length."""
    by_domain: dict[str, list[int]] = {}
    for e in records:
        by_domain.setdefault(e.domain, [0, 0])
        by_domain[e.domain][0] += 1
        by_domain[e.domain][1] += int(e.is_correct)
    diff: dict[str, int] = {}
    for e in records:
        diff[e.difficulty] = diff.get(e.difficulty, 0) + 1
    n = len(records)
    return {
        "records": n,
        "successes": sum(e.is_correct for e in records),
        "success_rate": (sum(e.is_correct for e in records) / n) if n else 0.0,
        "domains": {d: {"records": c[0], "successes": c[1]} for d, c in sorted(by_domain.items())},
        "difficulty": dict(sorted(diff.items())),
        "avg_reflection_words": (sum(len(e.reflection.split()) for e in records) / n) if n else 0.0,
    }
