"""Mem0 on the REAL ``mem0ai`` library (extra ``baselines``), configured fully offline.

Source: P. Chhikara et al., "Mem0: Building Production-Ready AI Agents with
Scalable Long-Term Memory", arXiv:2504.19413; library ``mem0ai`` (tested with
2.2.1, the open-source ``mem0.Memory``).

How the library is wired here (no network, no API key, no telemetry):

* ``MEM0_TELEMETRY=False`` (set before mem0 is imported; checked after) and
  ``MEM0_DIR`` pointed at a private temporary folder when unset;
* vector store: mem0's ``qdrant`` provider on an in-process ``QdrantClient(":memory:")``;
  history: SQLite ``:memory:``;
* embedder: the engine's embedder (:mod:`engine.embed`, e.g. hashing or
  MiniLM), plugged in as mem0's ``embedding_model``;
* LLM: mem0 calls its LLM synchronously, one request per ``add``, which would
  break batching and the round contract. So extraction runs in two halves:
  in ``observe`` (worker side) we build **mem0's own** extraction prompt
  (``ADDITIVE_EXTRACTION_PROMPT`` + ``generate_additive_extraction_prompt``,
  with the snapshot's most similar memories as "existing memories") and send
  it through our batched LLM interface; in ``apply`` we call the library's
  ``Memory.add(messages, infer=True)`` with a replay LLM that returns that
  completion, so mem0's own parsing, hash de-duplication, embedding and
  storage run unchanged. Under the simulated backend the completion is a
  rule-based ``{"memory": [{"text": ...}]}`` (``source = "rule"``).
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

import json
import logging
import os
import tempfile
import threading
import warnings
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.baselines.common import (
    Hit,
    Outcome,
    cosine_scores,
    derive_seed,
    first_text,
    observe_with,
    one_line,
    parse_json,
    str_array,
    texts_of,
    top_k,
)
from engine.config import check
from engine.errors import BackendError, InputError, MissingExtraError, StoreError
from engine.llm.base import LLMBackend, Request


@dataclass(frozen=True)
class Mem0Config:
    """Mem0 parameters: search ``top_k``/``threshold`` (library defaults 0.1), extraction settings."""

    top_k: int = 5
    threshold: float = 0.1  # mem0 Memory.search default
    existing_k: int = 10  # existing memories shown to the extraction prompt (mem0 uses 10)
    agent_id: str = "toe-baseline"
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 512
    temperature: float = 0.0

    def __post_init__(self):
        check(self.top_k >= 1, f"mem0.top_k must be >= 1, got {self.top_k}")
        check(0.0 <= self.threshold <= 1.0, f"mem0.threshold must be in [0, 1], got {self.threshold}")
        check(self.existing_k >= 0, f"mem0.existing_k must be >= 0, got {self.existing_k}")
        check(bool(self.agent_id.strip()), "mem0.agent_id must be a non-empty string")
        check(self.extraction in ("auto", "llm", "rule"), f"mem0.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"mem0.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"mem0.temperature must be in [0, 5], got {self.temperature}")


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


class EmbedderAdapter:
    """The engine's embedder behind mem0's ``EmbeddingBase`` methods (``embed``, ``embed_batch``)."""

    def __init__(self, embedder):
        self.embedder = embedder

    def embed(self, text, memory_action=None):
        return self.embedder.embed([str(text)])[0].tolist()

    def embed_batch(self, texts, memory_action="add"):
        return [v.tolist() for v in self.embedder.embed([str(t) for t in texts])]


class ReplayLLM:
    """mem0's ``LLMBase.generate_response``, answered from completions made earlier through our LLM interface."""

    def __init__(self):
        self.queue: list[str] = []
        self.calls = 0

    def generate_response(self, messages, response_format=None, tools=None, tool_choice="auto", **kwargs):
        if not self.queue:
            raise BackendError("mem0 asked its LLM for more completions than observe() prepared")
        self.calls += 1
        return self.queue.pop(0)


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
    """Rule-based completion in mem0's output format (simulated backend)."""
    attempt = (outcome.successes or list(outcome.attempts) or [None])[0]
    text = one_line(attempt.text) if attempt is not None else "(no attempt)"
    verdict = "solved it" if outcome.success else "did not solve it"
    return json.dumps({"memory": [{"text": f"For the task {outcome.task}, the approach '{text}' {verdict}."}]})


def valid_extraction(text: str) -> bool:
    """Whether a completion parses as mem0's ``{"memory": [{"text": ...}, ...]}``."""
    data = parse_json(text)
    return isinstance(data, dict) and isinstance(data.get("memory"), list)


class Mem0Memory:
    """Experience stored and searched by the real mem0 library; see the module docstring."""

    name = "mem0"

    def __init__(self, config: Mem0Config | None = None, *, embedder):
        self.config = config or Mem0Config()
        self.embedder = embedder
        self._int_ids: dict[str, int] = {}
        self.version = 0
        self.memory = self._build()

    def _build(self):
        import_mem0()
        from mem0 import Memory
        from mem0.configs.base import MemoryConfig
        from qdrant_client import QdrantClient

        cfg = MemoryConfig(
            vector_store={
                "provider": "qdrant",
                "config": {
                    "collection_name": "toe_mem0",
                    "embedding_model_dims": int(self.embedder.dim),
                    "client": QdrantClient(":memory:"),
                },
            },
            # Placeholders: mem0 builds these clients at init without network; both are replaced below.
            llm={"provider": "openai", "config": {"api_key": "offline", "model": "replay"}},
            embedder={"provider": "openai", "config": {"api_key": "offline", "embedding_dims": int(self.embedder.dim)}},
            history_db_path=":memory:",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            memory = Memory(cfg)
        memory.embedding_model = EmbedderAdapter(self.embedder)
        memory.llm = ReplayLLM()
        return memory

    def __getstate__(self):
        """Pickle (checkpoints, Ray): the library's live objects are replaced by the stored records."""
        state = dict(self.__dict__)
        state["memory"] = None
        state["_records"] = self._records() if self.memory is not None else state.get("_records")
        return state

    def __setstate__(self, state):
        records = state.pop("_records", None)
        self.__dict__.update(state)
        if records is not None:
            self.memory = self._build()
            if records:
                ids, payloads = zip(*records)
                vecs = self.embedder.embed([p["data"] for p in payloads])
                self.memory.vector_store.insert(vectors=[v.tolist() for v in vecs], payloads=list(payloads), ids=list(ids))

    def _records(self) -> list[tuple[str, dict]]:
        """``(mem0 id, payload)`` of every stored memory, as mem0's vector store holds them."""
        from mem0.memory.main import _vector_store_list_rows

        listed = self.memory.vector_store.list(filters={"agent_id": self.config.agent_id}, top_k=1 << 30)
        return sorted(((str(r.id), dict(r.payload)) for r in _vector_store_list_rows(listed)), key=lambda rec: rec[0])

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
        items = self.all_memories()
        texts = [r["memory"] for r in items]
        vecs = self.embedder.embed(texts) if texts else np.zeros((0, self.embedder.dim), np.float32)
        return {
            "id": np.array([self._int_ids[r["id"]] for r in items], dtype=np.int64),
            "mem0_id": str_array(r["id"] for r in items),
            "memory": str_array(texts),
            "embedding": vecs,
            "version": np.array([self.version], dtype=np.int64),
        }

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "Mem0Reader":
        return Mem0Reader(self.config, self.embedder, snapshot)

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """``Memory.add(messages, infer=True)`` per episode, in order, replaying its prepared completion."""
        memory = self._live()
        for u in updates:
            if not u:
                continue
            roles, contents = texts_of(u["role"]), texts_of(u["content"])
            completion = texts_of(u["completion"])
            if len(roles) != len(contents) or len(completion) != 1:
                raise InputError(f"mem0 update needs equal role/content lists and one completion, got {len(roles)}, {len(contents)}, {len(completion)}")
            memory.llm.queue = list(completion)
            result = memory.add([{"role": r, "content": c} for r, c in zip(roles, contents)], agent_id=self.config.agent_id, infer=True)
            memory.llm.queue = []
            for item in result.get("results", []):  # int ids in the deterministic order mem0 reports additions
                self._int_ids.setdefault(str(item["id"]), len(self._int_ids))
        self.version += 1

    def search_live(self, query: str) -> list[Hit]:
        """``Memory.search`` on the live store (for checks; workers use :meth:`Mem0Reader.retrieve`)."""
        self.all_memories()
        res = self._live().search(query, filters={"agent_id": self.config.agent_id}, top_k=self.config.top_k, threshold=self.config.threshold)
        return [Hit(self._int_ids[r["id"]], r["memory"], float(r["score"])) for r in res["results"]]


class Mem0Reader:
    """Read-only mem0 retrieval over a snapshot, ranked by mem0's own ``score_and_rank``."""

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

    def requests(self, outcomes: Sequence[Outcome], mode: str) -> list[list[Request]]:
        if mode == "rule":
            return [[] for _ in outcomes]
        import_mem0()
        from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, AGENT_CONTEXT_SUFFIX, generate_additive_extraction_prompt
        from mem0.memory.utils import parse_messages

        cfg = self.config
        parsed = [parse_messages(conversation(o)) for o in outcomes]
        existing = [[] for _ in outcomes]
        if self.memory and cfg.existing_k:
            sims = cosine_scores(self.embedding, self.embedder.embed(parsed))
            existing = [[{"id": str(i), "text": self.memory[r]} for i, r in enumerate(self._candidates(s, cfg.existing_k))] for s in sims]
        out = []
        for o, p, ex in zip(outcomes, parsed, existing):
            user = generate_additive_extraction_prompt(existing_memories=ex, new_messages=p, last_k_messages=[])
            messages = (
                {"role": "system", "content": ADDITIVE_EXTRACTION_PROMPT + AGENT_CONTEXT_SUFFIX},
                {"role": "user", "content": user},
            )
            out.append([Request(messages=messages, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                seed=derive_seed(o.seed, "mem0", "extract"), episode=o.key)])
        return out

    def updates(self, outcomes: Sequence[Outcome], completions, mode: str) -> list[dict]:
        out = []
        for o, comps in zip(outcomes, completions):
            text, source = "", "rule"
            if mode == "llm":
                text = first_text(comps[0]) if comps else ""
                source = "llm" if valid_extraction(text) else "rule-fallback"
                if source != "llm":
                    text = ""
            if not text:
                text = rule_extraction(o)
            msgs = conversation(o)
            out.append(
                {
                    "role": str_array(m["role"] for m in msgs),
                    "content": str_array(m["content"] for m in msgs),
                    "completion": str_array([text]),
                    "source": str_array([source]),
                    "retrieved": np.asarray(o.retrieved, dtype=np.int64),
                }
            )
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        try:
            return observe_with(self, outcomes, llm, self.config.extraction)
        except BackendError as exc:
            raise BackendError(
                f"mem0's extraction prompt (its ~34,000-character system prompt) was rejected by backend "
                f"{getattr(llm, 'name', '?')!r}: {exc}. With a small-context model set [mem0] extraction = \"rule\" "
                f"or give the model a larger context (llm.context)"
            ) from exc
