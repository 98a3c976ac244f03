"""Every ForeDreamer prompt, written for this engine following the structure of the paper's Appendix F.

Inference: main-agent system message and final-turn message (Prompt 1), the
Experience Bank section (Prompt 2), the FutureX and Prophet Arena task prompts
(Prompts 3, 4), the memory-processing subagent (Prompt 5). Evolution: shared
authoring rules (Prompt 6), Experience Bank editor (Prompt 7), procedural
critic (Prompt 8), tool-reuse selection (Prompt 9), generator (Prompt 10),
guide-category classifier (Prompt 11) and exploration generator.

Tool calls are written in the text as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the engine's LLM
interface carries plain messages), with the tools described by their
OpenAI function-tool schemas.

The prompts' text lives in ``engine/prompts/forecast.toml`` (Jinja2 templates,
see :mod:`engine.templates` and docs/prompts.md); ``[prompts] file`` in a
forecast config points a run at its own file.
"""

from __future__ import annotations

import json

from engine import templates

SEARCH_TOOL = "web_search_and_process"
SEARCH_SPEC = {
    "type": "function",
    "function": {
        "name": SEARCH_TOOL,
        "description": "Search for evidence published before the question's cutoff and return processed factual memory.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The search query."}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}
# The prompts' text lives in engine/prompts/forecast.toml (engine.templates); these are the placeholders each
# one takes. The functions below keep their signatures, prepare the placeholders and render.
TEMPLATE_SET = "forecast"
PLACEHOLDERS: dict[str, set[str]] = {
    "tool_call_help": set(),
    "main_system": {"cutoff", "search_tool", "search_spec", "tool_call_help"},
    "final_turn": set(),
    "repair": {"problem"},
    "experience_section": {"experiences"},
    "prophet": {"search_tool", "search_note", "experience_section", "question", "rules", "close_time",
                "snapshot_time", "market_lines", "sources_context", "outcomes_example"},
    "futurex": {"search_tool", "search_note", "experience_section", "question", "answer_requirements"},
    "subagent_system": {"guide_name", "guide_prompt", "tool_specs", "tool_call_help"},
    "subagent_user": {"item_dir", "input_filename", "output_filename"},
    "authoring_common": set(),
    "editor": {"bank_json", "guide_context", "run_result", "rollout", "max_suggestions"},
    "critic": {"guide_json", "tool_sources", "rollout"},
    "reuse": {"authoring_common", "requirement", "tool_defs"},
    "generator": {"authoring_common", "requirement", "reuse_defs", "reuse_sources"},
    "classifier": {"representatives", "candidate"},
    "explore": {"authoring_common", "representatives"},
}
templates.register(TEMPLATE_SET, PLACEHOLDERS)


def _render(prompt: str, **values) -> str:
    return templates.active(TEMPLATE_SET).render(prompt, **values)


def __getattr__(name: str) -> str:
    """``TOOL_CALL_HELP``, ``FINAL_TURN``, ``AUTHORING_COMMON``: the active templates' text (PEP 562)."""
    got = {"TOOL_CALL_HELP": "tool_call_help", "FINAL_TURN": "final_turn", "AUTHORING_COMMON": "authoring_common"}
    if name in got:
        return _render(got[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main_system(cutoff: str) -> str:
    return _render("main_system", cutoff=cutoff, search_tool=SEARCH_TOOL, search_spec=json.dumps(SEARCH_SPEC),
                   tool_call_help=_render("tool_call_help"))


def repair_prompt(problem: str) -> str:
    """The message sent after an unusable final answer."""
    return _render("repair", problem=problem)


def experience_section(bank) -> str:
    """Prompt 2: the Experience Bank section (empty when the bank is empty)."""
    lines = "\n".join(f"- [{eid}] {text}" for eid, text in bank) if bank else ""
    return _render("experience_section", experiences=lines)


def prophet_prompt(q, bank, sources_context: str = "", search_note: str = "", market_prior: bool = False) -> str:
    """Prompt 4: Prophet Arena task prompt (one probability per listed outcome, JSON only).

    ``market_prior`` adds each outcome's implied probability (mid price) to the market context.
    """
    market_lines = []
    for m in q.markets:
        quote = q.market_data.get(m)
        if quote:
            line = f"- {m}: yes_bid {quote.get('yes_bid')}, yes_ask {quote.get('yes_ask')} (cents)"
            if market_prior and quote.get("yes_bid") is not None and quote.get("yes_ask") is not None:
                line += f"; implied probability {(float(quote['yes_bid']) + float(quote['yes_ask'])) / 200:.3f}"
            market_lines.append(line)
        else:
            market_lines.append(f"- {m}: no quote")
    example = ",\n    ".join(f'"{m}": <probability from 0 to 1>' for m in q.markets)
    return _render("prophet", search_tool=SEARCH_TOOL, search_note=search_note,
                   experience_section=experience_section(bank), question=q.text, rules=q.rules,
                   close_time=q.close_time.isoformat(), snapshot_time=q.snapshot_time.isoformat(),
                   market_lines="\n".join(market_lines), sources_context=sources_context, outcomes_example=example)


def futurex_prompt(item, bank, search_note: str = "") -> str:
    """Prompt 3: FutureX task prompt (rationale then a boxed answer)."""
    return _render("futurex", search_tool=SEARCH_TOOL, search_note=search_note,
                   experience_section=experience_section(bank), question=item.question,
                   answer_requirements=item.answer_requirements)


def subagent_system(guide: dict, tool_specs: list[dict]) -> str:
    """Prompt 5 (system) with the active MemGuide's prompt and its allowed MemTools."""
    return _render("subagent_system", guide_name=guide["guide_name"], guide_prompt=guide["prompt"],
                   tool_specs="\n".join(json.dumps(s) for s in tool_specs), tool_call_help=_render("tool_call_help"))


def subagent_user(item_dir: str, input_filename: str, output_filename: str) -> str:
    return _render("subagent_user", item_dir=item_dir, input_filename=input_filename,
                   output_filename=output_filename)


def editor_prompt(bank, guide_context: str, run_result: str, rollout: str, max_suggestions: int = 3) -> str:
    """Prompt 7: textual experience evolution (add / modify / remove suggestions in priority order)."""
    bank_json = json.dumps([{"experience_id": e, "text": t} for e, t in bank], indent=1)
    return _render("editor", bank_json=bank_json, guide_context=guide_context, run_result=run_result,
                   rollout=rollout, max_suggestions=max_suggestions)


def critic_prompt(guide: dict, tool_sources: str, rollout: str) -> str:
    """Prompt 8: procedural critic -> should_evolve, analysis, design_requirement."""
    return _render("critic", guide_json=json.dumps(guide, indent=1), tool_sources=tool_sources, rollout=rollout)


def reuse_prompt(requirement: str, tool_defs: str) -> str:
    """Prompt 9: pick at most 3 existing tools to reuse for a design requirement."""
    return _render("reuse", authoring_common=_render("authoring_common"), requirement=requirement,
                   tool_defs=tool_defs)


def generator_prompt(requirement: str, reuse_defs: str, reuse_sources: str) -> str:
    """Prompt 10: generate one MemGuide JSON block plus any new MemTool code blocks."""
    return _render("generator", authoring_common=_render("authoring_common"), requirement=requirement,
                   reuse_defs=reuse_defs, reuse_sources=reuse_sources)


def classifier_prompt(representatives: str, candidate: str) -> str:
    """Prompt 11: assign a new guide to an existing category or open a new one."""
    return _render("classifier", representatives=representatives, candidate=candidate)


def explore_prompt(representatives: str) -> str:
    """Exploration generation step of diversity-guided exploration (paper 3.2.3)."""
    return _render("explore", authoring_common=_render("authoring_common"), representatives=representatives)
