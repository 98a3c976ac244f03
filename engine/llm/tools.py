"""Tool calls on every backend, through structured outputs.

A library that calls its LLM with OpenAI-style tools (``tools=[{"type": "function", "function": {"name",
"description", "parameters"}}]``) and reads tool calls back (LangMem through trustcall, mem0's graph
memory) runs on the engine's backends, which answer text, in three steps:

1. :func:`tool_messages`: the library's messages, the tool definitions added to the system message as
   text (with the one answer format below), assistant tool calls and ``tool`` results written as text;
2. :func:`tool_constraint`: the answer's JSON schema, the union of the tools' argument schemas::

       {"content": str, "tool_calls": [{"name": <a tool's name>, "arguments": <that tool's parameters>}, ...]}

   a :class:`~engine.llm.structured.Constraint` of kind ``tool_calls``, so every backend enforces it its own
   way (``response_format`` / ``guided_json`` / llama.cpp ``json_schema``; the simulated policies write the
   format themselves, engine.llm.structured);
3. :func:`parse_tool_calls`: the answer text as ``(content, [ToolCall(name, arguments, id)])``, tolerant
   (a fenced or bare object, a bare list of calls, one call alone, ``arguments`` as a JSON string, ``args``
   / ``parameters`` for ``arguments``); a call with an unknown name, non-object arguments or a missing
   required argument is dropped and counted, an answer with no JSON is counted failed (:class:`ToolStats`).
   Nothing is raised for a bad answer: the library sees an answer without tool calls.

``tool_choice`` (OpenAI's and LangChain's spellings): ``"auto"`` / ``None`` (zero or more calls),
``"none"`` (no tools: plain text, no constraint), ``"required"`` / ``"any"`` (at least one call), a tool's
name or ``{"type": "function", "function": {"name": ...}}`` (calls of that tool only, at least one).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from engine.errors import InputError
from engine.llm.base import Request
from engine.llm.structured import Constraint, first_json_value


TOOL_BLOCK = """# Tools

You can call these tools (JSON Schema of each tool's arguments):

{tools}

# Answer format

Answer with ONE JSON object and nothing else:
{{"content": "<text for the user, may be empty>", "tool_calls": [{{"name": "<tool name>", "arguments": {{...}}}}, ...]}}
{rule}"""

_RULES = {"auto": "Call as many tools as the task needs, in one answer; an empty list calls none.",
          "required": "Call at least one tool."}


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's ``name``, its ``arguments`` (a dict) and a stable ``id``."""

    name: str
    arguments: dict
    id: str


@dataclass
class ToolStats:
    """Counts over parsed answers: ``answers``, ``calls`` kept, ``dropped`` calls, ``failed`` answers."""

    answers: int = 0
    calls: int = 0
    dropped: int = 0  # a call with an unknown name, non-object arguments or a missing required argument
    failed: int = 0  # an answer with no JSON object or list of calls in it
    reasons: list[str] = field(default_factory=list)  # the first few, for the run's record

    def note(self, reason: str) -> None:
        if len(self.reasons) < 20:
            self.reasons.append(reason)

    def as_dict(self) -> dict:
        return {"answers": self.answers, "calls": self.calls, "dropped": self.dropped, "failed": self.failed}


def tool_specs(tools: Sequence[Mapping]) -> tuple[dict, ...]:
    """The tools as ``{"name", "description", "parameters"}`` (OpenAI's ``{"type": "function", "function": ...}``
    or the bare function dict); names unique, ``parameters`` an object schema (``{}`` when absent)."""
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise InputError(f"tools must be a list of tool definitions, got {type(tools).__name__}")
    out, seen = [], set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping):
            raise InputError(f"tools[{i}] must be a dict, got {type(tool).__name__}")
        fn = tool.get("function", tool) if tool.get("type", "function") == "function" else None
        if not isinstance(fn, Mapping):
            raise InputError(f"tools[{i}] must be a function tool ({{'type': 'function', 'function': {{...}}}}), "
                             f"got type {tool.get('type')!r}")
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"tools[{i}].name must be a non-empty string, got {name!r}")
        if name in seen:
            raise InputError(f"tools[{i}].name {name!r} is given twice")
        seen.add(name)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, Mapping) or params.get("type", "object") != "object":
            raise InputError(f"tools[{i}] ({name}).parameters must be an object schema, got {params!r}")
        out.append({"name": name, "description": str(fn.get("description") or ""), "parameters": dict(params)})
    if not out:
        raise InputError("tools must name at least one tool")
    return tuple(out)


def _choice(tool_choice, names: Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """``(mode, allowed names)`` with mode ``"auto"``, ``"required"`` or ``"none"``."""
    if tool_choice is None or tool_choice == "auto":
        return "auto", tuple(names)
    if tool_choice == "none":
        return "none", ()
    if tool_choice in ("required", "any", True):
        return "required", tuple(names)
    if isinstance(tool_choice, Mapping):
        tool_choice = (tool_choice.get("function") or {}).get("name", tool_choice.get("name"))
    if isinstance(tool_choice, str) and tool_choice in names:
        return "required", (tool_choice,)
    raise InputError(f"tool_choice must be auto, none, required, any or one of the tools {list(names)}, "
                     f"got {tool_choice!r}")


def inline_refs(schema: Any, defs: Mapping | None = None, _stack: tuple = ()) -> Any:
    """``schema`` with local ``{"$ref": "#/$defs/X"}`` (and ``#/definitions/X``) replaced by the definition,
    so one tool's schema can sit inside another document (the union below); a recursive reference
    becomes ``{}`` (any value)."""
    if isinstance(schema, Mapping):
        defs = {**(defs or {}), **schema.get("$defs", {}), **schema.get("definitions", {})}
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
            key = ref.rsplit("/", 1)[1]
            if key in _stack or key not in defs:
                return {}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return inline_refs({**defs[key], **rest}, defs, _stack + (key,))
        return {k: inline_refs(v, defs, _stack) for k, v in schema.items() if k not in ("$defs", "definitions")}
    if isinstance(schema, list):
        return [inline_refs(v, defs, _stack) for v in schema]
    return schema


def answer_schema(tools: Sequence[Mapping], tool_choice=None) -> dict:
    """The JSON schema of a tool-calling answer: ``{"content", "tool_calls": [one of the allowed tools' calls]}``."""
    specs = tool_specs(tools)
    mode, allowed = _choice(tool_choice, [s["name"] for s in specs])
    calls = [{"type": "object",
              "properties": {"name": {"type": "string", "enum": [s["name"]]},
                             "arguments": inline_refs(copy.deepcopy(s["parameters"]))},
              "required": ["name", "arguments"], "additionalProperties": False}
             for s in specs if s["name"] in allowed]
    items = calls[0] if len(calls) == 1 else {"anyOf": calls}
    array = {"type": "array", "items": items}
    if mode == "required":
        array["minItems"] = 1
    return {"type": "object", "properties": {"content": {"type": "string"}, "tool_calls": array},
            "required": ["content", "tool_calls"], "additionalProperties": False}


def tool_constraint(tools: Sequence[Mapping], tool_choice=None) -> Constraint | None:
    """The ``tool_calls`` constraint for ``tools`` (None for ``tool_choice="none"``: plain text)."""
    specs = tool_specs(tools)
    if _choice(tool_choice, [s["name"] for s in specs])[0] == "none":
        return None
    return Constraint("tool_calls", schema_json=json.dumps(answer_schema(specs, tool_choice), sort_keys=True))


def tool_block(tools: Sequence[Mapping], tool_choice=None) -> str:
    """The text that tells a model without native tool calls which tools it has and how to call them."""
    specs = tool_specs(tools)
    mode, allowed = _choice(tool_choice, [s["name"] for s in specs])
    listed = "\n".join(json.dumps({"name": s["name"], "description": s["description"], "parameters": s["parameters"]},
                                  ensure_ascii=False) for s in specs if s["name"] in allowed)
    rule = _RULES[mode] if mode in _RULES else ""
    if mode == "required" and len(allowed) == 1:
        rule = f"Call the tool {allowed[0]} (at least once)."
    return TOOL_BLOCK.format(tools=listed, rule=rule)


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):  # content parts ([{"type": "text", "text": ...}, ...])
        return "".join(p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content)
    return "" if content is None else str(content)


def tool_messages(messages: Sequence[Mapping], tools: Sequence[Mapping], tool_choice=None) -> tuple[dict, ...]:
    """Chat messages for a backend without native tool calls: the tool block appended to the first system
    message (one is added in front when there is none; ``tool_choice="none"`` adds nothing), an assistant
    message's ``tool_calls`` written in the answer format, a ``tool`` message as a user message naming
    the call it answers."""
    specs = tool_specs(tools)
    mode = _choice(tool_choice, [s["name"] for s in specs])[0]
    out: list[dict] = []
    for m in messages:
        role, content = m.get("role"), _text(m.get("content"))
        if role == "assistant" and m.get("tool_calls"):
            calls = [_openai_call(tc) for tc in m["tool_calls"]]
            out.append({"role": "assistant", "content": json.dumps({"content": content, "tool_calls": calls},
                                                                  ensure_ascii=False)})
        elif role == "tool":
            out.append({"role": "user", "content": f"[Result of tool call {m.get('tool_call_id', '')}]\n{content}"})
        elif role in ("system", "user", "assistant"):
            out.append({"role": role, "content": content})
        else:
            raise InputError(f"message role must be system, user, assistant or tool, got {role!r}")
    if mode != "none":
        block = tool_block(specs, tool_choice)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return tuple(out)


def _openai_call(tc: Mapping) -> dict:
    """``{"name", "arguments"}`` of an OpenAI (``function.arguments`` JSON text) or LangChain (``args``) call."""
    fn = tc.get("function") if isinstance(tc.get("function"), Mapping) else tc
    args = fn.get("arguments", fn.get("args", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = {"_raw": args}
    return {"name": fn.get("name", ""), "arguments": args}


def tool_request(messages: Sequence[Mapping], tools: Sequence[Mapping], tool_choice=None, **sampling) -> Request:
    """One engine :class:`Request` for a tool-calling chat: :func:`tool_messages` + :func:`tool_constraint`."""
    return Request(messages=tool_messages(messages, tools, tool_choice),
                   constraint=tool_constraint(tools, tool_choice), **sampling)


def parse_tool_calls(text: str, tools: Sequence[Mapping], tool_choice=None,
                     stats: ToolStats | None = None) -> tuple[str, list[ToolCall]]:
    """``(content, calls)`` read from an answer to :func:`tool_request` (tolerant; see the module docstring)."""
    specs = {s["name"]: s for s in tool_specs(tools)}
    _, allowed = _choice(tool_choice, list(specs))
    stats = stats if stats is not None else ToolStats()
    stats.answers += 1
    data = first_json_value(text)
    if isinstance(data, Mapping) and "tool_calls" not in data and ("name" in data or "function" in data):
        data = {"content": "", "tool_calls": [data]}  # one call alone
    if isinstance(data, list):
        data = {"content": "", "tool_calls": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("tool_calls", []), list):
        stats.failed += 1
        stats.note("no JSON object with a tool_calls list")
        return (text or "").strip(), []
    content = _text(data.get("content"))
    digest = hashlib.blake2b((text or "").encode(), digest_size=6).hexdigest()
    calls = []
    for raw in data.get("tool_calls", []):
        if not isinstance(raw, Mapping):
            stats.dropped += 1
            stats.note(f"a call that is not an object: {raw!r:.60}")
            continue
        fn = raw.get("function") if isinstance(raw.get("function"), Mapping) else raw
        name = fn.get("name")
        args = next((fn[k] for k in ("arguments", "args", "parameters") if k in fn), {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError:
                args = None
        if name not in allowed:
            stats.dropped += 1
            stats.note(f"unknown or not allowed tool {name!r}")
            continue
        if not isinstance(args, Mapping):
            stats.dropped += 1
            stats.note(f"{name}: arguments are not an object")
            continue
        missing = [k for k in specs[name]["parameters"].get("required", []) if k not in args]
        if missing:
            stats.dropped += 1
            stats.note(f"{name}: missing required arguments {missing}")
            continue
        calls.append(ToolCall(name, dict(args), f"call_{digest}_{len(calls)}"))
    stats.calls += len(calls)
    return content, calls


__all__ = ["ToolCall", "ToolStats", "answer_schema", "inline_refs", "parse_tool_calls", "tool_block",
           "tool_constraint", "tool_messages", "tool_request", "tool_specs"]
