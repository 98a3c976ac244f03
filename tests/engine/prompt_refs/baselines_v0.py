"""The baselines' prompt strings before they moved to engine/prompts/baselines.toml (byte-identity reference)."""

PROCEDURE_PROMPT = """Summarise an agent's attempt at a task into a short reusable procedure for similar tasks.
Task: {task}
Outcome: {outcome}
Trajectory:
{trajectory}

Write the procedure in at most five short lines. If the attempt failed, say what to avoid.
Procedure:
"""

_JSON_SPEC = (
    'Answer with a JSON list of 1-2 objects: [{{"when_to_use": "the situations where this applies", '
    '"experience": "the reusable lesson"}}]'
)
SUCCESS_PROMPT = """You extract reusable task memory from a SUCCESSFUL attempt.
Identify the steps and decisions that made it work, framed as a principle for similar tasks.

Task: {task}
Successful attempt:
{attempt}

""" + _JSON_SPEC + "\n"
FAILURE_PROMPT = """You extract reusable task memory from a FAILED attempt.
Identify the mistake or weak decision and how to avoid it in similar tasks.

Task: {task}
Failed attempt:
{attempt}

""" + _JSON_SPEC + "\n"
COMPARATIVE_PROMPT = """You compare a successful and a failed attempt at the same task.
Identify the decision that made the difference, framed as a rule for similar tasks.

Task: {task}
Successful attempt:
{success}
Failed attempt:
{failure}

""" + _JSON_SPEC + "\n"


SUCCESS_REFLECTION = """Analyze why this solution was correct:

Problem: {problem}

Solution: {solution}

Provide a brief reflection on what techniques made this solution work:"""

FAILURE_REFLECTION = """Analyze why this solution failed:

Problem: {problem}

Your solution: {solution}

Correct solution: {ground_truth}

Identify the key mistake or misconception:"""
