"""LangMem (re-implementation): a memory store manager that inserts, updates and deletes memories per session.

Source: langchain-ai/langmem@b5dbe4a ``src/langmem/knowledge/extraction.py``
(``_MEMORY_INSTRUCTIONS``, ``MemoryManager._prepare_messages`` / ``invoke``,
``MemoryStoreManager``: ``query_limit`` 5, ``enable_inserts`` /
``enable_deletes`` True, the search over ``get_dialated_windows(messages,
query_limit // 4)``, ``_sort_results``), ``src/langmem/utils.py``
(``get_conversation``, ``get_dialated_windows``), ``knowledge/tools.py``
(``search_memory``'s ``limit`` 10). The PyPI package ``langmem`` (0.0.30)
installs, but its manager runs through trustcall's tool-calling extractor on a
LangChain chat model with native tool calls (JSON-patch ``PatchDoc`` /
``RemoveDoc``); the engine's backends (llama.cpp, the simulated policy) answer
text, so it cannot run with the engine's LLM unchanged.

``add`` (one session = the messages of one write): the store is searched with
the dilated windows of the conversation (``query_limit // 4`` = 1 window: the
last message) and the ``query_limit`` best memories are the existing ones; one
LLM call with the memory subroutine system message and the instructions plus
the session and the existing memories answers a list of operations; inserts
add memories, updates replace an existing memory's content (and its
embedding), deletes remove it (``enable_deletes``). ``max_steps`` 1 (the
default): one call per session.

``retrieve`` (``search_memory``): cosine top ``top_k`` over the namespace.

Differences (docs/forecast_baselines.md): the operations come back as one
JSON object (``langmem_json_format``) instead of tool calls; an answer that
does not parse inserts nothing (``rule-fallback`` then applies the rule).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from engine.baselines import prompts as baseline_prompts
from engine.baselines.common import Hit, parse_json
from engine.baselines.docmem import Job, normalise
from engine.config import check
from engine.llm.base import Request

_HUMAN = "================================ Human Message ================================="


@dataclass(frozen=True)
class LangMemConfig:
    """LangMem parameters (defaults: ``create_memory_store_manager``, ``search_memory``)."""

    top_k: int = 10  # search_memory limit
    query_limit: int = 5
    enable_inserts: bool = True
    enable_updates: bool = True
    enable_deletes: bool = True
    max_tokens: int = 600
    temperature: float = 0.0

    def __post_init__(self):
        check(self.top_k >= 1, f"langmem.top_k must be >= 1, got {self.top_k}")
        check(self.query_limit >= 1, f"langmem.query_limit must be >= 1, got {self.query_limit}")


def conversation(messages: list[str]) -> str:
    """``utils.get_conversation`` of human messages (``pretty_repr``, joined by blank lines)."""
    return "\n\n".join(f"{_HUMAN}\n\n{m}" for m in messages)


def dilated_windows(messages: list[str], n: int) -> list[str]:
    """``utils.get_dialated_windows``: the last 1, 2, 4, ... messages (``n`` sizes), as conversations."""
    out, seen = [], set()
    for i in range(n):
        size = min(len(messages), 1 << i)
        if size not in seen and size:
            seen.add(size)
            out.append(conversation(messages[len(messages) - size:]))
    return out


def rule_operations(session: list[str], existing: list[dict]) -> list[dict]:
    """Rule manager (simulated backend): insert every message not already stored verbatim; no updates or deletes."""
    have = {normalise(e["content"]) for e in existing}
    out = []
    for m in session:
        if normalise(m) not in have:
            have.add(normalise(m))
            out.append({"action": "insert", "content": m})
    return out


def parse_operations(text: str) -> list[dict] | None:
    data = parse_json(text)
    ops = data.get("operations") if isinstance(data, dict) else data
    if not isinstance(ops, list):
        return None
    return [o for o in ops if isinstance(o, dict) and o.get("action") in ("insert", "update", "delete")]


def manager_messages(session: list[str], existing: list[dict]) -> tuple[dict, ...]:
    r = baseline_prompts.render
    user = r("langmem_json_format", instructions=r("langmem_instructions"), session=conversation(session),
             existing=json.dumps(existing, ensure_ascii=False))
    return ({"role": "system", "content": "You are a memory subroutine for an AI."}, {"role": "user", "content": user})


def simulated_reply(messages: list[dict]) -> str | None:
    if not messages or messages[0].get("content") != "You are a memory subroutine for an AI.":
        return None
    user = messages[-1]["content"]
    body = user.split("<session>\n", 1)[-1].split("\n</session>", 1)[0]
    session = [p.strip() for p in body.split(_HUMAN) if p.strip()]
    try:
        existing = json.loads(user.split("Existing memories (JSON list of {\"id\", \"content\"}):\n", 1)[1].split("\n\n", 1)[0])
    except (IndexError, json.JSONDecodeError):
        existing = []
    return json.dumps({"operations": rule_operations(session, existing)})


class LangMemMemory:
    """One LangMem namespace: memories with embeddings, managed per session."""

    name = "langmem"

    def __init__(self, config: LangMemConfig | None = None, *, embedder):
        self.config = config or LangMemConfig()
        self.embedder = embedder
        self.ids: list[int] = []
        self.contents: list[str] = []
        self.emb = np.zeros((0, embedder.dim), np.float32)
        self.next_id = 0
        self.operations: list[dict] = []  # audit: every operation applied, with its source

    def search(self, query: str, limit: int) -> list[tuple[int, float]]:
        if not self.ids:
            return []
        sims = self.emb @ self.embedder.embed([query])[0]
        order = np.argsort(-sims, kind="stable")[:limit]
        return [(int(r), float(sims[r])) for r in order]

    def existing_for(self, session: list[str]) -> list[dict]:
        """The ``query_limit`` best memories over the dilated-window queries (``_sort_results``)."""
        cfg = self.config
        best: dict[int, float] = {}
        for q in dilated_windows(session, cfg.query_limit // 4 or 1):
            for r, s in self.search(q, cfg.query_limit):
                best[r] = max(best.get(r, -2.0), s)
        rows = sorted(best, key=lambda r: (-best[r], r))[: cfg.query_limit]
        return [{"id": str(self.ids[r]), "content": self.contents[r]} for r in rows]

    def add(self, texts, *, mode: str = "rule", key: str = "", seed: int = 0, when: str = "") -> Job:
        cfg = self.config
        session = [str(t) for t in texts]
        if not session:
            return {"memories": len(self.ids)}
        existing = self.existing_for(session)
        source = "rule"
        ops = None
        if mode == "llm":
            (answer,) = yield [Request(messages=manager_messages(session, existing), max_tokens=cfg.max_tokens,
                                       temperature=cfg.temperature, seed=seed, episode=key or None)]
            ops = parse_operations(answer)
            source = "llm" if ops is not None else "rule-fallback"
        if ops is None:
            ops = rule_operations(session, existing)
        self.apply(ops, {e["id"] for e in existing}, source)
        return {"memories": len(self.ids), "operations": len(ops)}

    def apply(self, ops: list[dict], existing_ids: set[str], source: str) -> None:
        cfg = self.config
        for op in ops:
            act = op.get("action")
            content = str(op.get("content", "")).strip()
            oid = str(op.get("id", ""))
            if act == "insert" and cfg.enable_inserts and content:
                self.ids.append(self.next_id)
                self.contents.append(content)
                self.emb = np.concatenate([self.emb, self.embedder.embed([content])])
                self.next_id += 1
            elif act == "update" and cfg.enable_updates and content and oid in existing_ids and int(oid) in self.ids:
                r = self.ids.index(int(oid))
                self.contents[r] = content
                self.emb[r] = self.embedder.embed([content])[0]
            elif act == "delete" and cfg.enable_deletes and oid in existing_ids and int(oid) in self.ids:
                r = self.ids.index(int(oid))
                del self.ids[r], self.contents[r]
                self.emb = np.delete(self.emb, r, axis=0)
            else:
                continue  # an operation on a memory the manager was not shown is refused
            self.operations.append({**op, "source": source})

    def retrieve(self, query: str) -> list[Hit]:
        return [Hit(self.ids[r], self.contents[r], s) for r, s in self.search(query, self.config.top_k)]

    def texts(self) -> list[str]:
        return list(self.contents)


__all__ = ["LangMemConfig", "LangMemMemory", "dilated_windows", "rule_operations"]
