"""Tool calls through structured outputs (engine.llm.tools): schema, messages, tolerant parsing, counts."""

from __future__ import annotations

import json

import pytest

from engine.errors import InputError
from engine.llm.structured import request_fields, response_format
from engine.llm.tools import (ToolStats, answer_schema, inline_refs, parse_tool_calls, tool_constraint,
                              tool_messages, tool_request)

SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search memories.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                   "required": ["query"]}}}
PATCH = {"type": "function", "function": {  # a pydantic schema with $defs, as LangChain's convert_to_openai_tool writes
    "name": "PatchDoc", "description": "Patch a doc.",
    "parameters": {"type": "object", "$defs": {"JsonPatch": {"type": "object", "properties": {
        "op": {"type": "string", "enum": ["add", "remove", "replace"]}, "path": {"type": "string"}, "value": {}},
        "required": ["op", "path"]}},
        "properties": {"json_doc_id": {"type": "string"},
                       "patches": {"type": "array", "items": {"$ref": "#/$defs/JsonPatch"}}},
        "required": ["json_doc_id", "patches"]}}}
TOOLS = [SEARCH, PATCH]


def test_answer_schema_is_the_union_of_the_tools_arguments():
    schema = answer_schema(TOOLS)
    calls = schema["properties"]["tool_calls"]
    assert schema["required"] == ["content", "tool_calls"] and "minItems" not in calls
    names = [c["properties"]["name"]["enum"] for c in calls["items"]["anyOf"]]
    assert names == [["search"], ["PatchDoc"]]
    patch_args = calls["items"]["anyOf"][1]["properties"]["arguments"]
    assert "$defs" not in json.dumps(patch_args)  # the $ref is inlined: the union is one self-contained document
    assert patch_args["properties"]["patches"]["items"]["properties"]["op"]["enum"] == ["add", "remove", "replace"]


def test_tool_choice_narrows_the_schema():
    one = answer_schema(TOOLS, {"type": "function", "function": {"name": "search"}})["properties"]["tool_calls"]
    assert one["minItems"] == 1 and one["items"]["properties"]["name"]["enum"] == ["search"]
    assert answer_schema(TOOLS, "any")["properties"]["tool_calls"]["minItems"] == 1
    assert tool_constraint(TOOLS, "none") is None
    with pytest.raises(InputError, match="tool_choice must be .* got 'nope'"):
        answer_schema(TOOLS, "nope")


def test_constraint_reaches_every_backend_dialect():
    c = tool_constraint(TOOLS)
    assert c.kind == "tool_calls"
    assert response_format(c)["json_schema"]["schema"] == answer_schema(TOOLS)
    assert response_format(c)["json_schema"]["strict"] is False  # the tools' own schemas are not strict-mode schemas
    assert request_fields(c, "vllm")["guided_json"] == answer_schema(TOOLS)
    assert request_fields(c, "llamacpp") == {"json_schema": answer_schema(TOOLS)}


def test_messages_carry_the_tools_and_earlier_calls_as_text():
    msgs = [{"role": "system", "content": "You are a memory subroutine."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "search", "args": {"query": "q"}}]},
            {"role": "tool", "content": "3 hits", "tool_call_id": "c1"}]
    out = tool_messages(msgs, TOOLS)
    assert out[0]["content"].startswith("You are a memory subroutine.\n\n# Tools")
    assert '"name": "PatchDoc"' in out[0]["content"] and "Answer with ONE JSON object" in out[0]["content"]
    assert json.loads(out[2]["content"]) == {"content": "", "tool_calls": [{"name": "search", "arguments": {"query": "q"}}]}
    assert out[3] == {"role": "user", "content": "[Result of tool call c1]\n3 hits"}
    bare = tool_messages([{"role": "user", "content": "x"}], TOOLS, "search")
    assert bare[0]["role"] == "system" and "Call the tool search" in bare[0]["content"]
    req = tool_request(msgs[:2], TOOLS, max_tokens=64)
    assert req.constraint == tool_constraint(TOOLS) and req.messages == tool_messages(msgs[:2], TOOLS)


@pytest.mark.parametrize("text", [
    '{"content": "ok", "tool_calls": [{"name": "search", "arguments": {"query": "rain"}}]}',
    'Sure:\n```json\n{"content": "ok", "tool_calls": [{"name": "search", "arguments": "{\\"query\\": \\"rain\\"}"}]}\n```',
    '{"name": "search", "args": {"query": "rain"}}',  # one call alone, LangChain's "args"
    '[{"type": "function", "function": {"name": "search", "arguments": "{\\"query\\": \\"rain\\"}"}}]',
])
def test_parse_is_tolerant(text):
    stats = ToolStats()
    _, calls = parse_tool_calls(text, TOOLS, stats=stats)
    assert [(c.name, c.arguments) for c in calls] == [("search", {"query": "rain"})]
    assert stats.as_dict() == {"answers": 1, "calls": 1, "dropped": 0, "failed": 0}


def test_parse_counts_what_it_drops():
    stats = ToolStats()
    text = json.dumps({"content": "c", "tool_calls": [
        {"name": "search", "arguments": {"limit": 3}},  # missing required "query"
        {"name": "delete_all", "arguments": {}},  # not a tool
        {"name": "PatchDoc", "arguments": [1]},  # arguments not an object
        {"name": "PatchDoc", "arguments": {"json_doc_id": "7", "patches": []}}]})
    content, calls = parse_tool_calls(text, TOOLS, stats=stats)
    assert content == "c" and [c.name for c in calls] == ["PatchDoc"]
    assert stats.as_dict() == {"answers": 1, "calls": 1, "dropped": 3, "failed": 0}
    assert any("missing required arguments ['query']" in r for r in stats.reasons)
    content, calls = parse_tool_calls("I would rather not.", TOOLS, stats=stats)
    assert (content, calls) == ("I would rather not.", []) and stats.failed == 1
    # a call of a tool the tool_choice excludes is dropped too
    _, calls = parse_tool_calls('{"name": "PatchDoc", "arguments": {"json_doc_id": "1", "patches": []}}', TOOLS, "search")
    assert calls == []


def test_ids_are_stable_and_distinct():
    text = '[{"name": "search", "arguments": {"query": "a"}}, {"name": "search", "arguments": {"query": "b"}}]'
    a = [c.id for c in parse_tool_calls(text, TOOLS)[1]]
    assert a == [c.id for c in parse_tool_calls(text, TOOLS)[1]] and len(set(a)) == 2


def test_inline_refs_recursion_becomes_any():
    schema = {"$defs": {"Node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/Node"}}}},
              "$ref": "#/$defs/Node"}
    assert inline_refs(schema) == {"type": "object", "properties": {"child": {}}}


@pytest.mark.parametrize("tools, match", [
    ({"name": "x"}, "tools must be a list"),
    ([], "at least one tool"),
    ([{"type": "function", "function": {"name": ""}}], r"tools\[0\].name must be a non-empty string"),
    ([SEARCH, SEARCH], "'search' is given twice"),
    ([{"type": "retrieval"}], "must be a function tool"),
    ([{"name": "x", "parameters": {"type": "array"}}], r"\(x\).parameters must be an object schema"),
])
def test_bad_tools_are_named(tools, match):
    with pytest.raises(InputError, match=match):
        tool_constraint(tools)
