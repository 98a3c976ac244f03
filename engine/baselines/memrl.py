"""MemRL: episodic memory with learned utilities (Q-values), re-implemented from the original code.

Source: S. Zhang et al., "MemRL: Self-Evolving Agents via Runtime Reinforcement
Learning on Episodic Memory", arXiv:2601.03192; code MemTensor/MemRL at commit
7c3beba1244d707b74207b494be254f391819e09 (``memrl/service/memory_service.py``
``retrieve_query`` / ``add_memories``, ``memrl/service/updater.py``
``AdjustmentUpdater``, ``memrl/service/builders.py`` ``ProceduralizationBuilder``,
``memrl/service/value_driven.py`` ``QValueUpdater``, ``memrl/providers/llm.py``
``generate_script``, ``memrl/run/hle_runner.py``). The code runs on MemOS and an
OpenAI-compatible API, not as a library, so the algorithm is re-implemented.

Parameters: ONE set, ``configs/rl_hle_config.yaml`` (Humanity's Last Exam: single-shot
reasoning questions judged right or wrong, the closest of the original's tasks to the
Game of 24) read through ``memrl/run/run_hle.py`` and ``hle_runner.py``; see
docs/baselines.md for each value and its line.

* **Keys.** A memory is filed under a *query key* (a task text, embedded). A new
  task whose best retrieved key has cosine ``>= add_similarity_threshold`` (0.90)
  is attached to that key; otherwise its text becomes a new key
  (``add_memories``). A memory is never dropped.
* **Retrieval** (``retrieve_query``): keys with cosine ``>= sim_threshold`` (0.5),
  the ``recall_k`` (``k_retrieve`` 5) most similar; every memory filed under them
  is a candidate; candidates with ``Q < q_min_threshold`` (-10) are dropped;
  ``score = w_sim * (sim - mu) / sigma + w_q * clip((Q - mean_Q) / std_Q, -3, 3)``
  with the config's FIXED similarity statistics ``mu`` 0.18568, ``sigma`` 0.09408
  (``sim_norm_mean`` / ``sim_norm_std``) and the Q statistics of the candidate set
  (population std; 1 for a single candidate or zero spread), as the original.
  The ``select_k`` (``topk`` 3) best go into the prompt (``epsilon`` 0: greedy).
* **Memory construction** (``AdjustmentUpdater``, build ``proceduralization``):
  a success stores ``"Task: T\\n\\nSCRIPT:\\n<script>\\n\\nTRAJECTORY:\\n<trajectory>"``
  (the script written by the LLM from the trajectory); a failure stores
  ``"TASK REFLECTION:\\nTask: T\\n\\nWhat went wrong:\\n<reflection>\\n\\nFailed approach:\\n<trajectory>\\n"``.
  The trajectory is the HLE runner's ``"QUESTION\\n<task>\\n\\nSOLUTION\\n<answer>\\n"``.
  New memories start at ``Q = 1`` (success) or ``0`` (failure): ``hle_runner.py``'s metadata.
* **Q update** (``update_values`` + ``QValueUpdater.update``) of every memory put in
  the episode's prompt: ``Q <- (1 - alpha) Q + alpha r``, ``alpha`` 0.3, ``gamma`` 0,
  ``r`` = +1 success / -1 failure.
* **Prompt block** (``hle_runner._build_memory_context``): the selected memories'
  contents under ``=== Successful Memories ===`` and ``=== Failed Memories (for caution) ===``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines.common import (
    Hit,
    Outcome,
    cosine_scores,
    first_text,
    observe_with,
    one_line,
    str_array,
    texts_of,
    top_k,
)
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.config import check
from engine.baselines import prompts as baseline_prompts
from engine.errors import InputError
from engine.llm.base import LLMBackend, Request
from engine.rounds import request_seed

KEY_COLUMNS = {"text": TEXT}
MEM_COLUMNS = {
    "key": "i8",  # id of the query key the memory is filed under
    "kind": TEXT,  # "procedure" (success) | "adjustment" (failure reflection), the original's metadata type
    "content": TEXT,  # the original's full_content: what the prompt shows
    "script": TEXT,
    "trajectory": TEXT,
    "success": "i8",
    "q": "f8",
    "visits": "i8",
    "source": TEXT,
}
KINDS = ("procedure", "adjustment")


@codec.data
@dataclass(frozen=True)
class MemRLConfig:
    """MemRL parameters; defaults are MemTensor/MemRL@7c3beba ``configs/rl_hle_config.yaml`` (HLE runner)."""

    sim_threshold: float = 0.5  # rl_config.sim_threshold (RLConfig default; hle_runner passes it to retrieve_query)
    recall_k: int = 5  # memory.k_retrieve: query keys recalled
    select_k: int = 3  # rl_config.topk: memories put in the prompt
    sim_norm_mean: float = 0.1856827586889267  # memory.sim_norm_mean (fixed similarity statistics)
    sim_norm_std: float = 0.09407906234264374  # memory.sim_norm_std
    weight_sim: float = 0.5
    weight_q: float = 0.5
    z_clip: float = 3.0  # memory_service._normalize_q clips z(Q) to [-3, 3]
    q_min_threshold: float = -10.0  # rl_config.q_min_threshold
    alpha: float = 0.3  # Q learning rate
    gamma: float = 0.0  # single-step credit (next_max_q is never passed)
    success_reward: float = 1.0
    failure_reward: float = -1.0
    use_outcome_reward: bool = False  # engine option: r = Outcome.reward (graded feedback, e.g. finance)
    q_init_success: float = 1.0  # hle_runner metadata q_value for a solved task
    q_init_failure: float = 0.0  # ... and for an unsolved one
    add_similarity_threshold: float = 0.90  # memory.add_similarity_threshold: attach to an existing key
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 512  # engine limit (the original passes the model's own limit, 65,536 for HLE)
    temperature: float = 0.6  # llm.temperature of rl_hle_config.yaml (generate_script uses it)
    reflection_temperature: float = 0.3  # updater._generate_reflection

    def __post_init__(self):
        check(-1.0 <= self.sim_threshold <= 1.0, f"memrl.sim_threshold must be in [-1, 1], got {self.sim_threshold}")
        check(self.recall_k >= 1, f"memrl.recall_k must be >= 1, got {self.recall_k}")
        check(self.select_k >= 1, f"memrl.select_k must be >= 1, got {self.select_k}")
        check(self.sim_norm_std > 0, f"memrl.sim_norm_std must be > 0, got {self.sim_norm_std}")
        check(self.weight_sim >= 0 and self.weight_q >= 0, f"memrl.weight_sim/weight_q must be >= 0, got {self.weight_sim}, {self.weight_q}")
        check(self.z_clip > 0, f"memrl.z_clip must be > 0, got {self.z_clip}")
        check(0.0 < self.alpha <= 1.0, f"memrl.alpha must be in (0, 1], got {self.alpha}")
        check(0.0 <= self.gamma <= 1.0, f"memrl.gamma must be in [0, 1], got {self.gamma}")
        check(-1.0 <= self.add_similarity_threshold <= 1.0, f"memrl.add_similarity_threshold must be in [-1, 1], got {self.add_similarity_threshold}")
        check(self.extraction in ("auto", "llm", "rule"), f"memrl.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"memrl.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"memrl.temperature must be in [0, 5], got {self.temperature}")
        check(0.0 <= self.reflection_temperature <= 5.0, f"memrl.reflection_temperature must be in [0, 5], got {self.reflection_temperature}")


def q_update(q: float, reward: float, alpha: float, gamma: float = 0.0, next_max_q: float = 0.0) -> float:
    """``QValueUpdater.update``: ``Q <- (1 - alpha) Q + alpha (r + gamma next_max_q)``."""
    return (1.0 - alpha) * q + alpha * (reward + gamma * next_max_q)


def hybrid_scores(sim: np.ndarray, q: np.ndarray, cfg: MemRLConfig, q_stats: np.ndarray | None = None) -> np.ndarray:
    """``score f8[m]`` of candidates ``sim f8[m]``, ``q f8[m]`` (``retrieve_query``'s hybrid scoring).

    Similarity is z-normalised with the config's FIXED ``sim_norm_mean``/``sim_norm_std``
    (``_normalize_similarity``); Q with the mean and population std of ``q_stats``
    (default ``q``; the original takes them over every candidate, before the
    ``q_min_threshold`` filter), std 1 for one value or std <= 1e-9, clipped to
    ``[-z_clip, z_clip]`` (``_normalize_q``).
    """
    sim_z = (np.asarray(sim, dtype=np.float64) - cfg.sim_norm_mean) / cfg.sim_norm_std
    q = np.asarray(q, dtype=np.float64)
    stats = q if q_stats is None else np.asarray(q_stats, dtype=np.float64)
    if stats.size == 0:
        return cfg.weight_sim * sim_z
    std_q = float(stats.std()) if stats.size > 1 else 1.0
    std_q = std_q if std_q > 1e-9 else 1.0
    q_z = np.clip((q - stats.mean()) / std_q, -cfg.z_clip, cfg.z_clip)
    return cfg.weight_sim * sim_z + cfg.weight_q * q_z


def trajectory_text(outcome: Outcome) -> str:
    """The HLE runner's trajectory: ``QUESTION``/``SOLUTION`` with the episode's best attempt."""
    attempt = (outcome.successes or list(outcome.attempts) or [None])[0]
    answer = attempt.text.strip() if attempt is not None else ""
    return f"QUESTION\n{outcome.task}\n\nSOLUTION\n{answer}\n"


def procedure_content(task: str, script: str, trajectory: str) -> str:
    """``AdjustmentUpdater`` success content: ``Task:`` + the proceduralization builder's SCRIPT/TRAJECTORY."""
    return f"Task: {task}\n\nSCRIPT:\n{script}\n\nTRAJECTORY:\n{trajectory}"


def adjustment_content(task: str, reflection: str, trajectory: str) -> str:
    """``AdjustmentUpdater._prepare_append_adjust`` content of a failure."""
    return f"TASK REFLECTION:\nTask: {task}\n\nWhat went wrong:\n{reflection}\n\nFailed approach:\n{trajectory}\n"


def memory_context(contents: Sequence[str], successes: Sequence[bool]) -> str:
    """``hle_runner._build_memory_context``: successful memories first, failed ones "for caution"."""
    succ = [c for c, s in zip(contents, successes) if s]
    fail = [c for c, s in zip(contents, successes) if not s]
    sections = []
    if succ:
        sections.append("=== Successful Memories ===\n" + "\n\n".join(succ))
    if fail:
        sections.append("=== Failed Memories (for caution) ===\n" + "\n\n".join(fail))
    return "\n\n".join(sections)


def _solution_lines(trajectory: str) -> list[str]:
    body = trajectory.split("SOLUTION", 1)[-1]
    return [p.strip() for line in body.splitlines() for p in line.split(";") if p.strip()]


def rule_script(trajectory: str) -> str:
    """Rule-based script (no LLM): the solution's steps as a numbered list (at most five)."""
    lines = _solution_lines(trajectory)[:5] or ["(no steps recorded)"]
    return "\n".join(f"{i + 1}. {line}" for i, line in enumerate(lines))


def rule_reflection(task: str, trajectory: str) -> str:
    """Rule-based failure reflection (no LLM): what was tried and that it did not work."""
    lines = _solution_lines(trajectory)
    tried = "; ".join(lines[:4]) if lines else "no complete attempt"
    return (f"1. Incorrect assumptions: the approach '{one_line(tried, 300)}' was assumed to solve {task}; it did not.\n"
            "2. Steps to improve: check each intermediate result against the goal before committing to it.\n"
            "3. What to avoid next time: repeating this sequence of steps on the same numbers.")


@codec.data(context=("embedder",))
class MemRLMemory:
    """MemRL memory: query keys and the memories filed under them; see the module docstring."""

    name = "memrl"

    def __init__(self, config: MemRLConfig | None = None, *, embedder):
        self.config = config or MemRLConfig()
        self.embedder = embedder
        self.keys = MemoryTable(KEY_COLUMNS, embedder.dim)
        self.table = MemoryTable(MEM_COLUMNS, 1)  # memories are found through their key, never embedded
        self.attached = 0  # memories filed under an existing key (near-duplicate tasks)
        self.queries = 0  # episodes that retrieved from a non-empty memory ...
        self.queries_reaching = 0  # ... whose best key similarity reached sim_threshold (reported)

    def snapshot(self) -> dict[str, np.ndarray]:
        return {**self.keys.snapshot("key_"), **self.table.snapshot("mem_")}

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "MemRLReader":
        keys = TableView(snapshot, KEY_COLUMNS, self.embedder.dim, prefix="key_")
        mems = TableView(snapshot, MEM_COLUMNS, 1, prefix="mem_")
        return MemRLReader(self.config, self.embedder, keys, mems)

    def threshold_report(self) -> dict[str, float]:
        """How often a task's best key reached ``sim_threshold`` (the fraction of episodes that could retrieve)."""
        frac = self.queries_reaching / self.queries if self.queries else float("nan")
        return {"sim_threshold": self.config.sim_threshold, "episodes": self.queries, "reaching": self.queries_reaching,
                "fraction_reaching": frac, "attached": self.attached, "keys": len(self.keys), "memories": len(self.table)}

    def _key_for(self, text: str, matched: int, vec: np.ndarray | None) -> int:
        """The key a new memory is filed under: the matched one, an equal text's, else a new key."""
        if matched >= 0 and self.keys.rows([matched], strict=False).size:
            self.attached += 1
            return matched
        same = np.flatnonzero(self.keys.data["text"] == text) if len(self.keys) else np.zeros(0, np.int64)
        if same.size:  # the original's dict would overwrite this key's list; we keep both memories
            self.attached += 1
            return int(self.keys.id[same[0]])
        v = vec if vec is not None else self.embedder.embed([text])
        return int(self.keys.append(v, text=[text])[0])

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Per episode, in order: file the new memories (``add_memories``), then update the used Qs (``update_values``)."""
        cfg = self.config
        for u in updates:
            if not u:
                continue
            reward = float(np.asarray(u["reward"]).reshape(-1)[0])
            new = _normalise_update(u)
            for m in new:
                key = self._key_for(m["task"], m["matched"], None)
                self.table.append(
                    np.zeros((1, 1), np.float32), key=[key], kind=[m["kind"]], content=[m["content"]], script=[m["script"]],
                    trajectory=[m["trajectory"]], success=[int(m["success"])], q=[m["q"]], visits=[0], source=[m["source"]],
                )
            best = np.asarray(u.get("best_sim", np.zeros(0)), dtype=np.float64).reshape(-1)
            if best.size:  # the memory had keys when the episode retrieved
                self.queries += 1
                self.queries_reaching += int(best[0] >= cfg.sim_threshold)
            used = list(dict.fromkeys(int(i) for i in np.asarray(u.get("used", np.zeros(0, np.int64)), dtype=np.int64)))
            rows = self.table.rows(used, strict=False)
            q = self.table.data["q"]
            for r in rows:
                q[r] = q_update(q[r], reward, cfg.alpha, cfg.gamma)
                self.table.data["visits"][r] += 1


def _normalise_update(u: Mapping[str, np.ndarray]) -> list[dict]:
    """The new memories of one update. Also reads the earlier format (``intent``/``experience`` lists)."""
    if "content" in u:
        n = len(texts_of(u["content"]))
        cols = {k: texts_of(u[k]) for k in ("task", "kind", "content", "script", "trajectory", "source")}
        matched = np.asarray(u.get("matched", np.full(n, -1)), dtype=np.int64).reshape(-1)
        success = np.asarray(u["success"]).reshape(-1).astype(bool)
        qinit = np.asarray(u["q_init"], dtype=np.float64).reshape(-1)
        if not all(len(v) == n for v in cols.values()) or not (matched.size == success.size == qinit.size == n):
            raise InputError("memrl update columns task/kind/content/script/trajectory/source/matched/success/q_init must have equal lengths")
        return [{"task": cols["task"][i], "kind": cols["kind"][i], "content": cols["content"][i], "script": cols["script"][i],
                 "trajectory": cols["trajectory"][i], "source": cols["source"][i], "matched": int(matched[i]),
                 "success": bool(success[i]), "q": float(qinit[i])} for i in range(n)]
    intents, exps, sources = texts_of(u.get("intent")), texts_of(u.get("experience")), texts_of(u.get("source"))
    if not (len(intents) == len(exps) == len(sources)):
        raise InputError(f"memrl update intent/experience/source must have equal lengths, got {len(intents)}, {len(exps)}, {len(sources)}")
    return [{"task": t, "kind": "procedure", "content": e, "script": "", "trajectory": e, "source": s, "matched": -1,
             "success": True, "q": 0.0} for t, e, s in zip(intents, exps, sources)]


class MemRLReader:
    """Read-only MemRL retrieval and memory construction over one snapshot."""

    def __init__(self, config: MemRLConfig, embedder, keys: TableView, mems: TableView):
        self.config = config
        self.embedder = embedder
        self.keys = keys
        self.mems = mems
        self._key_row = {int(k): i for i, k in enumerate(keys.id.tolist())}

    def _recalled_keys(self, sims: np.ndarray) -> np.ndarray:
        """Key rows with ``sim >= sim_threshold``, the ``recall_k`` most similar, best first (ties: older key)."""
        return top_k(sims, self.config.recall_k, sims >= self.config.sim_threshold)

    def key_similarities(self, tasks: Sequence[str]) -> np.ndarray:
        if len(self.keys) == 0:
            return np.zeros((len(tasks), 0), np.float64)
        return cosine_scores(self.keys.embedding, self.embedder.embed(list(tasks))).astype(np.float64)

    def retrieve(self, tasks: Sequence[str]) -> list[list[Hit]]:
        cfg = self.config
        if not tasks:
            return []
        if len(self.keys) == 0 or len(self.mems) == 0:
            return [[] for _ in tasks]
        sims = self.key_similarities(tasks)
        mem_key = np.asarray(self.mems.data["key"], dtype=np.int64)
        q_all = np.asarray(self.mems.data["q"], dtype=np.float64)
        out = []
        for s in sims:
            rows, csim = [], []
            for kr in self._recalled_keys(s):
                for r in np.flatnonzero(mem_key == self.keys.id[kr]):  # memories of one key, oldest first
                    rows.append(int(r))
                    csim.append(float(s[kr]))
            rows_a, csim_a = np.asarray(rows, np.int64), np.asarray(csim, np.float64)
            keep = q_all[rows_a] >= cfg.q_min_threshold if rows else np.zeros(0, bool)
            rows_a, csim_a = rows_a[keep], csim_a[keep]
            if rows_a.size == 0:
                out.append([])
                continue
            score = hybrid_scores(csim_a, q_all[rows_a], cfg, q_stats=q_all[np.asarray(rows, np.int64)])
            order = np.lexsort((np.arange(score.size), -score))[: cfg.select_k]  # stable sort, score desc
            out.append([
                Hit(int(self.mems.id[rows_a[i]]), self.mems.text("content", rows_a[i]), float(score[i]),
                    {"similarity": float(csim_a[i]), "q": float(q_all[rows_a[i]]),
                     "success": bool(self.mems.data["success"][rows_a[i]]), "kind": self.mems.text("kind", rows_a[i])})
                for i in order
            ])
        return out

    @staticmethod
    def format(hits: Sequence[Hit]) -> str:
        if not hits:
            return ""
        return memory_context([h.text for h in hits], [bool(h.extra.get("success", True)) for h in hits])

    def requests(self, outcomes: Sequence[Outcome], mode: str) -> list[list[Request]]:
        if mode == "rule":
            return [[] for _ in outcomes]
        cfg = self.config
        out = []
        for o in outcomes:
            traj = trajectory_text(o)
            if o.success:
                prompt = baseline_prompts.render("memrl_script", trajectory=traj)
                temp, tag = cfg.temperature, "script"
            else:
                prompt = baseline_prompts.render("memrl_reflection", task=o.task, trajectory=traj)
                temp, tag = cfg.reflection_temperature, "reflection"
            out.append([Request(messages=({"role": "user", "content": prompt},), max_tokens=cfg.max_tokens, temperature=temp,
                                seed=request_seed(o.seed, "memrl", tag, o.task), episode=o.key)])
        return out

    def updates(self, outcomes: Sequence[Outcome], completions: Sequence[Sequence[list[str]]], mode: str) -> list[dict]:
        cfg = self.config
        sims = self.key_similarities([o.task for o in outcomes]) if outcomes else np.zeros((0, 0))
        out = []
        for j, (o, comps) in enumerate(zip(outcomes, completions)):
            traj = trajectory_text(o)
            text, source = "", "rule"
            if mode == "llm":
                text = first_text(comps[0]).strip() if comps else ""
                source = "llm" if text else "rule-fallback"
            matched, best = -1, np.zeros(0)
            if sims.shape[1]:
                recalled = self._recalled_keys(sims[j])
                best = sims[j][recalled[:1]] if recalled.size else np.array([float(sims[j].max())])
                if recalled.size and sims[j][recalled[0]] >= cfg.add_similarity_threshold:
                    matched = int(self.keys.id[recalled[0]])  # add_memories: best retrieved key above the threshold
            if o.success:
                script = text or rule_script(traj)
                kind, content, q0 = "procedure", procedure_content(o.task, script, traj), cfg.q_init_success
            else:
                script = ""
                kind, content, q0 = "adjustment", adjustment_content(o.task, text or rule_reflection(o.task, traj), traj), cfg.q_init_failure
            reward = o.reward if cfg.use_outcome_reward else (cfg.success_reward if o.success else cfg.failure_reward)
            out.append({
                "used": np.asarray(o.retrieved, dtype=np.int64),
                "reward": np.array([reward], dtype=np.float64),
                "best_sim": np.asarray(best, dtype=np.float64),
                "task": str_array([o.task]), "kind": str_array([kind]), "content": str_array([content]),
                "script": str_array([script]), "trajectory": str_array([traj]), "source": str_array([source]),
                "matched": np.array([matched], dtype=np.int64), "success": np.array([o.success]),
                "q_init": np.array([q0], dtype=np.float64),
            })
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        return observe_with(self, outcomes, llm, self.config.extraction)

