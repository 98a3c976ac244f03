"""The ``simulated`` backend: one :class:`~engine.llm.base.LLMBackend` whose answers come from a task's policy.

A **simulated policy** is a seeded, text-in text-out stand-in for a language
model that one task supplies (a test harness, never a model): it reads that
task's own prompts and answers in that task's formats. The engine knows no
task: :func:`engine.llm.factory.make_backend` builds
``SimulatedBackend(policy)`` from whatever policy the task hands it (an object,
or a ``"module:attr"`` string naming a callable ``attr(llm_cfg) -> policy``,
which pickles for Ray workers). The tasks' policies:

=========  ====================================================
game24     ``engine.game24.simulated_policy:policy_for``
finance    ``engine.finance.simulated:policy_for``
forecast   ``engine.forecast.simulated:policy_for`` (Prophet Arena and FutureX)
=========  ====================================================

The backend owns what every policy shares: the seed of a request (its own,
else the backend's), ``n`` samples per request, stop strings and ``max_tokens``,
token counts, latency, and the label: every :class:`Response` says
``backend="simulated"`` and the policy's model name, so every figure built on it
is labelled *simulated*. A policy subclasses :class:`SimulatedPolicy` and
overrides :meth:`~SimulatedPolicy.respond`; the other methods are the shared
behaviour, which a policy overrides only where its task's harness counts or
seeds differently (each override says why).

Capability: ``answers_any_prompt`` is False for every policy (it answers its
task's prompts only), so memories that would send their own extraction prompts
extract by rule instead (``extraction = "auto"``, :mod:`engine.baselines.common`);
methods never read the backend's name.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Sequence

from engine.config import load_named
from engine.errors import ConfigError
from engine.llm.base import Completion, Request, Response
from engine.llm.tokens import TOKEN_PATTERN, count_prompt_tokens, count_tokens

__all__ = ["SimulatedBackend", "SimulatedPolicy", "apply_limits", "load_policy", "prompt_text"]


def prompt_text(request: Request) -> str:
    """The text a request stands for: its prompt, or the content of its last user message (chat)."""
    if request.prompt is not None:
        return request.prompt
    messages = request.messages or ()
    for m in reversed(messages):
        if m.get("role") == "user":
            return str(m.get("content", ""))
    return str(messages[-1].get("content", "")) if messages else ""


def apply_limits(text: str, stop: Sequence[str], max_tokens: int) -> tuple[str, str, int]:
    """Cut ``text`` at the first stop string, then after ``max_tokens`` approximate tokens (finish ``'length'``).

    Returns ``(text, finish_reason, completion token count)``; tokens are
    :func:`engine.llm.tokens.count_tokens` units (words and punctuation marks).
    """
    n_tokens = count_tokens(text)
    for s in stop:
        if s and s in text:
            text = text[: text.index(s)]
            n_tokens = count_tokens(text)
    if n_tokens <= max_tokens:
        return text, "stop", n_tokens
    ends = [m.end() for m in itertools.islice(TOKEN_PATTERN.finditer(text), max_tokens)]
    return text[: ends[-1]], "length", max_tokens


class SimulatedPolicy:
    """Base of every task's simulated policy. Subclasses set ``model`` and implement :meth:`respond`.

    ``respond`` must be a deterministic function of its arguments (and, for a
    policy with state, of the calls before it), never of how requests are
    batched, so a run gives the same text on any executor.
    """

    model: str = "simulated"
    answers_any_prompt: bool = False  # a policy reads its task's prompts only (see the module docstring)
    batch_latency_s: float = 0.0  # seconds slept once per batched call (standing in for decoding)

    def respond(self, request: Request, seed: int, index: int) -> str:
        """The text of sample ``index`` of ``request`` under ``seed`` (before stop strings and max_tokens)."""
        raise NotImplementedError(f"{type(self).__name__} must implement respond(request, seed, index)")

    def seed_of(self, request: Request, default: int) -> int:
        """The seed a request is answered under: its own, else the backend's."""
        return default if request.seed is None else int(request.seed)

    def limit(self, text: str, request: Request) -> tuple[str, str, int]:
        """``(text, finish_reason, completion_tokens)`` after the request's stop strings and ``max_tokens``."""
        return apply_limits(text, request.stop, request.max_tokens)

    def prompt_tokens(self, request: Request) -> int:
        return count_prompt_tokens(prompt_text(request))


class SimulatedBackend:
    """``backend = "simulated"``: :class:`~engine.llm.base.LLMBackend` over one task's :class:`SimulatedPolicy`.

    ``seed`` answers requests without a seed of their own; ``model`` (default:
    the policy's) is the label every Response carries next to ``"simulated"``.
    """

    name = "simulated"

    def __init__(self, policy: SimulatedPolicy, seed: int = 0, model: str | None = None):
        if not callable(getattr(policy, "respond", None)):
            raise ConfigError(f"SimulatedBackend needs a policy with respond(request, seed, index), "
                              f"got {type(policy).__name__}")
        self.policy = policy
        self.seed = int(seed)
        self.model = model or policy.model
        self.answers_any_prompt = bool(getattr(policy, "answers_any_prompt", False))

    def generate(self, requests: Sequence[Request]) -> list[Response]:
        pause = float(getattr(self.policy, "batch_latency_s", 0.0) or 0.0)
        if pause and requests:
            time.sleep(pause)  # one batched call: one latency
        out = []
        for req in requests:
            t0 = time.perf_counter()
            seed = self.policy.seed_of(req, self.seed)
            comps = []
            for i in range(req.n):
                text, finish, ntok = self.policy.limit(self.policy.respond(req, seed, i), req)
                comps.append(Completion(text=text, completion_tokens=ntok, finish_reason=finish))
            out.append(Response(completions=tuple(comps), prompt_tokens=self.policy.prompt_tokens(req),
                                latency_s=time.perf_counter() - t0 + (pause if not out else 0.0),
                                backend=self.name, model=self.model))
        return out


def load_policy(policy: Any, llm_cfg: Any) -> SimulatedPolicy:
    """The policy object for ``policy``: an object with ``respond``, or ``"module:attr"`` naming ``attr(llm_cfg)``."""
    if isinstance(policy, str):
        factory = resolve_policy(policy)
        policy = factory(llm_cfg)
    if not callable(getattr(policy, "respond", None)):
        raise ConfigError(f"a simulated policy must have respond(request, seed, index), got {type(policy).__name__}")
    return policy


def resolve_policy(spec: str) -> Callable[[Any], SimulatedPolicy]:
    """The callable a ``"module:attr"`` policy string names (imports the module; builds nothing)."""
    factory = load_named(spec, "a simulated policy")
    if not callable(factory):
        raise ConfigError(f"simulated policy {spec!r} names a {type(factory).__name__}, not a callable")
    return factory
