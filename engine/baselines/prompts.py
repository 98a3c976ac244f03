"""The baselines' extraction and reflection prompts, rendered from ``engine/prompts/baselines.toml``.

MemRL's script and reflection prompts, ReMe's success / failure / comparative
extraction, validation, rerank and rewrite prompts (the originals' text) and
FLEX's two reflection prompts (seed 002) are Jinja2 templates (see
:mod:`engine.templates`, docs/prompts.md); a run points ``[prompts] baselines``
at its own file to change them. mem0ai's own prompts belong to the library and
stay there.
"""

from __future__ import annotations

from engine import templates

TEMPLATE_SET = "baselines"
PLACEHOLDERS: dict[str, set[str]] = {
    "memrl_script": {"trajectory"},
    "memrl_reflection": {"task", "trajectory"},
    "reme_success": {"task", "attempt"},
    "reme_failure": {"task", "attempt"},
    "reme_comparative": {"higher", "lower", "higher_score", "lower_score"},
    "reme_validation": {"condition", "content"},
    "reme_rerank": {"query", "candidates", "num_candidates"},
    "reme_rewrite": {"query", "context", "original"},
    "flex_success_reflection": {"problem", "solution"},
    "flex_failure_reflection": {"problem", "solution", "ground_truth"},
}
templates.register(TEMPLATE_SET, PLACEHOLDERS)


def render(prompt: str, **values) -> str:
    """Prompt ``prompt`` of the active baselines templates with ``values`` (every placeholder it takes)."""
    return templates.active(TEMPLATE_SET).render(prompt, **values)
