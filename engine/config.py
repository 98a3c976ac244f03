"""Typed, validated TOML configuration shared by every part of the engine.

Each section is a frozen dataclass whose ``__post_init__`` validates its values
and raises :class:`ConfigError`. :func:`from_dict` builds a (nested) dataclass
from a plain dict, rejecting unknown keys with the list of valid ones, and
coercing ints to floats where a float is declared. ``--set a.b=c`` overrides go
through :func:`apply_overrides` before :func:`from_dict`, so they are validated
exactly like the file.

Example::

    @dataclass(frozen=True)
    class StoreConfig:
        capacity: int = 1024
        horizons: tuple[int, ...] = (10, 20, 40)

        def __post_init__(self):
            check(self.capacity > 0, f"store.capacity must be > 0, got {self.capacity}")

    cfg = from_dict(StoreConfig, {"capacity": 10}, "store")
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

from engine.errors import ConfigError

T = TypeVar("T")


def check(condition: bool, message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(message)


SEED_LIMIT = 2**32  # seeds are NumPy generator seeds and Arrow int64 cells: 0 <= seed < 2**32


# Top-level keys of every run config that the engine itself reads (title is a free-form run name); a task reads
# the rest (engine.tasks checks that no other key is present).
ENGINE_KEYS = ("task", "title", "llm", "embed", "cluster")


def split_tables(config: Mapping[str, Any], keys: Sequence[str], task: str) -> dict[str, Any]:
    """The task's own top-level entries of ``config`` (those in ``keys``; the engine reads :data:`ENGINE_KEYS`).
    A key that is neither the engine's nor the task's is an error listing the valid ones: the one split of a
    config into the engine's part and a task's part."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"config must be a table, got {type(config).__name__}")
    unknown = sorted(set(config) - set(ENGINE_KEYS) - set(keys))
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {', '.join(map(repr, unknown))} in the {task} config; "
                          f"valid keys: {', '.join(sorted(set(ENGINE_KEYS) | set(keys)))}")
    return {k: v for k, v in config.items() if k in keys and k not in ENGINE_KEYS}


def check_seeds(seeds: Any, name: str = "seeds") -> list[int]:
    """A run's seeds: a non-empty list of distinct integers in ``[0, 2**32)`` (checked by ``--dry-run``, so a
    seed that NumPy or Arrow cannot hold fails before any work, not when the results are written)."""
    if not isinstance(seeds, (list, tuple)) or not seeds or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ConfigError(f"{name} must be a non-empty list of integers, got {seeds!r}")
    bad = [s for s in seeds if not 0 <= s < SEED_LIMIT]
    if bad:
        raise ConfigError(f"{name} must lie in [0, 2**32), got {bad[0]}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{name} must be distinct, got {list(seeds)}")
    return list(seeds)


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file into a dict, with an error naming the file on failure."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from exc


def parse_value(text: str) -> Any:
    """Parse the right-hand side of ``--set key=value`` as a TOML value, else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str],
                    aliases: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """Return a deep copy of ``data`` with ``["a.b=1", "c=x"]`` applied.

    Values are parsed as TOML (``1``, ``0.5``, ``true``, ``[1, 2]``, ``"s"``);
    anything that is not valid TOML is taken as a bare string. ``aliases`` (earlier dotted names ->
    the key(s) each names now, :func:`move_aliases`) are moved in ``data`` first, and an override
    that names one sets its key(s) instead, so an override replaces a value whichever name the file used.
    """
    aliases = aliases or {}
    out = move_aliases(copy_tables(data), aliases)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".")]
        if not all(parts):
            raise ConfigError(f"--set key {key!r} has an empty component")
        value = parse_value(raw.strip())
        for target in renamed(key.strip(), aliases):
            _set(out, target.split("."), value, key)
    return out


def renamed(key: str, aliases: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The key(s) dotted ``key`` names now: itself, or what its alias (``key`` or a prefix of it) names."""
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        targets = aliases.get(".".join(parts[:i]))
        if targets:
            return tuple(".".join([t, *parts[i:]]) for t in targets)
    return (key,)


def move_aliases(data: dict[str, Any], aliases: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """``data`` (changed in place) with each value at an alias (an earlier dotted name, e.g. ``llm.base_url``)
    moved to the key(s) it names; an alias and its key both set to different values raise ConfigError."""
    for alias, targets in aliases.items():
        *path, last = alias.split(".")
        node = lookup(data, ".".join(path)) if path else data
        if not isinstance(node, dict) or last not in node:
            continue
        value = node.pop(last)
        for target in targets:
            current = lookup(data, target)
            if current is not None and current != value:
                raise ConfigError(f"{alias} = {value!r} and {target} = {current!r} are both set: {alias} is the "
                                  f"earlier name of {target}; set one (e.g. --set {target}=...)")
            _set(data, target.split("."), value, alias)
    return data


def _set(data: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = value


def lookup(config: Mapping[str, Any], key: str) -> Any:
    """The value at dotted ``key`` (``"llm.backend"``) of a config dict, or None where it is absent."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def copy_tables(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` whose tables (mappings) are copied too, at every depth."""
    return {k: copy_tables(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def from_dict(cls: type[T], data: Mapping[str, Any] | None, where: str = "") -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys and bad types raise ConfigError."""
    data = {} if data is None else data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or cls.__name__} must be a table, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(repr(u) for u in unknown)} in "
            f"[{where or cls.__name__}]; valid keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(value, hints[name], f"{where}.{name}" if where else name)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"[{where or cls.__name__}]: {exc}") from exc


def to_dict(obj: Any) -> Any:
    """Plain-dict form of a (nested) config dataclass, for logs and summary files."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} matches none of {tp}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if origin is tuple and args:
            if len(args) != len(value):
                raise ConfigError(f"{where} must have {len(args)} items, got {len(value)}")
            return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(args, value)))
        inner = args[0] if args else Any
        seq = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(seq) if origin is tuple else seq
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a table, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be finite, got {value!r}")
        return float(value)
    if tp is str:
        if isinstance(value, (datetime.date, datetime.time)):  # a TOML date or time (`end = 2025-03-26`)
            return value.isoformat()
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {value!r}")
        return value
    return value


def load_named(spec: str, what: str, shape: str = "module:attr"):
    """The object a ``"module:attr"`` string names (imports the module); ConfigError naming ``what``
    when the string is malformed or the module or attribute cannot be loaded."""
    import importlib

    module, sep, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or not module or not attr:
        raise ConfigError(f"{what} must look like {shape!r}, got {spec!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{what} {spec!r} cannot be loaded: {exc}") from exc
