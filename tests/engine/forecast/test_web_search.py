"""The web search adapters against a local fake Tavily/Firecrawl server on 127.0.0.1 (no real network)."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.errors import BackendError, ConfigError
from engine.forecast.search import CutoffGuard
from engine.forecast.web_search import FirecrawlScrape, TavilySearch, _Http, web_search

CUTOFF = datetime(2025, 8, 1, 12, 0, tzinfo=timezone.utc)


class _Fake(BaseHTTPRequestHandler):
    """Scripted by the server's attributes: results, failures before success, scrape pages."""

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server's name
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        srv.seen.append((self.path, self.headers.get("Authorization"), body))
        if srv.fail:
            code, headers = srv.fail.pop(0)
            self.send_response(code)
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(b'{"detail": "scripted failure"}')
            return
        if self.path == "/search":
            out = {"query": body["query"], "results": srv.results}
        elif self.path == "/v1/scrape":
            page = srv.pages.get(body["url"])
            out = {"success": page is not None, "data": page}
        else:
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    srv.seen, srv.fail, srv.results, srv.pages = [], [], [], {}
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


def _hit(i, date, **kw):
    return {"title": f"t{i}", "url": f"https://news.example/{i}", "content": f"summary {i}",
            "raw_content": f"full text {i}", "score": 1.0 - i / 10, "published_date": date, **kw}


def _fast():
    return _Http("tavily", timeout_s=5, max_retries=2, backoff_s=0.01, max_wait_s=0.05)


def test_tavily_request_and_cutoff_filter_on_each_results_own_date(server, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    server.results = [_hit(0, "2025-07-30"), _hit(1, "2025-08-02T09:00:00Z"), _hit(2, None),
                      _hit(3, "Thu, 31 Jul 2025 10:00:00 GMT"), _hit(4, "not a date"), _hit(5, "2025-07-01T00:00:00Z")]
    tav = TavilySearch(base_url=server.url, http=_fast())
    hits = tav.search("Will X happen?", CUTOFF, k=2)
    path, auth, body = server.seen[0]
    assert path == "/search" and auth == "Bearer tvly-test"
    assert body["end_date"] == "2025-07-31" and body["max_results"] == 6 and body["include_raw_content"] is True
    assert [h.url for h in hits] == ["https://news.example/0", "https://news.example/3"]  # first k that pass
    assert all(h.available_at <= CUTOFF for h in hits) and hits[0].content == "full text 0"
    assert tav.dropped == 2  # the later one and the undated one before the k-th pass


def test_rate_limits_are_retried_and_errors_name_the_provider(server, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "k")
    server.results = [_hit(0, "2025-07-30")]
    server.fail = [(429, {"Retry-After": "0"}), (503, {})]
    tav = TavilySearch(base_url=server.url, http=_fast())
    assert len(tav.search("q", CUTOFF, 4)) == 1 and tav.http.requests == 3
    server.fail = [(401, {})]
    with pytest.raises(BackendError, match="tavily: HTTP 401 .*scripted failure"):
        tav.search("q", CUTOFF, 4)
    server.fail = [(500, {})] * 3
    with pytest.raises(BackendError, match="HTTP 500"):
        tav.search("q", CUTOFF, 4)


def test_missing_key_and_bad_provider_are_clear_errors(monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="TAVILY_API_KEY"):
        TavilySearch()
    with pytest.raises(ConfigError, match="data.search must be"):
        web_search("bing", 1000)


def test_firecrawl_scrapes_full_text_and_keeps_the_cutoff(server, monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "k")
    monkeypatch.setenv("FIRECRAWL_API_KEY", "fc-test")
    server.results = [_hit(0, "2025-07-30"), _hit(1, "2025-07-29"), _hit(2, "2025-07-28")]
    server.pages = {"https://news.example/0": {"markdown": "# page 0 " + "x" * 50, "metadata": {"title": "P0"}},
                    "https://news.example/1": {"markdown": "# page 1", "metadata": {"publishedTime": "2025-09-01"}}}
    fc = FirecrawlScrape(TavilySearch(base_url=server.url, http=_fast()), base_url=server.url,
                         max_chars=20, http=_Http("firecrawl", max_retries=0, backoff_s=0.01))
    hits = CutoffGuard(fc).search("q", CUTOFF, 3)
    assert [h.url for h in hits] == ["https://news.example/0", "https://news.example/2"]
    assert hits[0].content == "# page 0 " + "x" * 11 and hits[0].title == "P0"  # cut to max_chars
    assert hits[1].content == "full text 2"  # the scrape failed: the search's own text is kept
    assert fc.dropped == 1 and fc.failed == 1
    scrape = [b for p, a, b in server.seen if p == "/v1/scrape"]
    assert scrape[0] == {"url": "https://news.example/0", "formats": ["markdown"], "onlyMainContent": True}
    assert all(a == "Bearer fc-test" for p, a, _ in server.seen if p == "/v1/scrape")


def test_prophet_arena_run_uses_the_configured_provider(server, monkeypatch, pa_folder, tmp_path, capsys):
    """Full Text reads the search results (C.4), here from the fake Tavily server."""
    from engine.tasks import run
    from engine.tasks import RunOptions

    monkeypatch.setenv("TAVILY_API_KEY", "k")
    server.results = [_hit(0, "2025-07-01", raw_content="WEB EVIDENCE 0")]
    cfg = {"task": "forecast", "data": {"path": str(pa_folder), "n_evo": 2, "search": "tavily",
                                        "tavily_url": server.url},
           "run": {"methods": ["full_text"], "max_questions": 1}, "llm": {"backend": "simulated"}}
    assert run(cfg, RunOptions(config_path=tmp_path / "x.toml", out=tmp_path / "o")) == 0
    searched = [b["query"] for p, _, b in server.seen if p == "/search"]
    assert searched, "Full Text did not search"
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["meta"]["search"] == "tavily"
