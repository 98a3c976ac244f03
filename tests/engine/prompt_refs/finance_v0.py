"""Prompts of the finance task and defensive parsers for their answers.

Every prompt starts with a ``### TASK: <KIND>`` line and asks for JSON only.
The same prompts go to every backend (simulated, local, OpenAI-compatible,
vLLM). Parsers accept the first JSON object in a completion (code fences and
chatter around it are ignored), clamp numbers to their ranges and return
``None`` for anything unusable, so a malformed completion never breaks a run.

Kinds: ROUTE (news -> factor for an industry, the cached routing prefix),
RERANK (select analysis directions, or propose at most one new one), MERGE
(near-duplicate sibling directions), PREDICT (the shared prediction prompt,
with or without experience), SENTIMENT (Baseline's per-news {-1, 0, 1}),
UPDATE (the LLM-based reliability updater, ToE eq. (10)).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Sequence

HEADER = "### TASK: {kind}"


def _news_block(title: str, content: str) -> str:
    return f"News title: {title}\nNews content: {content}"


def route_prompt(industry: str, factors: Sequence[str], title: str, content: str) -> str:
    return "\n".join([
        HEADER.format(kind="ROUTE"),
        "You route a financial news item to the analytical factor through which it affects an industry index.",
        f"Industry: {industry}",
        f"Known factors: {'; '.join(factors)}",
        _news_block(title, content),
        f"Choose the single factor that best characterises the channel of influence on {industry}. "
        "Name a new factor only if none of the known ones fits.",
        'Answer with JSON only: {"industry": "' + industry + '", "factor": "<factor>"}',
    ])


def rerank_prompt(industry: str, factor: str, title: str, content: str,
                  candidates: Sequence[tuple[int, str]]) -> str:
    lines = [
        HEADER.format(kind="RERANK"),
        "You select historical analysis directions that apply to a news item (ToE reranking and adaptive expansion).",
        f"Reasoning path so far: {industry} > {factor}",
        _news_block(title, content),
        "Candidate analysis directions (id: text):",
    ]
    lines += [f"[{eid}] {text}" for eid, text in candidates] or ["(none yet)"]
    lines += [
        "Select the candidates that are relevant to this news and consistent with the path, most relevant first; "
        "discard irrelevant, redundant or incompatible ones.",
        "If no candidate applies, propose at most ONE new analysis direction: a short, general analytical "
        "perspective under the factor that can be reused for other news, not a restatement of this news.",
        'Answer with JSON only: {"selected": [<ids>], "new_direction": null or "<text>"}',
    ]
    return "\n".join(lines)


def merge_prompt(industry: str, factor: str, existing: str, new: str) -> str:
    return "\n".join([
        HEADER.format(kind="MERGE"),
        "Two sibling analysis directions sit under the same path. Decide whether they express the same "
        "analytical perspective (merge) or genuinely different ones (keep both).",
        f"Path: {industry} > {factor}",
        f"Existing direction: {existing}",
        f"New direction: {new}",
        'Answer with JSON only: {"merge": true or false, "text": "<the merged direction text>"}',
    ])


@dataclass(frozen=True)
class NewsLine:
    day: str
    importance: float
    title: str
    content: str


@dataclass(frozen=True)
class ExperienceLine:
    news: int  # 1-based index of the news item that selected it
    path: tuple[str, str, str]
    reliability: tuple[float, ...]


def predict_prompt(industry: str, date: str, horizons: Sequence[int], news: Sequence[NewsLine],
                   experiences: Sequence[ExperienceLine] = (), memories: Sequence[str] = ()) -> str:
    """The shared prediction prompt (ToE eq. (6)); experience-free when both lists are empty."""
    lines = [
        HEADER.format(kind="PREDICT"),
        "You are a financial analyst predicting the excess return of an industry index over the benchmark.",
        f"Target industry: {industry}",
        f"Prediction date: {date}",
        f"Horizons (trading days): {', '.join(str(h) for h in horizons)}",
        "News from T-4 to T with importance >= 8:",
    ]
    for k, n in enumerate(news, 1):
        lines.append(f"[{k}] ({n.day}, importance {n.importance:g}) {n.title}. {n.content}")
    if experiences:
        lines.append("Experience paths selected for the news (reliability per horizon: 1 = neutral prior, "
                     "range 0 to 2, higher = historically more reliable, lower = historically misleading):")
        for e in experiences:
            rel = ", ".join(f"{h}d={q:.2f}" for h, q in zip(horizons, e.reliability))
            lines.append(f"[news {e.news}] {e.path[0]} > {e.path[1]} > {e.path[2]} | reliability {rel}")
    if memories:
        lines.append("Retrieved memories of past predictions:")
        lines += [f"- {m}" for m in memories]
    example = ", ".join(f'"{h}": <s>' for h in horizons)
    lines += [
        "Reason about the news (and the experience, weighting it by its reliability), then give a sentiment "
        "score per horizon in [-1, 1] (positive = the industry beats the benchmark) and a confidence in [0, 1].",
        'Answer with JSON only: {"reasoning": "<text>", "key_factor": "<text>", "sentiment": {' + example
        + '}, "confidence": <c>}',
    ]
    return "\n".join(lines)


def sentiment_prompt(industry: str, title: str, content: str) -> str:
    return "\n".join([
        HEADER.format(kind="SENTIMENT"),
        f"Industry: {industry}",
        _news_block(title, content),
        "Classify the sentiment of this news for the industry index: -1 negative, 0 neutral, 1 positive.",
        'Answer with JSON only: {"sentiment": -1 or 0 or 1}',
    ])


def update_prompt(industry: str, date: str, horizon: int, prediction: float, realised: float,
                  r_env: float, experiences: Sequence[tuple[int, tuple[str, str, str], float]]) -> str:
    lines = [
        HEADER.format(kind="UPDATE"),
        "You update the reliability of analysis experiences from delayed market feedback (ToE LLM-based updater).",
        f"Industry: {industry}; prediction date: {date}; horizon: {horizon} trading days",
        f"Predicted sentiment: {prediction:+.3f}",
        f"Realised excess return: {realised * 100:+.2f}%",
        f"Feedback r_env = prediction x return = {r_env:+.5f}",
        "Experiences used (eid: path | current reliability at this horizon):",
    ]
    lines += [f"[{eid}] {p[0]} > {p[1]} > {p[2]} | {q:.3f}" for eid, p, q in experiences]
    lines += [
        "Rules: reliability lies in [0, 2] and 1 is neutral; raise experiences whose reading agreed with the "
        "outcome and lower those that disagreed, by at most 0.3 each; leave unrelated ones unchanged.",
        'Answer with JSON only: {"updates": [{"eid": <id>, "reliability": <new value>}]}',
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"```(?:json)?", re.I)


def first_json(text: str) -> dict | None:
    """The first JSON object in ``text`` (braces balanced, strings respected), else None."""
    if not isinstance(text, str):
        return None
    text = _FENCE.sub("", text)
    start = text.find("{")
    while start >= 0:
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        obj = json.loads(text[start:i + 1])
                    except ValueError:
                        break
                    return obj if isinstance(obj, dict) else None
        start = text.find("{", start + 1)
    return None


def _num(x, lo: float, hi: float) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(v):
        return None
    return min(hi, max(lo, v))


def parse_route(text: str) -> str | None:
    obj = first_json(text)
    f = obj.get("factor") if obj else None
    return " ".join(f.split()) if isinstance(f, str) and f.strip() else None


def parse_rerank(text: str, candidates: Sequence[int]) -> tuple[list[int], str | None] | None:
    """``(selected eids in order, new direction or None)``; unknown ids are dropped."""
    obj = first_json(text)
    if obj is None:
        return None
    allowed = set(int(c) for c in candidates)
    sel = obj.get("selected", [])
    out: list[int] = []
    if isinstance(sel, list):
        for s in sel:
            try:
                e = int(s)
            except (TypeError, ValueError):
                continue
            if e in allowed and e not in out:
                out.append(e)
    new = obj.get("new_direction")
    new = " ".join(new.split()) if isinstance(new, str) and new.strip() and new.strip().lower() != "null" else None
    return out, new


def parse_merge(text: str) -> tuple[bool, str | None] | None:
    obj = first_json(text)
    if obj is None or not isinstance(obj.get("merge"), bool):
        return None
    t = obj.get("text")
    return obj["merge"], (" ".join(t.split()) if isinstance(t, str) and t.strip() else None)


@dataclass(frozen=True)
class Prediction:
    sentiment: tuple[float, ...]  # per horizon, in [-1, 1]
    confidence: float
    key_factor: str
    reasoning: str


def parse_prediction(text: str, horizons: Sequence[int]) -> Prediction | None:
    """Per-horizon sentiment in [-1, 1] and confidence in [0, 1]; a missing horizon makes it unusable."""
    obj = first_json(text)
    if obj is None:
        return None
    sent = obj.get("sentiment")
    vals = []
    for h in horizons:
        v = None
        if isinstance(sent, dict):
            v = sent.get(str(h), sent.get(f"{h}d", sent.get(h)))
        elif isinstance(sent, (int, float)) and not isinstance(sent, bool):
            v = sent
        v = _num(v, -1.0, 1.0)
        if v is None:
            return None
        vals.append(v)
    conf = _num(obj.get("confidence", 0.5), 0.0, 1.0)
    return Prediction(tuple(vals), 0.5 if conf is None else conf, str(obj.get("key_factor", ""))[:200],
                      str(obj.get("reasoning", ""))[:2000])


def parse_sentiment(text: str) -> int | None:
    obj = first_json(text)
    v = _num(obj.get("sentiment"), -1.0, 1.0) if obj else None
    return None if v is None else int(round(v))


def parse_update(text: str, eids: Sequence[int], lo: float = 0.0, hi: float = 2.0) -> dict[int, float] | None:
    obj = first_json(text)
    if obj is None or not isinstance(obj.get("updates"), list):
        return None
    allowed = set(int(e) for e in eids)
    out = {}
    for u in obj["updates"]:
        if not isinstance(u, dict):
            continue
        try:
            e = int(u.get("eid"))
        except (TypeError, ValueError):
            continue
        v = _num(u.get("reliability"), lo, hi)
        if e in allowed and v is not None:
            out[e] = v
    return out
