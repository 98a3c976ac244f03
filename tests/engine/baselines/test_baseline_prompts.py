"""MemRL's and ReMe's shipped prompts render to the originals' text (Python format strings of their code)."""

from engine.baselines import prompts as B

# MemTensor/MemRL@7c3beba memrl/service/updater.py AdjustmentUpdater._generate_reflection (an f-string)
MEMRL_REFLECTION = """
Task: {task_description}

Failed trajectory:
{failed_trajectory}

This task failed. Analyze what went wrong and suggest improvements for future similar tasks.
Focus on:
1. Incorrect assumptions
2. Steps to improve
3. What to avoid next time

Provide a brief reflection:
"""

# modelscope/ReMe@4dd90e4 reme_ai/summary/task/memory_validation_prompt.yaml (a str.format template)
REME_VALIDATION = """You are an expert AI analyst tasked with validating the quality and usefulness of extracted step-level task memories.

Your task is to assess whether the extracted task memory is actionable, accurate, and valuable for future agent executions.

VALIDATION CRITERIA:
● ACTIONABILITY: Is the task memory specific enough to guide future actions?
● ACCURACY: Does the task memory correctly reflect the patterns observed?
● RELEVANCE: Is the task memory applicable to similar future scenarios?
● CLARITY: Is the task memory clearly articulated and understandable?
● UNIQUENESS: Does the task memory provide novel insights or common knowledge?

# Task Memory to Validate
Condition: {condition}
Task Memory Content: {task_memory_content}

OUTPUT FORMAT:
Provide validation assessment:
```json
{{
  "is_valid": true/false,
  "score": 0.8,
  "feedback": "Detailed explanation of validation decision",
  "recommendations": "Suggestions for improvement if applicable"
}}
```

Score should be between 0.0 (poor quality) and 1.0 (excellent quality).
Mark as invalid if score is below 0.3 or if there are fundamental issues with the task memory.
"""


def test_memrl_reflection_is_the_original():
    got = B.render("memrl_reflection", task="4 9 10 13", trajectory="QUESTION\nq\n\nSOLUTION\ns\n")
    assert got == MEMRL_REFLECTION.format(task_description="4 9 10 13", failed_trajectory="QUESTION\nq\n\nSOLUTION\ns\n")[1:]


def test_reme_validation_is_the_original():
    got = B.render("reme_validation", condition="when x", content="do y")
    assert got == REME_VALIDATION.format(condition="when x", task_memory_content="do y")


def test_reme_success_context_is_the_original_query_line():
    got = B.render("reme_success", task="4 9 10 13", attempt="### step.0 role=user content=\n4 9 10 13\n")
    # get_trajectory_context on a whole trajectory: "Query: <query>\n" (no previous / following steps)
    assert "# Context Information\nQuery: 4 9 10 13\n\n\n# Outcome\nThis step sequence was part of a successful trajectory." in got
