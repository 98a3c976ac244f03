"""The grid of a sweep: ``--grid KEY=V1,V2,...`` options, their combinations and stable run-folder names.

Each value is TOML (``0.5``, ``true``, ``"text"``, ``[1, 2]``; a bare word is a string), parsed by the
same :func:`engine.config.parse_value` as ``toe run --set``. Commas inside brackets, braces or quotes do
not split values, so ``--grid seeds=[0,1],[2,3]`` has two values. When the config holds a list at KEY and
a value is a scalar, the value is wrapped (``--grid seeds=0,1`` runs ``seeds = [0]`` and ``seeds = [1]``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from engine.config import lookup, parse_value
from engine.errors import ConfigError

_SAFE = re.compile(r"[^A-Za-z0-9._=+-]")
MAX_NAME = 120


@dataclass(frozen=True)
class Axis:
    """One ``--grid`` option: a config key and its values (raw text as typed, and parsed)."""

    key: str
    raw: tuple[str, ...]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Combination:
    """One run of the sweep: its folder name and the ``--set`` overrides that make it."""

    name: str
    raw: dict[str, str]  # key -> the value as typed
    values: dict[str, Any]  # key -> parsed value (what the table's key columns show)
    overrides: tuple[str, ...]  # KEY=VALUE items for ``toe run --set``


def parse_axis(text: str) -> Axis:
    """``"tot.breadth=2,3"`` -> Axis("tot.breadth", ("2", "3"), (2, 3))."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--grid expects KEY=V1,V2,..., got {text!r}")
    if not all(key.split(".")):
        raise ConfigError(f"--grid key {key!r} has an empty component")
    raw = tuple(v.strip() for v in split_values(rest))
    if not raw or any(v == "" for v in raw):
        raise ConfigError(f"--grid {key}: expected a comma-separated list of values, got {rest!r}")
    if len(set(raw)) != len(raw):
        raise ConfigError(f"--grid {key}: values must be distinct, got {list(raw)}")
    return Axis(key, raw, tuple(parse_value(v) for v in raw))


def split_values(text: str) -> list[str]:
    """Split on commas outside brackets, braces and quotes."""
    out, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if quote or depth:
        raise ConfigError(f"--grid values {text!r} have an unclosed quote or bracket")
    out.append("".join(cur))
    return out


def combinations(axes: Sequence[Axis], config: Mapping[str, Any]) -> list[Combination]:
    """Every combination of the axes' values (first axis slowest), with unique folder names."""
    keys = [a.key for a in axes]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise ConfigError(f"--grid key(s) given more than once: {dup}; list all values in one --grid KEY=V1,V2")
    combos = []
    for picks in itertools.product(*(range(len(a.raw)) for a in axes)):
        raw = {a.key: a.raw[i] for a, i in zip(axes, picks)}
        values = {a.key: a.values[i] for a, i in zip(axes, picks)}
        overrides = tuple(f"{k}={_override_text(raw[k], values[k], lookup(config, k))}" for k in keys)
        combos.append(Combination(run_name(raw), raw, values, overrides))
    names = [c.name for c in combos]
    assert len(set(names)) == len(names), "run names must be unique"
    return combos


def run_name(raw: Mapping[str, str]) -> str:
    """``{"tot.breadth": "2", "seeds": "0"}`` -> ``"seeds=0__tot.breadth=2"``: keys sorted (the name does not
    depend on the order of the --grid options), characters outside ``[A-Za-z0-9._=+-]`` replaced by ``_``;
    a name that had to be changed or shortened ends in a hash of the exact overrides, so it stays unique."""
    name = "__".join(f"{k}={raw[k]}" for k in sorted(raw))
    safe = _SAFE.sub("_", name)
    if safe != name or len(safe) > MAX_NAME or safe.startswith((".", "-")):
        digest = hashlib.sha1(json.dumps(dict(sorted(raw.items()))).encode()).hexdigest()[:10]
        safe = f"{safe.lstrip('.-')[: MAX_NAME - 11]}-{digest}"
    return safe


def _override_text(raw: str, value: Any, current: Any) -> str:
    if isinstance(current, list) and not isinstance(value, list):
        return f"[{json.dumps(value) if isinstance(value, str) else raw}]"
    return raw
