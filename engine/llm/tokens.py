"""A model-free, deterministic token estimate for backends that cannot count tokens."""

from __future__ import annotations

import re
from functools import lru_cache

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
_TAIL = 48  # prompts share long few-shot heads; count the head once (cached), the tail each time


def count_tokens(text: str) -> int:
    """Approximate token count (words and punctuation marks); deterministic, model-free."""
    return len(TOKEN_PATTERN.findall(text))


@lru_cache(maxsize=256)
def _count_head(head: str) -> int:
    return len(TOKEN_PATTERN.findall(head))


@lru_cache(maxsize=2048)
def count_prompt_tokens(text: str) -> int:
    """:func:`count_tokens` for long prompts with shared heads, exact: splits at a newline and caches the head;
    a prompt counted again (the memory budget and then the backend count the same text) is a cache hit."""
    if len(text) <= 4 * _TAIL:
        return count_tokens(text)
    cut = text.rfind("\n", 0, len(text) - _TAIL)
    if cut <= 0:
        return count_tokens(text)
    return _count_head(text[:cut]) + count_tokens(text[cut:])
