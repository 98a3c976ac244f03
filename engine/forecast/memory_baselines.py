"""Memory baselines applied to the retrieved evidence (ForeDreamer paper, section 4 / Table 1, C.2).

The paper compares ForeDreamer with agent-memory systems "applied to process the
evidence retrieved by the search module before producing the final forecast".
Here the four task-agnostic memories of :mod:`engine.baselines` (Mem0 on the
real ``mem0ai`` library, MemRL, ReMe, FLEX) play that role. Modes ``mem0``,
``memrl``, ``reme``, ``flex`` of :class:`~engine.forecast.agent.AgentConfig`
run the same main-agent loop as ForeDreamer (cutoff-aware search, turn budget,
answer format); only the processing of the search results differs:

**Evidence layer (every baseline; scope = one question).** Each search result
is cut into chunks (``chunk_chars``, sentence boundaries, each chunk prefixed
with its source's date, title and url) and written into a memory that belongs
to the question, through the baseline's own ``apply``; the tool result is the
memory's retrieval for the search query, formatted and cut to
``agent.context_chars``:

* Mem0: ``Memory.add(messages, infer=True)`` of the real library, one call per
  (question, search), the items as user messages. The completion it parses is
  mem0's own additive extraction prompt answered by our LLM (one batched call
  for all questions of a turn; ``extraction = "llm"``) or, under the simulated
  backend, a rule-based completion whose facts are the chunks themselves
  (``"rule"``). Retrieval: mem0's ``score_and_rank`` over the snapshot, ``top_k``.
* MemRL: one (intent, experience, Q) row per chunk (intent = experience = the
  chunk, ``Q = q_init``); two-phase retrieval with ``select_k = recall_k = top_k``
  and the Phase-A threshold at cosine 0 (MemRL's 0.5 is calibrated for
  task-to-task similarity; query-to-passage cosines are lower).
* ReMe: one ``{when_to_use, content}`` row per chunk, ``when_to_use`` = the
  query and source title, ``content`` = the chunk; recall by ``when_to_use`` and
  dense rerank with the content, ``top_k``.
* FLEX: one record per chunk (problem = solution = the chunk, marked correct,
  reflection = the source line); retrieval of the ``k`` (3 to 5) most similar.

Why one memory per question: questions run in flight together (one batched
LLM call per turn), and a memory shared by all of them would let a question
read evidence another question retrieved with a LATER cutoff. A per-question
scope is also how mem0 separates sessions (its ``agent_id`` / ``run_id``).

**Experience layer (MemRL, ReMe, FLEX; ``experience = true``).** These three
also learn across episodes from outcomes. One memory per baseline spans the
run: before a question starts, its experience for the question text is
retrieved and placed before the question (the baseline's own ``format``);
after the question is scored, an :class:`~engine.baselines.common.Outcome`
(task = question and category; attempt = forecast, resolution and Brier;
success = Brier below the No Information forecast's; reward +1 / -1;
retrieved = the experience ids shown) is queued. It is observed and applied
(the baseline's outcome update: MemRL's Q update and new memory, ReMe's
extraction and counters, FLEX's record and reflection) only when the question
has resolved: its ``close_time`` (plus ``resolution_delay_h``, 0 by default)
must be at or before the snapshot time of the next questions to run. Questions are run in cutoff order, in batches that end
before any queued or in-batch outcome would resolve, so each question sees
exactly the outcomes resolved before its cutoff (never a later one), and
questions in a batch still share batched LLM calls. Mem0 has no outcome update
(see docs/baselines.md), so it has no experience layer. FutureX items get the
evidence layer only (their resolution time is not in the format).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Sequence

import numpy as np

from engine.baselines.common import Attempt, Hit, Outcome, derive_seed, resolve_extraction, str_array
from engine.config import check
from engine.errors import BackendError, ConfigError
from engine.forecast.agent import MEMORY_MODES, AgentConfig, Episode, ForecastAgent
from engine.forecast.data import Question
from engine.forecast.metrics import brier, uniform_probs
from engine.forecast.search import SearchResult
from engine.llm.base import Request

EXPERIENCE_MODES = ("memrl", "reme", "flex")
ROW_NAMES = {"mem0": "Mem0 (evidence)", "memrl": "MemRL (evidence)", "reme": "ReMe (evidence)",
             "flex": "FLEX (evidence)"}
DISPLAY = {"mem0": "Mem0", "memrl": "MemRL", "reme": "ReMe", "flex": "FLEX"}


@dataclass(frozen=True)
class MemoryBaselinesConfig:
    """``[memory_baselines]``: how the memory baselines process evidence (modes mem0, memrl, reme, flex)."""

    top_k: int = 6  # evidence memories returned per search (FLEX: clipped to its range 3..5)
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

        return ReMeMemory(ReMeConfig(recall_k=max(10, 2 * cfg.top_k), top_k=cfg.top_k, extraction=cfg.extraction),
                          embedder=embedder)
    from engine.baselines.flex import FlexConfig, FlexMemory

    return FlexMemory(FlexConfig(k=min(5, max(3, cfg.top_k)), extraction=cfg.extraction), embedder=embedder)


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

    def mem0_request(self, query: str, hits: Sequence[SearchResult], cutoff: datetime, key: str, seed: int) -> Request:
        """mem0's own additive extraction prompt for these items (system + user), as one request."""
        from engine.baselines.common import cosine_scores, top_k
        from engine.baselines.mem0 import import_mem0

        import_mem0()
        from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, AGENT_CONTEXT_SUFFIX, generate_additive_extraction_prompt
        from mem0.memory.utils import parse_messages

        msgs = _mem0_messages(query, hits)
        parsed = parse_messages(msgs)
        snap = self.memory.snapshot()
        existing = []
        texts = [str(t) for t in snap["memory"].tolist()]
        if texts and self.memory.config.existing_k:
            sims = cosine_scores(np.asarray(snap["embedding"], np.float32), self.embedder.embed([parsed]))[0]
            existing = [{"id": str(i), "text": texts[r]}
                        for i, r in enumerate(top_k(sims.astype(np.float64), self.memory.config.existing_k))]
        user = generate_additive_extraction_prompt(existing_memories=existing, new_messages=parsed, last_k_messages=[],
                                                   current_date=cutoff.date().isoformat())
        return Request(messages=({"role": "system", "content": ADDITIVE_EXTRACTION_PROMPT + AGENT_CONTEXT_SUFFIX},
                                 {"role": "user", "content": user}),
                       max_tokens=self.memory.config.max_tokens, temperature=self.memory.config.temperature,
                       seed=seed, episode=key)

    def write(self, query: str, hits: Sequence[SearchResult], completion: str | None = None) -> None:
        """Write the items through the baseline's ``apply`` (mem0: the library's ``add`` replaying ``completion``)."""
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
        return self.memory.reader(self.memory.snapshot()).retrieve([query])[0]

    def hit_text(self, hit: Hit) -> str:
        if self.kind == "reme":  # ReMe's hit text is "When to use: ...\nExperience: <content>"
            return hit.text.split("\nExperience: ", 1)[-1]
        return hit.text

    def format(self, hits: Sequence[Hit], budget: int) -> str:
        text = "\n".join(f"[{i}] {self.hit_text(h)}" for i, h in enumerate(hits, start=1))
        return text[:budget]


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

    def preamble(self, task) -> str:
        return self.preambles.get(task.qid, "")

    def store(self, qid: str) -> EvidenceMemory:
        if qid not in self.stores:
            self.stores[qid] = EvidenceMemory(self.kind, qid, self.cfg, self.embedder)
        return self.stores[qid]

    def process(self, batch: Sequence[tuple[Episode, str, Sequence[SearchResult]]], turn: int) -> list[str]:
        kept = []
        for ep, query, hits in batch:
            ok = [h for h in hits if h.available_at is not None and h.available_at <= ep.task.cutoff]
            self.dropped += len(hits) - len(ok)  # a provider that ignores the cutoff cannot leak into memory
            kept.append((ep, query, ok))
        completions: list[str | None] = [None] * len(kept)
        if self.kind == "mem0" and resolve_extraction(self.cfg.extraction, getattr(self.llm, "name", "")) == "llm":
            jobs = [(i, self.store(ep.qid).mem0_request(q, hs, ep.task.cutoff, ep.qid, derive_seed(ep.qid, turn, "mem0-evidence")))
                    for i, (ep, q, hs) in enumerate(kept) if hs]
            if jobs:
                try:
                    resps = self.llm.generate([r for _, r in jobs])  # one batched call for every question of the turn
                except BackendError as exc:
                    raise BackendError(
                        f"mem0's extraction prompt (its ~34,000-character system prompt plus the evidence) was rejected "
                        f"by backend {getattr(self.llm, 'name', '?')!r}: {exc}. With a small-context model set "
                        f"[memory_baselines] extraction = \"rule\" or give the model a larger context (llm.context)"
                    ) from exc
                for (i, _), resp in zip(jobs, resps):
                    completions[i] = resp.texts[0] if resp.completions else ""
        bodies = []
        for (ep, query, hits), completion in zip(kept, completions):
            store = self.store(ep.qid)
            store.write(query, hits, completion)
            found = store.retrieve(query)
            body = store.format(found, self.context_chars)
            ep.evidence.append({"turn": turn, "query": query, "written": [h.doc_id for h in hits],
                                "retrieved": [h.id for h in found], "text": body})
            bodies.append(body)
        return bodies


# --- experience layer: outcomes across questions, leak-free ------------------------------------


@dataclass
class _Pending:
    resolved_at: datetime  # close_time + resolution_delay_h
    outcome: Outcome


class ExperienceTrack:
    """One cross-question MemRL / ReMe / FLEX memory fed with outcomes only once they have resolved."""

    def __init__(self, kind: str, cfg: MemoryBaselinesConfig, embedder):
        self.kind = kind
        self.cfg = cfg
        if kind == "memrl":
            from engine.baselines.memrl import MemRLConfig, MemRLMemory

            self.memory = MemRLMemory(MemRLConfig(extraction=cfg.extraction), embedder=embedder)
        elif kind == "reme":
            from engine.baselines.reme import ReMeConfig, ReMeMemory

            self.memory = ReMeMemory(ReMeConfig(extraction=cfg.extraction), embedder=embedder)
        elif kind == "flex":
            from engine.baselines.flex import FlexConfig, FlexMemory

            self.memory = FlexMemory(FlexConfig(extraction=cfg.extraction), embedder=embedder)
        else:
            raise ConfigError(f"experience track needs one of {', '.join(EXPERIENCE_MODES)}, got {kind!r}")
        self.pending: list[_Pending] = []
        self.applied: list[tuple[str, datetime]] = []  # (outcome key, resolution time), in application order

    def resolved_at(self, q) -> datetime | None:
        """When a question's outcome counts as known (None: never, e.g. FutureX items)."""
        if not isinstance(q, Question):
            return None
        return q.close_time + timedelta(hours=self.cfg.resolution_delay_h)

    def release(self, cutoff: datetime, llm) -> int:
        """Observe and apply (one batched call) every queued outcome resolved at or before ``cutoff``."""
        due = sorted((p for p in self.pending if p.resolved_at <= cutoff), key=lambda p: p.resolved_at)
        if not due:
            return 0
        self.pending = [p for p in self.pending if p.resolved_at > cutoff]
        reader = self.memory.reader(self.memory.snapshot())
        self.memory.apply(reader.observe([p.outcome for p in due], llm))
        self.applied += [(p.outcome.key, p.resolved_at) for p in due]
        return len(due)

    def preambles(self, tasks: Sequence) -> tuple[dict, dict]:
        """(qid -> experience section, qid -> retrieved ids) from the current memory."""
        reader = self.memory.reader(self.memory.snapshot())
        hits = reader.retrieve([experience_task(t) for t in tasks])
        text, ids = {}, {}
        for t, hs in zip(tasks, hits):
            ids[t.qid] = tuple(h.id for h in hs)
            body = reader.format(hs).strip()
            if body:
                text[t.qid] = (f"Past experience ({DISPLAY[self.kind]} memory, from forecasts resolved before this "
                               f"question's snapshot):\n{body}")[: self.cfg.experience_chars]
        return text, ids

    def record(self, ep: Episode, retrieved: Sequence[int]) -> None:
        q = ep.task
        if not isinstance(q, Question) or ep.probs is None:
            return
        b, u = brier(ep.probs, q), brier(uniform_probs(q), q)
        success = b < u
        yes = ", ".join(m for m in q.markets if q.outcome.get(m) == 1) or "none"
        seen = ep.evidence[-1]["text"][:300] if ep.evidence else "(no evidence)"
        attempt = (f"Forecast {json.dumps(ep.probs)}; resolved Yes: {yes}; Brier {b:.4f} "
                   f"(No Information {u:.4f}). Evidence used: {' '.join(seen.split())}")
        out = Outcome(key=f"{self.kind}:{q.qid}", seed=0, task=experience_task(q), attempts=(Attempt(attempt, success),),
                      success=success, reward=1.0 if success else -1.0, retrieved=tuple(retrieved))
        self.pending.append(_Pending(self.resolved_at(q), out))


def experience_task(task) -> str:
    """The retrieval text of a question for the experience layer."""
    if isinstance(task, Question):
        return f"{task.text} [{task.category}]"
    return str(getattr(task, "question", "")) or task.qid


# --- runner ------------------------------------------------------------------------------------


class MemoryBaselineRunner:
    """Runs one memory baseline on questions: batches in cutoff order, evidence layer, delayed experience.

    ``visible[qid]`` lists the outcomes (key, resolution time) the experience memory held when
    the question started, ``shown[qid]`` the experience ids put in its prompt, ``written[qid]``
    the search results written into its evidence memory, ``batches`` the qids run together.
    """

    agent_class = ForecastAgent  # a task may run a ForecastAgent subclass (e.g. its own prompts)

    def __init__(self, kind: str, llm, search, agent_cfg: AgentConfig, cfg: MemoryBaselinesConfig | None = None,
                 embedder=None, workspace: str | Path = "."):
        self.kind = check_kind(kind)
        self.llm, self.search = llm, search
        self.agent_cfg = agent_cfg if agent_cfg.mode == kind else replace(agent_cfg, mode=kind)
        self.cfg = cfg or MemoryBaselinesConfig()
        if embedder is None:
            from engine.embed import HashingEmbedder

            embedder = HashingEmbedder(384)
        self.embedder = embedder
        self.workspace = Path(workspace)
        self.track = ExperienceTrack(kind, self.cfg, embedder) if (self.cfg.experience and kind in EXPERIENCE_MODES) else None
        self.visible: dict[str, list[tuple[str, datetime]]] = {}
        self.written: dict[str, list[SearchResult]] = {}
        self.shown: dict[str, tuple[int, ...]] = {}  # qid -> experience memory ids placed in its prompt
        self.batches: list[list[str]] = []
        self.dropped = 0

    def _split(self, tasks, order) -> list[list[int]]:
        """Index batches of ``order`` (cutoff order); a batch ends before any queued or in-batch outcome resolves."""
        out, cur = [], []
        for i in order:
            c = tasks[i].cutoff
            if cur:
                c0 = tasks[cur[0]].cutoff
                queued = any(c0 < p.resolved_at <= c for p in self.track.pending)
                mates = any(self.track.resolved_at(tasks[j]) is not None and self.track.resolved_at(tasks[j]) <= c
                            for j in cur)
                if queued or mates:
                    out.append(cur)
                    cur = []
            cur.append(i)
        if cur:
            out.append(cur)
        return out

    def rollouts(self, tasks: Sequence, bank=()) -> list[Episode]:
        tasks = list(tasks)
        out: list[Episode | None] = [None] * len(tasks)
        remaining = sorted(range(len(tasks)), key=lambda i: (tasks[i].cutoff, i))
        while remaining:
            first = tasks[remaining[0]]
            if self.track is not None:
                self.track.release(first.cutoff, self.llm)
            batch = self._split(tasks, remaining)[0] if self.track is not None else remaining
            remaining = remaining[len(batch):]
            btasks = [tasks[i] for i in batch]
            pre, ids = self.track.preambles(btasks) if self.track is not None else ({}, {})
            for t in btasks:
                self.visible[t.qid] = list(self.track.applied) if self.track is not None else []
                self.shown[t.qid] = tuple(ids.get(t.qid, ()))
            proc = EvidenceProcessor(self.kind, self.cfg, self.embedder, self.llm, self.agent_cfg.context_chars, pre)
            agent = self.agent_class(self.llm, self.search, self.agent_cfg, self.workspace, evidence=proc)
            eps = agent.run(btasks, tuple(bank))
            self.dropped += proc.dropped
            self.batches.append([t.qid for t in btasks])
            for i, ep in zip(batch, eps):
                out[i] = ep
                store = proc.stores.get(ep.qid)
                self.written[ep.qid] = list(store.written) if store is not None else []
                if self.track is not None:
                    self.track.record(ep, ids.get(ep.qid, ()))
        return out
