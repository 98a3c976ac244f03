"""Record and replay LLM completions through an Arrow trace.

Each completion is one row keyed by :func:`trace_key`, a SHA-256 of (backend,
model, prompt or messages, temperature, top_p, max_tokens, stop, seed, sample
index); ``n`` is not part of the key, so a request for fewer samples is served
from a recording with more. Columns: :data:`SCHEMA`.

* ``mode="strict"``: every request must be in the trace; a miss raises
  :class:`~engine.errors.BackendError` naming the missing key, backend, model
  and the start of the prompt. Nothing is called.
* ``mode="passthrough"``: hits come from the trace; misses go to the wrapped
  backend in one batch and are recorded. A batch that raises records nothing;
  a completion with ``finish_reason == "error"`` is never recorded.

The file is rewritten atomically (:func:`engine.atomic_io.atomic_writer`:
temporary file in the same folder, fsync, rename) after every batch that added rows, so it is always a complete
Arrow IPC file. One writer per file: give each worker its own path.

Responses carry the *recorded* backend name and model (text replayed from the
simulated policy still says ``simulated``) and the recorded latency.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.ipc as ipc

from engine import atomic_io
from engine.errors import BackendError, InputError, PersistenceError
from engine.llm.base import Completion, LLMBackend, Request, Response

SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("backend", pa.string()),
        ("model", pa.string()),
        ("prompt", pa.string()),  # the prompt, or the messages as JSON
        ("params", pa.string()),  # JSON of the sampling parameters in the key
        ("sample", pa.int32()),
        ("text", pa.string()),
        ("completion_tokens", pa.int64()),
        ("finish_reason", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("latency_s", pa.float64()),
    ]
)


def _prompt_text(req: Request) -> str:
    if req.prompt is not None:
        return req.prompt
    return json.dumps(list(req.messages), sort_keys=True, ensure_ascii=False)


def _params(req: Request) -> dict:
    params = {
        "chat": req.messages is not None,
        "temperature": float(req.temperature),
        "top_p": float(req.top_p),
        "max_tokens": int(req.max_tokens),
        "stop": list(req.stop),
        "seed": req.seed,
    }
    if req.constraint is not None:  # keys of unconstrained requests are unchanged
        params["constraint"] = req.constraint.key
    return params


def trace_key(backend: str, model: str, req: Request, sample: int) -> str:
    """Hex SHA-256 of (backend, model, prompt, sampling parameters, sample index)."""
    blob = json.dumps(
        {"backend": backend, "model": model, "prompt": _prompt_text(req), "params": _params(req), "sample": sample},
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class ReplayBackend:
    """Replays (strict) or records-and-replays (passthrough) an Arrow trace; ``name = "replay"``."""

    name = "replay"

    def __init__(
        self,
        path: str | os.PathLike,
        mode: str = "strict",
        inner: LLMBackend | None = None,
        backend_name: str | None = None,
        model: str | None = None,
    ):
        if mode not in ("strict", "passthrough"):
            raise InputError(f"replay mode must be 'strict' or 'passthrough', got {mode!r}")
        if mode == "passthrough" and inner is None:
            raise InputError("replay mode 'passthrough' needs the wrapped backend (inner=), got None")
        self.path = Path(path)
        self.mode = mode
        self.inner = inner
        self._lock = threading.Lock()
        self._rows: dict[str, dict] = {}
        self._new: list[dict] = []
        if self.path.exists():
            self._load()
        elif mode == "strict":
            raise PersistenceError(f"replay trace {str(self.path)!r} does not exist (strict mode needs a recorded trace)")
        if inner is not None:
            self.backend_name = inner.name
            self.model = inner.model
        else:
            self.backend_name = backend_name or self._only("backend", None)
            self.model = model if model is not None else self._only("model", self.backend_name)

    # -- trace file -------------------------------------------------------------
    def _load(self) -> None:
        try:
            with pa.memory_map(str(self.path), "r") as src:
                table = ipc.open_file(src).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise PersistenceError(f"replay trace {str(self.path)!r} is not a readable Arrow file: {exc}") from exc
        missing = [f.name for f in SCHEMA if f.name not in table.column_names]
        if missing:
            raise PersistenceError(
                f"replay trace {str(self.path)!r} lacks column(s) {', '.join(missing)}; expected {SCHEMA.names}"
            )
        for row in table.select(SCHEMA.names).to_pylist():
            self._rows[row["key"]] = row

    def _only(self, column: str, backend: str | None) -> str:
        values = sorted({r[column] for r in self._rows.values() if backend is None or r["backend"] == backend})
        if len(values) != 1:
            raise InputError(
                f"replay trace {str(self.path)!r} holds {len(values)} {column}s {values[:10]}; "
                f"name one with llm.{'replay.backend' if column == 'backend' else 'model'}"
            )
        return values[0]

    def flush(self) -> None:
        """Write every row to the trace atomically (no-op when nothing was added)."""
        with self._lock:
            if not self._new:
                return
            table = pa.Table.from_pylist(list(self._rows.values()), schema=SCHEMA)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with atomic_io.atomic_writer(self.path) as fh, ipc.new_file(fh, SCHEMA) as writer:
                writer.write_table(table)
            self._new.clear()

    def __len__(self) -> int:
        return len(self._rows)

    def close(self) -> None:
        self.flush()
        if self.inner is not None and hasattr(self.inner, "close"):
            self.inner.close()

    # -- generate ---------------------------------------------------------------
    def _lookup(self, req: Request) -> Response | None:
        rows = []
        for i in range(req.n):
            row = self._rows.get(trace_key(self.backend_name, self.model, req, i))
            if row is None:
                return None
            rows.append(row)
        return Response(
            completions=tuple(Completion(r["text"], int(r["completion_tokens"]), r["finish_reason"]) for r in rows),
            prompt_tokens=int(rows[0]["prompt_tokens"]),
            latency_s=float(rows[0]["latency_s"]),
            backend=rows[0]["backend"],
            model=rows[0]["model"],
        )

    def generate(self, requests: Sequence[Request]) -> list[Response]:
        requests = list(requests)
        out: list[Response | None] = [self._lookup(r) for r in requests]
        misses = [k for k, resp in enumerate(out) if resp is None]
        if not misses:
            return out  # type: ignore[return-value]
        if self.mode == "strict":
            k = misses[0]
            r = requests[k]
            key = next(
                trace_key(self.backend_name, self.model, r, i)
                for i in range(r.n)
                if trace_key(self.backend_name, self.model, r, i) not in self._rows
            )
            raise BackendError(
                f"replay miss in {str(self.path)!r} (strict mode): key {key} for backend={self.backend_name!r} "
                f"model={self.model!r} request {k} prompt={_prompt_text(r)[:80]!r}; "
                f"{len(misses)} of {len(requests)} request(s) missing"
            )
        fresh = self.inner.generate([requests[k] for k in misses])
        if len(fresh) != len(misses):
            raise BackendError(
                f"wrapped backend {self.inner.name} returned {len(fresh)} responses for {len(misses)} requests"
            )
        rows = []
        for k, resp in zip(misses, fresh):
            out[k] = resp
            r = requests[k]
            if any(c.finish_reason == "error" for c in resp.completions) or len(resp.completions) != r.n:
                continue  # never record a failure as a success
            for i, c in enumerate(resp.completions):
                rows.append(
                    {
                        "key": trace_key(self.backend_name, self.model, r, i),
                        "backend": resp.backend,
                        "model": self.model,
                        "prompt": _prompt_text(r),
                        "params": json.dumps(_params(r), sort_keys=True),
                        "sample": i,
                        "text": c.text,
                        "completion_tokens": int(c.completion_tokens),
                        "finish_reason": c.finish_reason,
                        "prompt_tokens": int(resp.prompt_tokens),
                        "latency_s": float(resp.latency_s),
                    }
                )
        with self._lock:
            for row in rows:
                self._rows.setdefault(row["key"], row)
            self._new.extend(rows)
        self.flush()
        return out  # type: ignore[return-value]
