"""FLEX: an experience library of successes and failures with reflections (seed 002).

Source: Z. Cai et al., "FLEX: Continuous Agent Evolution via Forward Learning
from Experience", arXiv:2511.06449 (seed document 002; public code
GenSI-THUAIR/FLEX). Re-implemented from the seed's specification:

* **Experience capture** (seed step 1/4): one record per episode,
  ``problem, solution_attempt, is_correct, reflection, failure_reason``.
* **Reflection** (step 2): the seed's two prompts ("Analyze why this solution
  was correct/failed ...") sent to the LLM; without an LLM (simulated
  backend) the seed's own fallback: "Solution approach was sound" /
  "Solution logic was flawed". ``failure_reason`` is the seed's
  ``_analyze_failure``: "No Output Generated" for an empty attempt, else
  "Incorrect Logic".
* **Retrieval** (``retrieve_relevant``): the ``k`` (3; the seed recommends
  3-5) past problems most similar to the current one, or all of them when the
  library holds fewer than ``k``. The seed uses TF-IDF cosine; we use the
  engine's embedder (cosine), so every baseline shares one similarity.
* **Prompt augmentation** (step 3, ``augment_prompt_with_experiences``):
  successes as "Example i - Success" with their key insight, then failures
  under "Learn from past mistakes" with why they failed. The task line itself
  stays in the caller's prompt.
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
)
from engine.baselines.store import TEXT, MemoryTable, TableView
from engine.config import check
from engine.baselines import prompts as baseline_prompts
from engine.llm.base import LLMBackend, Request

COLUMNS = {"problem": TEXT, "solution": TEXT, "correct": "bool", "reflection": TEXT, "failure_reason": TEXT, "source": TEXT}


@dataclass(frozen=True)
class FlexConfig:
    """FLEX parameters: retrieval ``k`` (seed: 3-5), failures in the prompt, reflection settings."""

    k: int = 3
    include_failures: bool = True
    extraction: str = "auto"  # "auto" | "llm" | "rule"
    max_tokens: int = 200  # the seed's reflection budget
    temperature: float = 0.0

    def __post_init__(self):
        check(3 <= self.k <= 5, f"flex.k must be in [3, 5] (the seed's range), got {self.k}")
        check(self.extraction in ("auto", "llm", "rule"), f"flex.extraction must be auto, llm or rule, got {self.extraction!r}")
        check(self.max_tokens >= 1, f"flex.max_tokens must be >= 1, got {self.max_tokens}")
        check(0.0 <= self.temperature <= 5.0, f"flex.temperature must be in [0, 5], got {self.temperature}")


# The two reflection prompts live in engine/prompts/baselines.toml (flex_success_reflection,
# flex_failure_reflection); engine.baselines.prompts renders them.


def rule_reflection(is_correct: bool) -> str:
    """The seed's fallback reflection when no LLM reflects."""
    return "Solution approach was sound" if is_correct else "Solution logic was flawed"


def failure_reason(solution: str) -> str:
    """The seed's ``_analyze_failure`` (its error-type branch needs code output; kept for fidelity)."""
    if "ValueError" in solution or "TypeError" in solution:
        return "Syntax/Type Error"
    if len(solution.strip()) == 0:
        return "No Output Generated"
    return "Incorrect Logic"


def augment(successes: Sequence[tuple[str, str, str]], failures: Sequence[tuple[str, str, str]]) -> str:
    """The seed's prompt augmentation, without its final task line.

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


class FlexMemory:
    """FLEX experience library; see the module docstring."""

    name = "flex"

    def __init__(self, config: FlexConfig | None = None, *, embedder):
        self.config = config or FlexConfig()
        self.embedder = embedder
        self.table = MemoryTable(COLUMNS, embedder.dim)  # embedding = problem vector

    def snapshot(self) -> dict[str, np.ndarray]:
        return self.table.snapshot()

    def reader(self, snapshot: Mapping[str, np.ndarray]) -> "FlexReader":
        return FlexReader(self.config, self.embedder, TableView(snapshot, COLUMNS, self.embedder.dim))

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Append every episode's experience record, in episode order (``add_experience``)."""
        updates = [u for u in updates if u]
        if not updates:
            return
        cols = {name: [] for name in COLUMNS}
        for u in updates:
            for name, kind in COLUMNS.items():
                values = texts_of(u[name]) if kind == TEXT else np.asarray(u[name]).tolist()
                cols[name].extend(values)
        if cols["problem"]:
            self.table.append(self.embedder.embed(cols["problem"]), **cols)


class FlexReader:
    """Read-only FLEX retrieval, prompt augmentation and reflection over one snapshot."""

    def __init__(self, config: FlexConfig, embedder, view: TableView):
        self.config = config
        self.embedder = embedder
        self.view = view

    def retrieve(self, tasks: Sequence[str]) -> list[list[Hit]]:
        if not tasks:
            return []
        if len(self.view) == 0:
            return [[] for _ in tasks]
        sims = cosine_scores(self.view.embedding, self.embedder.embed(list(tasks))).astype(np.float64)
        out = []
        for s in sims:
            rows = top_k(s, self.config.k)  # all of them when the library holds fewer than k
            out.append([self._hit(int(r), float(s[r])) for r in rows])
        return out

    def _hit(self, row: int, score: float) -> Hit:
        v = self.view
        correct = bool(v.data["correct"][row])
        return Hit(
            int(v.id[row]),
            v.text("solution", row),
            score,
            {
                "problem": v.text("problem", row),
                "correct": correct,
                "reflection": v.text("reflection", row),
                "failure_reason": v.text("failure_reason", row),
            },
        )

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
                                                 ground_truth="(not available)")
            out.append(
                [Request(prompt=prompt, max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                         seed=derive_seed(o.seed, "flex", "reflection"), episode=o.key)]
            )
        return out

    def updates(self, outcomes: Sequence[Outcome], completions, mode: str) -> list[dict]:
        out = []
        for o, comps in zip(outcomes, completions):
            solution = recorded_attempt(o)
            reflection, source = "", "rule"
            if mode == "llm":
                reflection = one_line(first_text(comps[0]) if comps else "", 600)
                source = "llm" if reflection else "rule-fallback"
            if not reflection:
                reflection = rule_reflection(o.success)
            out.append(
                {
                    "problem": str_array([o.task]),
                    "solution": str_array([one_line(solution, 600)]),
                    "correct": np.array([o.success]),
                    "reflection": str_array([reflection]),
                    "failure_reason": str_array(["" if o.success else failure_reason(solution)]),
                    "source": str_array([source]),
                }
            )
        return out

    def observe(self, outcomes: Sequence[Outcome], llm: LLMBackend) -> list[dict]:
        return observe_with(self, outcomes, llm, self.config.extraction)
