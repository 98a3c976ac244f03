#!/usr/bin/env python3
"""Reader MemTool: returns the question and the retrieved item's title, url, date and content."""
import json
from pathlib import Path
from typing import Any, Final

TOOL_NAME: Final[str] = "tool_read_raw_item"
TOOL_SPEC: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Read raw_data.json of the current item: question, source title/url/date and content.",
        "parameters": {
            "type": "object",
            "properties": {"max_chars": {"type": "integer", "description": "Truncate content to this many characters."}},
            "additionalProperties": False,
        },
    },
}


def build_runner_kwargs(arguments: dict[str, Any], config: Any, runtime_context: Any) -> dict[str, Any]:
    item_dir = str(getattr(runtime_context, "item_dir", "") or "").strip()
    input_filename = str(getattr(runtime_context, "input_filename", "") or "").strip()
    if not item_dir or not input_filename:
        raise ValueError(f"{TOOL_NAME} requires runtime item_dir and input_filename")
    max_chars = arguments.get("max_chars", 4000)
    if not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(f"{TOOL_NAME}: max_chars must be a positive integer, got {max_chars!r}")
    return {"item_dir": item_dir, "input_filename": input_filename, "max_chars": max_chars}


def run_tool(*, item_dir: str, input_filename: str, max_chars: int) -> str:
    path = Path(item_dir) / input_filename
    if not path.is_file():
        raise ValueError(f"{TOOL_NAME}: missing input file {input_filename}")
    data = json.loads(path.read_text(encoding="utf-8"))
    item = data.get("item") or {}
    content = str(item.get("content", ""))
    return (
        f"QUESTION: {data.get('problem_statement', '')}\n"
        f"SOURCE: {item.get('title', '')} | {item.get('url', '')} | {item.get('published_date', '')}\n"
        f"CONTENT: {content[:max_chars]}"
    )


__all__ = ["TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool"]
