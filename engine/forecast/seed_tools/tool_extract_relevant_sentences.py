#!/usr/bin/env python3
"""Extractor MemTool: keeps the content sentences sharing the most words with the question; saves them."""
import json
import re
from pathlib import Path
from typing import Any, Final

TOOL_NAME: Final[str] = "tool_extract_relevant_sentences"
TOOL_SPEC: Final[dict[str, Any]] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Rank content sentences by word overlap with the question (plus optional keywords), "
                       "save the top ones to relevant_sentences.txt in item_dir and return them.",
        "parameters": {
            "type": "object",
            "properties": {
                "keywords": {"type": "string", "description": "Extra keywords, space separated."},
                "max_sentences": {"type": "integer", "description": "How many sentences to keep (default 6)."},
            },
            "additionalProperties": False,
        },
    },
}

_WORD = re.compile(r"[a-z0-9]+")
_STOP = set("the a an of to in on for and or is are be will by at with as that this what which who from it "
            "its was were has have had not than more less above below".split())


def build_runner_kwargs(arguments: dict[str, Any], config: Any, runtime_context: Any) -> dict[str, Any]:
    item_dir = str(getattr(runtime_context, "item_dir", "") or "").strip()
    input_filename = str(getattr(runtime_context, "input_filename", "") or "").strip()
    if not item_dir or not input_filename:
        raise ValueError(f"{TOOL_NAME} requires runtime item_dir and input_filename")
    keywords = arguments.get("keywords", "")
    n = arguments.get("max_sentences", 6)
    if not isinstance(keywords, str):
        raise ValueError(f"{TOOL_NAME}: keywords must be a string, got {type(keywords).__name__}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"{TOOL_NAME}: max_sentences must be a positive integer, got {n!r}")
    return {"item_dir": item_dir, "input_filename": input_filename, "keywords": keywords, "max_sentences": n}


def run_tool(*, item_dir: str, input_filename: str, keywords: str, max_sentences: int) -> str:
    path = Path(item_dir) / input_filename
    if not path.is_file():
        raise ValueError(f"{TOOL_NAME}: missing input file {input_filename}")
    data = json.loads(path.read_text(encoding="utf-8"))
    content = str((data.get("item") or {}).get("content", ""))
    query = set(_WORD.findall((str(data.get("problem_statement", "")) + " " + keywords).lower())) - _STOP
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", content) if s.strip()]
    scored = sorted(range(len(sentences)),
                    key=lambda i: (-len(query & set(_WORD.findall(sentences[i].lower()))), i))
    keep = sorted(scored[:max_sentences])
    text = "\n".join(f"- {sentences[i]}" for i in keep)
    (Path(item_dir) / "relevant_sentences.txt").write_text(text, encoding="utf-8")
    return text or "(no sentences found)"


__all__ = ["TOOL_NAME", "TOOL_SPEC", "build_runner_kwargs", "run_tool"]
