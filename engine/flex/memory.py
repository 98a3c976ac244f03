"""FLEX as a memory method: the experience library, retrieval, reflection, augmentation and the pitfall defences.

Source: Z. Cai et al., "FLEX: Continuous Agent Evolution via Forward Learning
from Experience", arXiv:2511.06449 (seed document 002; its code listings are the
specification, steps 1-5). What each part follows:

* **Experience record** (step 1, ``Experience``): problem, solution attempt,
  ground truth, correct, domain, difficulty (``_estimate_difficulty``: < 50
  words easy, < 200 medium, else hard), timestamp, techniques
  (``_extract_techniques``' keyword rules), failure reason
  (``_analyze_failure``), reflection, metadata; plus the episode ``key`` and
  the admission ``step``. Persisted by :mod:`engine.flex.library` when
  ``library`` names a file (append-only JSONL that a restart continues).
* **Retrieval** (``retrieve_relevant``): filter by domain first, then rank the
  domain's problems by TF-IDF cosine (``retrieval = "tfidf"``, the seed's
  ``TfidfVectorizer(max_features=100)``, :mod:`engine.flex.tfidf`) or by the
  engine's embedder (``"embedding"``, the seed's "embedding similarity"
  alternative); the top ``k`` (3-5, set by ``[memory] top_k``), all of them
  when the domain holds fewer than ``k``.
* **Reflection engine** (step 2, ``generate_reflection``): the seed's two
  prompts to the LLM (``max_tokens`` 200), else its fallback sentences.
* **Prompt augmentation** (step 3, ``augment_prompt_with_experiences``):
  successes as "Example i - Success", failures under "Learn from past mistakes"
  (``include_failures``, pitfall 2: confirmation bias).
* **Performance tracking** (step 5): success rate over ``window``, plateau
  detection (:mod:`engine.flex.tracking`).
* **Pitfall defences**, each a key: ``recency_half_life`` (1, stale
  experiences: similarity times ``0.5 ** (age / half_life)``, age in records),
  ``dedup_threshold`` and ``max_records`` (3, library bloat: a near-duplicate
  problem with the same outcome replaces the older record, the oldest beyond
  ``max_records`` are archived, never deleted), ``validate`` (4, no validation:
  a claimed success without an attempt the task's checker verified is not
  admitted).

Deliberate differences (docs/flex.md): hits are ordered by score also when the
domain holds fewer than ``k`` (the seed returns them in library order) so the
token fit drops the least relevant first; ``ground_truth`` in the failure
reflection prompt is "(not available)" where a task has no reference solution
(Game of 24 has none; the generic task passes its answer).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines import prompts as baseline_prompts
from engine.baselines.common import Hit, Outcome, cosine_scores, first_text, observe_with, one_line, \
    str_array, texts_of
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.config import check
from engine.flex.tfidf import tfidf_similarity
from engine.flex.tracking import PlateauRule, tracking_report
from engine.llm.base import LLMBackend, Request
from engine.rounds import request_seed

COLUMNS = {"problem": TEXT, "solution": TEXT, "ground_truth": TEXT, "correct": "bool", "domain": TEXT,
           "difficulty": TEXT, "techniques": TEXT, "failure_reason": TEXT, "reflection": TEXT, "source": TEXT,
           "key": TEXT, "timestamp": TEXT, "step": "i8"}
DEFAULT_DOMAIN = "general"  # the seed's DeployedAgent(domain='general')


@codec.data
@dataclass(frozen=True)
class FlexConfig:
    """``[flex]``: see the module docstring for each key's source."""

    k: int = 3
    include_failures: bool = True
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 200  # the seed's reflection budget
    temperature: float = 0.0
    retrieval: str = "tfidf"  # "tfidf" (the seed's code) | "embedding"
    max_features: int = 100  # the seed's TfidfVectorizer(max_features=100)
    domain: str = ""  # "" = the task's (Game of 24: "game24"; generic: each problem's)
    library: str = ""  # a JSONL file: the library persisted and continued across runs; "" = in memory only
    recency_half_life: float = 0.0  # records; 0 = off (pitfall 1)
    dedup_threshold: float = 0.0  # cosine of problems in (0, 1]; 0 = off (pitfall 3)
    max_records: int = 0  # active records kept; 0 = all (the seed: "keep all experiences initially")
    validate: bool = True  # pitfall 4
    window: int = 50  # performance tracking window (step 5 uses 100 recent attempts)
    plateau_min_gain: float = 0.02
    plateau_patience: int = 2

    def __post_init__(self):
        check(3 <= self.k <= 5, f"flex.k must be in [3, 5] (the seed's range), got {self.k}")
        check(self.extraction in ("auto", "llm", "rule"), f"flex.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"flex.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"flex.temperature must be in [0, 5], got {self.temperature}")
        check(self.retrieval in ("tfidf", "embedding"), f"flex.retrieval must be tfidf or embedding, got {self.retrieval!r}")
        check(self.max_features >= 1, f"flex.max_features must be >= 1, got {self.max_features}")
        check(self.recency_half_life >= 0.0, f"flex.recency_half_life must be >= 0 (0 = off), got {self.recency_half_life}")
        check(0.0 <= self.dedup_threshold <= 1.0, f"flex.dedup_threshold must be in [0, 1] (0 = off), got {self.dedup_threshold}")
        check(self.max_records >= 0, f"flex.max_records must be >= 0 (0 = all), got {self.max_records}")
        PlateauRule(self.window, self.plateau_min_gain, self.plateau_patience)

    @property
    def plateau(self) -> PlateauRule:
        return PlateauRule(self.window, self.plateau_min_gain, self.plateau_patience)


# --- the seed's helper rules (step 4, DeployedAgent) ------------------------------------------


def rule_reflection(is_correct: bool) -> str:
    """The seed's fallback reflection when no LLM reflects."""
    return "Solution approach was sound" if is_correct else "Solution logic was flawed"


def failure_reason(solution: str) -> str:
    """The seed's ``_analyze_failure``."""
    if "ValueError" in solution or "TypeError" in solution:
        return "Syntax/Type Error"
    if len(solution.strip()) == 0:
        return "No Output Generated"
    return "Incorrect Logic"


def estimate_difficulty(problem: str) -> str:
    """The seed's ``_estimate_difficulty``: by word count."""
    n = len(problem.split())
    return "easy" if n < 50 else "medium" if n < 200 else "hard"


def extract_techniques(solution: str) -> list[str]:
    """The seed's ``_extract_techniques`` keyword rules."""
    s = solution.lower()
    out = []
    if "divide" in s or "split" in s:
        out.append("divide-and-conquer")
    if "recursion" in s:
        out.append("recursion")
    if "dynamic" in s:
        out.append("dynamic-programming")
    if "greedy" in s:
        out.append("greedy")
    return out


def augment(successes: Sequence[tuple[str, str, str]], failures: Sequence[tuple[str, str, str]]) -> str:
    """The seed's prompt augmentation, without its final task line (the task's own prompt carries the task).

    ``successes``: (problem, solution, reflection); ``failures``: (problem, failed attempt, why it failed).
    """
    if not successes and not failures:
        return ""
    text = "You have access to relevant past experiences. Use insights from successes:\n\n"
    for i, (problem, solution, reflection) in enumerate(successes):
        text += f"Example {i + 1} - Success:\nProblem: {problem}\nSolution: {solution}\nKey insight: {reflection}\n\n"
    if failures:
        text += "Learn from past mistakes:\n\n"
        for i, (problem, attempt, why) in enumerate(failures):
            text += f"Past Mistake {i + 1}:\nProblem: {problem}\nFailed attempt: {attempt}\nWhy it failed: {why}\n\n"
    return text.rstrip() + "\n"


def recorded_attempt(outcome: Outcome) -> str:
    """The solution a FLEX record keeps: the first successful attempt, else the first attempt."""
    attempt = (outcome.successes or list(outcome.attempts) or [None])[0]
    return attempt.text if attempt is not None else ""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@codec.data(context=("embedder",))
class FlexMemory:
    """FLEX experience library (see the module docstring); ``library`` set: persisted and reloaded."""

    name = "flex"

    def __init__(self, config: FlexConfig | None = None, *, embedder, domain: str = DEFAULT_DOMAIN):
        self.config = config or FlexConfig()
        self.embedder = embedder
        self.domain = self.config.domain or domain
        self.table = MemoryTable(COLUMNS, embedder.dim)  # embedding = problem vector
        self.rejected = 0  # claimed successes not admitted (validate)
        self.archived = {"duplicate": 0, "max_records": 0}
        self.next_step = 0
        self.library = None
        if self.config.library:
            from engine.flex.library import ExperienceLibrary

            self.library = ExperienceLibrary(self.config.library)
            self._load(self.library.experiences)

    def _load(self, exps) -> None:
        if not exps:
            return
        cols = {name: [] for name in COLUMNS}
        for e in exps:
            for name, value in _columns_of(e).items():
                cols[name].append(value)
        self.table.append(self.embedder.embed(cols["problem"]), **cols)
        self.next_step = max(cols["step"]) + 1

    # --- round contract ------------------------------------------------------------------------
    def snapshot(self) -> dict[str, np.ndarray]:
        return self.table.snapshot()

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "FlexReader":
        return FlexReader(self.config, self.embedder, TableView(snapshot, COLUMNS, self.embedder.dim), self.domain)

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Admit every episode's record in episode order (``add_experience``), then the bloat defences."""
        updates = [u for u in updates if u]
        cols = {name: [] for name in COLUMNS}
        for u in updates:
            self.rejected += int(np.asarray(u.get("rejected", [0])).sum())
            n = len(texts_of(u.get("problem")))
            for name, kind in COLUMNS.items():
                if name in u:
                    values = texts_of(u[name]) if kind == TEXT else np.asarray(u[name]).tolist()
                else:  # a writer that fills only the seed's core fields (the forecast evidence layer)
                    values = [None] * n
                cols[name].extend(values)
        if not cols["problem"]:
            return
        for i in range(len(cols["problem"])):  # defaults, filled here in episode order
            problem, solution = cols["problem"][i], cols["solution"][i] or ""
            cols["ground_truth"][i] = cols["ground_truth"][i] or ""
            cols["domain"][i] = cols["domain"][i] or self.domain
            cols["difficulty"][i] = cols["difficulty"][i] or estimate_difficulty(problem)
            cols["techniques"][i] = cols["techniques"][i] if cols["techniques"][i] is not None else \
                ",".join(extract_techniques(solution))
            cols["timestamp"][i] = cols["timestamp"][i] or _now()
        if self.library is not None:  # a key already on disk (a resumed run) is neither appended nor re-admitted
            seen = self.library.keys
            keep = [i for i, key in enumerate(cols["key"]) if not key or key not in seen]
            cols = {k: [v[i] for i in keep] for k, v in cols.items()}
            if not keep:
                return
        for i in range(len(cols["problem"])):  # admission order: a restart continues the steps on disk
            cols["step"][i] = self.next_step
            cols["key"][i] = cols["key"][i] or f"record:{self.next_step}"
            self.next_step += 1
        emb = self.embedder.embed(cols["problem"])
        self._dedup(emb, cols)
        self.table.append(emb, **cols)
        if self.library is not None:
            self.library.add([_experience_of(cols, i) for i in range(len(cols["problem"]))])
        self._cap()

    def _dedup(self, emb: np.ndarray, cols: dict) -> None:
        """Pitfall 3: an active record as similar as ``dedup_threshold`` with the same outcome is archived."""
        thr = self.config.dedup_threshold
        if thr <= 0 or len(self.table) == 0:
            return
        sims = cosine_scores(self.table.embedding, emb.astype(np.float32))
        old = set()
        for i in range(emb.shape[0]):
            same = (sims[i] >= thr) & (self.table.data["correct"] == bool(cols["correct"][i])) & \
                (self.table.data["domain"] == cols["domain"][i])
            old.update(np.flatnonzero(same).tolist())
        self._archive(sorted(old), "duplicate")

    def _cap(self) -> None:
        cap = self.config.max_records
        if cap and len(self.table) > cap:
            self._archive(list(range(len(self.table) - cap)), "max_records")  # the oldest rows

    def _archive(self, rows: list[int], reason: str) -> None:
        if not rows:
            return
        keys = [str(self.table.data["key"][r]) for r in rows]
        self.table.delete(self.table.id[rows])
        self.archived[reason] += len(rows)
        if self.library is not None:
            self.library.archive(keys, reason)

    # --- performance tracking (step 5) --------------------------------------------------------
    def tracking(self) -> dict:
        """Success rate per window over the admitted records (admission order) and the plateau position."""
        order = np.argsort(self.table.data["step"], kind="stable")
        return tracking_report(self.table.data["correct"][order].astype(float), self.config.plateau)

    def counts(self) -> dict:
        return {"records": len(self.table), "rejected": self.rejected, "archived": dict(self.archived)}


def _columns_of(e) -> dict:
    return {"problem": e.problem, "solution": e.solution_attempt, "ground_truth": e.ground_truth,
            "correct": e.is_correct, "domain": e.domain, "difficulty": e.difficulty,
            "techniques": ",".join(e.techniques_used), "failure_reason": e.failure_reason or "",
            "reflection": e.reflection, "source": str(e.metadata.get("source", "")), "key": e.key,
            "timestamp": e.timestamp, "step": int(e.step)}


def _experience_of(cols: dict, i: int):
    from engine.flex.library import Experience

    return Experience(key=cols["key"][i], step=int(cols["step"][i]), problem=cols["problem"][i],
                      solution_attempt=cols["solution"][i], ground_truth=cols["ground_truth"][i],
                      is_correct=bool(cols["correct"][i]), domain=cols["domain"][i],
                      difficulty=cols["difficulty"][i], timestamp=cols["timestamp"][i],
                      techniques_used=tuple(t for t in str(cols["techniques"][i]).split(",") if t),
                      failure_reason=cols["failure_reason"][i], reflection=cols["reflection"][i],
                      metadata={"source": cols["source"][i]})


class FlexReader:
    """Read-only FLEX retrieval, prompt augmentation and reflection over one snapshot."""

    def __init__(self, config: FlexConfig, embedder, view: TableView, domain: str = DEFAULT_DOMAIN):
        self.config = config
        self.embedder = embedder
        self.view = view
        self.domain = domain

    def retrieve(self, tasks: Sequence[str], domains: Sequence[str] | None = None) -> list[list[Hit]]:
        """Per task: filter by domain, rank by TF-IDF or embedding cosine (times the recency weight), top k."""
        if not tasks:
            return []
        if len(self.view) == 0:
            return [[] for _ in tasks]
        cfg = self.config
        doms = list(domains) if domains is not None else [self.domain] * len(tasks)
        record_domain = np.asarray(self.view.data["domain"]).astype(str)
        steps = np.asarray(self.view.data["step"], dtype=np.float64)
        weight = np.ones(len(self.view))
        if cfg.recency_half_life > 0:
            weight = 0.5 ** ((steps.max() - steps) / cfg.recency_half_life)
        dense = None
        if cfg.retrieval == "embedding":
            dense = cosine_scores(self.view.embedding, self.embedder.embed(list(tasks))).astype(np.float64)
        problems = [self.view.text("problem", r) for r in range(len(self.view))]
        out = []
        for i, (task, dom) in enumerate(zip(tasks, doms)):
            rows = np.flatnonzero(record_domain == (dom or self.domain))
            if rows.size == 0:
                out.append([])
                continue
            if dense is not None:
                sim = dense[i, rows]
            else:  # the seed fits TF-IDF on the domain's problems plus the query
                sim = tfidf_similarity(task, [problems[r] for r in rows], cfg.max_features)
            score = sim * weight[rows]
            order = np.lexsort((rows, -score))[: cfg.k]  # score desc, then library order
            out.append([self._hit(int(rows[j]), float(score[j])) for j in order])
        return out

    def _hit(self, row: int, score: float) -> Hit:
        v = self.view
        return Hit(int(v.id[row]), v.text("solution", row), score,
                   {"problem": v.text("problem", row), "correct": bool(v.data["correct"][row]),
                    "reflection": v.text("reflection", row), "failure_reason": v.text("failure_reason", row)})

    def format(self, hits: Sequence[Hit]) -> str:
        successes = [(h.extra["problem"], h.text, h.extra["reflection"]) for h in hits if h.extra["correct"]]
        failures = []
        if self.config.include_failures:
            failures = [(h.extra["problem"], h.text, h.extra["failure_reason"]) for h in hits if not h.extra["correct"]]
        return augment(successes, failures)

    def requests(self, outcomes: Sequence[Outcome], mode: str) -> list[list[Request]]:
        if mode == "rule":
            return [[] for _ in outcomes]
        cfg = self.config
        out = []
        for o in outcomes:
            solution = recorded_attempt(o)
            if o.success:
                prompt = baseline_prompts.render("flex_success_reflection", problem=o.task, solution=solution)
            else:
                prompt = baseline_prompts.render("flex_failure_reflection", problem=o.task, solution=solution,
                                                 ground_truth=getattr(o, "ground_truth", "") or "(not available)")
            out.append([Request(prompt=prompt, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                                seed=request_seed(o.seed, "flex", "reflection"), episode=o.key)])
        return out

    def updates(self, outcomes: Sequence[Outcome], completions, mode: str) -> list[dict]:
        out = []
        for o, comps in zip(outcomes, completions):
            if self.config.validate and o.success and not o.successes:
                out.append({"rejected": np.ones(1, np.int64)})  # pitfall 4: a success no checker verified
                continue
            solution = recorded_attempt(o)
            reflection, source = "", "rule"
            if mode == "llm":
                reflection = one_line(first_text(comps[0]) if comps else "", 600)
                source = "llm" if reflection else "rule-fallback"
            if not reflection:
                reflection = rule_reflection(o.success)
            out.append({
                "problem": str_array([o.task]),
                "solution": str_array([one_line(solution, 600)]),
                "ground_truth": str_array([getattr(o, "ground_truth", "") or ""]),
                "correct": np.array([o.success]),
                "domain": str_array([getattr(o, "domain", "") or self.domain]),
                "difficulty": str_array([estimate_difficulty(o.task)]),
                "techniques": str_array([",".join(extract_techniques(solution))]),
                "reflection": str_array([reflection]),
                "failure_reason": str_array(["" if o.success else failure_reason(solution)]),
                "source": str_array([source]),
                "key": str_array([record_key(o)]),  # the timestamp is stamped at admission (apply), not per worker
                "rejected": np.zeros(1, np.int64),
            })
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        return observe_with(self, outcomes, llm, self.config.extraction)


def record_key(o: Outcome) -> str:
    """A record's key in the library: the episode's identity, not its position in a run.

    The outcome's key (a task's episode tag: its position in the stream for Game of 24, method,
    seed and problem id for the generic task), the seed and a digest of the problem text: a
    restarted run meets its own keys and appends nothing twice; a run on other problems or with
    another seed appends its own records.
    """
    digest = hashlib.blake2b(o.task.encode("utf-8"), digest_size=8).hexdigest()
    return f"{o.key}|seed={o.seed}|{digest}"
