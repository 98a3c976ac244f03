"""The ForeDreamer main agent: multi-turn search-and-reason loop (paper 2.3, eqs. 1 to 3; Prompts 1 to 4).

For every question in flight, turn ``t = 1..T`` (``T = turns``, default 2)
is one batched LLM call across all questions. Before the last turn the agent
may call ``web_search_and_process`` once (only the first call of a reply is
executed): the cutoff-aware search returns top-``k`` items, each is written to
its item folder, the memory-processing subagent turns them into factual memory
(all items of all questions batched together), and the memory, cut to
``context_chars``, is returned as the tool result. The last turn carries the
final-turn message and answers without tools (eq. 3).

Answers: Prophet Arena JSON (exact outcome names, each probability in [0, 1])
or a FutureX ``\\boxed{}`` answer. A malformed answer gets ``answer_retries``
repair turns; if it is still unusable the question is scored with the No
Information (uniform) forecast (FutureX: counted wrong) and flagged
``failed``. Nothing in the loop raises on model output.

``force_first_search`` (off by default) writes the first turn's search call
with the question text instead of asking the model, for models too small to
call tools; the call is recorded in the transcript like a model's.

Modes: ``"foredreamer"`` (above), ``"full_text"`` (one turn, the full text of
the top-k cutoff-filtered search results for the question in the prompt, no
subagent: the paper's Full Text row; the question's own sources only when no
search provider is given), ``"rag"`` (one
turn, the top-k cutoff-filtered search results' raw content, no subagent),
``"no_information"`` (one turn, the question alone: no search, no sources, no
experience; the paper's No Information row, Tables 6, S9, S10),
``"market_informed"`` (the engine's own option beyond the paper: ForeDreamer with
the market's implied probabilities at the snapshot stated as a prior), and
the memory baselines ``"mem0"``, ``"memrl"``, ``"reme"``, ``"flex"`` and the
paper's own ``"hipporag"``, ``"memoryos"``, ``"amem"``, ``"lightmem"``, ``"langmem"`` (paper
C.2: "applied to process the evidence retrieved by the search module"): the
same search loop as ``"foredreamer"``, but the search results go to an
evidence processor (``evidence=``, see :mod:`engine.forecast.memory_baselines`)
instead of the MemGuide subagent, and its ``preamble(task)`` (cross-question
experience) is placed before the question.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from engine.config import check
from engine.errors import InputError
from engine.forecast import prompts
from engine.forecast.data import FutureXItem, Question
from engine.forecast.metrics import uniform_probs
from engine.forecast.search import SearchProvider
from engine.forecast.subagent import write_item
from engine.forecast.toolcalls import parse_boxed, parse_prophet_answer, parse_tool_calls
from engine.llm.base import Request
from engine.llm.tokens import count_prompt_tokens
from engine.llm.structured import prophet_forecast

MEMORY_MODES = ("mem0", "memrl", "reme", "flex",  # memory baselines applied to the retrieved evidence
                "hipporag", "memoryos", "amem", "lightmem", "langmem",  # the ForeDreamer paper's own (LangMem: its
                "langmem_reimpl")  # library; the other four and langmem_reimpl: re-implementations)
SEARCH_MODES = ("foredreamer", "market_informed") + MEMORY_MODES  # modes that run the multi-turn search loop
MODES = ("foredreamer", "full_text", "rag", "no_information", "market_informed") + MEMORY_MODES
MARKET_PRIOR_NOTE = ("Beyond the evidence, use the market's implied probabilities at the snapshot as your prior "
                     "and move away from them only as far as the evidence justifies.")
NO_SEARCH_NOTE = "Search is disabled in this run: forecast from the question alone."



_ITEM_HEADER = re.compile(r"\[\s*(turn\s*\d+\s*_\s*item\s*\d+)\s*\]", re.IGNORECASE)


def fence_item_text(text: str) -> str:
    """A memory tool's text as data in the agent's prompt: every ``[turnX_itemY]`` inside it becomes
    ``(turnX_itemY)``, so a tool (or a document it read) cannot open a block that passes for another item's
    evidence; the engine's own header is the only bracketed one."""
    return _ITEM_HEADER.sub(lambda m: "(" + "".join(m.group(1).split()) + ")", text.strip())

@dataclass(frozen=True)
class AgentConfig:
    """``[forecast.agent]``: the main agent's budget."""

    mode: str = "foredreamer"  # foredreamer | full_text | rag | no_information | mem0 | memrl | reme | flex
    turns: int = 2
    top_k: int = 4
    context_chars: int = 30_000  # per search turn (paper C.4: 30K)
    max_tokens: int = 512
    temperature: float = 0.3
    answer_retries: int = 1
    # Issue the first search with the question text instead of asking the model (off by default; lets a
    # model too small to call tools still exercise search, subagent and MemTools). Reported in the output.
    force_first_search: bool = False

    def __post_init__(self):
        check(self.mode in MODES, f"agent.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        check(self.turns >= 1, f"agent.turns must be >= 1, got {self.turns}")
        check(self.top_k >= 1, f"agent.top_k must be >= 1, got {self.top_k}")
        check(self.context_chars >= 200, f"agent.context_chars must be >= 200, got {self.context_chars}")
        check(self.max_tokens >= 16, f"agent.max_tokens must be >= 16, got {self.max_tokens}")
        check(self.answer_retries >= 0, f"agent.answer_retries must be >= 0, got {self.answer_retries}")


@dataclass
class Episode:
    """One question's rollout: messages, factual memories, answer, outcome flags."""

    task: object  # Question | FutureXItem
    messages: list = field(default_factory=list)
    searches: list = field(default_factory=list)  # (turn, query, [item_dir, ...])
    memories: list = field(default_factory=list)  # ItemMemory
    evidence: list = field(default_factory=list)  # memory-baseline modes: one record per processed search
    raw_answer: str = ""
    probs: dict | None = None
    answer: str | None = None
    failed: bool = False
    problem: str = ""
    done: bool = False
    # memory text in the conversation (experience preamble, processed evidence; engine.memory_budget):
    # its tokens now, and summed over the main-agent prompts sent
    memory_tokens: int = 0
    experience_tokens: int = 0
    prompts: int = 0

    @property
    def experience_per_prompt(self) -> float:
        """Mean memory tokens per main-agent prompt (0 when none was sent)."""
        return self.experience_tokens / self.prompts if self.prompts else 0.0

    @property
    def qid(self) -> str:
        return self.task.qid

    def correct(self) -> bool:
        return isinstance(self.task, FutureXItem) and self.task.correct(self.answer)

    def summary(self, max_chars: int = 4000) -> str:
        """Main-agent rollout summary for the evolution prompts (no subagent logs)."""
        log = "\n".join(f"[{m['role']}] {m['content'][:600]}" for m in self.messages[1:])
        return log[-max_chars:]


def _sources_text(q: Question, budget: int) -> str:
    parts, used = [], 0
    for s in q.sources:
        block = f"[{s.ranking}] {s.title} ({s.url}): {s.summary}"
        if used + len(block) > budget:
            block = block[: max(0, budget - used)]
        if block:
            parts.append(block)
        used += len(block)
        if used >= budget:
            break
    return "\n".join(parts)


def _task_text(task) -> str:
    return task.text if isinstance(task, Question) else task.question


class ForecastAgent:
    """Runs episodes for many questions with batched LLM calls."""

    def __init__(self, llm, search: SearchProvider | None, cfg: AgentConfig, workspace: str | Path,
                 processor_factory: Callable | None = None, evidence=None):
        self.llm = llm
        self.search = search
        self.cfg = cfg
        self.workspace = Path(workspace)
        self.processor_factory = processor_factory  # () -> MemoryProcessor
        self.fallback_items = 0
        # memory-baseline modes: preamble(task) -> str and process([(ep, query, hits)], turn) -> [tool result body]
        self.evidence = evidence
        if cfg.mode in MEMORY_MODES and evidence is None:
            raise InputError(f"agent.mode {cfg.mode!r} needs an evidence processor (ForecastAgent(..., evidence=...)); "
                             "use engine.forecast.memory_baselines.MemoryBaselineRunner")

    # ------------------------------------------------------------------ prompts
    def _task_prompt(self, task, bank) -> str:
        if isinstance(task, FutureXItem):
            if self.cfg.mode == "no_information":
                return prompts.futurex_prompt(task, (), NO_SEARCH_NOTE)
            return self._with_preamble(task, prompts.futurex_prompt(task, bank))
        if self.cfg.mode == "full_text":  # the paper's Full Text: the search results' full text, no subagent
            text = self._rag_context(task) if self.search is not None else _sources_text(task, self.cfg.context_chars)
            return prompts.prophet_prompt(task, bank, text, "Search is disabled in this run: use the evidence below.")
        if self.cfg.mode == "rag":
            return prompts.prophet_prompt(task, bank, self._rag_context(task),
                                          "Search is disabled in this run: use the retrieved evidence below.")
        if self.cfg.mode == "no_information":  # paper Tables 6, S9, S10: the model alone, no search, no sources
            return prompts.prophet_prompt(task, (), "", NO_SEARCH_NOTE)
        if self.cfg.mode == "market_informed":  # the engine's own option, not the paper's: market prices as a prior
            return prompts.prophet_prompt(task, bank, "", MARKET_PRIOR_NOTE, market_prior=True)
        return self._with_preamble(task, prompts.prophet_prompt(task, bank))

    def _with_preamble(self, task, prompt: str) -> str:
        """Insert the evidence processor's cross-question experience section before the question."""
        pre = self.evidence.preamble(task).strip() if (self.evidence is not None and self.cfg.mode in MEMORY_MODES) else ""
        if not pre:
            return prompt
        for marker in ("\nQuestion:\n", "\nEvent to predict:\n"):
            if marker in prompt:
                return prompt.replace(marker, f"\n{pre}\n{marker}", 1)
        return f"{pre}\n\n{prompt}"

    def _rag_context(self, q) -> str:
        if self.search is None:
            return ""
        hits = self.search.search(q.text, q.cutoff, self.cfg.top_k)
        text = "\n".join(f"[{h.available_at.date()}] {h.title} ({h.url}): {h.content}" for h in hits)
        return text[: self.cfg.context_chars]

    def _start(self, task, bank) -> Episode:
        ep = Episode(task)
        cutoff = task.cutoff.isoformat()
        system = prompts.main_system(cutoff) if self.cfg.mode in SEARCH_MODES else (
            "You are a careful forecaster. Answer in the required format.")
        ep.messages = [{"role": "system", "content": system}, {"role": "user", "content": self._task_prompt(task, bank)}]
        if self.evidence is not None and self.cfg.mode in MEMORY_MODES:  # the preamble _with_preamble inserted
            ep.memory_tokens += count_prompt_tokens(self.evidence.preamble(task).strip())
        return ep

    # ------------------------------------------------------------------ parsing
    def _accept(self, ep: Episode, text: str) -> bool:
        if isinstance(ep.task, FutureXItem):
            ans = parse_boxed(text)
            if ans is None:
                ep.problem = "no \\boxed{...} answer was found"
                return False
            ep.answer = ans
            return True
        probs, problem = parse_prophet_answer(text, ep.task.markets)
        if probs is None:
            ep.problem = problem
            return False
        ep.probs = probs
        return True

    def _answer_tokens(self, markets) -> int:
        """``agent.max_tokens``, or more where the answer itself needs more: a question of many markets has a
        JSON answer longer than the limit (every probability with 4 decimals, counted by the model's own
        tokenizer, plus a quarter for whitespace), and an answer cut short is unusable."""
        from engine.memory_budget import token_counter

        full = json.dumps({"probabilities": {m: 0.1234 for m in markets}})
        return max(self.cfg.max_tokens, int(token_counter(self.llm)(full) * 1.25) + 8)

    def _generate(self, eps: list[Episode], turn: int, answer: bool = False) -> list[str]:
        # answer turns (the last turn, repairs) carry the answer's schema: backends that can constrain
        # decoding do (engine.llm.structured); the parser below stays the judge either way
        for ep in eps:
            ep.prompts += 1
            ep.experience_tokens += ep.memory_tokens
        reqs = []
        for ep in eps:
            shaped = answer and isinstance(ep.task, Question)
            reqs.append(Request(messages=tuple(ep.messages), temperature=self.cfg.temperature, seed=turn, episode=ep.qid,
                                max_tokens=self._answer_tokens(ep.task.markets) if shaped else self.cfg.max_tokens,
                                constraint=prophet_forecast(ep.task.markets) if shaped else None))
        resps = self.llm.generate(reqs)
        return [r.texts[0] if r.completions else "" for r in resps]

    # ------------------------------------------------------------------ loop
    def run(self, tasks: Sequence, bank=()) -> list[Episode]:
        eps = [self._start(t, bank) for t in tasks]
        turns = self.cfg.turns if self.cfg.mode in SEARCH_MODES else 1
        for turn in range(1, turns + 1):
            active = [ep for ep in eps if not ep.done]
            if not active:
                break
            final = turn == turns
            if final:
                for ep in active:
                    ep.messages.append({"role": "user", "content": prompts.FINAL_TURN})
            wants: list[tuple[Episode, str]] = []
            if turn == 1 and not final and self.cfg.force_first_search and self.cfg.mode in SEARCH_MODES:
                for ep in active:
                    call = {"name": prompts.SEARCH_TOOL, "arguments": {"query": _task_text(ep.task)}}
                    ep.messages.append({"role": "assistant", "content": f"<tool_call>{json.dumps(call)}</tool_call>"})
                    wants.append((ep, _task_text(ep.task)))
                self._search_and_process(wants, turn)
                continue
            texts = self._generate(active, turn, answer=final)
            for ep, text in zip(active, texts):
                ep.messages.append({"role": "assistant", "content": text})
                ep.raw_answer = text
                calls = [c for c in parse_tool_calls(text) if c[0] == prompts.SEARCH_TOOL]
                if not final and calls:
                    query = str(calls[0][1].get("query", "") or "").strip() or _task_text(ep.task)
                    wants.append((ep, query))
                elif self._accept(ep, text):
                    ep.done = True
                elif not final:
                    ep.messages.append({"role": "user", "content": "Continue: search once more or answer."})
            if wants:
                self._search_and_process(wants, turn)
        self._repair([ep for ep in eps if not ep.done], turns)
        return eps

    def _repair(self, eps: list[Episode], turn: int) -> None:
        for r in range(self.cfg.answer_retries):
            eps = [ep for ep in eps if not ep.done]
            if not eps:
                break
            for ep in eps:
                ep.messages.append({"role": "user", "content": prompts.repair_prompt(ep.problem)})
            for ep, text in zip(eps, self._generate(eps, turn + 1 + r, answer=True)):
                ep.messages.append({"role": "assistant", "content": text})
                ep.raw_answer = text
                ep.done = self._accept(ep, text)
        for ep in eps:
            if not ep.done:
                ep.failed = True
                ep.done = True
                if isinstance(ep.task, Question):
                    ep.probs = uniform_probs(ep.task)

    def _search_and_process(self, wants: list[tuple[Episode, str]], turn: int) -> None:
        if self.evidence is not None and self.cfg.mode in MEMORY_MODES:
            self._search_into_memory(wants, turn)
            return
        per_ep: list[tuple[Episode, list]] = []
        all_dirs = []
        for ep, query in wants:
            hits = self.search.search(query, ep.task.cutoff, self.cfg.top_k) if self.search else []
            pa = isinstance(ep.task, Question)
            reqs = ("One probability in [0, 1] for each listed outcome: " + "; ".join(ep.task.markets)) if pa \
                else ep.task.answer_requirements
            dirs = [write_item(self.workspace, ep.qid, turn, k, h, query, _task_text(ep.task), reqs, ep.task.cutoff,
                               "prophet_arena" if pa else "futurex")
                    for k, h in enumerate(hits, start=1)]
            ep.searches.append((turn, query, [str(d) for d in dirs]))
            per_ep.append((ep, dirs))
            all_dirs += dirs
        mems = self.processor_factory().process(all_dirs) if (all_dirs and self.processor_factory) else []
        by_dir = {m.item_dir: m for m in mems}
        self.fallback_items += sum(m.fallback for m in mems)
        for ep, dirs in per_ep:
            blocks, used = [], 0
            for d in dirs:
                m = by_dir.get(d)
                if m is None or not m.ok:
                    continue
                ep.memories.append(m)
                block = f"[{d.name}] {fence_item_text(m.text)}"
                block = block[: max(0, self.cfg.context_chars - used)]
                used += len(block)
                if block:
                    blocks.append(block)
            ep.memory_tokens += count_prompt_tokens("\n\n".join(blocks))  # the memory subagent's output
            body = "\n\n".join(blocks) if blocks else "(no evidence found before the cutoff)"
            ep.messages.append({"role": "user", "content": f"Tool result ({prompts.SEARCH_TOOL}):\n{body}"})

    def _search_into_memory(self, wants: list[tuple[Episode, str]], turn: int) -> None:
        """Memory-baseline modes: the evidence processor writes the hits into its memory and returns its retrieval."""
        batch = []
        for ep, query in wants:
            hits = self.search.search(query, ep.task.cutoff, self.cfg.top_k) if self.search else []
            ep.searches.append((turn, query, [f"doc{h.doc_id}" for h in hits]))
            batch.append((ep, query, hits))
        bodies = self.evidence.process(batch, turn)
        for (ep, _, _), body in zip(batch, bodies):
            body = body.strip()[: self.cfg.context_chars]
            ep.memory_tokens += count_prompt_tokens(body)  # the memory baseline's retrieval
            body = body or "(no evidence found before the cutoff)"
            ep.messages.append({"role": "user", "content": f"Tool result ({prompts.SEARCH_TOOL}):\n{body}"})
