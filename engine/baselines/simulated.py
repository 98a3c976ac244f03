"""SIMULATED answers to the baselines' own prompts, for a task's simulated policy (a test harness, not a model).

A simulated task policy (the Game-of-24 one) calls :func:`reply` for a prompt it
does not recognise; a baseline prompt gets an answer in the format its parser
expects, built deterministically from the prompt's own text (a function of the
prompt only):

============================  ==========================================================================
mem0 additive extraction      ``{"memory": [{"id": "0", "text": ..., "attributed_to": "assistant", ...}]}``
                              (JSON, as the library asks): one fact per assistant message of the
                              "## New Messages" section
MemRL script                  the trajectory's SOLUTION steps as a numbered list (``rule_script``)
MemRL reflection              :func:`engine.baselines.memrl.rule_reflection`
ReMe success / failure /      a ```json list with one ``{when_to_use, experience}`` item (``rule_memory``)
comparative extraction
ReMe validation               ```json ``{"is_valid", "score"}``: score 0.3 (invalid) when an arithmetic
                              step ``a op b = c`` in the memory is wrong, else 0.8 (the ACCURACY criterion)
ReMe rerank                   the candidates in the order given (``ranked_indices`` 0..n-1)
ReMe rewrite                  the original context unchanged, as ``rewritten_context``
============================  ==========================================================================

Any other prompt: ``None`` (the policy answers it itself).
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

from engine.baselines.memrl import rule_reflection, rule_script
from engine.baselines.reme import rule_memory

_STEP = re.compile(r"(-?\d+(?:\.\d+)?)\s*([+\-*/])\s*(-?\d+(?:\.\d+)?)\s*=\s*(-?\d+(?:\.\d+)?(?:/\d+)?)")


def _section(prompt: str, head: str, nxt: str | None) -> str:
    i = prompt.find(head)
    if i < 0:
        return ""
    body = prompt[i + len(head):]
    if nxt and nxt in body:
        body = body[: body.index(nxt)]
    return body.strip()


def arithmetic_ok(text: str) -> bool:
    """Whether every ``a op b = c`` in ``text`` is exact arithmetic (division by zero: wrong)."""
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}
    for a, op, b, c in _STEP.findall(text):
        a, b, c = Fraction(a), Fraction(b), Fraction(c)
        if op == "/" and b == 0:
            return False
        if ops[op](a, b) != c:
            return False
    return True


def _mem0(prompt: str) -> str:
    body = _section(prompt, "## New Messages\n", "\n## Observation Date")
    user, turns = "", []  # (user message, assistant message lines)
    for line in body.splitlines():
        if line.startswith("user: "):
            user = line[len("user: "):].strip()
        elif line.startswith("assistant: "):
            turns.append((user, [line[len("assistant: "):].strip()]))
        elif turns and line.strip():
            turns[-1][1].append(line.strip())  # a multi-line assistant message
    facts = [f"For {u or 'the task'}, the assistant answered: {'; '.join(x for x in lines if x)}" for u, lines in turns]
    memory = [{"id": str(i), "text": t, "attributed_to": "assistant", "linked_memory_ids": []} for i, t in enumerate(facts)]
    return json.dumps({"memory": memory})


def _fenced(value) -> str:
    return "```json\n" + json.dumps(value, indent=2) + "\n```"


def reply(prompt: str) -> str | None:
    """The simulated answer to a baseline prompt, or None when ``prompt`` is none of them."""
    if "## New Messages\n" in prompt and "## Existing Memories\n" in prompt:
        return _mem0(prompt)
    if prompt.rstrip().endswith("High-level script:"):
        return rule_script(_section(prompt, "Trajectory:\n", "\nHigh-level script:"))
    if prompt.rstrip().endswith("Provide a brief reflection:"):
        task = _section(prompt, "Task: ", "\n")
        return rule_reflection(task, _section(prompt, "Failed trajectory:\n", "\nThis task failed."))
    if "# Step Sequence Analysis\n" in prompt:
        kind = "success" if "part of a successful trajectory" in prompt else "failure"
        fields = {"task": _section(prompt, "# Original Query\n", "\n# Step Sequence Analysis"),
                  "attempt": _section(prompt, "# Step Sequence Analysis\n", "\n# Context Information")}
        when, exp = rule_memory(kind, fields)
        return _fenced([{"when_to_use": when, "experience": exp, "tags": [kind], "confidence": 0.8}])
    if "# Higher-Scoring Step Sequence" in prompt:
        m = re.search(r"# Higher-Scoring Step Sequence \(Score: ([^)]*)\)\n([\s\S]*?)\n# Lower-Scoring Step Sequence \(Score: ([^)]*)\)\n([\s\S]*?)\n\nOUTPUT FORMAT", prompt)
        if not m:
            return None
        when, exp = rule_memory("comparative", {"higher": m.group(2).strip(), "lower": m.group(4).strip(),
                                                "higher_score": m.group(1), "lower_score": m.group(3)})
        return _fenced([{"when_to_use": when, "experience": exp, "tags": ["comparative"], "confidence": 0.7}])
    if "# Task Memory to Validate\n" in prompt:
        memory = _section(prompt, "# Task Memory to Validate\n", "\nOUTPUT FORMAT")
        ok = arithmetic_ok(memory)
        return _fenced({"is_valid": ok, "score": 0.8 if ok else 0.3,
                        "feedback": "steps are exact" if ok else "an arithmetic step is wrong", "recommendations": ""})
    if "# Candidate Experiences (Total: " in prompt:
        n = int(re.search(r"# Candidate Experiences \(Total: (\d+)\)", prompt).group(1))
        return _fenced({"ranked_indices": list(range(n)), "reasoning": "recall order"})
    if "# Original Context Content (Multiple Experiences)\n" in prompt:
        original = _section(prompt, "# Original Context Content (Multiple Experiences)\n", "\nOUTPUT FORMAT")
        return _fenced({"rewritten_context": original})
    return None
