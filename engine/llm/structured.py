"""Structured outputs: the answer shape of a prompt kind, declared once, enforced by each backend.

A prompt whose answer has a fixed shape attaches a :class:`Constraint` to its
:class:`~engine.llm.base.Request` (``Request(..., constraint=prophet_forecast(markets))``). Each backend
turns it into its own mechanism:

============  =====================================================================================
openai        ``llm.openai.structured_format = "auto"`` (default): the server's own dialect, read once from
              ``GET /v1/models`` (``owned_by``: vllm, llamacpp, sglang; anything else: the OpenAI API's
              ``response_format``). ``"response_format"``: ``{"type": "json_schema", "json_schema":
              {"name", "schema", "strict": true}}``; ``"vllm"``: ``guided_json`` / ``guided_regex`` /
              ``guided_grammar`` plus ``structured_outputs`` in the body (vLLM's extra_body fields);
              ``"llamacpp"``: ``json_schema`` / ``grammar`` (a llama.cpp server's own fields);
              ``"sglang"``: ``response_format``, ``regex`` / ``ebnf``
local         the embedded llama.cpp server: ``json_schema`` / ``grammar`` in the request
vllm          ``SamplingParams(structured_outputs=StructuredOutputsParams(json=... | regex=...))``, or
              ``guided_decoding=GuidedDecodingParams(...)`` on vLLM versions before structured outputs
simulated     ignored: the policies write their task's format, with the format noise each policy models
              (the Game-of-24 policy's stray lines show up as unusable lines, as an unconstrained model's would)
replay        the constraint is part of the trace key: a recorded constrained answer replays only for
              the same constraint
============  =====================================================================================

Tool calls (a library that calls its LLM with ``tools=[...]``) are one more constraint: the union of the
tools' argument schemas (kind ``tool_calls``, :mod:`engine.llm.tools`).

A regex-only constraint (Game-of-24 lines) has no ``response_format`` form: sent to a server that speaks
only ``response_format`` (OpenAI itself, a server that does not say what it is), the request is refused
with a :class:`~engine.errors.ConfigError` naming the prompt kind and the two ways out
(``structured_format`` naming the server's dialect, or ``unconstrained = ["kind"]``); a constraint is
never dropped silently. Parsing stays
tolerant either way: constrained text goes through the same parser, and an unusable answer is counted
(forecast rows: ``failed``), never raised.

``[llm] structured = false`` turns every constraint off; ``[llm] unconstrained = ["kind", ...]`` turns
off single kinds (:data:`KINDS`). :class:`ConstraintSwitch` applies both, in front of any backend.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any, Sequence

# Prompt kinds that declare an answer shape. Game-of-24 lines are declared here (regex and GBNF) for the
# backends; the ToT prompts attach them where the search builds its requests.
KINDS = ("prophet_forecast", "game24_value", "game24_step", "game24_answer", "mem0_extraction",
         "finance_route", "finance_rerank", "finance_merge", "finance_predict", "finance_sentiment", "finance_update",
         "forecast_editor", "forecast_critic",
         "tool_calls")  # tool_calls: OpenAI-style tool calls as JSON (engine.llm.tools)


@dataclass(frozen=True)
class Constraint:
    """The shape one answer must have: a JSON schema (as text, so requests stay hashable), a regular
    expression and/or a GBNF grammar. ``kind`` names the prompt kind (:data:`KINDS`)."""

    kind: str
    schema_json: str = ""
    regex: str = ""
    grammar: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"constraint kind must be one of {KINDS}, got {self.kind!r}")
        if not (self.schema_json or self.regex or self.grammar):
            raise ValueError(f"constraint {self.kind!r} needs a schema, a regex or a grammar")

    @cached_property
    def schema(self) -> dict | None:
        return json.loads(self.schema_json) if self.schema_json else None

    @property
    def key(self) -> str:
        """Stable text identifying the constraint (replay trace keys)."""
        return json.dumps([self.kind, self.schema_json, self.regex, self.grammar])


def prophet_forecast(markets: Sequence[str]) -> Constraint:
    """Prophet Arena answer: ``{"probabilities": {<each listed outcome, exactly>: number in [0, 1]}}``
    (the shape :func:`engine.forecast.toolcalls.parse_prophet_answer` accepts)."""
    names = list(dict.fromkeys(markets))
    schema = {
        "type": "object",
        "properties": {"probabilities": {
            "type": "object",
            "properties": {m: {"type": "number", "minimum": 0, "maximum": 1} for m in names},
            "required": names,
            "additionalProperties": False,
        }},
        "required": ["probabilities"],
        "additionalProperties": False,
    }
    return Constraint("prophet_forecast", schema_json=json.dumps(schema), grammar=_prophet_grammar(tuple(names)))


def _gbnf_literal(text: str) -> str:
    """``text`` as a GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@lru_cache(maxsize=256)
def _prophet_grammar(names: tuple[str, ...]) -> str:
    """The same answer as a GBNF grammar whose numbers stay in [0, 1] with at most 4 decimals and whose
    whitespace is bounded: llama.cpp's schema-to-grammar conversion keeps the shape and the market names
    but not a number's bounds, and a small model then writes digits until max_tokens (an unusable answer)."""
    pairs = ' ws "," ws '.join(f"p{i}" for i in range(len(names)))
    rules = [f'root ::= "{{" ws {_gbnf_literal(chr(34) + "probabilities" + chr(34))} ws ":" ws "{{" ws {pairs} ws "}}" ws "}}"']
    rules += [f'p{i} ::= {_gbnf_literal(json.dumps(m))} ws ":" ws prob' for i, m in enumerate(names)]
    rules += ['prob ::= "0" ("." [0-9] [0-9]? [0-9]? [0-9]?)? | "1" ("." "0" "0"? "0"? "0"?)?',
              'ws ::= [ \\t\\n]?']
    return "\n".join(rules)


_NUM = r"-?[0-9]+(\.[0-9]+|/[0-9]+)?"  # an integer, a decimal or an exact fraction ("8/3")
_GNUM = '"-"? [0-9]+ ("." [0-9]+ | "/" [0-9]+)?'
# One proposal line, "4 + 8 = 12 (left: 8 10 12)"; the search also counts lines that do not match it
GAME24_STEP_LINE = rf"{_NUM} [-+*/] {_NUM} = {_NUM} \(left: {_NUM}( {_NUM})*\)"
GAME24_VALUE = Constraint(  # ToT's value answer: up to 4 reasoning lines (the prompt's examples use 1-3), then
    "game24_value",           # the label alone on the last line, where the search reads it
    regex=r"([^\n]*\n){0,4}(sure|likely|impossible)",
    grammar=('root ::= (reason "\\n"){0,4} label\nreason ::= [^\\n]*\n'
             'label ::= "sure" | "likely" | "impossible"'),
)
GAME24_STEP = Constraint(  # one proposal per line
    "game24_step",
    regex=rf"({GAME24_STEP_LINE}\n?)+",
    grammar=(f'root ::= line+\nline ::= num " " op " " num " = " num " (left: " num (" " num)* ")" "\\n"?\n'
             f'op ::= [-+*/]\nnum ::= {_GNUM}'),
)
GAME24_ANSWER = Constraint(  # "Answer: (5 - 1) * (3 + 3) = 24"
    "game24_answer", regex=r"Answer: [-+*/() 0-9]+ = 24",
    grammar='root ::= "Answer: " [-+*/() 0-9]+ " = 24"',
)


def _object(kind: str, properties: dict, required: Sequence[str] | None = None) -> Constraint:
    schema = {"type": "object", "properties": properties,
              "required": list(properties if required is None else required), "additionalProperties": False}
    return Constraint(kind, schema_json=json.dumps(schema))


_TEXT = {"type": "string"}
_NULLABLE_TEXT = {"anyOf": [{"type": "string"}, {"type": "null"}]}

# Finance (engine/finance/prompts.py): the shapes the parsers there read; each prompt's own "Answer with
# JSON only: ..." line (engine/prompts/finance.toml) states the same shape in words.
FINANCE_ROUTE = _object("finance_route", {"industry": _TEXT, "factor": _TEXT})
FINANCE_MERGE = _object("finance_merge", {"merge": {"type": "boolean"}, "text": _TEXT})
FINANCE_SENTIMENT = _object("finance_sentiment", {"sentiment": {"type": "integer", "enum": [-1, 0, 1]}})


def finance_rerank(candidates: Sequence[int]) -> Constraint:
    """``{"selected": [listed ids], "new_direction": text or null}``; ids outside the listed candidates
    cannot be written (with no candidates, ``selected`` is empty)."""
    return _finance_rerank(tuple(sorted({int(c) for c in candidates})))


@lru_cache(maxsize=4096)
def _finance_rerank(ids: tuple[int, ...]) -> Constraint:
    item = {"type": "integer", "enum": ids} if ids else {"type": "integer"}
    selected = {"type": "array", "items": item, "maxItems": len(ids)}
    return _object("finance_rerank", {"selected": selected, "new_direction": _NULLABLE_TEXT})


def finance_predict(horizons: Sequence[int]) -> Constraint:
    """``{"reasoning", "key_factor", "sentiment": {"<h>": number in [-1, 1] per horizon}, "confidence" in [0, 1]}``."""
    return _finance_predict(tuple(int(h) for h in horizons))


@lru_cache(maxsize=64)
def _finance_predict(horizons: tuple[int, ...]) -> Constraint:
    sent = {"type": "object", "properties": {str(h): {"type": "number", "minimum": -1, "maximum": 1} for h in horizons},
            "required": [str(h) for h in horizons], "additionalProperties": False}
    return _object("finance_predict", {"reasoning": _TEXT, "key_factor": _TEXT, "sentiment": sent,
                                       "confidence": {"type": "number", "minimum": 0, "maximum": 1}})


def finance_update(eids: Sequence[int], q_min: float, q_max: float) -> Constraint:
    """ToE eq. (10) updater: ``{"updates": [{"eid": shown id, "reliability": number in [q_min, q_max]}]}``."""
    return _finance_update(tuple(sorted({int(e) for e in eids})), float(q_min), float(q_max))


@lru_cache(maxsize=4096)
def _finance_update(ids: tuple[int, ...], q_min: float, q_max: float) -> Constraint:
    item = {"type": "object", "properties": {
        "eid": {"type": "integer", "enum": ids} if ids else {"type": "integer"},
        "reliability": {"type": "number", "minimum": float(q_min), "maximum": float(q_max)}},
        "required": ["eid", "reliability"], "additionalProperties": False}
    return _object("finance_update", {"updates": {"type": "array", "items": item}})


# ForeDreamer's evolution (engine/prompts/forecast.toml, Prompts 7 and 8)
FORECAST_EDITOR = _object("forecast_editor", {"suggestions": {"type": "array", "items": {
    "type": "object",
    "properties": {"priority": {"type": "integer", "minimum": 1},
                   "operation": {"type": "string", "enum": ["add", "modify", "remove"]},
                   "target_experience_id": _TEXT, "new_text": _TEXT, "analysis": _TEXT,
                   "generality_assessment": _TEXT, "expected_benefit": _TEXT},
    "required": ["priority", "operation", "target_experience_id", "new_text", "analysis",
                 "generality_assessment", "expected_benefit"],
    "additionalProperties": False}}})
FORECAST_CRITIC = _object("forecast_critic", {"should_evolve": {"type": "boolean"}, "analysis": _TEXT,
                                              "design_requirement": _TEXT})


def response_format(c: Constraint) -> dict | None:
    """OpenAI's ``response_format`` for ``c``, or None when it has no JSON schema."""
    if c.schema is None:
        return None
    # a tool-call union carries the library's own argument schemas (optional keys, no additionalProperties:
    # false), which OpenAI's strict mode rejects; it goes non-strict (vLLM and llama.cpp enforce both alike)
    return {"type": "json_schema", "json_schema": {"name": c.kind, "schema": c.schema, "strict": c.kind != "tool_calls"}}


FORMATS = ("response_format", "vllm", "llamacpp", "sglang")


def request_fields(c: Constraint, fmt: str) -> dict[str, Any]:
    """The request-body fields that carry ``c`` in an OpenAI-compatible server's dialect ``fmt``; ``{}`` when
    the dialect cannot carry it (a regex-only constraint as ``response_format``: the caller refuses)."""
    if fmt == "response_format":
        rf = response_format(c)
        return {"response_format": rf} if rf else {}
    if fmt == "sglang":  # SGLang's OpenAI API: response_format for schemas, its own regex / ebnf fields
        if c.schema is not None:
            return {"response_format": response_format(c)}
        return {"regex": c.regex} if c.regex else {"ebnf": c.grammar}
    if fmt == "vllm":
        if c.schema is not None:
            return {"guided_json": c.schema, "structured_outputs": {"json": c.schema}}
        if c.regex:
            return {"guided_regex": c.regex, "structured_outputs": {"regex": c.regex}}
        return {"guided_grammar": c.grammar, "structured_outputs": {"grammar": c.grammar}}
    if fmt == "llamacpp":  # a grammar where the kind has one (tighter than llama.cpp's schema conversion)
        if c.grammar:
            return {"grammar": c.grammar}
        return {"json_schema": c.schema}
    raise ValueError(f"structured_format must be one of {', '.join(FORMATS)}, got {fmt!r}")


def vllm_sampling_kwargs(vllm_module, c: Constraint | None) -> dict[str, Any]:
    """``SamplingParams`` keyword for ``c``: ``structured_outputs=StructuredOutputsParams(...)`` where this vLLM
    has it, else ``guided_decoding=GuidedDecodingParams(...)``."""
    if c is None:
        return {}
    spec = {"json": c.schema} if c.schema is not None else ({"regex": c.regex} if c.regex else {"grammar": c.grammar})
    sp = vllm_module.sampling_params
    if hasattr(sp, "StructuredOutputsParams"):
        return {"structured_outputs": sp.StructuredOutputsParams(**spec)}
    return {"guided_decoding": sp.GuidedDecodingParams(**spec)}


class ConstraintSwitch:
    """In front of a backend: drops the constraints that ``[llm] structured`` / ``unconstrained`` turn off."""

    def __init__(self, backend, enabled: bool = True, off: Sequence[str] = ()):
        self.backend = backend
        self.name = backend.name
        self.model = backend.model
        self.enabled = enabled
        self.off = frozenset(off)

    def generate(self, requests):
        reqs = [r if r.constraint is None or (self.enabled and r.constraint.kind not in self.off)
                else replace(r, constraint=None) for r in requests]
        return self.backend.generate(reqs)

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close:
            close()

    def __getattr__(self, item):  # base_url, meter, ... of the wrapped backend
        return getattr(self.backend, item)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def first_json_value(text: str, objects_first: bool = True) -> Any | None:
    """The first JSON value in ``text``: a ```json fence's content, else the text; whole, else its outermost
    ``{...}`` or ``[...]`` span (objects first unless ``objects_first`` is False); None when nothing parses.
    The tolerant reading every parser of an unconstrained (or cut) answer starts from."""
    if not text:
        return None
    spans = (("{", "}"), ("[", "]")) if objects_first else (("[", "]"), ("{", "}"))
    for cand in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        cand = cand.strip()
        try:
            return json.loads(cand)
        except (json.JSONDecodeError, ValueError):
            pass
        for open_, close in spans:
            i, j = cand.find(open_), cand.rfind(close)
            if 0 <= i < j:
                try:
                    return json.loads(cand[i: j + 1])
                except (json.JSONDecodeError, ValueError):
                    continue
    return None
