"""ReMe task memory ("Remember Me, Refine Me"), re-implemented from the original code.

Source: Z. Cao et al., "Remember Me, Refine Me: a dynamic procedural memory
framework for experience-driven agent evolution"; code modelscope/ReMe at commit
4dd90e4c7c341112744ee9e250df10300c5c8677. ReMe runs as a flowllm service with its
own LLM and vector-store clients; its task-memory flows (``reme_ai/config/default.yaml``)
are re-implemented op by op on the engine's batched LLM interface:

* ``summary_task_memory`` = ``trajectory_preprocess_op >> (success_extraction_op |
  failure_extraction_op | comparative_extraction_op) >> memory_validation_op >>
  update_vector_store_op``. Every attempt of an episode is a trajectory with score
  1 (correct) or 0; ``success_threshold`` 1.0 splits them. Success extraction runs
  on EVERY successful trajectory, failure extraction on EVERY failed one, and the
  soft comparison on the highest- against the lowest-scoring trajectory (when their
  scores differ: ``enable_soft_comparison`` true). Each extraction yields 1-3
  ``{when_to_use, experience}`` memories; the validation prompt scores each one and
  only ``is_valid and score >= validation_threshold`` (0.5) are stored. A validation
  answer without a ```json block counts as ``is_valid`` true, ``score`` 0.5 (the
  original's defaults); one that does not parse is rejected.
* ``retrieve_task_memory`` = ``build_query_op >> recall_vector_store_op >>
  rerank_memory_op >> rewrite_memory_op``: recall the ``recall_k`` memories whose
  ``when_to_use`` is most similar to the query (duplicate contents dropped), let the
  LLM rerank them (``enable_llm_rerank`` true; unranked candidates keep their order
  after the ranked ones), keep ``top_k`` (5), and let the LLM rewrite them into one
  context (``enable_llm_rewrite`` true; an unusable answer keeps the formatted
  memories). ``retrieval = "recall"`` skips both LLM steps (the formatted memories
  in recall order); ``retrieval = "dense"`` is the ENGINE's dense rerank
  ``(1 - w) cos(q, when_to_use) + w cos(q, content)`` (a named option, not ReMe's).
* ``record_task_memory`` / ``delete_task_memory`` (the BFCL cookbook's use):
  every retrieved memory gets ``freq += 1`` per episode and ``utility += 1`` when
  the episode succeeded; after each round memories with ``freq >= freq_threshold``
  (5) and ``utility / freq < utility_threshold`` (0.5) are deleted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines.common import (
    Attempt,
    Hit,
    Outcome,
    cosine_scores,
    first_text,
    one_line,
    resolve_extraction,
    str_array,
    texts_of,
    top_k,
)
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.config import check
from engine.errors import InputError
from engine.baselines import prompts as baseline_prompts
from engine.llm.base import LLMBackend, Request
from engine.rounds import request_seed

# The row embedding is the when_to_use vector; the content vector lives in a second table with the same ids.
COLUMNS = {"when_to_use": TEXT, "content": TEXT, "kind": TEXT, "source": TEXT, "score": "f8", "freq": "i8", "utility": "i8"}
KINDS = ("success", "failure", "comparative")
RETRIEVALS = ("llm", "recall", "dense")
_JSON_BLOCK = re.compile(r"```json\s*([\s\S]*?)\s*```")


@codec.data
@dataclass(frozen=True)
class ReMeConfig:
    """ReMe task-memory parameters; defaults from modelscope/ReMe@4dd90e4 (see docs/baselines.md)."""

    recall_k: int = 5  # top_k of the retrieve request (the BFCL cookbook sends 5)
    top_k: int = 5  # rerank_memory_op.top_k
    retrieval: str = "llm"  # "llm" (rerank + rewrite, default.yaml) | "recall" | "dense" (engine option)
    rerank_weight: float = 0.5  # only for retrieval = "dense"
    success_threshold: float = 1.0  # trajectory_preprocess_op
    comparative: bool = True  # comparative_extraction_op.enable_soft_comparison
    validation: bool = True  # memory_validation_op in the summary flow
    validation_threshold: float = 0.5  # memory_validation_op.validation_threshold
    freq_threshold: int = 5  # BFCL cookbook delete_task_memory
    utility_threshold: float = 0.5
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 1024  # engine limit (the service sets none)
    temperature: float = 0.6  # llm.default.params.temperature

    def __post_init__(self):
        check(self.recall_k >= 1, f"reme.recall_k must be >= 1, got {self.recall_k}")
        check(self.top_k >= 1, f"reme.top_k must be >= 1, got {self.top_k}")
        check(self.retrieval in RETRIEVALS, f"reme.retrieval must be one of {', '.join(RETRIEVALS)}, got {self.retrieval!r}")
        check(0.0 <= self.rerank_weight <= 1.0, f"reme.rerank_weight must be in [0, 1], got {self.rerank_weight}")
        check(0.0 <= self.validation_threshold <= 1.0, f"reme.validation_threshold must be in [0, 1], got {self.validation_threshold}")
        check(self.freq_threshold >= 1, f"reme.freq_threshold must be >= 1, got {self.freq_threshold}")
        check(0.0 <= self.utility_threshold <= 1.0, f"reme.utility_threshold must be in [0, 1], got {self.utility_threshold}")
        check(self.extraction in ("auto", "llm", "rule"), f"reme.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"reme.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"reme.temperature must be in [0, 5], got {self.temperature}")


def prune_mask(freq: np.ndarray, utility: np.ndarray, freq_threshold: int, utility_threshold: float) -> np.ndarray:
    """``b1[n]``: rows ``delete_memory_op`` deletes, ``freq >= freq_threshold`` and ``utility / freq < utility_threshold``."""
    freq = np.asarray(freq, dtype=np.float64)
    ratio = np.divide(np.asarray(utility, dtype=np.float64), freq, out=np.ones_like(freq), where=freq > 0)
    return (freq >= freq_threshold) & (ratio < utility_threshold)


def merge_messages(task: str, attempt: str) -> str:
    """A trajectory (the task as the user message, the attempt as the assistant's) as flowllm merges messages."""
    return (f"### step.0 role=user content=\n{task}\n\n"
            f"### step.1 role=assistant content=\n{attempt}\n")


def trajectories(outcome: Outcome, success_threshold: float) -> list[tuple[Attempt, float]]:
    """Every distinct attempt with its score (1 correct, 0 wrong), in attempt order."""
    seen, out = set(), []
    for a in outcome.attempts:
        if (a.text, a.success) in seen:
            continue
        seen.add((a.text, a.success))
        out.append((a, 1.0 if a.success else 0.0))
    return out


def extraction_jobs(outcome: Outcome, cfg: ReMeConfig) -> list[tuple[str, dict]]:
    """(kind, prompt fields) of every extraction ``summary_task_memory`` runs on one episode."""
    trajs = trajectories(outcome, cfg.success_threshold)
    jobs = []
    for a, score in trajs:  # success_extraction_op on every success, failure_extraction_op on every failure
        kind = "success" if score >= cfg.success_threshold else "failure"
        jobs.append((kind, {"task": outcome.task, "attempt": merge_messages(outcome.task, a.text)}))
    if cfg.comparative and len(trajs) >= 2:
        ranked = sorted(trajs, key=lambda t: t[1], reverse=True)  # stable: first of the best, last of the worst
        (hi, hs), (lo, ls) = ranked[0], ranked[-1]
        if hs > ls:
            jobs.append(("comparative", {"higher": merge_messages(outcome.task, hi.text), "lower": merge_messages(outcome.task, lo.text),
                                         "higher_score": f"{hs:.2f}", "lower_score": f"{ls:.2f}"}))
    return jobs


def _steps_of(merged: str) -> str:
    return merged.split("role=assistant content=\n", 1)[-1].strip()


def _task_of(merged: str) -> str:
    return merged.split("role=user content=\n", 1)[-1].split("\n", 1)[0].strip()


def rule_memory(kind: str, fields: dict) -> tuple[str, str]:
    """Rule-based extraction (no LLM): (when_to_use, experience) from templates over the trajectories."""
    if kind == "comparative":
        task = _task_of(fields["higher"])
        return (f"Tasks like: {task}",
                f"Prefer '{one_line(_steps_of(fields['higher']), 200)}' over '{one_line(_steps_of(fields['lower']), 200)}': "
                f"the first scored {fields['higher_score']}, the second {fields['lower_score']}.")
    steps = one_line(_steps_of(fields["attempt"]))
    if kind == "success":
        return f"Tasks like: {fields['task']}", f"An approach that worked: {steps}"
    return f"Tasks like: {fields['task']}", f"An approach that failed, avoid it: {steps}"


def parse_experiences(text: str) -> list[tuple[str, str]]:
    """``parse_json_experience_response``: ``[(when_to_use, experience)]`` (``[]`` when unusable)."""
    parsed = None
    try:
        blocks = _JSON_BLOCK.findall(text or "")
        if blocks:
            parsed = json.loads(blocks[0])
            if isinstance(parsed, list):
                parsed = [d for d in parsed if isinstance(d, dict) and "experience" in d and ("when_to_use" in d or "condition" in d)]
            elif not (isinstance(parsed, dict) and "experience" in parsed and ("when_to_use" in parsed or "condition" in parsed)):
                parsed = json.loads(text)
        else:
            parsed = json.loads(text)
    except (json.JSONDecodeError, TypeError, ValueError):
        return []
    items = [parsed] if isinstance(parsed, dict) else parsed if isinstance(parsed, list) else []
    out = []
    for d in items:
        if not isinstance(d, dict):
            continue
        when = one_line(str(d.get("when_to_use", d.get("condition", ""))), 400)
        exp = one_line(str(d.get("experience", "")), 800)
        if when and exp:  # the original would store an empty memory; it can never help a prompt
            out.append((when, exp))
    return out


def parse_validation(text: str, threshold: float) -> tuple[bool, float]:
    """``MemoryValidationOp``'s parse: (kept, score). No ```json block: is_valid true, score 0.5; bad JSON: rejected."""
    try:
        blocks = _JSON_BLOCK.findall(text or "")
        parsed = json.loads(blocks[0]) if blocks else {}
        if not isinstance(parsed, dict):
            return False, 0.0
        is_valid = parsed.get("is_valid", True)
        score = float(parsed.get("score", 0.5))
    except (json.JSONDecodeError, TypeError, ValueError):
        return False, 0.0
    return bool(is_valid) and score >= threshold, score


def parse_rerank(text: str) -> list[int]:
    """``RerankMemoryOp._parse_rerank_response``: ranked indices from a ```json block, else every number < 100."""
    try:
        blocks = _JSON_BLOCK.findall(text or "")
        if blocks:
            parsed = json.loads(blocks[0])
            if isinstance(parsed, dict) and "ranked_indices" in parsed:
                return [int(i) for i in parsed["ranked_indices"]]
            if isinstance(parsed, list):
                return [int(i) for i in parsed]
        return [int(n) for n in re.findall(r"\b\d+\b", text or "") if int(n) < 100]
    except (json.JSONDecodeError, TypeError, ValueError):
        return []


def apply_rerank(n: int, ranked: Sequence[int]) -> list[int]:
    """Candidate order after a rerank: the ranked valid indices (a repeated index repeats, as in the original),
    then every other candidate in recall order."""
    order = [i for i in ranked if 0 <= i < n]
    return order + [i for i in range(n) if i not in set(order)]


def parse_rewrite(text: str) -> str:
    """``RewriteMemoryOp._parse_json_response(.., "rewritten_context")``: the value, the raw text when not JSON, or ""."""
    blocks = _JSON_BLOCK.findall(text or "")
    try:
        if blocks:
            parsed = json.loads(blocks[0])
            if isinstance(parsed, dict) and "rewritten_context" in parsed:
                return str(parsed["rewritten_context"])
        parsed = json.loads(text)
        if isinstance(parsed, dict) and "rewritten_context" in parsed:
            return str(parsed["rewritten_context"])
    except (json.JSONDecodeError, TypeError, ValueError):
        return (text or "").strip()
    return ""


def format_memories(pairs: Sequence[tuple[str, str]]) -> str:
    """``RewriteMemoryOp._format_memories_for_context``."""
    return "\n".join(f"Memory {i} :\n When to use: {w}\n Content: {c}\n" for i, (w, c) in enumerate(pairs, 1))


def rerank_candidates(pairs: Sequence[tuple[str, str]]) -> str:
    """``RerankMemoryOp._format_candidates_for_rerank``."""
    return "\n---\n".join(f"Candidate {i}:\nCondition: {w}\nExperience: {c}\n" for i, (w, c) in enumerate(pairs))


@codec.data(context=("embedder",))
class ReMeMemory:
    """ReMe task memory: rows (when_to_use, content, kind, score, freq, utility); see the module docstring."""

    name = "reme"

    def __init__(self, config: ReMeConfig | None = None, *, embedder):
        self.config = config or ReMeConfig()
        self.embedder = embedder
        self.table = MemoryTable(COLUMNS, embedder.dim)  # embedding = when_to_use vector (TaskMemory.to_vector_node)
        self.content = MemoryTable({}, embedder.dim)  # same ids, embedding = content vector (dense option only)
        self.pruned = 0
        self.extracted = 0  # memories the extraction produced ...
        self.rejected = 0  # ... and validation rejected

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
        """Counters of retrieved memories, then the validated new memories, in episode order; prune at the end."""
        updates = [u for u in updates if u]
        for u in updates:
            success = bool(np.asarray(u["success"]).reshape(-1)[0])
            rows = self.table.rows(np.unique(np.asarray(u["retrieved"], dtype=np.int64)), strict=False)
            self.table.data["freq"][rows] += 1  # update_memory_freq_op
            if success:
                self.table.data["utility"][rows] += 1  # update_memory_utility_op
            self.extracted += int(np.asarray(u.get("extracted", [0])).reshape(-1)[0])
            self.rejected += int(np.asarray(u.get("rejected", [0])).reshape(-1)[0])
        whens = [t for u in updates for t in texts_of(u.get("when_to_use"))]
        contents = [t for u in updates for t in texts_of(u.get("content"))]
        if whens:
            kinds = [t for u in updates for t in texts_of(u.get("kind"))]
            sources = [t for u in updates for t in texts_of(u.get("source"))]
            scores = [float(s) for u in updates for s in np.asarray(u.get("score", np.full(len(texts_of(u.get("when_to_use"))), np.nan))).reshape(-1)]
            n = len(whens)
            if not (len(contents) == len(kinds) == len(sources) == len(scores) == n):
                raise InputError("reme update columns when_to_use/content/kind/source/score must have equal lengths")
            self.table.append(
                self.embedder.embed(whens), when_to_use=whens, content=contents, kind=kinds, source=sources,
                score=scores, freq=np.zeros(n, np.int64), utility=np.zeros(n, np.int64),
            )
            self.content.append(self.embedder.embed(contents))
        cfg = self.config
        dead = self.table.id[prune_mask(self.table.data["freq"], self.table.data["utility"], cfg.freq_threshold, cfg.utility_threshold)]
        if dead.size:
            self.pruned += self.table.delete(dead)
            self.content.delete(dead)


class ReMeReader:
    """Read-only ReMe retrieval (recall, LLM rerank, LLM rewrite) and summary over one snapshot."""

    retrieves_with_llm = True  # retrieve() takes llm / episodes / seeds (the default retrieval calls the LLM)

    def __init__(self, config: ReMeConfig, embedder, view: TableView, content_embedding: np.ndarray):
        self.config = config
        self.embedder = embedder
        self.view = view
        self.content_embedding = content_embedding

    def _hit(self, row: int, score: float, sim: float) -> Hit:
        v = self.view
        return Hit(int(v.id[row]), f"When to use: {v.text('when_to_use', row)}\nExperience: {v.text('content', row)}", float(score),
                   {"kind": v.text("kind", row), "recall_similarity": float(sim),
                    "when_to_use": v.text("when_to_use", row), "content": v.text("content", row)})

    def recall(self, sims: np.ndarray) -> list[int]:
        """``recall_vector_store_op``: the ``recall_k`` most similar rows by when_to_use, duplicate contents dropped."""
        rows, seen = [], set()
        for r in top_k(sims, self.config.recall_k):
            c = self.view.text("content", int(r))
            if c not in seen:
                seen.add(c)
                rows.append(int(r))
        return rows

    def retrieve(self, tasks: Sequence[str], llm: LLMBackend | None = None, episodes: Sequence[str] | None = None,
                 seeds: Sequence[int] | None = None) -> list[list[Hit]]:
        """Hits per task; with ``retrieval = "llm"`` and an ``llm`` the rerank and rewrite prompts go as two batches.

        The rewritten context (what the prompt shows) rides on the first hit's ``extra["context"]``.
        Without an ``llm`` the "llm" retrieval keeps recall order and the formatted memories.
        """
        cfg = self.config
        if not tasks:
            return []
        if len(self.view) == 0:
            return [[] for _ in tasks]
        qv = self.embedder.embed(list(tasks))
        sim_when = cosine_scores(self.view.embedding, qv).astype(np.float64)
        if cfg.retrieval == "dense":
            sim_content = cosine_scores(self.content_embedding, qv).astype(np.float64)
            w = cfg.rerank_weight
            out = []
            for sw, sc in zip(sim_when, sim_content):
                cand = np.asarray(self.recall(sw), np.int64)
                rerank = (1.0 - w) * sw[cand] + w * sc[cand]  # the engine's dense rerank (not ReMe's)
                order = np.lexsort((np.arange(cand.size), -rerank))[: cfg.top_k]
                out.append([self._hit(int(cand[i]), rerank[i], sw[cand[i]]) for i in order])
            return out
        recalled = [self.recall(s) for s in sim_when]
        use_llm = cfg.retrieval == "llm" and llm is not None
        episodes = list(episodes) if episodes is not None else [None] * len(tasks)
        seeds = list(seeds) if seeds is not None else [0] * len(tasks)
        orders = [list(range(len(r))) for r in recalled]
        if use_llm:
            jobs = [i for i, r in enumerate(recalled) if r]
            reqs = [self._request("reme_rerank", seeds[i], episodes[i], "rerank", tasks[i], query=tasks[i],
                                  candidates=rerank_candidates(self._pairs(recalled[i])), num_candidates=len(recalled[i]))
                    for i in jobs]
            for i, resp in zip(jobs, llm.generate(reqs) if reqs else []):
                orders[i] = apply_rerank(len(recalled[i]), parse_rerank(first_text(resp.texts)))
        out = []
        for i, (s, r) in enumerate(zip(sim_when, recalled)):
            rows = [r[j] for j in orders[i]][: cfg.top_k]
            out.append([self._hit(row, s[row], s[row]) for row in rows])
        if use_llm:
            jobs = [i for i, hs in enumerate(out) if hs]
            reqs = [self._request("reme_rewrite", seeds[i], episodes[i], "rewrite", tasks[i], query=tasks[i], context="",
                                  original=format_memories([(h.extra["when_to_use"], h.extra["content"]) for h in out[i]]))
                    for i in jobs]
            for i, resp in zip(jobs, llm.generate(reqs) if reqs else []):
                text = parse_rewrite(first_text(resp.texts)).strip()
                if text:
                    out[i][0].extra["context"] = text
        return out

    def _pairs(self, rows: Sequence[int]) -> list[tuple[str, str]]:
        return [(self.view.text("when_to_use", r), self.view.text("content", r)) for r in rows]

    def _request(self, prompt: str, seed: int, episode: str | None, tag: str, task: str, **fields) -> Request:
        cfg = self.config
        return Request(messages=({"role": "user", "content": baseline_prompts.render(prompt, **fields)},),
                       max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                       seed=request_seed(seed, "reme", tag, task), episode=episode)

    @staticmethod
    def format(hits: Sequence[Hit]) -> str:
        """The rewritten context when the rewrite ran, else ``_format_memories_for_context``."""
        if not hits:
            return ""
        if hits[0].extra.get("context"):
            return hits[0].extra["context"]
        return format_memories([(h.extra.get("when_to_use", ""), h.extra.get("content", h.text)) for h in hits])

    # --- summary_task_memory -----------------------------------------------------------

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        """Extraction prompts as one batch, then validation prompts of what they produced as a second batch."""
        cfg = self.config
        mode = resolve_extraction(cfg.extraction, llm)
        jobs = [extraction_jobs(o, cfg) for o in outcomes]
        mems: list[list[tuple[str, str, str, str]]] = []  # per outcome: (kind, when, content, source)
        if mode == "llm":
            flat = [(oi, kind, fields) for oi, js in enumerate(jobs) for kind, fields in js]
            reqs = [Request(messages=({"role": "user", "content": baseline_prompts.render(f"reme_{kind}", **fields)},),
                            max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                            seed=request_seed(outcomes[oi].seed, "reme", kind, j), episode=outcomes[oi].key)
                    for j, (oi, kind, fields) in enumerate(flat)]
            resps = llm.generate(reqs) if reqs else []
            mems = [[] for _ in outcomes]
            for (oi, kind, fields), resp in zip(flat, resps):
                found = parse_experiences(first_text(resp.texts))
                source = "llm" if found else "rule-fallback"
                for when, exp in found or [rule_memory(kind, fields)]:
                    mems[oi].append((kind, when, exp, source))
        else:
            mems = [[(kind, *rule_memory(kind, fields), "rule") for kind, fields in js] for js in jobs]
        scores = [[float("nan")] * len(m) for m in mems]
        keep = [[True] * len(m) for m in mems]
        if mode == "llm" and cfg.validation:
            flat = [(oi, mi) for oi, m in enumerate(mems) for mi in range(len(m))]
            reqs = [Request(messages=({"role": "user", "content": baseline_prompts.render(
                        "reme_validation", condition=mems[oi][mi][1], content=mems[oi][mi][2])},),
                        max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                        seed=request_seed(outcomes[oi].seed, "reme", "validation", mi), episode=outcomes[oi].key)
                    for oi, mi in flat]
            for (oi, mi), resp in zip(flat, llm.generate(reqs) if reqs else []):
                ok, score = parse_validation(first_text(resp.texts), cfg.validation_threshold)
                keep[oi][mi], scores[oi][mi] = ok, score
        out = []
        for o, m, k, sc in zip(outcomes, mems, keep, scores):
            kept = [(x, s) for x, ok, s in zip(m, k, sc) if ok]
            out.append({
                "retrieved": np.asarray(o.retrieved, dtype=np.int64),
                "success": np.array([o.success]),
                "when_to_use": str_array(x[1] for x, _ in kept),
                "content": str_array(x[2] for x, _ in kept),
                "kind": str_array(x[0] for x, _ in kept),
                "source": str_array(x[3] for x, _ in kept),
                "score": np.array([s for _, s in kept], dtype=np.float64),
                "extracted": np.array([len(m)], dtype=np.int64),
                "rejected": np.array([len(m) - len(kept)], dtype=np.int64),
            })
        return out
