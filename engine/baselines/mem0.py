"""Mem0 on the REAL ``mem0ai`` library (extra ``baselines``): its own pipeline and prompts, offline.

Source: P. Chhikara et al., "Mem0: Building Production-Ready AI Agents with
Scalable Long-Term Memory", arXiv:2504.19413; library ``mem0ai`` 2.2.1, the
open-source ``mem0.Memory`` (``mem0/memory/main.py``).

How the library is wired here (no network, no API key, no telemetry):

* ``MEM0_TELEMETRY=False`` (set before mem0 is imported; checked after) and
  ``MEM0_DIR`` pointed at a private temporary folder when unset;
* vector store (``vector_store``): mem0's ``faiss`` provider (its ``FAISS`` class, exact
  ``IndexFlatIP`` search, ``distance_strategy="cosine"``) held in memory: its ``_save``, which
  rewrites the whole index and a JSON dump of every payload to disk on each insert (O(n) per
  ``add``), is turned off (:func:`in_memory_faiss`); search, insert, filters and listing are the
  library's. ``"qdrant"``: mem0's ``qdrant`` provider on ``QdrantClient(":memory:")``, whose local
  mode filters every stored point in Python on each search (O(n) per ``add``; measured in
  benchmarks/results/finance.md, "Mem0: library store vs arrays store"). Both score by cosine, so the same memories come back;
  history (and the session's recent messages): SQLite ``:memory:``;
* the engine's embedder and LLM are plugged in through the library's provider
  interfaces: :class:`EngineEmbedder` is a ``mem0.embeddings.base.EmbeddingBase``,
  :class:`EngineLLM` a ``mem0.llms.base.LLMBase`` with the library's own
  ``BaseLlmConfig`` (its defaults: temperature 0.1, top_p 0.1, max_tokens 2,000).
* ``Memory.add`` calls its LLM synchronously, one request per add; the engine
  batches a round's requests and writes at the round barrier. So ``add`` runs
  twice per episode, both times the library's own code:

  1. in ``observe`` (worker side) on a scratch ``Memory`` loaded with the
     snapshot (memories with their payloads, and the session's last messages):
     ``add`` builds its messages itself (``ADDITIVE_EXTRACTION_PROMPT`` +
     ``AGENT_CONTEXT_SUFFIX``; existing memories, the last 10 session messages and
     the new messages) and calls ``EngineLLM.generate_response(messages,
     response_format={"type": "json_object"})``, which records the call and stops
     it (nothing is written). The recorded calls of the round go to the engine's
     LLM as ONE batch, with the library's ``max_tokens``/``temperature``/``top_p`` and
     JSON mode as a ``mem0_extraction`` JSON-schema constraint (the output format
     the library's prompt specifies);
  2. in ``apply``, on the live store, ``add`` runs again and its LLM call is
     answered with that completion, so mem0's parsing, MD5-hash de-duplication,
     embedding, storage and session history run unchanged.

  Within one round every episode's prompt is built from the round-start snapshot
  (the round contract of engine/rounds.py); an add in apply that would have built
  a different prompt (an earlier episode of the same round changed the store) is
  counted in ``Mem0Memory.stale_prompts``.
  The forecasting evidence layer (engine/forecast/evidence_memory.py) captures the
  same way on the question's live store (``Mem0Memory.library_call``; one mechanism,
  :func:`capture_add`) and sets the prompt's dates to the question's cutoff (:func:`dated`).
* retrieval reads the snapshot (memory ids, texts and vectors exported from
  the library with ``get_all``): cosine top candidates, then mem0's own
  ``score_and_rank`` with its default ``threshold`` 0.1 and ``top_k``. With no
  BM25 (``fastembed``) and no entity store (spaCy) installed, this equals
  ``Memory.search`` on the live store (tested), and it works from arrays alone.

mem0ai 2.x performs additive (ADD-only) extraction with hash de-duplication;
the paper's v1 pipeline (ADD/UPDATE/DELETE/NOOP decided by a second LLM call)
is no longer what the library runs. We use what the library does.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines.common import (
    Hit,
    Outcome,
    cosine_scores,
    first_text,
    one_line,
    parse_json,
    resolve_extraction,
    str_array,
    texts_of,
    top_k,
)
from engine.config import check
from engine.errors import BackendError, InputError, MissingExtraError, StoreError
from engine.llm.base import LLMBackend, Request
from engine.llm.structured import Constraint
from engine.rounds import request_seed

# JSON mode: the output format ADDITIVE_EXTRACTION_PROMPT specifies ("# OUTPUT FORMAT"), as a strict schema
# (every field required; linked_memory_ids may be []). mem0 itself sends response_format={"type": "json_object"}.
MEM0_EXTRACTION = Constraint(
    "mem0_extraction",
    schema_json=json.dumps({
        "type": "object",
        "properties": {"memory": {"type": "array", "items": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "text": {"type": "string"}, "attributed_to": {"type": "string"},
                           "linked_memory_ids": {"type": "array", "items": {"type": "string"}}},
            "required": ["id", "text", "attributed_to", "linked_memory_ids"], "additionalProperties": False}}},
        "required": ["memory"], "additionalProperties": False,
    }, sort_keys=True),
)
SESSION_LIMIT = 10  # Memory._add_to_vector_store: db.get_last_messages(session_scope, limit=10)
VECTOR_STORES = ("faiss", "qdrant")


@codec.data
@dataclass(frozen=True)
class Mem0Config:
    """Mem0 parameters: search ``top_k``/``threshold`` (library default 0.1) and the library's LLM settings."""

    top_k: int = 5
    threshold: float = 0.1  # mem0 Memory.search default
    agent_id: str = "toe-baseline"
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 2000  # mem0 BaseLlmConfig defaults, what the library's own providers send
    temperature: float = 0.1
    top_p: float = 0.1
    vector_store: str = "faiss"  # mem0 provider: "faiss" (in memory) | "qdrant" (":memory:"); see the module docstring

    def __post_init__(self):
        check(self.top_k >= 1, f"mem0.top_k must be >= 1, got {self.top_k}")
        check(0.0 <= self.threshold <= 1.0, f"mem0.threshold must be in [0, 1], got {self.threshold}")
        check(bool(self.agent_id.strip()), "mem0.agent_id must be a non-empty string")
        check(self.extraction in ("auto", "llm", "rule"), f"mem0.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"mem0.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"mem0.temperature must be in [0, 5], got {self.temperature}")
        check(0.0 < self.top_p <= 1.0, f"mem0.top_p must be in (0, 1], got {self.top_p}")
        check(self.vector_store in VECTOR_STORES, f"mem0.vector_store must be one of {', '.join(VECTOR_STORES)}, got {self.vector_store!r}")


_IMPORT_LOCK = threading.Lock()


def import_mem0():
    """Import ``mem0`` offline: telemetry off, private MEM0_DIR; raises MissingExtraError without it."""
    with _IMPORT_LOCK:
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ.setdefault("MEM0_DIR", os.path.join(tempfile.gettempdir(), f"toe-mem0-{os.getuid()}"))
        try:
            import mem0  # noqa: F401
            from mem0.memory import telemetry
        except ImportError as exc:
            raise MissingExtraError("mem0ai", "baselines") from exc
        if telemetry.MEM0_TELEMETRY:  # imported earlier with telemetry on: switch it off for this process
            telemetry.MEM0_TELEMETRY = False
            try:
                from mem0.memory import main as _main

                _main.MEM0_TELEMETRY = False
            except ImportError:  # pragma: no cover
                pass
        for name in ("mem0", "mem0.memory", "mem0.utils", "mem0.vector_stores"):
            logging.getLogger(name).setLevel(logging.ERROR)
        return mem0


class _Captured(Exception):
    """Raised by :class:`EngineLLM` in capture mode to stop ``Memory.add`` at its LLM call."""


def _provider_classes():
    """``EngineEmbedder`` and ``EngineLLM``: the engine's embedder and LLM as mem0 providers (built once)."""
    global _PROVIDERS
    if _PROVIDERS is not None:
        return _PROVIDERS
    import_mem0()
    from mem0.embeddings.base import EmbeddingBase
    from mem0.llms.base import LLMBase

    class EngineEmbedder(EmbeddingBase):
        """The engine's embedder behind mem0's ``EmbeddingBase`` (``embed``, ``embed_batch``)."""

        def __init__(self, embedder, config=None):
            super().__init__(config)
            self.embedder = embedder

        def embed(self, text, memory_action=None):
            return self.embedder.embed([str(text)])[0].tolist()

        def embed_batch(self, texts, memory_action="add"):
            return [v.tolist() for v in self.embedder.embed([str(t) for t in texts])]

    class EngineLLM(LLMBase):
        """mem0's ``LLMBase`` over the engine's batched interface.

        ``capture`` mode records the library's call (messages, response_format) and stops ``add`` there;
        ``replay`` mode answers with the completion the engine's LLM gave for it (observe, one batch).
        """

        def __init__(self, config):
            super().__init__(config)
            self.mode = "replay"
            self.captured: list[tuple[list[dict], dict | None]] = []
            self.queue: list[str] = []
            self.expected: list[str] = []
            self.stale = 0

        def generate_response(self, messages, response_format=None, tools=None, tool_choice="auto", **kwargs):
            if self.mode == "capture":
                self.captured.append(([dict(m) for m in messages], response_format))
                raise _Captured()
            if not self.queue:
                raise BackendError("mem0 asked its LLM for more completions than observe() prepared")
            want = self.expected.pop(0) if self.expected else None
            if want is not None and want != prompt_digest(messages):
                self.stale += 1
            return self.queue.pop(0)

    _PROVIDERS = (EngineEmbedder, EngineLLM)
    return _PROVIDERS


_PROVIDERS = None


_DATE_LINE = re.compile(r"\d{4}-\d{2}-\d{2}")
# generate_additive_extraction_prompt's date sections (mem0/configs/prompts.py): "## <name>\n<YYYY-MM-DD>"
_DATE_SECTIONS = re.compile(r"(?m)^(## (?:Observation Date|Current Date)\n)\d{4}-\d{2}-\d{2}$")


def prompt_digest(messages) -> str:
    """A digest of mem0's messages without its date lines (which change with the calendar day)."""
    text = "\x1f".join(f"{m.get('role')}:{m.get('content')}" for m in messages)
    text = "\n".join(line for line in text.split("\n") if not _DATE_LINE.fullmatch(line))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def dated(messages: Sequence[dict], day: str) -> list[dict]:
    """mem0's captured messages with the prompt's dates (``## Observation Date``, ``## Current Date``, both
    today's by default: ``_resolve_dates``) set to ``day`` (``YYYY-MM-DD``); raises BackendError when the
    library's prompt has no such sections (a mem0 version whose prompt differs)."""
    if not _DATE_LINE.fullmatch(day):
        raise InputError(f"mem0 prompt date must be YYYY-MM-DD, got {day!r}")
    out, found = [], 0
    for m in messages:
        m = dict(m)
        if m.get("role") == "user":
            m["content"], n = _DATE_SECTIONS.subn(lambda g: g.group(1) + day, str(m.get("content", "")))
            found += n
        out.append(m)
    if found != 2:
        raise BackendError(f"mem0's extraction prompt has {found} date sections (## Observation Date, ## Current Date); expected 2")
    return out


def capture_add(memory, messages: Sequence[dict], agent_id: str) -> tuple[list[dict], dict | None]:
    """The messages and response_format the library's own ``Memory.add(messages, agent_id=..., infer=True)``
    sends its LLM on ``memory`` (an offline ``Memory`` from :func:`build_memory`).

    ``EngineLLM`` in capture mode records the call and stops ``add`` there. ``_add_to_vector_store`` writes
    nothing before its LLM call (it reads the session's last messages and searches the existing memories),
    so ``memory`` is left as it was.
    """
    from mem0.exceptions import LLMError

    llm = memory.llm
    llm.mode, llm.captured = "capture", []
    log = logging.getLogger("mem0.memory.main")
    level, log.level = log.level, logging.CRITICAL  # the stop is ours: mem0 would log it as a failed extraction
    try:
        memory.add([dict(m) for m in messages], agent_id=agent_id, infer=True)
    except (LLMError, _Captured):
        pass
    finally:
        llm.mode = "replay"
        log.setLevel(level)
    captured, llm.captured = llm.captured, []
    if len(captured) != 1:
        raise BackendError(f"mem0's add() made {len(captured)} LLM calls for one add; expected 1")
    return captured[0]


def extraction_request(call: tuple[Sequence[dict], dict | None], cfg: "Mem0Config", *, seed: int, episode: str) -> Request:
    """The engine request for a captured library call: its messages, the library's ``max_tokens``/``temperature``/
    ``top_p`` (``BaseLlmConfig``), and JSON mode as the ``mem0_extraction`` constraint when mem0 asked for it."""
    messages, fmt = call
    json_mode = isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")
    return Request(messages=tuple(dict(m) for m in messages), max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                   top_p=cfg.top_p, seed=seed, episode=episode, constraint=MEM0_EXTRACTION if json_mode else None)


def llm_config(cfg: Mem0Config):
    from mem0.configs.llms.base import BaseLlmConfig

    return BaseLlmConfig(model="toe-engine", temperature=cfg.temperature, max_tokens=cfg.max_tokens, top_p=cfg.top_p)


_FAISS_CLASS = None


def in_memory_faiss(collection_name: str, dim: int, path: str):
    """mem0's own ``FAISS`` vector store (cosine) with its per-insert disk persistence turned off.

    ``FAISS._save`` rewrites the index file and a JSON dump of every payload after each insert,
    update and delete: O(n) per ``add`` (60 trading days of the finance stream spent 27 of 32 s
    there). Nothing here reads those files back, so the subclass keeps the store in memory only;
    every other method is the library's.
    """
    return _faiss_class()(collection_name=collection_name, path=path, distance_strategy="cosine", embedding_model_dims=int(dim))


def _faiss_class():
    global _FAISS_CLASS
    if _FAISS_CLASS is None:
        import_mem0()
        try:
            from mem0.vector_stores.faiss import FAISS
        except ImportError as exc:
            raise MissingExtraError("faiss-cpu", "baselines") from exc

        class InMemoryFAISS(FAISS):
            def _save(self):  # persistence off; see in_memory_faiss
                return None

        _FAISS_CLASS = InMemoryFAISS
    return _FAISS_CLASS


def build_memory(embedder, cfg: Mem0Config):
    """A fresh offline ``mem0.Memory`` with the engine's embedder, LLM and (faiss) vector store as its providers."""
    import_mem0()
    from mem0 import Memory
    from mem0.configs.base import MemoryConfig

    EngineEmbedder, EngineLLM = _provider_classes()
    dim, name = int(embedder.dim), "toe_mem0"
    scratch_dir = None
    if cfg.vector_store == "faiss":
        _faiss_class()  # fails here, naming the extra, when faiss is missing
        # mem0 builds its own FAISS at init and writes an empty index under `path`: a private folder, removed below
        scratch_dir = tempfile.mkdtemp(prefix="toe-mem0-")
        store = {"provider": "faiss", "config": {"collection_name": name, "embedding_model_dims": dim,
                                                 "distance_strategy": "cosine", "path": os.path.join(scratch_dir, name)}}
    else:
        from qdrant_client import QdrantClient

        store = {"provider": "qdrant", "config": {"collection_name": name, "embedding_model_dims": dim, "client": QdrantClient(":memory:")}}
    mc = MemoryConfig(
        vector_store=store,
        # Placeholders: mem0 builds these clients at init without network; both are replaced below.
        llm={"provider": "openai", "config": {"api_key": "offline", "model": "replay"}},
        embedder={"provider": "openai", "config": {"api_key": "offline", "embedding_dims": dim}},
        history_db_path=":memory:",
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            memory = Memory(mc)
        if scratch_dir is not None:
            memory.vector_store = in_memory_faiss(name, dim, os.path.join(scratch_dir, "live", name))
    finally:
        if scratch_dir is not None:
            shutil.rmtree(scratch_dir, ignore_errors=True)
    memory.embedding_model = EngineEmbedder(embedder)
    memory.llm = EngineLLM(llm_config(cfg))
    return memory


def session_scope(agent_id: str) -> str:
    from mem0.memory.main import _build_session_scope

    return _build_session_scope({"agent_id": agent_id})


def load_records(memory, embedder, payloads: Sequence[dict], ids: Sequence[str], session: Sequence[tuple[str, str]], scope: str,
                 vectors: np.ndarray | None = None):
    """Put stored memories (with their payloads; ``vectors f4[n, dim]`` if known, else embedded) and the session's messages into a fresh ``Memory``."""
    if payloads:
        vecs = embedder.embed([p["data"] for p in payloads]) if vectors is None else vectors
        memory.vector_store.insert(vectors=[v.tolist() for v in vecs], payloads=[dict(p) for p in payloads], ids=list(ids))
    for role, content in session:  # one at a time: created_at increases, so get_last_messages keeps the order
        memory.db.save_messages([{"role": role, "content": content}], scope)


def conversation(outcome: Outcome) -> list[dict]:
    """The episode as chat messages for mem0: the task, the attempt and its result."""
    attempt = (outcome.successes or list(outcome.attempts) or [None])[0]
    text = attempt.text if attempt is not None else "(no attempt)"
    result = "solved" if outcome.success else "not solved"
    return [
        {"role": "user", "content": f"Task: {outcome.task}"},
        {"role": "assistant", "content": f"{text}\nResult: {result}"},
    ]


def rule_extraction(outcome: Outcome) -> str:
    """Rule-based completion in mem0's output format (no LLM)."""
    attempt = (outcome.successes or list(outcome.attempts) or [None])[0]
    text = one_line(attempt.text) if attempt is not None else "(no attempt)"
    verdict = "solved it" if outcome.success else "did not solve it"
    return json.dumps({"memory": [{"id": "0", "text": f"For the task {outcome.task}, the approach '{text}' {verdict}.",
                                   "attributed_to": "assistant", "linked_memory_ids": []}]})


def valid_extraction(text: str) -> bool:
    """Whether a completion parses as mem0's ``{"memory": [{"text": ...}, ...]}``."""
    data = parse_json(text)
    return isinstance(data, dict) and isinstance(data.get("memory"), list)


@codec.data(context=("embedder",))
class Mem0Memory:
    """Experience stored and searched by the real mem0 library; see the module docstring."""

    name = "mem0"

    def __init__(self, config: Mem0Config | None = None, *, embedder):
        self.config = config or Mem0Config()
        self.embedder = embedder
        self._int_ids: dict[str, int] = {}
        self.version = 0
        self.stale_prompts = 0
        self.memory = build_memory(self.embedder, self.config)
        # the snapshot's rows, appended from what each add() reports (mem0 2.x only adds): one O(k) step per
        # round for k new memories instead of re-exporting all n (get_all + list + re-embedding: O(n) per round)
        self._rows: dict[str, list] = {"id": [], "mem0_id": [], "memory": [], "payload": []}
        self._vecs = np.zeros((0, int(embedder.dim)), dtype=np.float32)
        self._snap: dict[str, np.ndarray] | None = None

    def __getstate__(self):
        """Pickle (checkpoints, Ray): the library's live objects are replaced by the stored records."""
        state = dict(self.__dict__)
        state["memory"] = None
        if self.memory is not None:
            state["_records"] = self._records()
            state["_session"] = self._session()
        return state

    def __setstate__(self, state):
        records = state.pop("_records", None)
        session = state.pop("_session", [])
        self.__dict__.update(state)
        if records is not None:
            self.memory = build_memory(self.embedder, self.config)
            ids, payloads = (zip(*records) if records else ((), ()))
            load_records(self.memory, self.embedder, list(payloads), list(ids), session, session_scope(self.config.agent_id))
            if "_rows" not in state:  # pickled before the snapshot's rows were kept: rebuild them from the store
                snap = self.export()
                self._rows = {k: snap[k].tolist() for k in ("id", "mem0_id", "memory", "payload")}
                self._vecs, self._snap = snap["embedding"], None

    def _records(self) -> list[tuple[str, dict]]:
        """``(mem0 id, payload)`` of every stored memory, as mem0's vector store holds them."""
        from mem0.memory.main import _vector_store_list_rows

        listed = self.memory.vector_store.list(filters={"agent_id": self.config.agent_id}, top_k=1 << 30)
        return sorted(((str(r.id), dict(r.payload)) for r in _vector_store_list_rows(listed)), key=lambda rec: rec[0])

    def _session(self) -> list[tuple[str, str]]:
        """The session's last messages, oldest first, as ``add`` reads them."""
        rows = self._live().db.get_last_messages(session_scope(self.config.agent_id), limit=SESSION_LIMIT)
        return [(str(r["role"]), str(r["content"])) for r in rows]

    def _live(self):
        if self.memory is None:
            raise StoreError("this Mem0Memory has no live mem0 store")
        return self.memory

    def all_memories(self) -> list[dict]:
        """Every memory mem0 holds for our agent id, oldest first (mem0's ``get_all``)."""
        res = self._live().get_all(filters={"agent_id": self.config.agent_id}, top_k=1 << 30)["results"]
        for item in sorted(res, key=lambda r: (r.get("created_at") or "", r["id"])):
            self._int_ids.setdefault(item["id"], len(self._int_ids))
        return sorted(res, key=lambda r: self._int_ids[r["id"]])

    def snapshot(self) -> dict[str, np.ndarray]:
        """The round's snapshot (see :meth:`export`), kept up to date by :meth:`apply` from mem0's add results."""
        if self._snap is not None and int(self._snap["version"][0]) == self.version:
            return self._snap
        session = self._session()
        r = self._rows
        self._snap = {
            "id": np.asarray(r["id"], dtype=np.int64),
            "mem0_id": str_array(r["mem0_id"]),
            "memory": str_array(r["memory"]),
            "payload": str_array(r["payload"]),
            "embedding": self._vecs,
            "session_role": str_array(x for x, _ in session),
            "session_content": str_array(c for _, c in session),
            "version": np.array([self.version], dtype=np.int64),
        }
        return self._snap

    def _append_rows(self, mem0_ids: Sequence[str]) -> None:
        """Add the memories ``add`` just stored to the snapshot's rows, read back from the vector store."""
        if not mem0_ids:
            return
        store = self._live().vector_store
        texts = []
        for mid in mem0_ids:
            got = store.get(vector_id=mid)
            if got is None or got.payload is None:
                raise StoreError(f"mem0 reported memory {mid!r} as added but its vector store does not hold it")
            payload = dict(got.payload)
            texts.append(payload.get("data", ""))
            self._rows["id"].append(self._int_ids[mid])
            self._rows["mem0_id"].append(mid)
            self._rows["payload"].append(json.dumps(payload, sort_keys=True))
        self._rows["memory"].extend(texts)
        self._vecs = np.concatenate([self._vecs, np.asarray(self.embedder.embed(texts), dtype=np.float32)])

    def export(self) -> dict[str, np.ndarray]:
        """The snapshot rebuilt from the library's store (``get_all`` and the vector store's ``list``): O(n)."""
        items = self.all_memories()
        payloads = dict(self._records())
        texts = [r["memory"] for r in items]
        vecs = self.embedder.embed(texts) if texts else np.zeros((0, self.embedder.dim), np.float32)
        session = self._session()
        return {
            "id": np.array([self._int_ids[r["id"]] for r in items], dtype=np.int64),
            "mem0_id": str_array(r["id"] for r in items),
            "memory": str_array(texts),
            "payload": str_array(json.dumps(payloads[r["id"]], sort_keys=True) for r in items),
            "embedding": vecs,
            "session_role": str_array(r for r, _ in session),
            "session_content": str_array(c for _, c in session),
            "version": np.array([self.version], dtype=np.int64),
        }

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "Mem0Reader":
        return Mem0Reader(self.config, self.embedder, snapshot)

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """``Memory.add(messages, infer=True)`` per episode, in order, its LLM call answered with the prepared completion."""
        memory = self._live()
        added: list[str] = []
        for u in updates:
            if not u:
                continue
            roles, contents = texts_of(u["role"]), texts_of(u["content"])
            completion = texts_of(u["completion"])
            if len(roles) != len(contents) or len(completion) != 1:
                raise InputError(f"mem0 update needs equal role/content lists and one completion, got {len(roles)}, {len(contents)}, {len(completion)}")
            memory.llm.mode = "replay"
            memory.llm.queue = list(completion)
            memory.llm.expected = texts_of(u.get("digest"))
            before = memory.llm.stale
            result = memory.add([{"role": r, "content": c} for r, c in zip(roles, contents)], agent_id=self.config.agent_id, infer=True)
            self.stale_prompts += memory.llm.stale - before
            memory.llm.queue, memory.llm.expected = [], []
            for item in result.get("results", []):  # int ids in the deterministic order mem0 reports additions
                mid = str(item["id"])
                if mid not in self._int_ids and item.get("event", "ADD") == "ADD":
                    self._int_ids[mid] = len(self._int_ids)
                    added.append(mid)
        self._append_rows(added)
        self.version += 1

    def library_call(self, messages: Sequence[dict]) -> tuple[list[dict], dict | None]:
        """The messages and response_format mem0's own ``add(messages)`` sends its LLM on the live store, as it
        holds every add so far (nothing is written; :func:`capture_add`)."""
        return capture_add(self._live(), messages, self.config.agent_id)

    def search_live(self, query: str) -> list[Hit]:
        """``Memory.search`` on the live store (for checks; workers use :meth:`Mem0Reader.retrieve`)."""
        self.all_memories()
        res = self._live().search(query, filters={"agent_id": self.config.agent_id}, top_k=self.config.top_k, threshold=self.config.threshold)
        return [Hit(self._int_ids[r["id"]], r["memory"], float(r["score"])) for r in res["results"]]


class Mem0Reader:
    """Read-only mem0 retrieval over a snapshot (mem0's ``score_and_rank``) and extraction prompts (mem0's ``add``)."""

    def __init__(self, config: Mem0Config, embedder, snapshot: Mapping[str, np.ndarray]):
        missing = [k for k in ("id", "mem0_id", "memory", "embedding") if k not in snapshot]
        if missing:
            raise InputError(f"snapshot lacks {missing}; was it made by Mem0Memory.snapshot()?")
        self.config = config
        self.embedder = embedder
        self.id = np.asarray(snapshot["id"], dtype=np.int64)
        self.mem0_id = texts_of(snapshot["mem0_id"])
        self.memory = texts_of(snapshot["memory"])
        self.embedding = np.asarray(snapshot["embedding"], dtype=np.float32)
        if self.embedding.shape != (len(self.memory), embedder.dim):
            raise InputError(f"snapshot embedding must have shape ({len(self.memory)}, {embedder.dim}), got {self.embedding.shape}")
        self._payload_json = texts_of(snapshot["payload"]) if "payload" in snapshot else None
        self.session = list(zip(texts_of(snapshot.get("session_role")), texts_of(snapshot.get("session_content"))))
        self._scratch = None

    @property
    def payloads(self) -> list[dict]:
        """The memories' payloads as mem0 stores them (parsed when a scratch store needs them)."""
        if self._payload_json is not None:
            return [json.loads(p) for p in self._payload_json]
        # a snapshot of texts only (an array store): the payload fields add() reads
        return [{"data": t, "hash": hashlib.md5(t.encode()).hexdigest(), "agent_id": self.config.agent_id} for t in self.memory]

    def _candidates(self, scores: np.ndarray, k: int) -> list[int]:
        return [int(r) for r in top_k(scores.astype(np.float64), k)]

    def retrieve(self, tasks: Sequence[str]) -> list[list[Hit]]:
        if not tasks:
            return []
        if not self.memory:
            return [[] for _ in tasks]
        import_mem0()
        from mem0.utils.scoring import score_and_rank

        cfg = self.config
        sims = cosine_scores(self.embedding, self.embedder.embed(list(tasks)))
        internal = max(cfg.top_k * 4, 60)  # mem0's over-fetch in _search_vector_store
        out = []
        for s in sims:
            rows = self._candidates(s, internal)
            cands = [{"id": self.mem0_id[r], "score": float(s[r]), "payload": {"data": self.memory[r], "row": r}} for r in rows]
            ranked = score_and_rank(semantic_results=cands, bm25_scores={}, entity_boosts={}, threshold=cfg.threshold, top_k=cfg.top_k)
            out.append([Hit(int(self.id[c["payload"]["row"]]), self.memory[c["payload"]["row"]], float(c["score"])) for c in ranked])
        return out

    @staticmethod
    def format(hits: Sequence[Hit]) -> str:
        if not hits:
            return ""
        return "\n".join(f"- {h.text}" for h in hits)

    def _scratch_memory(self):
        """A ``mem0.Memory`` holding exactly the snapshot (memories with payloads, session messages)."""
        if self._scratch is None:
            self._scratch = build_memory(self.embedder, self.config)
            load_records(self._scratch, self.embedder, self.payloads, self.mem0_id, self.session, session_scope(self.config.agent_id),
                         vectors=self.embedding)  # the snapshot's vectors: the texts' embeddings, not made again
        return self._scratch

    def library_call(self, messages: Sequence[dict]) -> tuple[list[dict], dict | None]:
        """The messages and response_format mem0's own ``add(messages)`` sends its LLM on the snapshot (nothing is written)."""
        return capture_add(self._scratch_memory(), messages, self.config.agent_id)

    def library_messages(self, outcome: Outcome) -> tuple[list[dict], dict | None]:
        """:meth:`library_call` for an episode's :func:`conversation`."""
        return self.library_call(conversation(outcome))

    def requests(self, outcomes: Sequence[Outcome], mode: str) -> list[list[Request]]:
        if mode == "rule":
            return [[] for _ in outcomes]
        return [[extraction_request(self.library_messages(o), self.config, seed=request_seed(o.seed, "mem0", "extract"), episode=o.key)]
                for o in outcomes]

    def updates(self, outcomes: Sequence[Outcome], completions, mode: str, digests: Sequence[str] = ()) -> list[dict]:
        out = []
        for j, (o, comps) in enumerate(zip(outcomes, completions)):
            text, source = "", "rule"
            if mode == "llm":
                text = first_text(comps[0]) if comps else ""
                source = "llm" if valid_extraction(text) else "rule-fallback"
                if source != "llm":
                    text = ""
            if not text:
                text = rule_extraction(o)
            msgs = conversation(o)
            u = {
                "role": str_array(m["role"] for m in msgs),
                "content": str_array(m["content"] for m in msgs),
                "completion": str_array([text]),
                "source": str_array([source]),
                "retrieved": np.asarray(o.retrieved, dtype=np.int64),
            }
            if j < len(digests):
                u["digest"] = str_array([digests[j]])
            out.append(u)
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        """mem0's own extraction requests for every outcome, as ONE batch; updates for ``apply``."""
        mode = resolve_extraction(self.config.extraction, llm)
        per = self.requests(outcomes, mode)
        flat = [r for rs in per for r in rs]
        try:
            responses = llm.generate(flat) if flat else []
        except BackendError as exc:
            raise BackendError(
                f"mem0's extraction prompt (its ~34,000-character system prompt) was rejected by backend "
                f"{getattr(llm, 'name', '?')!r}: {exc}. With a small-context model set [mem0] extraction = \"rule\" "
                f"or give the model a larger context (llm.local.context)"
            ) from exc
        completions, at = [], 0
        for rs in per:
            completions.append([responses[at + i].texts for i in range(len(rs))])
            at += len(rs)
        digests = [prompt_digest(rs[0].messages) for rs in per] if mode == "llm" else []
        return self.updates(outcomes, completions, mode, digests)
