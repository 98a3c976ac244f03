"""A typed data codec for what a resume reads: checkpoint results and method states, never code.

``dumps(value) -> bytes`` and ``loads(bytes) -> value`` round-trip the values the engine
keeps between rounds: ``None``, ``bool``, ``int`` (any size), ``float`` (NaN and infinities
included), ``str``, ``bytes``, lists, tuples, dicts (any encodable keys, in order), sets,
frozensets, NumPy arrays and scalars of any dtype that holds no Python objects,
``fractions.Fraction``, paths, dates and times, and instances of the classes registered with
:func:`data` (their attributes, recursively). Anything else is refused at ``dumps`` with the
path of the offending value, so what was written can always be read.

Reading runs no code: the header is JSON, arrays are copied out of a bounds-checked byte
area, and an object is rebuilt only for a registered class (``object.__new__`` then its
attributes, or the class's own ``__setstate__`` when it defines ``__getstate__`` and
``__setstate__``; never ``__init__``, never an import by name). A file that names an
unknown class, an object dtype, a buffer outside the file or nesting deeper than
:data:`MAX_DEPTH` is refused with a :class:`engine.errors.PersistenceError` naming what was
wrong. Shared references are not kept (each occurrence is its own copy) and cycles are refused.

Layout: ``MAGIC``, the header's length (8 bytes, little-endian), the UTF-8 JSON header, zero
padding to a multiple of 64, then the buffers (each at an offset that is a multiple of 64). An
object array whose elements are all ``str`` (a memory's text column) is two buffers: the strings
joined in UTF-8 and each one's length in characters (``<i8``); JSON-escaping them cost a MemRL
experience track's pack and unpack 2-3 times the rest. Other object arrays are JSON in the header.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from collections import OrderedDict
from fractions import Fraction
from pathlib import PurePath, PurePosixPath
from typing import Any

import numpy as np

from engine.errors import PersistenceError

MAGIC = b"TOE-DATA\x001\n"
MAX_DEPTH = 200
_ALIGN = 64
_PLAIN = (str, int, float, bool)
_REGISTRY: dict[str, type] = {}
_CONTEXT: dict[type, frozenset[str]] = {}  # attributes a class's instances hold but do not own (never written)


def data(cls: type | None = None, *, context: tuple[str, ...] = ()):
    """Class decorator: instances of ``cls`` may be written and read (by their attributes).

    ``context`` names attributes the instance uses but does not own (an embedder, a model): they
    are not written and read back as ``None``; the owner attaches its own after reading.
    """
    def register(c: type) -> type:
        _REGISTRY[_name(c)] = c
        _CONTEXT[c] = frozenset(context)
        return c

    return register if cls is None else register(cls)


def _custom(cls: type) -> bool:
    """Whether a registered class gives its own state (defines ``__setstate__`` and ``__getstate__``)."""
    return getattr(cls, "__setstate__", None) is not None and "__getstate__" in _defined(cls)


def _defined(cls: type) -> set[str]:
    return {k for c in cls.__mro__ if c is not object for k in vars(c)}


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


# --- writing ---------------------------------------------------------------------------------------


class _Writer:
    def __init__(self):
        self.chunks: list[bytes] = []
        self.size = 0
        self.active: set[int] = set()

    def buffer(self, raw: bytes) -> list[int]:
        pad = -self.size % _ALIGN
        if pad:
            self.chunks.append(b"\0" * pad)
            self.size += pad
        at = self.size
        self.chunks.append(raw)
        self.size += len(raw)
        return [at, len(raw)]

    def enc(self, x: Any, where: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise TypeError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        t = type(x)
        if x is None or t is bool or t is str or t is int:
            return x
        if t is float:
            return x if math.isfinite(x) else {"$f": repr(x)}
        if t in (list, tuple, dict, set, frozenset, OrderedDict) or dataclasses.is_dataclass(x) or _name(t) in _REGISTRY:
            if id(x) in self.active:
                raise TypeError(f"{where}: a reference cycle")
            self.active.add(id(x))
            try:
                return self._container(x, t, where, depth + 1)
            finally:
                self.active.discard(id(x))
        if t in (bytes, bytearray):
            return {"$b" if t is bytes else "$ba": self.buffer(bytes(x))}
        if isinstance(x, np.ndarray) and t is np.ndarray:
            return {"$a": self.array(x, where)}
        if isinstance(x, np.generic):
            return {"$g": self.array(np.asarray(x), where)}
        if t is Fraction:
            return {"$F": [x.numerator, x.denominator]}
        if isinstance(x, PurePath):
            return {"$p": [x.as_posix(), isinstance(x, PurePosixPath)]}
        if t is _dt.datetime:
            return {"$dt": x.isoformat()}
        if t is _dt.date:
            return {"$date": x.isoformat()}
        if t is _dt.timedelta:
            return {"$td": [x.days, x.seconds, x.microseconds]}
        hint = "; decorate it with engine.codec.data" if hasattr(x, "__dict__") else ""
        raise TypeError(f"{where}: {t.__module__}.{t.__qualname__} cannot be written (not a data type{hint})")

    def _container(self, x, t, where, depth):
        if t is list:
            return [self.enc(v, f"{where}[{i}]", depth) for i, v in enumerate(x)]
        if t is tuple:
            return {"$t": [self.enc(v, f"{where}[{i}]", depth) for i, v in enumerate(x)]}
        if t is dict:
            if all(type(k) is str for k in x):
                return {"$m": {k: self.enc(v, f"{where}[{k!r}]", depth) for k, v in x.items()}}
            return {"$d": [[self.enc(k, f"{where} key", depth), self.enc(v, f"{where}[{k!r}]", depth)]
                           for k, v in x.items()]}
        if t is OrderedDict:
            return {"$od": [[self.enc(k, f"{where} key", depth), self.enc(v, f"{where}[{k!r}]", depth)]
                            for k, v in x.items()]}
        if t in (set, frozenset):
            items = [self.enc(v, f"{where} item", depth) for v in x]
            return {"$set" if t is set else "$fset": items}
        name = _name(t)
        if name not in _REGISTRY:
            raise TypeError(f"{where}: {t.__module__}.{t.__qualname__} cannot be written (not a registered data type: "
                            f"decorate it with engine.codec.data)")
        if hasattr(t, "__slots__") and not hasattr(x, "__dict__"):
            raise TypeError(f"{where}: {name} has __slots__ and no __dict__")
        state = x.__getstate__() if _custom(t) else vars(x)  # a class may say what its state is
        if isinstance(state, dict) and all(type(k) is str for k in state):
            skip = _CONTEXT[t]
            return {"$o": [name, {"$m": {k: None if k in skip else self.enc(v, f"{where}.{k}", depth)
                                         for k, v in state.items()}}]}
        return {"$o": [name, self.enc(state, f"{where} state", depth)]}

    def array(self, a: np.ndarray, where: str) -> list:
        if a.dtype == object:  # text columns: every element a plain str, int, float, bool or None
            flat = a.ravel().tolist()
            if all(type(v) is str for v in flat):
                text = _text_buffers(flat)
                if text is not None:
                    return ["|T", list(a.shape)] + self.buffer(text[0]) + self.buffer(text[1])
            if not all(v is None or type(v) in _PLAIN for v in flat):
                bad = next(type(v) for v in flat if not (v is None or type(v) in _PLAIN))
                raise TypeError(f"{where}: an object array holding a {bad.__module__}.{bad.__qualname__} cannot be written")
            return ["|O", list(a.shape), [v if type(v) is not float or math.isfinite(v) else {"$f": repr(v)}
                                          for v in flat]]
        if a.dtype.hasobject:
            raise TypeError(f"{where}: a structured array with Python object fields cannot be written")
        descr = np.lib.format.dtype_to_descr(a.dtype)
        return [descr, list(a.shape)] + self.buffer(np.ascontiguousarray(a).tobytes())


def _text_buffers(flat: list) -> tuple[bytes, bytes] | None:
    """An all-``str`` object array as (its strings joined in UTF-8, each one's length in characters as ``<i8``);
    None where a string does not encode (a lone surrogate: JSON escapes it)."""
    try:
        raw = "".join(flat).encode("utf-8")
    except UnicodeEncodeError:
        return None
    return raw, np.fromiter(map(len, flat), dtype="<i8", count=len(flat)).tobytes()


def dumps(value: Any) -> bytes:
    """``value`` as bytes; a value this codec cannot hold raises TypeError naming where it is."""
    w = _Writer()
    tree = w.enc(value, "value", 0)
    header = json.dumps(tree, separators=(",", ":"), allow_nan=False).encode()
    head = MAGIC + len(header).to_bytes(8, "little") + header
    head += b"\0" * (-len(head) % _ALIGN)
    return head + b"".join(w.chunks)


# --- reading ---------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, body: memoryview, what: str):
        self.body = body
        self.what = what

    def bad(self, why: str) -> PersistenceError:
        return PersistenceError(f"{self.what}: {why}")

    def span(self, ref) -> memoryview:
        if (not isinstance(ref, list) or len(ref) != 2 or not all(type(v) is int and v >= 0 for v in ref)
                or ref[0] + ref[1] > len(self.body)):
            raise self.bad(f"a buffer reference {ref!r} lies outside the file")
        return self.body[ref[0]:ref[0] + ref[1]]

    def array(self, spec) -> np.ndarray:
        if isinstance(spec, list) and len(spec) == 3 and spec[0] == "|O":
            return self.object_array(spec[1], spec[2])
        if isinstance(spec, list) and len(spec) == 6 and spec[0] == "|T":
            return self.text_array(spec[1], spec[2:4], spec[4:6])
        if not isinstance(spec, list) or len(spec) != 4:
            raise self.bad(f"a malformed array entry {spec!r}")
        descr, shape, at, n = spec
        try:
            dtype = np.lib.format.descr_to_dtype(descr if isinstance(descr, str) else _tuples(descr))
        except (TypeError, ValueError, KeyError) as exc:
            raise self.bad(f"an array has an unknown dtype {descr!r} ({exc})") from None
        if dtype.hasobject:
            raise self.bad("an array of Python objects")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise self.bad(f"an array has shape {shape!r}")
        raw = self.span([at, n])
        if math.prod(shape) * dtype.itemsize != len(raw):
            raise self.bad(f"an array of shape {shape} and dtype {dtype} does not fill its {len(raw)} bytes")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()

    def object_array(self, shape, flat) -> np.ndarray:
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape) or type(flat) is not list \
                or math.prod(shape) != len(flat):
            raise self.bad(f"a malformed object array of shape {shape!r}")
        values = [self.dec(v, 1) if type(v) is dict else v for v in flat]
        if not all(v is None or type(v) in _PLAIN for v in values):
            raise self.bad("an object array holds a value that is not plain text or a number")
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out.reshape(shape)

    def text_array(self, shape, text_ref, lengths_ref) -> np.ndarray:
        """An object array of strings written as one UTF-8 buffer and each string's length (:func:`_text_buffers`)."""
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise self.bad(f"a malformed text array of shape {shape!r}")
        n = math.prod(shape)
        raw, lengths = self.span(text_ref), self.span(lengths_ref)
        if len(lengths) != 8 * n:
            raise self.bad(f"a text array of shape {shape} has {len(lengths)} bytes of lengths, not {8 * n}")
        lengths = np.frombuffer(lengths, dtype="<i8")
        try:
            text = str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.bad(f"a text array is not UTF-8 ({exc.reason})") from None
        if n and (int(lengths.min()) < 0 or int(lengths.sum()) != len(text)):
            raise self.bad(f"a text array's lengths do not add up to its {len(text)} characters")
        ends = np.cumsum(lengths).tolist()
        out = np.empty(n, dtype=object)
        out[:] = [text[a:b] for a, b in zip([0] + ends[:-1], ends)]
        return out.reshape(shape)

    def dec(self, x, depth: int, live=None):
        """The value of header entry ``x``; ``live`` is the object at the same place in the reader's live
        value (or None), from which a registered object's context attributes are taken."""
        if depth > MAX_DEPTH:
            raise self.bad(f"nested deeper than {MAX_DEPTH} levels")
        if x is None or type(x) in (bool, int, float, str):
            return x
        if type(x) is list:
            return [self.dec(v, depth + 1, _item(live, i, list)) for i, v in enumerate(x)]
        if type(x) is not dict or len(x) != 1:
            raise self.bad(f"an entry of type {type(x).__name__} is not a tagged value")
        (tag, v), = x.items()
        d = depth + 1
        if tag == "$m" and type(v) is dict:
            return {k: self.dec(w, d, live.get(k) if isinstance(live, dict) else None) for k, w in v.items()}
        if tag == "$d" and type(v) is list and all(type(p) is list and len(p) == 2 for p in v):
            return {_hashable(self.dec(k, d), self): self.dec(w, d) for k, w in v}
        if tag == "$t" and type(v) is list:
            return tuple(self.dec(w, d, _item(live, i, tuple)) for i, w in enumerate(v))
        if tag == "$od" and type(v) is list and all(type(p) is list and len(p) == 2 for p in v):
            return OrderedDict((_hashable(self.dec(k, d), self), self.dec(w, d)) for k, w in v)
        if tag in ("$set", "$fset") and type(v) is list:
            items = (_hashable(self.dec(w, d), self) for w in v)
            return set(items) if tag == "$set" else frozenset(items)
        if tag == "$f" and v in ("nan", "inf", "-inf"):
            return float(v)
        if tag in ("$b", "$ba"):
            raw = bytes(self.span(v))
            return raw if tag == "$b" else bytearray(raw)
        if tag == "$a":
            return self.array(v)
        if tag == "$g":
            a = self.array(v)
            if a.shape != ():
                raise self.bad("a NumPy scalar that is not 0-dimensional")
            return a[()]
        if tag == "$F" and type(v) is list and len(v) == 2 and all(type(p) is int for p in v) and v[1] > 0:
            return Fraction(v[0], v[1])
        if tag == "$p" and type(v) is list and len(v) == 2 and type(v[0]) is str:
            from pathlib import Path, PureWindowsPath

            return Path(v[0]) if v[1] else PureWindowsPath(v[0])
        try:
            if tag == "$dt" and type(v) is str:
                return _dt.datetime.fromisoformat(v)
            if tag == "$date" and type(v) is str:
                return _dt.date.fromisoformat(v)
            if tag == "$td" and type(v) is list and len(v) == 3 and all(type(p) is int for p in v):
                return _dt.timedelta(days=v[0], seconds=v[1], microseconds=v[2])
        except (ValueError, OverflowError) as exc:
            raise self.bad(f"a malformed {tag} value {v!r}: {exc}") from None
        if tag == "$o" and type(v) is list and len(v) == 2 and type(v[0]) is str:
            cls = _REGISTRY.get(v[0])
            if cls is None:
                raise self.bad(f"names the class {v[0]!r}, which is not a registered data type")
            mine = live if type(live) is cls else None
            state = self.dec(v[1], d, mine.__dict__ if mine is not None and hasattr(mine, "__dict__") else None)
            if isinstance(state, dict):
                for k in _CONTEXT[cls] & set(state):
                    state[k] = getattr(mine, k, None)
            obj = object.__new__(cls)
            if _custom(cls):
                obj.__setstate__(state)
            elif isinstance(state, dict) and all(type(k) is str for k in state):
                obj.__dict__.update(state)
            else:
                raise self.bad(f"the state of a {v[0]} is not a table of attributes")
            return obj
        raise self.bad(f"an unknown or malformed entry {tag!r}")


def _item(live, i: int, kind: type):
    return live[i] if type(live) is kind and i < len(live) else None


def _tuples(descr):
    """A structured dtype's descr as JSON gives it back (lists) in NumPy's form (tuples)."""
    if not isinstance(descr, list):
        return descr
    out = []
    for field in descr:
        if not isinstance(field, list) or not 2 <= len(field) <= 3:
            raise ValueError(f"a malformed field {field!r}")
        name = tuple(field[0]) if isinstance(field[0], list) else field[0]
        rest = [_tuples(field[1])] + ([tuple(field[2])] if len(field) == 3 and isinstance(field[2], list) else field[2:])
        out.append((name, *rest))
    return out


def _hashable(key, reader: _Reader):
    try:
        hash(key)
    except TypeError:
        raise reader.bad(f"a dict key or set item of type {type(key).__name__} is not hashable") from None
    return key


def loads(blob: bytes | memoryview, what: str = "data file", live: Any = None) -> Any:
    """The value :func:`dumps` wrote. ``what`` names the source in errors (e.g. the file's path).

    ``live`` is the reader's own value of the same shape (e.g. the state of a method built from the same
    config): each registered object's ``context`` attributes are taken from the object at the same place
    in it (by attribute, key or position), or are None where it has none.
    """
    view = memoryview(blob).cast("B")
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise PersistenceError(f"{what}: not a data file of this engine (it does not start with {MAGIC!r}; "
                               f"pickles are not read)")
    n0 = len(MAGIC) + 8
    if len(view) < n0:
        raise PersistenceError(f"{what}: truncated")
    size = int.from_bytes(view[len(MAGIC):n0], "little")
    if n0 + size > len(view):
        raise PersistenceError(f"{what}: its header of {size} bytes is longer than the file")
    try:
        tree = json.loads(bytes(view[n0:n0 + size]))
    except (ValueError, RecursionError) as exc:
        raise PersistenceError(f"{what}: a malformed header ({type(exc).__name__})") from None
    start = n0 + size + (-(n0 + size) % _ALIGN)
    try:
        return _Reader(view[start:], what).dec(tree, 0, live)
    except RecursionError:
        raise PersistenceError(f"{what}: nested too deeply") from None


def write(path, value: Any) -> bytes:
    """``dumps(value)`` written atomically to ``path`` (:mod:`engine.atomic_io`); returns the bytes written."""
    from engine import atomic_io

    blob = dumps(value)
    atomic_io.write_bytes(path, blob)
    return blob


def read(path, live: Any = None) -> Any:
    """The value in the data file at ``path`` (``live`` as for :func:`loads`); an unreadable file is a
    PersistenceError naming it."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read()
    except OSError as exc:
        raise PersistenceError(f"data file {str(path)!r} is unreadable: {exc}") from exc
    return loads(blob, f"data file {str(path)!r}", live)
