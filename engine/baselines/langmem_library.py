"""LangMem on its REAL library (``langmem`` 0.0.30, extra ``baselines``): its own store manager, prompts and tools.

Source: langchain-ai/langmem, PyPI ``langmem`` 0.0.30: ``create_memory_store_manager``
(``src/langmem/knowledge/extraction.py``: ``MemoryStoreManager.invoke`` searches the store with the
dilated windows of the conversation, ``MemoryManager`` builds its messages with
``_MEMORY_INSTRUCTIONS`` and calls trustcall's ``create_extractor`` with the ``Memory`` schema,
``PatchDoc`` and ``RemoveDoc`` tools; the results are put / deleted in the store) and
``create_search_memory_tool`` (``knowledge/tools.py``: ``search_memory``, ``limit`` 10). This is the
usage the langmem README shows for a LangGraph store: ``InMemoryStore(index={"dims", "embed"})``
plus the two functions.

How the library is wired here (offline, no API key):

* the engine's LLM behind LangChain's ``BaseChatModel`` (:class:`EngineChatModel`): ``bind_tools``
  converts the tools with LangChain's ``convert_to_openai_tool``; a call becomes ONE engine
  :class:`~engine.llm.base.Request` with the tools in the system message and the ``tool_calls``
  constraint (:mod:`engine.llm.tools`), and the answer is parsed back into an ``AIMessage`` with
  ``tool_calls`` (unusable calls dropped and counted in :attr:`LangMemLibraryMemory.tool_stats`);
* the engine's embedder as the store's ``embed`` function (``InMemoryStore(index={"dims": dim,
  "embed": ...})``, the store's own cosine search);
* the library calls its model synchronously; the engine batches a step's requests across questions
  (:func:`engine.baselines.docmem.drive`). So one ``add`` runs the store manager again from the
  start for each LLM call it makes: a run stops at the first call not yet answered (the request is
  yielded to the engine), the next run is given the answers so far. Nothing is written to the store
  before the manager has all its answers (``MemoryStoreManager.invoke`` puts and deletes after the
  extraction), so the last run is the one that writes. Usually one call per session (``max_steps`` 1,
  trustcall's validation retries only on invalid calls).
* ``uuid.uuid4`` inside langmem and trustcall draws from a generator seeded per ``add`` (the session tag
  ``<session_{uuid}>`` in the prompt, new memory keys, message ids), so a rerun sends the same prompt
  (replay traces, reproducible runs); the original draws them at random.
* ``mode = "rule"`` (the simulated backend): the library's call is answered by :func:`simulated_reply`
  locally, so the library's pipeline and store still run; it is a SIMULATED answer (insert each message
  of the session not already stored verbatim), not a model's.
"""

from __future__ import annotations

import ast
import json
import random
import re
import threading
import uuid as _uuid
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from engine.baselines.common import Hit
from engine.baselines.docmem import Job, normalise
from engine.config import check
from engine.errors import BackendError, MissingExtraError
from engine.llm.base import Request
from engine.llm.tools import ToolStats, parse_tool_calls, tool_request
from engine.rounds import request_seed

VERSION = "0.0.30"  # the langmem release this wiring was checked against (pyproject extra `baselines`)
NAMESPACE = ("memories",)
_SYSTEM = "You are a memory subroutine for an AI."  # MemoryManager._prepare_messages
_LOCK = threading.Lock()  # the uuid shim is process-wide while the library runs


@dataclass(frozen=True)
class LangMemLibraryConfig:
    """Parameters of the library's own functions (defaults: ``create_memory_store_manager``, ``search_memory``)."""

    top_k: int = 10  # search_memory(limit=10)
    query_limit: int = 5  # create_memory_store_manager(query_limit=5)
    enable_inserts: bool = True
    enable_deletes: bool = True
    max_steps: int = 1  # MemoryManager.invoke: input.get("max_steps") or 1
    max_calls: int = 8  # LLM calls one add may make (trustcall retries included) before it is cut off
    max_tokens: int = 1000
    temperature: float = 0.0

    def __post_init__(self):
        check(self.top_k >= 1, f"langmem.top_k must be >= 1, got {self.top_k}")
        check(self.query_limit >= 1, f"langmem.query_limit must be >= 1, got {self.query_limit}")
        check(self.max_steps >= 1, f"langmem.max_steps must be >= 1, got {self.max_steps}")
        check(self.max_calls >= 1, f"langmem.max_calls must be >= 1, got {self.max_calls}")
        check(self.max_tokens >= 1, f"langmem.max_tokens must be >= 1, got {self.max_tokens}")


def import_langmem():
    """Import ``langmem`` (and trustcall, LangGraph's store); raises MissingExtraError naming the extra."""
    try:
        with warnings.catch_warnings():  # trustcall 0.0.39 imports Send from its pre-1.0 place
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.filterwarnings("ignore", message=".*langgraph.constants.*")
            import langmem  # noqa: F401
            import trustcall  # noqa: F401
            from langgraph.store.memory import InMemoryStore  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError("langmem", "baselines") from exc
    return langmem


class _Unanswered(BaseException):
    """Raised by the chat model at the first call the engine has not answered yet; carries the request.

    A ``BaseException``: trustcall's ``_ExtractUpdates.invoke`` turns every ``Exception`` of its model call
    into a "Fix the validation error" retry, which would loop instead of stopping the run."""

    def __init__(self, request: Request):
        super().__init__("langmem call not answered yet")
        self.request = request


class _Driver:
    """What one library run may answer: the answers so far, the sampling of new requests, the counts."""

    def __init__(self, answers: Sequence[str], sampling: dict, stats: ToolStats):
        self.answers = list(answers)
        self.sampling = sampling
        self.stats = stats
        self.calls = 0


_CHAT_MODEL = None


def chat_model_class():
    """:class:`EngineChatModel`, a LangChain ``BaseChatModel`` over the engine's LLM (built once)."""
    global _CHAT_MODEL
    if _CHAT_MODEL is not None:
        return _CHAT_MODEL
    import_langmem()
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool

    class EngineChatModel(BaseChatModel):
        """The engine's LLM as a LangChain chat model with tool calls (engine.llm.tools)."""

        driver: Any = None

        @property
        def _llm_type(self) -> str:
            return "toe-engine"

        def bind_tools(self, tools, *, tool_choice=None, **kwargs):
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

        def _generate(self, messages, stop=None, run_manager=None, tools=None, tool_choice=None, **kwargs):
            d: _Driver = self.driver
            msgs = convert_to_openai_messages(messages)
            if tools:
                req = tool_request(msgs, tools, tool_choice, **d.sampling)
            else:
                req = Request(messages=tuple({"role": m["role"], "content": str(m.get("content") or "")} for m in msgs),
                              **d.sampling)
            if d.calls >= len(d.answers):
                raise _Unanswered(req)
            text = d.answers[d.calls]
            d.calls += 1
            if not tools:
                return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])
            content, calls = parse_tool_calls(text, tools, tool_choice, d.stats)
            msg = AIMessage(content=content, tool_calls=[{"name": c.name, "args": c.arguments, "id": c.id,
                                                          "type": "tool_call"} for c in calls])
            return ChatResult(generations=[ChatGeneration(message=msg)])

    _CHAT_MODEL = EngineChatModel
    return EngineChatModel


class _SeededUUID:
    """The ``uuid`` module for langmem and trustcall with ``uuid4`` drawn from a seeded generator."""

    def __init__(self, seed: int):
        self._rng = random.Random(seed)

    def uuid4(self):
        return _uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def __getattr__(self, item):
        return getattr(_uuid, item)


class _seeded_uuids:
    def __init__(self, seed: int):
        self.seed = seed

    def __enter__(self):
        from langmem.knowledge import extraction
        from trustcall import _base

        _LOCK.acquire()
        self.mods = (extraction, _base)
        shim = _SeededUUID(self.seed)
        for m in self.mods:
            m.uuid = shim
        return self

    def __exit__(self, *exc):
        for m in self.mods:
            m.uuid = _uuid
        _LOCK.release()
        return False


# --- SIMULATED answers to the library's own prompts (a test harness, not a model) -------------------

_INSTANCE = re.compile(r'<instance id=[^ >]+ schema_type="[^"]*">\n([\s\S]*?)\n</instance>')
_SESSION = re.compile(r"<session_[0-9a-f-]+>\n([\s\S]*?)\n</session_[0-9a-f-]+>")
_HUMAN = re.compile(r"=+ Human Message =+\n\n")


def _session_messages(user: str) -> list[str]:
    m = _SESSION.search(user)
    if not m:
        return []
    parts = [p.strip() for p in _HUMAN.split(m.group(1)) if p.strip()]
    # merge_message_runs joins consecutive human messages with a newline: one line per message
    return [line.strip() for p in parts for line in p.split("\n") if line.strip()]


def _existing_contents(system: str) -> set[str]:
    out = set()
    for body in _INSTANCE.findall(system):
        try:
            value = ast.literal_eval(body)  # trustcall writes the instance as a Python dict (f"{d}")
        except (ValueError, SyntaxError):
            value = {"content": body}
        out.add(normalise(value.get("content", "") if isinstance(value, dict) else body))
    return out


def simulated_reply(messages: Sequence[dict]) -> str | None:
    """SIMULATED answer to LangMem's manager prompt (``_MEMORY_INSTRUCTIONS`` + the session, trustcall's
    tools in the system message): one ``Memory`` call per session message not already stored verbatim."""
    if not messages or not str(messages[0].get("content", "")).startswith(_SYSTEM) or "# Tools" not in messages[0]["content"]:
        return None
    user = next((m["content"] for m in messages if m.get("role") == "user" and "<session_" in m.get("content", "")), "")
    if not user:
        return None
    have = _existing_contents(messages[0]["content"])
    calls = []
    for line in _session_messages(user):
        if normalise(line) not in have:
            have.add(normalise(line))
            calls.append({"name": "Memory", "arguments": {"content": line}})
    return json.dumps({"content": "", "tool_calls": calls})


class LangMemLibraryMemory:
    """One LangMem namespace in a LangGraph ``InMemoryStore``, managed by the library's store manager."""

    name = "langmem"

    def __init__(self, config: LangMemLibraryConfig | None = None, *, embedder):
        import_langmem()
        from langgraph.store.memory import InMemoryStore
        from langmem import create_memory_store_manager, create_search_memory_tool

        self.config = cfg = config or LangMemLibraryConfig()
        self.embedder = embedder
        self.store = InMemoryStore(index={"dims": int(embedder.dim), "embed": self._embed})
        self.model = chat_model_class()()
        self.manager = create_memory_store_manager(self.model, namespace=NAMESPACE, store=self.store,
                                                   query_limit=cfg.query_limit, enable_inserts=cfg.enable_inserts,
                                                   enable_deletes=cfg.enable_deletes)
        self.search_tool = create_search_memory_tool(namespace=NAMESPACE, store=self.store)
        self.tool_stats = ToolStats()
        self.calls = 0  # LLM calls answered (rule or model)
        self.cut_off = 0  # adds stopped at max_calls
        self.sessions = 0
        self.key_ids: dict[str, int] = {}  # store key -> the int id hits carry (first seen order)

    def _embed(self, texts):
        return [v.tolist() for v in self.embedder.embed([str(t) for t in texts])]

    def _run(self, session: list[str], answers: list[str], seed: int, sampling: dict):
        from langchain_core.messages import HumanMessage

        self.model.driver = _Driver(answers, sampling, self.tool_stats)
        with _seeded_uuids(seed):
            return self.manager.invoke({"messages": [HumanMessage(content=m) for m in session],
                                        "max_steps": self.config.max_steps})

    def add(self, texts, *, mode: str = "rule", key: str = "", seed: int = 0, when: str = "") -> Job:
        cfg = self.config
        session = [str(t) for t in texts if str(t).strip()]
        if not session:
            return {"memories": len(self.texts())}
        sampling = {"max_tokens": cfg.max_tokens, "temperature": cfg.temperature, "seed": seed, "episode": key or None}
        run_seed = request_seed("langmem", seed, self.sessions)
        answers: list[str] = []
        puts = None
        while puts is None:
            try:
                puts = self._run(session, answers, run_seed, sampling)
            except _Unanswered as ask:
                if len(answers) >= cfg.max_calls:
                    self.cut_off += 1  # nothing was written: the manager writes only after its last call
                    break
                if mode == "llm":
                    (text,) = yield [ask.request]
                else:
                    text = simulated_reply(ask.request.messages)
                    if text is None:
                        raise BackendError("the simulated LangMem answer does not recognise the library's prompt "
                                           f"(langmem {VERSION}); first message: {ask.request.messages[0]['content'][:120]!r}")
                answers.append(text)
        self.calls += len(answers)
        self.sessions += 1
        return {"memories": len(self.texts()), "calls": len(answers), "puts": len(puts or [])}

    def retrieve(self, query: str) -> list[Hit]:
        """``search_memory(query, limit=top_k)``: the store's cosine ranking, best first."""
        found = self.search_tool.invoke({"query": query, "limit": self.config.top_k})
        items = json.loads(found) if isinstance(found, str) else found
        hits = []
        for item in items:
            value = item["value"] if isinstance(item, dict) else item.value
            content = value.get("content", {})
            text = content.get("content", "") if isinstance(content, dict) else str(content)
            score = item.get("score") if isinstance(item, dict) else item.score
            key = item["key"] if isinstance(item, dict) else item.key
            hits.append(Hit(self.key_ids.setdefault(key, len(self.key_ids)), text, float(score or 0.0), {"key": key}))
        return hits

    def texts(self) -> list[str]:
        out = []
        for item in self.store.search(NAMESPACE, limit=1_000_000):
            content = item.value.get("content", {})
            out.append(content.get("content", "") if isinstance(content, dict) else str(content))
        return out


__all__ = ["LangMemLibraryConfig", "LangMemLibraryMemory", "chat_model_class", "simulated_reply"]
