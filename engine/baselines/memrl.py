"""MemRL: episodic memory with learned utilities (Q-values), re-implemented from the paper.

Source: S. Zhang et al., "MemRL: Self-Evolving Agents via Runtime Reinforcement
Learning on Episodic Memory", arXiv:2601.03192; public code MemTensor/MemRL
(``memp/service/value_driven.py`` RLConfig, ``configs/rl_llb_config.yaml``).
The public code runs on MemOS and an OpenAI-compatible API; it is not a library
we can import, so the algorithm is re-implemented here (see docs/baselines.md).

Memory triplets ``(intent, experience, Q)``; the intent (the task text) is embedded.

* **Two-phase retrieval.** Phase A: candidates with cosine similarity
  ``sim >= delta`` (``sim_threshold`` 0.5), the ``recall_k`` (5) most similar.
  Phase B: rank candidates by
  ``score = w_sim * z(sim) + w_q * clip(z(Q), -c, c)`` (``w_sim = w_q = 0.5``,
  ``c = 3``; z-scores over the candidate set) and keep the ``select_k`` best.
* **Q update** for every memory used in an episode with reward ``r``
  (+1 success, -1 failure):  ``Q <- (1 - alpha) * Q + alpha * r``, ``alpha = 0.3``
  (RLConfig's single-step update with gamma = 0).
* **Memory construction**: each episode adds one memory, intent = task text,
  experience = the trajectory summarised into a procedure ("proceduralization"
  build strategy) by the LLM, or by a rule under the simulated backend; new
  memories start at ``Q = q_init`` (0). A new intent within cosine
  ``add_similarity_threshold`` (0.99) of an existing one is not added again.
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
    str_array,
    texts_of,
    top_k,
    zscore,
)
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.config import check
from engine.baselines import prompts as baseline_prompts
from engine.llm.base import LLMBackend, Request

COLUMNS = {"intent": TEXT, "experience": TEXT, "q": "f8", "visits": "i8", "source": TEXT}


@dataclass(frozen=True)
class MemRLConfig:
    """MemRL parameters (defaults: arXiv 2601.03192 / MemTensor/MemRL rl_config)."""

    sim_threshold: float = 0.5  # delta: Phase-A similarity filter
    recall_k: int = 5  # Phase A: candidates kept after the filter
    select_k: int = 3  # Phase B: memories put in the prompt
    weight_sim: float = 0.5
    weight_q: float = 0.5
    z_clip: float = 3.0
    alpha: float = 0.3  # Q learning rate
    success_reward: float = 1.0
    failure_reward: float = -1.0
    use_outcome_reward: bool = False  # True: r = Outcome.reward (graded feedback, e.g. finance)
    q_init: float = 0.0
    add_similarity_threshold: float = 0.99
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 256
    temperature: float = 0.0

    def __post_init__(self):
        check(-1.0 <= self.sim_threshold <= 1.0, f"memrl.sim_threshold must be in [-1, 1], got {self.sim_threshold}")
        check(self.recall_k >= 1, f"memrl.recall_k must be >= 1, got {self.recall_k}")
        check(1 <= self.select_k <= self.recall_k, f"memrl.select_k must be in [1, recall_k={self.recall_k}], got {self.select_k}")
        check(self.weight_sim >= 0 and self.weight_q >= 0, f"memrl.weight_sim/weight_q must be >= 0, got {self.weight_sim}, {self.weight_q}")
        check(self.z_clip > 0, f"memrl.z_clip must be > 0, got {self.z_clip}")
        check(0.0 < self.alpha <= 1.0, f"memrl.alpha must be in (0, 1], got {self.alpha}")
        check(self.extraction in ("auto", "llm", "rule"), f"memrl.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"memrl.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"memrl.temperature must be in [0, 5], got {self.temperature}")


def q_update(q: float, reward: float, alpha: float) -> float:
    """MemRL's single-step utility update: ``Q <- (1 - alpha) Q + alpha r``."""
    return (1.0 - alpha) * q + alpha * reward


def rank_candidates(
    sim: np.ndarray, q: np.ndarray, weight_sim: float, weight_q: float, z_clip: float
) -> tuple[np.ndarray, np.ndarray]:
    """Phase-B order of candidates ``sim f8[m]``, ``q f8[m]``: (order i8[m] best first, score f8[m]).

    ``score = weight_sim * z(sim) + weight_q * clip(z(q), -z_clip, z_clip)``; ties keep Phase-A order.
    """
    score = weight_sim * zscore(sim) + weight_q * np.clip(zscore(q), -z_clip, z_clip)
    order = np.lexsort((np.arange(score.shape[0]), -score))
    return order.astype(np.int64), score


def rule_experience(outcome: Outcome) -> str:
    """Rule-based proceduralization (simulated backend): the task, the outcome and the best attempt."""
    attempt = (outcome.successes or list(outcome.attempts) or [None])[0]
    text = one_line(attempt.text) if attempt is not None else "(no attempt)"
    verdict = "Succeeded" if outcome.success else "Failed"
    return f"Task: {outcome.task}. {verdict} with: {text}"


class MemRLMemory:
    """MemRL memory: a table of (intent, experience, Q) rows; see the module docstring."""

    name = "memrl"

    def __init__(self, config: MemRLConfig | None = None, *, embedder):
        self.config = config or MemRLConfig()
        self.embedder = embedder
        self.table = MemoryTable(COLUMNS, embedder.dim)

    def snapshot(self) -> dict[str, np.ndarray]:
        return self.table.snapshot()

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "MemRLReader":
        return MemRLReader(self.config, self.embedder, TableView(snapshot, COLUMNS, self.embedder.dim))

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Q updates of used memories, then new memories, update by update (episode order)."""
        cfg = self.config
        updates = [u for u in updates if u]
        intents = [t for u in updates for t in texts_of(u.get("intent"))]
        vecs = self.embedder.embed(intents) if intents else np.zeros((0, self.table.dim), np.float32)
        at = 0
        for u in updates:
            reward = float(np.asarray(u["reward"]).reshape(-1)[0])
            used = np.unique(np.asarray(u.get("used", np.zeros(0, np.int64)), dtype=np.int64))
            rows = self.table.rows(used, strict=False)  # a used memory may have been deduplicated away: skip it
            q = self.table.data["q"]
            for r in rows:
                q[r] = q_update(q[r], reward, cfg.alpha)  # MemRL Q update
                self.table.data["visits"][r] += 1
            new_intents = texts_of(u.get("intent"))
            new_exps = texts_of(u.get("experience"))
            sources = texts_of(u.get("source"))
            for j, (intent, exp, src) in enumerate(zip(new_intents, new_exps, sources)):
                v = vecs[at + j : at + j + 1]
                if len(self.table) and float((self.table.embedding @ v[0]).max()) >= cfg.add_similarity_threshold:
                    continue
                self.table.append(v, intent=[intent], experience=[exp], q=[cfg.q_init], visits=[0], source=[src])
            at += len(new_intents)


class MemRLReader:
    """Read-only MemRL retrieval and extraction over one snapshot."""

    def __init__(self, config: MemRLConfig, embedder, view: TableView):
        self.config = config
        self.embedder = embedder
        self.view = view

    def retrieve(self, tasks: Sequence[str]) -> list[list[Hit]]:
        cfg = self.config
        if not tasks:
            return []
        if len(self.view) == 0:
            return [[] for _ in tasks]
        sims = cosine_scores(self.view.embedding, self.embedder.embed(list(tasks))).astype(np.float64)
        q_all = self.view.data["q"].astype(np.float64)
        out = []
        for s in sims:
            cand = top_k(s, cfg.recall_k, s >= cfg.sim_threshold)  # Phase A
            order, score = rank_candidates(s[cand], q_all[cand], cfg.weight_sim, cfg.weight_q, cfg.z_clip)  # Phase B
            hits = []
            for i in order[: cfg.select_k]:
                row = int(cand[i])
                hits.append(
                    Hit(
                        int(self.view.id[row]),
                        self.view.text("experience", row),
                        float(score[i]),
                        {"similarity": float(s[row]), "q": float(q_all[row])},
                    )
                )
            out.append(hits)
        return out

    @staticmethod
    def format(hits: Sequence[Hit]) -> str:
        if not hits:
            return ""
        return "\n".join(f"{i + 1}. {h.text}" for i, h in enumerate(hits))

    def requests(self, outcomes: Sequence[Outcome], mode: str) -> list[list[Request]]:
        if mode == "rule":
            return [[] for _ in outcomes]
        cfg = self.config
        out = []
        for o in outcomes:
            attempt = (o.successes or list(o.attempts) or [None])[0]
            prompt = baseline_prompts.render(
                "memrl_procedure",
                task=o.task,
                outcome="success" if o.success else "failure",
                trajectory=attempt.text if attempt is not None else "(no attempt)",
            )
            out.append([Request(prompt=prompt, max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=derive_seed(o.seed, "memrl", o.task), episode=o.key)])
        return out

    def updates(self, outcomes: Sequence[Outcome], completions: Sequence[Sequence[list[str]]], mode: str) -> list[dict]:
        cfg = self.config
        out = []
        for o, comps in zip(outcomes, completions):
            text, source = "", mode
            if mode == "llm":
                text = one_line(first_text(comps[0]) if comps else "", 1000)
                if not text:
                    source = "rule-fallback"
            if not text:
                text = rule_experience(o)
            reward = o.reward if cfg.use_outcome_reward else (cfg.success_reward if o.success else cfg.failure_reward)
            out.append(
                {
                    "used": np.asarray(o.retrieved, dtype=np.int64),
                    "reward": np.array([reward], dtype=np.float64),
                    "intent": str_array([o.task]),
                    "experience": str_array([text]),
                    "source": str_array([source if mode == "llm" else "rule"]),
                }
            )
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        return observe_with(self, outcomes, llm, self.config.extraction)

