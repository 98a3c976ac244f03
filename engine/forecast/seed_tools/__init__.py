"""Seed MemTools and the default MemGuide shipped with the package.

Each ``tool_*.py`` here is a MemTool file (Prompt 6 interface: TOOL_NAME,
TOOL_SPEC, build_runner_kwargs, run_tool); it is read as text and executed only
inside the sandbox, never imported by the engine.
"""

from pathlib import Path

FOLDER = Path(__file__).parent

DEFAULT_GUIDE = {
    "guide_name": "extract_relevant_then_finalize",
    "prompt": (
        "Work only on the current item_dir and use only the MemTools listed for this guide. "
        "Stage 1: call tool_read_raw_item to see the question and the retrieved item. "
        "Stage 2: call tool_extract_relevant_sentences with a few keywords from the question; it saves "
        "relevant_sentences.txt inside item_dir. Stage 3: call tool_finalize_from_intermediate, which rereads "
        "relevant_sentences.txt and writes the output file as plain text with the source title, url and date. "
        "If you have a better concise factual summary, you may instead pass it to tool_write_final_text. "
        "Never invent facts or file contents. Stop once the output file has been created."
    ),
    "tool_names": [
        "tool_read_raw_item",
        "tool_extract_relevant_sentences",
        "tool_finalize_from_intermediate",
        "tool_write_final_text",
    ],
}


def seed_tool_sources() -> dict[str, str]:
    """file stem -> source of every seed MemTool."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(FOLDER.glob("tool_*.py"))}
