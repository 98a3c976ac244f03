#!/usr/bin/env python3
"""Finalizer MemTool: rereads relevant_sentences.txt (or the raw content) and writes the output file."""
import json
from pathlib import Path
from typing import Any, Final

TOOL_NAME: Final[str] = "tool_finalize_from_intermediate"
TOOL_SPEC: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Write the output file as plain text: source header plus relevant_sentences.txt "
                       "(falls back to the first 1500 characters of the raw content).",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
}


def build_runner_kwargs(arguments: dict[str, Any], config: Any, runtime_context: Any) -> dict[str, Any]:
    del arguments, config
    kw = {k: str(getattr(runtime_context, k, "") or "").strip() for k in ("item_dir", "input_filename", "output_filename")}
    for k, v in kw.items():
        if not v:
            raise ValueError(f"{TOOL_NAME} requires a non-empty runtime {k}")
    return kw


def run_tool(*, item_dir: str, input_filename: str, output_filename: str) -> str:
    base = Path(item_dir)
    path = base / input_filename
    if not path.is_file():
        raise ValueError(f"{TOOL_NAME}: missing input file {input_filename}")
    item = json.loads(path.read_text(encoding="utf-8")).get("item") or {}
    mid = base / "relevant_sentences.txt"
    body = mid.read_text(encoding="utf-8").strip() if mid.is_file() else ""
    if not body:
        body = str(item.get("content", ""))[:1500]
    text = f"[{item.get('published_date', '')}] {item.get('title', '')} ({item.get('url', '')})\n{body}\n"
    (base / output_filename).write_text(text, encoding="utf-8")
    return f"wrote {output_filename} ({len(text)} characters)"


__all__ = ["TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool"]
