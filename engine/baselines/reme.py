"""ReMe task memory ("Remember Me, Refine Me"), re-implemented from the paper and public code.

Source: Z. Cao et al., "Remember Me, Refine Me: a dynamic procedural memory
framework for experience-driven agent evolution", Findings of ACL 2026; public
code modelscope/ReMe (``reme_ai/summary/task/*_extraction_op.py``,
``reme_ai/vector_store/update_memory_{freq,utility}_op.py``, the vector store's
``utility_based_delete``). ReMe runs as a flowllm service with its own LLM and
vector-store clients; we re-implement its task-memory algorithm on our batched
LLM interface instead of running that service (see docs/baselines.md).

* **Extraction** (one episode, several attempts): *success* extraction from a
  successful attempt, *failure* extraction from a failed one, and *comparative*
  extraction from a (success, failure) pair of the same task. Each yields
  memories ``{when_to_use, content}``; ``when_to_use`` is embedded and is the
  retrieval key.
* **Retrieval with rerank**: recall the ``recall_k`` (10) memories whose
  ``when_to_use`` is most similar to the task, rerank them by
  ``(1 - w) * cos(task, when_to_use) + w * cos(task, content)``
  (``rerank_weight`` w = 0.5; ReMe's LLM rerank is replaced by this dense
  rerank so retrieval needs no extra LLM call), keep ``top_k`` (5).
* **Counters**: every retrieved memory gets ``freq += 1``; if the episode
  succeeded it also gets ``utility += 1``.
* **Pruning** after each round: delete memories with
  ``freq >= freq_threshold`` (5) and ``utility / freq < utility_threshold`` (0.5).
"""

from __future__ import annotations

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
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.config import check
from engine.errors import InputError
from engine.baselines import prompts as baseline_prompts
from engine.llm.base import LLMBackend, Request

# The row embedding is the when_to_use vector; the content vector lives in a second table with the same ids.
COLUMNS = {"when_to_use": TEXT, "content": TEXT, "kind": TEXT, "source": TEXT, "freq": "i8", "utility": "i8"}
KINDS = ("success", "failure", "comparative")


@dataclass(frozen=True)
class ReMeConfig:
    """ReMe task-memory parameters (see the module docstring)."""

    recall_k: int = 10
    top_k: int = 5
    rerank_weight: float = 0.5
    freq_threshold: int = 5
    utility_threshold: float = 0.5
    comparative: bool = True
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 384
    temperature: float = 0.0

    def __post_init__(self):
        check(self.recall_k >= 1, f"reme.recall_k must be >= 1, got {self.recall_k}")
        check(1 <= self.top_k <= self.recall_k, f"reme.top_k must be in [1, recall_k={self.recall_k}], got {self.top_k}")
        check(0.0 <= self.rerank_weight <= 1.0, f"reme.rerank_weight must be in [0, 1], got {self.rerank_weight}")
        check(self.freq_threshold >= 1, f"reme.freq_threshold must be >= 1, got {self.freq_threshold}")
        check(0.0 <= self.utility_threshold <= 1.0, f"reme.utility_threshold must be in [0, 1], got {self.utility_threshold}")
        check(self.extraction in ("auto", "llm", "rule"), f"reme.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"reme.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"reme.temperature must be in [0, 5], got {self.temperature}")


def prune_mask(freq: np.ndarray, utility: np.ndarray, freq_threshold: int, utility_threshold: float) -> np.ndarray:
    """``b1[n]``: rows ReMe deletes, ``freq >= freq_threshold`` and ``utility / freq < utility_threshold``."""
    freq = np.asarray(freq, dtype=np.float64)
    ratio = np.divide(np.asarray(utility, dtype=np.float64), freq, out=np.ones_like(freq), where=freq > 0)
    return (freq >= freq_threshold) & (ratio < utility_threshold)


def extraction_jobs(outcome: Outcome, comparative: bool) -> list[tuple[str, dict]]:
    """(kind, fields) of every extraction ReMe runs on one outcome: success, failure, comparative."""
    s, f = outcome.successes, outcome.failures
    jobs = []
    if s:
        jobs.append(("success", {"task": outcome.task, "attempt": s[0].text}))
    if f:
        jobs.append(("failure", {"task": outcome.task, "attempt": f[0].text}))
    if comparative and s and f:
        jobs.append(("comparative", {"task": outcome.task, "success": s[0].text, "failure": f[0].text}))
    return jobs


def rule_memory(kind: str, fields: dict) -> tuple[str, str]:
    """Rule-based extraction (simulated backend): (when_to_use, content) from templates."""
    when = f"A task like: {fields['task']}"
    if kind == "success":
        return when, f"An approach that worked: {one_line(fields['attempt'])}"
    if kind == "failure":
        return when, f"An approach that failed, avoid it: {one_line(fields['attempt'])}"
    return when, f"Prefer '{one_line(fields['success'], 200)}' over '{one_line(fields['failure'], 200)}': the first succeeded, the second failed."


def parse_memories(text: str) -> list[tuple[str, str]]:
    """``[(when_to_use, content)]`` from an extraction completion (``[]`` when unparseable)."""
    data = parse_json(text)
    if isinstance(data, dict):
        data = [data]
    out = []
    if isinstance(data, list):
        for item in data[:2]:
            if isinstance(item, dict):
                when = one_line(item.get("when_to_use", ""), 400)
                content = one_line(item.get("experience", item.get("content", "")), 800)
                if when and content:
                    out.append((when, content))
    return out


class ReMeMemory:
    """ReMe task memory: rows (when_to_use, content, kind, freq, utility); see the module docstring."""

    name = "reme"

    def __init__(self, config: ReMeConfig | None = None, *, embedder):
        self.config = config or ReMeConfig()
        self.embedder = embedder
        self.table = MemoryTable(COLUMNS, embedder.dim)  # embedding = when_to_use vector
        self.content = MemoryTable({}, embedder.dim)  # same ids, embedding = content vector
        self.pruned = 0

    def snapshot(self) -> dict[str, np.ndarray]:
        snap = self.table.snapshot()
        snap["content_embedding"] = self.content.embedding.copy()
        return snap

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "ReMeReader":
        view = TableView(snapshot, COLUMNS, self.embedder.dim)
        content = np.asarray(snapshot["content_embedding"], dtype=np.float32)
        if content.shape != view.embedding.shape:
            raise InputError(f"snapshot content_embedding must have shape {view.embedding.shape}, got {content.shape}")
        return ReMeReader(self.config, self.embedder, view, content)

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Counters of retrieved memories, then new memories, in episode order; prune at the end."""
        updates = [u for u in updates if u]
        for u in updates:
            success = bool(np.asarray(u["success"]).reshape(-1)[0])
            rows = self.table.rows(np.unique(np.asarray(u["retrieved"], dtype=np.int64)), strict=False)
            self.table.data["freq"][rows] += 1  # ReMe update_memory_freq
            if success:
                self.table.data["utility"][rows] += 1  # ReMe update_memory_utility
        whens = [t for u in updates for t in texts_of(u.get("when_to_use"))]
        contents = [t for u in updates for t in texts_of(u.get("content"))]
        if whens:
            kinds = [t for u in updates for t in texts_of(u.get("kind"))]
            sources = [t for u in updates for t in texts_of(u.get("source"))]
            n = len(whens)
            self.table.append(
                self.embedder.embed(whens), when_to_use=whens, content=contents, kind=kinds, source=sources,
                freq=np.zeros(n, np.int64), utility=np.zeros(n, np.int64),
            )
            self.content.append(self.embedder.embed(contents))
        cfg = self.config
        dead = self.table.id[prune_mask(self.table.data["freq"], self.table.data["utility"], cfg.freq_threshold, cfg.utility_threshold)]
        if dead.size:
            self.pruned += self.table.delete(dead)
            self.content.delete(dead)


class ReMeReader:
    """Read-only ReMe retrieval (recall + rerank) and extraction over one snapshot."""

    def __init__(self, config: ReMeConfig, embedder, view: TableView, content_embedding: np.ndarray):
        self.config = config
        self.embedder = embedder
        self.view = view
        self.content_embedding = content_embedding

    def retrieve(self, tasks: Sequence[str]) -> list[list[Hit]]:
        cfg = self.config
        if not tasks:
            return []
        if len(self.view) == 0:
            return [[] for _ in tasks]
        qv = self.embedder.embed(list(tasks))
        sim_when = cosine_scores(self.view.embedding, qv).astype(np.float64)
        sim_content = cosine_scores(self.content_embedding, qv).astype(np.float64)
        w = cfg.rerank_weight
        out = []
        for sw, sc in zip(sim_when, sim_content):
            cand = top_k(sw, cfg.recall_k)  # recall by when_to_use
            rerank = (1.0 - w) * sw[cand] + w * sc[cand]  # dense rerank
            order = np.lexsort((np.arange(cand.size), -rerank))[: cfg.top_k]
            out.append(
                [
                    Hit(
                        int(self.view.id[cand[i]]),
                        f"When to use: {self.view.text('when_to_use', cand[i])}\nExperience: {self.view.text('content', cand[i])}",
                        float(rerank[i]),
                        {"kind": self.view.text("kind", cand[i]), "recall_similarity": float(sw[cand[i]])},
                    )
                    for i in order
                ]
            )
        return out

    @staticmethod
    def format(hits: Sequence[Hit]) -> str:
        if not hits:
            return ""
        return "\n".join(f"Memory {i + 1}:\n{h.text}" for i, h in enumerate(hits))

    def requests(self, outcomes: Sequence[Outcome], mode: str) -> list[list[Request]]:
        cfg = self.config
        out = []
        for o in outcomes:
            reqs = []
            if mode == "llm":
                for kind, fields in extraction_jobs(o, cfg.comparative):
                    reqs.append(
                        Request(
                            prompt=baseline_prompts.render(f"reme_{kind}", **fields), max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                            seed=derive_seed(o.seed, "reme", kind), episode=o.key,
                        )
                    )
            out.append(reqs)
        return out

    def updates(self, outcomes: Sequence[Outcome], completions, mode: str) -> list[dict]:
        out = []
        for o, comps in zip(outcomes, completions):
            whens, contents, kinds, sources = [], [], [], []
            for j, (kind, fields) in enumerate(extraction_jobs(o, self.config.comparative)):
                mems, source = [], "rule"
                if mode == "llm":
                    mems = parse_memories(first_text(comps[j]) if j < len(comps) else "")
                    source = "llm" if mems else "rule-fallback"
                if not mems:
                    mems = [rule_memory(kind, fields)]
                for when, content in mems:
                    whens.append(when)
                    contents.append(content)
                    kinds.append(kind)
                    sources.append(source)
            out.append(
                {
                    "retrieved": np.asarray(o.retrieved, dtype=np.int64),
                    "success": np.array([o.success]),
                    "when_to_use": str_array(whens),
                    "content": str_array(contents),
                    "kind": str_array(kinds),
                    "source": str_array(sources),
                }
            )
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        return observe_with(self, outcomes, llm, self.config.extraction)
