"""Record then strict replay through an Arrow trace."""

import os

import pyarrow as pa
import pytest

from engine.errors import BackendError, InputError, PersistenceError
from engine.game24 import prompts as P
from engine.llm.base import Completion, Request, Response
from engine.llm.replay import SCHEMA, ReplayBackend, trace_key
from engine.game24.simulated_policy import simulated_backend


def _reqs():
    return [
        Request(prompt=P.propose_prompt("4 9 10 13"), n=2, seed=1),
        Request(prompt=P.value_prompt("4 4 10"), n=3, seed=2, temperature=0.5),
        Request(messages=[{"role": "user", "content": P.propose_prompt("1 1 4 6")}], stop=["\n"]),
    ]


class Counting:
    def __init__(self, inner):
        self.inner, self.name, self.model, self.calls = inner, inner.name, inner.model, 0

    def generate(self, reqs):
        self.calls += len(reqs)
        return self.inner.generate(reqs)


def test_record_then_strict_replay_is_identical(tmp_path):
    path = tmp_path / "trace.arrow"
    live = Counting(simulated_backend(seed=3))
    rec = ReplayBackend(path, mode="passthrough", inner=live)
    first = rec.generate(_reqs())
    assert live.calls == 3 and path.exists() and len(rec) == 2 + 3 + 1
    again = rec.generate(_reqs())  # served from the trace
    assert live.calls == 3 and again == first
    replay = ReplayBackend(path, mode="strict")
    assert replay.backend_name == "simulated" and replay.model == live.model
    out = replay.generate(_reqs())
    assert out == first
    assert [r.backend for r in out] == ["simulated"] * 3
    # fewer samples than recorded is a hit too
    fewer = replay.generate([Request(prompt=P.value_prompt("4 4 10"), n=2, seed=2, temperature=0.5)])
    assert fewer[0].texts == first[1].texts[:2]


def test_strict_miss_names_the_key(tmp_path):
    path = tmp_path / "trace.arrow"
    ReplayBackend(path, mode="passthrough", inner=simulated_backend()).generate(_reqs()[:1])
    replay = ReplayBackend(path, mode="strict")
    miss = Request(prompt=P.propose_prompt("4 9 10 13"), n=2, seed=2)  # other seed
    key = trace_key("simulated", replay.model, miss, 0)
    with pytest.raises(BackendError, match=f"replay miss .*key {key}"):
        replay.generate([_reqs()[0], miss])


def test_failed_batch_records_nothing(tmp_path):
    path = tmp_path / "trace.arrow"

    class Broken:
        name, model = "openai", "m"

        def generate(self, reqs):
            raise BackendError("server down")

    class ErrorCompletion:
        name, model = "openai", "m"

        def generate(self, reqs):
            return [Response((Completion("", 0, "error"),), 1, 0.1, "openai", "m") for _ in reqs]

    rec = ReplayBackend(path, mode="passthrough", inner=Broken())
    with pytest.raises(BackendError, match="server down"):
        rec.generate(_reqs()[:1])
    assert not path.exists() and len(rec) == 0
    rec2 = ReplayBackend(path, mode="passthrough", inner=ErrorCompletion())
    out = rec2.generate(_reqs()[:1] + [Request(prompt="q")])
    assert out[0].completions[0].finish_reason == "error"
    assert len(rec2) == 0 and not path.exists()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_bad_traces_and_modes(tmp_path):
    with pytest.raises(PersistenceError, match="does not exist"):
        ReplayBackend(tmp_path / "missing.arrow")
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"not arrow at all")
    with pytest.raises(PersistenceError, match="not a readable Arrow file"):
        ReplayBackend(junk)
    other = tmp_path / "other.arrow"
    with pa.OSFile(str(other), "wb") as fh, pa.ipc.new_file(fh, pa.schema([("x", pa.int64())])) as w:
        w.write_table(pa.table({"x": [1]}))
    with pytest.raises(PersistenceError, match="lacks column"):
        ReplayBackend(other)
    with pytest.raises(InputError, match="passthrough' needs the wrapped backend"):
        ReplayBackend(tmp_path / "x.arrow", mode="passthrough")
    with pytest.raises(InputError, match="mode must be"):
        ReplayBackend(tmp_path / "x.arrow", mode="record")
    # a trace with two models needs the model named
    path = tmp_path / "two.arrow"
    a = simulated_backend(model="sim-a")
    b = simulated_backend(model="sim-b")
    ReplayBackend(path, mode="passthrough", inner=a).generate(_reqs()[:1])
    ReplayBackend(path, mode="passthrough", inner=b).generate(_reqs()[:1])
    with pytest.raises(InputError, match="holds 2 models"):
        ReplayBackend(path)
    assert ReplayBackend(path, model="sim-b").generate(_reqs()[:1])[0].model == "sim-b"
    assert pa.ipc.open_file(str(path)).schema.equals(SCHEMA)
