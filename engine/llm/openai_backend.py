"""OpenAI-compatible backend: ``vllm serve``, llama.cpp's server, SGLang, OpenAI itself.

* Completions (``prompt``) go to ``/completions``, chats (``messages``, or any
  request when ``api="chat"``) to ``/chat/completions``.
* Every request of a batch is in flight at once over one pooled async client
  (:mod:`engine.http`: keep-alive connections, at most ``max_concurrency``
  requests in flight per process, default 256 as a vLLM server's
  ``max_num_seqs``); several threads may call ``generate`` together.
* Retries (:class:`engine.http.RetryPolicy`, the one policy of every outbound
  call) with exponential backoff and ``Retry-After`` on HTTP 429, 5xx,
  timeouts, refused or dropped connections and unreadable bodies; other 4xx fail
  at once. After the retries a :class:`~engine.errors.BackendError` names the
  endpoint and the last failure, and the whole batch fails (nothing partial is
  returned); with ``on_error="record"`` that request is answered with empty
  completions and ``Response.error`` instead, and the rest of the batch as usual.
* ``Response.cached_tokens``: the prompt tokens the server took from its prefix
  cache, where it reports them.
* ``n``: ``fan_out_n="auto"`` asks for ``n`` and, when the server returns fewer
  choices (some ignore ``n``), requests the missing samples one by one and
  fans out directly from then on; ``"always"`` always sends ``n`` requests of
  ``n=1`` (with ``seed + i`` when the request has a seed); ``"never"`` trusts
  the server.
* Completions are returned as the server wrote them, empty or truncated ones
  included.

Token counts: prompt tokens come from the server's ``usage``. For ``n=1`` the
completion count is the server's. For ``n>1`` the OpenAI API reports the sum
over choices; it is split over the choices in proportion to their length.
Servers whose ``usage`` is not a sum (llama.cpp reports one choice's count;
``usage_sums_choices=False``; ``None`` asks the server once with a 2-choice probe)
get per-choice counts instead (the backend's ``count_tokens``, the model's
tokenizer where ``llm.tokenizer`` gives one, else words and punctuation marks;
a choice cut by ``length`` counts ``max_tokens``); use
``fan_out_n="always"`` where exact per-sample counts matter.

The transport is pluggable: :class:`HTTPTransport` or any object with
``endpoint`` and ``post(path, payload, timeout) -> dict`` (the local backend
posts to llama.cpp in process; such a transport runs over a thread pool of
``max_concurrency``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from engine.errors import BackendError, ConfigError, InputError
from engine.http import HTTPClient, RetryableError, RetryPolicy, run
from engine.llm.base import Completion, Request, Response
from engine.llm.structured import FORMATS, request_fields
from engine.llm.tokens import count_tokens


class Transport(Protocol):
    """A synchronous transport (the local backend posts to llama.cpp in process); an HTTP transport also
    has ``async apost(path, payload, timeout)`` and then every request of a batch is in flight at once."""

    endpoint: str

    def post(self, path: str, payload: dict, timeout: float) -> dict: ...


class HTTPTransport:
    """JSON over pooled async HTTP (:class:`engine.http.HTTPClient`); raises RetryableError or BackendError."""

    def __init__(self, base_url: str, api_key: str | None = None, connect_timeout_s: float = 10.0,
                 max_in_flight: int = 256):
        self.client = HTTPClient(base_url, api_key=api_key, connect_timeout_s=connect_timeout_s,
                                 max_in_flight=max_in_flight, name="LLM server")
        self.endpoint = self.client.endpoint

    async def apost(self, path: str, payload: dict, timeout: float) -> dict:
        return await self.client.post_json(path, payload, timeout)

    def post(self, path: str, payload: dict, timeout: float) -> dict:
        return run(self.apost(path, payload, timeout))

    def close(self) -> None:
        self.client.close()


@dataclass
class _Job:
    req_index: int
    payload: dict
    path: str
    want: int  # samples asked for
    result: dict | None = None
    error: str = ""  # why it failed after its retries (on_error = "record")
    t_start: float = 0.0
    t_end: float = 0.0


class OpenAIBackend:
    """Batched client of an OpenAI-compatible server (see the module docstring)."""

    name = "openai"

    def __init__(
        self,
        transport: Transport | str,
        model: str = "",
        *,
        api: str = "completions",
        fan_out_n: str = "auto",
        max_concurrency: int = 256,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        backoff_max_s: float = 20.0,
        api_key: str | None = None,
        name: str = "openai",
        usage_sums_choices: bool | None = True,
        structured_format: str = "response_format",
        extra_body: Mapping[str, Any] | None = None,
        on_error: str = "fail",
    ):
        if api not in ("completions", "chat"):
            raise InputError(f"api must be 'completions' or 'chat', got {api!r}")
        if fan_out_n not in ("auto", "always", "never"):
            raise InputError(f"fan_out_n must be 'auto', 'always' or 'never', got {fan_out_n!r}")
        if max_concurrency < 1:
            raise InputError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if timeout_s <= 0:
            raise InputError(f"timeout_s must be > 0, got {timeout_s}")
        if on_error not in ("fail", "record"):
            raise InputError(f"on_error must be 'fail' or 'record', got {on_error!r}")
        self.on_error = on_error
        if structured_format not in ("auto", *FORMATS):
            raise InputError(f"structured_format must be 'auto' or one of {', '.join(FORMATS)}, "
                             f"got {structured_format!r}")
        self.structured_format = structured_format  # "auto": the server's dialect, asked once (_format)
        self.transport = (HTTPTransport(transport, api_key, max_in_flight=max_concurrency) if isinstance(transport, str)
                          else transport)
        self.model = model
        self.name = name
        self.api = api
        self.fan_out_n = fan_out_n
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.policy = RetryPolicy(int(retries), float(backoff_s), float(backoff_max_s))
        self.retries = self.policy.retries
        self.server_ignores_n = fan_out_n == "always"
        # whether usage.completion_tokens of an n > 1 request sums its choices (the OpenAI API, vLLM) or is one
        # choice's (llama.cpp's server); None: ask the server once, before the first batch with n > 1
        self.usage_sums_choices = None if usage_sums_choices is None else bool(usage_sums_choices)
        self.usage_detected = ""  # what the probe found ("all", "one", or why it could not tell)
        self.extra_body = dict(extra_body or {})  # merged into every request (llm.openai.extra_body)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._rng = random.Random(0x5EED)  # the backoff jitter of the thread-pool path

    @classmethod
    def from_config(cls, cfg) -> "OpenAIBackend":
        """The backend ``cfg`` (an LLMConfig) names: ``[llm] model`` at ``[llm.openai]``'s server."""
        server = cfg.openai
        key = os.environ.get(server.api_key_env) or None
        transport = HTTPTransport(server.base_url, key, server.connect_timeout_s, server.max_concurrency)
        return cls(
            transport,
            cfg.model,
            **server.client_options(),
            fan_out_n=server.fan_out_n,
            max_concurrency=server.max_concurrency,
            backoff_s=server.backoff_s,
            backoff_max_s=server.backoff_max_s,
            structured_format=server.structured_format,
            usage_sums_choices={"all": True, "one": False, "auto": None}[server.usage_covers_choices],
            extra_body=server.extra_body,
            on_error=server.on_error,
        )

    @property
    def endpoint(self) -> str:
        return self.transport.endpoint

    # -- lifecycle --------------------------------------------------------------
    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix=f"llm-{self.name}")
            return self._pool

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
        if hasattr(self.transport, "close"):
            self.transport.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- generate ---------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Response]:
        requests = list(requests)
        for i, r in enumerate(requests):
            if not isinstance(r, Request):
                raise InputError(f"requests[{i}] must be a Request, got {type(r).__name__}")
        if not requests:
            return []
        if self.usage_sums_choices is None and any(r.n > 1 for r in requests) and not self.server_ignores_n:
            self._detect_usage()
        jobs: list[_Job] = []
        for k, r in enumerate(requests):
            if r.n > 1 and self.server_ignores_n:
                jobs += [self._job(k, r, 1, i) for i in range(r.n)]
            else:
                jobs.append(self._job(k, r, r.n, None))
        self._run(jobs)
        if self.fan_out_n == "auto":
            extra = []
            for k, r in enumerate(requests):
                mine = [j for j in jobs if j.req_index == k]
                if any(j.error for j in mine):
                    continue  # a failed request is an error row, not a server that ignores n
                got = sum(len(j.result.get("choices") or ()) for j in mine)
                if got < r.n:
                    self.server_ignores_n = True
                    extra += [self._job(k, r, 1, i) for i in range(got, r.n)]
            if extra:
                self._run(extra)
                jobs += extra
        return [self._response(k, r, [j for j in jobs if j.req_index == k]) for k, r in enumerate(requests)]

    PROBE_TOKENS = 4

    def _format(self) -> str:
        """The structured-output dialect: the configured one, or (``"auto"``) what the server says it is."""
        if self.structured_format == "auto":
            with self._lock:
                if self.structured_format == "auto":
                    self.detected_format = self._ask_format()
                    self.structured_format = self.detected_format
        return self.structured_format

    def _format_source(self) -> str:
        seen = getattr(self, "format_owner", None)
        return (f"the server's GET /models says owned_by {seen!r}" if seen is not None and seen != ""
                else "llm.openai.structured_format" if not hasattr(self, "detected_format")
                else "the server's GET /models does not say what it is")

    def _ask_format(self) -> str:
        """``GET {base_url}/models``: the first model's ``owned_by`` (vLLM "vllm", llama.cpp "llamacpp", SGLang
        "sglang"); anything else, or no answer, is the OpenAI API (``response_format``)."""
        self.format_owner = ""
        client = getattr(self.transport, "client", None)
        if client is None:
            return "response_format"
        try:
            data = json.loads(client.get_text_sync("models", min(self.timeout_s, 30.0)))
            owner = str(((data.get("data") or [{}])[0]).get("owned_by") or "").lower()
        except Exception:  # noqa: BLE001 - a server without /models speaks the OpenAI API at best
            return "response_format"
        self.format_owner = owner
        return {"vllm": "vllm", "llamacpp": "llamacpp", "sglang": "sglang"}.get(owner, "response_format")

    def _detect_usage(self) -> None:
        """``usage_covers_choices = "auto"``: one request of 2 choices cut at PROBE_TOKENS tokens each. A server
        that reports 2 x PROBE_TOKENS completion tokens sums its choices, one that reports PROBE_TOKENS counts
        one; anything else (a choice that stopped early, a server that ignores n or fails) keeps the OpenAI
        API's meaning (a sum) and says why in ``usage_detected``."""
        probe = Request(prompt="Count to fifty: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", n=2, temperature=1.0,
                        max_tokens=self.PROBE_TOKENS, seed=0)
        job = self._job(-1, probe, 2, None)
        try:
            self._run([job])
        except BackendError as exc:
            job.error = str(exc)
        self.usage_sums_choices = True
        if job.error:
            self.usage_detected = f"all (assumed: the probe failed: {job.error[:200]})"
            return
        choices = job.result.get("choices") or []
        reported = (job.result.get("usage") or {}).get("completion_tokens")
        if len(choices) < 2 or reported is None or any(_finish(c.get("finish_reason")) != "length" for c in choices):
            self.usage_detected = "all (assumed: the probe's 2 choices were not both cut at max_tokens)"
        elif int(reported) == self.PROBE_TOKENS * len(choices):
            self.usage_detected = "all"
        elif int(reported) == self.PROBE_TOKENS:
            self.usage_sums_choices, self.usage_detected = False, "one"
        else:
            self.usage_detected = f"all (assumed: {reported} completion tokens for 2 choices of {self.PROBE_TOKENS})"

    def _job(self, k: int, r: Request, n: int, sample: int | None) -> _Job:
        chat = r.messages is not None or self.api == "chat"
        payload: dict[str, Any] = {
            **self.extra_body,
            "n": n,
            "temperature": r.temperature,
            "top_p": r.top_p,
            "max_tokens": r.max_tokens,
        }
        if self.model:
            payload["model"] = self.model
        if chat:
            payload["messages"] = list(r.messages) if r.messages is not None else [{"role": "user", "content": r.prompt}]
        else:
            payload["prompt"] = r.prompt
        if r.stop:
            payload["stop"] = list(r.stop)
        if r.seed is not None:
            payload["seed"] = int(r.seed) + (sample or 0)
        if r.constraint is not None:  # structured outputs in this server's dialect (engine.llm.structured)
            fields = request_fields(r.constraint, self._format())
            if not fields:
                raise ConfigError(
                    f"the {r.constraint.kind!r} answer constraint (a regex or grammar) cannot be sent to "
                    f"{self.endpoint} as response_format ({self._format_source()}); set llm.openai.structured_format "
                    f"to the server's dialect (vllm, llamacpp, sglang), or llm.unconstrained = "
                    f"[\"{r.constraint.kind}\"] to send these prompts without it")
            payload.update(fields)
        return _Job(k, payload, "chat/completions" if chat else "completions", n)

    def _run(self, jobs: list[_Job]) -> None:
        """Every job in flight at once (an async transport: the client bounds them at ``max_concurrency``), or
        over a thread pool of ``max_concurrency`` (a synchronous one); the first failure fails the batch."""
        if hasattr(self.transport, "apost"):
            run(self._arun(jobs))
            return
        pool = self._executor()
        futures = [pool.submit(self._attempt, job) for job in jobs]
        if self.on_error == "record":  # every job runs to its end; a failure is that job's error
            for job, f in zip(jobs, futures):
                if f.exception() is not None:
                    job.error = str(self._failure(f.exception()))
            return
        done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in done:
            exc = f.exception()
            if exc is not None:
                for p in pending:
                    p.cancel()  # in-flight jobs finish on their own; their results are dropped
                raise self._failure(exc)

    async def _arun(self, jobs: list[_Job]) -> None:
        tasks = [asyncio.ensure_future(self._aattempt(job)) for job in jobs]
        if self.on_error == "record":
            for job, out in zip(jobs, await asyncio.gather(*tasks, return_exceptions=True)):
                if isinstance(out, BaseException):
                    if not isinstance(out, Exception):
                        raise out
                    job.error = str(self._failure(out))
            return
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise self._failure(t.exception())

    def _failure(self, exc: BaseException) -> BackendError:
        if isinstance(exc, BackendError):
            return exc
        return BackendError(f"{self.name} backend at {self.endpoint} failed: {exc}")

    def _what(self, job: _Job) -> str:
        return f"{self.name} backend at {self.endpoint}/{job.path}"

    async def _aattempt(self, job: _Job) -> None:
        job.t_start = time.perf_counter()

        async def once():
            return _checked(await self.transport.apost(job.path, job.payload, self.timeout_s))

        job.result = await self.transport.client.retrying(once, self._what(job), self.policy)
        job.t_end = time.perf_counter()

    def _attempt(self, job: _Job) -> None:
        job.t_start = time.perf_counter()
        last = None
        for attempt in range(self.policy.retries + 1):
            try:
                job.result = _checked(self.transport.post(job.path, job.payload, self.timeout_s))
                job.t_end = time.perf_counter()
                return
            except RetryableError as exc:
                last = exc
                if attempt == self.policy.retries:
                    break
                with self._lock:
                    delay = self.policy.delay(attempt, exc.retry_after, self._rng)
                time.sleep(delay)
        raise BackendError(f"{self._what(job)} failed after {self.policy.retries + 1} attempt(s): {last}")

    def _response(self, k: int, r: Request, jobs: list[_Job]) -> Response:
        failed = next((j.error for j in jobs if j.error), "")
        if failed:  # on_error = "record": the request's samples are empty, and say why
            return Response(completions=tuple(Completion("", 0, "error") for _ in range(r.n)), prompt_tokens=0,
                            latency_s=max(j.t_end or j.t_start for j in jobs) - min(j.t_start for j in jobs),
                            backend=self.name, model=self.model, error=failed)
        texts, reasons, tokens = [], [], []
        prompt_tokens = cached = None
        count = getattr(self, "count_tokens", None) or count_tokens  # the model's tokenizer (llm.tokenizer)
        for job in jobs:
            choices = sorted(job.result["choices"], key=lambda c: c.get("index", 0))
            usage = job.result.get("usage") or {}
            if prompt_tokens is None and usage.get("prompt_tokens") is not None:
                prompt_tokens = int(usage["prompt_tokens"])
                cached = _cached_tokens(job.result, usage)
            t = [_choice_text(c) for c in choices]
            fr = [_finish(c.get("finish_reason")) for c in choices]
            texts += t
            reasons += fr
            tokens += _split_tokens(t, fr, usage.get("completion_tokens"), r.max_tokens, self.usage_sums_choices,
                                    count)
        texts, reasons, tokens = texts[: r.n], reasons[: r.n], tokens[: r.n]
        if prompt_tokens is None:
            prompt_tokens = count(r.prompt if r.prompt is not None else json.dumps(list(r.messages)))
        return Response(
            completions=tuple(Completion(t, n, f) for t, n, f in zip(texts, tokens, reasons)),
            prompt_tokens=prompt_tokens,
            latency_s=max(j.t_end for j in jobs) - min(j.t_start for j in jobs),
            backend=self.name,
            model=self.model or str(jobs[0].result.get("model", "")),
            cached_tokens=cached,
        )


def _cached_tokens(result: dict, usage: dict) -> int | None:
    """Prompt tokens served from the server's prefix cache: ``usage.prompt_tokens_details.cached_tokens``
    (OpenAI, vLLM, SGLang) or llama.cpp's ``timings.cache_n``; None when the server does not say."""
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        return int(details["cached_tokens"])
    timings = result.get("timings")
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        return int(timings["cache_n"])
    return None


def _checked(result) -> dict:
    """A reply with a ``choices`` list; a server error object or anything else is retryable."""
    if not isinstance(result, dict) or not isinstance(result.get("choices"), list):
        if isinstance(result, dict) and "error" in result:
            raise RetryableError(f"server error: {str(result['error'])[:300]}")
        raise RetryableError(f"response without a choices list: {str(result)[:200]}")
    return result


def _choice_text(choice: dict) -> str:
    if "text" in choice:
        return choice.get("text") or ""
    msg = choice.get("message") or {}
    return msg.get("content") or ""


def _finish(reason) -> str:
    return reason if reason in ("stop", "length") else ("stop" if reason is None else str(reason))


def _split_tokens(texts: list[str], reasons: list[str], total, max_tokens: int, is_sum: bool = True,
                  count=count_tokens) -> list[int]:
    est = [max_tokens if fr == "length" else min(max_tokens, count(t)) for t, fr in zip(texts, reasons)]
    if total is None:
        return est
    total = int(total)
    if len(texts) == 1:
        return [total]
    if not is_sum:
        return est
    weights = [max(1, e) for e in est]
    s = sum(weights)
    shares = [total * w // s for w in weights]
    for i in range(total - sum(shares)):
        shares[i % len(shares)] += 1
    return shares
