"""The engine's LLM client before engine.http (benchmarks only): one urllib request per call, a new
connection each, fanned out over a thread pool of ``max_concurrency`` threads (its default was 8).

Kept as the reference the new client is measured against in the same run (benchmarks/test_llm_client.py).
"""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def post(url: str, payload: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - a loopback server
        return json.loads(resp.read())


def post_all(url: str, payloads: list[dict], max_concurrency: int, timeout: float = 60.0) -> list[dict]:
    """Every payload posted, at most ``max_concurrency`` at once (the old OpenAIBackend's thread pool)."""
    with ThreadPoolExecutor(max_concurrency) as pool:
        return list(pool.map(lambda p: post(url, p, timeout), payloads))
