"""A-MEM (re-implementation): agentic memory notes with LLM-built attributes, links and evolution.

Source: W. Xu et al., "A-MEM: Agentic Memory for LLM Agents" (arXiv:2502.12110);
code WujiangXu/A-mem@0c8039f ``memory_layer.py``: ``MemoryNote`` (and its
``analyze_content`` prompt), ``AgenticMemorySystem`` (``add_note``,
``process_memory`` with ``evolution_system_prompt``, ``consolidate_memories``,
``find_related_memories``, ``find_related_memories_raw``),
``SimpleEmbeddingRetriever.search`` (cosine, ``argsort[-k:][::-1]``). The PyPI
package ``a-mem`` (0.2.6, an MCP server variant) needs sentence-transformers
(torch) and chromadb, so it does not run here with the engine's embedder.

``add``, per note (the notes of one write in order; note i of every memory in
one batched call): (1) ``analyze_content``: keywords, context, tags from the
LLM; (2) the ``k`` (5) nearest notes by the retriever's documents
(``"content:<c> context:<x> keywords: <k> tags: <t>"``, embedded when the note
was added); (3) the evolution prompt: if ``should_evolve``, ``strengthen``
appends ``suggested_connections`` (neighbour indices) to the note's links and
replaces its tags with ``tags_to_update``; ``update_neighbor`` replaces the
neighbours' tags and contexts in order. Every ``evo_threshold`` (100)
evolutions the retriever is rebuilt from the notes' current attributes
(``consolidate_memories``). Answers that do not parse: no evolution (the
original returns ``False``).

``retrieve`` (``find_related_memories_raw``): the ``top_k`` nearest notes,
each followed by its linked notes (at most ``top_k`` + 1 per note, the
original's ``j >= k`` break).

Differences (docs/forecast_baselines.md): timestamps are the caller's
``when``; the JSON-schema ``response_format`` the original passes is not
enforced (the answer is parsed as JSON and missing fields are read as empty).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from engine.baselines import prompts as baseline_prompts
from engine.baselines.common import Hit, parse_json
from engine.baselines.docmem import Job, first_sentence, keywords
from engine.config import check
from engine.llm.base import Request


@dataclass(frozen=True)
class AMemConfig:
    """A-MEM parameters (defaults: ``AgenticMemorySystem.__init__``, ``process_memory``)."""

    top_k: int = 5  # find_related_memories_raw k
    neighbours: int = 5  # process_memory: find_related_memories(note.content, k=5)
    evo_threshold: int = 100
    max_tokens: int = 400
    temperature: float = 0.7  # get_completion's default

    def __post_init__(self):
        check(self.top_k >= 1, f"amem.top_k must be >= 1, got {self.top_k}")
        check(self.neighbours >= 1, f"amem.neighbours must be >= 1, got {self.neighbours}")
        check(self.evo_threshold >= 1, f"amem.evo_threshold must be >= 1, got {self.evo_threshold}")


@dataclass
class MemoryNote:
    content: str
    keywords: list[str] = field(default_factory=list)
    context: str = "General"
    tags: list[str] = field(default_factory=list)
    links: list[int] = field(default_factory=list)
    timestamp: str = ""
    source: str = "rule"


def retriever_document(note: MemoryNote) -> str:
    """What ``add_note`` gives the retriever for a new note."""
    return f"content:{note.content} context:{note.context} keywords: {', '.join(note.keywords)} tags: {', '.join(note.tags)}"


def consolidated_document(note: MemoryNote) -> str:
    """What ``consolidate_memories`` gives the rebuilt retriever."""
    return f"{note.content} , {note.context} {' '.join(note.keywords)} {' '.join(note.tags)}"


def rule_analysis(content: str) -> dict:
    """Rule note construction (simulated backend): 3 keywords, the first sentence, the keywords as tags."""
    kws = keywords(content, 3)
    return {"keywords": kws, "context": first_sentence(content, 200) or "General", "tags": list(kws)}


def rule_evolution(keywords_: list[str], tags: list[str], neighbours: list[tuple[int, list[str]]]) -> dict:
    """Rule evolution (simulated backend): strengthen links to neighbours sharing a keyword; tags += shared keywords."""
    shared = [(i, sorted(set(keywords_) & set(k))) for i, k in neighbours]
    links = [i for i, s in shared if s]
    new_tags = list(tags) + [w for _, s in shared for w in s if w not in tags]
    return {"should_evolve": bool(links), "actions": ["strengthen"] if links else [], "suggested_connections": links,
            "tags_to_update": list(dict.fromkeys(new_tags)), "new_context_neighborhood": [], "new_tags_neighborhood": []}


def neighbour_block(notes: list[MemoryNote], indices: list[int]) -> str:
    """``find_related_memories``' text of the neighbours."""
    return "".join(f"memory index:{i}\t talk start time:{notes[i].timestamp}\t memory content: {notes[i].content}\t "
                   f"memory context: {notes[i].context}\t memory keywords: {notes[i].keywords}\t memory tags: {notes[i].tags}\n"
                   for i in indices)


def _strs(v) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


def parse_analysis(text: str) -> dict | None:
    data = parse_json(re.sub(r"^```json\s*|\s*```$", "", text or "", flags=re.MULTILINE).strip())
    if not isinstance(data, dict):
        return None
    ctx = data.get("context", "General")
    ctx = " ".join(map(str, ctx)) if isinstance(ctx, list) else str(ctx or "General")
    return {"keywords": _strs(data.get("keywords")), "context": ctx, "tags": _strs(data.get("tags"))}


def parse_evolution(text: str) -> dict | None:
    data = parse_json(text or "")
    if not isinstance(data, dict) or "should_evolve" not in data:
        return None
    ev = data["should_evolve"]
    data["should_evolve"] = ev is True or str(ev).strip().lower() == "true"
    return data


_NEIGH = re.compile(r"memory index:(\d+)\t.*?memory keywords: (\[.*?\])\t", re.S)


def simulated_reply(messages: list[dict]) -> str | None:
    text = messages[-1]["content"] if messages else ""
    head = baseline_prompts.render("amem_analysis", content="")
    if text.startswith(head):
        return json.dumps(rule_analysis(text[len(head):]))
    if text.startswith("You are an AI memory evolution agent"):
        kws = re.search(r"\nkeywords: (\[.*?\])\n", text)
        mine = json.loads(kws.group(1).replace("'", '"')) if kws else []
        neigh = [(int(m.group(1)), json.loads(m.group(2).replace("'", '"'))) for m in _NEIGH.finditer(text)]
        return json.dumps(rule_evolution(mine, mine, neigh))
    return None


class AMemMemory:
    """An A-MEM note store with its embedding retriever."""

    name = "amem"

    def __init__(self, config: AMemConfig | None = None, *, embedder):
        self.config = config or AMemConfig()
        self.embedder = embedder
        self.notes: list[MemoryNote] = []
        self.documents: list[str] = []
        self.doc_emb = np.zeros((0, embedder.dim), np.float32)
        self.evo_cnt = 0
        self.evolutions: list[dict] = []  # audit: every evolution decision applied

    def search(self, query: str, k: int) -> list[int]:
        """``SimpleEmbeddingRetriever.search``: ``argsort(similarities)[-k:][::-1]``."""
        if not self.documents:
            return []
        sims = self.doc_emb @ self.embedder.embed([query])[0]
        return [int(i) for i in np.argsort(sims)[-k:][::-1]]

    def add(self, texts, *, mode: str = "rule", key: str = "", seed: int = 0, when: str = "") -> Job:
        cfg = self.config
        for i, content in enumerate(map(str, texts)):
            source = "rule"
            if mode == "llm":
                (answer,) = yield [Request(prompt=baseline_prompts.render("amem_analysis", content=content),
                                           max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=seed + 2 * i,
                                           episode=key or None)]
                attrs = parse_analysis(answer)
                source = "llm" if attrs is not None else "rule-fallback"
                attrs = attrs or {"keywords": [], "context": "General", "tags": []}  # the original's parse fallback
            else:
                attrs = rule_analysis(content)
            note = MemoryNote(content, attrs["keywords"], attrs["context"] or "General", attrs["tags"], [], str(when), source)
            idx = self.search(note.content, cfg.neighbours)
            if mode == "llm":
                prompt = baseline_prompts.render("amem_evolution", context=note.context, content=note.content,
                                                 keywords=note.keywords,
                                                 nearest_neighbors_memories=neighbour_block(self.notes, idx),
                                                 neighbor_number=len(idx))
                (answer,) = yield [Request(prompt=prompt, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                           seed=seed + 2 * i + 1, episode=key or None)]
                decision = parse_evolution(answer)
            else:
                decision = rule_evolution(note.keywords, note.tags, [(j, self.notes[j].keywords) for j in idx])
            evolved = self.evolve(note, idx, decision)
            self.notes.append(note)
            self._index([retriever_document(note)])
            if evolved:
                self.evo_cnt += 1
                if self.evo_cnt % cfg.evo_threshold == 0:
                    self.consolidate()
        return {"notes": len(self.notes)}

    def evolve(self, note: MemoryNote, idx: list[int], decision: dict | None) -> bool:
        """``process_memory``'s application of an evolution decision; returns ``should_evolve``."""
        if not decision or not decision.get("should_evolve"):
            return False
        self.evolutions.append(dict(decision))
        for action in decision.get("actions", []) or []:
            if action == "strengthen":
                note.links.extend(int(c) for c in decision.get("suggested_connections", []) or []
                                  if str(c).lstrip("-").isdigit() and 0 <= int(c) < len(self.notes))
                note.tags = _strs(decision.get("tags_to_update"))
            elif action == "update_neighbor":
                tags_n = decision.get("new_tags_neighborhood", []) or []
                ctx_n = decision.get("new_context_neighborhood", []) or []
                for i in range(min(len(idx), len(tags_n))):
                    nb = self.notes[idx[i]]
                    nb.tags = _strs(tags_n[i])
                    if i < len(ctx_n):
                        nb.context = str(ctx_n[i])
        return True

    def _index(self, docs: list[str]) -> None:
        self.documents += docs
        self.doc_emb = np.concatenate([self.doc_emb, self.embedder.embed(docs)])

    def consolidate(self) -> None:
        """``consolidate_memories``: rebuild the retriever from every note's current attributes."""
        self.documents = []
        self.doc_emb = np.zeros((0, self.embedder.dim), np.float32)
        self._index([consolidated_document(n) for n in self.notes])

    def retrieve(self, query: str) -> list[Hit]:
        k = self.config.top_k
        out = []
        for i in self.search(query, k):
            group = [i]
            for j, nb in enumerate(self.notes[i].links):
                group.append(nb)
                if j >= k:
                    break
            for r, n in enumerate(group):
                note = self.notes[n]
                out.append(Hit(n, note.content, 0.0 if r else 1.0,
                               {"linked_from": i if r else None, "keywords": note.keywords, "tags": note.tags,
                                "context": note.context}))
        return out

    def texts(self) -> list[str]:
        return [n.content for n in self.notes]


__all__ = ["AMemConfig", "AMemMemory", "MemoryNote", "rule_analysis", "rule_evolution"]
