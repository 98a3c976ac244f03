"""The one batched LLM interface every method uses.

A method builds a list of :class:`Request` (all prompts of one step, across all
episodes in flight) and calls ``backend.generate(requests)`` once. Each request
gets one :class:`Response` holding its ``n`` completions. A *call* is one
request, whatever its ``n``; :class:`Usage` counts calls, samples and tokens,
and methods keep one ``Usage`` per episode by passing ``episode`` ids.

Backends implement :class:`LLMBackend` (a Protocol): ``name``, ``model`` and
``generate``. Methods never know which backend they have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, runtime_checkable

from engine.errors import InputError
from engine.llm.structured import Constraint

Message = dict  # {"role": "system"|"user"|"assistant"|"tool", "content": str, ...}


@dataclass(frozen=True)
class Request:
    """One prompt (or chat) with its sampling parameters.

    Exactly one of ``prompt`` and ``messages`` is set. ``episode`` tags the
    request for per-episode accounting and is not sent to the model.
    """

    prompt: str | None = None
    messages: tuple[Message, ...] | None = None
    n: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    episode: str | None = None
    constraint: Constraint | None = None  # the answer's shape, enforced by the backend (engine.llm.structured)

    def __post_init__(self):
        if (self.prompt is None) == (self.messages is None):
            raise InputError("Request needs exactly one of prompt= and messages=")
        if self.messages is not None and not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        if isinstance(self.stop, (list, str)):
            object.__setattr__(self, "stop", (self.stop,) if isinstance(self.stop, str) else tuple(self.stop))
        if self.n < 1:
            raise InputError(f"Request.n must be >= 1, got {self.n}")
        if not 0.0 <= self.temperature <= 5.0:
            raise InputError(f"Request.temperature must be in [0, 5], got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise InputError(f"Request.top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise InputError(f"Request.max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class Completion:
    """One sampled continuation, returned as the model wrote it (possibly empty or malformed)."""

    text: str
    completion_tokens: int
    finish_reason: str = "stop"  # "stop" | "length" | "error"


@dataclass(frozen=True)
class Response:
    """The ``n`` completions of one request, with token counts and wall latency."""

    completions: tuple[Completion, ...]
    prompt_tokens: int
    latency_s: float
    backend: str
    model: str
    # why the request failed after its retries (llm.openai.on_error = "record": its completions are empty,
    # finish_reason "error"); "" for an answered request
    error: str = ""
    # prompt tokens the server answered from its prefix cache (OpenAI / vLLM usage.prompt_tokens_details,
    # llama.cpp timings.cache_n); None where the backend does not report it
    cached_tokens: int | None = None

    @property
    def texts(self) -> list[str]:
        return [c.text for c in self.completions]

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.completions)


@runtime_checkable
class LLMBackend(Protocol):
    """What every backend provides. ``generate`` returns one Response per Request, in order."""

    name: str  # "vllm" | "openai" | "local" | "replay" | "simulated" | ...
    model: str

    def generate(self, requests: Sequence[Request]) -> list[Response]: ...


@dataclass(slots=True)
class Usage:
    """Counts of calls (requests), samples (completions) and tokens."""

    calls: int = 0
    samples: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    errors: int = 0  # requests that failed after their retries (llm.openai.on_error = "record")
    error: str = ""  # the first one's reason
    cached_tokens: int = 0  # prompt tokens served from the server's prefix cache
    cache_prompt_tokens: int = 0  # prompt tokens of the requests whose server reported cached_tokens

    def count(self, calls: int, samples: int, prompt_tokens: int, completion_tokens: int, latency_s: float) -> None:
        """Add counts (the one place the count fields are summed: :meth:`add`, :meth:`merge`, UsageMeter)."""
        self.calls += calls
        self.samples += samples
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.latency_s += latency_s

    def add(self, response: Response) -> None:
        self.count(1, len(response.completions), response.prompt_tokens, response.completion_tokens,
                   response.latency_s)
        if response.error or response.cached_tokens is not None:
            self._note(response)

    def merge(self, other: "Usage") -> None:
        """Add ``other``'s counts (the first error reason kept)."""
        self.count(other.calls, other.samples, other.prompt_tokens, other.completion_tokens, other.latency_s)
        if other.errors:
            self._failed(other.errors, other.error)
        self.cached_tokens += other.cached_tokens
        self.cache_prompt_tokens += other.cache_prompt_tokens

    def _failed(self, n: int, reason: str) -> None:
        self.errors += n
        if not self.error:
            self.error = reason

    def _note(self, response: Response) -> None:
        """What a response says beyond the counts: its failure, its prefix-cache hits."""
        if response.error:
            self._failed(1, response.error)
        if response.cached_tokens is not None:
            self.cached_tokens += response.cached_tokens
            self.cache_prompt_tokens += response.prompt_tokens


def usage_fields(usage: "Usage | None") -> dict:
    """What a record says of its episode's requests beyond the counts every task records: ``llm_errors`` and
    ``llm_error`` (the first reason) when some failed after their retries (``llm.openai.on_error = "record"``), and
    ``cached_tokens`` / ``cache_prompt_tokens`` when the server reported prefix-cache hits. ``{}`` otherwise
    (a simulated run's records are unchanged)."""
    out: dict = {}
    if usage is None:
        return out
    if usage.errors:
        out.update(llm_errors=usage.errors, llm_error=usage.error)
    if usage.cache_prompt_tokens:
        out.update(cached_tokens=usage.cached_tokens, cache_prompt_tokens=usage.cache_prompt_tokens)
    return out


@dataclass
class UsageMeter:
    """Totals plus a per-episode breakdown keyed by ``Request.episode`` (``by_episode = False``: totals only,
    for a meter whose breakdown nobody reads, such as an executor's worker meter)."""

    total: Usage = field(default_factory=Usage)
    per_episode: dict[str, Usage] = field(default_factory=dict)
    by_episode: bool = True

    def record(self, requests: Sequence[Request], responses: Sequence[Response]) -> None:
        total, per, by_episode = self.total, self.per_episode, self.by_episode
        for req, resp in zip(requests, responses):
            comps = resp.completions  # each field read once: the same sums as Usage.add, per response
            n, pt, lat = len(comps), resp.prompt_tokens, resp.latency_s
            ct = comps[0].completion_tokens if n == 1 else sum(c.completion_tokens for c in comps)
            total.count(1, n, pt, ct, lat)
            extra = resp.error or resp.cached_tokens is not None
            if extra:
                total._note(resp)
            if by_episode and req.episode is not None:
                u = per.get(req.episode)
                if u is None:
                    u = per[req.episode] = Usage()
                u.count(1, n, pt, ct, lat)
                if extra:
                    u._note(resp)


def through(backend, attr: str):
    """``backend.attr``, looked up through wrappers (MeteredBackend, ConstraintSwitch: ``.backend``)."""
    seen = 0
    while backend is not None and seen < 8:
        value = getattr(backend, attr, None)
        if value is not None:
            return value
        inner = getattr(backend, "backend", None)
        backend = inner if inner is not None and hasattr(inner, "generate") else None
        seen += 1
    return None


def answered_by(backend) -> tuple[str, str]:
    """``(backend, model)`` that produced a backend's text, for every label of a result.

    A replay backend answers with what the backend that recorded its trace wrote, so it
    reports that backend (``simulated`` for a trace of the simulated policy); a
    :class:`MeteredBackend` reports the backend it wraps.
    """
    inner = getattr(backend, "backend", None)
    if inner is not None and hasattr(inner, "generate"):
        return answered_by(inner)
    name = getattr(backend, "backend_name", None) or backend.name
    return str(name), str(getattr(backend, "model", "") or "")


def answers_any_prompt(backend) -> bool:
    """Whether ``backend`` answers any prompt (a model) or only its task's own (a simulated policy).

    A capability, read through wrappers (:class:`MeteredBackend`,
    ``ConstraintSwitch``): a backend without the attribute is a model (True).
    Memories with ``extraction = "auto"`` send their own prompts only to a
    backend that answers them, else extract by rule (engine.baselines.common).
    """
    own = getattr(backend, "answers_any_prompt", None)
    if isinstance(own, bool):
        return own
    inner = getattr(backend, "backend", None)
    if inner is not None and hasattr(inner, "generate"):
        return answers_any_prompt(inner)
    return True


class MeteredBackend:
    """Wraps any backend and counts its usage; behaves as the backend it wraps."""

    def __init__(self, backend: LLMBackend, by_episode: bool = True):
        self.backend = backend
        self.name = backend.name
        self.model = backend.model
        self.answered_by = answered_by(backend)  # (backend, model) for labels; a replay's recorded backend
        self.meter = UsageMeter(by_episode=by_episode)  # by_episode=False: totals only (see UsageMeter)

    def generate(self, requests: Sequence[Request]) -> list[Response]:
        requests = list(requests)
        if not requests:
            return []
        responses = self.backend.generate(requests)
        if len(responses) != len(requests):
            raise AssertionError(
                f"backend {self.name} returned {len(responses)} responses for {len(requests)} requests"
            )
        self.meter.record(requests, responses)
        return responses
