"""engine.codec: what a resume reads is data, never code."""

from __future__ import annotations

import datetime as dt
import json
import math
import pickle
import re
from collections import OrderedDict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from engine import codec
from engine.errors import PersistenceError


@codec.data
@dataclass(frozen=True)
class Point:
    x: int
    tag: object = None


class Model:  # stands for an embedder: the owner's, never written
    def __init__(self, name):
        self.name = name


@codec.data(context=("model",))
class Memory:
    def __init__(self, model, rows):
        self.model, self.rows = model, rows


@codec.data
class Custom:
    """A class that says what its state is (as Mem0Memory does: records instead of a live library)."""

    def __init__(self, n):
        self.n, self.live = n, object()

    def __getstate__(self):
        return {"n": self.n}

    def __setstate__(self, state):
        self.n, self.live = state["n"], "rebuilt"


def test_every_supported_value_round_trips_exactly():
    value = {
        "plain": [None, True, False, 0, -7, 10**40, 2.5, "text ünïcode", ""],
        "floats": [float("nan"), float("inf"), float("-inf"), -0.0],
        "bytes": [b"\x00\xff", bytearray(b"ab")],
        "nest": (1, (2, [3, {"a": ()}])),
        3: {1, 2}, (1, "k"): frozenset({"a"}), None: "none key",
        "i2": np.arange(12, dtype=np.int16).reshape(3, 4), "f4": np.linspace(0, 1, 5, dtype=np.float32)[::2],
        "empty": np.zeros((0, 384), np.float32), "bool": np.array([True, False]),
        "struct": np.array([(1, [0.5, 1.5])], dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
        "when": np.array(["2025-03-01T12:00"], dtype="datetime64[m]"), "text_col": np.array(["a", None, 3], dtype=object),
        "u": np.array(["ab", "c"]), "scalars": [np.float32(1.5), np.int64(-3), np.bool_(True)],
        "F": Fraction(-3, 7), "path": Path("/a/b"), "od": OrderedDict([("z", 1), ("a", 2)]),
        "t": dt.datetime(2025, 3, 1, 12, tzinfo=dt.timezone.utc), "d": dt.date(2024, 1, 1), "td": dt.timedelta(3, 5, 7),
        "obj": Point(1, Point(2, np.array([1.0]))),
    }
    back = codec.loads(codec.dumps(value))
    assert list(back) == list(value)
    assert repr(back["plain"]) == repr(value["plain"]) and type(back["nest"][1][1]) is list
    assert all(math.isnan(a) if math.isnan(b) else (a == b and math.copysign(1, a) == math.copysign(1, b))
               for a, b in zip(back["floats"], value["floats"]))
    assert back["bytes"] == value["bytes"] and type(back["bytes"][1]) is bytearray
    for k in ("i2", "f4", "empty", "bool", "struct", "when", "text_col", "u"):
        assert back[k].dtype == value[k].dtype and back[k].shape == value[k].shape
        assert back[k].tolist() == value[k].tolist() if k == "text_col" else back[k].tobytes() == value[k].tobytes()
        assert back[k].flags.writeable  # a copy, not a view of the file
    assert [type(s) for s in back["scalars"]] == [np.float32, np.int64, np.bool_] and back["scalars"] == value["scalars"]
    assert type(back["od"]) is OrderedDict and list(back["od"]) == ["z", "a"]
    for k in ("F", "path", "t", "d", "td", 3, (1, "k"), None):
        assert back[k] == value[k] and type(back[k]) is type(value[k])
    assert back["obj"].x == 1 and back["obj"].tag.tag.tolist() == [1.0]


@pytest.mark.parametrize("value, where", [
    ({"a": [1, lambda: 0]}, r"value\['a'\]\[1\]: builtins.function"),
    ({"o": np.array([object()], dtype=object)}, r"value\['o'\]: an object array holding a builtins.object"),
    ({"m": Model("x")}, r"value\['m'\]: .*Model cannot be written .*engine.codec.data"),
    ({"s": {1: slice(1)}}, r"value\['s'\]\[1\]: builtins.slice"),
])
def test_what_cannot_be_written_is_refused_naming_where(value, where):
    with pytest.raises(TypeError, match=where):
        codec.dumps(value)


def test_a_cycle_is_refused_and_shared_references_are_copied():
    loop: list = []
    loop.append(loop)
    with pytest.raises(TypeError, match="cycle"):
        codec.dumps(loop)
    shared = [1]
    back = codec.loads(codec.dumps([shared, shared]))
    assert back == [[1], [1]] and back[0] is not back[1]


def test_context_attributes_are_not_written_and_come_from_the_live_value():
    mem = Memory(Model("secret-weights"), [1, 2])
    blob = codec.dumps({"memory": mem})
    assert b"secret-weights" not in blob
    mine = Model("mine")
    back = codec.loads(blob, live={"memory": Memory(mine, [])})
    assert back["memory"].model is mine and back["memory"].rows == [1, 2]
    assert codec.loads(blob)["memory"].model is None  # no live counterpart


def test_a_class_with_its_own_state_is_rebuilt_by_it():
    back = codec.loads(codec.dumps(Custom(4)))
    assert back.n == 4 and back.live == "rebuilt"


def test_text_arrays_travel_as_one_utf8_buffer_and_round_trip():
    """An all-str object array (a memory's text column) is one UTF-8 buffer and its lengths, not JSON; mixed or
    unencodable ones (a lone surrogate) stay in the header; both read back equal, as str."""
    words = np.empty((2, 3), dtype=object)
    words[:] = [["", "ünïcode", "日本語 text"], ["a\x00b", "emoji 🙂", "x" * 1000]]
    mixed = np.array(["a", None, 2.5], dtype=object)
    lone = np.array(["ok", "\ud800"], dtype=object)
    empty = np.empty(0, dtype=object)
    blob = codec.dumps({"w": words, "m": mixed, "l": lone, "e": empty})
    header = blob[len(codec.MAGIC) + 8:len(codec.MAGIC) + 8 + int.from_bytes(blob[len(codec.MAGIC):len(codec.MAGIC) + 8], "little")]
    assert b"emoji" not in header and b"emoji" in blob  # the text is in the buffer area, not the JSON header
    back = codec.loads(blob)
    for key, want in (("w", words), ("m", mixed), ("l", lone), ("e", empty)):
        assert back[key].dtype == object and back[key].shape == want.shape and back[key].tolist() == want.tolist()
    assert all(type(v) is str for v in back["w"].ravel())
    assert codec.dumps(back) == blob


def _file(header, body: bytes = b"") -> bytes:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    head = codec.MAGIC + len(raw).to_bytes(8, "little") + raw
    return head + b"\0" * (-len(head) % 64) + body


@pytest.mark.parametrize("blob, match", [
    (pickle.dumps({"a": 1}), "not a data file of this engine.*pickles are not read"),
    (codec.MAGIC + b"\x01", "truncated"),
    (codec.MAGIC + (10**6).to_bytes(8, "little") + b"{}", "header of 1000000 bytes is longer than the file"),
    (_file(b"{not json"), "malformed header"),
    (_file(b"[" * 100_000 + b"]" * 100_000), "malformed header|nested"),
    (_file({"$o": ["os:system", {"$m": {}}]}), "'os:system', which is not a registered data type"),
    (_file({"$o": ["builtins:eval", ["1"]]}), "not a registered data type"),
    (_file({"$a": ["<f8", [4], 0, 32]}), "outside the file"),
    (_file({"$a": ["<f8", [5], 0, 32]}, b"\0" * 32), "does not fill its 32 bytes"),
    (_file({"$a": ["|O", [1], [{"$o": ["tests.engine.test_codec:Point", {"$m": {"x": 1}}]}]]}), "not plain text"),
    (_file({"$a": ["|O8", [1], 0, 8]}, b"\0" * 8), "Python objects"),
    (_file({"$a": ["|T", [2], 0, 3, 64, 16]}, b"abc" + b"\0" * 61 + np.array([1, 1], "<i8").tobytes()),
     "lengths do not add up to its 3 characters"),
    (_file({"$a": ["|T", [2], 0, 3, 64, 16]}, b"abc" + b"\0" * 61 + np.array([4, -1], "<i8").tobytes()),
     "lengths do not add up"),
    (_file({"$a": ["|T", [3], 0, 3, 64, 16]}, b"abc" + b"\0" * 61 + np.array([1, 2], "<i8").tobytes()),
     "16 bytes of lengths, not 24"),
    (_file({"$a": ["|T", [1], 0, 2, 64, 8]}, b"\xff\xfe" + b"\0" * 62 + np.array([2], "<i8").tobytes()),
     "not UTF-8"),
    (_file({"$a": ["|T", [1], 0, 2, 4096, 8]}, b"ab"), "outside the file"),
    (_file({"$a": [{"x": 1}, [1], 0, 8]}, b"\0" * 8), "unknown dtype"),
    (_file({"$q": 1}), "unknown or malformed entry '\\$q'"),
    (_file({"$m": {"a": {"$F": [1, 0]}}}), "malformed entry '\\$F'"),
    (_file({"$dt": "yesterday"}), "malformed \\$dt value"),
    (_file({"$d": [[[1], 2]]}), "not hashable"),
    (_file({"a": 1, "b": 2}), "not a tagged value"),
])
def test_a_crafted_or_damaged_file_is_refused_naming_what_was_wrong(blob, match):
    with pytest.raises(PersistenceError, match=match):
        codec.loads(blob, "round-000001.data")


def test_deep_nesting_is_refused_on_both_sides():
    deep: list = []
    for _ in range(codec.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(TypeError, match="nested deeper"):
        codec.dumps(deep)
    header = "[" * (codec.MAX_DEPTH + 5) + "]" * (codec.MAX_DEPTH + 5)
    with pytest.raises(PersistenceError, match="nested deeper"):
        codec.loads(_file(header.encode()))


def test_files_are_written_atomically_and_errors_name_the_file(tmp_path):
    path = tmp_path / "state.data"
    codec.write(path, {"a": np.arange(3)})
    assert codec.read(path)["a"].tolist() == [0, 1, 2]
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(PersistenceError, match=re.escape(str(path))):
        codec.read(path)
    with pytest.raises(PersistenceError, match="unreadable"):
        codec.read(tmp_path / "missing.data")


# The two unpickles the engine does, and why neither reads a file: ForecastContext.__reduce__ nests the context's
# state as bytes inside the pickle stream of a run's method (what Ray ships to a worker), decoded only where the
# process does not hold the context yet; those bytes exist only inside a stream that is itself being unpickled. A
# store owner unpickles the run's method that the driver pickled and passed in the call (StoreOwner.load): what Ray
# unpickled from the same call before, as its argument, with read-only arrays to deep-copy.
NESTED_PICKLE = {"engine/forecast/round_methods.py: pickle\\.loads?\\(": 1,
                 "cluster/store_actors.py: pickle\\.loads?\\(": 1}


def test_no_pickle_is_read_anywhere_in_the_engine():
    """No resume path (or any other) unpickles: a checkpoint, state or experience file is data."""
    root = Path(__file__).resolve().parents[2]
    hits = []
    for pkg in ("engine", "cluster", "kernels"):
        for f in (root / pkg).rglob("*.py"):
            text = f.read_text()
            for pat in (r"pickle\.loads?\(", r"allow_pickle\s*=\s*True", r"\bUnpickler\b", r"\bdill\b", r"joblib\.load"):
                hits += [f"{f.relative_to(root)}: {pat}" for _ in re.finditer(pat, text)]
    counts = {h: hits.count(h) for h in hits}
    assert counts == NESTED_PICKLE, counts
