"""The paper's web search providers behind the engine's ``SearchProvider`` interface (ForeDreamer C.4).

* :class:`TavilySearch`: Tavily's search API (``POST {base_url}/search``, bearer key from
  ``TAVILY_API_KEY``), news topic, ``end_date`` set to the day *before* the question's cutoff (Tavily's
  end date includes the whole day), ``include_raw_content`` for the page text.
* :class:`FirecrawlScrape`: wraps a search provider and replaces each result's content by the page
  scraped with Firecrawl (``POST {base_url}/v1/scrape``, ``formats = ["markdown"]``, bearer key from
  ``FIRECRAWL_API_KEY``); a failed scrape keeps the search's own text and is counted.

Both are cutoff-aware on the result's *own* date: a result without a parseable publication date, or
published after the cutoff, is dropped (counted in ``dropped``), also when the API was asked to filter.
Neither API pages its results, so the search over-fetches (``3 k``, at most 20) and keeps the first
``k`` that pass. Each item's text is cut to ``max_chars`` (paper: 30,000 characters per search turn,
top-4). Requests go through the engine's one HTTP layer (:mod:`engine.http`): HTTP 408, 425, 429 and
5xx answers, timeouts and dropped connections are retried with the server's ``Retry-After`` (bounded)
or exponential backoff; other errors raise :class:`BackendError` naming the provider, the status and
the server's message. ``base_url`` points the adapters at a local server in tests.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from engine.errors import BackendError, ConfigError
from engine.forecast.search import SearchResult
from engine.http import HTTPClient, RetryPolicy

TAVILY_URL = "https://api.tavily.com"
FIRECRAWL_URL = "https://api.firecrawl.dev"


def _key(env: str, explicit: str) -> str:
    key = explicit or os.environ.get(env, "")
    if not key:
        raise ConfigError(f"the web search provider needs an API key in the environment variable {env}")
    return key


def parse_date(value) -> datetime | None:
    """An ISO date, ISO datetime or RFC 2822 date as an aware UTC datetime; None if absent or unreadable."""
    if not value or not isinstance(value, str):
        return None
    text = value.strip()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            dt = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


@dataclass
class _Http:
    """A provider's POSTs through the engine's one HTTP layer (:mod:`engine.http`), one pooled client per URL."""

    provider: str
    timeout_s: float = 30.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_wait_s: float = 30.0
    requests: int = 0
    _clients: dict = field(default_factory=dict, repr=False, compare=False)

    def post(self, url: str, key: str, body: dict) -> dict:
        client = self._clients.get((url, key))
        if client is None:
            client = self._clients[(url, key)] = HTTPClient(
                url, api_key=key, name=self.provider, policy=RetryPolicy(self.max_retries, self.backoff_s, self.max_wait_s))
        before = client.requests
        try:
            out = client.call_json_sync("", body, self.timeout_s)
        except BackendError as exc:
            raise BackendError(f"{self.provider}: {exc}") from None
        finally:
            self.requests += client.requests - before
        if not isinstance(out, dict):
            raise BackendError(f"{self.provider}: the reply from {url} is a {type(out).__name__}, not an object")
        return out


@dataclass
class TavilySearch:
    """Tavily web search, cutoff-aware (module doc)."""

    api_key: str = ""
    base_url: str = TAVILY_URL
    max_chars: int = 30_000
    topic: str = "news"
    http: _Http = field(default_factory=lambda: _Http("tavily"))
    dropped: int = 0

    def __post_init__(self):
        self.api_key = _key("TAVILY_API_KEY", self.api_key)

    def search(self, query: str, cutoff: datetime, k: int = 4) -> list[SearchResult]:
        body = {"query": query[:400], "max_results": min(20, 3 * k), "topic": self.topic, "search_depth": "basic",
                "include_raw_content": True, "end_date": (cutoff - timedelta(days=1)).date().isoformat()}
        out = self.http.post(self.base_url.rstrip("/") + "/search", self.api_key, body)
        results = out.get("results")
        if not isinstance(results, list):
            raise BackendError(f"tavily: the reply has no 'results' list (keys: {sorted(out)[:8]})")
        hits = []
        for r in results:
            if not isinstance(r, dict):
                continue
            when = parse_date(r.get("published_date"))
            if when is None or when > cutoff:
                self.dropped += 1
                continue
            text = str(r.get("raw_content") or r.get("content") or "")[: self.max_chars]
            hits.append(SearchResult(len(hits), str(r.get("title") or ""), str(r.get("url") or ""), text, when,
                                     float(r.get("score") or 0.0), "tavily"))
            if len(hits) == k:
                break
        return hits


@dataclass
class FirecrawlScrape:
    """Full page text for each result of ``inner`` through Firecrawl's scrape endpoint (module doc)."""

    inner: object
    api_key: str = ""
    base_url: str = FIRECRAWL_URL
    max_chars: int = 30_000
    http: _Http = field(default_factory=lambda: _Http("firecrawl"))
    failed: int = 0
    dropped: int = 0

    def __post_init__(self):
        self.api_key = _key("FIRECRAWL_API_KEY", self.api_key)

    def search(self, query: str, cutoff: datetime, k: int = 4) -> list[SearchResult]:
        out = []
        for r in self.inner.search(query, cutoff, k):
            try:
                page = self.http.post(self.base_url.rstrip("/") + "/v1/scrape", self.api_key,
                                      {"url": r.url, "formats": ["markdown"], "onlyMainContent": True})
                data = page.get("data") if page.get("success", True) else None
                if not isinstance(data, dict) or not isinstance(data.get("markdown"), str):
                    raise BackendError(f"firecrawl: no markdown for {r.url}")
            except BackendError:
                self.failed += 1
                out.append(r)
                continue
            meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
            when = parse_date(meta.get("publishedTime") or meta.get("article:published_time")) or r.available_at
            if when > cutoff:  # the page itself says it is newer than the question: never shown
                self.dropped += 1
                continue
            out.append(SearchResult(r.doc_id, str(meta.get("title") or r.title), r.url,
                                    data["markdown"][: self.max_chars], when, r.score, "firecrawl"))
        return out


def web_search(provider: str, max_chars: int, tavily_url: str = TAVILY_URL, firecrawl_url: str = FIRECRAWL_URL):
    """``"tavily"`` or ``"tavily+firecrawl"`` -> a cutoff-aware provider (keys from the environment)."""
    if provider == "tavily":
        return TavilySearch(base_url=tavily_url, max_chars=max_chars)
    if provider == "tavily+firecrawl":
        return FirecrawlScrape(TavilySearch(base_url=tavily_url, max_chars=max_chars), base_url=firecrawl_url,
                               max_chars=max_chars)
    raise ConfigError(f"data.search must be 'sources', 'tavily' or 'tavily+firecrawl', got {provider!r}")
