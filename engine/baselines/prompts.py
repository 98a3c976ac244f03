"""The baselines' extraction and reflection prompts, rendered from ``engine/prompts/baselines.toml``.

MemRL's script and reflection prompts, ReMe's success / failure / comparative
extraction, validation, rerank and rewrite prompts (the originals' text) and
FLEX's two reflection prompts (seed 002) and the prompts of HippoRAG 2, MemoryOS,
A-MEM, LightMem and LangMem (the originals' text) are Jinja2 templates (see
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
    # the ForeDreamer paper's memory baselines (engine/baselines/{hipporag,memoryos,amem,lightmem,langmem}.py)
    "hipporag_ner_system": set(),
    "hipporag_ner_example_input": set(),
    "hipporag_ner_example_output": set(),
    "hipporag_triple_system": set(),
    "hipporag_triple_example_output": set(),
    "hipporag_triple_frame": {"passage", "named_entity_json"},
    "memoryos_multi_summary_system": set(),
    "memoryos_multi_summary_user": {"text"},
    "amem_analysis": {"content"},
    "amem_evolution": {"context", "content", "keywords", "nearest_neighbors_memories", "neighbor_number"},
    "lightmem_extraction": set(),
    "lightmem_update": set(),
    "langmem_instructions": set(),
    "langmem_json_format": {"instructions", "session", "existing"},
}
templates.register(TEMPLATE_SET, PLACEHOLDERS)


def render(prompt: str, **values) -> str:
    """Prompt ``prompt`` of the active baselines templates with ``values`` (every placeholder it takes)."""
    return templates.active(TEMPLATE_SET).render(prompt, **values)
