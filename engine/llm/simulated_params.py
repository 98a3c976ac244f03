"""Parameters of the simulated Game-of-24 policy's error model (``[llm.simulated]``; the policy is engine.game24.simulated_policy)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import check


@dataclass(frozen=True)
class SimulatedPolicyParams:
    """Error model of the simulated policy (all probabilities in [0, 1]).

    Defaults are calibrated so plain ToT with breadth 5 lands near the published
    ToT figures on the Game of 24 (see docs/llm.md for the calibration run).

    Experience use (the text a memory method puts in the prompts' experience
    slot, between the few-shot examples and the task; plain ToT prompts have
    none, so these two never change plain ToT):

    * ``p_follow_experience``: per proposal line slot, the probability that the
      policy copies an *applicable* step of the experience block (a line
      ``a op b = c (left: ...)`` whose operands a and b are both among the
      current numbers) instead of drawing its own move. The copied move is
      written on the CURRENT numbers with correct arithmetic and its own
      ``left:`` list, whether or not it keeps the puzzle solvable (experience
      from another puzzle can mislead). Each experience step is copied at most
      once per completion. Default 0.5: an LLM tends to reuse steps that are
      shown to it, but not always (a coin flip is the neutral middle).
    * ``p_copy_experience_answer``: in the answer prompt, the probability of
      copying an ``Answer:`` expression of the experience block whose numbers
      are exactly the current input numbers (as a multiset), whatever the steps
      say. Default 0.5, for the same reason.
    """

    p_solvable_move: float = 0.48
    p_wrong_arithmetic: float = 0.04
    p_malformed: float = 0.03
    p_wrong_left: float = 0.04
    min_proposals: int = 3
    max_proposals: int = 6
    value_sure_if_solvable: float = 0.55
    value_likely_if_solvable: float = 0.35
    value_impossible_if_unsolvable: float = 0.6
    value_likely_if_unsolvable: float = 0.3
    p_value_malformed: float = 0.02
    p_judge_correct: float = 0.95
    p_answer_correct: float = 0.95
    p_follow_experience: float = 0.5
    p_copy_experience_answer: float = 0.5

    def __post_init__(self):
        for name in (
            "p_solvable_move", "p_wrong_arithmetic", "p_malformed", "p_wrong_left",
            "value_sure_if_solvable", "value_likely_if_solvable",
            "value_impossible_if_unsolvable", "value_likely_if_unsolvable",
            "p_value_malformed", "p_judge_correct", "p_answer_correct",
            "p_follow_experience", "p_copy_experience_answer",
        ):
            v = getattr(self, name)
            check(0.0 <= v <= 1.0, f"llm.simulated.{name} must be in [0, 1], got {v}")
        s = self.p_wrong_arithmetic + self.p_malformed + self.p_wrong_left
        check(s <= 1.0, f"llm.simulated.p_wrong_arithmetic + p_malformed + p_wrong_left must be <= 1, got {s}")
        s = self.value_sure_if_solvable + self.value_likely_if_solvable
        check(s <= 1.0, f"llm.simulated.value_sure_if_solvable + value_likely_if_solvable must be <= 1, got {s}")
        s = self.value_impossible_if_unsolvable + self.value_likely_if_unsolvable
        check(
            s <= 1.0,
            f"llm.simulated.value_impossible_if_unsolvable + value_likely_if_unsolvable must be <= 1, got {s}",
        )
        check(self.min_proposals >= 1, f"llm.simulated.min_proposals must be >= 1, got {self.min_proposals}")
        check(
            self.max_proposals >= self.min_proposals,
            f"llm.simulated.max_proposals must be >= min_proposals={self.min_proposals}, got {self.max_proposals}",
        )
