"""The generic task's simulated policy: a seeded harness that answers its prompts, never a model.

It reads the problem line of the generic prompt. For the generated example
(``Compute a + b.`` / ``Compute a * b.``) it answers correctly with probability
``p = base + gain * s`` (capped at ``cap``), where ``s`` is the number of
"Example i - Success" / memory lines in the prompt's experience block, so
memory has something to change; otherwise it answers off by one. A problem it
cannot read gets ``Answer: unknown``. Every response says ``simulated``.
"""

from __future__ import annotations

import re

import numpy as np

from engine.llm.simulated import SimulatedPolicy, prompt_text

MODEL_NAME = "simulated-generic-v1"
_PROBLEM = re.compile(r"^Problem: Compute (-?\d+) ([+*]) (-?\d+)\.\s*$", re.M)
_EXPERIENCE = re.compile(r"^(Example \d+ - Success:|- |\[\d+\] )", re.M)


class GenericPolicy(SimulatedPolicy):
    model = MODEL_NAME

    def __init__(self, base: float = 0.45, gain: float = 0.12, cap: float = 0.9):
        self.base, self.gain, self.cap = base, gain, cap

    def respond(self, request, seed: int, index: int) -> str:
        text = prompt_text(request)
        found = list(_PROBLEM.finditer(text))  # the task's problem line is the last (experience comes first)
        m = found[-1] if found else None
        if not m:
            return "Answer: unknown"
        a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
        right = a + b if op == "+" else a * b
        head = text[: m.start()]
        s = len(_EXPERIENCE.findall(head))
        p = min(self.cap, self.base + self.gain * s)
        rng = np.random.default_rng([seed & 0x7FFF_FFFF, index, a, b])
        value = right if rng.random() < p else right + 1
        return f"{a} {op} {b} = {value}\nAnswer: {value}"


def policy_for(llm_cfg) -> GenericPolicy:
    """``engine.generic.task.TASK.policy``."""
    return GenericPolicy()
