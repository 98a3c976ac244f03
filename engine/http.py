"""One HTTP layer for every outbound call: the LLM server, embeddings, web search and ``/metrics``.

:class:`HTTPClient` is a pooled asynchronous client (``aiohttp.ClientSession``: keep-alive
HTTP/1.1 connections, at most ``max_in_flight`` requests at once) running on one event loop per
process, a daemon thread started on first use (:func:`run` hands it a coroutine from any thread
and waits). aiohttp rather than httpx: httpx's connection pool scans every connection for every
queued request, which cost 12 ms of CPU per request at 64 in flight here (aiohttp: 0.25 ms;
benchmarks/results/llm.md). HTTP/2 is not offered: vLLM's and llama.cpp's servers speak HTTP/1.1.
Callers that batch (the OpenAI-compatible LLM backend) ``await`` many requests at once on
that loop; callers that send one request at a time use the ``*_sync`` methods.

One retry policy (:class:`RetryPolicy`): HTTP 408, 425, 429 and 5xx, timeouts, refused or dropped
connections and bodies that are not JSON are retried with exponential backoff and jitter,
never sooner than the server's ``Retry-After``; any other 4xx fails at once. After the last
attempt a :class:`~engine.errors.BackendError` names the URL and the last failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from engine.errors import BackendError, InputError


class RetryableError(Exception):
    """A failure worth retrying (429, 5xx, timeout, connection trouble, a body that is not JSON)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more attempts after the first, waiting ``backoff_s * 2**attempt`` (times a jitter in
    [0.5, 1]), at most ``backoff_max_s``, and never less than the server's ``Retry-After`` (capped too)."""

    retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 20.0

    def __post_init__(self):
        if self.retries < 0:
            raise InputError(f"retries must be >= 0, got {self.retries}")
        if self.backoff_s < 0 or self.backoff_max_s < 0:
            raise InputError(f"backoff times must be >= 0, got {self.backoff_s}, {self.backoff_max_s}")

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        wait = min(self.backoff_max_s, self.backoff_s * (2 ** attempt)) * (0.5 + 0.5 * rng.random())
        if retry_after is not None:
            wait = max(wait, retry_after)
        return min(self.backoff_max_s, max(0.0, wait))


# --- the process's event loop ----------------------------------------------------------------------

_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None
_LOOP_LOCK = threading.Lock()


def loop() -> asyncio.AbstractEventLoop:
    """The event loop every client of this process runs on (a daemon thread; a new one after a fork)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP[0] != os.getpid() or _LOOP[1].is_closed():
            ev = asyncio.new_event_loop()
            threading.Thread(target=ev.run_forever, name="toe-http", daemon=True).start()
            _LOOP = (os.getpid(), ev)
        return _LOOP[1]


def run(coro):
    """Run ``coro`` on the HTTP loop and wait for its result (from any thread but the loop's own)."""
    ev = loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is ev:
        coro.close()
        raise RuntimeError("engine.http.run called from the HTTP loop itself; await the coroutine instead")
    return asyncio.run_coroutine_threadsafe(coro, ev).result()


def unreachable(host: str, port: int, timeout_s: float) -> str:
    """Why nothing accepts a TCP connection at ``host:port`` within ``timeout_s`` ("" when something does): a
    check in a second of an address a library would otherwise retry for minutes (a Ray head, a tracking
    server)."""
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return f"{exc.strerror or exc}, within {timeout_s:g} s"
    return ""


# --- the client ------------------------------------------------------------------------------------


class HTTPClient:
    """Pooled JSON-over-HTTP client of one server (see the module docstring)."""

    def __init__(self, base_url: str, *, api_key: str | None = None, headers: Mapping[str, str] | None = None,
                 max_in_flight: int = 256, connect_timeout_s: float = 10.0, policy: RetryPolicy | None = None,
                 name: str = "http"):
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise InputError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_in_flight < 1:
            raise InputError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.endpoint = base_url.rstrip("/")
        self.api_key = api_key
        self.headers = {"Accept": "application/json", **(headers or {})}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.max_in_flight = int(max_in_flight)
        self.connect_timeout_s = float(connect_timeout_s)
        self.policy = policy or RetryPolicy()
        self.name = name
        self.requests = 0  # HTTP requests sent, retries included
        self._rng = random.Random(0x5EED)
        self._session = None
        self._owner: asyncio.AbstractEventLoop | None = None

    def url(self, path: str) -> str:
        return self.endpoint if not path else f"{self.endpoint}/{path.lstrip('/')}"

    def _ensure(self):
        """The session of the running loop (made on first use in it): its connector bounds the requests in
        flight and keeps their connections alive."""
        ev = asyncio.get_running_loop()
        if self._session is None or self._owner is not ev:
            import aiohttp

            connector = aiohttp.TCPConnector(limit=self.max_in_flight, limit_per_host=0)
            self._session = aiohttp.ClientSession(connector=connector, headers=self.headers)
            self._owner = ev
        return self._session

    # -- one attempt ----------------------------------------------------------------------------
    async def send(self, method: str, path: str, payload: Any = None, timeout: float = 60.0) -> tuple[int, bytes]:
        """One attempt: ``(status, body)`` of a 2xx; raises RetryableError (408, 425, 429, 5xx, timeouts,
        connection trouble) or BackendError (any other status)."""
        import aiohttp

        session = self._ensure()
        url = self.url(path)
        self.requests += 1
        limit = aiohttp.ClientTimeout(total=timeout, sock_connect=min(timeout, self.connect_timeout_s))
        try:
            async with session.request(method, url, json=payload, timeout=limit) as resp:
                status, retry_after, body = resp.status, resp.headers.get("Retry-After"), await resp.read()
        except asyncio.TimeoutError as exc:
            raise RetryableError(f"timed out after {timeout}s waiting for {url}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise RetryableError(f"cannot reach {url}: {exc.os_error or exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise RetryableError(f"connection to {url} failed: {type(exc).__name__}: {exc}") from exc
        if status in _RETRY_STATUS or status >= 500:
            raise RetryableError(f"HTTP {status} from {url}: {_detail(body)}", _retry_after(retry_after))
        if status >= 400:
            raise BackendError(f"HTTP {status} from {url}: {_detail(body)}")
        return status, body

    async def post_json(self, path: str, payload: Any, timeout: float) -> Any:
        """One attempt of a JSON POST; a body that is not JSON is retryable."""
        _, body = await self.send("POST", path, payload, timeout)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise RetryableError(f"{self.url(path)} returned a body that is not JSON: {body[:200]!r}") from exc

    # -- with the retry policy ------------------------------------------------------------------
    async def retrying(self, attempt_fn, what: str, policy: RetryPolicy | None = None):
        """``await attempt_fn()`` under the retry policy; after the last attempt a BackendError naming ``what``."""
        policy = policy or self.policy
        last: RetryableError | None = None
        for attempt in range(policy.retries + 1):
            try:
                return await attempt_fn()
            except RetryableError as exc:
                last = exc
                if attempt == policy.retries:
                    break
                await asyncio.sleep(policy.delay(attempt, exc.retry_after, self._rng))
        raise BackendError(f"{what} failed after {policy.retries + 1} attempt(s): {last}")

    async def call_json(self, path: str, payload: Any, timeout: float, policy: RetryPolicy | None = None) -> Any:
        return await self.retrying(lambda: self.post_json(path, payload, timeout), f"{self.name} at {self.url(path)}",
                                   policy)

    def call_json_sync(self, path: str, payload: Any, timeout: float, policy: RetryPolicy | None = None) -> Any:
        """:meth:`call_json` from synchronous code."""
        return run(self.call_json(path, payload, timeout, policy))

    def get_text_sync(self, path: str, timeout: float) -> str:
        """One GET (no retries: a periodic reader such as the ``/metrics`` sampler tries again next time)."""
        async def get():
            _, body = await self.send("GET", path, None, timeout)
            return body.decode("utf-8", "replace")

        return run(get())

    def close(self) -> None:
        session, owner = self._session, self._owner
        self._session = self._owner = None
        if session is not None and owner is not None and not owner.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(session.close(), owner).result(timeout=5)
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def __del__(self):  # a client dropped unclosed (a backend that is simply let go): its connections close too
        session, owner = getattr(self, "_session", None), getattr(self, "_owner", None)
        if session is not None and owner is not None and not owner.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(session.close(), owner)  # scheduled, not awaited (GC may run anywhere)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass

    def __getstate__(self):  # a client travels (Ray workers, checkpoints) without its connections
        state = dict(self.__dict__)
        state.update(_session=None, _owner=None)
        return state


_RETRY_STATUS = (408, 425, 429)  # request timeout, too early, too many requests (and every 5xx)


def _detail(body: bytes) -> str:
    return body[:300].decode("utf-8", "replace")


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
