"""Prompts of the finance task and defensive parsers for their answers.

Every prompt starts with a ``### TASK: <KIND>`` line and asks for JSON only.
The same prompts go to every backend (simulated, local, OpenAI-compatible,
vLLM). Parsers accept the first JSON object in a completion (code fences and
chatter around it are ignored), clamp numbers to their ranges and return
``None`` for anything unusable, so a malformed completion never breaks a run.

Kinds: ROUTE (news -> factor for an industry, the cached routing prefix),
RERANK (select analysis directions, or propose at most one new one), MERGE
(near-duplicate sibling directions), MERGE FACTOR (a newly routed factor and a
known one of the industry), PREDICT (the shared prediction prompt,
with or without experience), SENTIMENT (Baseline's per-news {-1, 0, 1}),
UPDATE (the LLM-based reliability updater, ToE eq. (10)).

The prompts' text lives in ``engine/prompts/finance.toml`` (Jinja2 templates,
see :mod:`engine.templates` and docs/prompts.md); ``[prompts] file`` in a
finance config points a run at its own file.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from engine import templates

HEADER = "### TASK: {kind}"  # each template's first line; the simulated policy recognises prompts by it

# The prompts' text lives in engine/prompts/finance.toml (engine.templates); these are the placeholders each
# one takes. The functions below keep their signatures, prepare the list-valued placeholders and render.
TEMPLATE_SET = "finance"
PLACEHOLDERS: dict[str, set[str]] = {
    "route": {"industry", "factors", "title", "content"},
    "rerank": {"industry", "factor", "title", "content", "candidates"},
    "merge": {"industry", "factor", "existing", "new"},
    "merge_factor": {"industry", "existing", "new"},
    "predict": {"industry", "date", "horizons", "news", "experiences", "memories", "sentiment_example"},
    "sentiment": {"industry", "title", "content"},
    "update": {"industry", "date", "horizon", "prediction", "realised", "r_env", "experiences"},
}
templates.register(TEMPLATE_SET, PLACEHOLDERS)


def _render(prompt: str, **values) -> str:
    return templates.active(TEMPLATE_SET).render(prompt, **values)


def route_prompt(industry: str, factors: Sequence[str], title: str, content: str) -> str:
    return _render("route", industry=industry, factors="; ".join(factors), title=title, content=content)


def rerank_prompt(industry: str, factor: str, title: str, content: str,
                  candidates: Sequence[tuple[int, str]]) -> str:
    lines = "\n".join(f"[{eid}] {text}" for eid, text in candidates) or "(none yet)"
    return _render("rerank", industry=industry, factor=factor, title=title, content=content, candidates=lines)


def merge_prompt(industry: str, factor: str, existing: str, new: str) -> str:
    return _render("merge", industry=industry, factor=factor, existing=existing, new=new)


def merge_factor_prompt(industry: str, existing: str, new: str) -> str:
    return _render("merge_factor", industry=industry, existing=existing, new=new)


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


@lru_cache(maxsize=64)
def _news_block(news: tuple[NewsLine, ...]) -> str:
    """The numbered news lines of a PREDICT prompt (one window is rendered twice: with and without experience)."""
    return "\n".join(f"[{k}] ({n.day}, importance {n.importance:g}) {n.title}. {n.content}"
                     for k, n in enumerate(news, 1))


@lru_cache(maxsize=16)
def _horizon_texts(horizons: tuple[int, ...]) -> tuple[str, str]:
    return ", ".join(str(h) for h in horizons), ", ".join(f'"{h}": <s>' for h in horizons)


def _predict_values(industry: str, date: str, horizons: Sequence[int], news: Sequence[NewsLine],
                    experiences: Sequence[ExperienceLine], memories: Sequence[str]) -> dict[str, str]:
    exp_lines = "\n".join(
        f"[news {e.news}] {e.path[0]} > {e.path[1]} > {e.path[2]} | reliability "
        + ", ".join(f"{h}d={q:.2f}" for h, q in zip(horizons, e.reliability))
        for e in experiences)
    hs, example = _horizon_texts(tuple(horizons))
    return dict(industry=industry, date=date, horizons=hs, news=_news_block(tuple(news)), experiences=exp_lines,
                memories="\n".join(f"- {m}" for m in memories), sentiment_example=example)


def predict_prompt(industry: str, date: str, horizons: Sequence[int], news: Sequence[NewsLine],
                   experiences: Sequence[ExperienceLine] = (), memories: Sequence[str] = ()) -> str:
    """The shared prediction prompt (ToE eq. (6)); experience-free when both lists are empty."""
    return _render("predict", **_predict_values(industry, date, horizons, news, experiences, memories))


def predict_prompts(industry: str, date: str, horizons: Sequence[int], news: Sequence[NewsLine],
                    experiences: Sequence[ExperienceLine], memories: Sequence[str]) -> tuple[str, str]:
    """``(predict_prompt(... experiences, memories), predict_prompt(...))``: the prompt and its experience-free
    text (what the memory budget counts the experience block against), rendered once where the template allows
    (:meth:`engine.templates.PromptSet.render_pair`)."""
    values = _predict_values(industry, date, horizons, news, experiences, memories)
    return templates.active(TEMPLATE_SET).render_pair("predict", ("experiences", "memories"), **values)


def sentiment_prompt(industry: str, title: str, content: str) -> str:
    return _render("sentiment", industry=industry, title=title, content=content)


def update_prompt(industry: str, date: str, horizon: int, prediction: float, realised: float,
                  r_env: float, experiences: Sequence[tuple[int, tuple[str, str, str], float]]) -> str:
    lines = "\n".join(f"[{eid}] {p[0]} > {p[1]} > {p[2]} | {q:.3f}" for eid, p, q in experiences)
    return _render("update", industry=industry, date=date, horizon=horizon, prediction=prediction,
                   realised=realised, r_env=r_env, experiences=lines)


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
