"""Parsing the text tool-call protocol and the final answers (Prophet Arena JSON, FutureX boxed)."""

from __future__ import annotations

import json
import math
import re

_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
_BOXED = re.compile(r"\\boxed\{")


def parse_tool_calls(text: str) -> list[tuple[str, dict]]:
    """All ``<tool_call>{"name":..., "arguments":{...}}</tool_call>`` in ``text`` (malformed ones skipped).

    A bare JSON object with "name" and "arguments" keys is accepted too (small models drop the tags).
    """
    out = []
    blobs = _CALL.findall(text or "")
    if not blobs:
        blobs = [m.group(0) for m in re.finditer(r"\{[^{}]*\"name\"[^{}]*\"arguments\"\s*:\s*\{[^{}]*\}\s*\}", text or "")]
    for blob in blobs:
        try:
            obj = json.loads(blob)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    args = {}
            out.append((obj["name"], args if isinstance(args, dict) else {}))
    return out


def _json_objects(text: str):
    """Candidate JSON objects in ``text``: the fenced/whole text first, then every balanced {...} span."""
    t = (text or "").strip()
    t = re.sub(r"^```(?:json)?\s*|\s*```$", "", t)
    try:
        yield json.loads(t)
    except json.JSONDecodeError:
        pass
    starts = [i for i, c in enumerate(t) if c == "{"]
    for s in starts:
        depth = 0
        for j in range(s, len(t)):
            if t[j] == "{":
                depth += 1
            elif t[j] == "}":
                depth -= 1
                if depth == 0:
                    try:
                        yield json.loads(t[s:j + 1])
                    except json.JSONDecodeError:
                        pass
                    break


def parse_prophet_answer(text: str, markets) -> tuple[dict | None, str]:
    """(probabilities, "") for a usable answer, else (None, what was wrong).

    Usable, as upstream's scorer (pm-rank's Prophet Arena loader) reads an answer: a JSON object whose
    "probabilities" maps outcome names to numbers; a listed outcome the answer omits counts as 0, an
    unknown name is ignored, a value outside [0, 1] is clipped. At least one listed outcome must be
    given, and every given value must be a finite number (a non-number is a malformed answer).
    """
    problem = "no JSON object with a 'probabilities' field was found"
    listed = set(markets)
    for obj in _json_objects(text):
        if not isinstance(obj, dict) or not isinstance(obj.get("probabilities"), dict):
            continue
        probs = obj["probabilities"]
        known = [m for m in markets if m in probs]
        if not known:
            problem = (f"no listed outcome name in 'probabilities' (expected names like {list(markets)[:6]}; "
                       f"got {[k for k in probs if k not in listed][:4]})")
            continue
        bad = [k for k in known if isinstance(probs[k], bool) or not isinstance(probs[k], (int, float))
               or not math.isfinite(probs[k])]
        if bad:
            problem = f"probabilities must be numbers; bad values for {bad[:4]}"
            continue
        return {m: min(1.0, max(0.0, float(probs[m]))) if m in probs else 0.0 for m in markets}, ""
    return None, problem


def parse_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces allowed), or None."""
    starts = [m.end() for m in _BOXED.finditer(text or "")]
    if not starts:
        return None
    s = starts[-1]
    depth = 1
    for j in range(s, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[s:j].strip()
    return None
