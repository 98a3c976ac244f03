"""engine.http: the one pooled HTTP layer (in-flight bound, keep-alive, retry policy), at a loopback server."""

from __future__ import annotations

import random
import re
import threading
from pathlib import Path

import pytest

from engine.errors import BackendError, InputError
from engine.http import HTTPClient, RetryPolicy
from loopback import Loopback  # tests/engine/loopback.py


class Server(Loopback):
    """Counts requests in flight and client connections; ``hold`` makes each request wait until ``hold``
    are in flight together (or every expected request has arrived): the bound is observed, not timed."""

    def __init__(self, hold: int = 0, expect: int = 0, script=()):
        self.hold, self.expect, self.script = hold, expect, list(script)
        self.inflight = self.most = self.seen = 0
        self.ports: set[int] = set()
        self.cond = threading.Condition()
        super().__init__(self.answer)

    def answer(self, req):
        with self.cond:
            self.ports.add(req.client_port)
            self.inflight += 1
            self.seen += 1
            self.most = max(self.most, self.inflight)
            self.cond.notify_all()
            if self.hold:
                self.cond.wait_for(lambda: self.inflight >= self.hold or self.seen >= self.expect, timeout=20)
            action = self.script.pop(0) if self.script else 200
            self.inflight -= 1
        status, headers = (action, {}) if isinstance(action, int) else action
        return status, ({"echo": req.body} if status == 200 else {"error": "scripted"}), headers


@pytest.fixture
def make_server():
    made = []

    def make(**kw):
        made.append(Server(**kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


@pytest.mark.parametrize("limit, n", [(4, 12), (64, 128)])
def test_requests_in_flight_reach_the_limit_and_never_pass_it(make_server, limit, n):
    from engine.http import run

    srv = make_server(hold=limit, expect=n)
    client = HTTPClient(srv.url, max_in_flight=limit)

    async def batch():
        import asyncio

        return await asyncio.gather(*(client.call_json("x", {"i": i}, 30.0) for i in range(n)))

    out = run(batch())
    assert [o["echo"]["i"] for o in out] == list(range(n))
    assert srv.most == limit
    client.close()


def test_connections_are_kept_alive_across_calls(make_server):
    srv = make_server()
    client = HTTPClient(srv.url, max_in_flight=8)
    for i in range(20):
        assert client.call_json_sync("x", {"i": i}, 10.0) == {"echo": {"i": i}}
    assert srv.seen == 20 and len(srv.ports) == 1  # one connection for twenty requests
    client.close()


def test_retryable_statuses_are_retried_and_others_fail_at_once_naming_the_url(make_server):
    srv = make_server(script=[429, 503, (429, {"Retry-After": "0"}), 408])
    client = HTTPClient(srv.url, policy=RetryPolicy(retries=4, backoff_s=0.0), name="test server")
    assert client.call_json_sync("x", {"a": 1}, 10.0) == {"echo": {"a": 1}}
    assert srv.seen == 5 and client.requests == 5
    srv.script = [503, 503]
    with pytest.raises(BackendError, match=re.escape(f"test server at {srv.url}/x failed after 2 attempt(s): HTTP 503")):
        client.call_json_sync("x", {}, 10.0, RetryPolicy(retries=1, backoff_s=0.0))
    srv.script = [401]
    n = srv.seen
    with pytest.raises(BackendError, match=re.escape(f"HTTP 401 from {srv.url}/x: ")):
        client.call_json_sync("x", {}, 10.0)
    assert srv.seen == n + 1  # not retried
    client.close()


def test_retry_policy_waits_for_retry_after_and_caps_every_wait():
    rng = random.Random(0)
    p = RetryPolicy(retries=5, backoff_s=0.5, backoff_max_s=4.0)
    waits = [p.delay(a, None, rng) for a in range(6)]
    assert all(0.5 * min(4.0, 0.5 * 2 ** a) <= w <= min(4.0, 0.5 * 2 ** a) for a, w in enumerate(waits))
    assert p.delay(0, 3.0, rng) == 3.0  # never sooner than the server asked
    assert p.delay(0, 60.0, rng) == 4.0  # but bounded
    with pytest.raises(InputError, match="retries must be >= 0"):
        RetryPolicy(retries=-1)


def test_a_refused_connection_names_the_address():
    client = HTTPClient("http://127.0.0.1:9/v1", policy=RetryPolicy(retries=0))
    with pytest.raises(BackendError, match=r"cannot reach http://127\.0\.0\.1:9/v1/x"):
        client.call_json_sync("x", {}, 5.0)


def test_every_outbound_call_goes_through_the_one_http_layer():
    root = Path(__file__).resolve().parents[2]
    hits = [f"{f.relative_to(root)}" for pkg in ("engine", "cluster") for f in (root / pkg).rglob("*.py")
            if re.search(r"urllib\.request|http\.client|requests\.(get|post)\(", f.read_text())]
    assert hits == []
