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
"""

from __future__ import annotations

import json

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
TOOL_CALL_HELP = (
    'To call a tool, write exactly one line <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call> '
    "and nothing after it."
)


def main_system(cutoff: str) -> str:
    return (
        f"You can work over several turns and may use the {SEARCH_TOOL} tool when it helps. "
        f"Only evidence available before {cutoff} can be found. The {SEARCH_TOOL} tool searches for you and returns "
        "processed evidence, not raw pages; it can still be cut short, so keep only what matters. "
        f"Call {SEARCH_TOOL} at most once per assistant turn and never put several searches in one turn; "
        "if you need more evidence, search again in a later turn. Only your final answer must follow the "
        "task's answer format.\n"
        f"Available tool (OpenAI function schema): {json.dumps(SEARCH_SPEC)}\n{TOOL_CALL_HELP}"
    )


FINAL_TURN = (
    "This is your last allowed turn. Do not call any tool. Give the final answer now, using only the "
    "required answer format."
)

REPAIR = (
    "Your previous answer could not be used: {problem}. Answer again with only the required format, "
    "without calling any tool."
)


def experience_section(bank) -> str:
    """Prompt 2: the Experience Bank section (empty when the bank is empty)."""
    if not bank:
        return ""
    lines = "\n".join(f"- [{eid}] {text}" for eid, text in bank)
    return ("Experience Bank:\nReusable lessons from earlier forecasts. Apply them when they fit, but direct "
            f"evidence about this event comes first.\n{lines}\n")


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
    return (
        f"You are a forecasting assistant. You may reason over several turns and call {SEARCH_TOOL} for more "
        f"evidence; it returns processed evidence, not raw results. {search_note} In the final rationale, weigh "
        "and cite the most relevant evidence rather than a generic explanation. Only your final reply must be "
        "the JSON object.\n\n"
        f"{experience_section(bank)}\n"
        f"Question:\n{q.text}\nRules: {q.rules}\nClose time: {q.close_time.isoformat()}\n\n"
        f"Market context (snapshot {q.snapshot_time.isoformat()}):\n" + "\n".join(market_lines) + "\n\n"
        f"Evidence:\n{sources_context or '(use the search tool to gather evidence)'}\n\n"
        "Final answer requirements:\nReply with exactly one JSON object, no markdown fences:\n"
        '{\n  "rationale": "<a detailed rationale that cites and evaluates the most relevant evidence>",\n'
        '  "probabilities": {\n    ' + example + "\n  }\n}\n"
        "Requirements:\n- Use exactly the listed outcome names, case-sensitive.\n- Do not add outcomes.\n"
        "- Every listed outcome appears exactly once.\n- Every probability is a number between 0 and 1.\n"
        "- Give a detailed rationale: cite and evaluate the most relevant evidence, explain its limits, and "
        "discuss uncertainties or conflicting signals (Prompt 4)."
    )


def futurex_prompt(item, bank, search_note: str = "") -> str:
    """Prompt 3: FutureX task prompt (rationale then a boxed answer)."""
    return (
        f"You are an agent that forecasts future events. You may reason over several turns and call "
        f"{SEARCH_TOOL} for supporting evidence; it returns processed evidence, not raw results. {search_note} "
        "In the final reply give a rationale that cites and weighs the most relevant evidence, notes its limits "
        "and conflicting signals, then end with the boxed answer.\n\n"
        f"{experience_section(bank)}\n"
        f"Event to predict:\n{item.question}\n\nFinal answer requirements:\n{item.answer_requirements}\n\n"
        "Response format:\nRationale: <evidence-based explanation>\n\n\\boxed{<final answer>}\n\n"
        "Write nothing after the boxed answer."
    )


def subagent_system(guide: dict, tool_specs: list[dict]) -> str:
    """Prompt 5 (system) with the active MemGuide's prompt and its allowed MemTools."""
    return (
        "You are a data-processing subagent. For the current item_dir, use the MemTools provided to read the "
        "input file, process it and make sure the output file is written. Do not invent file contents. Stop as "
        "soon as the output file exists.\n\n"
        f"MemGuide ({guide['guide_name']}):\n{guide['prompt']}\n\n"
        "Allowed MemTools (OpenAI function schemas):\n" + "\n".join(json.dumps(s) for s in tool_specs)
        + f"\n{TOOL_CALL_HELP}"
    )


def subagent_user(item_dir: str, input_filename: str, output_filename: str) -> str:
    return (f"Current item_dir: {item_dir}\nInput filename: {input_filename}\nOutput filename: {output_filename}\n"
            f"Create {output_filename} for this item_dir.")


AUTHORING_COMMON = """You are creating one MemGuide, and optionally MemTools, for the data-processing subagent of a
forecasting agent. The workflow handles one item_dir: it starts from item_dir/raw_data.json (UTF-8 JSON with a
top-level "item" object holding title, url, content, published_date, score, plus metadata such as query,
problem_statement, task_requirements, search_before) and must end by writing item_dir/final_data.txt (UTF-8 plain
text, not JSON) derived only from the input. Prefer workflows with explicit stages (read, extract, save and reread
intermediate files inside item_dir, compress, validate, write) and tools with clearly different roles; renamed
near-copies of existing reader/writer tools are not novelty.
MemGuide: a JSON object with non-empty "guide_name", "prompt" and "tool_names" (a non-empty list; every name must
be an available MemTool). The prompt must tell the subagent to work only in the current item_dir, use the listed
MemTools, never invent file contents, and stop once final_data.txt exists.
MemTool: one Python file defining TOOL_NAME (str), TOOL_SPEC ({"type": "function", "function": {"name": TOOL_NAME,
"description": ..., "parameters": <JSON Schema object>}}), build_runner_kwargs(arguments, config,
runtime_context) -> dict (runtime_context has item_dir, input_filename, output_filename), run_tool(**kwargs) -> str,
and __all__ = ["TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool"]. run_tool returns a string, raises
ValueError with a clear message on missing files or bad arguments, and reads/writes only inside item_dir.
Every MemTool runs in a bwrap sandbox: standard library only, no network, item_dir is the only writable folder,
/tmp is private, everything else is read-only or absent. Use ASCII in code and no interactive input."""


def editor_prompt(bank, guide_context: str, run_result: str, rollout: str, max_suggestions: int = 3) -> str:
    """Prompt 7: textual experience evolution (add / modify / remove suggestions in priority order)."""
    bank_json = json.dumps([{"experience_id": e, "text": t} for e, t in bank], indent=1)
    return f"""You decide whether the main agent's Experience Bank should change after one forecasting rollout.
Inspect the current bank (active experience_id/text pairs only), the best MemGuide's validation context, the
final result on the sampled training question and the rollout summary (task, main-agent log, ground truth,
evaluation). Consider which evidence pointed to the right answer, where the agent's behaviour contradicted it,
whether the information could have been used better, whether an insight is general and reliable enough to keep,
and whether an existing experience is wrong, misleading, redundant or should be rewritten.

Current Experience Bank:
{bank_json}

Current best guide context:
{guide_context}

Final run result:
{run_result}

Rollout summary (main agent only):
{rollout}

Reply with exactly one JSON object, no fences, no other text. At most {max_suggestions} suggestions, ordered from
highest to lowest priority (priority 1 is highest); they are tried in that order until one is accepted. Operations:
"add", "modify", "remove". "modify" and "remove" must copy an existing experience_id exactly into
"target_experience_id"; "add" and "modify" need a concrete "new_text". Suggest only general changes likely to
improve validation; return an empty list if nothing is worth changing.
{{"suggestions": [{{"priority": 1, "operation": "add", "target_experience_id": "", "new_text": "...",
"analysis": "...", "generality_assessment": "...", "expected_benefit": "..."}}]}}"""


def critic_prompt(guide: dict, tool_sources: str, rollout: str) -> str:
    """Prompt 8: procedural critic -> should_evolve, analysis, design_requirement."""
    return f"""You judge whether a MemGuide and its MemTools turn retrieved evidence into good factual memory for
forecasting. Do not write code. Check whether the output keeps the most relevant information, loses evidence,
keeps noise or is badly formatted, follows the question's requirements, is robust rather than overfit to one
example, and whether the tools suffice or need extending.

Current MemGuide JSON:
{json.dumps(guide, indent=1)}

Current MemTool source code:
{tool_sources}

Processed rollout summary:
{rollout}

Reply with exactly one JSON object, no fences:
{{"should_evolve": <true or false>, "analysis": "<short concrete explanation>",
"design_requirement": "<empty if should_evolve is false, else a concrete requirement for the next guide/tool generation>"}}"""


def reuse_prompt(requirement: str, tool_defs: str) -> str:
    """Prompt 9: pick at most 3 existing tools to reuse for a design requirement."""
    return f"""{AUTHORING_COMMON}

Intermediate step before generation: do not write guide JSON or code. Pick at most 3 existing tools that best
support the design requirement, only from the TOOL_NAME values below; prefer complementary tools covering different
stages (read, write intermediate, reread, merge, validate, write final); never pick near-duplicates together;
an empty list is fine when nothing fits.

Current design requirement:
{requirement}

Existing tools (TOOL_NAME + TOOL_SPEC):
{tool_defs}

Reply with exactly one JSON object, no fences:
{{"candidate_tool_names": ["<TOOL_NAME>"], "analysis": "<why these, or why none>"}}"""


def generator_prompt(requirement: str, reuse_defs: str, reuse_sources: str) -> str:
    """Prompt 10: generate one MemGuide JSON block plus any new MemTool code blocks."""
    return f"""{AUTHORING_COMMON}

Final generation step.
Current design requirement:
{requirement}

Reusable existing tools (TOOL_NAME + TOOL_SPEC):
{reuse_defs}

Their source code:
{reuse_sources}

Reuse a listed tool by putting its TOOL_NAME in tool_names instead of rewriting it; write new MemTool code only
for what the listed tools cannot do. Output format, nothing else: first exactly one ```json fenced block with the
MemGuide, then zero or more ```python fenced blocks, one complete MemTool each. The first characters of your reply
must be ```json"""


def classifier_prompt(representatives: str, candidate: str) -> str:
    """Prompt 11: assign a new guide to an existing category or open a new one."""
    return f"""You classify one new MemGuide into existing guide categories, each represented by one guide
(guide_file, guide_name, prompt, tool_names, and each tool's TOOL_NAME and TOOL_SPEC).

Existing category representatives:
{representatives}

New guide candidate:
{candidate}

Judge workflow intent, processing strategy, prompt behaviour and tool roles, not file names or wording. Guides with
the same stage structure (e.g. both "read raw -> LLM -> write final") belong together even if names or formats
differ. Open a new category only for a real change in stage count, state transitions, intermediate files, tool
composition or responsibility split.
Reply with exactly one JSON object:
{{"matched_representative_guide_file": "<one representative guide_file, or null>", "analysis": "<short reason>"}}"""


def explore_prompt(representatives: str) -> str:
    """Exploration generation step of diversity-guided exploration (paper 3.2.3)."""
    return f"""{AUTHORING_COMMON}

Exploration generation step. Current guide category representatives:
{representatives}

Create one new MemGuide (and any new MemTools) whose workflow is clearly different from every representative:
different stage count, state transitions, intermediate artifacts or tool-role split, not renamed tools or
reworded prompts. Prefer multi-stage designs (3 or more stages) that save and reread intermediate files inside
item_dir. Output format: one ```json block with the MemGuide, then one ```python block per new MemTool; the first
characters of your reply must be ```json"""
