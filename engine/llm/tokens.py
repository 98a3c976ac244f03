"""A model-free, deterministic token estimate for backends that cannot count tokens."""

from __future__ import annotations

import re
from functools import lru_cache

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
_LINES: dict[str, int] = {}  # tokens per line of the prompts counted so far (emptied when full)
_MAX_LINES = 1 << 16  # bounds: lines, and characters held
_MAX_CHARS = 1 << 23
_held = [0]


def count_tokens(text: str) -> int:
    """Approximate token count (words and punctuation marks); deterministic, model-free."""
    return len(TOKEN_PATTERN.findall(text))


@lru_cache(maxsize=2048)
def count_prompt_tokens(text: str) -> int:
    """:func:`count_tokens` for prompts, exact, counted line by line with each line's count cached.

    A token is a run of word characters or one other non-space character, so none spans a newline and
    the count of a text is the sum over its lines. Prompts repeat lines (a few-shot head, the news of a
    window, the same experience paths, one prompt rendered with and without its experience block), so
    most lines are cache hits. A prompt counted again (the memory budget, then the backend) is a hit of
    the whole text.
    """
    cache = _LINES
    if len(cache) > _MAX_LINES or _held[0] > _MAX_CHARS:
        cache.clear()
        _held[0] = 0
    n = 0
    for line in text.split("\n"):
        c = cache.get(line)
        if c is None:
            c = cache[line] = len(TOKEN_PATTERN.findall(line))
            _held[0] += len(line)
        n += c
    return n
