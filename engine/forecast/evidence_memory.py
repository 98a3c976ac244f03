"""Evidence layer of the memory baselines: one question's search results written into a memory, retrieved back.

See :mod:`engine.forecast.memory_baselines` for the design (why one memory per
question, what each baseline writes and retrieves).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

import numpy as np

from engine import codec
from engine.baselines.common import Hit, resolve_extraction, str_array
from engine.config import check
from engine.errors import BackendError, ConfigError
from engine.forecast.agent import MEMORY_MODES, Episode
from engine.forecast.search import SearchResult
from engine.llm.base import Request
from engine.memory_budget import (DEFAULT_MAX_EXPERIENCE_TOKENS, DEFAULT_TOP_K, FitStats, context_window,
                                  count_tokens_for, fit_items, load_budget)
from engine.rounds import request_seed

ROW_NAMES = {"mem0": "Mem0 (evidence)", "memrl": "MemRL (evidence)", "reme": "ReMe (evidence)",
             "flex": "FLEX (evidence)",
             # the ForeDreamer paper's own baselines (Table 1): LangMem on its library, the others re-implemented
             # from their code (engine.baselines; docs/forecast_baselines.md)
             "hipporag": "HippoRAG 2 (re-impl., evidence)", "memoryos": "MemoryOS (re-impl., evidence)",
             "amem": "A-MEM (re-impl., evidence)", "lightmem": "LightMem (re-impl., evidence)",
             "langmem": "LangMem (library, evidence)", "langmem_reimpl": "LangMem (re-impl., evidence)"}
DISPLAY = {"mem0": "Mem0", "memrl": "MemRL", "reme": "ReMe", "flex": "FLEX", "hipporag": "HippoRAG 2",
           "memoryos": "MemoryOS", "amem": "A-MEM", "lightmem": "LightMem", "langmem": "LangMem",
           "langmem_reimpl": "LangMem"}
# Document memories (engine.baselines.docmem): add(texts) jobs + retrieve(query); module, config and memory class.
DOC_KINDS = {"hipporag": ("hipporag", "HippoRAGConfig", "HippoRAGMemory"),
             "memoryos": ("memoryos", "MemoryOSConfig", "MemoryOSMemory"),
             "amem": ("amem", "AMemConfig", "AMemMemory"),
             "lightmem": ("lightmem", "LightMemConfig", "LightMemMemory"),
             "langmem": ("langmem_library", "LangMemLibraryConfig", "LangMemLibraryMemory"),
             "langmem_reimpl": ("langmem", "LangMemConfig", "LangMemMemory")}


@codec.data
@dataclass(frozen=True)
class MemoryBaselinesConfig:
    """``[memory_baselines]``: how the memory baselines process evidence (modes mem0, memrl, reme, flex)."""

    # evidence memories returned per search (FLEX: clipped to its range 3..5; MemoryOS adds its short-term pages)
    # and the evidence block's token cap: both set from [memory] top_k / max_experience_tokens, one budget for
    # every memory method
    top_k: int = DEFAULT_TOP_K
    max_experience_tokens: int = DEFAULT_MAX_EXPERIENCE_TOKENS
    chunk_chars: int = 400  # evidence chunk size (sentence boundaries)
    extraction: str = "auto"  # mem0 fact extraction and MemRL/ReMe/FLEX outcome extraction: auto | llm | rule
    experience: bool = True  # MemRL / ReMe / FLEX cross-question outcome experience
    experience_chars: int = 3000  # prompt budget of the experience section
    resolution_delay_h: float = 0.0  # an outcome counts as known this many hours after the question's close_time

    def __post_init__(self):
        check(self.top_k >= 1, f"memory_baselines.top_k must be >= 1, got {self.top_k}")
        check(self.chunk_chars >= 80, f"memory_baselines.chunk_chars must be >= 80, got {self.chunk_chars}")
        check(self.extraction in ("auto", "llm", "rule"),
              f"memory_baselines.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.experience_chars >= 200,
              f"memory_baselines.experience_chars must be >= 200, got {self.experience_chars}")
        check(self.resolution_delay_h >= 0.0,
              f"memory_baselines.resolution_delay_h must be >= 0, got {self.resolution_delay_h}")


def memory_baselines_table(config) -> dict:
    """``[memory_baselines]`` of a whole config with ``top_k`` and ``max_experience_tokens`` from ``[memory]``
    (engine.memory_budget: the budget every memory method shares; the section may not set them itself)."""
    table = dict(config.get("memory_baselines") or {})
    own = sorted(k for k in ("top_k", "max_experience_tokens") if k in table)
    if own:
        raise ConfigError(f"[memory_baselines] {', '.join(own)}: set by [memory] for every memory method "
                          f"(one budget for all); move them to [memory]")
    budget = load_budget(config)
    table.update(top_k=budget.top_k, max_experience_tokens=budget.max_experience_tokens)
    return table


def check_kind(kind: str) -> str:
    if kind not in MEMORY_MODES:
        raise ConfigError(f"memory baseline must be one of {', '.join(MEMORY_MODES)}, got {kind!r}")
    return kind


# --- evidence chunks -------------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def source_line(hit: SearchResult) -> str:
    return f"[{hit.available_at.date().isoformat()}] {hit.title} ({hit.url})"


def evidence_chunks(hit: SearchResult, chunk_chars: int) -> list[str]:
    """The item's content as chunks of at most ``chunk_chars`` characters (sentence boundaries), each with its source line."""
    text = " ".join(str(hit.content).split())
    chunks, cur = [], ""
    for sent in _SENTENCE.split(text):
        while len(sent) > chunk_chars:  # one sentence longer than a chunk: hard cut
            if cur:
                chunks.append(cur)
                cur = ""
            chunks.append(sent[:chunk_chars])
            sent = sent[chunk_chars:].lstrip()
        if cur and len(cur) + 1 + len(sent) > chunk_chars:
            chunks.append(cur)
            cur = ""
        cur = f"{cur} {sent}".strip()
    if cur:
        chunks.append(cur)
    head = source_line(hit)
    return [f"{head}: {c}" for c in chunks] or [f"{head}: (empty)"]


# --- evidence layer: one question's memory -----------------------------------------------------


def _evidence_memory(kind: str, scope: str, cfg: MemoryBaselinesConfig, embedder):
    if kind == "mem0":
        from engine.baselines.mem0 import Mem0Config, Mem0Memory

        return Mem0Memory(Mem0Config(top_k=cfg.top_k, agent_id=f"question:{scope}", extraction=cfg.extraction),
                          embedder=embedder)
    if kind == "memrl":
        from engine.baselines.memrl import MemRLConfig, MemRLMemory

        return MemRLMemory(MemRLConfig(sim_threshold=0.0, recall_k=cfg.top_k, select_k=cfg.top_k,
                                       extraction=cfg.extraction), embedder=embedder)
    if kind == "reme":
        from engine.baselines.reme import ReMeConfig, ReMeMemory

        return ReMeMemory(ReMeConfig(recall_k=max(10, 2 * cfg.top_k), top_k=cfg.top_k, retrieval="dense", extraction=cfg.extraction),
                          embedder=embedder)
    if kind in DOC_KINDS:  # the one budget key of each: top_k
        import importlib

        mod, conf, cls = DOC_KINDS[kind]
        module = importlib.import_module(f"engine.baselines.{mod}")
        return getattr(module, cls)(getattr(module, conf)(top_k=cfg.top_k), embedder=embedder)
    from engine.flex.memory import FlexConfig, FlexMemory

    return FlexMemory(FlexConfig(k=min(5, max(3, cfg.top_k)), extraction=cfg.extraction, retrieval="embedding"),
                      embedder=embedder)  # the embedder, like every evidence baseline (docs/flex.md)


def _mem0_rule_completion(chunks: Sequence[str]) -> str:
    """mem0's extraction output format with one fact per chunk (rule-based; simulated backend)."""
    return json.dumps({"memory": [{"text": c} for c in chunks]})


class EvidenceMemory:
    """One question's evidence in one baseline memory; ``written`` lists every item it received."""

    def __init__(self, kind: str, scope: str, cfg: MemoryBaselinesConfig, embedder):
        self.kind = check_kind(kind)
        self.cfg = cfg
        self.memory = _evidence_memory(kind, scope, cfg, embedder)
        self.embedder = embedder
        self.written: list[SearchResult] = []
        self.sources: list[str] = []  # mem0 only: "llm" | "rule" | "rule-fallback" per write
        self._mem0_calls: dict[tuple[str, ...], tuple] = {}  # mem0 only: captured library calls, this store version
        self._mem0_calls_version = -1

    def mem0_request(self, query: str, hits: Sequence[SearchResult], cutoff: datetime, key: str, seed: int) -> Request:
        """The request mem0's own ``Memory.add`` sends its LLM for these items, captured on the question's live
        store (engine.baselines.mem0.capture_add): the library's system prompt, its user prompt with the
        session's last messages (earlier writes for this question) and the existing memories by its own search,
        JSON mode as the ``mem0_extraction`` constraint, the library's ``max_tokens``/``temperature``/``top_p``.
        The prompt's dates are the question's cutoff, not today's (docs/forecast_baselines.md).

        One capture per distinct item list and store version: context fitting renders several prefixes of the
        same list, and the batch sends the fitted one again.
        """
        from engine.baselines.mem0 import dated, extraction_request

        msgs = _mem0_messages(query, hits)
        if self._mem0_calls_version != self.memory.version:  # an add changed the store: earlier captures are stale
            self._mem0_calls, self._mem0_calls_version = {}, self.memory.version
        sig = tuple(m["content"] for m in msgs)
        if sig not in self._mem0_calls:
            self._mem0_calls[sig] = self.memory.library_call(msgs)
        messages, fmt = self._mem0_calls[sig]
        return extraction_request((dated(messages, cutoff.date().isoformat()), fmt), self.memory.config, seed=seed, episode=key)

    def doc_job(self, query: str, hits: Sequence[SearchResult], mode: str, key: str, seed: int, when: datetime):
        """A document memory's ``add`` job for these items (one chunk = one text); see engine.baselines.docmem."""
        chunks = [c for h in hits for c in evidence_chunks(h, self.cfg.chunk_chars)]
        self.written += list(hits)
        self.when = when
        extra = {"query": query} if self.kind == "memoryos" else {}
        return self.memory.add(chunks, mode=mode, key=key, seed=seed, when=when, **extra)

    def write(self, query: str, hits: Sequence[SearchResult], completion: str | None = None, digest: str | None = None) -> None:
        """Write the items through the baseline's ``apply`` (mem0: the library's ``add`` replaying ``completion``;
        ``digest``, the sent request's ``prompt_digest``, counts a replayed prompt that differs in ``stale_prompts``)."""
        if not hits:
            return
        per_hit = [evidence_chunks(h, self.cfg.chunk_chars) for h in hits]
        chunks = [c for cs in per_hit for c in cs]
        n = len(chunks)
        if self.kind == "mem0":
            from engine.baselines.mem0 import valid_extraction

            source = "rule"
            if completion is not None:
                source = "llm" if valid_extraction(completion) else "rule-fallback"
            text = completion if source == "llm" else _mem0_rule_completion(chunks)
            msgs = _mem0_messages(query, hits)
            update = {"role": str_array(m["role"] for m in msgs), "content": str_array(m["content"] for m in msgs),
                      "completion": str_array([text]), "source": str_array([source]),
                      "retrieved": np.zeros(0, np.int64)}
            if digest is not None:
                update["digest"] = str_array([digest])
            self.sources.append(source)
        elif self.kind == "memrl":
            update = {"used": np.zeros(0, np.int64), "reward": np.zeros(1, np.float64), "intent": str_array(chunks),
                      "experience": str_array(chunks), "source": str_array(["evidence"] * n)}
        elif self.kind == "reme":
            whens = [f"Evidence for: {query} | source: {h.title}" for h, cs in zip(hits, per_hit) for _ in cs]
            update = {"retrieved": np.zeros(0, np.int64), "success": np.zeros(1, bool), "when_to_use": str_array(whens),
                      "content": str_array(chunks), "kind": str_array(["evidence"] * n),
                      "source": str_array(["evidence"] * n)}
        else:
            refl = [f"Source: {source_line(h)}" for h, cs in zip(hits, per_hit) for _ in cs]
            update = {"problem": str_array(chunks), "solution": str_array(chunks), "correct": np.ones(n, bool),
                      "reflection": str_array(refl), "failure_reason": str_array([""] * n),
                      "source": str_array(["evidence"] * n)}
        self.memory.apply([update])
        self.written += list(hits)

    def retrieve(self, query: str) -> list[Hit]:
        if self.kind == "memoryos":
            return self.memory.retrieve(query, getattr(self, "when", None))
        if self.kind in DOC_KINDS:
            return self.memory.retrieve(query)
        return self.memory.reader(self.memory.snapshot()).retrieve([query])[0]

    def hit_text(self, hit: Hit) -> str:
        if self.kind == "reme":  # ReMe's hit text is "When to use: ...\nExperience: <content>"
            return hit.text.split("\nExperience: ", 1)[-1]
        return hit.text

    def format(self, hits: Sequence[Hit], budget: int) -> str:
        """The hits (best first) as numbered lines under the token cap (least relevant dropped first), cut to
        ``budget`` characters (``agent.context_chars``)."""
        render = lambda hs: "\n".join(f"[{i}] {self.hit_text(h)}" for i, h in enumerate(hs, start=1))  # noqa: E731
        text, _ = fit_items(hits, render, self.cfg.max_experience_tokens)
        return text[:budget]


def _request_tokens(llm, request: Request) -> int:
    return sum(count_tokens_for(llm, str(m.get("content", ""))) for m in request.messages or ()) + \
        (count_tokens_for(llm, request.prompt) if request.prompt else 0)


def _mem0_messages(query: str, hits: Sequence[SearchResult]) -> list[dict]:
    return [{"role": "user", "content": f"Search result for '{query}': {source_line(h)}: {' '.join(str(h.content).split())}"}
            for h in hits]


# --- the evidence processor the agent calls ----------------------------------------------------


@dataclass
class EvidenceProcessor:
    """``ForecastAgent(evidence=...)``: writes each search's results into the question's memory, returns its retrieval."""

    kind: str
    cfg: MemoryBaselinesConfig
    embedder: object
    llm: object
    context_chars: int
    preambles: dict = field(default_factory=dict)  # qid -> experience section text
    stores: dict = field(default_factory=dict)  # qid -> EvidenceMemory
    dropped: int = 0  # search results after the question's cutoff (never written)
    dropped_by: dict = field(default_factory=dict)  # qid -> of those, the question's
    # mem0's extraction prompts fitted to the backend's context window (least relevant search results left out)
    fit: FitStats = field(default_factory=FitStats)

    def preamble(self, task) -> str:
        return self.preambles.get(task.qid, "")

    def _fit_mem0(self, ep: Episode, query: str, hits: Sequence[SearchResult], turn: int) -> list[SearchResult]:
        """The search results (best first) whose mem0 extraction request fits the backend's context window.

        mem0's own system prompt is long (~34,000 characters); the least relevant results are left out
        (never written, counted in ``fit``) until the request plus its answer budget fits.
        """
        window = context_window(self.llm)
        if window is None or not hits:
            return list(hits)
        store = self.store(ep.qid)
        seed = request_seed(ep.qid, turn, "mem0-evidence")
        limit = window - store.memory.config.max_tokens
        render = lambda hs: store.mem0_request(query, hs, ep.task.cutoff, ep.qid, seed)  # noqa: E731
        _, fitted = fit_items(list(hits), render, limit, lambda r: _request_tokens(self.llm, r), self.fit)
        return fitted

    def store(self, qid: str) -> EvidenceMemory:
        if qid not in self.stores:
            self.stores[qid] = EvidenceMemory(self.kind, qid, self.cfg, self.embedder)
        return self.stores[qid]

    def process(self, batch: Sequence[tuple[Episode, str, Sequence[SearchResult]]], turn: int) -> list[str]:
        kept = []
        for ep, query, hits in batch:
            ok = [h for h in hits if h.available_at is not None and h.available_at <= ep.task.cutoff]
            self.dropped += len(hits) - len(ok)  # a provider that ignores the cutoff cannot leak into memory
            self.dropped_by[ep.qid] = self.dropped_by.get(ep.qid, 0) + len(hits) - len(ok)
            kept.append((ep, query, ok))
        completions: list[str | None] = [None] * len(kept)
        digests: list[str | None] = [None] * len(kept)  # mem0: the sent prompts, checked when add replays them
        if self.kind == "mem0" and resolve_extraction(self.cfg.extraction, self.llm) == "llm":
            kept = [(ep, q, self._fit_mem0(ep, q, hs, turn)) for ep, q, hs in kept]
            jobs = [(i, self.store(ep.qid).mem0_request(q, hs, ep.task.cutoff, ep.qid, request_seed(ep.qid, turn, "mem0-evidence")))
                    for i, (ep, q, hs) in enumerate(kept) if hs]
            if jobs:
                try:
                    resps = self.llm.generate([r for _, r in jobs])  # one batched call for every question of the turn
                except BackendError as exc:
                    raise BackendError(
                        f"mem0's extraction prompt (its ~34,000-character system prompt plus the evidence) was rejected "
                        f"by backend {getattr(self.llm, 'name', '?')!r}: {exc}. With a small-context model set "
                        f"[memory_baselines] extraction = \"rule\" or give the model a larger context (llm.local.context)"
                    ) from exc
                from engine.baselines.mem0 import prompt_digest

                for (i, req), resp in zip(jobs, resps):
                    completions[i] = resp.texts[0] if resp.completions else ""
                    digests[i] = prompt_digest(req.messages)
        if self.kind in DOC_KINDS:  # each memory's add job; every step of all questions is ONE batched call
            from engine.baselines.docmem import drive, run_rule

            mode = resolve_extraction(self.cfg.extraction, self.llm)
            jobs = [self.store(ep.qid).doc_job(q, hs, mode, ep.qid, request_seed(ep.qid, turn, self.kind) % (1 << 31),
                                               ep.task.cutoff)
                    for ep, q, hs in kept if hs]
            if mode == "llm":
                drive(jobs, self.llm)
            else:
                for job in jobs:
                    run_rule(job)
        bodies = []
        for (ep, query, hits), completion, digest in zip(kept, completions, digests):
            store = self.store(ep.qid)
            if self.kind not in DOC_KINDS:
                store.write(query, hits, completion, digest)
            found = store.retrieve(query)
            body = store.format(found, self.context_chars)
            ep.evidence.append({"turn": turn, "query": query, "written": [h.doc_id for h in hits],
                                "retrieved": [h.id for h in found], "text": body})
            bodies.append(body)
        return bodies


