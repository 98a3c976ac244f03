"""A model-free, deterministic token estimate for backends that cannot count tokens."""

from __future__ import annotations

import re

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Approximate token count (words and punctuation marks); deterministic, model-free."""
    return len(TOKEN_PATTERN.findall(text))
