#!/usr/bin/env python3
"""Writer MemTool: writes the LLM's final factual text to the output file."""
from pathlib import Path
from typing import Any, Final

TOOL_NAME: Final[str] = "tool_write_final_text"
TOOL_SPEC: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Write the given plain text (the final factual memory) to the output file of item_dir.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "Final plain-text factual memory."}},
            "required": ["text"],
            "additionalProperties": False,
        },
    },
}


def build_runner_kwargs(arguments: dict[str, Any], config: Any, runtime_context: Any) -> dict[str, Any]:
    item_dir = str(getattr(runtime_context, "item_dir", "") or "").strip()
    output_filename = str(getattr(runtime_context, "output_filename", "") or "").strip()
    text = arguments.get("text")
    if not item_dir or not output_filename:
        raise ValueError(f"{TOOL_NAME} requires runtime item_dir and output_filename")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{TOOL_NAME}: argument text must be a non-empty string")
    return {"item_dir": item_dir, "output_filename": output_filename, "text": text}


def run_tool(*, item_dir: str, output_filename: str, text: str) -> str:
    (Path(item_dir) / output_filename).write_text(text.strip() + "\n", encoding="utf-8")
    return f"wrote {output_filename} ({len(text)} characters)"


__all__ = ["TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool"]
