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

from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Sequence

from engine.forecast.agent import AgentConfig, Episode, ForecastAgent
from engine.forecast.evidence_memory import EvidenceProcessor, MemoryBaselinesConfig, check_kind
from engine.forecast.outcome_memory import EXPERIENCE_MODES, ExperienceTrack, batch_end
from engine.forecast.search import SearchResult


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
        self.dropped_by: dict[str, int] = {}  # qid -> search results after its cutoff (never written)

    def rollouts(self, tasks: Sequence, bank=()) -> list[Episode]:
        tasks = list(tasks)
        out: list[Episode | None] = [None] * len(tasks)
        remaining = sorted(range(len(tasks)), key=lambda i: (tasks[i].cutoff, i))
        while remaining:
            first = tasks[remaining[0]]
            if self.track is not None:
                self.track.release(first.cutoff, self.llm)
            batch = remaining
            if self.track is not None:  # a batch ends before any queued or in-batch outcome resolves
                batch = remaining[:batch_end([tasks[i].cutoff for i in remaining],
                                             [self.track.resolved_at(tasks[i]) for i in remaining],
                                             [p.resolved_at for p in self.track.pending])]
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
            for qid, n in proc.dropped_by.items():
                self.dropped_by[qid] = self.dropped_by.get(qid, 0) + n
            self.batches.append([t.qid for t in btasks])
            for i, ep in zip(batch, eps):
                out[i] = ep
                store = proc.stores.get(ep.qid)
                self.written[ep.qid] = list(store.written) if store is not None else []
                if self.track is not None:
                    self.track.record(ep, ids.get(ep.qid, ()))
        return out
